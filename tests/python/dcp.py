#!/usr/bin/env python3
"""The DCP checkpoints of the tests (tests/suite/dcp.rs), written by torch itself in
multi-process gloo runs on 127.0.0.1 (CPU only), and the oracle that consolidates them.
Run with the venv python.

  dcp.py write DIR
      writes the checkpoints below into DIR/NAME/ and prints JSON {NAME: ranks}:
      fsdp2   2 ranks, FSDP2 (`fully_shard`): dim-0 chunks, even and uneven (101 rows), an Adam
              optimizer's state, `step`, an LR scheduler's state, the RNG state, a dict of strings
      tp      2 ranks, DTensor: Shard(1), Shard(0) of one row (a zero-size chunk), Replicate, a
              0-dim tensor, bf16, fp16, fp32, fp8 (e4m3fn, e5m2) and integer tensors
      mesh    4 ranks, a 2x2 mesh: (Shard(0), Shard(1)) grids, (Replicate, Shard(0)), uneven
      flat    1 rank, torchtitan's layout: the model at the top level beside `optimizer`,
              `lr_scheduler`, `train_state`
  dcp.py oracle DIR
      prints JSON {"tensors": {key: {"dtype", "shape", "sha256"}}} for every tensor of
      dcp_to_torch_save's consolidation of DIR (nested keys joined with "."), "objects": the keys
      of the rest, and "metadata_objects": the keys torch's .metadata says are not tensors
      (BytesStorageMetadata), in its order. Unpickles every item: only for checkpoints the tests
      wrote.
  dcp.py safetensors DIR PREFIX OUT
      writes safetensors.torch.save_file(tensors, metadata={"format": "pt"}) of the consolidated
      tensors whose keys start with PREFIX (PREFIX removed); PREFIX "top" takes every tensor
      outside the groups that are not the model (optim, optimizer, lr_scheduler, dataloader,
      train_state, extra), "all" every tensor.
  dcp.py traps DIR CANARY
      writes two hostile 1-rank checkpoints: DIR/metadata-trap/, whose .metadata calls
      os.system("touch CANARY") before its Metadata object, and DIR/object-trap/, an object item
      whose unpickling runs it; and DIR/benign/, a checkpoint of the same shape without them.
  dcp.py load DIR
      loads DIR with torch's own reader (dcp_to_torch_save), which unpickles everything.
  dcp.py broken DIR
      from a 2-rank checkpoint, writes DIR/NAME/ for each way a checkpoint is broken: truncated
      (.metadata cut in half), missing (a .distcp gone), short (a .distcp cut short), absolute
      and escaping (a relative_path that is absolute or leaves the directory), overlap (two
      chunks over the same rows), transformed (transform_descriptors set), absurd (a tensor of
      2^40 x 2^40 elements), retyped (int32 where the chunks hold float32), hole (a chunk left
      out), outside (a chunk past the tensor's shape); and DIR/good/.
  dcp.py big DIR MIB RANKS SHARDING
      a checkpoint of about MIB MiB of bf16 weights (the benchmark's), on RANKS ranks, with
      SHARDING fsdp2 or 2x2.
  dcp.py chunks DIR COUNT
      a 1-rank checkpoint of COUNT small tensors (COUNT chunks).
  dcp.py huge DIR
      a 2-rank checkpoint whose rank-0 file passes 4 GiB: `model.huge`, a uint8 tensor of
      4 GiB + 64 KiB that only rank 0 holds (one chunk, an archive that needs zip64), written
      before rank 0's chunk of `model.rows` (Shard(0) over both ranks), which so lies past 4 GiB
      in its file; then prints JSON {key: sha256} of each tensor as torch's own DCP reader
      (dcp.load into full tensors, no second copy on disk) reads it back.
"""

import hashlib
import io
import json
import os
import socket
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.multiprocessing as mp

DTYPES = {
    torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16", torch.float64: "F64",
    torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8",
    torch.uint8: "U8", torch.bool: "BOOL", torch.float8_e4m3fn: "F8_E4M3",
    torch.float8_e5m2: "F8_E5M2",
}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(ranks, fn, *args):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(free_port())
    if ranks == 1:
        worker(0, 1, fn, args)
    else:
        mp.spawn(worker, args=(ranks, fn, args), nprocs=ranks, join=True)


def worker(rank, ranks, fn, args):
    dist.init_process_group("gloo", rank=rank, world_size=ranks)
    try:
        torch.manual_seed(1234)
        fn(rank, ranks, *args)
        dist.barrier()
    finally:
        dist.destroy_process_group()


