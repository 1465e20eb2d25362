#!/usr/bin/env python3
"""Independent oracle for `tensormount diff` (tests/suite/diff.rs).

Run with the venv python ($TENSORMOUNT_PYTHON), which has torch, the official safetensors,
numpy and huggingface_hub (tests/python/requirements.txt). Fixtures are written by the real
writers (safetensors.torch.save_file, torch.save, huggingface_hub's sharding); comparisons load
every tensor with the official readers (safetensors.torch.load_file, torch.load(weights_only=True))
and compare them with torch and numpy, never with tensormount.

  diff_oracle.py write DIR [CASE...]
                                  write the cases (all, or those named) into DIR/CASE/{a,b};
                                  JSON {CASE: [A, B]}
  diff_oracle.py compare A B      the diff of A and B by the rules of `tensormount diff --json
                                  --values`: JSON {"same", "only_in_a", "only_in_b", "renamed",
                                  "changed", "differ"}, and "exit": 0 or 1

Units (one model each): a single file is the unit ""; in a directory, each index
(NAME.safetensors.index.json, NAME.bin.index.json) is a unit of the tensors of its weight map,
and each weight file no index names is a unit of its own; a unit's key is its directory and
stem, `pytorch_model` named `model` as Hugging Face names the conversion, unless another unit
of the side has that key. One unit on each side: those two are compared (under the key if both
have it, else ""); else units are paired by key, a single file by its stem's conversion name.
"""
import hashlib
import json
import os
import shutil
import sys
import warnings

warnings.filterwarnings("ignore")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from huggingface_hub import split_torch_state_dict_into_shards  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402

DTYPES = {
    torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
    torch.int8: "I8", torch.int16: "I16", torch.int32: "I32", torch.int64: "I64",
    torch.uint8: "U8", torch.bool: "BOOL",
}
FLOATS = {torch.float64, torch.float32, torch.float16, torch.bfloat16}
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt")


# ---------------------------------------------------------------- fixtures

def base_model(seed):
    """A small model: a tensor over 4 MiB (read in several chunks), and one of each kind."""
    g = torch.Generator().manual_seed(seed)
    return {
        "embed.weight": torch.randn(1100, 1024, generator=g),  # 4.3 MiB of F32
        "layers.0.attn.q.weight": torch.randn(64, 32, generator=g),
        "layers.0.attn.q.bias": torch.randn(64, generator=g).to(torch.float16),
        "layers.0.norm.weight": torch.randn(48, generator=g).to(torch.bfloat16),
        "layers.0.scale": torch.tensor(0.25, dtype=torch.float64),
        "position_ids": torch.arange(77, dtype=torch.int64),
    }


def save_st(sd, path):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    save_file({k: v.contiguous() for k, v in sd.items()}, path)


def save_sharded(sd, out, max_shard_size):
    """Shards as transformers writes them: huggingface_hub's split, save_file, the index."""
    os.makedirs(out, exist_ok=True)
    split = split_torch_state_dict_into_shards(sd, max_shard_size=max_shard_size)
    for filename, names in split.filename_to_tensors.items():
        save_file({n: sd[n].contiguous() for n in names}, os.path.join(out, filename))
    assert split.is_sharded, "the fixture must be sharded"
    index = {"metadata": split.metadata, "weight_map": split.tensor_to_filename}
    with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
        json.dump(index, f, indent=2)


