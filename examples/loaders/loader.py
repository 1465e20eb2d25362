"""Loads tensors from a tensormount mount with numpy alone: dtype and shape from the xattrs,
the data with numpy.fromfile and, without copying, numpy.memmap. No safetensors library, and no
code for the float formats numpy lacks (BF16, F8): mount with `-o dtype=f32` and tensormount
presents them as float32.

    tensormount -o dtype=f32 MODEL MNT
    python loader.py MNT/model.tensors model.norm.weight ...

Prints per tensor: NAME DTYPE SHAPE fnv1a64=<hash of the raw bytes> first=<first values, exact>.
"""

import json
import os
import sys
from decimal import Decimal

import numpy as np

# safetensors dtype -> numpy dtype (little-endian).
DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2",
          "I64": "<i8", "I32": "<i4", "U8": "u1", "BOOL": "?"}


def fnv1a64(data):
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def exact(v):
    """A float's exact decimal expansion (Decimal(float) is exact); integers as they are."""
    if isinstance(v, (float, np.floating)):
        return format(Decimal(float(v) + 0.0), "f")  # + 0.0 turns -0 into 0
    return str(int(v))


def describe(name, dtype, shape, raw, values=None):
    """The common output line, from the tensor's raw bytes and its first values (by default read
    from the bytes as `dtype`; also used by gpu_loader.py)."""
    if values is None:
        values = np.frombuffer(raw, DTYPES[dtype], count=min(4, len(raw) // np.dtype(DTYPES[dtype]).itemsize))
    first = ",".join(exact(v) for v in values[:4])
    return f"{name} {dtype} {shape} fnv1a64={fnv1a64(raw)} first={first}"


def main():
    if len(sys.argv) < 3:
        sys.exit("usage: python loader.py TENSOR_DIR NAME...")
    for name in sys.argv[2:]:
        path = os.path.join(sys.argv[1], name)
        dtype = os.getxattr(path, "user.safetensors.dtype").decode()
        shape_text = os.getxattr(path, "user.safetensors.shape").decode()
        shape = tuple(json.loads(shape_text))
        array = np.fromfile(path, dtype=DTYPES[dtype]).reshape(shape)
        if array.nbytes:  # mmap cannot map an empty file
            mapped = np.memmap(path, dtype=DTYPES[dtype], mode="r", shape=shape)
            assert mapped.tobytes() == array.tobytes(), f"{name}: memmap and fromfile differ"
        print(describe(name, dtype, shape_text, array.tobytes()))


if __name__ == "__main__":
    main()
