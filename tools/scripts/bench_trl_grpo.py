#!/usr/bin/env python3
"""GRPO step throughput: verl-cpp's `verl_train` against Hugging Face TRL's GRPOTrainer, side by side.

Both trainers get the same Hugging Face model folder, the same prompts (a JSONL file in verl's row
schema), the same number of prompts per step, samples per prompt, response length, learning rate,
thread count and reward (verl's GSM8K rule: the answer after '####' must equal the ground truth).
Each runs `--warmup + --steps` optimizer steps; only the last `--steps` are timed.

Throughput is verl's `perf/throughput` definition: tokens processed per second, where tokens are
the valid prompt and response tokens of the step's batch (the attention mask's sum). For TRL the
tokens are the prompt and completion tokens it reports in its `num_tokens` log (cumulative), and
the time is the wall time of the timed steps (generation, scoring, log-probs and the update).

    python3 tools/scripts/bench_trl_grpo.py --model DIR --train-file train.jsonl \\
        --verl-train build/bin/verl_train [--prompts-per-step 8 --n 8 --response-length 32 ...]

Needs `pip install trl` (CPU torch is enough). Prints one JSON object (with --rounds R, every
round and the medians over rounds); --json writes it too.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time


def gsm8k_score(solution: str, ground_truth) -> float:
    """verl's gsm8k compute_score, strict mode: the last '#### <number>' must equal the answer."""
    matches = re.findall(r"#### (\-?[0-9\.\,]+)", solution)
    if not matches:
        return 0.0
    answer = matches[-1].replace(",", "").replace("$", "")
    return 1.0 if answer == str(ground_truth) else 0.0


def load_rows(path: str, limit: int):
    rows = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                row = json.loads(line)
                rows.append({"prompt": row["prompt"], "ground_truth": str(row["reward_model"]["ground_truth"])})
            if limit and len(rows) >= limit:
                break
    return rows


def run_trl(args) -> dict:
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    torch.set_num_threads(args.threads)
    total_steps = args.warmup + args.steps
    rows = load_rows(args.train_file, args.prompts_per_step * total_steps)
    dataset = Dataset.from_list(rows)

    def reward(completions, ground_truth, **_):
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        return [gsm8k_score(t, g) for t, g in zip(texts, ground_truth)]

    class StepClock(TrainerCallback):
        def __init__(self):
            self.begin = {}
            self.durations = {}
            self.tokens = {}

        def on_step_begin(self, _args, state, _control, **_):
            self.begin[state.global_step] = time.perf_counter()

        def on_step_end(self, _args, state, _control, **_):
            step = state.global_step - 1
            self.durations[step] = time.perf_counter() - self.begin[step]

        def on_log(self, _args, state, _control, logs=None, **_):
            if logs and "num_tokens" in logs:
                self.tokens[state.global_step] = logs["num_tokens"]

    tokenizer = AutoTokenizer.from_pretrained(args.model)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    clock = StepClock()
    with tempfile.TemporaryDirectory() as out:
        config = GRPOConfig(
            output_dir=out,
            # One optimizer step per prompts_per_step x n completions, generated together, in
            # micro-batches of --micro-batch completions (gradient accumulation), as verl-cpp.
            per_device_train_batch_size=micro_batch(args),
            gradient_accumulation_steps=args.prompts_per_step * args.n // micro_batch(args),
            num_generations=args.n,
            max_completion_length=args.response_length,
            learning_rate=args.lr,
            beta=0.0,  # no reference model, as the verl-cpp run (use_kl_loss=False)
            num_iterations=1,
            temperature=1.0,
            max_steps=total_steps,
            logging_steps=1,
            save_strategy="no",
            report_to=[],
            use_cpu=True,
            bf16=False,
            seed=args.seed,
            dataloader_num_workers=0,
        )
        trainer = GRPOTrainer(model=model, reward_funcs=reward, args=config, train_dataset=dataset,
                              processing_class=tokenizer, callbacks=[clock])
        trainer.train()
    timed = [clock.durations[s] for s in range(args.warmup, total_steps)]
    tokens = clock.tokens.get(total_steps, 0) - clock.tokens.get(args.warmup, 0)
    return throughput(timed, tokens)


def throughput(step_seconds: list, tokens: float) -> dict:
    """Tokens per second over the timed steps, and over their median step (on a shared host a
    neighbour's burst lengthens single steps; the median step discounts it on both sides alike)."""
    seconds = sum(step_seconds)
    median = statistics.median(step_seconds)
    return {"step_s": seconds / len(step_seconds), "tokens": tokens, "tokens_per_s": tokens / seconds,
            "median_step_s": median, "tokens_per_s_median_step": tokens / len(step_seconds) / median}


def micro_batch(args) -> int:
    """Completions per forward/backward pass: --micro-batch, else the whole step's batch."""
    total = args.prompts_per_step * args.n
    size = args.micro_batch or total
    if total % size != 0 or size % args.n != 0:
        raise SystemExit(f"--micro-batch: expected a multiple of --n ({args.n}) dividing {total}, got {size}")
    return size


