#!/usr/bin/env python3
"""A randomly initialised Qwen2-architecture model of a chosen size, for timing the trainer (the
placement cost model's calibration, tools/scripts/calibrate_placement.py). Plain Python: no torch,
no numpy; the weights are never trained or compared with anything, only timed.

    python3 tools/scripts/make_calibration_model.py OUT_DIR [--hidden 512] [--layers 4]
        [--heads 8] [--kv-heads 4] [--ffn 1536] [--seed 1]

Writes OUT_DIR/config.json, model.safetensors (bfloat16), tokenizer.json and tokenizer_config.json
(copied from tests/data/models/tiny-qwen2, whose tokenizer and vocabulary of 1408 it shares, so
the same prompts and reward work). Tied embeddings and q/k/v biases, as tiny-qwen2. Prints the
parameter count. The default size (~13.3M parameters) does about 200x the tiny model's work per
token and keeps a two-rank PPO step of 16 sequences within seconds on one core per rank.
"""

import argparse
import array
import json
import random
import shutil
import struct
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "tests" / "data" / "models" / "tiny-qwen2"


def bf16_bytes(values):
    """float32 values -> bfloat16 bytes (round to nearest even; no NaN or inf is ever drawn)."""
    bits = array.array("I", array.array("f", values).tobytes())
    out = array.array("H", bytes(2 * len(bits)))
    for i, b in enumerate(bits):
        out[i] = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16) & 0xFFFF
    return out.tobytes()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--ffn", type=int, default=1536)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    if args.hidden % args.heads or args.heads % args.kv_heads:
        ap.error("expected heads | hidden and kv_heads | heads")

    config = json.loads((TINY / "config.json").read_text())
    vocab = config["vocab_size"]
    h, f, head_dim = args.hidden, args.ffn, args.hidden // args.heads
    kv = args.kv_heads * head_dim
    config.update(hidden_size=h, intermediate_size=f, num_hidden_layers=args.layers,
                  num_attention_heads=args.heads, num_key_value_heads=args.kv_heads,
                  layer_types=["full_attention"] * args.layers)

    shapes = {"model.embed_tokens.weight": [vocab, h], "model.norm.weight": [h]}
    for i in range(args.layers):
        p = f"model.layers.{i}."
        shapes.update({
            p + "input_layernorm.weight": [h], p + "post_attention_layernorm.weight": [h],
            p + "self_attn.q_proj.weight": [h, h], p + "self_attn.q_proj.bias": [h],
            p + "self_attn.k_proj.weight": [kv, h], p + "self_attn.k_proj.bias": [kv],
            p + "self_attn.v_proj.weight": [kv, h], p + "self_attn.v_proj.bias": [kv],
            p + "self_attn.o_proj.weight": [h, h],
            p + "mlp.gate_proj.weight": [f, h], p + "mlp.up_proj.weight": [f, h],
            p + "mlp.down_proj.weight": [h, f],
        })
    rng = random.Random(args.seed)
    header, blobs, offset, params = {"__metadata__": {"format": "pt"}}, [], 0, 0
    for name in sorted(shapes):
        shape = shapes[name]
        n = 1
        for s in shape:
            n *= s
        params += n
        if name.endswith("norm.weight"):
            values = [1.0 + 0.1 * rng.uniform(-1, 1) for _ in range(n)]
        else:  # fan-in scaled, so that activations stay of order one through the layers
            scale = 1.0 / (shape[-1] ** 0.5) if len(shape) == 2 else 0.02
            values = [rng.uniform(-scale, scale) for _ in range(n)]
        blob = bf16_bytes(values)
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)
    with open(out / "model.safetensors", "wb") as fh:
        fh.write(struct.pack("<Q", len(head)))
        fh.write(head)
        for blob in blobs:
            fh.write(blob)
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    shutil.copyfile(TINY / "tokenizer.json", out / "tokenizer.json")
    shutil.copyfile(TINY / "tokenizer_config.json", out / "tokenizer_config.json")
    print(params)


if __name__ == "__main__":
    main()
