"""Reads tensors the way a GPU loader would: straight from the source .safetensors file, at the
byte offset tensormount publishes, so the bytes never pass through the FUSE daemon.

    python gpu_loader.py [--cpu] MNT/model.tensors model.norm.weight ...

Per tensor it reads the xattrs `user.safetensors.source` (absolute path of the source file),
`user.safetensors.offset` (absolute offset of the first byte) and `user.safetensors.data_offsets`
(for the length). Tensor offsets are not 4 KiB-aligned, but O_DIRECT and cuFile (GPUDirect
Storage) want aligned file offsets and lengths, so both paths read the enclosing aligned window
and slice the tensor out of it.

With kvikio and cupy importable (and no --cpu) the window goes to GPU memory through cuFile;
this path is documented, not tested. Otherwise an O_DIRECT pread into an aligned buffer (plain
pread where the file system refuses O_DIRECT) reads it into host memory; that path runs anywhere.
Prints the same line as loader.py.
"""

import json
import mmap
import os
import sys

import numpy as np

from loader import describe

try:
    import cupy
    import kvikio
except ImportError:
    kvikio = None

ALIGN = 4096  # O_DIRECT and cuFile alignment (a page; some devices accept 512)


def window(offset, size):
    """The aligned window [start, start + length) around [offset, offset + size), and where the
    tensor starts inside it."""
    start = offset // ALIGN * ALIGN
    end = -(-(offset + size) // ALIGN) * ALIGN
    return start, end - start, offset - start


def read_cpu(source, offset, size):
    start, length, skip = window(offset, size)
    buf = mmap.mmap(-1, length)  # anonymous mappings are page-aligned, as O_DIRECT requires
    try:
        fd = os.open(source, os.O_RDONLY | os.O_DIRECT)
    except OSError:  # e.g. tmpfs: no O_DIRECT, a buffered pread of the same window
        fd = os.open(source, os.O_RDONLY)
    try:
        n = os.preadv(fd, [buf], start)  # may stop short at the end of the file
    finally:
        os.close(fd)
    assert n >= skip + size, "short read"
    return bytes(buf[skip:skip + size])


def read_gpu(source, offset, size):
    start, length, skip = window(offset, size)
    dev = cupy.empty(length, dtype=cupy.uint8)
    with kvikio.CuFile(source, "r") as f:
        n = f.read(dev, length, start)  # cuFile: file -> GPU memory, bypassing the page cache
    assert n >= skip + size, "short read"
    tensor = dev[skip:skip + size]  # a view: the tensor now lives on the GPU
    return cupy.asnumpy(tensor).tobytes()  # back to the host only to print the checksum


def main():
    args = sys.argv[1:]
    cpu = "--cpu" in args
    args = [a for a in args if a != "--cpu"]
    if len(args) < 2:
        sys.exit("usage: python gpu_loader.py [--cpu] TENSOR_DIR NAME...")
    read = read_cpu if cpu or kvikio is None else read_gpu
    for name in args[1:]:
        path = os.path.join(args[0], name)
        attr = lambda key: os.getxattr(path, "user.safetensors." + key).decode()  # noqa: E731
        begin, end = json.loads(attr("data_offsets"))
        raw = read(attr("source"), int(attr("offset")), end - begin)
        # The source holds the tensor as stored: under -o dtype=f32, its stored dtype is
        # source_dtype. numpy has no bfloat16: its first values are widened by hand for printing
        # (bfloat16 is the top half of a float32).
        try:
            dtype = attr("source_dtype")
        except OSError:
            dtype = attr("dtype")
        values = None
        if dtype == "BF16":
            values = (np.frombuffer(raw, "<u2")[:4].astype(np.uint32) << 16).view(np.float32)
        print(describe(name, dtype, attr("shape"), raw, values))


if __name__ == "__main__":
    main()
