#!/usr/bin/env python3
"""Loads every tensor of a model, for the mount benchmark (benches/mount/, items 5 and 7).

    load_all.py st FILE PASSES
        safetensors.safe_open(FILE, framework="numpy").get_tensor(name) for every name
    load_all.py fromfile DIR PASSES
        numpy.fromfile on every tensor file of DIR (a mounted NAME.tensors/ directory), with the
        dtype and shape read from the file's user.safetensors.* xattrs, as a loader without the
        safetensors library would do
    load_all.py npy DIR PASSES
        numpy.load on the NAME.npy view of every tensor of DIR (mounted with -o npy); tensors whose
        dtype numpy lacks (no view) as with fromfile

Each pass opens, lists and loads everything again, then drops each array right after loading it
(so the process never holds the whole model). Prints one line per pass, "SECONDS BYTES TENSORS",
timed with perf_counter around the pass only (interpreter start and imports are not counted).
"""

import json
import os
import sys
import time

import numpy as np

try:  # registers bfloat16 and the F8 types with numpy, so safetensors can load them (item 10)
    import ml_dtypes  # noqa: F401
except ImportError:
    pass

# safetensors dtype -> numpy dtype; types numpy lacks are loaded as raw bytes of the same size.
DTYPES = {
    "F64": "<f8", "F32": "<f4", "F16": "<f2", "BF16": "<u2",
    "I64": "<i8", "I32": "<i4", "I16": "<i2", "I8": "i1",
    "U64": "<u8", "U32": "<u4", "U16": "<u2", "U8": "u1", "BOOL": "?",
    "F8_E4M3": "u1", "F8_E5M2": "u1",
}


def load_st(path):
    from safetensors import safe_open

    total = count = 0
    with safe_open(path, framework="numpy") as f:
        for name in f.keys():
            a = f.get_tensor(name)
            total += a.nbytes
            count += 1
            del a
    return total, count


def load_raw(path):
    """numpy.fromfile on a raw tensor file, with the dtype and shape from its xattrs."""
    dtype = os.getxattr(path, "user.safetensors.dtype").decode()
    shape = json.loads(os.getxattr(path, "user.safetensors.shape"))
    return np.fromfile(path, dtype=DTYPES[dtype]).reshape(shape)


def load_dir(directory, npy):
    total = count = 0
    entries = set(os.listdir(directory))
    for entry in sorted(entries):
        if entry == "__metadata__" or (npy and entry.endswith(".npy")):
            continue
        path = os.path.join(directory, entry)
        a = np.load(path + ".npy") if npy and entry + ".npy" in entries else load_raw(path)
        total += a.nbytes
        count += 1
        del a
    return total, count


def main():
    mode, path, passes = sys.argv[1], sys.argv[2], int(sys.argv[3])
    load = {
        "st": load_st,
        "fromfile": lambda d: load_dir(d, npy=False),
        "npy": lambda d: load_dir(d, npy=True),
    }[mode]
    for _ in range(passes):
        t = time.perf_counter()
        total, count = load(path)
        print(f"{time.perf_counter() - t:.6f} {total} {count}", flush=True)


if __name__ == "__main__":
    main()
