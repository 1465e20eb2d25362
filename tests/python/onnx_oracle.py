#!/usr/bin/env python3
"""The outside oracle of the ONNX tests (tests/suite/onnx.rs): the `onnx` package reads the models
and `onnx.numpy_helper.to_array` gives each tensor's values. Run with the venv python.

  onnx_oracle.py tensors MODEL...
      prints JSON {model: {"tensors": {name: {"dtype", "shape", "sha256", "size"}},
      "metadata": {key: value}, "skipped": [name...]}}: every tensor of the main graph, of every
      subgraph and of every local function (initializers, and Constant nodes' value,
      value_float(s), value_int(s)), named as the docs say (an initializer by its name, a
      Constant by its first output; a name already taken by its graph's path NODE.ATTRIBUTE/ then
      the name; a graph's own tensors before its subgraphs'), with the sha256 of
      to_array(t).tobytes() (for the packed 4-bit types, of the bytes as stored, two to a byte).
  onnx_oracle.py write DIR
      writes the synthetic models of the tests into DIR and prints JSON {file: what it holds}.
"""

import collections
import hashlib
import json
import os
import sys

import numpy as np
import onnx
from onnx import helper, numpy_helper, TensorProto

# safetensors' names for ONNX's element types, else ONNX's own.
DTYPES = {
    TensorProto.FLOAT: "F32", TensorProto.UINT8: "U8", TensorProto.INT8: "I8",
    TensorProto.UINT16: "U16", TensorProto.INT16: "I16", TensorProto.INT32: "I32",
    TensorProto.INT64: "I64", TensorProto.BOOL: "BOOL", TensorProto.FLOAT16: "F16",
    TensorProto.DOUBLE: "F64", TensorProto.UINT32: "U32", TensorProto.UINT64: "U64",
    TensorProto.COMPLEX64: "C64", TensorProto.COMPLEX128: "C128", TensorProto.BFLOAT16: "BF16",
    TensorProto.FLOAT8E4M3FN: "F8_E4M3", TensorProto.FLOAT8E4M3FNUZ: "F8_E4M3FNUZ",
    TensorProto.FLOAT8E5M2: "F8_E5M2", TensorProto.FLOAT8E5M2FNUZ: "F8_E5M2FNUZ",
    TensorProto.FLOAT4E2M1: "F4", TensorProto.FLOAT8E8M0: "F8_E8M0",
    TensorProto.UINT4: "UINT4", TensorProto.INT4: "INT4",
}
PACKED = {TensorProto.UINT4, TensorProto.INT4, TensorProto.FLOAT4E2M1}
# The float types `-o dtype=f32` widens (F4's values are packed, and left out here).
WIDENED = {"F16", "BF16", "F8_E4M3", "F8_E4M3FNUZ", "F8_E5M2", "F8_E5M2FNUZ"}


def stored_bytes(t, base_dir):
    """The tensor's bytes as tensormount shows them: to_array's, but for the packed 4-bit types,
    packed two to a byte (the low nibble first), as stored."""
    a = numpy_helper.to_array(t, base_dir)
    if t.data_type in PACKED:
        nibbles = a.view(np.uint8).reshape(-1) & 0x0F
        if len(nibbles) % 2:
            nibbles = np.append(nibbles, 0)
        return (nibbles[0::2] | (nibbles[1::2] << 4)).astype(np.uint8).tobytes()
    return a.tobytes()


def constant_value(node):
    """A Constant node's value as a TensorProto, or None (strings, sparse)."""
    for a in node.attribute:
        if a.name == "value":
            return a.t
        if a.name == "value_float":
            return numpy_helper.from_array(np.array(a.f, dtype=np.float32))
        if a.name == "value_floats":
            return numpy_helper.from_array(np.array(list(a.floats), dtype=np.float32))
        if a.name == "value_int":
            return numpy_helper.from_array(np.array(a.i, dtype=np.int64))
        if a.name == "value_ints":
            return numpy_helper.from_array(np.array(list(a.ints), dtype=np.int64))
    return None


