// Loads tensors from a tensormount mount the Java way: a FileChannel for the bytes and
// UserDefinedFileAttributeView for dtype and shape (it reads the `user.*` xattrs, without the
// "user." prefix). No safetensors library, no JSON parser. Needs JDK 11+ (single-file launch):
//
//   java Loader.java MNT/model.tensors model.norm.weight ...
//
// Prints per tensor: NAME DTYPE SHAPE fnv1a64=<hash of the raw bytes> first=<first values, exact>.
import java.io.IOException;
import java.math.BigDecimal;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardOpenOption;
import java.nio.file.attribute.UserDefinedFileAttributeView;
import java.util.ArrayList;
import java.util.List;

public class Loader {
    static String xattr(Path path, String name) throws IOException {
        UserDefinedFileAttributeView view =
                Files.getFileAttributeView(path, UserDefinedFileAttributeView.class);
        ByteBuffer buf = ByteBuffer.allocate(view.size(name));
        view.read(name, buf);
        return new String(buf.array(), 0, buf.position(), StandardCharsets.UTF_8);
    }

    static ByteBuffer readAll(Path path) throws IOException {
        try (FileChannel ch = FileChannel.open(path, StandardOpenOption.READ)) {
            ByteBuffer buf = ByteBuffer.allocate(Math.toIntExact(ch.size()));
            while (buf.hasRemaining() && ch.read(buf) >= 0) {}
            return buf.flip().order(ByteOrder.LITTLE_ENDIAN); // safetensors data is little-endian
        }
    }

    static String fnv1a64(ByteBuffer b) {
        long h = 0xcbf29ce484222325L;
        for (int i = 0; i < b.limit(); i++) h = (h ^ (b.get(i) & 0xff)) * 0x100000001b3L;
        return String.format("%016x", h);
    }

    // Every float has a finite decimal expansion; BigDecimal(double) holds it exactly.
    static String exact(double x) {
        return new BigDecimal(x + 0.0).stripTrailingZeros().toPlainString();
    }

    static double half(int h) {
        int e = (h >> 10) & 31, m = h & 1023;
        double v = e == 0 ? Math.scalb((double) m, -24)
                : e == 31 ? (m != 0 ? Double.NaN : Double.POSITIVE_INFINITY)
                : Math.scalb((double) (m + 1024), e - 25);
        return (h & 0x8000) != 0 ? -v : v;
    }

    static int width(String dtype) {
        switch (dtype) {
            case "F64": case "I64": return 8;
            case "F32": case "I32": return 4;
            case "F16": case "BF16": return 2;
            case "U8": case "BOOL": return 1;
            default: throw new IllegalArgumentException("unsupported dtype " + dtype);
        }
    }

    static String value(String dtype, ByteBuffer b, int i) {
        switch (dtype) {
            case "F64": return exact(b.getDouble(i * 8));
            case "F32": return exact(b.getFloat(i * 4));
            case "F16": return exact(half(b.getShort(i * 2) & 0xffff));
            case "BF16": return exact(Float.intBitsToFloat((b.getShort(i * 2) & 0xffff) << 16));
            case "I64": return Long.toString(b.getLong(i * 8));
            case "I32": return Integer.toString(b.getInt(i * 4));
            default: return Integer.toString(b.get(i) & 0xff); // U8, BOOL
        }
    }

    public static void main(String[] args) throws IOException {
        if (args.length < 2) {
            System.err.println("usage: java Loader.java TENSOR_DIR NAME...");
            System.exit(2);
        }
        for (int a = 1; a < args.length; a++) {
            Path path = Paths.get(args[0], args[a]);
            String dtype = xattr(path, "safetensors.dtype");
            String shape = xattr(path, "safetensors.shape");
            ByteBuffer bytes = readAll(path);
            List<String> first = new ArrayList<>();
            for (int i = 0; i < Math.min(4, bytes.limit() / width(dtype)); i++) first.add(value(dtype, bytes, i));
            System.out.println(args[a] + " " + dtype + " " + shape + " fnv1a64=" + fnv1a64(bytes)
                    + " first=" + String.join(",", first));
        }
    }
}
