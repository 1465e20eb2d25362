#!/usr/bin/env python3
"""An ollama model store written as ollama writes one, and what each model must show.

    ollama.py write STORE EXPECT.json

Writes, under STORE, `blobs/sha256-HEX` (each named by the SHA-256 of its bytes, mode 0644, as
ollama's `NewLayer` renames a finished blob into place) and `manifests/HOST/NAMESPACE/MODEL/TAG`
(compact JSON and a newline, as `WriteManifest` encodes a manifest: schemaVersion 2, Docker's v2
manifest media type, a config layer whose blob is the model's `ConfigV2` JSON, then the layers
with ollama's media types). The GGUF layers are written by gguf-py's GGUFWriter.

The models: `llama3.2:latest` (model, template, system, params, two licenses, messages) and
`llama3.2:1b`, which shares its model blob; `hf.co/bartowski/Tiny-GGUF:Q4_K_M` (a projector);
`jmorgan/lora:v1` (an adapter); `localhost:5000/team/mini:t` (another host, a port in its name).
Beside them, manifests ollama would refuse to run, each naming its rule: not JSON, not a
manifest, a missing blob, a blob of another size, a digest that is not sha256, a model layer that
is not GGUF. And what a store holds beside: a partial download (`sha256-HEX-partial`,
`sha256-HEX-partial-0`), a temporary blob, a blob no manifest names.

EXPECT.json: per model, its name (as `ollama list` says it), the blob of each file it must show
by name, the Modelfile it must show (written here from ollama's rules: `ollama show
--modelfile`'s header, FROM ./model.gguf, ADAPTER, FROM ./projector.gguf, TEMPLATE, SYSTEM,
PARAMETER by name, LICENSE, MESSAGE; quoted as ollama's `quote` quotes), and which manifests
must be refused with which rule; the referenced blobs, and those no readable manifest names.
"""
import hashlib
import json
import os
import sys
from pathlib import Path

import numpy as np
from gguf import GGUFWriter, GGMLQuantizationType as T

MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
CONFIG = "application/vnd.docker.container.image.v1+json"
IMAGE = "application/vnd.ollama.image."


