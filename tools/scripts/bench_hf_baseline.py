#!/usr/bin/env python3
"""The Hugging Face transformers / PyTorch eager side of bench/bench_model.cpp: the same configs
(random weights, float32), batch shapes and thread count, so that the two can be read side by side.

    pip install torch transformers
    VERL_BENCH_THREADS=2 python3 tools/scripts/bench_hf_baseline.py
    VERL_BENCH_THREADS=2 build/bench/bench_model

or, side by side in one run (rounds alternate between the two, so that a busy machine slows both
alike; the ratio reported is the median of the per-round ratios):

    python3 tools/scripts/bench_hf_baseline.py --ours build/bench/bench_model --threads 2 --rounds 3

Reports, per config (tiny = tests/data/models/tiny-qwen2's shapes, 30M = a narrow Qwen2 with a
32000-token vocabulary):
  generate           model.generate, greedy with the KV cache, 8 prompts x 16 tokens -> 64 new
                     tokens each (no early stop), generated tokens per second; ours also with
                     bfloat16 decode weights (verl's rollout.dtype default), against transformers'
                     float32 (--bf16 also times transformers in bfloat16);
  forward+backward   8 sequences x 256 tokens, mean log-prob of the next tokens, backward,
                     tokens per second.

--gemm instead times torch.matmul (float32, same threads) on the products of a 30M forward +
backward (bench_model's BM_Gemm list), alternating rounds with BM_Gemm, and reports GFLOP/s and
the per-shape median ratio:

    python3 tools/scripts/bench_hf_baseline.py --ours build/bench/bench_model --threads 1 --gemm
"""

import argparse
import json
import os
import statistics
import subprocess
import time

import torch
import transformers

GENERATE_BATCH, PROMPT_LENGTH, NEW_TOKENS = 8, 16, 64
TRAIN_SEQUENCES, TRAIN_LENGTH = 8, 256

CONFIGS = {
    "tiny": dict(vocab_size=1408, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2),
    "30M": dict(vocab_size=32000, hidden_size=512, intermediate_size=1408, num_hidden_layers=5, num_attention_heads=8,
                num_key_value_heads=4),
}


def prompts(batch, length, vocab):
    return torch.tensor([[(b * 131 + t * 17 + 3) % vocab for t in range(length)] for b in range(batch)])


def timed(fn, min_seconds=2.0):
    fn()  # warm-up
    runs, start = 0, time.perf_counter()
    while True:
        fn()
        runs += 1
        elapsed = time.perf_counter() - start
        if elapsed >= min_seconds:
            return elapsed / runs


def ours(binary, threads, config_index):
    """Our bench_model's generate and forward+backward rates (tokens/s) for one config."""
    env = dict(os.environ, VERL_BENCH_THREADS=str(threads))
    out = subprocess.run([binary, f"--benchmark_filter=BM_(Generate|ForwardBackward|WeightRead)/{config_index}/",
                          "--benchmark_format=json", "--benchmark_min_time=1"],
                         check=True, env=env, capture_output=True, text=True).stdout
    rates = {}
    for bench in json.loads(out)["benchmarks"]:
        name = bench["name"]
        if name.startswith("BM_WeightRead/"):
            # The memory-bound pass: decode steps that only read the weights once (30M only).
            rates["read_bound_bf16" if "/bf16:1" in name else "read_bound"] = bench["bound_tokens_per_s"]
            continue
        if name.startswith("BM_Generate/"):
            kind = "generate_bf16" if "/bf16:1" in name else "generate"
            rates[kind.replace("generate", "weights_GB_per_s")] = bench["weights_GB_per_s"]
        else:
            kind = "forward_backward"
        rates[kind] = bench["tokens_per_s"]
    return rates


# (name, m, n, k, A transposed, B transposed): bench/bench_model.cpp's gemm_shapes, in order.
GEMM_SHAPES = [("lm_head_forward", 2048, 32000, 512, False, True), ("lm_head_input_grad", 2048, 512, 32000, False, False),
               ("lm_head_weight_grad", 32000, 512, 2048, True, False), ("mlp_up", 2048, 2816, 512, False, True),
               ("mlp_down", 2048, 512, 1408, False, True), ("mlp_up_weight_grad", 2816, 512, 2048, True, False),
               ("qkv", 2048, 1024, 512, False, True)]


