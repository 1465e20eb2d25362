#!/usr/bin/env python3
"""Write a tiny, deterministic, sharded safetensors model (standard library only).

Usage: python3 examples/make_tiny_model.py [OUT_DIR]   (default: examples/tiny-model)

Each shard is laid out byte-for-byte like the reference writer (the Rust
`safetensors` crate, also used by the Python package): 8-byte little-endian
header length N, compact JSON header with "__metadata__" first, padded with
spaces so that N is a multiple of 8, then the tensors back to back, ordered by
descending dtype (the crate's enum order, i.e. roughly by alignment) then name.
"""
import argparse
import json
import math
import os
import struct

HIDDEN, LAYERS, VOCAB = 64, 2, 256
SHARDS = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]

# dtype -> (struct format char, element size). Order = the crate's Dtype enum
# order, which is what the reference writer sorts by (descending).
DTYPES = {
    "BOOL": ("?", 1), "U8": ("B", 1), "I8": ("b", 1),
    "I16": ("h", 2), "U16": ("H", 2), "F16": ("e", 2), "BF16": (None, 2),
    "I32": ("i", 4), "U32": ("I", 4), "F32": ("f", 4),
    "F64": ("d", 8), "I64": ("q", 8), "U64": ("Q", 8),
}
DTYPE_RANK = {name: rank for rank, name in enumerate(DTYPES)}


def numel(shape):
    return math.prod(shape)  # math.prod(()) == 1: a scalar has one element


def weight(seed, scale=0.02):
    """Deterministic pseudo-weights: a scaled sinusoid, distinct per seed."""
    return lambda i: scale * math.sin(0.37 * i + seed)


def tensors():
    """The model: list of (name, dtype, shape, value_of_index, shard_index)."""
    out = [("model.embed_tokens.weight", "BF16", [VOCAB, HIDDEN], weight(1), 0)]
    for layer in range(LAYERS):
        p = f"model.layers.{layer}."
        out += [
            (p + "self_attn.q_proj.weight", "BF16", [HIDDEN, HIDDEN], weight(10 + layer), layer),
            (p + "self_attn.k_proj.weight", "F16", [HIDDEN // 2, HIDDEN], weight(20 + layer), layer),
            (p + "mlp.up_proj.weight", "F32", [2 * HIDDEN, HIDDEN], weight(30 + layer), layer),
            (p + "input_layernorm.weight", "F32", [HIDDEN], lambda i, l=layer: 1.0 + 0.01 * math.cos(i + l), layer),
        ]
    int64s = [-(1 << 40), -1, 0, (1 << 62) + 5]
    out += [
        ("model.norm.weight", "F32", [HIDDEN], lambda i: 1.0 - 0.005 * i, 1),
        ("lm_head.weight", "BF16", [VOCAB, HIDDEN], weight(2), 1),
        ("model.layers.0.mlp.up_proj.weight_scale", "F64", [], lambda i: 0.125, 0),
        ("model.rotary.inv_freq_i32", "I32", [16], lambda i: round(1e6 * 10000.0 ** (-i / 16)), 1),
        ("model.mask", "BOOL", [8], lambda i: i % 3 == 0, 1),
        ("model.layers.1.self_attn.q_proj.qweight", "U8", [HIDDEN, HIDDEN // 2], lambda i: (37 * i + 11) % 256, 1),
        ("model.layers.1.self_attn.q_proj.zeros", "I64", [4], lambda i: int64s[i], 1),
    ]
    return out


def bf16_bits(x):
    """Upper 16 bits of the float32 pattern, rounded to nearest even."""
    bits = struct.unpack("<I", struct.pack("<f", x))[0]
    return (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16


def encode(dtype, shape, value):
    values = [value(i) for i in range(numel(shape))]
    if dtype == "BF16":
        return struct.pack(f"<{len(values)}H", *map(bf16_bits, values))
    return struct.pack(f"<{len(values)}{DTYPES[dtype][0]}", *values)


def serialize(entries):
    """entries: list of (name, dtype, shape, data). Returns the file's bytes."""
    entries = sorted(entries, key=lambda e: e[0])  # by name, then (stable) by dtype
    entries.sort(key=lambda e: DTYPE_RANK[e[1]], reverse=True)
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, dtype, shape, data in entries:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    hbytes = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode()
    hbytes += b" " * (-len(hbytes) % 8)
    return struct.pack("<Q", len(hbytes)) + hbytes + b"".join(e[3] for e in entries)


def write(path, data):
    with open(path, "wb") as f:
        f.write(data)
    print(f"wrote {path} ({len(data)} bytes)")


def write_json(path, obj):
    write(path, (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode())


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tiny-model")
    parser.add_argument("out_dir", nargs="?", default=default)
    out_dir = parser.parse_args().out_dir
    os.makedirs(out_dir, exist_ok=True)

    write_json(os.path.join(out_dir, "config.json"), {
        "architectures": ["TinyForCausalLM"], "hidden_size": HIDDEN,
        "num_hidden_layers": LAYERS, "vocab_size": VOCAB,
        "torch_dtype": "bfloat16", "model_type": "tiny",
    })

    shards = [[] for _ in SHARDS]
    weight_map, total = {}, 0
    for name, dtype, shape, value, shard in tensors():
        data = encode(dtype, shape, value)
        assert len(data) == numel(shape) * DTYPES[dtype][1]
        shards[shard].append((name, dtype, shape, data))
        weight_map[name] = SHARDS[shard]
        total += len(data)
    for file_name, entries in zip(SHARDS, shards):
        for name, dtype, shape, data in sorted(entries):
            print(f"  {name:45} {dtype:5} {str(shape):10} {len(data):6} bytes")
        write(os.path.join(out_dir, file_name), serialize(entries))
    write_json(os.path.join(out_dir, "model.safetensors.index.json"),
               {"metadata": {"total_size": total}, "weight_map": weight_map})


if __name__ == "__main__":
    main()
