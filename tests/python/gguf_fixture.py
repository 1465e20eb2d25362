#!/usr/bin/env python3
"""A GGUF fixture and what gguf-py makes of it: the oracle of the GGUF reader and dequantizer.

    gguf_fixture.py write OUT.gguf [--seed N]
        Writes a GGUF v3 file with gguf-py's GGUFWriter: for every type gguf-py dequantizes
        (quantized ones, F32, F16 and BF16) one tensor of random blocks named by the type in
        lower case (`q4_k.weight`), 4 rows of 4 blocks (one element per block for the plain
        float types: 4 x 64 elements), whose float16 scale fields are, in some blocks, NaNs
        (quiet, signalling, negative), infinities, subnormals and zeros; and metadata of every
        value type, including a string array of 100000 tokens (too long to be kept).

    gguf_fixture.py expect IN.gguf OUTDIR
        Reads IN.gguf with GGUFReader and writes, for every tensor whose type gguf-py
        dequantizes, OUTDIR/<name>.f32: `gguf.quants.dequantize(t.data, t.tensor_type)` as
        little-endian float32, C order; and OUTDIR/header.json: the alignment, the data offset,
        per tensor its name, type name, dims as stored, absolute offset and size in bytes, and
        per metadata key its value type (and element type and length for an array) and value,
        as gguf-py reads them.

    gguf_fixture.py split OUTDIR --shards N [--seed N]
        Writes `OUTDIR/split-0000K-of-0000N.gguf`, one model of Q8_0, Q4_K, Q6_K, F16 and F32
        tensors (the quantized ones of random blocks)
        that gguf-py's GGUFWriter splits into N shards, as gguf-split does (`split.*` keys).

    gguf_fixture.py safetensors FILE GGUF...
        Loads FILE, a safetensors file (with the official `safetensors.torch.load_file`) or an
        index of such files (each shard with `safe_open`), and compares it with the tensors of
        the GGUF files as gguf-py reads them: each tensor of a type safetensors has must be there
        as stored (type, shape, bytes), each quantized one as float32 holding exactly
        `gguf.quants.dequantize`'s values. Prints JSON: the tensors compared, how many were
        dequantized, what did not match, and (for one file) its `__metadata__` beside gguf-py's
        scalar keys as text.

Needs gguf (0.19.0) and numpy; `safetensors` also needs torch and safetensors.
"""
import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np
from gguf import GGUFReader, GGUFWriter, GGMLQuantizationType as T, GGUFValueType, quants
from gguf.constants import GGML_QUANT_SIZES

ROWS, BLOCKS = 4, 4

# Float16 bit patterns the scale fields take in some blocks.
SPECIAL_F16 = [
    0x7E00,  # quiet NaN
    0x7C01,  # signalling NaN (numpy keeps it signalling when it widens it)
    0xFE01,  # negative NaN with a payload
    0x7C00,  # +inf
    0xFC00,  # -inf
    0x0001,  # smallest subnormal
    0x83FF,  # largest negative subnormal
    0x0000,  # +0
    0x8000,  # -0
    0x3C00,  # 1.0
    0x7BFF,  # largest finite
]

# Byte offsets of the float16 scale fields of each block, by type.
F16_FIELDS = {
    T.Q4_0: [0], T.Q4_1: [0, 2], T.Q5_0: [0], T.Q5_1: [0, 2], T.Q8_0: [0],
    T.Q2_K: [80, 82], T.Q3_K: [108], T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208],
    T.TQ1_0: [52], T.TQ2_0: [64],
    T.IQ2_XXS: [0], T.IQ2_XS: [0], T.IQ2_S: [0], T.IQ3_XXS: [0], T.IQ3_S: [0],
    T.IQ1_S: [0], T.IQ4_NL: [0], T.IQ4_XS: [0],
}


def dequantizable() -> list[T]:
    """Every type gguf.quants.dequantize converts, in id order."""
    types = []
    for t in T:
        block, size = GGML_QUANT_SIZES[t]
        try:
            quants.dequantize(np.zeros((1, size), dtype=np.uint8), t)
        except NotImplementedError:
            continue
        types.append(t)
    return types