def run_verl_cpp(args) -> dict:
    total_steps = args.warmup + args.steps
    with tempfile.TemporaryDirectory() as out:
        metrics_path = os.path.join(out, "metrics.jsonl")
        env = dict(os.environ, VERL_FILE_LOGGER_PATH=metrics_path, OMP_NUM_THREADS=str(args.threads),
                   VERL_NUM_THREADS=str(args.threads))
        command = [
            args.verl_train,
            f"data.train_files={args.train_file}",
            f"data.val_files={args.train_file}",
            f"data.train_batch_size={args.prompts_per_step}",
            f"data.max_response_length={args.response_length}",
            f"data.max_prompt_length={args.max_prompt_length}",
            f"actor_rollout_ref.model.path={args.model}",
            "algorithm.adv_estimator=grpo",
            f"actor_rollout_ref.rollout.n={args.n}",
            "actor_rollout_ref.rollout.temperature=1.0",
            f"actor_rollout_ref.actor.optim.lr={args.lr}",
            f"actor_rollout_ref.actor.ppo_mini_batch_size={args.prompts_per_step}",
            f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={micro_batch(args)}",
            "actor_rollout_ref.actor.use_kl_loss=False",
            "algorithm.use_kl_in_reward=False",
            f"trainer.total_training_steps={total_steps}",
            "trainer.logger=[file]",
            "trainer.test_freq=-1",
            "trainer.save_freq=-1",
            "trainer.val_before_train=False",
            f"trainer.default_local_dir={out}/ckpt",
        ] + args.verl_override
        subprocess.run(command, check=True, env=env, stdout=subprocess.DEVNULL)
        with open(metrics_path, encoding="utf-8") as f:
            lines = [json.loads(line) for line in f if line.strip()]
    steps = [line["data"] for line in lines if "data" in line and "timing_s/step" in line["data"]]
    timed = steps[args.warmup:total_steps]
    tokens = sum(s["perf/total_num_tokens"] for s in timed)
    return throughput([s["timing_s/step"] for s in timed], tokens)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="Hugging Face model folder (with tokenizer files)")
    parser.add_argument("--train-file", required=True, help="JSONL prompts in verl's row schema")
    parser.add_argument("--verl-train", help="path of verl_train; omitted: TRL only")
    parser.add_argument("--prompts-per-step", type=int, default=8)
    parser.add_argument("--n", type=int, default=8)
    parser.add_argument("--response-length", type=int, default=32)
    parser.add_argument("--max-prompt-length", type=int, default=64)
    parser.add_argument("--lr", type=float, default=1e-5)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--micro-batch", type=int, default=0,
                        help="completions per forward/backward pass on both sides (default: the whole step's batch)")
    parser.add_argument("--rounds", type=int, default=1, help="alternating rounds of both trainers; medians are reported")
    parser.add_argument("--verl-override", action="append", default=[], help="extra key=value for verl_train")
    parser.add_argument("--json", help="also write the result here")
    args = parser.parse_args()

    result = {"model": args.model, "prompts_per_step": args.prompts_per_step, "n": args.n,
              "response_length": args.response_length, "micro_batch": micro_batch(args), "threads": args.threads,
              "timed_steps": args.steps,
              "rounds": []}
    # Rounds alternate the two trainers, so that a noisy neighbour on a shared host slows both
    # sides about equally often; the median over rounds is the figure to quote.
    for index in range(args.rounds):
        one = {}
        if args.verl_train:
            one["verl_cpp"] = run_verl_cpp(args)
        one["trl"] = run_trl(args)
        if args.verl_train:
            one["tokens_per_s_ratio"] = one["verl_cpp"]["tokens_per_s"] / one["trl"]["tokens_per_s"]
            one["median_step_ratio"] = (one["verl_cpp"]["tokens_per_s_median_step"] /
                                        one["trl"]["tokens_per_s_median_step"])
            print(f"round {index + 1}: verl-cpp {one['verl_cpp']['tokens_per_s']:,.0f} tokens/s "
                  f"({one['verl_cpp']['step_s'] * 1e3:.0f} ms/step, median {one['verl_cpp']['median_step_s'] * 1e3:.0f}), "
                  f"TRL {one['trl']['tokens_per_s']:,.0f} tokens/s ({one['trl']['step_s'] * 1e3:.0f} ms/step, median "
                  f"{one['trl']['median_step_s'] * 1e3:.0f}): {one['tokens_per_s_ratio']:.2f}x "
                  f"(median steps {one['median_step_ratio']:.2f}x)", file=sys.stderr, flush=True)
        result["rounds"].append(one)
    for side in ("verl_cpp", "trl"):
        if side in result["rounds"][0]:
            result[side] = {key: statistics.median(r[side][key] for r in result["rounds"])
                            for key in ("step_s", "tokens", "tokens_per_s", "median_step_s", "tokens_per_s_median_step")}
    if args.verl_train:
        result["tokens_per_s_ratio"] = statistics.median(r["tokens_per_s_ratio"] for r in result["rounds"])
        result["median_step_ratio"] = statistics.median(r["median_step_ratio"] for r in result["rounds"])
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
