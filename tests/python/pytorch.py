#!/usr/bin/env python3
"""Independent oracle for tensormount's PyTorch checkpoints (tests/suite/pickle.rs).

Run with the venv python ($TENSORMOUNT_PYTHON), which has torch, safetensors, numpy,
transformers, huggingface_hub and picklescan (tests/python/requirements.txt). Every fixture is
written by the real writers (torch.save, huggingface_hub's sharding as transformers used it for
`.bin` sets); every expectation comes from torch.load(weights_only=True), the official
safetensors writer and reader, pickletools and picklescan, never from tensormount.

  pytorch.py write-fixtures DIR [--only core|sharded]
                                     write the checkpoints (all of them, or one set); JSON
                                     {relative path: "pytorch-zip" | "pytorch-legacy" | what}
  pytorch.py tensors FILE...     JSON {FILE: {path: {dtype, shape, sha256, nbytes,
                                     contiguous}}}: torch.load(weights_only=True), nested
                                     dicts and lists flattened into dotted paths
  pytorch.py convert FILE OUT [FILE OUT...]
                                     the reference conversion of each FILE's state dict with
                                     safetensors.torch.save_file; JSON {FILE: sha256 of OUT}
  pytorch.py globals FILE...     JSON {FILE: {"globals": [module.name, ...] in the pickles
                                     (GLOBAL, STACK_GLOBAL, INST, by pickletools), "allowed":
                                     those torch.load(weights_only=True) accepts, "picklescan":
                                     what picklescan calls dangerous, "picklescan_strict": the
                                     same with strict=True}}
  pytorch.py write-malicious DIR MARKER
                                     checkpoints whose pickles call os.system & co (each would
                                     create MARKER); JSON {file: {"tensors": {path: {dtype,
                                     shape, hex}}}} of the real tensors beside the calls (hex:
                                     their bytes), as written (never read back)
  pytorch.py write-broken DIR    broken checkpoints and a good one; JSON {file: what}
  pytorch.py save FILE SEED [--legacy]
                                     a small state dict whose values depend on SEED, by
                                     torch.save (zip, or the legacy format)
  pytorch.py check-mount [--npy] [--widen f32] FILE DIR [FILE DIR...]
                                     the mounted tensor directory DIR of each checkpoint FILE
                                     against torch.load: one file per tensor (found by
                                     user.safetensors.name), its bytes, xattrs, and the bytes
                                     at user.safetensors.offset of the source; prints "ok N
                                     tensors" or MISMATCH lines (exit 1)
  pytorch.py safe-open VIRTUAL FILE [VIRTUAL FILE...]
                                     safetensors.safe_open(VIRTUAL, "pt") against the state
                                     dict of FILE by torch.load; "ok N tensors" or MISMATCH
  pytorch.py from-pretrained MOUNTED SOURCE
                                     transformers.AutoModel.from_pretrained(MOUNTED,
                                     use_safetensors=True): its state dict against torch.load of
                                     every shard of SOURCE's pytorch_model.bin.index.json
"""
import argparse
import hashlib
import io
import json
import os
import pickle
import pickletools
import sys
import warnings
import zipfile

warnings.filterwarnings("ignore")

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from oracle import tensor_files, xattr  # noqa: E402
import torch  # noqa: E402

# torch dtype -> safetensors spelling.
DTYPES = {
    torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
    torch.float8_e4m3fn: "F8_E4M3", torch.float8_e5m2: "F8_E5M2",
    torch.int8: "I8", torch.int16: "I16", torch.int32: "I32", torch.int64: "I64",
    torch.uint8: "U8", torch.uint16: "U16", torch.uint32: "U32", torch.uint64: "U64",
    torch.bool: "BOOL", torch.complex64: "C64",
    # No safetensors dtype: a tensor file of tensormount's own naming, left out of conversions.
    torch.complex128: "C128",
}
NO_SAFETENSORS_DTYPE = {torch.complex128}
# The safetensors dtypes numpy has (little-endian), for the NPY views.
NUMPY = {
    "BOOL": "|b1", "U8": "|u1", "I8": "|i1", "I16": "<i2", "U16": "<u2", "F16": "<f2",
    "I32": "<i4", "U32": "<u4", "F32": "<f4", "C64": "<c8", "F64": "<f8", "I64": "<i8",
    "U64": "<u8",
}
# Widened by -o dtype=f32.
NARROW_FLOATS = {"F16", "BF16", "F8_E4M3", "F8_E5M2"}

