"""How the trap fixtures (traps.py, corpus.py) are built and proven.

Opcodes are written by hand where torch.save or pickle.dumps cannot write them; every trap is
proven one by `Canary.prove`, which loads it with torch.load(weights_only=False) in a forked
child and watches for what its call does: a marker file (or directory) created, or a TCP
connection to a listener of the canary's own on 127.0.0.1.
"""

import argparse
import os
import shutil
import signal
import socket
import struct
import threading
import time
import zipfile

import torch


class Ops(bytes):
    """Opcodes that push one value: written into a pickle as they are."""


def u(s):
    """SHORT_BINUNICODE or BINUNICODE of `s`."""
    b = s.encode()
    if len(b) < 256:
        return Ops(b"\x8c" + bytes([len(b)]) + b)
    return Ops(b"X" + struct.pack("<I", len(b)) + b)


def obj(x):
    """Opcodes that push `x`: a str, bytes, int, bool, None, tuple, list or dict of them, or
    Ops."""
    if isinstance(x, Ops):
        return bytes(x)
    if isinstance(x, str):
        return u(x)
    if isinstance(x, bytes):
        if len(x) < 256:
            return b"C" + bytes([len(x)]) + x
        return b"B" + struct.pack("<I", len(x)) + x
    if x is None:
        return b"N"
    if isinstance(x, bool):
        return b"\x88" if x else b"\x89"
    if isinstance(x, int):
        return b"J" + struct.pack("<i", x)
    if isinstance(x, tuple):
        return b"(" + b"".join(obj(i) for i in x) + b"t"
    if isinstance(x, list):
        return b"(" + b"".join(obj(i) for i in x) + b"l"
    if isinstance(x, dict):
        return b"(" + b"".join(obj(k) + obj(v) for k, v in x.items()) + b"d"
    raise TypeError(type(x))


def glob(module, name):
    """GLOBAL module name (a text line each)."""
    return Ops(f"c{module}\n{name}\n".encode())


def sglob(module, name):
    """STACK_GLOBAL of two strings."""
    return Ops(u(module) + u(name) + b"\x93")


def call(f, *args):
    """Opcodes that call the callable `f` pushes on `args` (REDUCE), leaving the result."""
    return Ops(bytes(f) + b"(" + b"".join(obj(a) for a in args) + b"tR")


def with_prefix(path, prefix, proto=2, tail=None):
    """Rewrites data.pkl of the zip checkpoint at `path`: PROTO `proto`, then `prefix`, then the
    original pickle after its PROTO (or `tail` instead of it)."""
    with zipfile.ZipFile(path) as z:
        entries = [(i.filename, z.read(i)) for i in z.infolist()]
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        for name, data in entries:
            if name.endswith("/data.pkl"):
                assert data[:2] == b"\x80\x02", data[:2]
                data = bytes([0x80, proto]) + prefix + (data[2:] if tail is None else tail)
            z.writestr(name, data)


class Canary:
    """What a trap's call leaves behind when torch.load(weights_only=False) unpickles it: the
    marker `marker` (a file or a directory), or a connection to `self.port` on 127.0.0.1, whose
    listener accepts and closes every connection so that no client waits on it."""

    def __init__(self, marker):
        self.marker = marker
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.connections = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            c, _ = self.listener.accept()
            self.connections += 1
            c.close()

    def prove(self, path, malicious):
        """Loads `path` with torch.load(weights_only=False) in a forked child (stdin, stdout and
        stderr /dev/null, 30 s at most): whether the canary fired must be `malicious`."""
        seen = self.connections
        pid = os.fork()
        if pid == 0:
            try:
                null = os.open(os.devnull, os.O_RDWR)
                for fd in (0, 1, 2):
                    os.dup2(null, fd)
                os.chdir(os.path.dirname(path))
                os.environ["BROWSER"] = "touch %s"
                os.environ["TORCH_HOME"] = os.path.join(os.path.dirname(self.marker), "torch")
                signal.alarm(30)
                torch.load(path, weights_only=False)
            except BaseException:
                pass
            finally:
                os._exit(0)
        os.waitpid(pid, 0)
        # What the call started in the background (Popen, a browser) may finish after the load.
        deadline = time.monotonic() + (5 if malicious else 0.2)
        while time.monotonic() < deadline and not (
                os.path.lexists(self.marker) or self.connections > seen):
            time.sleep(0.02)
        fired = os.path.lexists(self.marker) or self.connections > seen
        if os.path.isdir(self.marker) and not os.path.islink(self.marker):
            shutil.rmtree(self.marker)
        elif os.path.lexists(self.marker):
            os.remove(self.marker)
        assert fired == malicious, (
            f"{path}: torch.load {'did not fire' if malicious else 'fired'} the canary")


    def refuses(self, path):
        """Loads `path` with torch.load(weights_only=False) in a forked child, as `prove` does:
        torch.load must raise, and the canary must not fire."""
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                null = os.open(os.devnull, os.O_RDWR)
                for fd in (0, 1, 2):
                    os.dup2(null, fd)
                signal.alarm(30)
                torch.load(path, weights_only=False)
            except Exception:
                code = 3
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        fired = os.path.lexists(self.marker)
        assert os.waitstatus_to_exitcode(status) == 3 and not fired, (
            f"{path}: torch.load did not refuse it ({'fired' if fired else 'loaded'})")


def command_line(doc, write):
    """The command line of a trap script, `SCRIPT write DIR MARKER`, whose `write(dir, marker)`
    writes its samples; `doc` is its help."""
    parser = argparse.ArgumentParser(description=doc,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("write")
    p.add_argument("dir")
    p.add_argument("marker")
    a = parser.parse_args()
    return write(a.dir, a.marker) or 0