def walk(model):
    """(name, path, TensorProto) of every tensor, in the order the docs name them."""
    queue = collections.deque([(model.graph, "", False)])
    for f in model.functions:
        queue.append((f, f.name + "/", True))
    while queue:
        g, path, function = queue.popleft()
        if not function:
            for t in g.initializer:
                yield t.name, path, t
        for node in g.node:
            label = node.name or (node.output[0] if node.output else "")
            if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
                value = constant_value(node)
                if value is not None:
                    yield (node.output[0] if node.output else ""), path, value
            for a in node.attribute:
                if a.HasField("g"):
                    queue.append((a.g, f"{path}{label}.{a.name}/", False))
                for k, sub in enumerate(a.graphs):
                    queue.append((sub, f"{path}{label}.{a.name}.{k}/", False))


def tensors(paths):
    out = {}
    for path in paths:
        model = onnx.load(path, load_external_data=False)
        base = os.path.dirname(os.path.abspath(path))
        taken, found, skipped = set(), {}, []
        for name, graph_path, t in walk(model):
            if t.data_type not in DTYPES:
                skipped.append(graph_path + name)
                continue
            candidate = name
            if candidate in taken:
                candidate = graph_path + name
            base_name, k = candidate, 2
            while candidate in taken:
                candidate = f"{base_name}#{k}"
                k += 1
            taken.add(candidate)
            data = stored_bytes(t, base)
            found[candidate] = {
                "dtype": DTYPES[t.data_type],
                "shape": list(t.dims),
                "size": len(data),
                "sha256": hashlib.sha256(data).hexdigest(),
            }
            if DTYPES[t.data_type] in WIDENED:
                f32 = numpy_helper.to_array(t, base).astype(np.float32).tobytes()
                found[candidate]["f32_sha256"] = hashlib.sha256(f32).hexdigest()
        metadata = {"ir_version": str(model.ir_version)}
        if model.producer_name:
            metadata["producer_name"] = model.producer_name
        if model.producer_version:
            metadata["producer_version"] = model.producer_version
        opsets = [f"{o.domain or 'ai.onnx'}:{o.version}" for o in model.opset_import]
        if opsets:
            metadata["opset_import"] = ",".join(opsets)
        for p in model.metadata_props:
            metadata.setdefault(p.key, p.value)
        out[path] = {"tensors": found, "metadata": metadata, "skipped": skipped}
    print(json.dumps(out, sort_keys=True))


def safetensors_file(path):
    """What the official reader reads in a safetensors file (as torch tensors, which have every
    float8 type): {"tensors": {name: {"shape", "sha256"}}, "metadata": {...}}."""
    import torch
    from safetensors import safe_open
    out = {"tensors": {}, "metadata": None}
    with safe_open(path, "pt") as f:
        out["metadata"] = f.metadata()
        for k in f.keys():
            t = f.get_tensor(k)
            data = t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
            out["tensors"][k] = {"shape": list(t.shape),
                                 "sha256": hashlib.sha256(data).hexdigest()}
    print(json.dumps(out, sort_keys=True))


# ------------------------------------------------------------------ synthetic models

def varint(n):
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def field(number, payload):
    """A length-delimited field (protobuf's wire type 2)."""
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def scalar(number, value):
    """A varint field."""
    return varint(number << 3) + varint(value)


def fixed32(number, raw4):
    return varint(number << 3 | 5) + raw4


def model_bytes(graph_fields, opset=17):
    """A ModelProto of `graph_fields` (already encoded GraphProto fields)."""
    return (scalar(1, 9) + field(2, b"tensormount-tests") + field(7, graph_fields)
            + field(8, scalar(2, opset)))


def rng_values(rng, dtype, n):
    if np.issubdtype(dtype, np.floating):
        return rng.standard_normal(n).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)


