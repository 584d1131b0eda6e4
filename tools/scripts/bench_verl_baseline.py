#!/usr/bin/env python3
"""Time verl's own PyTorch functions on this machine, at the shapes verl-cpp's benchmarks use.

This is the baseline side of the speed claims: verl-cpp's C++ benchmarks (bench/bench_*.cpp)
time our kernels and a naive C++ reference; this script times the real verl code, unmodified,
on the same CPU with the same thread count, so that "verl time / verl-cpp time" can be reported.

verl's source is not vendored. Export a checkout first, e.g.

    git --git-dir=<verl mirror> archive HEAD | tar -x -C /tmp/verl-src

and run

    python3 tools/scripts/bench_verl_baseline.py --verl-src /tmp/verl-src [--json out.json]

How verl is imported
--------------------
The modules exercised are loaded from their files, unmodified, under their dotted names:

    verl/trainer/ppo/core_algos.py   -> verl.trainer.ppo.core_algos
    verl/utils/torch_functional.py   -> verl.utils.torch_functional

verl's package __init__ files (which pull in ray, hydra, tokenizers, ...) are bypassed by
registering plain stand-in parent packages (verl, verl.utils, verl.trainer, verl.trainer.ppo,
verl.workers) whose __path__ points at the real directories, so every other verl module these
two import (verl.utils.device, verl.utils.import_utils, verl.utils.groupwise, verl.base_config,
verl.trainer.config) is the real one. Two things are stand-ins:

  * third-party packages that are not installed and whose objects the timed code never calls
    (omegaconf.DictConfig appears only in type hints, tensordict.TensorDict and
    transformers.PreTrainedTokenizer only in signatures of untimed functions); a stand-in is
    used only when the real import fails, and the JSON lists which ones were;
  * verl.workers.config.ActorConfig, whose real module needs verl's model/tokenizer stack:
    compute_policy_loss_vanilla reads only clip_ratio, clip_ratio_low, clip_ratio_high,
    config.get("clip_ratio_c") and global_batch_info from it, so a dataclass built on verl's real
    BaseConfig with exactly those fields (verl's defaults) is passed. AlgoConfig is verl's real one.

What is timed (wall clock, torch.set_num_threads(--threads), median of --repeats after --warmup)
--------------------------------------------------------------------------------------------------
  grpo            compute_grpo_outcome_advantage            16384 x 1024, groups of 8 (uid strings)
  grpo_vectorized compute_grpo_vectorized_outcome_advantage same inputs (verl's faster variant)
  rloo            compute_rloo_outcome_advantage            same inputs
  rloo_vectorized compute_rloo_vectorized_outcome_advantage same inputs
  reinforce_pp    compute_reinforce_plus_plus_outcome_advantage  16384 x 1024, gamma 0.99
  gae             compute_gae_advantage_return              16384 x 1024, gamma 0.99, lam 0.95
  logits_fwd      logprobs_from_logits + entropy_from_logits  4096 x 151936 fp32, no_grad
  logits_bwd      autograd backward of both (grad 1/N for log-probs, -0.01/N for entropy), timed
                  alone after an untimed forward with grad (--logits-backward; ~15 GB peak)
  policy_fwd      compute_policy_loss_vanilla, token-mean, clip 0.2/0.28, c=3  256 x 4096
  policy_fwd_bwd  the same plus pg_loss.backward() (what verl-cpp's compute_policy_loss returns:
                  loss, metrics and d loss / d log_prob)
  agg_loss/<mode> agg_loss for each of the four modes  256 x 4096
  value_loss_fwd_bwd  compute_value_loss (clip 0.2, token-mean) + backward  256 x 4096
  kl_low_var      kl_penalty(..., "low_var_kl")  16384 x 1024

On a shared machine (load above the core count) torch's intra-op thread pool suffers badly: an
op split over 2 threads waits for whichever thread is descheduled, and medians at --threads 2
were seen 2-10x above the same run at --threads 1. Run both and compare verl's better figure.
verl-cpp's element-wise kernels (policy losses, agg_loss, KL, the outcome-advantage broadcast)
split rows over the hardware's threads; VERL_ALGO_THREADS=N caps them, so the C++ side can be
run at the same thread count as --threads N (bench/RESULTS.md lists the command lines).
The 4096 x 151936 backward needs ~20 GB; --logits-rows 512 times the same code on 1/8 of the rows
(the cost is linear in the rows, as bench_logits assumes for its naive reference).

Inputs mirror the C++ benchmarks: response lengths uniform in [T/4, T], an outcome score on the
last valid token (1 with p=0.4, else 0.1*U(-1,1)) plus a small dense reward at len/2, float32
masks (as the C++ MatrixF masks; --mask-dtype int64 for verl's attention-mask dtype), and a
numpy object array of uid strings, each repeated for the 8 responses of its group
(--shuffle-uids to interleave the groups).
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import importlib
import importlib.util
import json
import os
import platform
import random
import statistics
import sys
import time
import types
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

# ---------------------------------------------------------------------------------------------
# Loading verl's modules without its package __init__ files
# ---------------------------------------------------------------------------------------------

STUBBED_THIRD_PARTY: list[str] = []


def _stub_module(name: str, **attrs: Any) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__dict__.update(attrs)
    module.__dict__["__verl_baseline_stub__"] = True
    sys.modules[name] = module
    STUBBED_THIRD_PARTY.append(name)
    return module


def _ensure_third_party() -> None:
    """Stand-ins for third-party packages that are missing; the timed code never calls them."""
    try:
        import omegaconf  # noqa: F401
    except Exception:

        class DictConfig(dict):
            pass

        class ListConfig(list):
            pass

        class OmegaConf:
            @staticmethod
            def create(obj=None):
                return DictConfig(obj or {})

        _stub_module("omegaconf", DictConfig=DictConfig, ListConfig=ListConfig, OmegaConf=OmegaConf, MISSING="???")
    try:
        import tensordict  # noqa: F401
    except Exception:

        class TensorDict(dict):
            pass

        _stub_module("tensordict", TensorDict=TensorDict)
    try:
        from transformers import PreTrainedTokenizer  # noqa: F401
    except Exception:
        for name in [n for n in sys.modules if n == "transformers" or n.startswith("transformers.")]:
            del sys.modules[name]

        class PreTrainedTokenizer:
            pass

        _stub_module("transformers", PreTrainedTokenizer=PreTrainedTokenizer)


def _stub_package(name: str, directory: Path) -> types.ModuleType:
    """A parent package that skips verl's __init__.py but finds real submodules in `directory`."""
    package = types.ModuleType(name)
    package.__path__ = [str(directory)]
    package.__package__ = name
    package.__file__ = None
    sys.modules[name] = package
    parent, _, child = name.rpartition(".")
    if parent:
        setattr(sys.modules[parent], child, package)
    return package