# What torch.save writes first in the legacy format (torch/serialization.py).
LEGACY_MAGIC = 0x1950A86A20F9469CFC6C


def raw(t):
    """The tensor's bytes in C order (as `.contiguous()` lays them out), little-endian here."""
    return t.detach().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def sha(b):
    return hashlib.sha256(b).hexdigest()


def describe(t):
    b = raw(t)
    return {"dtype": DTYPES[t.dtype], "shape": list(t.shape), "sha256": sha(b),
            "nbytes": len(b), "contiguous": t.is_contiguous()}


def flatten(obj, prefix=""):
    """(path, tensor) of every tensor in nested dicts, lists and tuples; keys joined with `.`."""
    if isinstance(obj, torch.Tensor):
        yield prefix, obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from flatten(v, f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            yield from flatten(v, f"{prefix}.{i}" if prefix else str(i))


def load(path):
    return torch.load(path, weights_only=True, map_location="cpu")


def state_dict(obj):
    """What the virtual safetensors file holds: the top-level dict when all its values are
    tensors, else its `state_dict` entry; less the tensors safetensors has no dtype for."""
    if not (isinstance(obj, dict) and all(isinstance(v, torch.Tensor) for v in obj.values())):
        obj = obj["state_dict"]
    return {k: v for k, v in obj.items() if v.dtype not in NO_SAFETENSORS_DTYPE}


# ---------------------------------------------------------------- fixtures

def rand(dtype, shape, gen):
    """Small random values of any dtype (floats from randn, so no NaN; integers from random
    bytes)."""
    if dtype.is_floating_point or dtype.is_complex:
        return torch.randn(shape, dtype=torch.complex64 if dtype.is_complex else torch.float32,
                           generator=gen).to(dtype)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=gen).bool()
    n = 1
    for d in shape:
        n *= d
    size = torch.empty((), dtype=dtype).element_size()
    b = torch.randint(0, 256, (n * size,), dtype=torch.uint8, generator=gen)
    return b.view(dtype).reshape(shape)


# torch.save writes these dtypes to a legacy file as an UntypedStorage, which its own
# torch.load cannot read back ("type object 'torch.storage.UntypedStorage' has no attribute
# 'dtype'"): the legacy fixtures leave them out.
NOT_LEGACY = {torch.uint16, torch.uint32, torch.uint64, torch.float8_e4m3fn, torch.float8_e5m2}


def every_dtype(gen, legacy=False):
    """One tensor per dtype (shape 2x3), scalars, a zero-size tensor, views, tied weights and
    names that need escaping."""
    d = {}
    for dtype, st in DTYPES.items():
        if not (legacy and dtype in NOT_LEGACY):
            d[st.lower()] = rand(dtype, (2, 3), gen)
    d["scalar.f32"] = rand(torch.float32, (), gen)
    d["scalar.i64"] = rand(torch.int64, (), gen)
    d["scalar.bf16"] = rand(torch.bfloat16, (), gen)
    d["empty"] = torch.zeros((0, 3), dtype=torch.float32)
    w = rand(torch.float32, (3, 4), gen)
    d["tied.weight"] = w
    d["tied.twin"] = w  # the same tensor again: one storage
    d["transposed"] = w.t()  # a non-contiguous view of that storage
    base = rand(torch.float16, (4, 5), gen)
    d["slice.columns"] = base[:, 1:3]  # non-contiguous, storage offset 1
    d["slice.rows"] = base[1:3]  # contiguous, storage offset 5
    d["weird%name/x"] = rand(torch.int32, (2,), gen)
    return d


def lightning(gen):
    return {
        "epoch": 3,
        "global_step": 10,
        "pytorch-lightning_version": "2.4.0",
        "state_dict": {
            "model.layer.weight": rand(torch.float32, (4, 3), gen),
            "model.layer.bias": rand(torch.float32, (4,), gen),
            "model.norm.weight": rand(torch.bfloat16, (3,), gen),
        },
        "optimizer_states": [{
            "state": {0: {"step": torch.tensor(10.0), "exp_avg": rand(torch.float32, (4, 3), gen),
                          "exp_avg_sq": rand(torch.float32, (4, 3), gen)}},
            "param_groups": [{"lr": 0.1, "params": [0, 1, 2]}],
        }],
        "lr_schedulers": [],
        "hyper_parameters": {"lr": 0.1},
    }