def write(out):
    """The synthetic models: every kind of tensor the docs list, embedded."""
    import ml_dtypes
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(41)
    written = {}

    # 1. Initializers of every type, as raw_data (onnx.numpy_helper.from_array) and as the typed
    #    fields (helper.make_tensor without raw), with metadata and two opsets.
    inits = []
    for dt in [np.float32, np.float16, np.float64, np.int8, np.uint8, np.int16, np.uint16,
               np.int32, np.int64, np.uint32, np.uint64]:
        a = rng_values(rng, dt, 12).reshape(3, 4)
        inits.append(numpy_helper.from_array(a, f"raw_{np.dtype(dt).name}"))
        t = helper.make_tensor(f"typed_{np.dtype(dt).name}", helper.np_dtype_to_tensor_dtype(
            np.dtype(dt)), [3, 4], a.reshape(-1).tolist())
        inits.append(t)
    inits.append(numpy_helper.from_array(rng.integers(0, 2, 6).astype(bool), "raw_bool"))
    inits.append(helper.make_tensor("typed_bool", TensorProto.BOOL, [6], [True, False] * 3))
    c = (rng.standard_normal(4) + 1j * rng.standard_normal(4)).astype(np.complex64)
    inits.append(numpy_helper.from_array(c, "raw_complex64"))
    inits.append(helper.make_tensor("typed_complex64", TensorProto.COMPLEX64, [4], c.tolist()))
    inits.append(numpy_helper.from_array(c.astype(np.complex128), "raw_complex128"))
    inits.append(helper.make_tensor("typed_complex128", TensorProto.COMPLEX128, [4],
                                    c.astype(np.complex128).tolist()))
    f = rng.standard_normal(8).astype(np.float32)
    for name, t, ml in [("bf16", TensorProto.BFLOAT16, ml_dtypes.bfloat16),
                        ("f8e4m3fn", TensorProto.FLOAT8E4M3FN, ml_dtypes.float8_e4m3fn),
                        ("f8e4m3fnuz", TensorProto.FLOAT8E4M3FNUZ, ml_dtypes.float8_e4m3fnuz),
                        ("f8e5m2", TensorProto.FLOAT8E5M2, ml_dtypes.float8_e5m2),
                        ("f8e5m2fnuz", TensorProto.FLOAT8E5M2FNUZ, ml_dtypes.float8_e5m2fnuz)]:
        inits.append(helper.make_tensor(f"raw_{name}", t, [8], f.astype(ml).tobytes(), raw=True))
        inits.append(helper.make_tensor(f"typed_{name}", t, [8], f.astype(ml).astype(np.float32)))
    q = rng.integers(-8, 8, 8)
    inits.append(helper.make_tensor("typed_int4", TensorProto.INT4, [8], q.tolist()))
    inits.append(helper.make_tensor("typed_uint4", TensorProto.UINT4, [8], (q + 8).tolist()))
    inits.append(helper.make_tensor("typed_float4e2m1", TensorProto.FLOAT4E2M1, [8],
                                    [0.5, 1.0, -2.0, 3.0, 0.0, -0.5, 6.0, 1.5]))
    inits.append(numpy_helper.from_array(np.zeros((0, 3), np.float32), "empty"))
    inits.append(numpy_helper.from_array(np.float32(2.5), "scalar"))
    inits.append(helper.make_tensor("names", TensorProto.STRING, [2], [b"a", b"b"]))
    sparse = helper.make_sparse_tensor(
        numpy_helper.from_array(np.array([1.0, 2.0], np.float32), "sparse_w"),
        numpy_helper.from_array(np.array([0, 3], np.int64), "sparse_w_indices"), [4])
    # 2. Constant nodes of every attribute, and subgraphs (If branches that reuse the names
    #    `w` and `k`, a Loop body), and a local function with a Constant.
    const = lambda out, **kw: helper.make_node("Constant", [], [out], **kw)
    w = rng.standard_normal((2, 3)).astype(np.float32)
    branch = lambda tag, v: helper.make_graph(
        [const("w", value=numpy_helper.from_array(v)), const("k", value_ints=[1, 2, 3]),
         helper.make_node("Add", ["w", "w"], ["y"])], tag, [],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    body = helper.make_graph(
        [const("step", value_int=1), helper.make_node("Identity", ["cond"], ["cond_out"]),
         helper.make_node("Identity", ["v"], ["v_out"])], "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_out", TensorProto.FLOAT, [2, 3])])
    nodes = [
        const("w", value=numpy_helper.from_array(w)),
        const("k", value_float=0.25),
        const("kf", value_floats=[0.5, -1.5, 2.0]),
        const("ki", value_int=-7),
        const("kis", value_ints=[1, -2, 3, 1 << 40]),
        const("cond", value=numpy_helper.from_array(np.array(True))),
        helper.make_node("If", ["cond"], ["y"], name="If_0",
                         then_branch=branch("then", w * 2), else_branch=branch("else", w * 3)),
        helper.make_node("Loop", ["", "cond", "w"], ["loop_out"], name="Loop_0", body=body),
        helper.make_node("Scale", ["w"], ["scaled"], domain="local"),
    ]
    graph = helper.make_graph(nodes, "kinds", [], [
        helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])], initializer=inits,
        sparse_initializer=[sparse])
    fn = helper.make_function("local", "Scale", ["x"], ["z"],
                              [const("factor", value=numpy_helper.from_array(np.float32(3.0))),
                               helper.make_node("Mul", ["x", "factor"], ["z"])],
                              [helper.make_opsetid("", 17)])
    model = helper.make_model(graph, producer_name="tensormount-tests", producer_version="41",
                              opset_imports=[helper.make_opsetid("", 17),
                                             helper.make_opsetid("local", 1)],
                              functions=[fn])
    helper.set_model_props(model, {"author": "tests", "note": "kinds of tensors"})
    onnx.save(model, os.path.join(out, "kinds.onnx"))
    written["kinds.onnx"] = "every type, raw and typed; Constants; subgraphs; a function"

    # 3. What protobuf allows and onnx's writer never writes: two graph fields (merged), a
    #    tensor whose raw_data and name come twice (the last wins), float_data split over two
    #    packed arrays and given unpacked, int64_data unpacked, dims unpacked.
    a = rng.standard_normal(6).astype(np.float32)
    tensor_fields = lambda name: field(8, name.encode()) + scalar(2, TensorProto.FLOAT)
    split = (field(1, varint(2) + varint(3)) + tensor_fields("split_floats")
             + field(4, a[:2].tobytes()) + field(4, a[2:].tobytes()))
    unpacked = (scalar(1, 6) + tensor_fields("unpacked_floats")
                + b"".join(fixed32(4, v.tobytes()) for v in a))
    ints = np.array([5, -1, 1 << 50, 0, 7, -(1 << 40)], np.int64)
    unpacked_ints = (scalar(1, 3) + scalar(1, 2) + field(8, b"unpacked_int64")
                     + scalar(2, TensorProto.INT64) + b"".join(scalar(7, int(v)) for v in ints))
    last_wins = (scalar(1, 2) + field(8, b"first_name") + scalar(2, TensorProto.FLOAT)
                 + field(9, b"\0" * 8) + field(9, a[:2].tobytes()) + field(8, b"last_wins"))
    g1 = field(5, split) + field(5, unpacked)
    g2 = field(5, unpacked_ints) + field(5, last_wins) + field(2, b"merged")
    data = model_bytes(g1) + field(7, g2)
    with open(os.path.join(out, "wire.onnx"), "wb") as fh:
        fh.write(data)
    written["wire.onnx"] = "merged graphs, last-wins scalars, split and unpacked arrays"
    print(json.dumps(written, sort_keys=True))