def special_blocks(t: T, blocks: np.ndarray, rng: np.random.Generator) -> None:
    """Overwrites the scale fields of about half the blocks with special values."""
    for b in blocks:
        if t in F16_FIELDS:
            for at in F16_FIELDS[t]:
                if rng.random() < 0.6:
                    v = SPECIAL_F16[rng.integers(len(SPECIAL_F16))]
                    b[at:at + 2] = np.array([v], dtype="<u2").view(np.uint8)
        elif t == T.IQ1_M:
            # d is the top nibble of each of the 4 scale words (bytes 48..56).
            if rng.random() < 0.6:
                v = SPECIAL_F16[rng.integers(len(SPECIAL_F16))]
                words = b[48:56].view("<u2").copy()
                for i in range(4):
                    words[i] = (words[i] & 0x0FFF) | (((v >> (4 * i)) & 0xF) << 12)
                b[48:56] = words.view(np.uint8)
        elif t == T.MXFP4:
            if rng.random() < 0.6:
                b[0] = [0, 1, 2, 127, 254, 255][rng.integers(6)]
        elif t == T.NVFP4:
            for i in range(4):
                if rng.random() < 0.4:
                    b[i] = [0x00, 0x7F, 0x80, 0xFF, 0x01, 0x08][rng.integers(6)]


def write(out: Path, seed: int) -> None:
    rng = np.random.default_rng(seed)
    w = GGUFWriter(out, "llama")
    w.add_uint8("test.u8", 200)
    w.add_int8("test.i8", -100)
    w.add_uint16("test.u16", 60000)
    w.add_int16("test.i16", -30000)
    w.add_uint32("test.u32", 4000000000)
    w.add_int32("test.i32", -2000000000)
    w.add_float32("test.f32", 0.1)
    w.add_float32("test.f32_nan", float("nan"))
    w.add_bool("test.bool", True)
    w.add_string("test.string", "héllo")
    w.add_uint64("test.u64", 2**63 + 5)
    w.add_int64("test.i64", -(2**62))
    w.add_float64("test.f64", -2.5)
    w.add_array("test.strings", ["a", "bc", "déf"])
    w.add_array("test.ints", [1, -2, 3])
    w.add_array("tokenizer.ggml.tokens", [f"tok{i}" for i in range(100000)])
    w.add_uint16("split.no", 0)
    w.add_uint16("split.count", 1)

    types = dequantizable()
    w.add_int32("split.tensors.count", len(types))
    for t in types:
        block, size = GGML_QUANT_SIZES[t]
        name = f"{t.name.lower()}.weight"
        if block == 1:
            cols = 64
            raw = rng.integers(0, 256, size=(ROWS, cols * size), dtype=np.uint8)
            if t == T.F16:
                h = raw.view("<u2")
                h.flat[: len(SPECIAL_F16)] = SPECIAL_F16
            if t == T.F32:
                w.add_tensor(name, raw.view("<f4"))
            elif t == T.F16:
                w.add_tensor(name, raw.view("<f2"))
            else:
                w.add_tensor(name, raw, raw_dtype=t)
            continue
        raw = rng.integers(0, 256, size=(ROWS * BLOCKS, size), dtype=np.uint8)
        special_blocks(t, raw, rng)
        w.add_tensor(name, raw.reshape(ROWS, BLOCKS * size), raw_dtype=t)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def json_safe(v):
    """A metadata value as JSON, with NaN and infinities as the strings "NaN", "Infinity" and
    "-Infinity" (what the Rust reader's to_json gives)."""
    if isinstance(v, list):
        return [json_safe(x) for x in v]
    if isinstance(v, float) and not math.isfinite(v):
        return "NaN" if math.isnan(v) else ("Infinity" if v > 0 else "-Infinity")
    return v


def expect(path: Path, outdir: Path) -> None:
    outdir.mkdir(parents=True, exist_ok=True)
    r = GGUFReader(path)
    tensors = []
    for t in r.tensors:
        tensors.append({
            "name": t.name,
            "type": t.tensor_type.name,
            "dims": [int(d) for d in t.shape],
            "offset": int(t.data_offset),
            "size": int(t.n_bytes),
        })
        try:
            with np.errstate(all="ignore"):
                values = quants.dequantize(t.data, t.tensor_type)
        except NotImplementedError:
            continue
        np.ascontiguousarray(values, dtype="<f4").tofile(outdir / f"{t.name}.f32")
    metadata = []
    for name, field in r.fields.items():
        if name.startswith("GGUF."):
            continue  # the version and counts, which gguf-py lists as fields
        entry = {"key": name, "type": field.types[0].name}
        if field.types[0] == GGUFValueType.ARRAY:
            entry["element_type"] = field.types[-1].name if len(field.types) > 1 else None
            entry["length"] = len(field.data)
        value = field.contents()
        entry["value"] = json_safe(value)
        metadata.append(entry)
    header = {
        "alignment": int(r.alignment),
        "data_offset": int(r.data_offset),
        "tensors": tensors,
        "metadata": metadata,
    }
    (outdir / "header.json").write_text(json.dumps(header, indent=1))


