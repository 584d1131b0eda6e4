#!/usr/bin/env python3
"""Decode tokens/s of verl_generate against llama.cpp's llama-batched-bench, same model, same
precision, same threads, in one run (issue 27, "Speed").

    python3 tools/scripts/bench_decode_llamacpp.py --verl-generate build/bin/verl_generate \\
        --llama-bin LLAMA_CPP/build/bin --model SmolLM2-135M-Instruct.Q4_1.gguf [--rounds 3]

llama.cpp comes from the llama-cpp-python source distribution on PyPI (its vendor/llama.cpp):

    python3 -m pip download --no-deps --no-binary :all: llama-cpp-python && tar xzf llama_cpp_python-*.tar.gz
    cd llama_cpp_python-*/vendor/llama.cpp && cmake -B build -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \\
        -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_EXAMPLES=OFF
    cmake --build build -j2 --target llama-batched-bench llama-quantize

Both programs read one GGUF file in the chosen precision: the model is converted once with
`llama-quantize --allow-requantize MODEL OUT F32` (or BF16), which dequantizes its blocks, so both
decode the very same weights (verl_generate dequantizes a quantized file to the same float32 numbers).
llama-batched-bench times TG decode steps of B sequences on random tokens after a PP-token prompt per
sequence (S_TG = B * TG / t_TG, no sampling); verl_generate --time times a call with one new token
and one with TG + 1 and takes the difference: TG decode steps of B sequences, greedy sampling
included. Every (threads, batch) pair alternates the two programs --rounds times; the table gives
the medians and their ratio (verl-cpp / llama.cpp), one JSON line per measurement goes to --raw.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path


def llama_tg_tokens_per_s(llama_bin: Path, model: Path, threads: int, batch: int, pp: int, tg: int) -> float:
    command = [str(llama_bin / "llama-batched-bench"), "-m", str(model), "-c", str(max(4096, batch * (pp + tg) + 64)),
               "-b", "2048", "-ub", "512", "-npp", str(pp), "-ntg", str(tg), "-npl", str(batch), "-t", str(threads),
               "-tb", str(threads), "--output-format", "jsonl"]
    result = subprocess.run(command, capture_output=True, text=True, check=True)
    for line in result.stdout.splitlines() + result.stderr.splitlines():
        line = line.strip()
        if line.startswith("{") and "speed_tg" in line:
            return float(json.loads(line)["speed_tg"])
    raise RuntimeError(f"no jsonl result from {' '.join(command)}:\n{result.stdout}\n{result.stderr}")


def verl_tg_tokens_per_s(verl_generate: Path, model: Path, threads: int, batch: int, pp: int, tg: int,
                         dtype: str, repeats: int) -> float:
    prompt = ",".join(str(100 + i) for i in range(pp))
    command = [str(verl_generate), "--model", str(model), "--prompt-ids", prompt, "--max-new-tokens", str(tg + 1),
               "--temperature", "0", "--ignore-eos", "--threads", str(threads), "--batch", str(batch),
               "--dtype", dtype, "--time", str(repeats), "--print-ids"]
    result = subprocess.run(command, capture_output=True, text=True, check=True)
    for line in result.stderr.splitlines():
        if line.startswith("timing: "):
            return float(json.loads(line[len("timing: "):])["decode_tokens_per_s"])
    raise RuntimeError(f"no timing line from {' '.join(command)}:\n{result.stderr}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--verl-generate", type=Path, required=True)
    parser.add_argument("--llama-bin", type=Path, required=True, help="folder with llama-batched-bench and llama-quantize")
    parser.add_argument("--model", type=Path, required=True, help="a GGUF file (any type; converted to --precision)")
    parser.add_argument("--precision", choices=["F32", "BF16"], default="F32")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--batches", default="1,8,32")
    parser.add_argument("--prompt-tokens", type=int, default=16)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--verl-repeats", type=int, default=1, help="--time rounds inside one verl_generate run")
    parser.add_argument("--raw", type=Path, help="append one JSON line per measurement")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as scratch:
        model = Path(scratch) / f"model-{args.precision.lower()}.gguf"
        subprocess.run([str(args.llama_bin / "llama-quantize"), "--allow-requantize", str(args.model), str(model),
                        args.precision], capture_output=True, text=True, check=True)
        dtype = "float32" if args.precision == "F32" else "bfloat16"
        print(f"model: {model.stat().st_size / 1e6:.1f} MB ({args.precision})", file=sys.stderr)
        rows = []
        for threads in [int(t) for t in args.threads.split(",")]:
            for batch in [int(b) for b in args.batches.split(",")]:
                ours, theirs = [], []
                for round_index in range(args.rounds):
                    # Alternate which program goes first, so a drift in load hits both alike.
                    order = ["verl", "llama"] if round_index % 2 == 0 else ["llama", "verl"]
                    for program in order:
                        if program == "verl":
                            ours.append(verl_tg_tokens_per_s(args.verl_generate, model, threads, batch,
                                                             args.prompt_tokens, args.new_tokens, dtype, args.verl_repeats))
                        else:
                            theirs.append(llama_tg_tokens_per_s(args.llama_bin, model, threads, batch,
                                                                args.prompt_tokens, args.new_tokens))
                row = {"threads": threads, "batch": batch, "precision": args.precision,
                       "prompt_tokens": args.prompt_tokens, "new_tokens": args.new_tokens,
                       "verl_tokens_per_s": ours, "llama_tokens_per_s": theirs,
                       "verl_median": statistics.median(ours), "llama_median": statistics.median(theirs)}
                row["ratio"] = row["verl_median"] / row["llama_median"]
                rows.append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
                if args.raw:
                    with args.raw.open("a") as raw:
                        raw.write(json.dumps(row) + "\n")

    print(f"| threads | batch | verl-cpp decode tok/s | llama.cpp S_TG tok/s | ratio |")
    print(f"|---|---|---|---|---|")
    for row in rows:
        print(f"| {row['threads']} | {row['batch']} | {row['verl_median']:.1f} | {row['llama_median']:.1f} | "
              f"{row['ratio']:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