def write_external(out):
    """Models with external data: in one file (one/), in one file per tensor (each/), in a
    subdirectory (nested/), as onnx.save_model writes them; beside them (mixed/), one whose
    model file also holds a tensor in typed fields (`typed`, int64_data, which onnx.save_model
    leaves in the model); and refused ones (bad/), each with
    the rule its error must name: a location that is absolute, one that leaves the
    model's directory (to a file that exists), an offset past the data file's end, a missing
    data file, a length that is not the tensor's. Prints JSON {"good": [dirs], "bad": {file:
    rule}}."""
    rng = np.random.default_rng(43)
    weights = lambda n: [numpy_helper.from_array(
        rng.standard_normal((16, 8)).astype(np.float16 if i % 2 else np.float32), f"w{i}")
        for i in range(n)] + [numpy_helper.from_array(np.arange(5, dtype=np.int64), "idx")]
    model = lambda inits: helper.make_model(helper.make_graph([], "g", [], [], initializer=inits))
    for sub, one, location in [("one", True, "model.onnx_data"), ("each", False, None),
                               ("nested", True, "weights/data.bin")]:
        d = os.path.join(out, sub)
        os.makedirs(os.path.join(d, "weights"), exist_ok=True)
        onnx.save_model(model(weights(4)), os.path.join(d, "model.onnx"),
                        save_as_external_data=True, all_tensors_to_one_file=one,
                        location=location, size_threshold=0)
    mixed = os.path.join(out, "mixed")
    os.makedirs(mixed)
    typed = TensorProto(name="typed", data_type=TensorProto.INT64, dims=[3], int64_data=[7, -8, 9])
    onnx.save_model(model(weights(2) + [typed]), os.path.join(mixed, "model.onnx"),
                    save_as_external_data=True, all_tensors_to_one_file=True,
                    location="model.onnx_data", size_threshold=0)
    bad = os.path.join(out, "bad")
    os.makedirs(bad)
    with open(os.path.join(out, "outside.bin"), "wb") as f:
        f.write(b"\1" * 64)
    rules = {}

    def refused(name, entries, data_len, rule):
        t = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[4],
                        data_location=TensorProto.EXTERNAL)
        for k, v in entries.items():
            e = t.external_data.add()
            e.key, e.value = k, v
        with open(os.path.join(bad, name + ".bin"), "wb") as f:
            f.write(b"\0" * data_len)
        with open(os.path.join(bad, name + ".onnx"), "wb") as f:
            f.write(model([t]).SerializeToString())
        rules[name + ".onnx"] = rule

    refused("absolute", {"location": os.path.join(out, "outside.bin")}, 16, "[BadLocation]")
    refused("parent", {"location": "../outside.bin"}, 16, "[BadLocation]")
    refused("past_end", {"location": "past_end.bin", "offset": "8"}, 16, "[DataPastEnd]")
    refused("missing", {"location": "nowhere.bin"}, 16, "[MissingDataFile]")
    refused("length", {"location": "length.bin", "length": "12"}, 16, "[BadTensor]")
    print(json.dumps({"good": ["one", "each", "nested"], "bad": rules}, sort_keys=True))


