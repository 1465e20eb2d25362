#!/usr/bin/env python3
"""DCP checkpoints through tensormount, against torch's own tools, measured in one run (medians
after a warm-up). Run with the venv python, as root (it mounts), after `cargo build --release`:

  benches/dcp_bench.py DIR [MIB] [RUNS]

writes into DIR a checkpoint of about MIB MiB (default 1024) of bf16 weights on 4 ranks twice,
FSDP2 (dim-0 chunks) and a 2x2 mesh (grids), and a 1-rank checkpoint of 10,000 chunks; then
prints one JSON line per row:

  ready      mount until model.safetensors is loadable (mount + safe_open + every key's
             get_slice metadata), against dcp_to_torch_save + torch.load + save_file (what a user
             runs today, which writes a second copy)
  read       a full read of the virtual model.safetensors (1 MiB reads), warm and cold (page
             cache dropped), against reading the .distcp files the same way
  placement  (FSDP2, 2+ CPUs) the warm read again with the reader and every daemon thread pinned
             to one CPU, then to two different CPUs, each against the .distcp files read on
             the reader's CPU: what a FUSE round trip costs when the kernel hands each request
             to a thread on the same CPU or wakes one on another
  kernel_cache
             the warm read again, mounted with -o kernel_cache (the mount's page cache kept
             across opens, filled by the warm-up read)
  rss        the daemon's resident memory after the full read, and after mounting the
             10,000-chunk checkpoint (with its mount time)

Timed rows give every run's figure (a list, after one warm-up run), so that the report shows
their median and spread; warm reads alternate with their baseline's, run by run.
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BIN = os.environ.get("TENSORMOUNT_BIN", os.path.join(ROOT, "target/release/tensormount"))
WRITER = os.path.join(ROOT, "tests/python/dcp.py")
EVERY_CPU = os.sched_getaffinity(0)


def sh(*args, **kw):
    return subprocess.run(args, check=True, **kw)


def drop_caches():
    sh("sync")
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def mount(src, mnt, *options):
    os.makedirs(mnt, exist_ok=True)
    start = time.perf_counter()
    sh(BIN, *options, src, mnt)
    return start


def unmount(mnt):
    sh("fusermount3", "-u", mnt)


def daemon_pid(src):
    out = subprocess.run(["pgrep", "-f", f"{BIN} {src}"], capture_output=True, text=True).stdout
    return int(out.split()[0])


def daemon_rss(src):
    with open(f"/proc/{daemon_pid(src)}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def read_all(paths, size=1 << 20):
    total = 0
    start = time.perf_counter()
    for p in paths:
        with open(p, "rb", buffering=0) as f:
            while True:
                b = f.read(size)
                if not b:
                    break
                total += len(b)
    return time.perf_counter() - start, total


def loadable(path):
    from safetensors import safe_open

    with safe_open(path, "pt") as f:
        for k in f.keys():
            f.get_slice(k).get_shape()


def samples(f, runs):
    f()
    return [f() for _ in range(runs)]


def paired(f, g, runs):
    """Runs of `f` and of `g`, one of each in turn after a warm-up of each, so that both see
    the machine as it is at that moment (a shared VM drifts between runs)."""
    f()
    g()
    pairs = [(f(), g()) for _ in range(runs)]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def pin(pid, reader_cpu, daemon_cpu):
    """The reader (this process) on `reader_cpu`, every thread of the daemon `pid` on
    `daemon_cpu`; with None, each back on every CPU."""
    every = EVERY_CPU
    os.sched_setaffinity(0, every if reader_cpu is None else {reader_cpu})
    for tid in os.listdir(f"/proc/{pid}/task"):
        os.sched_setaffinity(int(tid), every if daemon_cpu is None else {daemon_cpu})


def main():
    directory = sys.argv[1]
    mib = int(sys.argv[2]) if len(sys.argv) > 2 else 1024
    runs = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    os.makedirs(directory, exist_ok=True)
    made = {}
    for sharding in ["fsdp2", "2x2"]:
        src = os.path.join(directory, f"src-{sharding}")
        ckpt = os.path.join(src, "step-1")
        if not os.path.exists(os.path.join(ckpt, ".metadata")):
            sh(sys.executable, WRITER, "big", ckpt, str(mib), "4", sharding)
        made[sharding] = (src, ckpt)
    chunks = os.path.join(directory, "src-chunks")
    if not os.path.exists(os.path.join(chunks, "c", ".metadata")):
        sh(sys.executable, WRITER, "chunks", os.path.join(chunks, "c"), "10000")
    mnt = os.path.join(directory, "mnt")

    for sharding, (src, ckpt) in made.items():
        size = sum(os.path.getsize(os.path.join(ckpt, f)) for f in os.listdir(ckpt))

        def ready():
            start = mount(src, mnt)
            loadable(os.path.join(mnt, "step-1/model.safetensors"))
            took = time.perf_counter() - start
            unmount(mnt)
            return took

        def baseline():
            code = (
                "import sys, torch\n"
                "from torch.distributed.checkpoint.format_utils import dcp_to_torch_save\n"
                "from safetensors.torch import save_file\n"
                "dcp_to_torch_save(sys.argv[1], sys.argv[2] + '/c.pt')\n"
                "sd = torch.load(sys.argv[2] + '/c.pt', weights_only=False)['model']\n"
                "save_file({k: v.contiguous() for k, v in sd.items()}, sys.argv[2] + '/m.safetensors',"
                " metadata={'format': 'pt'})\n"
            )
            with tempfile.TemporaryDirectory(dir=directory) as out:
                start = time.perf_counter()
                sh(sys.executable, "-c", code, ckpt, out)
                took = time.perf_counter() - start
            return took

        t_ready = samples(ready, runs)
        t_base = samples(baseline, 1)
        print(json.dumps({"row": "ready", "sharding": sharding, "bytes": size,
                          "tensormount_s": t_ready, "baseline_s": t_base,
                          "speedup": round(statistics.median(t_base) / statistics.median(t_ready), 1)}),
              flush=True)

        distcp = sorted(os.path.join(ckpt, f) for f in os.listdir(ckpt) if f.endswith(".distcp"))
        mount(src, mnt)
        virt = os.path.join(mnt, "step-1/model.safetensors")
        gb = size / 1e9

        def gbps(paths):
            return lambda: gb / read_all(paths)[0]

        warm_m, warm_b = paired(gbps([virt]), gbps(distcp), runs)
        rss = daemon_rss(src)
        if sharding == "fsdp2" and len(os.sched_getaffinity(0)) > 1:
            placed = {}
            for where, daemon_cpu in [("same_cpu", 0), ("other_cpu", 1)]:
                pin(daemon_pid(src), 0, daemon_cpu)
                m, b = paired(gbps([virt]), gbps(distcp), runs)
                placed[where] = {"GBps": m, "baseline_GBps": b}
            pin(daemon_pid(src), None, None)
            print(json.dumps({"row": "placement", "sharding": sharding, **placed}), flush=True)
        unmount(mnt)
        # The mount's page cache kept across opens: the warm-up read fills it.
        mount(src, mnt, "-o", "kernel_cache")
        cached, cached_b = paired(gbps([virt]), gbps(distcp), runs)
        unmount(mnt)
        print(json.dumps({"row": "kernel_cache", "sharding": sharding, "GBps": cached,
                          "baseline_GBps": cached_b}), flush=True)

        def cold(paths, mounted):
            drop_caches()
            if mounted:
                mount(src, mnt)
            took = read_all(paths)[0]
            if mounted:
                unmount(mnt)
            return took

        cold_m = [gb / cold([virt], True) for _ in range(runs)]
        cold_b = [gb / cold(distcp, False) for _ in range(runs)]
        print(json.dumps({"row": "read", "sharding": sharding,
                          "warm_GBps": warm_m, "warm_baseline_GBps": warm_b,
                          "cold_GBps": cold_m, "cold_baseline_GBps": cold_b}), flush=True)
        print(json.dumps({"row": "rss", "sharding": sharding, "after_full_read_MiB": round(rss / 2**20, 1)}),
              flush=True)

    def chunked():
        start = mount(chunks, mnt)
        os.listdir(os.path.join(mnt, "c/checkpoint.tensors"))
        return time.perf_counter() - start

    t = samples(lambda: (chunked(), unmount(mnt))[0], runs)
    mount(chunks, mnt)
    os.listdir(os.path.join(mnt, "c/checkpoint.tensors"))
    rss = daemon_rss(chunks)
    unmount(mnt)
    print(json.dumps({"row": "rss", "checkpoint": "10000 chunks", "mount_and_list_s": t,
                      "after_mount_MiB": round(rss / 2**20, 1)}), flush=True)


if __name__ == "__main__":
    main()
