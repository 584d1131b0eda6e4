#!/usr/bin/env python3
"""Time PyTorch GPU implementations of verl's advantage estimators, at the shapes of
build/bench/cuda_bench_advantages (the baseline side of issue 4's advantage targets).

  grpo_loop        verl's compute_grpo_outcome_advantage structure: a Python loop that groups the
                   scores by uid, torch.mean / torch.std per group, then a loop over the responses
                   (per-element GPU tensor ops: this is what "loop-based group statistics" costs)
  grpo_vectorized  the same statistics with scatter-adds (verl's group_mean_std structure)
  gae              verl's compute_gae_advantage_return structure: a Python loop over the response
                   positions (reversed), masked state carry, then masked whitening
  copy             a device-to-device copy of the kernel's inputs (roofline reference)

Every case is validated first against a float64 NumPy-free reference computed with torch on the
CPU (group statistics and the GAE recursion), then timed with CUDA events: median of --repeats
after --warmup, in ms. One JSON line per case. The loop version of GRPO over 1M responses takes
minutes per call; --loop-responses bounds it (default 65536) and the script reports per-response
time so that it can be compared.

    python3 tools/scripts/bench_torch_cuda_advantages.py [--responses 1048576] [--group 8]
        [--rows 4096] [--cols 4096] [--repeats 10] [--loop-responses 65536]
"""

import argparse
import json
import sys
from collections import defaultdict


