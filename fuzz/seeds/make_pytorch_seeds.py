#!/usr/bin/env python3
"""Writes the seeds of the `pickle` and `checkpoint` targets, fuzz/seeds/{pickle,checkpoint}/,
from the PyTorch fixtures written by torch (src/format/pytorch/testdata/): the checkpoints whole,
and their main pickles (with what follows them, for legacy files). Standard library only.
"""
import os
import shutil
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "..", "..", "src", "format", "pytorch", "testdata")
# The legacy format's first three pickles, which the `pickle` target puts before its input.
LEGACY_PREFIX_PICKLES = 3


def after_pickles(data, count):
    """The bytes after the first `count` pickles of a legacy file (each ends at a STOP that is a
    whole opcode: these fixtures' first pickles hold no '.' byte elsewhere)."""
    at = 0
    for _ in range(count):
        at = data.index(b".", at) + 1
    return data[at:]


seeds = {"checkpoint": {}, "pickle": {}}
for name in sorted(os.listdir(FIXTURES)):
    path = os.path.join(FIXTURES, name)
    if name.endswith(".json") or name.endswith(".py"):
        continue
    data = open(path, "rb").read()
    if len(data) <= 8192:
        seeds["checkpoint"][name] = data
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as z:
            pkl = [n for n in z.namelist() if n.endswith("/data.pkl")][0]
            seeds["pickle"][name + ".pkl"] = z.read(pkl)
    else:
        seeds["pickle"][name + ".pkl"] = after_pickles(data, LEGACY_PREFIX_PICKLES)
seeds["pickle"]["os-system"] = b"cos\nsystem\n(S'echo'\ntR."
seeds["pickle"]["cycle"] = b"\x80\x02]q\x00h\x00a."

for target, files in seeds.items():
    d = os.path.join(HERE, target)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    for name, data in files.items():
        with open(os.path.join(d, name), "wb") as f:
            f.write(data)
