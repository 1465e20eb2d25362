#!/usr/bin/env python3
"""Independent oracle for the tensormount integration tests.

Run with the venv python ($TENSORMOUNT_PYTHON), which has the official
`safetensors` package and numpy.

  oracle.py write-fixtures DIR          write test .safetensors files into DIR
  oracle.py compare SRC TENSOR_DIR      check a mounted tree against SRC
            [--npy]                     ... and its NPY views (mounted with -o npy)
  oracle.py load-all SRC                JSON {name: [dtype, shape, sha256]}
  oracle.py save PATH SEED NAME...      write PATH with the official writer: one float32
                                        tensor of 1024 values per NAME, from SEED
  oracle.py hf-cache CACHE REPO_ID...   JSON of what huggingface_hub finds in the cache
                                        CACHE (scan_cache_dir; files under a
                                        `*.tensors/` directory left out) and, for
                                        each REPO_ID, what snapshot_download
                                        resolves offline, with each file's sha256
  oracle.py widen DTYPE TARGET IN OUT   ml_dtypes/numpy's widening of the stored
                                        elements in file IN (safetensors DTYPE) to
                                        TARGET (F32 or F64), written to OUT
  oracle.py loader-lines MODEL NAME...  for each tensor NAME of the sharded MODEL (by its
            [--widen]                   index), the line the example loaders print and the
                                        shell loader's, tab-separated; with --widen, as
                                        -o dtype=f32 presents the tensors

SRC is a .safetensors file or a directory; for a directory every *.safetensors
file directly inside it is used (tensor names must be unique across them).
"""
import argparse
import hashlib
import json
import os
import struct
import sys

import numpy as np
from safetensors import safe_open
from safetensors.numpy import save_file

# safetensors dtype -> numpy dtype (little-endian). Dtypes numpy cannot
# represent (BF16, F8_*, F6_*, F4) are read as raw bytes via RAW_VIEW instead.
NUMPY = {
    "BOOL": "?", "U8": "u1", "I8": "i1", "I16": "<i2", "U16": "<u2", "F16": "<f2",
    "I32": "<i4", "U32": "<u4", "F32": "<f4", "C64": "<c8", "F64": "<f8",
    "I64": "<i8", "U64": "<u8",
}
# Same-width integer views for the others; None = sub-byte packing, compare
# as a flat byte array because the shape does not apply to bytes.
RAW_VIEW = {"BF16": "<u2", "F6_E2M3": None, "F6_E3M2": None, "F4": None}

LONG_NAME = "long." + "n" * 295  # 300 characters, longer than NAME_MAX (255)


# ---------------------------------------------------------------- fixtures

