#!/usr/bin/env python3
"""Cold 4 KiB random reads through two or more tensormount binaries, alternated.

    sudo python3 benches/ab_random_reads.py [--size MiB] [--rounds N] [--reads N] BIN_A BIN_B...

Writes a safetensors file with one U8 tensor of random bytes, locks it in the page cache
(mlockall: these VMs evict page cache on their own), then runs rounds in which every binary, in
an order that rotates, mounts the file afresh (`BIN SRC MNT -f`) and serves the same random
4 KiB preads of the tensor, so that each one reaches the daemon unless the kernel's readahead of an
earlier one brought it in. Prints the microseconds per read of every run, then per binary the
median, and the median over rounds of its ratio to BIN_A in the same round (below 1 is faster).
Comparing BIN_A with a copy of itself shows the noise of the machine.

Needs root and /dev/fuse; nothing but the Python standard library.
"""

import argparse
import ctypes
import mmap
import os
import random
import statistics
import struct
import subprocess
import sys
import tempfile
import time


def write_fixture(path, size):
    header = ('{"t":{"dtype":"U8","shape":[%d],"data_offsets":[0,%d]}}' % (size, size)).encode()
    header += b" " * (-len(header) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header)))
        f.write(header)
        left = size
        while left:
            n = min(left, 16 << 20)
            f.write(os.urandom(n))
            left -= n


def lock_in_page_cache(path):
    f = open(path, "rb")
    m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
    for i in range(0, len(m), mmap.PAGESIZE):
        m[i]
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.mlockall(1) != 0:  # MCL_CURRENT
        sys.exit("mlockall failed: %s" % os.strerror(ctypes.get_errno()))
    return f, m


def one_run(binary, src, mnt, offsets):
    daemon = subprocess.Popen([binary, src, mnt, "-f"], stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while not os.path.exists(os.path.join(mnt, "t")):
            if daemon.poll() is not None or time.monotonic() > deadline:
                sys.exit("%s did not mount %s" % (binary, src))
            time.sleep(0.02)
        fd = os.open(os.path.join(mnt, "t"), os.O_RDONLY)
        start = time.perf_counter()
        for off in offsets:
            os.pread(fd, 4096, off)
        took = time.perf_counter() - start
        os.close(fd)
    finally:
        subprocess.run(["umount", mnt], check=False)
        daemon.wait()
    return took / len(offsets) * 1e6


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size", type=int, default=64, help="tensor size in MiB (default 64)")
    p.add_argument("--rounds", type=int, default=20, help="rounds (default 20)")
    p.add_argument("--reads", type=int, default=20000, help="preads per run (default 20000)")
    p.add_argument("binaries", nargs="+")
    a = p.parse_args()
    binaries = [os.path.abspath(b) for b in a.binaries]
    with tempfile.TemporaryDirectory(prefix="tensormount-ab-") as tmp:
        src = os.path.join(tmp, "t.safetensors")
        mnt = os.path.join(tmp, "mnt")
        os.mkdir(mnt)
        write_fixture(src, a.size << 20)
        keep = lock_in_page_cache(src)
        pages = (a.size << 20) // 4096
        rng = random.Random(42)
        offsets = [rng.randrange(pages) * 4096 for _ in range(a.reads)]
        rows = []
        for r in range(a.rounds):
            row = [0.0] * len(binaries)
            for k in range(len(binaries)):
                i = (k + r) % len(binaries)
                row[i] = one_run(binaries[i], src, mnt, offsets)
            rows.append(row)
            print("round %2d: " % (r + 1) + "  ".join("%.2f" % v for v in row), flush=True)
        print("%d KiB random reads, %d per run, %d rounds, %d MiB tensor, us per read:"
              % (4, a.reads, a.rounds, a.size))
        for i, b in enumerate(binaries):
            med = statistics.median(row[i] for row in rows)
            ratio = statistics.median(row[i] / row[0] for row in rows)
            print("  %-40s median %6.2f us   median ratio to the first %.3f" % (b, med, ratio))
        del keep


if __name__ == "__main__":
    main()