def write_core(out):
    gen = torch.Generator().manual_seed(22)
    wrote = {}

    def save(rel, obj, legacy=False):
        path = os.path.join(out, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if legacy:
            torch.save(obj, path, _use_new_zipfile_serialization=False)
        else:
            torch.save(obj, path)
        wrote[rel] = "pytorch-legacy" if legacy else "pytorch-zip"

    save("pytorch_model.bin", every_dtype(gen))
    save("legacy.pt", every_dtype(gen, legacy=True), legacy=True)
    save("pytorch_model.fp16.bin",
         {f"h.{i}.weight": rand(torch.float16, (3, 2), gen) for i in range(3)})
    save("lightning.ckpt", lightning(gen))
    nested = lightning(gen)
    nested["state_dict"]["a/b"] = rand(torch.int16, (2, 2), gen)
    save("nested.pth", nested, legacy=True)
    save("unet/diffusion_pytorch_model.bin",
         {"conv_in.weight": rand(torch.float16, (4, 2, 3, 3), gen),
          "conv_in.bias": rand(torch.float16, (4,), gen)})
    # A real model.safetensors beside pytorch_model.bin: it wins over the virtual one.
    save("realwins/pytorch_model.bin", {"w": rand(torch.float32, (2, 2), gen)})
    from safetensors.torch import save_file
    save_file({"real": torch.arange(5, dtype=torch.int32)},
              os.path.join(out, "realwins/model.safetensors"), metadata={"format": "pt"})
    wrote["realwins/model.safetensors"] = "safetensors"
    return wrote


def write_sharded(out):
    """A tiny BERT saved as transformers 4 saved `.bin` sets (save_pretrained with
    safe_serialization=False, which transformers 5 no longer honours): huggingface_hub's split
    into `pytorch_model-0000N-of-0000M.bin`, torch.save of each shard, the index beside."""
    import transformers
    from huggingface_hub import split_torch_state_dict_into_shards

    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=2,
                                     num_attention_heads=2, intermediate_size=32)
    model = transformers.BertModel(config)
    d = os.path.join(out, "bert")
    os.makedirs(d, exist_ok=True)
    config.save_pretrained(d)
    sd = {k: v.contiguous() for k, v in model.state_dict().items()}
    split = split_torch_state_dict_into_shards(
        sd, filename_pattern="pytorch_model{suffix}.bin", max_shard_size="20KB")
    wrote = {"bert/config.json": "config"}
    for name, keys in split.filename_to_tensors.items():
        torch.save({k: sd[k] for k in keys}, os.path.join(d, name))
        wrote[f"bert/{name}"] = "pytorch-zip"
    assert split.is_sharded, "the BERT set should need several shards"
    with open(os.path.join(d, "pytorch_model.bin.index.json"), "w") as f:
        json.dump({"metadata": split.metadata, "weight_map": split.tensor_to_filename}, f,
                  indent=2, sort_keys=True)
        f.write("\n")
    wrote["bert/pytorch_model.bin.index.json"] = "index"
    return wrote


def write_fixtures(out, only):
    wrote = {}
    if only in (None, "core"):
        wrote.update(write_core(out))
    if only in (None, "sharded"):
        wrote.update(write_sharded(out))
    print(json.dumps(wrote, sort_keys=True))


# ---------------------------------------------------------------- the oracle's reading

def tensors(files):
    print(json.dumps({f: {p: describe(t) for p, t in flatten(load(f))} for f in files},
                     sort_keys=True))


def convert_one(path, out):
    from safetensors.torch import save_file
    sd = state_dict(load(path))
    # save_file refuses tensors that share storage; clone() gives each its own.
    save_file({k: v.contiguous().clone() for k, v in sd.items()}, out, metadata={"format": "pt"})
    with open(out, "rb") as f:
        return sha(f.read())


def convert(pairs):
    print(json.dumps({f: convert_one(f, o) for f, o in pairs}, sort_keys=True))


