#!/usr/bin/env python3
"""Checkpoints whose zip archive torch's reader (miniz) and another zip reader see differently,
and one whose pickle rewrites a module (tests/suite/traps.rs). Run with the venv python, which
has torch.

  ziptraps.py write DIR MARKER
      writes DIR/zip_*.pt from a torch.save checkpoint of real tensors, its data.pkl replaced by
      one that creates MARKER when torch.load(weights_only=False) unpickles it. Each archive is
      written with Python's zipfile where it can write it, and byte by byte (zipkit) otherwise.
      Each is proven by torch itself, in a child process of its own (trapkit.Canary): either
      torch.load runs the malicious pickle (MARKER appears), or torch.load refuses the archive
      (it raises, and MARKER does not appear). Prints JSON
      {file: {"named": the global the refusal must name, or null,
              "refused": the rule the refusal must name, or null,
              "torch": "runs", "refuses" or "loads"}}.
"""

import json
import os
import struct
import sys
import warnings
import zipfile

import torch

from trapkit import Canary, command_line, Ops, call, u
from zipkit import Record, archive, directory, end_record, locals_of, records_of, unicode_path


def write(out, marker):
    os.makedirs(out, exist_ok=True)
    c = Canary(marker)
    gen = torch.Generator().manual_seed(40)
    base = os.path.join(out, ".base.pt")
    torch.save({"w": torch.randn(3, 4, generator=gen), "b": torch.randn(4, generator=gen)}, base)
    records = records_of(base)
    os.remove(base)
    pkl = next(r for r in records if r.name.endswith(b"/data.pkl"))
    others = [r for r in records if r is not pkl]
    top = pkl.name.split(b"/")[0]
    # data.pkl with a call of os.system before the state dict (its result popped).
    evil = b"\x80\x02" + call(Ops(b"cos\nsystem\n"), f"touch {marker}") + b"0" + pkl.data[2:]
    result = {}

    def record(r, **change):
        copy = Record(r.name, r.data)
        for k, v in change.items():
            setattr(copy, k, v)
        return copy

    def rest():
        return [record(r) for r in others]

    def keep(name, data, named, refused, torch_does):
        """Writes `data` as `name` and proves what torch.load does with it: "runs" its call,
        "refuses" the archive, or "loads" it (a clean one)."""
        path = os.path.join(out, name)
        with open(path, "wb") as f:
            f.write(data)
        if torch_does == "refuses":
            c.refuses(path)
        else:
            c.prove(path, torch_does == "runs")
        result[name] = {"named": named, "refused": refused, "torch": torch_does}

    def with_zipfile(entries, extra=None):
        """The archive zipfile writes of (name, bytes) pairs; `extra` sets a record's extra
        field by name."""
        import io
        buf = io.BytesIO()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "Duplicate name"
            with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
                for n, d in entries:
                    info = zipfile.ZipInfo(n.decode(), (2024, 1, 1, 0, 0, 0))
                    info.extra = (extra or {}).get(n, b"")
                    z.writestr(info, d)
        return buf.getvalue()

    pairs = [(r.name, r.data) for r in others]
    # Two records of exactly one name, the malicious one first (torch's reader, by its sort,
    # takes it here) and the malicious one last (the second of two neighbours: taken).
    keep("zip_duplicate_malicious_first.pt",
         with_zipfile([(pkl.name, evil)] + pairs + [(pkl.name, pkl.data)]),
         "os.system", "DuplicateEntry", "runs")
    keep("zip_duplicate_malicious_last.pt",
         with_zipfile([(pkl.name, pkl.data), (pkl.name, evil)] + pairs),
         "os.system", "DuplicateEntry", "runs")
    # The malicious data.pkl renamed `notes.txt` by a Unicode Path extra field (whose CRC is its
    # raw name's, so readers that take the field take it): miniz ignores the field.
    keep("zip_unicode_path.pt",
         with_zipfile([(pkl.name, evil)] + pairs,
                      {pkl.name: unicode_path(top + b"/notes.txt", pkl.name)}),
         "os.system", None, "runs")
    # An end record that counts one record fewer than the directory holds: torch's reader sees
    # the malicious data.pkl, not the clean one after it.
    keep("zip_record_count_hides_one.pt",
         archive([record(pkl, data=evil)] + rest() + [record(pkl)], total=len(records)),
         "os.system", "RecordCount", "runs")
    # One record more than the directory holds: torch's reader refuses the archive.
    keep("zip_record_count_one_more.pt",
         archive([record(pkl)] + rest(), total=len(records) + 1),
         None, "BadDirectory", "refuses")
    # A clean archive, then a second end record whose directory is past the end of the file:
    # torch's reader takes the last end record and refuses the archive; nothing falls back to
    # the first.
    clean = archive([record(pkl)] + rest())
    cd_size, cd_start = struct.unpack_from("<II", clean, len(clean) - 10)
    keep("zip_two_end_records.pt",
         clean + end_record(len(records), cd_size, len(clean) + 1000),
         None, "BadEndRecord", "refuses")
    # Two directories, each with its end record: the first's data.pkl is clean, the last's (the
    # one torch's reader takes) is the malicious one laid out after it.
    clean_pkl, bad, shared = record(pkl), record(pkl, data=evil), rest()
    data = locals_of([clean_pkl] + shared + [bad])
    cd1 = directory([clean_pkl] + shared)
    cd2 = directory([bad] + shared)
    keep("zip_second_end_record.pt",
         data + cd1 + end_record(len(records), len(cd1), len(data)) + cd2
         + end_record(len(records), len(cd2), len(data) + len(cd1) + 22),
         "os.system", None, "runs")
    # A local header that names its record otherwise (miniz reads the data after it all the
    # same).
    keep("zip_local_name.pt",
         archive([record(pkl, data=evil, local_name=top + b"/notes.pkl")] + rest()),
         "os.system", "LocalHeader", "runs")
    # The top folder is the first record's: a first record in another folder than the rest makes
    # torch.load refuse the archive (every record must be in it); the data.pkl in that folder
    # is the malicious one.
    keep("zip_top_folder.pt",
         with_zipfile([(b"evil/version", b"3\n"), (pkl.name, pkl.data)] + pairs
                      + [(b"evil/data.pkl", evil)]),
         "os.system", "OutsideTopFolder", "refuses")
    # picklescan's sys_module_override: BUILD on the module torch._utils binds _rebuild_tensor
    # to 'builtins', then 'eval'; the two reads of it name builtins.eval, which is called.
    rewrite = (b"\x80\x04" + u("torch._utils") + b"\x94" + u("_rebuild_tensor") + b"\x94\x93\x940"
               + u("torch") + u("_utils") + b"\x93\x940"
               + b"h\x03}h\x01" + u("builtins") + b"sb0h\x00h\x01\x93"
               + b"h\x03}h\x01" + u("eval") + b"sb0h\x00h\x01\x93\x93"
               + u(f"__import__('os').system('touch {marker}')") + b"\x85R0")
    keep("zip_module_rewrite.pt",
         with_zipfile([(pkl.name, rewrite + pkl.data[2:])] + pairs),
         "builtins.eval", None, "runs")
    # The clean checkpoint these are made of, as zipkit lays it out: converted as ever.
    keep("zip_clean.pt", archive([record(pkl)] + rest()), None, None, "loads")
    print(json.dumps(result, sort_keys=True))


if __name__ == "__main__":
    sys.exit(command_line(__doc__, write))