def write(out, only):
    cases = {}

    def case(name):
        a, b = os.path.join(out, name, "a"), os.path.join(out, name, "b")
        if only and name not in only:
            # Written elsewhere, out of the way: each case is made the same way every time.
            a, b = os.path.join(out, ".unused", name, "a"), os.path.join(out, ".unused", name, "b")
        else:
            cases[name] = [a, b]
        os.makedirs(a)
        os.makedirs(b)
        return a, b

    sd = base_model(1)

    a, b = case("identical")
    save_st(sd, os.path.join(a, "model.safetensors"))
    shutil.copy(os.path.join(a, "model.safetensors"), b)

    a, b = case("one_element")
    save_st(sd, os.path.join(a, "model.safetensors"))
    other = {k: v.clone() for k, v in sd.items()}
    other["embed.weight"][1099, 1000] += 0.123
    save_st(other, os.path.join(b, "model.safetensors"))

    a, b = case("one_bf16")
    save_st(sd, os.path.join(a, "model.safetensors"))
    other = {k: v.clone() for k, v in sd.items()}
    other["layers.0.norm.weight"][7] = -other["layers.0.norm.weight"][7] * 3
    save_st(other, os.path.join(b, "model.safetensors"))

    a, b = case("removed")
    save_st(sd, os.path.join(a, "model.safetensors"))
    save_st({k: v for k, v in sd.items() if k != "layers.0.attn.q.bias"},
            os.path.join(b, "model.safetensors"))

    a, b = case("added")
    save_st(sd, os.path.join(a, "model.safetensors"))
    save_st({**sd, "lm_head.weight": torch.ones(8, 4)}, os.path.join(b, "model.safetensors"))

    a, b = case("renamed")
    save_st(sd, os.path.join(a, "model.safetensors"))
    other = dict(sd)
    other["layers.0.attn.query.weight"] = other.pop("layers.0.attn.q.weight")
    save_st(other, os.path.join(b, "model.safetensors"))

    a, b = case("dtype")
    save_st(sd, os.path.join(a, "model.safetensors"))
    save_st({**sd, "layers.0.attn.q.weight": sd["layers.0.attn.q.weight"].to(torch.float16)},
            os.path.join(b, "model.safetensors"))

    # A sharded set (two shards: the large tensor, the rest) against one file of the same tensors.
    a, b = case("sharded")
    save_sharded(sd, a, max_shard_size=1 << 20)
    save_st(sd, os.path.join(b, "model.safetensors"))

    # The same, one element changed in a tensor of the second shard.
    a, b = case("sharded_changed")
    save_sharded(sd, a, max_shard_size=1 << 20)
    other = {k: v.clone() for k, v in sd.items()}
    other["position_ids"][5] = 1000
    save_st(other, os.path.join(b, "model.safetensors"))

    # A checkpoint by torch.save (with a transposed view, stored strided) against its conversion.
    pt = dict(sd)
    pt["lm_head.weight"] = sd["layers.0.attn.q.weight"].t()
    pt["tied.weight"] = pt["lm_head.weight"]
    a, b = case("pickle")
    torch.save(pt, os.path.join(a, "pytorch_model.bin"))
    save_st(pt, os.path.join(b, "model.safetensors"))

    a, b = case("pickle_changed")
    torch.save(pt, os.path.join(a, "pytorch_model.bin"))
    other = {k: v.clone().contiguous() for k, v in pt.items()}
    other["lm_head.weight"][2, 3] = 10.0
    save_st(other, os.path.join(b, "model.safetensors"))

    # One file against a directory of two models (a checkpoint beside its conversion, one
    # element changed in the conversion): the file is paired with the unit of its own name.
    a, b = case("file_vs_both")
    torch.save(pt, os.path.join(b, "pytorch_model.bin"))
    other = {k: v.clone().contiguous() for k, v in pt.items()}
    other["position_ids"][0] = -1
    save_st(other, os.path.join(b, "model.safetensors"))
    save_st(pt, os.path.join(a, "model.safetensors"))
    if "file_vs_both" in cases:
        cases["file_vs_both"][0] = os.path.join(a, "model.safetensors")

    # A diffusers-like tree: units by folder.
    a, b = case("folders")
    small = {k: v for k, v in sd.items() if k != "embed.weight"}
    save_st(small, os.path.join(a, "unet", "diffusion_pytorch_model.safetensors"))
    save_st(small, os.path.join(a, "text_encoder", "model.safetensors"))
    save_st(small, os.path.join(a, "vae", "diffusion_pytorch_model.safetensors"))
    save_st(small, os.path.join(b, "unet", "diffusion_pytorch_model.safetensors"))
    changed = {**small, "layers.0.scale": torch.tensor(0.5, dtype=torch.float64)}
    save_st(changed, os.path.join(b, "text_encoder", "model.safetensors"))
    save_st(small, os.path.join(b, "safety_checker", "model.safetensors"))

    shutil.rmtree(os.path.join(out, ".unused"), ignore_errors=True)
    missing = set(only) - set(cases)
    assert not missing, f"no such case: {sorted(missing)}"
    print(json.dumps(cases))


# ---------------------------------------------------------------- comparing

def load(path):
    if path.endswith(".safetensors"):
        return load_file(path)
    return torch.load(path, weights_only=True, map_location="cpu")


def stem_of(name):
    for suffix in (".safetensors.index.json", ".bin.index.json") + WEIGHT_SUFFIXES:
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)]
    return None


def converted(stem):
    return "model" + stem[len("pytorch_model"):] if stem.startswith("pytorch_model") else stem