def pickles_of(path):
    """The pickle streams of a checkpoint: `*.pkl` entries of a zip; the five leading pickles of
    a legacy file (magic, protocol, sys_info, the object, storage keys); else every pickle in a
    row, as far as they parse."""
    with open(path, "rb") as f:
        data = f.read()
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as z:
            return [z.read(n) for n in z.namelist() if n.endswith(".pkl")]
    streams, pos = [], 0
    legacy = False
    while pos < len(data):
        end = None
        try:
            for op, _arg, p in pickletools.genops(io.BytesIO(data[pos:])):
                if op.name == "STOP":
                    end = pos + p + 1
        except Exception:
            break
        if end is None:
            break
        streams.append(data[pos:end])
        if len(streams) == 1:
            # Never unpickled (that would run what a malicious pickle calls): the legacy magic
            # is a pickle of one int and nothing else.
            ops = [(op.name, arg) for op, arg, _ in pickletools.genops(streams[0])]
            legacy = ("LONG1", LEGACY_MAGIC) in ops and \
                all(n in ("PROTO", "LONG1", "STOP") for n, _ in ops)
        pos = end
        if legacy and len(streams) == 5:
            break
    return streams


STRING_OPS = {"STRING", "BINSTRING", "SHORT_BINSTRING", "UNICODE", "BINUNICODE",
              "SHORT_BINUNICODE", "BINUNICODE8"}


def globals_in(stream):
    """module.name of every GLOBAL, INST and STACK_GLOBAL (the two strings pushed before it,
    memo included)."""
    found, strings, memo = [], [], {}
    last = None
    for op, arg, _pos in pickletools.genops(stream):
        name = op.name
        if name in ("GLOBAL", "INST"):
            module, _, attr = arg.partition(" ")
            found.append(f"{module}.{attr}")
            last = None
        elif name == "STACK_GLOBAL":
            if len(strings) >= 2:
                found.append(f"{strings[-2]}.{strings[-1]}")
            else:
                found.append("?.?")
            last = None
        elif name in STRING_OPS:
            strings.append(arg)
            last = arg
        elif name in ("PUT", "BINPUT", "LONG_BINPUT"):
            memo[arg] = last
        elif name == "MEMOIZE":
            memo[len(memo)] = last
        elif name in ("GET", "BINGET", "LONG_BINGET"):
            last = memo.get(arg)
            if isinstance(last, str):
                strings.append(last)
        else:
            last = None
    return found


def allowed_by_torch():
    from torch._weights_only_unpickler import _get_allowed_globals
    return set(_get_allowed_globals())


def py3(g):
    """A Python 2 spelling (protocol 2 writes builtins as __builtin__) as Python 3 reads it."""
    module, _, name = g.rpartition(".")
    return f"builtins.{name}" if module == "__builtin__" else g


def globals_cmd(files):
    from picklescan.scanner import SafetyLevel, scan_file_path
    allowed = allowed_by_torch()
    result = {}
    for f in files:
        found = sorted({g for s in pickles_of(f) for g in globals_in(s)})
        scans = {}
        for strict in (False, True):
            r = scan_file_path(f, strict=strict)
            scans[strict] = sorted({f"{g.module}.{g.name}" for g in r.globals
                                    if g.safety == SafetyLevel.Dangerous})
        result[f] = {"globals": found, "allowed": [g for g in found if py3(g) in allowed],
                     "picklescan": scans[False], "picklescan_strict": scans[True]}
    print(json.dumps(result, sort_keys=True))


class Call:
    """Pickles as a call of `func(*args)`: what a malicious checkpoint is made of."""

    def __init__(self, func, *args):
        self.func, self.args = func, args

    def __reduce__(self):
        return self.func, self.args


