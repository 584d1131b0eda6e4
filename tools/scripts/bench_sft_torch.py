#!/usr/bin/env python3
"""The PyTorch eager side of bench/bench_train_step.cpp: one SFT step (forward, mean next-token
NLL, backward, clip_grad_norm_(1.0), AdamW) of transformers' LlamaForCausalLM with SmolLM2-135M's
config (random weights, float32) on 8 sequences of 64 tokens, at the same thread counts, in
alternating rounds with ours; reports the medians, their ratio, our matrix products' fraction of
the FMA peak measured in our process, and the split of our step.

    pip install torch transformers
    python3 tools/scripts/bench_sft_torch.py --ours build/bench/bench_train_step --threads 1,2 --rounds 3
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

import torch
import transformers

SEQUENCES, LENGTH, STEPS = 8, 64, 5

SMOLLM2_135M = dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                    num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=8192,
                    rope_theta=100000.0, rms_norm_eps=1e-5, tie_word_embeddings=True)


def torch_step_seconds(threads: int) -> dict[str, float]:
    torch.set_num_threads(threads)
    torch.manual_seed(1)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**SMOLLM2_135M)).float().train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    ids = torch.randint(0, SMOLLM2_135M["vocab_size"], (SEQUENCES, LENGTH), generator=torch.Generator().manual_seed(11))
    parts = {"forward_s": [], "backward_s": [], "clip_adamw_s": [], "step_s": []}

    def step() -> None:
        t0 = time.perf_counter()
        optimizer.zero_grad(set_to_none=False)
        loss = model(input_ids=ids, labels=ids).loss
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        t3 = time.perf_counter()
        for name, value in (("forward_s", t1 - t0), ("backward_s", t2 - t1), ("clip_adamw_s", t3 - t2), ("step_s", t3 - t0)):
            parts[name].append(value)

    step()  # warm-up: the optimizer's moments and the allocator's buffers
    for values in parts.values():
        values.clear()
    for _ in range(STEPS):
        step()
    return {name: statistics.median(values) for name, values in parts.items()}


def our_step(binary: str, threads: int) -> dict[str, float]:
    result = subprocess.run([binary, f"--benchmark_filter=BM_SftStep/{threads}/", "--benchmark_format=json"],
                            capture_output=True, text=True, check=True)
    benchmark = json.loads(result.stdout)["benchmarks"][0]
    return {key: float(value) for key, value in benchmark.items() if isinstance(value, (int, float))}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ours", required=True, help="path of bench_train_step")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", help="write every round's figures here")
    args = parser.parse_args()

    rows, raw = [], []
    for threads in [int(t) for t in args.threads.split(",")]:
        ours, theirs = [], []
        for round_index in range(args.rounds):
            order = ["ours", "torch"] if round_index % 2 == 0 else ["torch", "ours"]
            for side in order:
                if side == "ours":
                    ours.append(our_step(args.ours, threads))
                else:
                    theirs.append(torch_step_seconds(threads))
            print(json.dumps({"threads": threads, "round": round_index, "ours": ours[-1], "torch": theirs[-1]}),
                  file=sys.stderr, flush=True)
        raw.append({"threads": threads, "ours": ours, "torch": theirs})

        def med(side: list[dict[str, float]], key: str) -> float:
            return statistics.median(entry[key] for entry in side)

        rows.append({
            "threads": threads,
            "ours_step_s": med(ours, "step_s"), "torch_step_s": med(theirs, "step_s"),
            "ratio": statistics.median(t["step_s"] / o["step_s"] for o, t in zip(ours, theirs)),
            "fma_peak": med(ours, "fma_peak_GFLOP_per_s"),
            "products_fraction": med(ours, "products_fraction_of_peak"),
            "step_products_fraction": med(ours, "step_products_fraction_of_peak"),
            "ours_parts": {k: med(ours, k) for k in ("forward_s", "backward_s", "clip_adamw_s", "products_s", "rest_s")},
            "torch_parts": {k: med(theirs, k) for k in ("forward_s", "backward_s", "clip_adamw_s")},
        })
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"rows": rows, "raw": raw}, out, indent=1)

    print("| threads | verl-cpp step s | torch step s | speed-up (median of rounds) | FMA peak GFLOP/s | products % of peak | "
          "step's 6N·T % of peak | ours: products / clip+AdamW / rest s | torch: fwd / bwd / clip+AdamW s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        o, t = r["ours_parts"], r["torch_parts"]
        print(f"| {r['threads']} | {r['ours_step_s']:.2f} | {r['torch_step_s']:.2f} | {r['ratio']:.2f}x | {r['fma_peak']:.0f} | "
              f"{100 * r['products_fraction']:.1f}% | {100 * r['step_products_fraction']:.1f}% | "
              f"{o['products_s']:.2f} / {o['clip_adamw_s']:.2f} / {o['rest_s']:.2f} | "
              f"{t['forward_s']:.2f} / {t['backward_s']:.2f} / {t['clip_adamw_s']:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
