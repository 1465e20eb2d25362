#!/usr/bin/env python3
"""Fixtures and oracle for tensormount's integrity checks (tests/suite/integrity/):
`tensormount verify`, the digests a source records, per-tensor digests and `-o verify`.

Run with the venv python ($TENSORMOUNT_PYTHON), which has safetensors, numpy, torch and
huggingface_hub (tests/python/requirements.txt). Every fixture is written by the real writers
(safetensors' save_file, torch.save, huggingface_hub's own download-metadata helper, the
`sha256sum` command), every layout is read back by the library that owns it (scan_cache_dir,
try_to_load_from_cache, read_download_metadata), and every digest comes from hashlib, never
from tensormount.

  integrity.py write ROOT           write the four fixtures under ROOT and print one JSON object:
                                    {"hf": {...}, "local": {...}, "release": {...},
                                    "plain": {...}, "tensors": {PATH: {name: sha256}},
                                    "layout": {PATH: {name: [begin, end]}}}; each fixture has
                                    "root" (relative to ROOT) and "files" {relative path:
                                    {"sha256", "bytes", "weight", ...}}; PATH is relative to ROOT;
                                    "layout" gives each safetensors tensor's absolute byte range
  integrity.py tensors FILE...      JSON {FILE: {name: sha256 of the tensor's C-order bytes}}:
                                    safe_open for safetensors (numpy, torch where numpy lacks
                                    the dtype), torch.load(weights_only=True) for a checkpoint
  integrity.py retensor FILE DROP ADD
                                    rewrite the safetensors FILE (numpy dtypes only) without
                                    tensor DROP and with a new float32 tensor ADD
  integrity.py check-digests JSON   JSON {TENSOR_DIR: [FILE, ...]}: every tensor of the FILEs has
                                    a file in the mounted TENSOR_DIR (by user.safetensors.name)
                                    whose user.safetensors.sha256 is hashlib's digest of the
                                    tensor's bytes as read from FILE, and the directory has no
                                    other tensor file; prints "ok N tensors" or MISMATCH lines
                                    (exit 1)

The fixtures:

  hf/         a Hugging Face cache laid out as huggingface_hub lays one out, built offline:
              hf/models--org--name/{blobs/HASH, refs/main, snapshots/COMMIT/...}, each snapshot
              file a relative link to its blob; weight files (LFS) are named by their SHA-256,
              small files by their git blob SHA-1. A sharded set (two shards and
              model.safetensors.index.json), unet/diffusion_pytorch_model.safetensors and
              text_encoder/pytorch_model.bin (torch.save).
  local/      the same model as a `local_dir` download: the files, and
              .cache/huggingface/download/PATH.metadata written by huggingface_hub's
              write_download_metadata (etag: the SHA-256 of a weight file, the git blob SHA-1
              of a small one).
  release/    a release folder: two shards, extra.safetensors, adapter.pt (torch.save, with a
              transposed view), unet/x.safetensors, SHA256SUMS written by `sha256sum` (with
              the relative path unet/x.safetensors), extra.safetensors.sha256 written by
              `sha256sum --tag` (BSD format, which wins over SHA256SUMS' line for it).
  plain/      no recorded digests: a.safetensors, b.pt, broken.safetensors (not a safetensors
              file), config.json.
"""
import argparse
import hashlib
import json
import os
import struct
import subprocess
import sys
import warnings

warnings.filterwarnings("ignore")

import numpy as np  # noqa: E402
from safetensors import safe_open  # noqa: E402
from safetensors.numpy import save_file as np_save_file  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from oracle import tensor_files, xattr  # noqa: E402

REPO_ID = "org/name"
# The dtypes safe_open(..., "numpy") reads.
NUMPY_DTYPES = {"BOOL", "U8", "I8", "I16", "U16", "F16", "I32", "U32", "F32", "F64", "I64", "U64"}
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt")


def sha256(data):
    return hashlib.sha256(data).hexdigest()


