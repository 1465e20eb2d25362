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
  rss        the daemon's resident memory after the full read, and after mounting the
             10,000-chunk checkpoint (with its mount time)
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
WRITER = os.path.join(ROOT, "tests/python/dcp_checkpoints.py")


def sh(*args, **kw):
    return subprocess.run(args, check=True, **kw)


def drop_caches():
    sh("sync")
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def mount(src, mnt):
    os.makedirs(mnt, exist_ok=True)
    start = time.perf_counter()
    sh(BIN, src, mnt)
    return start


def unmount(mnt):
    sh("fusermount3", "-u", mnt)


def daemon_rss(src):
    out = subprocess.run(["pgrep", "-f", f"{BIN} {src}"], capture_output=True, text=True).stdout
    pid = int(out.split()[0])
    with open(f"/proc/{pid}/status") as f:
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


def median(f, runs):
    f()
    return statistics.median(f() for _ in range(runs))


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

        t_ready = median(ready, runs)
        t_base = median(baseline, 1)
        print(json.dumps({"row": "ready", "sharding": sharding, "bytes": size,
                          "tensormount_s": round(t_ready, 4), "baseline_s": round(t_base, 3),
                          "speedup": round(t_base / t_ready, 1)}), flush=True)

        distcp = sorted(os.path.join(ckpt, f) for f in os.listdir(ckpt) if f.endswith(".distcp"))
        mount(src, mnt)
        virt = os.path.join(mnt, "step-1/model.safetensors")
        warm_m = median(lambda: read_all([virt])[0], runs)
        warm_b = median(lambda: read_all(distcp)[0], runs)
        rss = daemon_rss(src)
        unmount(mnt)

        def cold(paths, mounted):
            drop_caches()
            if mounted:
                mount(src, mnt)
            took = read_all(paths)[0]
            if mounted:
                unmount(mnt)
            return took

        cold_m = statistics.median(cold([virt], True) for _ in range(runs))
        cold_b = statistics.median(cold(distcp, False) for _ in range(runs))
        gb = size / 1e9
        print(json.dumps({"row": "read", "sharding": sharding,
                          "warm_GBps": round(gb / warm_m, 2), "warm_baseline_GBps": round(gb / warm_b, 2),
                          "warm_ratio": round(warm_b / warm_m, 2),
                          "cold_GBps": round(gb / cold_m, 2), "cold_baseline_GBps": round(gb / cold_b, 2),
                          "cold_ratio": round(cold_b / cold_m, 2)}), flush=True)
        print(json.dumps({"row": "rss", "sharding": sharding, "after_full_read_MiB": round(rss / 2**20, 1)}),
              flush=True)

    def chunked():
        start = mount(chunks, mnt)
        os.listdir(os.path.join(mnt, "c/checkpoint.tensors"))
        return time.perf_counter() - start

    t = median(lambda: (chunked(), unmount(mnt))[0], runs)
    mount(chunks, mnt)
    os.listdir(os.path.join(mnt, "c/checkpoint.tensors"))
    rss = daemon_rss(chunks)
    unmount(mnt)
    print(json.dumps({"row": "rss", "checkpoint": "10000 chunks", "mount_and_list_s": round(t, 3),
                      "after_mount_MiB": round(rss / 2**20, 1)}), flush=True)


if __name__ == "__main__":
    main()
