#!/usr/bin/env python3
"""Loads every tensor of a model, for the mount benchmark (benches/mount/, items 5, 7, 10, 11).

    load_all.py st FILE PASSES
        safetensors.safe_open(FILE, framework="numpy").get_tensor(name) for every name
    load_all.py fromfile DIR PASSES
        numpy.fromfile on every tensor file of DIR (a mounted NAME.tensors/ directory), with the
        dtype and shape read from the file's user.safetensors.* xattrs, as a loader without the
        safetensors library would do
    load_all.py npy DIR PASSES
        numpy.load on the NAME.npy view of every tensor of DIR (mounted with -o npy); tensors whose
        dtype numpy lacks (no view) as with fromfile
    load_all.py pt FILE PASSES
        torch.load(FILE, weights_only=True, map_location="cpu") of a PyTorch checkpoint
    load_all.py st-torch FILE PASSES
        safetensors.torch.load_file(FILE)
    Both then read one byte of every 4 KiB page of every tensor: load_file maps the file (lazily,
    copy-on-write), so only then is it read, as torch.load reads all of it.

Each pass opens, lists and loads everything again, then drops each array right after loading it
(so the process never holds the whole model; pt and st-torch hold the state dict they return until
the pass ends). Prints one line per pass, "SECONDS BYTES TENSORS", timed with perf_counter around
the pass only (interpreter start and imports are not counted).
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


def load_pt(path):
    import torch

    return state_dict_size(torch.load(path, weights_only=True, map_location="cpu"))


def load_st_torch(path):
    from safetensors.torch import load_file

    return state_dict_size(load_file(path))


def state_dict_size(state_dict):
    """Bytes and tensors of a state dict, after reading one byte of every 4 KiB of each tensor."""
    import torch

    total = 0
    for t in state_dict.values():
        t.reshape(-1).view(torch.uint8)[::4096].sum()
        total += t.numel() * t.element_size()
    return total, len(state_dict)


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
        "pt": load_pt,
        "st-torch": load_st_torch,
    }[mode]
    if load in (load_pt, load_st_torch):
        import safetensors.torch  # noqa: F401  (and torch: imported before the timed passes)
    for _ in range(passes):
        t = time.perf_counter()
        total, count = load(path)
        print(f"{time.perf_counter() - t:.6f} {total} {count}", flush=True)


if __name__ == "__main__":
    main()