def filled(shape, dtype, seed):
    """A tensor whose values say where they are (so a misplaced chunk is seen)."""
    g = torch.Generator().manual_seed(seed)
    t = torch.randn(shape, generator=g, dtype=torch.float32) * 3
    if dtype.is_floating_point:
        return t.to(dtype)
    if dtype == torch.bool:
        return t > 0
    return t.to(torch.int64).to(dtype)


def fsdp2(rank, ranks, out):
    from torch.distributed.checkpoint.state_dict import get_state_dict
    from torch.distributed.fsdp import fully_shard

    model = torch.nn.Sequential(
        torch.nn.Linear(16, 101), torch.nn.ReLU(), torch.nn.Linear(101, 8, bias=False)
    )
    model.register_buffer("scale", torch.tensor(0.5))
    for layer in (model[0], model[2]):
        fully_shard(layer)
    fully_shard(model)
    optim = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.StepLR(optim, step_size=3)
    model(torch.randn(4, 16)).sum().backward()
    optim.step()
    sched.step()
    model_sd, optim_sd = get_state_dict(model, optim)
    state = {
        "model": model_sd,
        "optim": optim_sd,
        "step": 7,
        "lr_scheduler": sched.state_dict(),
        "rng": torch.get_rng_state(),
        "extra": {"names": {"run": "fsdp2", "note": "a dict of strings"}},
    }
    dcp.save(state, checkpoint_id=out)


def distribute_tensor(full, mesh, place):
    """torch's distribute_tensor; float8 (which gloo cannot scatter) through its bytes."""
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor import distribute_tensor as distribute

    if full.dtype not in (torch.float8_e4m3fn, torch.float8_e5m2):
        return distribute(full, mesh, place)
    local = distribute(full.view(torch.uint8), mesh, place).to_local().view(full.dtype)
    return DTensor.from_local(local, mesh, place, shape=full.shape, stride=full.stride())


def tp(rank, ranks, out):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard

    mesh = init_device_mesh("cpu", (ranks,))
    model = {
        "wq.weight": distribute_tensor(filled((6, 10), torch.float32, 1), mesh, [Shard(1)]),
        "wk.weight": distribute_tensor(filled((5, 7), torch.bfloat16, 2), mesh, [Shard(1)]),
        "row": distribute_tensor(filled((1, 9), torch.float16, 3), mesh, [Shard(0)]),
        "norm.weight": distribute_tensor(filled((12,), torch.float32, 4), mesh, [Replicate()]),
        "f8.e4m3": distribute_tensor(filled((4, 6), torch.float8_e4m3fn, 5), mesh, [Shard(0)]),
        "f8.e5m2": distribute_tensor(filled((3, 8), torch.float8_e5m2, 6), mesh, [Shard(1)]),
        "ids": distribute_tensor(filled((7, 3), torch.int64, 7), mesh, [Shard(0)]),
        "mask": distribute_tensor(filled((4, 4), torch.uint8, 8), mesh, [Shard(1)]),
        "tiny": distribute_tensor(filled((3, 2), torch.int8, 9), mesh, [Shard(0)]),
        "temperature": torch.tensor(0.75),
        "count": torch.tensor(3, dtype=torch.int32),
    }
    dcp.save({"model": model, "step": 11}, checkpoint_id=out)


def mesh2x2(rank, ranks, out):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard

    mesh = init_device_mesh("cpu", (2, 2))
    model = {
        "grid.weight": distribute_tensor(filled((8, 12), torch.float32, 11), mesh, [Shard(0), Shard(1)]),
        "uneven.weight": distribute_tensor(filled((5, 7), torch.bfloat16, 12), mesh, [Shard(0), Shard(1)]),
        "half.weight": distribute_tensor(filled((6, 4), torch.float16, 13), mesh, [Replicate(), Shard(0)]),
        "flip.weight": distribute_tensor(filled((4, 10), torch.float32, 14), mesh, [Shard(1), Shard(0)]),
        "both0.weight": distribute_tensor(filled((9, 3), torch.float32, 15), mesh, [Shard(0), Shard(0)]),
        "bias": distribute_tensor(filled((10,), torch.float32, 16), mesh, [Replicate(), Replicate()]),
    }
    dcp.save({"model": model}, checkpoint_id=out)


def flat(rank, ranks, out):
    model = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.Linear(6, 2))
    optim = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(2, 4)).sum().backward()
    optim.step()
    state = dict(model.state_dict())
    state["tok_embeddings.weight"] = filled((11, 4), torch.bfloat16, 21)
    state["optimizer"] = optim.state_dict()
    state["lr_scheduler"] = {"last_epoch": 3, "base_lrs": [0.1]}
    state["train_state"] = {"step": 40, "log_steps": [10, 20]}
    dcp.save(state, checkpoint_id=out)