def git_blob_sha1(data):
    """The id `git hash-object` gives a file: what the Hub (and the cache) names a small file by."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def read(path):
    with open(path, "rb") as f:
        return f.read()


def is_weight(rel):
    return rel.endswith(WEIGHT_SUFFIXES)


def header(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        return n, json.loads(f.read(n))


# ---------------------------------------------------------------- tensor digests

def torch_bytes(t):
    """The C-order bytes of a torch tensor: those of t.contiguous()."""
    import torch
    return t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def safetensors_digests(path):
    """{name: sha256} of a safetensors file's tensors, read by safe_open; checked against the
    bytes of the header's data_offsets range, read by hand."""
    n, hdr = header(path)
    hdr.pop("__metadata__", None)
    numpy_only = all(v["dtype"] in NUMPY_DTYPES for v in hdr.values())
    out = {}
    if numpy_only:
        with safe_open(path, framework="numpy") as f:
            for name in f.keys():
                out[name] = sha256(np.ascontiguousarray(f.get_tensor(name)).tobytes())
    else:
        with safe_open(path, framework="pt") as f:
            for name in f.keys():
                out[name] = sha256(torch_bytes(f.get_tensor(name)))
    raw = read(path)
    for name, v in hdr.items():
        begin, end = v["data_offsets"]
        assert sha256(raw[8 + n + begin:8 + n + end]) == out[name], (path, name)
    return out


def checkpoint_digests(path):
    import torch
    sd = torch.load(path, map_location="cpu", weights_only=True)
    assert all(isinstance(v, torch.Tensor) for v in sd.values()), path
    return {name: sha256(torch_bytes(t)) for name, t in sd.items()}


def digests(path):
    if path.endswith(".safetensors"):
        return safetensors_digests(path)
    return checkpoint_digests(path)


def layout(path):
    """{name: [begin, end]}: where each tensor's bytes lie in the file."""
    n, hdr = header(path)
    hdr.pop("__metadata__", None)
    return {name: [8 + n + v["data_offsets"][0], 8 + n + v["data_offsets"][1]]
            for name, v in hdr.items()}


# ---------------------------------------------------------------- writing

def write_model(out):
    """The model of the HF cache and the local_dir: the same files in both. Returns the
    relative paths."""
    import torch
    from safetensors.torch import save_file as pt_save_file

    rng = np.random.default_rng(7)
    gen = torch.Generator().manual_seed(7)
    os.makedirs(os.path.join(out, "unet"), exist_ok=True)
    os.makedirs(os.path.join(out, "text_encoder"), exist_ok=True)
    # A few MiB, so that reads and hashes go in more than one chunk.
    shard1 = {
        "model.embed.weight": rng.standard_normal((768, 1024), dtype=np.float32),
        "model.layers.0.w": rng.standard_normal((64, 64), dtype=np.float32),
        "model.pos_ids": np.arange(512, dtype=np.int64),
    }
    np_save_file(shard1, os.path.join(out, "model-00001-of-00002.safetensors"),
                 metadata={"format": "pt"})
    shard2 = {
        "model.layers.1.w": torch.randn(64, 64, generator=gen).to(torch.bfloat16),
        "lm_head.weight": torch.randn(256, 64, generator=gen),
        "model.empty": torch.zeros(0, 4),
        "model.scale": torch.tensor(0.5),
        "model.steps": torch.arange(10, dtype=torch.int64),
    }
    pt_save_file(shard2, os.path.join(out, "model-00002-of-00002.safetensors"),
                 metadata={"format": "pt"})
    weight_map = {k: "model-00001-of-00002.safetensors" for k in shard1}
    weight_map.update({k: "model-00002-of-00002.safetensors" for k in shard2})
    total = sum(a.nbytes for a in shard1.values()) + sum(
        t.numel() * t.element_size() for t in shard2.values())
    with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump({"model_type": "tiny", "hidden_size": 64}, f)
    pt_save_file({"conv_in.weight": torch.randn(8, 4, 3, 3, generator=gen).half(),
                  "conv_in.bias": torch.randn(8, generator=gen).half()},
                 os.path.join(out, "unet/diffusion_pytorch_model.safetensors"))
    with open(os.path.join(out, "unet/config.json"), "w") as f:
        json.dump({"_class_name": "UNet2DConditionModel"}, f)
    torch.save({"enc.weight": torch.randn(16, 16, generator=gen),
                "enc.bias": torch.randn(16, generator=gen).half(),
                "enc.ids": torch.arange(8, dtype=torch.int64)},
               os.path.join(out, "text_encoder/pytorch_model.bin"))
    return ["config.json", "model-00001-of-00002.safetensors",
            "model-00002-of-00002.safetensors", "model.safetensors.index.json",
            "text_encoder/pytorch_model.bin", "unet/config.json",
            "unet/diffusion_pytorch_model.safetensors"]