def _load_file(name: str, path: Path) -> types.ModuleType:
    """Loads one verl source file, unmodified, under its dotted module name."""
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    parent, _, child = name.rpartition(".")
    if parent:
        setattr(sys.modules[parent], child, module)
    return module


@dataclasses.dataclass
class Verl:
    core_algos: types.ModuleType
    torch_functional: types.ModuleType
    AlgoConfig: type
    ActorConfig: type


def load_verl(src: Path) -> Verl:
    root = src / "verl"
    for required in ("trainer/ppo/core_algos.py", "utils/torch_functional.py", "base_config.py"):
        if not (root / required).is_file():
            raise SystemExit(f"{root / required} not found: --verl-src must be the root of a verl checkout")
    _ensure_third_party()
    for name in [n for n in sys.modules if n == "verl" or n.startswith("verl.")]:
        del sys.modules[name]

    _stub_package("verl", root)
    utils = _stub_package("verl.utils", root / "utils")
    _stub_package("verl.trainer", root / "trainer")
    _stub_package("verl.trainer.ppo", root / "trainer" / "ppo")
    _stub_package("verl.workers", root / "workers")

    # `from verl.utils import as_torch_index, group_mean_std` in core_algos: the real groupwise module.
    groupwise = importlib.import_module("verl.utils.groupwise")
    utils.as_torch_index = groupwise.as_torch_index
    utils.group_mean_std = groupwise.group_mean_std

    base_config = importlib.import_module("verl.base_config")
    trainer_config = importlib.import_module("verl.trainer.config")  # real package: algorithm.py, config.py

    @dataclasses.dataclass
    class ActorConfig(base_config.BaseConfig):
        """The fields of verl.workers.config.ActorConfig that compute_policy_loss_* read (verl defaults)."""

        clip_ratio: float = 0.2
        clip_ratio_low: float | None = 0.2
        clip_ratio_high: float | None = 0.2
        clip_ratio_c: float = 3.0
        loss_agg_mode: str = "token-mean"
        global_batch_info: dict = dataclasses.field(default_factory=dict)

    workers_config = _stub_package("verl.workers.config", root / "workers" / "config")
    workers_config.ActorConfig = ActorConfig

    torch_functional = _load_file("verl.utils.torch_functional", root / "utils" / "torch_functional.py")
    core_algos = _load_file("verl.trainer.ppo.core_algos", root / "trainer" / "ppo" / "core_algos.py")
    return Verl(core_algos, torch_functional, trainer_config.AlgoConfig, ActorConfig)


