#!/usr/bin/env python3
"""Time PyTorch's own GPU equivalents of the CUDA log-prob / entropy kernels, at their shapes.

This is the baseline side of the ">= 10x over PyTorch" target of issue 4: build/bench/
cuda_bench_logprob_entropy times verl-cpp's kernels (and a device-to-device copy); this script
times, on the same GPU, what verl computes with PyTorch ops (verl/utils/torch_functional.py):

  logprob   log_softmax(logits / T, -1).gather(-1, labels)        (verl's logprobs_from_logits
            without flash-attn's fused cross-entropy)
  entropy   logsumexp(x, -1) - (softmax(x, -1) * x).sum(-1)        (verl's entropy_from_logits)
  forward   both together, no_grad
  backward  autograd of  sum(g_lp * logprob) + sum(g_h * entropy)  w.r.t. the logits, timed alone
            after an untimed forward with grad (the C++ kernel's backward is d logits from the
            same two cotangents)
  copy      logits.clone() (a device-to-device copy of the same bytes, for the roofline fraction)

Shapes: 8192 x 151936 and 4096 x 151936, bf16 and fp32 (--rows / --vocab / --dtype to change).
x = logits.float() / T (float32 math, as the C++ kernels compute; bf16 logits are widened first).
Times are the median of --repeats after --warmup, in ms, from CUDA events.

Each case prints one JSON line; cases that run out of GPU memory print {"error": "oom", ...}.

    python3 tools/scripts/bench_torch_cuda.py [--rows 8192 4096] [--dtype bf16 fp32] [--repeats 10]
"""

import argparse
import json
import sys


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, nargs="+", default=[8192, 4096])
    parser.add_argument("--vocab", type=int, default=151936)
    parser.add_argument("--dtype", nargs="+", default=["bf16", "fp32"], choices=["bf16", "fp32"])
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--skip-backward", action="store_true", help="forward only (the backward needs ~4x the logits)")
    parser.add_argument("--once", action="store_true",
                        help="run the forward and the backward once each, inside the NVTX ranges torch_forward and "
                             "torch_backward, untimed: for a profiler counting the bytes PyTorch moves "
                             "(ncu --nvtx --nvtx-include torch_forward/ or torch_backward --metrics dram__bytes_read.sum,...)")
    args = parser.parse_args()

    try:
        import torch
    except ImportError:
        print(json.dumps({"bench": "torch_logprob_entropy", "error": "torch is not installed"}))
        return 0
    if not torch.cuda.is_available():
        print(json.dumps({"bench": "torch_logprob_entropy", "error": "no CUDA device"}))
        return 0

    device = torch.device("cuda")

    def median_ms(fn, setup=None):
        times = []
        for i in range(args.warmup + args.repeats):
            state = setup() if setup is not None else None
            start = torch.cuda.Event(enable_timing=True)
            stop = torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            start.record()
            fn(state)
            stop.record()
            torch.cuda.synchronize()
            if i >= args.warmup:
                times.append(start.elapsed_time(stop))
            del state
        times.sort()
        return times[len(times) // 2]

    def logprob(x, labels):
        return torch.log_softmax(x, dim=-1).gather(-1, labels.unsqueeze(-1)).squeeze(-1)

    def entropy(x):
        pd = torch.softmax(x, dim=-1)
        return torch.logsumexp(x, dim=-1) - (pd * x).sum(dim=-1)

    temperature = args.temperature
    for rows in args.rows:
        for dtype_name in args.dtype:
            dtype = torch.bfloat16 if dtype_name == "bf16" else torch.float32
            record = {"bench": "torch_logprob_entropy", "dtype": dtype_name, "rows": rows, "vocab": args.vocab,
                      "temperature": temperature, "torch": torch.__version__, "device": torch.cuda.get_device_name()}
            try:
                generator = torch.Generator(device=device).manual_seed(0)
                logits = (torch.rand(rows, args.vocab, device=device, generator=generator) * 16 - 8).to(dtype)
                labels = torch.randint(0, args.vocab, (rows,), device=device, generator=generator)
                g_lp = torch.rand(rows, device=device, generator=generator) * 2 - 1
                g_h = torch.rand(rows, device=device, generator=generator) * 2 - 1
                nbytes = logits.numel() * logits.element_size()

                if args.once:
                    torch.cuda.synchronize()
                    with torch.no_grad():
                        torch.cuda.nvtx.range_push("torch_forward")
                        logprob(logits.float() / temperature, labels), entropy(logits.float() / temperature)
                        torch.cuda.nvtx.range_pop()
                    leaf = logits.detach().requires_grad_(True)
                    x = leaf.float() / temperature
                    loss = (g_lp * logprob(x, labels)).sum() + (g_h * entropy(x)).sum()
                    # A start/end range: autograd runs the backward on its own thread, outside
                    # a push/pop range of this one (ncu --nvtx-include torch_backward, no slash).
                    backward_range = torch.cuda.nvtx.range_start("torch_backward")
                    loss.backward()
                    torch.cuda.synchronize()
                    torch.cuda.nvtx.range_end(backward_range)
                    torch.cuda.synchronize()
                    record["once"] = True
                    print(json.dumps(record), flush=True)
                    continue
                record["copy_ms"] = median_ms(lambda _: logits.clone())
                record["copy_gbps"] = 2 * nbytes / (record["copy_ms"] * 1e6)
                with torch.no_grad():
                    record["logprob_ms"] = median_ms(lambda _: logprob(logits.float() / temperature, labels))
                    record["entropy_ms"] = median_ms(lambda _: entropy(logits.float() / temperature))
                    record["forward_ms"] = median_ms(
                        lambda _: (logprob(logits.float() / temperature, labels), entropy(logits.float() / temperature)))
                record["forward_gbps"] = nbytes / (record["forward_ms"] * 1e6)
                record["forward_fraction_of_copy"] = record["forward_gbps"] / record["copy_gbps"]
                if not args.skip_backward:
                    def setup():
                        leaf = logits.detach().requires_grad_(True)
                        x = leaf.float() / temperature
                        loss = (g_lp * logprob(x, labels)).sum() + (g_h * entropy(x)).sum()
                        return leaf, loss

                    def run(state):
                        leaf, loss = state
                        loss.backward()

                    record["backward_ms"] = median_ms(run, setup)
                    record["backward_gbps"] = 2 * nbytes / (record["backward_ms"] * 1e6)
                    record["backward_fraction_of_copy"] = record["backward_gbps"] / record["copy_gbps"]
                del logits
            except torch.cuda.OutOfMemoryError:
                record["error"] = "oom"
            torch.cuda.empty_cache()
            print(json.dumps(record), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
