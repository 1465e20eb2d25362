#!/usr/bin/env python3
"""Item 15's ollama store, and the baseline it is measured against.

    ollama_bench.py write STORE N
        Writes a store of N models as ollama writes one (tests/python/ollama.py's writer:
        each a GGUF model layer written by gguf-py, a template, params and a license; one
        template blob shared by all), and prints "N FILES": the models and their layer files.

    ollama_bench.py list STORE PASSES
        What a script does to find the models of a store by name (the community's way to get a
        named .gguf out of one): each pass reads every manifest (manifests/*/*/*/*), parses its
        JSON, names the model as `ollama list` does and stats every layer's blob. Prints one line
        a pass: "SECONDS LAYER_BYTES MODELS".
"""
import glob
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "python"))


def write(root: Path, n: int) -> None:
    from ollama import Store, gguf_bytes

    s = Store(root)
    files = 0
    template = b"{{ .System }}\n{{ .Prompt }}"
    for i in range(n):
        layers = [
            s.layer("model", gguf_bytes(root.parent, "llama", 100 + i, "model")),
            s.layer("template", template),
            s.layer("params", json.dumps({"num_ctx": 2048 + i, "stop": ["<|eot|>"]}).encode()),
            s.layer("license", f"license of model {i}\n".encode()),
        ]
        host = "registry.ollama.ai/library" if i % 2 == 0 else "hf.co/someone"
        s.manifest(f"{host}/model{i:02d}/q{i % 3}", layers)
        files += len(layers)
    print(n, files)


def passes(root: str, count: int) -> None:
    for _ in range(count):
        start = time.perf_counter()
        total, models = 0, 0
        for path in sorted(glob.glob(os.path.join(root, "manifests", "*", "*", "*", "*"))):
            host, namespace, model, tag = Path(path).parts[-4:]
            with open(path, "rb") as f:
                m = json.load(f)
            name = f"{model}:{tag}"
            if host != "registry.ollama.ai":
                name = f"{host}/{namespace}/{name}"
            elif namespace != "library":
                name = f"{namespace}/{name}"
            for layer in m["layers"]:
                blob = os.path.join(root, "blobs", layer["digest"].replace(":", "-"))
                total += os.stat(blob).st_size
            models += 1
        print(f"{time.perf_counter() - start:.6f} {total} {models}", flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "write":
        write(Path(sys.argv[2]), int(sys.argv[3]))
    else:
        passes(sys.argv[2], int(sys.argv[3]))
