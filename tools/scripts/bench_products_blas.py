#!/usr/bin/env python3
"""The step's matrix products (bench/bench_train_step.cpp's BM_StepProducts) through a BLAS peer:
every product of one forward + backward of SmolLM2-135M's linear layers and LM head over 512 tokens,
in the model's layouts (y = x W^T, dx = dy W, dW += dy^T x), each layer product's operands taken from
a ring of 32 slots (larger than the caches, as BM_StepProducts does, so that operands come from
memory as in a step), the head's from one set. The peer is numpy's matmul (OpenBLAS in PyPI's
numpy) or torch's (MKL / oneDNN in PyPI's torch; weight gradients accumulate through addmm_, as
ours do; numpy's matmul cannot accumulate, so its weight gradients are written, not added: a
slightly lighter task). Rounds alternate with ours at each thread count, and the peer's rate is
given as a fraction of the FMA peak that our process measured in the same round.

    python3 -m pip install numpy          # and/or torch
    python3 tools/scripts/bench_products_blas.py --ours build/bench/bench_train_step --backend numpy --threads 1,2 --rounds 3
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HIDDEN, Q_WIDTH, KV_WIDTH, INTERMEDIATE, LAYERS, VOCAB = 576, 576, 192, 1536, 30, 49152
TOKENS = 8 * 64
RING_SLOTS, SLOT_MAX_FLOATS = 32, 4 << 20


def step_products() -> list[tuple[str, int, int, int, bool, bool, bool]]:
    """(part, m, n, k, a_transposed, b_transposed, accumulate), as bench_train_step's step_products."""
    linears = [(Q_WIDTH, HIDDEN), (KV_WIDTH, HIDDEN), (KV_WIDTH, HIDDEN), (HIDDEN, Q_WIDTH),
               (INTERMEDIATE, HIDDEN), (INTERMEDIATE, HIDDEN), (HIDDEN, INTERMEDIATE)]
    products = []
    for _ in range(LAYERS):
        for out, inp in linears:
            products += [("linear_forward", TOKENS, out, inp, False, True, False),
                         ("linear_backward_input", TOKENS, inp, out, False, False, False),
                         ("linear_backward_weight", out, inp, TOKENS, True, False, True)]
    products += [("lm_head_forward", TOKENS, VOCAB, HIDDEN, False, True, False),
                 ("lm_head_backward_input", TOKENS, HIDDEN, VOCAB, False, False, False),
                 ("lm_head_backward_weight", VOCAB, HIDDEN, TOKENS, True, False, True)]
    return products


def peer_seconds(backend: str, threads: int, passes: int) -> list[float]:
    """Seconds of each of `passes` passes over the products (after one warm-up pass)."""
    import numpy as np

    products = step_products()
    fits = lambda m, n, k: max(m * k, k * n, m * n) <= SLOT_MAX_FLOATS
    sizes = lambda keep: [max((f(m, n, k) for _, m, n, k, *_ in products if keep(m, n, k)), default=0)
                          for f in (lambda m, n, k: m * k, lambda m, n, k: k * n, lambda m, n, k: m * n)]
    rng = np.random.default_rng(7)
    make = lambda a, b, c: (rng.uniform(-1, 1, a).astype(np.float32), rng.uniform(-1, 1, b).astype(np.float32),
                            np.zeros(c, np.float32))
    ring = [make(*sizes(fits)) for _ in range(RING_SLOTS)]
    large = make(*sizes(lambda m, n, k: not fits(m, n, k)))
    if backend == "torch":
        import torch

        torch.set_num_threads(threads)
        ring = [tuple(torch.from_numpy(x) for x in slot) for slot in ring]
        large = tuple(torch.from_numpy(x) for x in large)

    def views(buffers, m, n, k, a_t, b_t):
        a, b, c = buffers
        a = a[: m * k].reshape(k, m).T if a_t else a[: m * k].reshape(m, k)
        b = b[: k * n].reshape(n, k).T if b_t else b[: k * n].reshape(k, n)
        return a, b, c[: m * n].reshape(m, n)

    def one_pass() -> float:
        start, slot = time.perf_counter(), 0
        for _, m, n, k, a_t, b_t, accumulate in products:
            if fits(m, n, k):
                buffers, slot = ring[slot % RING_SLOTS], slot + 1
            else:
                buffers = large
            a, b, c = views(buffers, m, n, k, a_t, b_t)
            if backend == "torch":
                c.addmm_(a, b) if accumulate else torch.matmul(a, b, out=c)
            else:
                np.matmul(a, b, out=c)
        return time.perf_counter() - start

    one_pass()  # warm-up: the library's buffers and threads
    return [one_pass() for _ in range(passes)]


def peer_gflops(backend: str, threads: int, passes: int) -> float:
    """The peer in a process of its own, its thread count set before the library loads."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    child = subprocess.run([sys.executable, __file__, "--child", backend, str(threads), str(passes)], env=env,
                           capture_output=True, text=True)
    if child.returncode != 0:
        sys.exit(f"bench_products_blas.py: the {backend} peer at {threads} thread(s) failed "
                 f"(is `python3 -m pip install {backend}` done?):\n{child.stderr.strip()}")
    seconds = json.loads(child.stdout)
    flops = sum(2.0 * m * n * k for _, m, n, k, *_ in step_products())
    return flops / statistics.median(seconds) / 1e9


def our_run(binary: str, threads: int) -> dict[str, float]:
    result = subprocess.run([binary, f"--benchmark_filter=BM_StepProducts/{threads}/", "--benchmark_format=json"],
                            check=True, capture_output=True, text=True)
    run = json.loads(result.stdout)["benchmarks"][0]
    return {"fma_peak": run["fma_peak_GFLOP_per_s"], "fraction": run["products_fraction_of_peak"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ours", help="bench_train_step binary")
    parser.add_argument("--backend", choices=("numpy", "torch"), default="numpy")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--passes", type=int, default=5, help="peer passes per round (their median is the round's)")
    parser.add_argument("--child", nargs=3, metavar=("BACKEND", "THREADS", "PASSES"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        backend, threads, passes = args.child
        print(json.dumps(peer_seconds(backend, int(threads), int(passes))))
        return
    if not args.ours:
        parser.error("--ours: expected the path of bench_train_step")
    print(f"| threads | round | FMA peak GFLOP/s | ours products % of peak | {args.backend} products % of peak |")
    print("|---|---|---|---|---|")
    for threads in (int(t) for t in args.threads.split(",")):
        ours, peer = [], []
        for round_index in range(args.rounds):
            # Alternate which side runs first, so that a drift of the machine falls on both.
            first_peer = round_index % 2 == 1
            p = peer_gflops(args.backend, threads, args.passes) if first_peer else None
            o = our_run(args.ours, threads)
            p = p or peer_gflops(args.backend, threads, args.passes)
            ours.append(o["fraction"])
            peer.append(p / o["fma_peak"])
            print(f"| {threads} | {round_index + 1} | {o['fma_peak']:.1f} | {100 * ours[-1]:.1f} | {100 * peer[-1]:.1f} |",
                  flush=True)
        print(f"| {threads} | median | | **{100 * statistics.median(ours):.1f}** | **{100 * statistics.median(peer):.1f}** |")


if __name__ == "__main__":
    main()