def write_malicious(out, marker):
    import builtins
    import runpy
    import subprocess
    gen = torch.Generator().manual_seed(7)
    os.makedirs(out, exist_ok=True)
    touch = f"touch {marker}"
    kept = {}

    def keep(name, obj):
        kept[name] = {"tensors": {p: {"dtype": DTYPES[t.dtype], "shape": list(t.shape),
                                      "hex": raw(t).hex()}
                                  for p, t in flatten(obj)}}

    # torch.save (zip, protocol 2) of real tensors beside os.system, which pickle writes as
    # posix.system.
    obj = {"weight": rand(torch.float32, (3, 4), gen), "bias": rand(torch.float16, (4,), gen),
           "evil": Call(os.system, touch)}
    torch.save(obj, os.path.join(out, "evil_os.bin"))
    keep("evil_os.bin", obj)

    # The legacy format, with builtins.eval (protocol 2 writes __builtin__.eval).
    obj = {"weight": rand(torch.float32, (5,), gen),
           "evil": Call(builtins.eval, f"__import__('os').system('{touch}')")}
    torch.save(obj, os.path.join(out, "evil_legacy.pt"), _use_new_zipfile_serialization=False)
    keep("evil_legacy.pt", obj)

    # A clean zip checkpoint whose data.pkl is replaced (Python's zipfile, ZIP_STORED, so the
    # storages lose torch's 64-byte alignment) by a pickle of the same tensors plus
    # subprocess.Popen, runpy._run_code and builtins.__import__ calls, nested.
    sd = {"w": rand(torch.float32, (2, 3), gen), "b": rand(torch.int64, (3,), gen)}
    clean = {"state_dict": sd}
    evil = {"state_dict": sd,
            "callbacks": [Call(subprocess.Popen, ["touch", marker]),
                          Call(runpy._run_code, f"open({marker!r}, 'w')", {})],
            "hook": Call(builtins.__import__, "os")}
    path = os.path.join(out, "evil_popen.ckpt")
    torch.save(clean, path)
    scratch = os.path.join(out, ".scratch.ckpt")
    torch.save(evil, scratch)
    with zipfile.ZipFile(scratch) as z:
        evil_pkl = z.read(next(n for n in z.namelist() if n.endswith("/data.pkl")))
    os.remove(scratch)
    with zipfile.ZipFile(path) as z:
        entries = [(i.filename, z.read(i)) for i in z.infolist()]
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        for name, data in entries:
            z.writestr(name, evil_pkl if name.endswith("/data.pkl") else data)
    keep("evil_popen.ckpt", clean)

    # Protocol 4: STACK_GLOBAL, and builtins spelled as such.
    obj = {"weight": rand(torch.bfloat16, (2, 2), gen),
           "evil": Call(builtins.exec, f"import os; os.system('{touch}')")}
    torch.save(obj, os.path.join(out, "evil_proto4.pth"), pickle_protocol=4)
    keep("evil_proto4.pth", obj)

    # Not a torch checkpoint at all: a plain pickle, hand-edited to say `os system`.
    plain = pickle.dumps({"evil": Call(os.system, touch)}, protocol=2)
    assert b"cposix\nsystem\n" in plain
    with open(os.path.join(out, "evil_plain.pth"), "wb") as f:
        f.write(plain.replace(b"cposix\nsystem\n", b"cos\nsystem\n"))
    kept["evil_plain.pth"] = {"tensors": {}}

    # A good one beside.
    obj = {"fine": rand(torch.float32, (3,), gen)}
    torch.save(obj, os.path.join(out, "good.bin"))
    keep("good.bin", obj)
    assert not os.path.exists(marker)
    print(json.dumps(kept, sort_keys=True))


def rewrite_zip(path, change):
    """Rewrites a zip entry by entry with Python's zipfile: change(name, data) gives
    (data, compression)."""
    with zipfile.ZipFile(path) as z:
        entries = [(i.filename, z.read(i)) for i in z.infolist()]
    with zipfile.ZipFile(path, "w") as z:
        for name, data in entries:
            data, how = change(name, data)
            z.writestr(zipfile.ZipInfo(name), data, compress_type=how)


