#!/usr/bin/env python3
"""Compares a verl_train run with a recorded one (tests/data/trainer_regression): the trainer's
regression test, kept while the trainer is rebuilt on the HybridFlow runtime.

    compare_trainer_run.py EXPECTED_DIR ACTUAL_DIR [--rtol 1e-5]

Each folder holds metrics.jsonl (the file logger's lines: {"step": N, "data": {...}}) and
generations/ (trainer.rollout_data_dir: one N.jsonl per step with each response's prompt, output,
ground truth and score). What must agree:
  - the generations, exactly (the same response tokens, hence the same text, and scores);
  - metrics that count or score things (critic/score/*, response_length/*,
    prompt_length/*, and every other metric not named below) within 1e-12 relative;
  - losses, gradient norms, entropies, KL and advantage statistics within --rtol relative or --atol
    absolute (the sum order of a reduction may differ; means of advantages are zero up to rounding);
  - timing_s/*, timing_per_token_ms/*, perf/* and the process's memory are not compared.
The same steps and the same metric names must be present on both sides.

With --subset (an example controller program against verl_train): ACTUAL may log fewer metrics;
each of its metrics must be one EXPECTED logs, and agree; generations are compared when both
folders have them. At least --min-metrics metrics per step must be compared.
"""
import argparse
import json
import math
import pathlib
import sys

NOT_COMPARED = ("timing_s/", "timing_per_token_ms/", "perf/", "memory/")
LOOSE = ("actor/", "critic/vf", "critic/vpred", "critic/values", "critic/advantages", "critic/returns", "critic/rewards",
         "critic/grad_norm", "critic/lr", "training/rollout", "rollout_corr/", "global_seqlen/")


def load_metrics(folder):
    steps = {}
    for line in (folder / "metrics.jsonl").read_text().splitlines():
        if line.strip():
            record = json.loads(line)
            steps.setdefault(record["step"], {}).update(record["data"])
    return steps


def close(a, b, rtol, atol):
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if not isinstance(a, (int, float)) or not isinstance(b, (int, float)):
        return a == b
    return a == b or abs(a - b) <= max(rtol * max(abs(a), abs(b)), atol)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("expected", type=pathlib.Path)
    parser.add_argument("actual", type=pathlib.Path)
    parser.add_argument("--rtol", type=float, default=1e-5)
    parser.add_argument("--atol", type=float, default=1e-6,
                        help="for the loose metrics: values this close to each other pass (near-zero means)")
    parser.add_argument("--subset", action="store_true",
                        help="ACTUAL's metrics are a subset of EXPECTED's (an example program against verl_train)")
    parser.add_argument("--min-metrics", type=int, default=1, help="with --subset: metrics compared per step, at least")
    args = parser.parse_args()
    problems = []
    expected, actual = load_metrics(args.expected), load_metrics(args.actual)
    if sorted(expected) != sorted(actual):
        problems.append(f"steps: expected {sorted(expected)}, got {sorted(actual)}")
    for step in sorted(set(expected) & set(actual)):
        e, a = expected[step], actual[step]
        keys_e = {k for k in e if not k.startswith(NOT_COMPARED)}
        keys_a = {k for k in a if not k.startswith(NOT_COMPARED)}
        if args.subset:
            if keys_a - keys_e:
                problems.append(f"step {step}: metrics verl_train does not log: {sorted(keys_a - keys_e)}")
            if len(keys_a & keys_e) < args.min_metrics:
                problems.append(f"step {step}: only {len(keys_a & keys_e)} metrics to compare (expected >= {args.min_metrics})")
        elif keys_e != keys_a:
            problems.append(f"step {step}: metrics only expected: {sorted(keys_e - keys_a)}, only got: {sorted(keys_a - keys_e)}")
        for key in sorted(keys_e & keys_a):
            loose = key.startswith(LOOSE)
            rtol, atol = (args.rtol, args.atol) if loose else (1e-12, 0.0)
            if not close(e[key], a[key], rtol, atol):
                problems.append(f"step {step}: {key}: expected {e[key]!r}, got {a[key]!r} (rtol {rtol}, atol {atol})")
    generations_e = sorted((args.expected / "generations").glob("*.jsonl"))
    generations_a = sorted((args.actual / "generations").glob("*.jsonl"))
    if args.subset and not generations_a:
        generations_e = []
    if [p.name for p in generations_e] != [p.name for p in generations_a]:
        problems.append(f"generations: expected files {[p.name for p in generations_e]}, got {[p.name for p in generations_a]}")
    for pe in generations_e:
        pa = args.actual / "generations" / pe.name
        if pa.exists() and pe.read_text() != pa.read_text():
            le, la = pe.read_text().splitlines(), pa.read_text().splitlines()
            first = next((i for i, (x, y) in enumerate(zip(le, la)) if x != y), min(len(le), len(la)))
            problems.append(f"generations/{pe.name}: line {first + 1} differs:\n    expected {le[first] if first < len(le) else None}\n"
                            f"    got      {la[first] if first < len(la) else None}")
    if problems:
        print(f"compare_trainer_run: {len(problems)} difference(s) between {args.expected} and {args.actual}:")
        for p in problems[:40]:
            print("  - " + p)
        return 1
    print(f"compare_trainer_run: {args.actual} reproduces {args.expected} "
          f"({len(expected)} steps, {sum(len(v) for v in expected.values())} metrics, {len(generations_e)} generation files)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
