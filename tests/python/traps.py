#!/usr/bin/env python3
"""Checkpoints that are traps in the ways deny-list scanners miss, and real ones beside them
(tests/suite/pickle.rs). Run with the venv python, which has torch.

  traps.py write DIR MARKER
      writes DIR/trap_*.pt, each a torch.save checkpoint of real tensors whose pickle, loaded by
      torch.load(weights_only=False), creates MARKER; and DIR/clean_*.pt, real checkpoints of
      what training scripts save (none may be flagged). Every trap is proven one: each is loaded
      by torch.load(weights_only=False) in a child process of its own (trapkit.Canary), which
      must create MARKER (removed after), and every clean one must load without creating it.
      Prints JSON
      {file: {"named": the global the refusal must name, as Python resolves it}} for the traps,
      {file: {"named": null}} for the clean ones.

The traps are made as the published evasions are: a global off every deny-list called before
the state dict is built (its result popped), written into the checkpoint's data.pkl by hand
where torch.save cannot write it (dotted protocol-4 names, escaped protocol-0 strings, computed
STACK_GLOBAL operands, a pickle that fails after its call).
"""

import io
import json
import os
import pickle
import struct
import sys
import zipfile

import numpy as np
import torch

from pytorch import Call
from trapkit import Canary, command_line, Ops, call, sglob as stack_global, u, with_prefix


def called(f, *args):
    """Opcodes that call `f` (GLOBAL opcodes) on `args` and pop the result."""
    return call(Ops(f), *args) + b"0"


def attribute_dict(out, **items):
    """Lightning's `AttributeDict` of hyper-parameters, as `save_hyperparameters` keeps it: a dict
    subclass of `lightning_fabric.utilities.data` (Lightning is not installed here: a module of
    that name is made for the writer, and for the child that loads the checkpoint)."""
    import importlib
    import types
    name = "lightning_fabric.utilities.data"
    if name not in sys.modules:
        for part in ("lightning_fabric", "lightning_fabric.utilities", name):
            sys.modules[part] = types.ModuleType(part)
        module = sys.modules[name]
        module.AttributeDict = type("AttributeDict", (dict,), {"__module__": name})
    return importlib.import_module(name).AttributeDict(**items)