def write_hf_cache(cache, model_dir, rels):
    """A cache as huggingface_hub lays one out, from the files of `model_dir`; checked by
    huggingface_hub's own readers of a cache."""
    from huggingface_hub import scan_cache_dir, try_to_load_from_cache

    repo = os.path.join(cache, "models--" + REPO_ID.replace("/", "--"))
    commit = hashlib.sha1(b"tensormount integrity fixture").hexdigest()
    snap = os.path.join(repo, "snapshots", commit)
    os.makedirs(os.path.join(repo, "blobs"))
    os.makedirs(os.path.join(repo, "refs"))
    with open(os.path.join(repo, "refs", "main"), "w") as f:
        f.write(commit)
    files = {}
    for rel in rels:
        data = read(os.path.join(model_dir, rel))
        # LFS files (the weights) are named by SHA-256, the others by their git blob id.
        blob = sha256(data) if is_weight(rel) else git_blob_sha1(data)
        blob_path = os.path.join(repo, "blobs", blob)
        with open(blob_path, "wb") as f:
            f.write(data)
        link = os.path.join(snap, rel)
        os.makedirs(os.path.dirname(link), exist_ok=True)
        os.symlink(os.path.relpath(blob_path, os.path.dirname(link)), link)
        files[rel] = {"sha256": sha256(data), "bytes": len(data), "weight": is_weight(rel),
                      "blob": os.path.relpath(blob_path, os.path.dirname(cache)),
                      "blob_name": blob}

    # huggingface_hub's reader of a cache is the oracle of the layout.
    info = scan_cache_dir(cache)
    assert not info.warnings, info.warnings
    assert [r.repo_id for r in info.repos] == [REPO_ID], info.repos
    (r,) = info.repos
    assert r.repo_type == "model"
    (rev,) = r.revisions
    assert rev.commit_hash == commit and set(rev.refs) == {"main"}, rev
    listed = {os.path.relpath(str(f.file_path), snap): os.path.basename(str(f.blob_path))
              for f in rev.files}
    assert listed == {rel: v["blob_name"] for rel, v in files.items()}, listed
    for rel, v in files.items():
        found = try_to_load_from_cache(REPO_ID, rel, cache_dir=cache)
        blob_path = os.path.join(os.path.dirname(cache), v["blob"])
        assert found is not None and os.path.realpath(found) == os.path.realpath(blob_path), \
            (rel, found)
        assert sha256(read(found)) == v["sha256"]
    return {"root": os.path.basename(cache), "repo": REPO_ID, "commit": commit,
            "snapshot": os.path.relpath(snap, os.path.dirname(cache)), "files": files}