def write_hostile(out):
    """Models that must be refused, each named by the rule it breaks, beside a good one: printed
    as JSON {file: rule}."""
    os.makedirs(out, exist_ok=True)
    good = helper.make_model(helper.make_graph(
        [], "good", [], [], initializer=[numpy_helper.from_array(np.ones(4, np.float32), "w")]))
    data = good.SerializeToString()
    rules = {}

    def keep(name, data, rule):
        with open(os.path.join(out, name), "wb") as fh:
            fh.write(data)
        rules[name] = rule

    keep("good.onnx", data, None)
    keep("truncated.onnx", data[:len(data) - 3], "Truncated")
    # raw_data of 12 bytes for a FLOAT [4] (16 bytes).
    short = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[4], raw_data=b"\0" * 12)
    keep("short_raw.onnx", model_bytes(field(5, short.SerializeToString())), "BadTensor")
    # 5 int64 values for a shape of 4.
    many = TensorProto(name="w", data_type=TensorProto.INT64, dims=[4], int64_data=[1, 2, 3, 4, 5])
    keep("too_many_values.onnx", model_bytes(field(5, many.SerializeToString())), "BadTensor")
    # Graphs nested 40 deep (If in If in If...), past the bound of 32.
    g = b""
    for _ in range(40):
        attr = field(1, b"then_branch") + scalar(20, 5) + field(6, g)
        node = field(4, b"If") + field(2, b"y") + field(5, attr)
        g = field(1, node)
    keep("deep.onnx", model_bytes(g), "TooDeep")
    # A field of wire type 3 (a group).
    keep("group.onnx", model_bytes(b"") + varint(9 << 3 | 3), "BadField")
    print(json.dumps(rules, sort_keys=True))


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "tensors":
        tensors(args)
    elif cmd == "write":
        write(args[0])
    elif cmd == "write-external":
        write_external(args[0])
    elif cmd == "write-hostile":
        write_hostile(args[0])
    elif cmd == "safetensors":
        safetensors_file(args[0])
    else:
        sys.exit(f"unknown command {cmd}")