def gguf_bytes(tmp: Path, arch: str, seed: int, kind: str) -> bytes:
    """A small GGUF model (F32, F16 and Q8_0 tensors) written by gguf-py."""
    rng = np.random.default_rng(seed)
    path = tmp / f"{arch}-{seed}.gguf"
    w = GGUFWriter(path, arch)
    w.add_string("general.name", f"{arch} {kind}")
    w.add_uint32("general.file_type", 7)
    w.add_tensor("token_embd.weight", rng.standard_normal((8, 32)).astype(np.float32))
    w.add_tensor("blk.0.attn_q.weight", rng.standard_normal((32, 32)).astype(np.float16))
    q8 = rng.integers(0, 256, size=(4, 2 * 34), dtype=np.uint8)
    q8[:, 0:2] = np.frombuffer(np.float16(0.01).tobytes(), dtype=np.uint8)
    q8[:, 34:36] = np.frombuffer(np.float16(0.02).tobytes(), dtype=np.uint8)
    w.add_tensor("blk.0.ffn_up.weight", q8, raw_dtype=T.Q8_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    data = path.read_bytes()
    path.unlink()
    return data


class Store:
    def __init__(self, root: Path):
        self.root = root
        (root / "blobs").mkdir(parents=True, exist_ok=True)
        (root / "manifests").mkdir(parents=True, exist_ok=True)
        self.referenced = set()
        self.unreadable = set()

    def blob(self, data: bytes) -> dict:
        digest = hashlib.sha256(data).hexdigest()
        path = self.root / "blobs" / f"sha256-{digest}"
        # As ollama: a temporary file in blobs/, renamed into place once whole.
        tmp = self.root / "blobs" / f"sha256-{os.getpid()}"
        tmp.write_bytes(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
        return {"digest": f"sha256:{digest}", "size": len(data), "path": str(path)}

    def layer(self, kind: str, data: bytes) -> dict:
        b = self.blob(data)
        self.referenced.add(b["path"])
        return {"mediaType": IMAGE + kind, "digest": b["digest"], "size": b["size"]}

    def manifest(self, name: str, layers: list, raw: bytes | None = None, readable: bool = True,
                 config_format: str = "gguf") -> Path:
        host, namespace, model, tag = name.split("/")
        config = json.dumps({
            "model_format": config_format, "model_family": "llama", "model_families": ["llama"],
            "model_type": "1B", "file_type": "Q8_0", "architecture": "amd64", "os": "linux",
            "rootfs": {"type": "layers", "diff_ids": [l["digest"] for l in layers]},
        }, separators=(",", ":")).encode()
        if raw is not None:
            c = {"digest": "", "size": 0}
        else:
            c = self.blob(config)
            # A manifest that cannot be read names no blob, its config's included.
            (self.referenced.add if readable else self.unreadable.add)(c["path"])
        m = {
            "schemaVersion": 2,
            "mediaType": MANIFEST,
            "config": {"mediaType": CONFIG, "digest": c["digest"], "size": c["size"]},
            "layers": layers,
        }
        path = self.root / "manifests" / host / namespace / model / tag
        path.parent.mkdir(parents=True, exist_ok=True)
        # As WriteManifest: json.NewEncoder(f).Encode(m), compact with a newline.
        path.write_bytes(raw if raw is not None else json.dumps(m, separators=(",", ":")).encode() + b"\n")
        return path


def safetensors_bytes(tensors: dict, metadata: dict | None) -> bytes:
    """A whole safetensors file, as ollama's x/create writes a tensor blob (the official writer
    lays it out the same way: header padded with spaces to 8 bytes, then the data)."""
    from safetensors.numpy import save
    return save(tensors, metadata=metadata)


def mlx_model(s: Store, tmp: Path) -> dict:
    """A model stored as safetensors, as ollama's MLX engine (x/create/client) stores one: a
    tensor layer per tensor (an expert group packed in one), each blob a whole safetensors file
    named by the layer's `name`; a quantized tensor as U32 with its `.scale` and `.bias`; the
    config and tokenizer as JSON layers; a config blob whose model_format is safetensors."""
    rng = np.random.default_rng(9)
    blobs = {
        "model.embed_tokens.weight": ({"model.embed_tokens.weight": rng.standard_normal((16, 8)).astype(np.float16)}, None),
        "model.layers.0.mlp.experts": ({
            "model.layers.0.mlp.experts.0.down_proj.weight": rng.standard_normal((8, 4)).astype(np.float32),
            "model.layers.0.mlp.experts.1.down_proj.weight": rng.standard_normal((8, 4)).astype(np.float32),
        }, None),
        "model.layers.0.self_attn.q_proj.weight": ({
            "model.layers.0.self_attn.q_proj.weight": rng.integers(0, 2**32, size=(8, 1), dtype=np.uint32),
            "model.layers.0.self_attn.q_proj.weight.scale": rng.standard_normal((8, 1)).astype(np.float16),
            "model.layers.0.self_attn.q_proj.weight.bias": rng.standard_normal((8, 1)).astype(np.float16),
        }, {"quant_type": "int4", "group_size": "64"}),
    }
    layers, tensors = [], {}
    for name, (ts, meta) in blobs.items():
        data = safetensors_bytes(ts, meta)
        l = s.layer("tensor", data)
        l["name"] = name
        layers.append(l)
        b = str(s.root / "blobs" / l["digest"].replace(":", "-"))
        tensors.update({t: b for t in ts})
    files = {}
    for name, data in [("config.json", b'{"architectures":["LlamaForCausalLM"],"hidden_size":8}'),
                       ("tokenizer.json", b'{"version":"1.0","model":{"type":"BPE"}}')]:
        l = s.layer("json", data)
        l["name"] = name
        layers.append(l)
        files[name] = str(s.root / "blobs" / l["digest"].replace(":", "-"))
    texts = {}
    for kind, file, data in [("template", "template", b"{{ .Prompt }}"), ("license", "license", b"Apache-2.0")]:
        l = s.layer(kind, data)
        layers.append(l)
        files[file] = str(s.root / "blobs" / l["digest"].replace(":", "-"))
        texts[file] = data.decode()
    s.manifest("registry.ollama.ai/library/mlx-model/bf16", layers, config_format="safetensors")
    # ollama show names a model stored as safetensors in FROM, with no hint (GetModelInfo's IsMLX).
    body = modelfile("mlx-model:bf16", files, texts).split("\n\n", 1)[1].split("\n", 1)[1]
    mf = '# Modelfile generated by "ollama show"\nFROM mlx-model:bf16\n' + body
    return {"name": "mlx-model:bf16", "files": files, "tensors": tensors, "modelfile": mf}


def quote(s: str) -> str:
    """ollama's parser.quote."""
    if "\n" in s or s.startswith(" ") or s.endswith(" "):
        if '"' in s:
            return '"""' + s + '"""'
        return '"' + s + '"'
    return s


def go_value(v) -> str:
    """Go's %v of what json.Decode makes of a value (numbers are float64)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        f = float(v)
        r = repr(f)
        mantissa, _, exp = f"{f:e}".partition("e")
        e = int(exp)
        if f != 0 and not (-4 <= e < 6):
            digits = np.format_float_scientific(f, unique=True, trim="-").split("e")[0]
            return f"{digits}e{'-' if e < 0 else '+'}{abs(e):02d}"
        return r[:-2] if r.endswith(".0") else r
    return str(v)


def modelfile(name: str, files: dict, texts: dict) -> str:
    lines = ["FROM ./model.gguf" if "model.gguf" in files else "FROM "]
    lines += [f"ADAPTER {quote('./' + f)}" for f in files if f.startswith("adapter")]
    lines += [f"FROM ./{f}" for f in files if f.startswith("projector")]
    lines.append("TEMPLATE " + quote(texts.get("template", "{{ .Prompt }}")))
    if texts.get("system"):
        lines.append("SYSTEM " + quote(texts["system"]))
    params = json.loads(texts.get("params.json", "{}"))
    for k in sorted(params):
        for v in params[k] if isinstance(params[k], list) else [params[k]]:
            lines.append(f"PARAMETER {k} {quote(go_value(v))}")
    lines += ["LICENSE " + quote(texts[f]) for f in files if f.startswith("license")]
    for m in json.loads(texts.get("messages.json", "[]")):
        lines.append(f"MESSAGE {m['role']} {quote(m['content'])}")
    head = ('# Modelfile generated by "ollama show"\n'
            "# To build a new Modelfile based on this, replace FROM with:\n"
            f"# FROM {name}\n\n")
    return head + "".join(l + "\n" for l in lines)


def write(root: Path, expect_path: Path) -> None:
    s = Store(root)
    tmp = root.parent
    models = []

    def add(path_name: str, shown: str, layers: list[tuple[str, str, bytes]]):
        ls, files, texts = [], {}, {}
        for kind, file, data in layers:
            l = s.layer(kind, data)
            ls.append(l)
            files[file] = str(root / "blobs" / l["digest"].replace(":", "-"))
            if kind not in ("model", "projector", "adapter"):
                texts[file] = data.decode()
        s.manifest(path_name, ls)
        models.append({"name": shown, "files": files, "modelfile": modelfile(shown, files, texts)})

    llama = gguf_bytes(tmp, "llama", 1, "model")
    template = "{{ if .System }}<|start_header_id|>system<|end_header_id|>\n\n{{ .System }}<|eot_id|>{{ end }}{{ .Prompt }}"
    params = json.dumps({"num_ctx": 4096, "stop": ["<|start_header_id|>", "<|eot_id|>"],
                         "temperature": 0.7, "top_k": 40, "repeat_penalty": 1.1,
                         "num_predict": 1000000}, sort_keys=True).encode()
    add("registry.ollama.ai/library/llama3.2/latest", "llama3.2:latest", [
        ("model", "model.gguf", llama),
        ("template", "template", template.encode()),
        ("system", "system", b'You are "Llama", a helpful assistant.\n'),
        ("license", "license", b"LLAMA 3.2 COMMUNITY LICENSE AGREEMENT\nVersion 1.0\n"),
        ("license", "license-2", b"Llama 3.2 Acceptable Use Policy\n"),
        ("params", "params.json", params),
        ("messages", "messages.json", json.dumps([
            {"role": "user", "content": "Is the sky blue?"},
            {"role": "assistant", "content": " Yes.\nIt is."}]).encode()),
    ])
    # Another tag of the same model: the same blobs.
    add("registry.ollama.ai/library/llama3.2/1b", "llama3.2:1b", [
        ("model", "model.gguf", llama),
        ("template", "template", template.encode()),
    ])
    add("hf.co/bartowski/Tiny-GGUF/Q4_K_M", "hf.co/bartowski/Tiny-GGUF:Q4_K_M", [
        ("model", "model.gguf", gguf_bytes(tmp, "llama", 2, "model")),
        ("projector", "projector.gguf", gguf_bytes(tmp, "clip", 3, "projector")),
        ("params", "params.json", b'{"temperature":0}'),
    ])
    add("registry.ollama.ai/jmorgan/lora/v1", "jmorgan/lora:v1", [
        ("model", "model.gguf", gguf_bytes(tmp, "llama", 4, "model")),
        ("adapter", "adapter.gguf", gguf_bytes(tmp, "llama", 5, "adapter")),
        ("adapter", "adapter-2.gguf", gguf_bytes(tmp, "llama", 6, "adapter")),
    ])
    add("localhost:5000/team/mini/t", "localhost:5000/team/mini:t", [
        ("model", "model.gguf", gguf_bytes(tmp, "llama", 7, "model")),
    ])
    models.append(mlx_model(s, tmp))

    bad = {}
    good_layer = s.layer("model", llama)
    bad["notjson"] = (s.manifest("registry.ollama.ai/library/notjson/latest", [], raw=b"{\"schemaVersion\":2,"), "NotJson")
    bad["notmanifest"] = (s.manifest("registry.ollama.ai/library/notmanifest/latest", [], raw=b'{"schemaVersion":2}\n'), "NotManifest")
    missing = dict(good_layer, digest="sha256:" + "0" * 64)
    bad["missing"] = (s.manifest("registry.ollama.ai/library/missing/latest", [missing]), "MissingBlob")
    bad["size"] = (s.manifest("registry.ollama.ai/library/size/latest", [dict(good_layer, size=good_layer["size"] + 1)]), "SizeMismatch")
    escape = dict(good_layer, digest="sha256:../../../../../etc/passwd")
    bad["digest"] = (s.manifest("registry.ollama.ai/library/digest/latest", [escape], readable=False), "BadDigest")
    text = s.layer("model", b"not a gguf file at all, but a text saved as the model layer\n")
    bad["notgguf"] = (s.manifest("registry.ollama.ai/library/notgguf/latest", [text]), "BadMagic")

    # What else a store holds: a download in progress, a temporary file, an unreferenced blob.
    partial = "sha256-" + hashlib.sha256(b"partial").hexdigest()
    (root / "blobs" / f"{partial}-partial").write_bytes(b"\0" * 100)
    (root / "blobs" / f"{partial}-partial-0").write_text('{"N":0,"Offset":0,"Size":100,"Completed":10}')
    (root / "blobs" / "sha256-123456789").write_bytes(b"temporary")
    orphan = s.blob(b"a blob no manifest names")

    expect = {
        "models": models,
        "bad": {k: {"manifest": str(p), "rule": r} for k, (p, r) in bad.items()},
        "referenced": sorted(s.referenced),
        "unreferenced": sorted([orphan["path"], *s.unreadable]),
    }
    expect_path.write_text(json.dumps(expect, indent=1))


def main() -> int:
    if len(sys.argv) != 4 or sys.argv[1] != "write":
        print(__doc__, file=sys.stderr)
        return 2
    write(Path(sys.argv[2]), Path(sys.argv[3]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
