#!/usr/bin/env python3
"""Writes the PyTorch checkpoint of the mount benchmark (benches/mount/, item 11).

    checkpoints.py write DIR ST_DIR HIDDEN VOCAB LAYERS
        DIR/pytorch_model.bin, written by torch.save (zip format), and ST_DIR/model.safetensors,
        the same state dict written by safetensors.torch.save_file with {"format": "pt"}: the
        tensors of item 5's model (embeddings, LAYERS layers of 7 HIDDENxHIDDEN matrices and 2
        norms, final norm, lm_head), BF16 random matrices and F32 norms

Prints "BYTES TENSORS": the tensor bytes and the number of tensors.
"""

import os
import sys

import torch
from safetensors.torch import save_file


def state_dict(hidden, vocab, layers):
    """Item 5's model (benches/mount/fixtures.rs, model_specs) in BF16, filled from a fixed seed."""
    g = torch.Generator().manual_seed(0x5EED)

    def matrix(rows):
        return torch.randn(rows, hidden, generator=g).to(torch.bfloat16)

    sd = {"model.embed_tokens.weight": matrix(vocab)}
    for n in range(layers):
        for p in ["q_proj", "k_proj", "v_proj", "o_proj"]:
            sd[f"model.layers.{n}.self_attn.{p}.weight"] = matrix(hidden)
        for p in ["gate_proj", "up_proj", "down_proj"]:
            sd[f"model.layers.{n}.mlp.{p}.weight"] = matrix(hidden)
        for p in ["input_layernorm", "post_attention_layernorm"]:
            sd[f"model.layers.{n}.{p}.weight"] = torch.ones(hidden)
    sd["model.norm.weight"] = torch.ones(hidden)
    sd["lm_head.weight"] = matrix(vocab)
    return sd


def main():
    if len(sys.argv) != 7 or sys.argv[1] != "write":
        sys.exit(__doc__)
    directory, st_dir = sys.argv[2], sys.argv[3]
    hidden, vocab, layers = (int(a) for a in sys.argv[4:7])
    sd = state_dict(hidden, vocab, layers)
    torch.save(sd, os.path.join(directory, "pytorch_model.bin"))
    save_file(sd, os.path.join(st_dir, "model.safetensors"), metadata={"format": "pt"})
    total = sum(t.numel() * t.element_size() for t in sd.values())
    print(total, len(sd))


if __name__ == "__main__":
    main()