def write(out, marker):
    os.makedirs(out, exist_ok=True)
    c = Canary(marker)
    gen = torch.Generator().manual_seed(31)
    sd = {"w": torch.randn(3, 4, generator=gen), "b": torch.randn(4, generator=gen).half()}
    touch = f"touch {marker}"
    evil_inner = io.BytesIO()
    torch.save({"x": Call(os.system, touch)}, evil_inner)
    npy = os.path.join(out, "payload.npy")
    np.save(npy, np.array([Call(os.system, touch)], dtype=object), allow_pickle=True)
    traps = {
        # Globals off the deny-lists, each of which runs code or writes a file.
        "trap_codecs_open": (called(b"ccodecs\nopen\n", marker, "w"), 2, "codecs.open"),
        "trap_zipfile": (called(b"czipfile\nZipFile\n", marker, "w"), 2, "zipfile.ZipFile"),
        "trap_sqlite3": (called(b"csqlite3\nconnect\n", marker), 2, "sqlite3.connect"),
        "trap_exec_with_source": (
            b"ctorch.fx.graph_module\n_exec_with_source\n(" + u(f"import os\nos.system({touch!r})")
            + b"}tR0", 2, "torch.fx.graph_module._exec_with_source"),
        "trap_numpy_load": (
            b"cnumpy\nload\n(" + u(npy) + b"N\x88tR0", 2, "numpy.load"),
        # Names as Python resolves them.
        "trap_dotted": (stack_global("torch", "os.system") + b"(" + u(touch) + b"tR0", 4,
                        "torch.os.system"),
        "trap_path_touch": (stack_global("pathlib", "Path.touch") + b"(" + stack_global(
            "pathlib", "PosixPath") + b"(" + u(marker) + b"tRtR0", 4, "pathlib.Path.touch"),
        "trap_py2_commands": (called(b"ccommands\ngetoutput\n", touch), 2,
                              "subprocess.getoutput (written commands.getoutput)"),
        "trap_escaped": (b"S'\\157\\163'\nS'\\163ystem'\n\x93(" + u(touch) + b"tR0", 2,
                         "os.system"),
        "trap_computed_global": (b"cbuiltins\nstr\n(" + u("os") + b"tR" + u("system") + b"\x93("
                                 + u(touch) + b"tR0", 2, "a global whose name the pickle computes"),
    }
    # torch.storage._load_from_bytes of a pickle that calls os.system: its bytes as SHORT_BINBYTES
    # or BINBYTES.
    inner = evil_inner.getvalue()
    arg = (b"C" + bytes([len(inner)]) if len(inner) < 256 else b"B" + struct.pack("<I", len(inner)))
    traps["trap_load_from_bytes"] = (b"ctorch.storage\n_load_from_bytes\n(" + arg + inner + b"tR0",
                                     2, "torch.storage._load_from_bytes")
    result = {}
    for name, (prefix, proto, named) in traps.items():
        path = os.path.join(out, name + ".pt")
        torch.save(sd, path)
        with_prefix(path, prefix, proto)
        c.prove(path, True)
        result[name + ".pt"] = {"named": named}
    # A pickle that fails after its call (an opcode that does not exist).
    path = os.path.join(out, "trap_fails_after.pt")
    torch.save(sd, path)
    with_prefix(path, called(b"cos\nsystem\n", touch), 2, tail=b"\xff")
    c.prove(path, True)
    result["trap_fails_after.pt"] = {"named": "os.system"}
    # Containers as torch's reader (miniz) reads them: an entry name in any case, a `code/` entry
    # that does not make a TorchScript archive (only `constants.pkl` does), a big-endian archive
    # (its pickle is unpickled all the same). (Two pickles of one name, and the other archives
    # torch's reader sees otherwise than other zip readers, are ziptraps.py's.)
    def rewrite(name, change, compression=zipfile.ZIP_STORED):
        path = os.path.join(out, name)
        torch.save(sd, path)
        with_prefix(path, called(b"cos\nsystem\n", touch))
        with zipfile.ZipFile(path) as z:
            entries = [(i.filename, z.read(i)) for i in z.infolist()]
        with zipfile.ZipFile(path, "w", compression) as z:
            for n, data in change(entries):
                z.writestr(n, data)
        c.prove(path, True)
        result[name] = {"named": "os.system"}

    top = lambda entries: entries[0][0].split("/")[0]
    rewrite("trap_upper_case.pt", lambda es: [
        (n.replace("/data.pkl", "/DATA.PKL"), d) for n, d in es])
    rewrite("trap_code_entry.pt", lambda es: es + [(top(es) + "/code/__torch__.py", b"")])
    rewrite("trap_deflated.pt", lambda es: es, zipfile.ZIP_DEFLATED)
    rewrite("trap_big_endian.pt", lambda es: [
        (n, b"big" if n.endswith("/byteorder") else d) for n, d in es])
    # Entries that overlap: the central directory says `.format_version` (which torch does not
    # read) runs into the next entry; torch.load reads the rest all the same.
    name = "trap_overlapping.pt"
    path = os.path.join(out, name)
    torch.save(sd, path)
    with_prefix(path, called(b"cos\nsystem\n", touch))
    data = bytearray(open(path, "rb").read())
    at = data.find(b"PK\x01\x02")
    while at != -1:
        n = struct.unpack_from("<H", data, at + 28)[0]
        if data[at + 46:at + 46 + n].endswith(b"/.format_version"):
            struct.pack_into("<II", data, at + 20, 200, 200)
            break
        at = data.find(b"PK\x01\x02", at + 4)
    assert at != -1, "no .format_version entry"
    with open(path, "wb") as f:
        f.write(data)
    c.prove(path, True)
    result[name] = {"named": "os.system"}

    # Files of bare pickles, which torch.load unpickles one after another whatever the first is:
    # protocol 0 and 1 (no PROTO), and a legacy file whose magic number is not written as torch
    # writes it (protocol 0) with the call in the next pickle.
    for proto in (0, 1):
        name = f"trap_bare_protocol_{proto}.pt"
        with open(os.path.join(out, name), "wb") as f:
            f.write(pickle.dumps({"x": Call(os.system, touch)}, protocol=proto))
        c.prove(os.path.join(out, name), True)
        result[name] = {"named": "posix.system"}
    # Legacy files whose second pickle (the protocol version, to torch.load) is the call: after
    # the magic number as torch writes it, as protocol 0 writes it, and in hex (`int(s, 0)`).
    magic = 0x1950a86a20f9469cfc6c
    for name, first in [("trap_legacy_version.pt", pickle.dumps(magic, protocol=2)),
                        ("trap_legacy_magic.pt", pickle.dumps(magic, protocol=0)),
                        ("trap_legacy_hex_magic.pt", f"L{magic:#x}L\n.".encode())]:
        with open(os.path.join(out, name), "wb") as f:
            f.write(first)
            f.write(pickle.dumps(Call(os.system, touch), protocol=2))
        c.prove(os.path.join(out, name), True)
        result[name] = {"named": "posix.system"}
    # An integer in hex before the call, which Python reads (`INT` is C's strtol, base 0).
    path = os.path.join(out, "trap_hex_int.pt")
    torch.save(sd, path)
    with_prefix(path, b"I0x10\n0" + called(b"cos\nsystem\n", touch))
    c.prove(path, True)
    result["trap_hex_int.pt"] = {"named": "os.system"}

    # A suffix in upper case (torch.load never looks at the name).
    path = os.path.join(out, "trap_upper_suffix.PT")
    torch.save(sd, path)
    with_prefix(path, called(b"cos\nsystem\n", touch))
    c.prove(path, True)
    result["trap_upper_suffix.PT"] = {"named": "os.system"}

    # A trap with no tensors at all.
    path = os.path.join(out, "trap_no_tensors.pt")
    torch.save({"note": Call(os.system, touch)}, path)
    c.prove(path, True)
    result["trap_no_tensors.pt"] = {"named": "posix.system"}

    # What training scripts save: none is a trap.
    import argparse as ap
    import collections
    w = torch.randn(8, 4, generator=gen)
    clean = {
        "clean_bf16": {"w": w.bfloat16(), "b": torch.zeros(4)},
        "clean_tied": {"embed.weight": w, "lm_head.weight": w},
        "clean_optimizer": {"state_dict": {"w": w}, "optimizer": torch.optim.AdamW([w]).state_dict(),
                            "epoch": 3, "args": ap.Namespace(lr=0.1, name="run")},
        "clean_numpy": {"state_dict": {"w": w}, "mean": np.float32(0.5),
                        "rng": np.random.get_state(), "hist": np.arange(4)},
        "clean_counter": {"state_dict": collections.OrderedDict(w=w),
                          "vocab": collections.Counter("abca"), "ids": {1, 2}},
        "clean_lightning": {"state_dict": {"model.w": w}, "epoch": 1, "global_step": 8,
                            "hyper_parameters": attribute_dict(out, lr=0.1, layers=2)},
    }
    for name, obj in clean.items():
        path = os.path.join(out, name + ".pt")
        torch.save(obj, path)
        c.prove(path, False)
        result[name + ".pt"] = {"named": None}
    path = os.path.join(out, "clean_proto4.pt")
    torch.save({"w": w}, path, pickle_protocol=4)
    c.prove(path, False)
    result["clean_proto4.pt"] = {"named": None}
    # A legacy checkpoint whose magic number is written in protocol 0: torch.load reads it.
    path = os.path.join(out, "clean_legacy_magic.pt")
    torch.save({"w": w}, path, _use_new_zipfile_serialization=False)
    data = open(path, "rb").read()
    first = pickle.dumps(magic, protocol=2)
    assert data.startswith(first)
    with open(path, "wb") as f:
        f.write(pickle.dumps(magic, protocol=0) + data[len(first):])
    assert torch.equal(torch.load(path, weights_only=False)["w"], w)
    c.prove(path, False)
    result["clean_legacy_magic.pt"] = {"named": None}
    os.remove(npy)
    print(json.dumps(result, sort_keys=True))


if __name__ == "__main__":
    sys.exit(command_line(__doc__, write))