def split(outdir: Path, shards: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    names = [f"blk.{b}.{n}" for b in range(shards) for n in ("attn_q.weight", "ffn_up.weight", "attn_norm.weight")]
    types = [T.Q8_0, T.Q4_K, T.Q6_K, T.F16, T.F32]
    w = GGUFWriter(outdir / "split.gguf", "llama", split_max_tensors=3)
    w.add_block_count(shards)
    for i, name in enumerate(names):
        t = types[i % len(types)]
        if t in (T.F16, T.F32):
            a = rng.standard_normal((4, 256)).astype(np.float16 if t == T.F16 else np.float32)
            w.add_tensor(name, a)
        else:
            block, size = GGML_QUANT_SIZES[t]
            q = rng.integers(0, 256, (4, 256 // block * size), dtype=np.uint8)
            w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def scalar_text(f) -> str | None:
    """A scalar key's value as tensormount writes it in `__metadata__`, or None."""
    if len(f.types) != 1 or f.types[0] == GGUFValueType.ARRAY:
        return None
    v = f.contents()
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return json.dumps(v) if math.isfinite(v) else None
    return str(v)


def check_safetensors(path: Path, ggufs: list[Path]) -> None:
    import torch
    from safetensors import safe_open
    from safetensors.torch import load_file

    if path.name.endswith(".index.json"):
        loaded, metadata = {}, None
        for shard in sorted(set(json.loads(path.read_text())["weight_map"].values())):
            with safe_open(path.parent / shard, framework="pt") as f:
                for k in f.keys():
                    loaded[k] = f.get_tensor(k)
    else:
        loaded = load_file(path)
        with safe_open(path, framework="pt") as f:
            metadata = f.metadata()
    report = {"compared": 0, "dequantized": 0, "wrong": [], "missing": [], "extra": []}
    seen = set()
    scalars = {}
    for g in ggufs:
        r = GGUFReader(g)
        for f in r.fields.values():
            if not f.name.startswith("GGUF.") and (text := scalar_text(f)) is not None:
                scalars.setdefault(f.name, text)
        for t in r.tensors:
            seen.add(t.name)
            got = loaded.get(t.name)
            if got is None:
                report["missing"].append(t.name)
                continue
            shape = [int(d) for d in reversed(t.shape)]
            if t.tensor_type in (T.F32, T.F16, T.BF16):
                want = np.asarray(t.data).tobytes()
                dtype = {T.F32: torch.float32, T.F16: torch.float16, T.BF16: torch.bfloat16}[t.tensor_type]
            else:
                want = quants.dequantize(t.data, t.tensor_type).astype("<f4").tobytes()
                dtype = torch.float32
                report["dequantized"] += 1
            have = got.contiguous().view(torch.uint8).numpy().tobytes()
            if got.dtype != dtype or list(got.shape) != shape or have != want:
                report["wrong"].append(f"{t.name}: {got.dtype} {list(got.shape)}, want {dtype} {shape}")
            report["compared"] += 1
    report["extra"] = sorted(set(loaded) - seen)
    if metadata is not None:
        report["metadata"] = metadata
        report["scalars"] = scalars
    print(json.dumps(report))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    pw = sub.add_parser("write")
    pw.add_argument("out", type=Path)
    pw.add_argument("--seed", type=int, default=0)
    pe = sub.add_parser("expect")
    pe.add_argument("gguf", type=Path)
    pe.add_argument("outdir", type=Path)
    ps = sub.add_parser("split")
    ps.add_argument("outdir", type=Path)
    ps.add_argument("--shards", type=int, required=True)
    ps.add_argument("--seed", type=int, default=0)
    pc = sub.add_parser("safetensors")
    pc.add_argument("file", type=Path)
    pc.add_argument("gguf", type=Path, nargs="+")
    a = p.parse_args()
    if a.cmd == "write":
        write(a.out, a.seed)
    elif a.cmd == "expect":
        expect(a.gguf, a.outdir)
    elif a.cmd == "split":
        split(a.outdir, a.shards, a.seed)
    else:
        check_safetensors(a.file, a.gguf)
    return 0


if __name__ == "__main__":
    sys.exit(main())
