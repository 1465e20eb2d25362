#!/usr/bin/env python3
"""Item 14 of the mount benchmark (benches/mount/cases/onnx.rs): ONNX models and their loaders.

  onnx_models.py write-external DIR BYTES
      DIR/model.onnx with its float16 initializers (BYTES in all, random) in DIR/model.onnx_data,
      as onnx.save_model(save_as_external_data=True) writes them; prints "TENSORS BYTES".
  onnx_models.py write-single FILE BYTES
      FILE, one model of float32 initializers (BYTES in all) in raw_data, written field by field
      with the data a hole (sparse: only its protobuf framing is on disk); prints "TENSORS BYTES".
  onnx_models.py MODE PATH PASSES
      times PASSES passes of MODE on PATH, one line "SECONDS BYTES TENSORS" each (as
      benches/load_all.py prints):
      - parse: onnx.load(PATH, load_external_data=False) and every initializer's name, type and
        shape (BYTES: what their shapes and types say);
      - to_array: onnx.load(PATH) (external data loaded) and numpy_helper.to_array of every
        initializer;
      - load_file: safetensors.torch.load_file(PATH) (a virtual model.safetensors).
"""

import os
import sys
import time

import numpy as np

ROWS, COLS = 1024, 2048  # a float16 matrix of 4 MiB


# The protobuf encoders of the tests' oracle.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "python"))
from onnx_oracle import field as delimited, varint  # noqa: E402


def field(number, payload_len):
    """The key and length of a length-delimited field of `payload_len` bytes (its payload then
    written apart)."""
    return delimited(number, b"")[:-1] + varint(payload_len)


def write_external(d, total):
    import onnx
    from onnx import helper, numpy_helper
    os.makedirs(d, exist_ok=True)
    rng = np.random.default_rng(14)
    n = max(1, total // (ROWS * COLS * 2))
    inits = [numpy_helper.from_array(rng.standard_normal((ROWS, COLS), dtype=np.float32)
                                     .astype(np.float16), f"layers.{i}.weight") for i in range(n)]
    model = helper.make_model(helper.make_graph([], "bench", [], [], initializer=inits))
    onnx.save_model(model, os.path.join(d, "model.onnx"), save_as_external_data=True,
                    all_tensors_to_one_file=True, location="model.onnx_data", size_threshold=0)
    print(n, n * ROWS * COLS * 2)


def write_single(path, total):
    """A ModelProto { ir_version, graph { initializer... }, opset_import } written by hand, each
    initializer's raw_data a hole, so that a 2 GiB model takes a few kilobytes of disk."""
    each = 64 << 20
    n = max(1, total // each)
    dims = [each // 4 // 4096, 4096]
    tensors = []
    for i in range(n):
        name = f"block.{i}.weight".encode()
        head = b"".join(varint(1 << 3) + varint(d) for d in dims)
        head += varint(2 << 3) + varint(1)  # FLOAT
        head += field(8, len(name)) + name
        head += field(9, each)
        tensors.append(head)
    graph_len = sum(len(field(5, len(h) + each)) + len(h) + each for h in tensors)
    with open(path, "wb") as f:
        f.write(varint(1 << 3) + varint(9))
        f.write(field(7, graph_len))
        for h in tensors:
            f.write(field(5, len(h) + each) + h)
            f.seek(each, os.SEEK_CUR)
        f.write(field(8, 2) + varint(2 << 3) + varint(17))
    print(n, n * each)


def passes(mode, path, count):
    # Every import before the first pass, which is timed as the others are (and only the
    # imports its mode needs, for a command timed whole).
    import onnx
    from onnx import numpy_helper
    if mode == "load_file":
        from safetensors.torch import load_file
    for _ in range(count):
        start = time.perf_counter()
        total, tensors = 0, 0
        if mode == "parse":
            m = onnx.load(path, load_external_data=False)
            for t in m.graph.initializer:
                numel = int(np.prod(t.dims))
                total += numel * onnx.helper.tensor_dtype_to_np_dtype(t.data_type).itemsize
                tensors += 1
        elif mode == "to_array":
            m = onnx.load(path)
            for t in m.graph.initializer:
                total += numpy_helper.to_array(t).nbytes
                tensors += 1
        elif mode == "load_file":
            for t in load_file(path).values():
                total += t.numel() * t.element_size()
                tensors += 1
        else:
            sys.exit(f"unknown mode {mode}")
        print(f"{time.perf_counter() - start:.6f} {total} {tensors}", flush=True)


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "write-external":
        write_external(sys.argv[2], int(sys.argv[3]))
    elif cmd == "write-single":
        write_single(sys.argv[2], int(sys.argv[3]))
    else:
        passes(cmd, sys.argv[2], int(sys.argv[3]))