def big(rank, ranks, out, mib, sharding):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard

    if sharding == "2x2":
        mesh, place = init_device_mesh("cpu", (2, 2)), [Shard(0), Shard(1)]
    else:
        mesh, place = init_device_mesh("cpu", (ranks,)), [Shard(0)]
    rows, cols = 4096, 4096
    layers = max(1, mib * (1 << 20) // (rows * cols * 2))
    model = {}
    for i in range(layers):
        full = torch.empty((rows, cols), dtype=torch.bfloat16)
        full.view(torch.int16).copy_(
            torch.arange(rows * cols, dtype=torch.int32).reshape(rows, cols).to(torch.int16) + i
        )
        model[f"layers.{i}.weight"] = distribute_tensor(full, mesh, place)
    dcp.save({"model": model}, checkpoint_id=out)


def chunks(rank, ranks, out, count):
    model = {f"t.{i}": torch.full((4,), float(i)) for i in range(count)}
    dcp.save({"model": model}, checkpoint_id=out)


HUGE = (1 << 32) + (1 << 16)


def huge(rank, ranks, out):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard

    mesh = init_device_mesh("cpu", (ranks,))
    model = {}
    if rank == 0:
        # Every 4 bytes their own index: a misplaced stretch does not read back the same. First,
        # as a rank writes its items in the state dict's order.
        model["huge"] = torch.arange(HUGE // 4, dtype=torch.int32).view(torch.uint8)
    model["rows"] = distribute_tensor(filled((10, 3), torch.float32, 41), mesh, [Shard(0)])
    dcp.save({"model": model}, checkpoint_id=out)


def huge_digests(directory):
    """Each tensor of the `huge` checkpoint as torch's DCP reader loads it, by sha256, once torch's
    own reading of .metadata shows the layout the test needs."""
    import pickle

    with open(os.path.join(directory, ".metadata"), "rb") as f:
        places = {(i.fqn, s.relative_path): s for i, s in pickle.load(f).storage_data.items()}
    past = places[("model.rows", "__0_0.distcp")].offset
    assert past > 1 << 32 and places[("model.huge", "__0_0.distcp")].length > 1 << 32, places
    with open(os.path.join(directory, "__0_0.distcp"), "rb") as f:
        f.seek(past - 200)
        assert b"PK\x06\x06" in f.read(200), "no zip64 end record before the second chunk"
    state = {"model": {"rows": torch.empty((10, 3)), "huge": torch.empty(HUGE, dtype=torch.uint8)}}
    dcp.load(state, checkpoint_id=directory, no_dist=True)
    return {f"model.{k}": hashlib.sha256(t.contiguous().view(torch.uint8).numpy()).hexdigest()
            for k, t in state["model"].items()}


class Canary:
    """An object whose unpickling runs a command (its pickling runs nothing)."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (os.system, (f"touch {self.path}",))


def small(rank, ranks, out, extra):
    state = {"model": {"w": filled((4, 3), torch.float32, 31)}}
    if extra is not None:
        state["extra"] = {"hook": extra}
    dcp.save(state, checkpoint_id=out)


def traps(directory, canary):
    run(1, small, os.path.join(directory, "object-trap"), Canary(canary))
    run(1, small, os.path.join(directory, "benign"), None)
    target = os.path.join(directory, "metadata-trap")
    run(1, small, target, None)
    meta = os.path.join(target, ".metadata")
    real = open(meta, "rb").read()
    assert real[:2] == b"\x80\x04"
    call = b"\x80\x04cos\nsystem\n\x8c" + bytes([len(f"touch {canary}")]) + f"touch {canary}".encode()
    open(meta, "wb").write(call + b"\x85R0" + real[2:])


def broken(directory):
    import pickle
    import shutil

    good = os.path.join(directory, "good")
    run(2, fsdp2, good)

    def variant(name, change_metadata=None):
        out = os.path.join(directory, name)
        shutil.copytree(good, out)
        if change_metadata:
            path = os.path.join(out, ".metadata")
            with open(path, "rb") as f:
                m = pickle.load(f)
            change_metadata(m)
            with open(path, "wb") as f:
                pickle.dump(m, f)
        return out

    out = variant("truncated")
    meta = os.path.join(out, ".metadata")
    data = open(meta, "rb").read()
    open(meta, "wb").write(data[: len(data) // 2])
    os.remove(os.path.join(variant("missing"), "__1_0.distcp"))
    with open(os.path.join(variant("short"), "__1_0.distcp"), "r+b") as f:
        f.truncate(1000)

    def relocate(path):
        def change(m):
            for k, v in m.storage_data.items():
                if v.relative_path == "__1_0.distcp":
                    v.relative_path = path
        return change

    variant("absolute", relocate("/etc/passwd"))
    variant("escaping", relocate("../good/__1_0.distcp"))
    # Not broken: a data file in a subdirectory of the checkpoint (torch's reader joins the
    # checkpoint's path and relative_path, as for any other).
    below = variant("subdir", relocate("data/__1_0.distcp"))
    os.makedirs(os.path.join(below, "data"))
    os.rename(os.path.join(below, "__1_0.distcp"), os.path.join(below, "data/__1_0.distcp"))

    def overlap(m):
        w = m.state_dict_metadata["model.0.weight"]
        w.chunks[1].offsets = torch.Size([40, 0])
        w.chunks[1].sizes = torch.Size([50, 16])
        for k in list(m.storage_data):
            if k.fqn == "model.0.weight" and k.offset == torch.Size([51, 0]):
                from torch.distributed.checkpoint.metadata import MetadataIndex
                m.storage_data[MetadataIndex("model.0.weight", torch.Size([40, 0]), 1)] = m.storage_data.pop(k)

    variant("overlap", overlap)

    def transformed(m):
        for v in m.storage_data.values():
            v.transform_descriptors = ["stream.zstd/1"]

    variant("transformed", transformed)

    def absurd(m):
        m.state_dict_metadata["model.0.weight"].size = torch.Size([2**40, 2**40])

    variant("absurd", absurd)

    def retyped(m):
        m.state_dict_metadata["model.0.weight"].properties.dtype = torch.int32

    variant("retyped", retyped)

    def hole(m):
        w = m.state_dict_metadata["model.0.weight"]
        w.chunks = w.chunks[:1]

    variant("hole", hole)

    def outside(m):
        w = m.state_dict_metadata["model.0.weight"]
        w.size = torch.Size([90, 16])

    variant("outside", outside)


def flatten(value, prefix, tensors, objects):
    if isinstance(value, torch.Tensor):
        tensors[prefix] = value
    elif isinstance(value, dict):
        for k, v in value.items():
            flatten(v, f"{prefix}.{k}" if prefix else str(k), tensors, objects)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            flatten(v, f"{prefix}.{i}", tensors, objects)
    else:
        objects.append(prefix)


def consolidated(directory):
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "out.pt")
        dcp_to_torch_save(directory, out)
        state = torch.load(out, weights_only=False)
    tensors, objects = {}, []
    flatten(state, "", tensors, objects)
    return tensors, objects


def raw(t):
    t = t.contiguous()
    return t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""


def main():
    cmd, directory = sys.argv[1], sys.argv[2]
    if cmd == "write":
        made = {}
        for name, ranks, fn in [("fsdp2", 2, fsdp2), ("tp", 2, tp), ("mesh", 4, mesh2x2),
                                ("flat", 1, flat)]:
            out = os.path.join(directory, name)
            run(ranks, fn, out)
            made[name] = ranks
        print(json.dumps(made))
    elif cmd == "oracle":
        tensors, objects = consolidated(directory)
        out = {k: {"dtype": DTYPES[t.dtype], "shape": list(t.shape),
                   "sha256": hashlib.sha256(raw(t)).hexdigest()} for k, t in tensors.items()}
        import pickle

        from torch.distributed.checkpoint.metadata import BytesStorageMetadata

        with open(os.path.join(directory, ".metadata"), "rb") as f:
            meta = pickle.load(f)
        listed = [k for k, v in meta.state_dict_metadata.items()
                  if isinstance(v, BytesStorageMetadata)]
        print(json.dumps({"tensors": out, "objects": objects, "metadata_objects": listed}))
    elif cmd == "safetensors":
        from safetensors.torch import save_file

        prefix, out = sys.argv[3], sys.argv[4]
        tensors, _ = consolidated(directory)
        not_model = ("optim", "optimizer", "lr_scheduler", "dataloader", "train_state", "extra")
        if prefix == "top":
            chosen = {k: t for k, t in tensors.items() if k.split(".")[0] not in not_model}
        elif prefix == "all":
            chosen = tensors
        else:
            chosen = {k[len(prefix):]: t for k, t in tensors.items() if k.startswith(prefix)}
        chosen = {k: t.contiguous() for k, t in chosen.items()}
        save_file(chosen, out, metadata={"format": "pt"})
    elif cmd == "traps":
        traps(directory, sys.argv[3])
    elif cmd == "load":
        consolidated(directory)
    elif cmd == "broken":
        broken(directory)
    elif cmd == "big":
        mib, ranks, sharding = int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
        run(ranks, big, directory, mib, sharding)
    elif cmd == "huge":
        run(2, huge, directory)
        print(json.dumps(huge_digests(directory)))
    elif cmd == "chunks":
        run(1, chunks, directory, int(sys.argv[3]))
    else:
        sys.exit(f"unknown command {cmd}")


if __name__ == "__main__":
    main()