def write_fixtures(out):
    rng = np.random.default_rng(0)
    os.makedirs(os.path.join(out, "sharded"), exist_ok=True)

    single = {
        "a/b": np.arange(12, dtype=np.float32).reshape(3, 4) / 7,
        "weird%name": np.array([-(2**62), -1, 0, 1, 2**62], dtype=np.int64),
        "x.y.z": np.linspace(-2, 2, 8, dtype=np.float16).reshape(2, 2, 2),
        ".": np.zeros((0,), dtype=np.uint8),
        "..": np.array([True, False, True]),
        "scalar": np.array(3.141592653589793, dtype=np.float64),
        "complex": np.array([1 + 2j, -3.5 - 0.25j], dtype=np.complex64),
    }
    save_file(single, os.path.join(out, "single.safetensors"),
              metadata={"format": "np", "author": "oracle"})

    big = {
        "big": rng.standard_normal((1024, 1024), dtype=np.float32),  # 4 MiB
        "small.i8": np.arange(-3, 4, dtype=np.int8),
        "small.u16": np.array([0, 1, 65535], dtype=np.uint16),
        "small.i32": np.array([[7, -7], [2**31 - 1, -(2**31)]], dtype=np.int32),
    }
    save_file(big, os.path.join(out, "big.safetensors"), metadata={"format": "np"})

    shards = [
        {
            "model.embed.weight": rng.standard_normal((16, 8), dtype=np.float32),
            LONG_NAME: np.arange(6, dtype=np.float16).reshape(2, 3),
            "a/b": np.array([1, 2, 3], dtype=np.int32),
        },
        {
            "model.layers.0.w": rng.integers(0, 255, size=(4, 4), dtype=np.uint8),
            "weird%name": np.array([0.5, -0.5], dtype=np.float64),
            "..": np.array(7, dtype=np.int64),
        },
    ]
    names = [f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors" for i in range(len(shards))]
    weight_map, total = {}, 0
    for name, tensors in zip(names, shards):
        save_file(tensors, os.path.join(out, "sharded", name), metadata={"format": "pt"})
        for key, value in tensors.items():
            weight_map[key] = name
            total += value.nbytes
    with open(os.path.join(out, "sharded", "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map},
                  f, indent=2, sort_keys=True)
        f.write("\n")
    print(f"wrote fixtures to {out}")


# ---------------------------------------------------------------- reading

def read_header(path):
    """Return (data_start, {name: info}) straight from the file's header."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    header.pop("__metadata__", None)
    return 8 + n, header


def source_files(src):
    if os.path.isdir(src):
        return sorted(os.path.join(src, f) for f in os.listdir(src) if f.endswith(".safetensors"))
    return [src]


def load(src):
    """Yield (name, dtype, shape, array) for every tensor of SRC.

    The array has the numpy dtype, or the raw view (see RAW_VIEW) for dtypes
    numpy lacks: those come from the raw bytes at the header's offsets.
    """
    names = set()
    for path in source_files(src):
        start, header = read_header(path)
        with safe_open(path, framework="numpy") as f:
            for name in f.keys():
                if name in names:
                    raise SystemExit(f"tensor {name!r} appears twice in {src}")
                names.add(name)
                sl = f.get_slice(name)
                dtype, shape = sl.get_dtype(), sl.get_shape()
                if dtype in NUMPY:
                    yield name, dtype, shape, f.get_tensor(name)
                    continue
                begin, end = header[name]["data_offsets"]
                with open(path, "rb") as raw:
                    raw.seek(start + begin)
                    data = raw.read(end - begin)
                yield name, dtype, shape, raw_array(data, dtype, shape)


def raw_array(data, dtype, shape):
    view = RAW_VIEW.get(dtype, "u1")  # F8_* are one byte per element
    if view is None:
        return np.frombuffer(data, dtype="u1")
    return np.frombuffer(data, dtype=view).reshape(shape)


def le_bytes(array):
    return np.ascontiguousarray(array).astype(array.dtype.newbyteorder("<"), copy=False).tobytes()


# ---------------------------------------------------------------- commands

def xattr(path, key):
    try:
        return os.getxattr(path, key, follow_symlinks=False).decode()
    except OSError:
        return None


def tensor_files(tensor_dir):
    """The files under a mounted tensor directory by tensor name (user.safetensors.name): the
    tensor files, the NPY views, and the names found twice."""
    by_name, npy_by_name, errors = {}, {}, []
    for root, _dirs, files in os.walk(tensor_dir):
        for f in files:
            path = os.path.join(root, f)
            name = xattr(path, "user.safetensors.name")
            if name is None:
                continue
            files_of = npy_by_name if xattr(path, "user.safetensors.npy_header_len") else by_name
            if name in files_of:
                errors.append(f"{name!r}: two files, {files_of[name]} and {path}")
            files_of[name] = path
    return by_name, npy_by_name, errors


def compare(src, tensor_dir, allow_extra=False, npy=False):
    by_name, npy_by_name, errors = tensor_files(tensor_dir)

    seen = set()
    for name, dtype, shape, expected in load(src):
        seen.add(name)
        path = by_name.get(name)
        if path is None:
            errors.append(f"{name!r}: no file with this user.safetensors.name")
            continue
        shape_json = json.dumps(shape, separators=(",", ":"))
        for key, want in (("dtype", dtype), ("shape", shape_json)):
            got = xattr(path, f"user.safetensors.{key}")
            if got != want:
                errors.append(f"{name!r}: xattr {key} is {got!r}, want {want!r}")

        if npy:
            errors += compare_npy(name, dtype, expected, npy_by_name.pop(name, None))

        np_dtype, np_shape = expected.dtype, expected.shape
        try:
            got = np.fromfile(path, dtype=np_dtype)
            if got.size != expected.size:
                errors.append(f"{name!r}: fromfile gave {got.size} elements, want {expected.size}")
                continue
            got = got.reshape(np_shape)
        except (OSError, ValueError) as e:
            errors.append(f"{name!r}: fromfile failed: {e}")
            continue
        if not np.array_equal(got, expected, equal_nan=expected.dtype.kind in "fc") \
                or le_bytes(got) != le_bytes(expected):
            errors.append(f"{name!r}: fromfile contents differ")

        if expected.nbytes:  # numpy refuses to memmap an empty file
            try:
                mm = np.memmap(path, mode="r", dtype=np_dtype, shape=np_shape)
                if le_bytes(mm) != le_bytes(expected):
                    errors.append(f"{name!r}: memmap contents differ")
                del mm
            except (OSError, ValueError) as e:
                errors.append(f"{name!r}: memmap failed: {e}")

    if not allow_extra:
        for name in sorted(set(by_name) - seen):
            errors.append(f"{name!r}: file {by_name[name]} is not a tensor of {src}")
    if npy and not allow_extra:
        for name, path in sorted(npy_by_name.items()):
            errors.append(f"{name!r}: NPY view {path} is not a tensor of {src}")

    for e in errors:
        print(f"MISMATCH {e}")
    if errors:
        return 1
    print(f"ok {len(seen)} tensors")
    return 0


def compare_npy(name, dtype, expected, path):
    """Check the NPY view of one tensor: there is one iff numpy has the dtype, and numpy.load (with
    and without mmap_mode) gives the tensor with its dtype and shape."""
    if dtype not in NUMPY:
        return [f"{name!r}: {dtype} has no numpy dtype, yet there is an NPY view {path}"] if path else []
    if path is None:
        return [f"{name!r}: no NPY view"]
    errors = []
    header_len = int(xattr(path, "user.safetensors.npy_header_len"))
    with open(path, "rb") as f:
        if np.lib.format.read_magic(f) != (1, 0):
            return [f"{name!r}: NPY view {path} is not NPY version 1.0"]
        shape, fortran, np_dtype = np.lib.format.read_array_header_1_0(f)
        if f.tell() != header_len:
            errors.append(f"{name!r}: NPY header is {f.tell()} bytes, xattr says {header_len}")
    if header_len % 64:
        errors.append(f"{name!r}: NPY data starts at {header_len}, not a multiple of 64")
    if fortran or shape != expected.shape or np_dtype != expected.dtype:
        errors.append(f"{name!r}: NPY header says {np_dtype} {shape} fortran={fortran}, "
                      f"want {expected.dtype} {expected.shape}")
    for mode in ("r", None):
        got = np.load(path, mmap_mode=mode, allow_pickle=False)
        if got.shape != expected.shape or got.dtype != expected.dtype \
                or le_bytes(got) != le_bytes(expected):
            errors.append(f"{name!r}: numpy.load(mmap_mode={mode!r}) differs")
        del got
    return errors


def save(path, seed, names):
    """The official writer, as a publisher uses it (it writes a temporary file and renames it)."""
    rng = np.random.default_rng(seed)
    save_file({n: rng.standard_normal(1024, dtype=np.float32) for n in names}, path,
              metadata={"format": "np", "seed": str(seed)})
    return 0


def load_all(src):
    summary = {}
    for name, dtype, shape, array in load(src):
        summary[name] = [dtype, shape, hashlib.sha256(le_bytes(array)).hexdigest()]
    print(json.dumps(summary, sort_keys=True))
    return 0


def hf_cache(cache, repo_ids):
    """huggingface_hub as the oracle of a cache: its repos, revisions, files and blobs, with
    paths relative to CACHE so that a cache and its mount compare equal. Needs huggingface_hub."""
    from huggingface_hub import scan_cache_dir, snapshot_download

    def generated(path):
        return any(part.endswith(".tensors") for part in path.relative_to(cache).parts)

    def rel(path):
        return str(path.relative_to(cache))

    info = scan_cache_dir(cache)
    repos = {}
    for repo in info.repos:
        revisions = {}
        for rev in repo.revisions:
            files = {rel(f.file_path): [rel(f.blob_path), f.size_on_disk]
                     for f in rev.files if not generated(f.file_path)}
            revisions[rev.commit_hash] = {"refs": sorted(rev.refs), "files": files}
        blobs = {b for r in revisions.values() for b, _ in r["files"].values()}
        size = sum(os.stat(os.path.join(cache, b)).st_size for b in blobs)
        repos[repo.repo_id] = {"type": repo.repo_type, "revisions": revisions,
                               "blobs": sorted(blobs), "size_on_disk": size}
    warnings = sorted(str(w) for w in info.warnings)
    downloads = {}
    for repo_id in repo_ids:
        snap = snapshot_download(repo_id, cache_dir=cache, local_files_only=True)
        files = {}
        for root, dirs, names in os.walk(snap):
            dirs[:] = [d for d in dirs if not d.endswith(".tensors")]
            for name in names:
                path = os.path.join(root, name)
                with open(path, "rb") as f:
                    files[os.path.relpath(path, snap)] = hashlib.sha256(f.read()).hexdigest()
        downloads[repo_id] = {"snapshot": os.path.relpath(snap, cache), "files": files}
    print(json.dumps({"repos": repos, "warnings": warnings, "downloads": downloads},
                     sort_keys=True, indent=1))
    return 0


# safetensors dtype -> the ml_dtypes (or numpy) type of one stored element.
ML_DTYPES = {
    "BF16": "bfloat16", "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2",
    "F8_E4M3FNUZ": "float8_e4m3fnuz", "F8_E5M2FNUZ": "float8_e5m2fnuz",
    "F8_E8M0": "float8_e8m0fnu",
}


def widened(dtype, data, target):
    """The stored elements `data` (bytes of safetensors DTYPE) widened to TARGET by ml_dtypes."""
    import ml_dtypes
    if dtype == "F4":
        # Two elements a byte, the first in the low nibble (PyTorch's float4_e2m1fn_x2);
        # ml_dtypes keeps one float4_e2m1fn a byte, in its low 4 bits.
        packed = np.frombuffer(data, dtype=np.uint8)
        codes = np.stack([packed & 0xF, packed >> 4], axis=-1).reshape(-1)
        stored = codes.view(ml_dtypes.float4_e2m1fn)
    elif dtype in ML_DTYPES:
        stored = np.frombuffer(data, dtype=getattr(ml_dtypes, ML_DTYPES[dtype]))
    else:
        stored = np.frombuffer(data, dtype=np.dtype(NUMPY[dtype]))
    return stored.astype({"F32": "<f4", "F64": "<f8"}[target])


def widen(dtype, target, src, out):
    with open(src, "rb") as f:
        widened(dtype, f.read(), target).tofile(out)
    return 0


LOADER_DTYPES = {"float64": "F64", "float32": "F32", "float16": "F16", "int64": "I64",
                 "int32": "I32", "uint8": "U8", "bool": "BOOL"}


def fnv1a64(data):
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def loader_lines(model, names, widen_floats):
    """What examples/loaders print for each tensor (name, dtype, shape, FNV-1a 64 of the bytes,
    the first values exactly), read from the shards with safe_open (BF16, which numpy lacks, from
    the raw bytes at the header's offsets); with `widen_floats`, BF16 and F16 as float32."""
    from decimal import Decimal

    def text(v):
        if isinstance(v, (float, np.floating)):
            return format(Decimal(float(v) + 0.0), "f")
        return str(int(v))

    with open(os.path.join(model, "model.safetensors.index.json")) as f:
        weight_map = json.load(f)["weight_map"]
    for name in names:
        shard = os.path.join(model, weight_map[name])
        start, header = read_header(shard)
        info = header[name]
        shape = info["shape"]
        if info["dtype"] == "BF16":
            begin, end = info["data_offsets"]
            with open(shard, "rb") as fh:
                fh.seek(start + begin)
                raw = fh.read(end - begin)
            values = widened("BF16", raw, "F32")
            dtype = "BF16"
        else:
            with safe_open(shard, framework="numpy") as f:
                values = f.get_tensor(name)
            dtype, raw = LOADER_DTYPES[values.dtype.name], le_bytes(values)
        if widen_floats and dtype in ("BF16", "F16"):
            values = values.astype("<f4")
            dtype, raw = "F32", le_bytes(values)
        first = ",".join(text(v) for v in values.reshape(-1)[:4])
        head = f"{name} {dtype} {json.dumps(shape, separators=(',', ':'))} fnv1a64={fnv1a64(raw)}"
        print(f"{head} first={first}\t{head} head={raw[:8].hex()}")
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("write-fixtures").add_argument("dir")
    p = sub.add_parser("compare")
    p.add_argument("src")
    p.add_argument("tensor_dir")
    p.add_argument("--npy", action="store_true", help="also check the NPY views")
    p.add_argument("--allow-extra", action="store_true",
                   help="ignore tagged files whose tensor is not in SRC")
    sub.add_parser("load-all").add_argument("src")
    p = sub.add_parser("save")
    p.add_argument("path")
    p.add_argument("seed", type=int)
    p.add_argument("names", nargs="+")
    p = sub.add_parser("hf-cache")
    p.add_argument("cache")
    p.add_argument("repo_ids", nargs="*")
    p = sub.add_parser("widen")
    for a in ("dtype", "target", "src", "out"):
        p.add_argument(a)
    p = sub.add_parser("loader-lines")
    p.add_argument("--widen", action="store_true")
    p.add_argument("model")
    p.add_argument("names", nargs="+")
    args = parser.parse_args()

    if args.cmd == "write-fixtures":
        return write_fixtures(args.dir) or 0
    if args.cmd == "compare":
        return compare(args.src, args.tensor_dir, args.allow_extra, args.npy)
    if args.cmd == "save":
        return save(args.path, args.seed, args.names)
    if args.cmd == "widen":
        return widen(args.dtype, args.target, args.src, args.out)
    if args.cmd == "loader-lines":
        return loader_lines(args.model, args.names, args.widen)
    if args.cmd == "hf-cache":
        from pathlib import Path
        return hf_cache(Path(args.cache), args.repo_ids)
    return load_all(args.src)


if __name__ == "__main__":
    sys.exit(main())
