#!/usr/bin/env python3
"""Writes the committed seed corpus, fuzz/seeds/<target>/, from scratch (run from anywhere).

Small hand-made inputs: valid safetensors files (the tiny example model's headers with shrunk
shapes, every dtype, awkward tensor names), indexes, and name lists. Standard library only.
"""
import json
import os
import shutil
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
SEP = b"\xff=====\xff"  # the namespace target's part separator

BITS = {"BOOL": 8, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6, "U8": 8, "I8": 8, "F8_E5M2": 8,
        "F8_E4M3": 8, "F8_E8M0": 8, "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8, "I16": 16, "U16": 16,
        "F16": 16, "BF16": 16, "I32": 32, "U32": 32, "F32": 32, "C64": 64, "F64": 64, "I64": 64,
        "U64": 64}


def safetensors(tensors, metadata=None, pad=0, spaces=True):
    """tensors: list of (name, dtype, shape) in data order. Data bytes count up from 1."""
    header = {}
    if metadata is not None:
        header["__metadata__"] = metadata
    offset = 0
    for name, dtype, shape in tensors:
        n = 1
        for d in shape:
            n *= d
        size = n * BITS[dtype] // 8
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode()
    text += b" " * pad
    data = bytes((i % 251) + 1 for i in range(offset))
    return struct.pack("<Q", len(text)) + text + data


def raw_header(text, data_len):
    return struct.pack("<Q", len(text)) + text + bytes(data_len)


SHARD1 = [
    ("model.layers.0.mlp.up_proj.weight_scale", "F64", []),
    ("model.layers.0.input_layernorm.weight", "F32", [2]),
    ("model.layers.0.mlp.up_proj.weight", "F32", [2, 2]),
    ("model.embed_tokens.weight", "BF16", [4, 2]),
    ("model.layers.0.self_attn.q_proj.weight", "BF16", [2, 2]),
    ("model.layers.0.self_attn.k_proj.weight", "F16", [1, 2]),
]
SHARD2 = [
    ("model.layers.1.self_attn.q_proj.zeros", "I64", [1]),
    ("model.layers.1.input_layernorm.weight", "F32", [2]),
    ("model.norm.weight", "F32", [2]),
    ("lm_head.weight", "BF16", [4, 2]),
    ("model.rotary.inv_freq_i32", "I32", [2]),
    ("model.layers.1.self_attn.q_proj.qweight", "U8", [2, 1]),
    ("model.mask", "BOOL", [3]),
]
NAME1 = "model-00001-of-00002.safetensors"
NAME2 = "model-00002-of-00002.safetensors"


def index(metadata=None, **extra_map):
    wm = {n: NAME1 for n, _, _ in SHARD1}
    wm.update({n: NAME2 for n, _, _ in SHARD2})
    wm.update(extra_map)
    top = {}
    if metadata is not None:
        top["metadata"] = metadata
    top["weight_map"] = dict(sorted(wm.items()))
    return json.dumps(top, indent=2).encode()


ALL_DTYPES = [(f"t.{d.lower()}", d, [8]) for d in BITS] + [("scalar", "F32", []), ("empty", "U8", [0, 3])]
AWKWARD = [("", "U8", [1]), (".", "U8", [1]), ("..", "U8", [1]), ("a/b", "U8", [1]),
           ("100%", "U8", [1]), ("nul\0", "U8", [1]), ("é ü", "U8", [1]),
           ("x" * 300, "U8", [1]), ("x" * 300 + "y", "U8", [1]), ("%2F" * 90, "U8", [1]),
           ("__metadata__x", "U8", [1])]

headers = {
    "golden": safetensors([("test", "I32", [2, 2])], pad=4),
    "empty": safetensors([]),
    "metadata-only": safetensors([], {"format": "pt", "": "empty key"}),
    "shard1": safetensors(SHARD1, {"format": "pt"}),
    "shard2": safetensors(SHARD2, {"format": "pt"}),
    "dtypes": safetensors(ALL_DTYPES, {"format": "pt", "note": "every dtype"}),
    "awkward-names": safetensors(AWKWARD),
    "too-short": safetensors([("test", "I32", [2, 2])])[:-3],
    "bad-offsets": safetensors([("test", "I32", [2, 2])]).replace(b"[0,16]", b"[4,20]"),
    # Two tensors with the same offsets: the official crate reports InvalidOffset or
    # TensorInvalidInfo depending on HashMap order (found by the header target).
    # Eight valid tensors ending at 2^64 - 8: 8 + N + data length overflowed (found while writing
    # the header target, fixed in src/format.rs).
    "data-len-overflow": raw_header(json.dumps(
        {c: {"dtype": "U8", "shape": [2**61 - 1], "data_offsets": [i * (2**61 - 1), (i + 1) * (2**61 - 1)]}
         for i, c in enumerate("abcdefgh")}, separators=(",", ":")).encode(), 0),
    "dup-offsets": raw_header(b'{"a":{"dtype":"F64","shape":[],"data_offsets":[0,8]},'
                              b'"b":{"dtype":"F32","shape":[],"data_offsets":[0,8]}}', 8),
    # Paths of src/format.rs's own JSON reader: repeated names and metadata keys (the last wins),
    # `__metadata__` null, unknown fields it must check in full as the crate's buffering does, an
    # entry written as an array (only the crate's deserializer takes that), common accidents.
    "repeats": raw_header(b'{"__metadata__":{"a":"1","a":"2"},"w":{"dtype":"U8","shape":[3],'
                          b'"data_offsets":[0,3]},"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}', 1),
    "metadata-null": raw_header(b'{"__metadata__":null,"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}', 1),
    "unknown-fields": raw_header(b'{"w":{"q":{"s":[0.5,-1,1e3,true,null,"\\u00e9"]},"dtype":"U8",'
                                 b'"shape":[1],"data_offsets":[0,1],"z":{}}}', 1),
    "unknown-lone-surrogate": raw_header(b'{"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1],'
                                         b'"z":"\\ud800"}}', 1),
    "array-entry": raw_header(b'{"w":["U8",[1],[0,1]]}', 1),
    "git-lfs-pointer": b"version https://git-lfs.github.com/spec/v1\noid sha256:" + b"0" * 64 + b"\nsize 1234\n",
    "html-page": b"\n<!DOCTYPE html><html><body>404</body></html>\n",
}