def write_broken(out):
    gen = torch.Generator().manual_seed(5)
    os.makedirs(out, exist_ok=True)
    wrote = {}

    def p(name):
        return os.path.join(out, name)

    big = {"weight": rand(torch.float32, (64, 64), gen), "bias": rand(torch.float32, (64,), gen)}

    torch.save(big, p("trunc_zip.bin"))
    with open(p("trunc_zip.bin"), "r+b") as f:
        f.truncate(os.path.getsize(p("trunc_zip.bin")) // 2)
    wrote["trunc_zip.bin"] = "a zip checkpoint cut in half"

    torch.save(big, p("trunc_legacy.pt"), _use_new_zipfile_serialization=False)
    with open(p("trunc_legacy.pt"), "r+b") as f:
        f.truncate(os.path.getsize(p("trunc_legacy.pt")) - 1000)
    wrote["trunc_legacy.pt"] = "a legacy checkpoint missing the last 1000 bytes of its storages"

    torch.save(big, p("deflated.bin"))
    rewrite_zip(p("deflated.bin"), lambda n, d: (
        d, zipfile.ZIP_DEFLATED if "/data/" in n else zipfile.ZIP_STORED))
    wrote["deflated.bin"] = "a zip checkpoint whose storages are deflated"

    torch.save(big, p("bigendian.bin"))
    rewrite_zip(p("bigendian.bin"), lambda n, d: (
        b"big" if n.endswith("/byteorder") else d, zipfile.ZIP_STORED))
    wrote["bigendian.bin"] = "a zip checkpoint whose byteorder says big"

    torch.jit.save(torch.jit.script(torch.nn.Linear(2, 2)), p("scripted.pt"))
    wrote["scripted.pt"] = "a TorchScript archive"

    with open(p("random.bin"), "wb") as f:
        f.write(np.random.default_rng(1).integers(0, 256, 5000, dtype=np.uint8).tobytes())
    wrote["random.bin"] = "random bytes"
    with open(p("notes.bin"), "w") as f:
        f.write("not a checkpoint, just some words\n" * 10)
    wrote["notes.bin"] = "a text file"

    torch.save({"fine": rand(torch.float32, (3,), gen)}, p("good.pt"))
    wrote["good.pt"] = "a good zip checkpoint"
    print(json.dumps(wrote, sort_keys=True))


# ---------------------------------------------------------------- checks of a mount

def read(path, offset=0, n=None):
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read() if n is None else f.read(n)


def check_one(src, tdir, npy, widen):
    fmt = "pytorch-zip" if zipfile.is_zipfile(src) else "pytorch-legacy"
    real_src = os.path.realpath(src)
    by_name, npy_by_name, errors = tensor_files(tdir)
    want = dict(flatten(load(src)))
    for name, t in want.items():
        path = by_name.get(name)
        if path is None:
            errors.append(f"{name!r}: no file with this user.safetensors.name in {tdir}")
            continue
        stored = DTYPES[t.dtype]
        widened = widen == "f32" and stored in NARROW_FLOATS
        expected = t.float().contiguous().numpy().tobytes() if widened else raw(t)
        shape = json.dumps(list(t.shape), separators=(",", ":"))
        for key, value in (("user.safetensors.dtype", "F32" if widened else stored),
                           ("user.safetensors.shape", shape),
                           ("user.tensormount.format", fmt),
                           ("user.safetensors.data_offsets", None),
                           ("user.safetensors.source_dtype", stored if widened else None)):
            got = xattr(path, key)
            if got != value:
                errors.append(f"{name!r}: {key} is {got!r}, want {value!r}")
        got = read(path)
        if got != expected:
            errors.append(f"{name!r}: {len(got)} bytes (sha256 {sha(got)[:16]}) differ from "
                          f"torch's {len(expected)} (sha256 {sha(expected)[:16]})")
        if os.stat(path).st_size != len(expected):
            errors.append(f"{name!r}: st_size {os.stat(path).st_size}, want {len(expected)}")
        source, offset = xattr(path, "user.safetensors.source"), \
            xattr(path, "user.safetensors.offset")
        if t.is_contiguous():
            if source != real_src:
                errors.append(f"{name!r}: source is {source!r}, want {real_src!r}")
            if offset is None:
                errors.append(f"{name!r}: contiguous, yet no user.safetensors.offset")
            elif source is not None:
                # What a GPU loader does: pread the stored bytes straight from the source.
                at = read(source, int(offset), len(raw(t)))
                if at != raw(t):
                    errors.append(f"{name!r}: the {len(raw(t))} bytes at offset {offset} of the "
                                  f"source are not the tensor's")
        elif source is not None or offset is not None:
            errors.append(f"{name!r}: not contiguous in the checkpoint, yet source={source!r} "
                          f"offset={offset!r}")
        if npy:
            errors += check_npy(name, stored, t, npy_by_name.pop(name, None))
    for name in sorted(set(by_name) - set(want)):
        errors.append(f"{name!r}: file {by_name[name]} is not a tensor of {src}")
    for name, path in sorted(npy_by_name.items()) if npy else []:
        errors.append(f"{name!r}: NPY view {path} is not a tensor of {src}")
    return errors, len(want)


def check_npy(name, stored, t, path):
    if stored not in NUMPY:
        return [f"{name!r}: {stored} has no numpy dtype, yet an NPY view {path}"] if path else []
    if path is None:
        return [f"{name!r}: no NPY view"]
    errors = []
    for mode in ("r", None):
        a = np.load(path, mmap_mode=mode, allow_pickle=False)
        if a.dtype.str != NUMPY[stored] or list(a.shape) != list(t.shape) \
                or np.ascontiguousarray(a).tobytes() != raw(t):
            errors.append(f"{name!r}: numpy.load(mmap_mode={mode!r}) gives {a.dtype.str} "
                          f"{a.shape}, want {NUMPY[stored]} {tuple(t.shape)} and torch's bytes")
        del a
    return errors


def report(errors, what):
    """Prints each error as a MISMATCH line (exit status 1), or `ok WHAT`."""
    for e in errors:
        print(f"MISMATCH {e}")
    if errors:
        return 1
    print(f"ok {what}")
    return 0


def check_mount(pairs, npy, widen):
    total, errors = 0, []
    for src, tdir in pairs:
        e, n = check_one(src, tdir, npy, widen)
        errors += [f"{src}: {x}" for x in e]
        total += n
    return report(errors, f"{total} tensors")


def same(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and raw(a) == raw(b)


def safe_open_cmd(pairs):
    from safetensors import safe_open
    errors, total = [], 0
    for virtual, src in pairs:
        sd = state_dict(load(src))
        with safe_open(virtual, framework="pt") as f:
            keys = set(f.keys())
            if keys != set(sd):
                errors.append(f"{virtual}: keys {sorted(keys ^ set(sd))} not in both")
            for k in keys & set(sd):
                if not same(f.get_tensor(k), sd[k]):
                    errors.append(f"{virtual}: {k!r} differs from torch.load of {src}")
                total += 1
    return report(errors, f"{total} tensors")


def from_pretrained(mounted, source):
    import transformers
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    model = transformers.AutoModel.from_pretrained(mounted, use_safetensors=True)
    with open(os.path.join(source, "pytorch_model.bin.index.json")) as f:
        shards = sorted(set(json.load(f)["weight_map"].values()))
    want = {}
    for s in shards:
        want.update(load(os.path.join(source, s)))
    got = model.state_dict()
    errors = [f"{k!r}: missing from the loaded model" for k in sorted(set(want) - set(got))]
    errors += [f"{k!r}: differs" for k in sorted(set(want) & set(got)) if not same(got[k], want[k])]
    return report(errors, f"{len(want)} tensors from {len(shards)} shards")


def save(path, seed, legacy):
    import torch
    g = torch.Generator().manual_seed(seed)
    sd = {"w": torch.randn(4, 3, generator=g), "b": torch.arange(seed, seed + 5)}
    torch.save(sd, path, _use_new_zipfile_serialization=not legacy)


def pairs_of(items):
    if len(items) % 2:
        raise SystemExit("expected pairs of arguments")
    return list(zip(items[::2], items[1::2]))


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("write-fixtures")
    p.add_argument("dir")
    p.add_argument("--only", choices=("core", "sharded"))
    sub.add_parser("tensors").add_argument("files", nargs="+")
    sub.add_parser("convert").add_argument("pairs", nargs="+")
    sub.add_parser("globals").add_argument("files", nargs="+")
    p = sub.add_parser("write-malicious")
    p.add_argument("dir")
    p.add_argument("marker")
    sub.add_parser("write-broken").add_argument("dir")
    p = sub.add_parser("check-mount")
    p.add_argument("--npy", action="store_true")
    p.add_argument("--widen", choices=("f32",))
    p.add_argument("pairs", nargs="+")
    sub.add_parser("safe-open").add_argument("pairs", nargs="+")
    p = sub.add_parser("save")
    p.add_argument("file")
    p.add_argument("seed", type=int)
    p.add_argument("--legacy", action="store_true")
    p = sub.add_parser("from-pretrained")
    p.add_argument("mounted")
    p.add_argument("source")
    a = parser.parse_args()

    if a.cmd == "write-fixtures":
        return write_fixtures(a.dir, a.only) or 0
    if a.cmd == "tensors":
        return tensors(a.files) or 0
    if a.cmd == "convert":
        return convert(pairs_of(a.pairs)) or 0
    if a.cmd == "globals":
        return globals_cmd(a.files) or 0
    if a.cmd == "write-malicious":
        return write_malicious(a.dir, a.marker) or 0
    if a.cmd == "write-broken":
        return write_broken(a.dir) or 0
    if a.cmd == "check-mount":
        return check_mount(pairs_of(a.pairs), a.npy, a.widen)
    if a.cmd == "save":
        return save(a.file, a.seed, a.legacy) or 0
    if a.cmd == "safe-open":
        return safe_open_cmd(pairs_of(a.pairs))
    return from_pretrained(a.mounted, a.source)


if __name__ == "__main__":
    sys.exit(main())