def units(side):
    if os.path.isfile(side):
        return {"": load(side)}
    found = {}  # (folder, stem) -> tensors
    for root, _, files in os.walk(side):
        folder = os.path.relpath(root, side)
        folder = "" if folder == "." else folder
        named = set()
        for f in sorted(files):
            if f.endswith(".index.json") and stem_of(f):
                with open(os.path.join(root, f)) as fh:
                    weight_map = json.load(fh)["weight_map"]
                shards = {s: load(os.path.join(root, s)) for s in set(weight_map.values())}
                named |= set(weight_map.values())
                found[(folder, stem_of(f))] = {n: shards[s][n] for n, s in weight_map.items()}
        for f in sorted(files):
            if f.endswith(WEIGHT_SUFFIXES) and f not in named and stem_of(f):
                found[(folder, stem_of(f))] = load(os.path.join(root, f))
    join = lambda folder, stem: f"{folder}/{stem}" if folder else stem  # noqa: E731
    keys = [join(folder, converted(stem)) for folder, stem in found]
    out = {}
    for (folder, stem), tensors in found.items():
        key = join(folder, converted(stem))
        out[key if keys.count(key) == 1 else join(folder, stem)] = tensors
    return out


def raw(t):
    return t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def described(t):
    return DTYPES[t.dtype], list(t.shape)


def values(a, b):
    x = a.to(torch.float64).reshape(-1).numpy()
    y = b.to(torch.float64).reshape(-1).numpy()
    equal = (x == y) | (np.isnan(x) & np.isnan(y))
    one_nan = np.isnan(x) != np.isnan(y)
    with np.errstate(invalid="ignore", over="ignore"):
        d = np.where(one_nan, np.inf, np.abs(x - y))[~equal]
    top = float(d.max()) if d.size else 0.0
    return {"elements": int(x.size), "differing": int((~equal).sum()),
            "max_abs_diff": top if np.isfinite(top) else "inf"}


def compare(side_a, side_b):
    ua, ub = units(side_a), units(side_b)
    if len(ua) == 1 and len(ub) == 1:
        (ka, ta), (kb, tb) = next(iter(ua.items())), next(iter(ub.items()))
        pairs, alone_a, alone_b = [(ka if ka == kb else "", ta, tb)], {}, {}
    else:
        # A single file against several models: paired by its own conversion name.
        for side, found in ((side_a, ua), (side_b, ub)):
            if list(found) == [""] and stem_of(os.path.basename(side)):
                found[converted(stem_of(os.path.basename(side)))] = found.pop("")
        pairs = [(k, ua[k], ub[k]) for k in ua if k in ub]
        alone_a = {k: v for k, v in ua.items() if k not in ub}
        alone_b = {k: v for k, v in ub.items() if k not in ua}
    out = {"same": 0, "only_in_a": [], "only_in_b": [], "renamed": [], "changed": [], "differ": []}

    def entry(unit, name, t):
        dtype, shape = described(t)
        return {"unit": unit, "name": name, "dtype": dtype, "shape": shape}

    for alone, key in ((alone_a, "only_in_a"), (alone_b, "only_in_b")):
        for unit, tensors in alone.items():
            out[key] += [entry(unit, n, t) for n, t in tensors.items()]
    for unit, ta, tb in pairs:
        for name in sorted(set(ta) & set(tb)):
            a, b = ta[name], tb[name]
            if described(a) != described(b):
                dtype, shape = described(b)
                out["changed"].append({"unit": unit, "name": name,
                                       "a": dict(zip(("dtype", "shape"), described(a))),
                                       "b": {"dtype": dtype, "shape": shape}})
            elif raw(a) == raw(b):
                out["same"] += 1
            else:
                d = entry(unit, name, a)
                if a.dtype in FLOATS:
                    d.update(values(a, b))
                out["differ"].append(d)
        lone_b = sorted(set(tb) - set(ta))
        digest = lambda t: (described(t), hashlib.sha256(raw(t)).hexdigest())  # noqa: E731
        taken = set()
        for name in sorted(set(ta) - set(tb)):
            match = next((n for n in lone_b if n not in taken
                          and digest(tb[n]) == digest(ta[name])), None)
            if match is None:
                out["only_in_a"].append(entry(unit, name, ta[name]))
            else:
                taken.add(match)
                e = entry(unit, name, ta[name])
                out["renamed"].append({"unit": unit, "a": name, "b": match,
                                       "dtype": e["dtype"], "shape": e["shape"]})
        out["only_in_b"] += [entry(unit, n, tb[n]) for n in lone_b if n not in taken]
    for key in ("only_in_a", "only_in_b", "changed", "differ"):
        out[key].sort(key=lambda e: (e["unit"], e["name"]))
    out["renamed"].sort(key=lambda e: (e["unit"], e["a"]))
    found = sum(len(out[k]) for k in out if k != "same")
    out["exit"] = 0 if found == 0 else 1
    print(json.dumps(out))


def main():
    if len(sys.argv) >= 3 and sys.argv[1] == "write":
        write(sys.argv[2], sys.argv[3:])
    elif len(sys.argv) == 4 and sys.argv[1] == "compare":
        compare(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