def gemm_rounds(binary, threads, rounds):
    """torch.matmul and BM_Gemm in alternating rounds on the same shapes and layouts."""
    generator = torch.Generator().manual_seed(3)
    operands = []
    for _, m, n, k, a_transposed, b_transposed in GEMM_SHAPES:
        a = torch.rand(k, m, generator=generator).t() if a_transposed else torch.rand(m, k, generator=generator)
        b = torch.rand(n, k, generator=generator).t() if b_transposed else torch.rand(k, n, generator=generator)
        operands.append((a, b))
    ratios = {name: [] for name, *_ in GEMM_SHAPES}
    env = dict(os.environ, VERL_BENCH_THREADS=str(threads))
    for round_index in range(rounds):
        theirs = {}
        for (name, m, n, k, *_), (a, b) in zip(GEMM_SHAPES, operands):
            out = torch.empty(m, n)
            seconds = timed(lambda: torch.matmul(a, b, out=out), min_seconds=1.0)
            theirs[name] = 2.0 * m * n * k / seconds / 1e9
        out = subprocess.run([binary, "--benchmark_filter=BM_Gemm/", "--benchmark_format=json"], check=True, env=env,
                             capture_output=True, text=True).stdout
        mine = {bench["label"]: bench["GFLOP_per_s"] for bench in json.loads(out)["benchmarks"]}
        for name, *_ in GEMM_SHAPES:
            ratios[name].append(mine[name] / theirs[name])
            print(f"round {round_index + 1} {name:>20}: verl-cpp {mine[name]:6.1f} vs torch {theirs[name]:6.1f} GFLOP/s "
                  f"({ratios[name][-1]:.2f}x)", flush=True)
    for name, values in ratios.items():
        print(f"{name:>20}: median ratio verl-cpp / torch {statistics.median(values):.2f}x")
    return ratios


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ours", help="path of bench_model: alternate rounds with it and report ratios")
    parser.add_argument("--threads", type=int, default=int(os.environ.get("VERL_BENCH_THREADS", "0")) or os.cpu_count())
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", help="write the side-by-side results here")
    parser.add_argument("--bf16", action="store_true",
                        help="also time transformers' generate with the model in bfloat16")
    parser.add_argument("--gemm", action="store_true",
                        help="only the float32 products of a 30M forward + backward (needs --ours)")
    args = parser.parse_args()
    threads = args.threads
    torch.set_num_threads(threads)
    if args.gemm:
        if not args.ours:
            parser.error("--gemm needs --ours")
        print(f"torch {torch.__version__}, threads {torch.get_num_threads()}")
        gemm_rounds(args.ours, threads, args.rounds)
        return
    torch.manual_seed(0)
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, threads {torch.get_num_threads()}, "
          f"cpu capability {torch.backends.cpu.get_cpu_capability()}")
    results = {}
    for config_index, (name, shape) in enumerate(CONFIGS.items()):
        config = transformers.Qwen2Config(max_position_embeddings=4096, tie_word_embeddings=True, **shape)
        model = transformers.AutoModelForCausalLM.from_config(config).float()
        parameters = sum(p.numel() for p in model.parameters())

        model.eval()
        input_ids = prompts(GENERATE_BATCH, PROMPT_LENGTH, config.vocab_size)
        attention_mask = torch.ones_like(input_ids)

        def generate():
            with torch.no_grad():
                model.generate(input_ids=input_ids, attention_mask=attention_mask, do_sample=False,
                               max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, pad_token_id=0,
                               eos_token_id=None)

        generate_seconds = timed(generate)
        if args.bf16:
            model.to(torch.bfloat16)
            bf16_seconds = timed(generate)
            model.float()
            print(f"{name:>5} transformers generate in bfloat16: {GENERATE_BATCH * NEW_TOKENS / bf16_seconds:,.0f} tokens/s "
                  f"(float32: {GENERATE_BATCH * NEW_TOKENS / generate_seconds:,.0f})", flush=True)

        model.train()
        train_ids = prompts(TRAIN_SEQUENCES, TRAIN_LENGTH, config.vocab_size)
        positions = torch.arange(TRAIN_LENGTH).expand(TRAIN_SEQUENCES, -1)
        tokens = train_ids.numel()

        def forward_backward():
            logits = model(input_ids=train_ids, position_ids=positions).logits
            log_probs = torch.log_softmax(logits.float(), dim=-1)
            targets = torch.roll(train_ids, shifts=-1, dims=-1)
            loss = torch.gather(log_probs, -1, targets.unsqueeze(-1)).sum() / tokens
            loss.backward()

        if args.ours:
            rounds = []
            for _ in range(args.rounds):
                hf = {"generate": GENERATE_BATCH * NEW_TOKENS / timed(generate),
                      "forward_backward": tokens / timed(forward_backward)}
                mine = ours(args.ours, threads, config_index)
                ratio = {k: mine[k] / hf[k] for k in hf}
                ratio["generate_bf16"] = mine["generate_bf16"] / hf["generate"]
                rounds.append({"hf": hf, "verl_cpp": mine, "ratio": ratio})
                print(f"{name:>5} round {len(rounds)}: generate {mine['generate']:,.0f} vs {hf['generate']:,.0f} tokens/s "
                      f"({rounds[-1]['ratio']['generate']:.2f}x), forward+backward {mine['forward_backward']:,.0f} vs "
                      f"{hf['forward_backward']:,.0f} tokens/s ({rounds[-1]['ratio']['forward_backward']:.2f}x); "
                      f"our decode read the fp32 weights at {mine['weights_GB_per_s']:.1f} GB/s; with bfloat16 decode "
                      f"weights (rollout.dtype) {mine['generate_bf16']:,.0f} tokens/s "
                      f"({ratio['generate_bf16']:.2f}x transformers' fp32)", flush=True)
                if "read_bound" in mine:
                    # No decoder at batch GENERATE_BATCH beats reading its weights once per step.
                    for kind, label in (("read_bound", "float32"), ("read_bound_bf16", "bfloat16")):
                        ratio[kind] = mine[kind] / hf["generate"]
                        print(f"{name:>5} round {len(rounds)}: decode steps that only read the {label} weights once "
                              f"(the memory-bound pass): {mine[kind]:,.0f} tokens/s, {ratio[kind]:.2f}x transformers' "
                              f"fp32; our generate reached {mine[kind.replace('read_bound', 'generate')] / mine[kind]:.0%} "
                              f"of it", flush=True)
            median = {k: statistics.median(r["ratio"][k] for r in rounds)
                      for k in ("generate", "generate_bf16", "forward_backward", "read_bound", "read_bound_bf16")
                      if k in rounds[0]["ratio"]}
            print(f"{name:>5} ({parameters / 1e6:.1f}M parameters): median ratio verl-cpp / transformers: "
                  f"generate {median['generate']:.2f}x (bfloat16 decode weights {median['generate_bf16']:.2f}x), "
                  f"forward+backward {median['forward_backward']:.2f}x", flush=True)
            if "read_bound" in median:
                print(f"{name:>5}: decoding at the memory-bound pass would be {median['read_bound']:.2f}x transformers' "
                      f"fp32 with float32 weights and {median['read_bound_bf16']:.2f}x with bfloat16 ones", flush=True)
            results[name] = {"parameters": parameters, "rounds": rounds, "median_ratio": median}
            continue

        train_seconds = timed(forward_backward)
        print(f"{name:>5} ({parameters / 1e6:.1f}M parameters): generate {GENERATE_BATCH * NEW_TOKENS / generate_seconds:,.0f} "
              f"tokens/s ({generate_seconds * 1e3:.1f} ms per call), forward+backward {tokens / train_seconds:,.0f} tokens/s "
              f"({train_seconds * 1e3:.1f} ms per step)")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"threads": threads, "torch": torch.__version__, "transformers": transformers.__version__,
                       "configs": results}, f, indent=2)


if __name__ == "__main__":
    main()
