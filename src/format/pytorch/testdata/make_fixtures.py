"""Writes the PyTorch checkpoint fixtures of src/format/pytorch's tests, with the real torch.save,
and beside each NAME.pt a NAME.json oracle: for each tensor torch.load gives back (flattened by
dict key / list index, joined with '.'), its safetensors dtype, shape and bytes (hex, C order), and
the names of tensors that get no file (complex32 and complex128 get one, named C32 and C128).

Run with a Python that has torch (and numpy): python make_fixtures.py [OUT_DIR]
"""

import argparse
import collections
import json
import os
import sys
import warnings

import numpy as np
import torch

warnings.filterwarnings("ignore")
OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))

SAFETENSORS = {
    torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
    torch.float8_e4m3fn: "F8_E4M3", torch.float8_e5m2: "F8_E5M2",
    torch.float8_e4m3fnuz: "F8_E4M3FNUZ", torch.float8_e5m2fnuz: "F8_E5M2FNUZ",
    torch.float8_e8m0fnu: "F8_E8M0", torch.int8: "I8", torch.int16: "I16", torch.int32: "I32",
    torch.int64: "I64", torch.uint8: "U8", torch.uint16: "U16", torch.uint32: "U32",
    torch.uint64: "U64", torch.bool: "BOOL", torch.complex64: "C64",
}
# The element types safetensors has no name for that tensormount still shows as files.
FILE_ONLY = {torch.complex128: "C128", torch.complex32: "C32"}


def sample(dtype, shape=(2, 3)):
    n = 1
    for d in shape:
        n *= d
    if dtype == torch.bool:
        return (torch.arange(n) % 3 == 0).reshape(shape)
    if dtype.is_complex:
        return torch.complex(torch.randn(n), torch.randn(n)).to(dtype).reshape(shape)
    if dtype.is_floating_point:
        return (torch.randn(n) * 4).to(dtype).reshape(shape)
    return (torch.arange(n) * 37 + 5).to(dtype).reshape(shape)


def flatten(value, prefix, out):
    if isinstance(value, torch.Tensor):
        out.append((prefix or "tensor", value))
    elif isinstance(value, dict):
        for k, v in value.items():
            flatten(v, f"{prefix}.{k}" if prefix else str(k), out)
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            flatten(v, f"{prefix}.{i}" if prefix else str(i), out)
    elif isinstance(value, (argparse.Namespace, torch.nn.Module)):
        flatten(vars(value), prefix, out)


def oracle(loaded):
    found = []
    flatten(loaded, "", found)
    tensors, nofile = [], []
    for name, t in found:
        t = t.detach()
        dtype = SAFETENSORS.get(t.dtype) or FILE_ONLY.get(t.dtype)
        if t.layout != torch.strided or t.is_quantized or dtype is None:
            nofile.append(name)
            continue
        data = t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
        tensors.append({"name": name, "dtype": dtype, "shape": list(t.shape), "hex": data.hex()})
    return {"tensors": tensors, "nofile": nofile}


def save(name, obj, legacy=False, weights_only=True, state_dict=None):
    path = os.path.join(OUT, name)
    torch.save(obj, path, _use_new_zipfile_serialization=not legacy)
    expected = oracle(torch.load(path, weights_only=weights_only))
    expected["state_dict"] = state_dict
    with open(path.rsplit(".", 1)[0] + ".json", "w") as f:
        json.dump(expected, f, indent=1)
        f.write("\n")


class Evil:
    def __reduce__(self):
        return (os.system, ("echo pwned",))


def main():
    torch.manual_seed(0)
    all_dtypes = list(SAFETENSORS) + [torch.complex128, torch.complex32]
    dtypes = {str(d).removeprefix("torch."): sample(d) for d in all_dtypes}
    for legacy in (False, True):
        suffix = "legacy" if legacy else "zip"
        # torch cannot load back a legacy file of the dtypes that have no storage class of their
        # own (float8, uint16-64, complex32: saved as untyped storages), so those are zip only.
        typed = torch.storage._dtype_to_storage_type_map()
        chosen = {k: v for k, v in dtypes.items() if not legacy or v.dtype in typed}
        save(f"dtypes_{suffix}.pt", chosen, legacy, state_dict=None)
        base = torch.arange(12, dtype=torch.float32).reshape(3, 4)
        tied = torch.randn(2, 2)
        views = {
            "transposed": base.t(),
            "sliced": base[1:, 1:],
            "row": base[2],
            "expanded": torch.arange(3, dtype=torch.int16).expand(2, 3),
            "scalar": torch.tensor(2.5, dtype=torch.float64),
            "empty": base[3:],
            "tied_a": tied,
            "tied_b": tied,
            "param": torch.nn.Parameter(torch.randn(3)),
        }
        save(f"views_{suffix}.pt", views, legacy, state_dict=sorted(views))
    linear = torch.nn.Linear(3, 2)
    lightning = {
        "epoch": 3,
        "global_step": 30,
        "state_dict": collections.OrderedDict(
            (f"model.layer.{k}", v) for k, v in linear.state_dict().items()),
        "optimizer_states": [{"state": {0: {"step": torch.tensor(3.0),
                                            "exp_avg": torch.randn(2, 3)}},
                              "param_groups": [{"lr": 0.1, "params": [0, 1]}]}],
        "hyper_parameters": argparse.Namespace(lr=0.1, layers=[3, 2]),
    }
    save("lightning.ckpt", lightning, weights_only=False,
         state_dict=["model.layer.weight", "model.layer.bias"])
    model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.ReLU())
    save("module.pt", model, weights_only=False)
    odd = {
        "plain": torch.ones(2, dtype=torch.float16),
        "quantized": torch.quantize_per_tensor(torch.randn(4), 0.1, 3, torch.qint8),
        "sparse": torch.eye(3).to_sparse(),
        "cdouble": torch.zeros(2, dtype=torch.complex128),
        "numpy": np.arange(3, dtype=np.float32),
    }
    save("odd.pt", odd, weights_only=False)
    path = os.path.join(OUT, "evil.pt")
    torch.save({"w": torch.ones(2), "evil": Evil()}, path)
    with open(os.path.join(OUT, "evil.json"), "w") as f:  # never loaded: the oracle is the input
        json.dump({**oracle({"w": torch.ones(2)}), "state_dict": None}, f, indent=1)
        f.write("\n")
    zip64()


def zip64():
    """zip64.pt: a torch.save archive of a transposed tensor rewritten by Python's zipfile with
    every zip64 record forced (as torch writes them past 4 GiB); torch.load reads it."""
    import io
    import zipfile

    buf = io.BytesIO()
    torch.save(torch.arange(12, dtype=torch.float32).reshape(3, 4).t(), buf)
    src = zipfile.ZipFile(io.BytesIO(buf.getvalue()))
    zipfile.ZIP64_LIMIT = 0
    zipfile.ZIP_FILECOUNT_LIMIT = 0
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_STORED) as z:
        for info in src.infolist():
            z.writestr(zipfile.ZipInfo(info.filename), src.read(info.filename))
    assert torch.equal(torch.load(io.BytesIO(out.getvalue())), torch.arange(12.0).reshape(3, 4).t())
    with open(os.path.join(OUT, "zip64.pt"), "wb") as f:
        f.write(out.getvalue())


main()