def write_local_dir(local, rels):
    """The download metadata huggingface_hub writes in a local_dir, by its own helper."""
    from pathlib import Path
    from huggingface_hub._local_folder import (get_local_download_paths,
                                               read_download_metadata,
                                               write_download_metadata)
    commit = hashlib.sha1(b"tensormount integrity fixture").hexdigest()
    files = {}
    for rel in rels:
        data = read(os.path.join(local, rel))
        etag = sha256(data) if is_weight(rel) else git_blob_sha1(data)
        write_download_metadata(Path(local), rel, commit, etag)
        meta = read_download_metadata(Path(local), rel)
        assert meta is not None and meta.etag == etag and meta.commit_hash == commit, rel
        paths = get_local_download_paths(Path(local), rel)
        files[rel] = {"sha256": sha256(data), "bytes": len(data), "weight": is_weight(rel),
                      "etag": etag, "metadata": os.path.relpath(paths.metadata_path, local)}
    # huggingface_hub leaves its lock files; drop them (a clean download has none left).
    for root, _dirs, names in os.walk(os.path.join(local, ".cache")):
        for name in names:
            if name.endswith(".lock"):
                os.remove(os.path.join(root, name))
    return {"root": os.path.basename(local), "commit": commit, "files": files}


def write_release(out):
    """A release folder with SHA256SUMS and one NAME.sha256, by the real sha256sum."""
    import torch
    rng = np.random.default_rng(11)
    os.makedirs(os.path.join(out, "unet"))
    np_save_file({
        "model.embed.weight": rng.standard_normal((512, 1024), dtype=np.float32),
        "model.layers.0.w": rng.standard_normal((64, 64), dtype=np.float32),
        "model.pos_ids": np.arange(256, dtype=np.int64),
    }, os.path.join(out, "model-00001-of-00002.safetensors"), metadata={"format": "pt"})
    np_save_file({
        "lm_head.weight": rng.standard_normal((128, 64)).astype(np.float16),
        "model.norm": np.ones(64, dtype=np.float32),
        "model.empty": np.zeros((0,), dtype=np.float32),
        "model.scale": np.array(2.0, dtype=np.float32),
        "model.mask": (rng.integers(0, 256, 33)).astype(np.uint8),
    }, os.path.join(out, "model-00002-of-00002.safetensors"), metadata={"format": "pt"})
    np_save_file({"extra.w": rng.standard_normal(10)},
                 os.path.join(out, "extra.safetensors"))
    np_save_file({"conv.w": rng.standard_normal((4, 4, 3, 3), dtype=np.float32)},
                 os.path.join(out, "unet/x.safetensors"))
    base = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    torch.save({"lora.A": torch.randn(8, 16, generator=torch.Generator().manual_seed(3)),
                "lora.B": torch.ones(16, 8).to(torch.bfloat16),
                # A transposed view: its tensor file serves the bytes of t.contiguous().
                "lora.T": base.t()},
               os.path.join(out, "adapter.pt"))
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump({"release": 1}, f)
    listed = ["adapter.pt", "extra.safetensors", "model-00001-of-00002.safetensors",
              "model-00002-of-00002.safetensors", "unet/x.safetensors"]
    with open(os.path.join(out, "SHA256SUMS"), "wb") as f:
        subprocess.run(["sha256sum", *listed], cwd=out, stdout=f, check=True)
    with open(os.path.join(out, "extra.safetensors.sha256"), "wb") as f:
        subprocess.run(["sha256sum", "--tag", "extra.safetensors"], cwd=out, stdout=f,
                       check=True)
    files = {}
    for rel in listed + ["config.json"]:
        data = read(os.path.join(out, rel))
        recorded_in = None
        if rel == "extra.safetensors":
            recorded_in = "extra.safetensors.sha256"
        elif rel in listed:
            recorded_in = "SHA256SUMS"
        files[rel] = {"sha256": sha256(data), "bytes": len(data), "weight": is_weight(rel),
                      "recorded_in": recorded_in}
    # `sha256sum -c` is the oracle of the files it wrote.
    subprocess.run(["sha256sum", "--quiet", "-c", "SHA256SUMS"], cwd=out, check=True)
    subprocess.run(["sha256sum", "--quiet", "-c", "extra.safetensors.sha256"], cwd=out,
                   check=True)
    return {"root": os.path.basename(out), "files": files}