def cuda_time_ms(torch, fn, repeats, warmup):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start = torch.cuda.Event(enable_timing=True)
        stop = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    times.sort()
    return times[len(times) // 2]


def grpo_loop(torch, scores, index, epsilon=1e-6):
    """Per-group loops as verl's compute_grpo_outcome_advantage (outcome scores already summed)."""
    scores = scores.clone()
    members = defaultdict(list)
    for i in range(scores.shape[0]):
        members[index[i]].append(scores[i])
    mean, std = {}, {}
    for uid, group in members.items():
        if len(group) == 1:
            mean[uid] = torch.tensor(0.0, device=scores.device)
            std[uid] = torch.tensor(1.0, device=scores.device)
        else:
            stacked = torch.stack(group)
            mean[uid] = torch.mean(stacked)
            std[uid] = torch.std(stacked)
    for i in range(scores.shape[0]):
        scores[i] = (scores[i] - mean[index[i]]) / (std[index[i]] + epsilon)
    return scores


def grpo_vectorized(torch, scores, group_of_row, groups, epsilon=1e-6):
    """Scatter-add group statistics (count, sum, sum of squares), unbiased std, singleton rule."""
    count = torch.zeros(groups, device=scores.device, dtype=scores.dtype).index_add_(0, group_of_row, torch.ones_like(scores))
    total = torch.zeros(groups, device=scores.device, dtype=scores.dtype).index_add_(0, group_of_row, scores)
    squares = torch.zeros(groups, device=scores.device, dtype=scores.dtype).index_add_(0, group_of_row, scores * scores)
    mean = total / count.clamp_min(1)
    var = (squares - total * total / count.clamp_min(1)) / (count - 1).clamp_min(1)
    single = count <= 1
    mean = torch.where(single, torch.zeros_like(mean), mean)
    std = torch.where(single, torch.ones_like(var), var.clamp_min(0).sqrt())
    return (scores - mean[group_of_row]) / (std[group_of_row] + epsilon)


def masked_whiten(torch, values, mask):
    count = mask.sum()
    mean = (values * mask).sum() / (count + 1e-8)
    var = (((values - mean) ** 2) * mask).sum() / (count + 1e-8) * (count / (count - 1))
    return (values - mean) * torch.rsqrt(var + 1e-8)


def gae(torch, rewards, values, mask, gamma, lam):
    """The reversed loop over positions with verl's masked carry of next value and advantage."""
    next_values = torch.zeros(rewards.shape[0], device=rewards.device)
    last = torch.zeros_like(next_values)
    reversed_advantages = []
    for t in reversed(range(rewards.shape[1])):
        m = mask[:, t]
        delta = rewards[:, t] + gamma * next_values - values[:, t]
        candidate = delta + gamma * lam * last
        next_values = values[:, t] * m + (1 - m) * next_values
        last = candidate * m + (1 - m) * last
        reversed_advantages.append(last)
    advantages = torch.stack(reversed_advantages[::-1], dim=1)
    returns = advantages + values
    return masked_whiten(torch, advantages, mask), returns


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--responses", type=int, default=1 << 20)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--loop-responses", type=int, default=1 << 16)
    parser.add_argument("--rows", type=int, default=4096)
    parser.add_argument("--cols", type=int, default=4096)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    args = parser.parse_args()
    try:
        import torch
    except ImportError:
        print("PyTorch is not installed: nothing to benchmark", file=sys.stderr)
        return 1
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to benchmark", file=sys.stderr)
        return 1
    device = torch.device("cuda")
    generator = torch.Generator().manual_seed(0)

    # ---- GRPO ----
    n, g = args.responses, args.group
    scores_cpu = (torch.rand(n, generator=generator) < 0.4).float()
    group_of_row = torch.arange(n) // g
    scores = scores_cpu.to(device)
    rows_gpu = group_of_row.to(device)
    groups = int(group_of_row.max()) + 1
    expected = grpo_vectorized(torch, scores_cpu.double(), group_of_row, groups).float()
    got = grpo_vectorized(torch, scores, rows_gpu, groups).cpu()
    valid = bool(torch.allclose(got, expected, rtol=1e-4, atol=1e-4))
    ms = cuda_time_ms(torch, lambda: grpo_vectorized(torch, scores, rows_gpu, groups), args.repeats, args.warmup)
    copy_bytes = n * (4 + 8 + 4) // 2
    buf = torch.empty(copy_bytes, dtype=torch.uint8, device=device)
    copy_ms = cuda_time_ms(torch, lambda: buf.clone(), args.repeats, args.warmup)
    print(json.dumps({"bench": "torch_grpo_vectorized", "responses": n, "group": g, "valid": valid, "us": ms * 1e3,
                      "copy_us": copy_ms * 1e3}), flush=True)

    loop_n = min(args.loop_responses, n)
    index = group_of_row[:loop_n].tolist()
    loop_scores = scores[:loop_n]
    got = grpo_loop(torch, loop_scores, index).cpu()
    valid = bool(torch.allclose(got, expected[:loop_n], rtol=1e-4, atol=1e-4))
    ms = cuda_time_ms(torch, lambda: grpo_loop(torch, loop_scores, index), 1, 0)
    print(json.dumps({"bench": "torch_grpo_loop", "responses": loop_n, "group": g, "valid": valid, "ms": ms,
                      "us_per_response": ms * 1e3 / loop_n,
                      "extrapolated_ms_for_responses": ms * n / loop_n, "responses_extrapolated": n}), flush=True)

    # ---- GAE ----
    b, t = args.rows, args.cols
    rewards = torch.randn(b, t, generator=generator) * 0.1
    values = torch.randn(b, t, generator=generator)
    lengths = torch.randint(1, t + 1, (b,), generator=generator)
    mask = (torch.arange(t)[None, :] < lengths[:, None]).float()
    small = slice(0, min(b, 64))
    exp_adv, exp_ret = gae(torch, rewards[small].double(), values[small].double(), mask[small].double(), 0.99, 0.95)
    r_gpu, v_gpu, m_gpu = rewards.to(device), values.to(device), mask.to(device)
    got_adv, got_ret = gae(torch, r_gpu[small], v_gpu[small], m_gpu[small], 0.99, 0.95)
    valid = bool(torch.allclose(got_ret.cpu(), exp_ret.float(), rtol=1e-4, atol=1e-4)) and bool(
        torch.allclose(got_adv.cpu(), exp_adv.float(), rtol=1e-3, atol=1e-3))
    ms = cuda_time_ms(torch, lambda: gae(torch, r_gpu, v_gpu, m_gpu, 0.99, 0.95), max(1, args.repeats // 5), 1)
    inputs = torch.empty(3 * b * t, device=device)
    copy_ms = cuda_time_ms(torch, lambda: inputs.clone(), args.repeats, args.warmup)
    print(json.dumps({"bench": "torch_gae_loop", "rows": b, "cols": t, "valid": valid, "ms": ms,
                      "copy_inputs_ms": copy_ms}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