namespace = {
    "single-file": bytes([0]) + headers["golden"],
    "single-dtypes": bytes([0]) + headers["dtypes"],
    "data-len-overflow": bytes([1]) + headers["data-len-overflow"],
    "unsharded": bytes([1]) + headers["awkward-names"],
    "sharded": bytes([2]) + SEP.join([headers["shard1"], headers["shard2"],
                                      index({"total_size": 118, "format": "pt"})]),
    "sharded-nested-links": bytes([2 | 8 | 16]) + SEP.join([headers["shard1"], headers["shard2"],
                                                           index()]),
    "missing-shard": bytes([3]) + SEP.join([headers["shard1"], index()]),
    "conflict": bytes([4]) + SEP.join([headers["shard1"], headers["shard2"], index(),
                                       headers["golden"]]),
    "named-files": bytes([5]) + SEP.join([b"x.safetensors.index.v1.json",
                                          json.dumps({"weight_map": {"test": "x.safetensors"}}).encode(),
                                          b"x.safetensors", headers["golden"],
                                          b"x.v1.tensors", b"real file"]),
    "hidden-merged": bytes([6]) + SEP.join([headers["shard1"], headers["shard2"], index(),
                                            headers["dtypes"]]),
    "variant": bytes([7]) + SEP.join([headers["shard1"], headers["shard2"],
                                      index({"total_size": "118"}), headers["golden"]]),
    # Layout 5 naming a file like the link the target adds (a harness bug, found by fuzzing).
    "named-link-clash": bytes([5 | 16 | 32 | 64 | 128]) + b"link.safetensors",
}
# The same with layout=tree (bit 5), and with npy as well (bit 6).
for base in ["single-file", "single-dtypes", "unsharded", "sharded"]:
    namespace[base + "-tree"] = bytes([namespace[base][0] | 32]) + namespace[base][1:]
    namespace[base + "-tree-npy"] = bytes([namespace[base][0] | 96]) + namespace[base][1:]
# Names for the tree rules: prefixes, the same parts twice, `__tensor__` parts, empty parts, a
# view name taken by a tensor, a name of over 64 parts.
namespace["tree-names"] = bytes([96]) + safetensors(
    [(n, ["F32", "U8", "BF16", "I64"][i % 4], [2]) for i, n in enumerate(
        ["w", "w.absmax", "w.q.nf4", "a.b", "a/b", "n.__tensor__", "n", "x..y", ".", "",
         "%5F_tensor__", "x.npy", "x", "d" + ".d" * 70])])

indexes = {
    "tiny-model": index({"total_size": 118}),
    "minimal": b'{"weight_map":{}}',
    "metadata-types": json.dumps({"metadata": {"s": "x", "n": 1.5, "a": [1, {"b": None}], "t": True},
                                  "other": [1, 2], "weight_map": {"a": "s1", "b": "s2"}}).encode(),
    "duplicate-tensor": b'{"weight_map":{"a":"s1","a":"s2"}}',
    "bad-shard": b'{"weight_map":{"a":"../s"}}',
    # Accepted, though not JSON a `Value` takes: members the parser skips are not checked for
    # UTF-8, lone surrogates or depth (found by the index target).
    "lenient-skip": b'{"x":{"\xff":"\\ud800"},"y":' + b"[" * 200 + b"]" * 200
                    + b',"weight_map":{"a":"s1"}}',
    # Found by the CI fuzz run: numbers read by two serde_json paths differed in the last digit.
    "float-precision": b'{\n  "metadata": {\n    "total_size": 88888888888888888888888888888888888888888888888888888883333.333333333388888888888888888888888888888888888888888888888888888888888888888888888888888888888118\n  },\n  "weight_map": {\n    "lm_head.weight": "model-00002-of-00002.safetel-00001-of-00002.safetensors",\n    "moroj.weight": "mors",\n    "model.layers.0.mlp.up_proj.weight_scamodeel.rotary.inv_freq_i32": "00002-of-00002.safetensors"\n  }\n}',
    "file-names": b"model.safetensors.index.json\nmodel.safetensors.index.fp16.json\n"
                  b".safetensors.index.json\nx.safetensors.index..json",
}

names = {
    "plain": b"\x00" + b"\xff".join([b"model.layers.0.weight", b"lm_head.weight", b"model.norm.weight"]),
    "tricky": b"\x00" + b"\xff".join([b"", b"%", b".", b"..", b"%2E", b"%2E%2E", b"/", b"%2F",
                                      b"\x00", b"%00", b"%25", b"a/b", b"a%2Fb"]),
    "long": b"\x07" + b"\xff".join([b"x" * 40 + b"1", b"x" * 40 + b"2", "é".encode() * 20,
                                    b"/" * 40, b"%" * 40, b"ab/" * 13]),
}

for target, seeds in [("header", headers), ("namespace", namespace), ("index", indexes),
                      ("names", names)]:
    d = os.path.join(HERE, target)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    for name, data in seeds.items():
        with open(os.path.join(d, name), "wb") as f:
            f.write(data)