def write_plain(out):
    """No digest recorded anywhere."""
    import torch
    rng = np.random.default_rng(5)
    os.makedirs(out)
    np_save_file({"a.w": rng.standard_normal((10, 10), dtype=np.float32),
                  "a.ids": np.arange(4, dtype=np.int64)}, os.path.join(out, "a.safetensors"))
    torch.save({"b.w": torch.arange(5, dtype=torch.int32)}, os.path.join(out, "b.pt"))
    with open(os.path.join(out, "broken.safetensors"), "wb") as f:
        f.write(b"<html><body>502 Bad Gateway</body></html>\n")
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump({"plain": 1}, f)
    files = {}
    for rel in ["a.safetensors", "b.pt", "broken.safetensors", "config.json"]:
        data = read(os.path.join(out, rel))
        files[rel] = {"sha256": sha256(data), "bytes": len(data), "weight": is_weight(rel),
                      "valid": rel != "broken.safetensors"}
    return {"root": os.path.basename(out), "files": files}


def write(root):
    local = os.path.join(root, "local")
    os.makedirs(local)
    rels = write_model(local)
    hf = write_hf_cache(os.path.join(root, "hf"), local, rels)
    local_info = write_local_dir(local, rels)
    release = write_release(os.path.join(root, "release"))
    plain = write_plain(os.path.join(root, "plain"))
    # safetensors' writer makes its files 0600; a release is readable by all (so that a test
    # can make one file unreadable to another user).
    for d, _dirs, names in os.walk(root):
        for name in names:
            path = os.path.join(d, name)
            if not os.path.islink(path):
                os.chmod(path, 0o644)
    tensors, layouts = {}, {}
    for fx in (local_info, release, plain):
        for rel, v in fx["files"].items():
            if not v["weight"] or not v.get("valid", True):
                continue
            path = os.path.join(fx["root"], rel)
            tensors[path] = digests(os.path.join(root, path))
            if rel.endswith(".safetensors"):
                layouts[path] = layout(os.path.join(root, path))
    print(json.dumps({"hf": hf, "local": local_info, "release": release, "plain": plain,
                      "tensors": tensors, "layout": layouts}, sort_keys=True))
    return 0


# ---------------------------------------------------------------- commands

def tensors_cmd(files):
    print(json.dumps({f: digests(f) for f in files}, sort_keys=True))
    return 0


def retensor(path, drop, add):
    with safe_open(path, framework="numpy") as f:
        metadata = f.metadata()
        ts = {k: f.get_tensor(k) for k in f.keys() if k != drop}
    ts[add] = np.arange(3, dtype=np.float32)
    np_save_file(ts, path, metadata=metadata)
    return 0


def check_digests(spec):
    errors, n = [], 0
    for tdir, files in json.loads(spec).items():
        by_name, _npy, errs = tensor_files(tdir)
        errors += errs
        expected = {}
        for f in files:
            expected.update(digests(f))
        if set(by_name) != set(expected):
            errors.append(f"{tdir}: tensor files {sorted(by_name)}, expected {sorted(expected)}")
        for name, want in expected.items():
            path = by_name.get(name)
            if path is None:
                continue
            got = xattr(path, "user.safetensors.sha256")
            n += 1
            if got != want:
                errors.append(f"{path}: user.safetensors.sha256 {got!r}, hashlib {want}")
    for e in errors:
        print("MISMATCH " + e)
    if errors:
        return 1
    print(f"ok {n} tensors")
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("write").add_argument("root")
    sub.add_parser("tensors").add_argument("files", nargs="+")
    p = sub.add_parser("retensor")
    p.add_argument("file")
    p.add_argument("drop")
    p.add_argument("add")
    sub.add_parser("check-digests").add_argument("spec")
    a = parser.parse_args()
    if a.cmd == "write":
        return write(a.root)
    if a.cmd == "tensors":
        return tensors_cmd(a.files)
    if a.cmd == "retensor":
        return retensor(a.file, a.drop, a.add)
    return check_digests(a.spec)


if __name__ == "__main__":
    sys.exit(main())