# ---------------------------------------------------------------------------------------------
# Inputs
# ---------------------------------------------------------------------------------------------


def rollout_inputs(rows: int, cols: int, group: int, mask_dtype: torch.dtype, shuffle_uids: bool, seed: int):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(cols // 4, cols + 1, (rows,), generator=g)
    positions = torch.arange(cols).unsqueeze(0)
    mask = (positions < lengths.unsqueeze(1)).to(mask_dtype)
    rewards = torch.zeros(rows, cols, dtype=torch.float32)
    u = torch.rand(rows, generator=g) * 2 - 1
    correct = torch.rand(rows, generator=g) < 0.4
    score = torch.where(correct, torch.ones(rows), 0.1 * u)
    r = torch.arange(rows)
    rewards[r, lengths - 1] = score
    rewards[r, lengths // 2] += 0.05 * (torch.rand(rows, generator=g) * 2 - 1)
    values = torch.rand(rows, cols, generator=g) * 2 - 1
    # verl: uid = [str(uuid.uuid4()) per prompt], then repeated n times (interleave=True).
    rng = random.Random(seed)
    groups = rows // group
    uids = ["%08x-%04x-4%03x-%04x-%012x" % tuple(rng.getrandbits(b) for b in (32, 16, 12, 16, 48)) for _ in range(groups)]
    index = np.array([uid for uid in uids for _ in range(group)], dtype=object)
    if shuffle_uids:
        index = index[np.random.default_rng(seed).permutation(rows)]
    return rewards, mask, values, index


def loss_inputs(rows: int, cols: int, mask_dtype: torch.dtype, seed: int):
    g = torch.Generator().manual_seed(seed)

    def u(*shape):
        return torch.rand(*shape, generator=g) * 2 - 1

    lengths = torch.randint(cols // 4, cols + 1, (rows,), generator=g)
    mask = (torch.arange(cols).unsqueeze(0) < lengths.unsqueeze(1)).to(mask_dtype)
    old_log_prob = -2.0 + u(rows, cols)
    log_prob = old_log_prob + 0.3 * u(rows, cols)
    advantages = u(rows, 1).expand(rows, cols).contiguous()
    loss_mat = u(rows, cols)
    values = u(rows, cols)
    returns = u(rows, cols)
    vpreds = values + 0.4 * u(rows, cols)
    return dict(
        old_log_prob=old_log_prob,
        log_prob=log_prob,
        advantages=advantages,
        mask=mask,
        loss_mat=loss_mat,
        values=values,
        returns=returns,
        vpreds=vpreds,
    )


def logits_inputs(rows: int, vocab: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    logits = torch.empty(rows, vocab, dtype=torch.float32)
    chunk = 256
    for start in range(0, rows, chunk):  # keeps the temporaries small
        logits[start : start + chunk].normal_(0.0, 6.0, generator=g)
    labels = torch.randint(0, vocab, (rows,), generator=g)
    return logits, labels


# ---------------------------------------------------------------------------------------------
# Timing
# ---------------------------------------------------------------------------------------------


class Timings(list):
    """Wall-clock seconds per run; `.cpu` holds the process CPU seconds (all threads) of the same runs."""

    def __init__(self):
        super().__init__()
        self.cpu: list[float] = []


def time_fn(fn: Callable[..., Any], warmup: int, repeats: int, setup: Callable[[], Any] | None = None) -> Timings:
    """Wall-clock seconds of `fn` for `repeats` runs after `warmup` runs; `setup` runs untimed first."""
    times = Timings()
    for i in range(warmup + repeats):
        state = setup() if setup is not None else None
        gc.collect()
        cpu_start = time.process_time()
        start = time.perf_counter()
        out = fn() if state is None else fn(state)
        elapsed = time.perf_counter() - start
        cpu = time.process_time() - cpu_start
        del out, state
        if i >= warmup:
            times.append(elapsed)
            times.cpu.append(cpu)
    return times


def load_average() -> list[float] | None:
    try:
        return list(os.getloadavg())
    except OSError:
        return None


ALL_CASES = [
    "grpo",
    "grpo_vectorized",
    "rloo",
    "rloo_vectorized",
    "reinforce_pp",
    "gae",
    "policy_fwd",
    "policy_fwd_bwd",
    "agg_loss",
    "value_loss_fwd_bwd",
    "kl_low_var",
    "logits_fwd",
    "logits_bwd",
]


def run(args: argparse.Namespace) -> dict:
    torch.set_num_threads(args.threads)
    verl = load_verl(Path(args.verl_src))
    ca, vf = verl.core_algos, verl.torch_functional
    mask_dtype = {"float32": torch.float32, "int64": torch.int64}[args.mask_dtype]
    selected = set(args.only.split(",")) if args.only else set(ALL_CASES)
    unknown = selected - set(ALL_CASES)
    if unknown:
        raise SystemExit(f"unknown case(s) {sorted(unknown)}; known: {ALL_CASES}")
    if not args.logits_backward:
        selected.discard("logits_bwd")
    results: list[dict] = []

    def record(case: str, function: str, shape: str, times: Timings, note: str = "") -> None:
        row = {
            "case": case,
            "function": function,
            "shape": shape,
            "median_s": statistics.median(times),
            "min_s": min(times),
            "runs_s": list(times),
            "median_cpu_s": statistics.median(times.cpu) if getattr(times, "cpu", None) else None,
            "load_after": load_average(),
        }
        if note:
            row["note"] = note
        results.append(row)
        print(
            f"  {case:<34} {shape:<22} median {row['median_s'] * 1e3:10.2f} ms  min {row['min_s'] * 1e3:10.2f} ms"
            f"  ({len(times)} runs)",
            file=sys.stderr,
            flush=True,
        )

    W, R = args.warmup, args.repeats

    # ---- advantages: 16384 x 1024, groups of 8 --------------------------------------------------
    adv_cases = {"grpo", "grpo_vectorized", "rloo", "rloo_vectorized", "reinforce_pp", "gae"} & selected
    if adv_cases:
        rows, cols = args.adv_rows, args.adv_cols
        rewards, mask, values, index = rollout_inputs(rows, cols, args.group, mask_dtype, args.shuffle_uids, args.seed)
        shape = f"{rows}x{cols}/g{args.group}"
        algo = verl.AlgoConfig(gamma=0.99, lam=0.95)
        if "grpo" in adv_cases:
            t = time_fn(lambda: ca.compute_grpo_outcome_advantage(rewards, mask, index, config=algo), W, R)
            record("grpo", "core_algos.compute_grpo_outcome_advantage", shape, t)
        if "grpo_vectorized" in adv_cases:
            t = time_fn(lambda: ca.compute_grpo_vectorized_outcome_advantage(rewards, mask, index, config=algo), W, R)
            record("grpo_vectorized", "core_algos.compute_grpo_vectorized_outcome_advantage", shape, t)
        if "rloo" in adv_cases:
            t = time_fn(lambda: ca.compute_rloo_outcome_advantage(rewards, mask, index, config=algo), W, R)
            record("rloo", "core_algos.compute_rloo_outcome_advantage", shape, t)
        if "rloo_vectorized" in adv_cases:
            t = time_fn(lambda: ca.compute_rloo_vectorized_outcome_advantage(rewards, mask, index, config=algo), W, R)
            record("rloo_vectorized", "core_algos.compute_rloo_vectorized_outcome_advantage", shape, t)
        if "reinforce_pp" in adv_cases:
            t = time_fn(lambda: ca.compute_reinforce_plus_plus_outcome_advantage(rewards, mask, config=algo), W, R)
            record("reinforce_pp", "core_algos.compute_reinforce_plus_plus_outcome_advantage", f"{rows}x{cols}", t)
        if "gae" in adv_cases:
            t = time_fn(lambda: ca.compute_gae_advantage_return(rewards, values, mask, 0.99, 0.95), W, R)
            record("gae", "core_algos.compute_gae_advantage_return", f"{rows}x{cols}", t)
        del rewards, mask, values, index

    # ---- losses: 256 x 4096 ---------------------------------------------------------------------
    rows, cols = args.loss_rows, args.loss_cols
    shape = f"{rows}x{cols}"
    b = loss_inputs(rows, cols, mask_dtype, args.seed)
    actor = verl.ActorConfig(clip_ratio=0.2, clip_ratio_low=0.2, clip_ratio_high=0.28, clip_ratio_c=3.0)
    if "policy_fwd" in selected:

        def policy_fwd():
            with torch.no_grad():
                return ca.compute_policy_loss_vanilla(
                    b["old_log_prob"], b["log_prob"], b["advantages"], b["mask"], "token-mean", actor
                )

        record("policy_fwd", "core_algos.compute_policy_loss_vanilla (token-mean)", shape, time_fn(policy_fwd, W, R))
    if "policy_fwd_bwd" in selected:

        def fresh_leaf():
            return b["log_prob"].clone().requires_grad_(True)

        def policy_fwd_bwd(log_prob):
            loss, metrics = ca.compute_policy_loss_vanilla(
                b["old_log_prob"], log_prob, b["advantages"], b["mask"], "token-mean", actor
            )
            loss.backward()
            return log_prob.grad

        record(
            "policy_fwd_bwd",
            "core_algos.compute_policy_loss_vanilla (token-mean) + backward",
            shape,
            time_fn(policy_fwd_bwd, W, R, setup=fresh_leaf),
        )
    if "agg_loss" in selected:
        for mode in ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"):
            t = time_fn(lambda mode=mode: ca.agg_loss(b["loss_mat"], b["mask"], mode), W, max(R, 20))
            record(f"agg_loss/{mode}", "core_algos.agg_loss", shape, t)
    if "value_loss_fwd_bwd" in selected:

        def fresh_vpreds():
            return b["vpreds"].clone().requires_grad_(True)

        def value_loss(vpreds):
            loss, clipfrac = ca.compute_value_loss(vpreds, b["returns"], b["values"], b["mask"], 0.2, "token-mean")
            loss.backward()
            return vpreds.grad

        record(
            "value_loss_fwd_bwd",
            "core_algos.compute_value_loss (token-mean) + backward",
            shape,
            time_fn(value_loss, W, max(R, 10), setup=fresh_vpreds),
        )
    del b
    if "kl_low_var" in selected:
        g = torch.Generator().manual_seed(args.seed)
        lp = torch.rand(args.adv_rows, args.adv_cols, generator=g) * 2 - 3
        ref = torch.rand(args.adv_rows, args.adv_cols, generator=g) * 2 - 3
        t = time_fn(lambda: ca.kl_penalty(lp, ref, "low_var_kl"), W, R)
        record("kl_low_var", 'core_algos.kl_penalty(..., "low_var_kl")', f"{args.adv_rows}x{args.adv_cols}", t)
        del lp, ref

    # ---- log-prob + entropy: 4096 x 151936 fp32 -------------------------------------------------
    if {"logits_fwd", "logits_bwd"} & selected:
        rows, vocab = args.logits_rows, args.logits_vocab
        shape = f"{rows}x{vocab}"
        gc.collect()
        logits, labels = logits_inputs(rows, vocab, args.seed)
        path = (
            "flash_attn"
            if vf.FLAH_ATTN_CROSS_ENTROPY_LOSS_AVAILABLE
            else "torch_npu"
            if vf.NPU_CROSS_ENTROPY_LOSS_AVAILABLE
            else "logprobs_from_logits_v2 (row-wise logsumexp)"
        )
        if "logits_fwd" in selected:

            def logits_fwd():
                with torch.no_grad():
                    return vf.logprobs_from_logits(logits, labels), vf.entropy_from_logits(logits)

            t = time_fn(logits_fwd, args.logits_warmup, args.logits_repeats)
            record("logits_fwd", "torch_functional.logprobs_from_logits + entropy_from_logits", shape, t, note=path)
        if "logits_bwd" in selected:
            grad_lp = torch.full((rows,), 1.0 / rows)
            grad_h = torch.full((rows,), -0.01 / rows)
            times = Timings()
            for i in range(args.logits_warmup + args.logits_repeats):
                leaf = logits.requires_grad_(True)
                log_probs = vf.logprobs_from_logits(leaf, labels)
                entropy = vf.entropy_from_logits(leaf)
                gc.collect()
                cpu_start = time.process_time()
                start = time.perf_counter()
                torch.autograd.backward([log_probs, entropy], [grad_lp, grad_h])
                elapsed = time.perf_counter() - start
                cpu = time.process_time() - cpu_start
                del log_probs, entropy
                leaf.grad = None
                logits.requires_grad_(False)
                if i >= args.logits_warmup:
                    times.append(elapsed)
                    times.cpu.append(cpu)
            record(
                "logits_bwd",
                "autograd backward of logprobs_from_logits + entropy_from_logits",
                shape,
                times,
                note=path + "; backward only, forward untimed",
            )
        del logits, labels
        gc.collect()

    return {
        "verl_src": str(args.verl_src),
        "verl_commit": args.verl_commit,
        "torch": torch.__version__,
        "numpy": np.__version__,
        "python": platform.python_version(),
        "threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        "machine": platform.machine(),
        "mask_dtype": args.mask_dtype,
        "shuffle_uids": args.shuffle_uids,
        "stubbed_third_party": STUBBED_THIRD_PARTY,
        "stand_ins": ["verl.workers.config.ActorConfig (fields read by compute_policy_loss_vanilla)"],
        "results": results,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--verl-src", required=True, help="root of a verl source tree (contains verl/)")
    p.add_argument("--verl-commit", default=None, help="commit of that tree, recorded in the JSON")
    p.add_argument("--json", metavar="FILE", help="also write the results as JSON ('-' for stdout)")
    p.add_argument("--only", help="comma-separated cases: " + ",".join(ALL_CASES))
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--group", type=int, default=8)
    p.add_argument("--adv-rows", type=int, default=16384)
    p.add_argument("--adv-cols", type=int, default=1024)
    p.add_argument("--loss-rows", type=int, default=256)
    p.add_argument("--loss-cols", type=int, default=4096)
    p.add_argument("--logits-rows", type=int, default=4096)
    p.add_argument("--logits-vocab", type=int, default=151936)
    p.add_argument("--logits-warmup", type=int, default=0)
    p.add_argument("--logits-repeats", type=int, default=2)
    p.add_argument(
        "--logits-backward",
        action="store_true",
        help="also time autograd backward at the logits shape (about 6 logits-sized tensors, ~15 GB at 4096x151936)",
    )
    p.add_argument("--mask-dtype", choices=["float32", "int64"], default="float32")
    p.add_argument("--shuffle-uids", action="store_true")
    args = p.parse_args()

    print(
        f"verl baseline: torch {torch.__version__}, {args.threads} threads, load {load_average()}",
        file=sys.stderr,
        flush=True,
    )
    report = run(args)
    print(f"\n{'case':<34} {'shape':<22} {'median ms':>12} {'min ms':>12} {'cpu ms':>12}  function")
    for r in report["results"]:
        print(
            f"{r['case']:<34} {r['shape']:<22} {r['median_s'] * 1e3:12.2f} {r['min_s'] * 1e3:12.2f}"
            f" {r['median_cpu_s'] * 1e3:12.2f}  {r['function']}"
        )
    print("(median/min: wall clock; cpu: median process CPU time over all threads)")
    if report["stubbed_third_party"]:
        print(f"\nthird-party stand-ins (never called): {', '.join(report['stubbed_third_party'])}")
    if args.json:
        text = json.dumps(report, indent=2)
        if args.json == "-":
            print(text)
        else:
            Path(args.json).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
