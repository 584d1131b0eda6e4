#!/usr/bin/env python3
"""Checks a Safe-RLHF run's metrics (the file logger's JSON lines): every safe_rlhf/ metric and the
three updates' are logged at every step, and lambda moves the way the episode costs say: up while
the expected episode cost J_C exceeds the cost limit d, down while it is below
(log lambda += lambda_lr * (J_C - d) * lambda).

Usage: check_safe_rlhf_run.py METRICS_JSONL COST_LIMIT LAMBDA_INIT
"""
import json
import math
import sys

REQUIRED = [
    "safe_rlhf/lambda", "safe_rlhf/episode_cost", "safe_rlhf/cost_violation", "safe_rlhf/lambda_loss",
    "safe_rlhf/lambda_updated", "safe_rlhf/reward_with_kl_penalty", "safe_rlhf/cost_with_kl_penalty",
    "safe_rlhf/kl_divergence", "actor/pg_loss", "critic/vf_loss", "cost_critic/vf_loss",
]


def main():
    path, limit, previous = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
    steps = [json.loads(line) for line in open(path) if line.strip()]
    if len(steps) < 2:
        sys.exit(f"{path}: expected at least 2 logged steps, got {len(steps)}")
    for entry in steps:
        step, data = entry["step"], entry["data"]
        missing = [k for k in REQUIRED if k not in data or data[k] is None or not math.isfinite(data[k])]
        if missing:
            sys.exit(f"{path}: step {step}: missing or non-finite metrics: {', '.join(missing)}")
        lam, cost = data["safe_rlhf/lambda"], data["safe_rlhf/episode_cost"]
        if abs(data["safe_rlhf/cost_violation"] - (cost - limit)) > 1e-9 * max(1.0, abs(cost)):
            sys.exit(f"{path}: step {step}: cost_violation {data['safe_rlhf/cost_violation']} is not J_C - d = {cost - limit}")
        if data["safe_rlhf/lambda_updated"] != 1:
            sys.exit(f"{path}: step {step}: lambda was not updated")
        if (lam - previous) * (cost - limit) <= 0:
            sys.exit(f"{path}: step {step}: lambda went {previous} -> {lam} with J_C = {cost} and d = {limit}; "
                     f"expected it to {'rise' if cost > limit else 'fall'}")
        print(f"step {step}: J_C = {cost:.6g}, d = {limit:g}: lambda {previous:.6g} -> {lam:.6g}")
        previous = lam
    return 0


if __name__ == "__main__":
    sys.exit(main())
