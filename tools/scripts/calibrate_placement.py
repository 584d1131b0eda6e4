#!/usr/bin/env python3
"""Calibrates the placement cost model (include/verl/parallel/placement_cost_model.hpp) against the
real trainer on this machine, and measures how well it predicts runs it was not fitted on.

    python3 tools/scripts/calibrate_placement.py --bin build/bin --work /tmp/calib \\
        [--steps 5] [--stat min] [--only large-2-tp2,...] [--out bench/placement_timings.txt]

1. Measures one device's peak figures with verl_device_probe (the library's GEMM, a stream copy,
   and at two ranks the MPI shared-memory link and an 8-byte all-reduce), VERL_NUM_THREADS=1: one
   rank is one core, so one and two ranks are one and two devices of the same kind.
2. Runs verl_train (PPO with GAE, a critic and a KL loss to the reference, 4 prompts x 4 responses,
   16 response tokens with ignore_eos, two mini-batches, micro-batches of 4) for --steps steps under
   each case: two model sizes (tests/data/models/tiny-qwen2, ~63K parameters, and a ~13.3M one made
   by make_calibration_model.py) x {1 rank colocated, 2 ranks colocated (DP=2), 2 ranks split (the
   critic on its own rank), 2 ranks with the actor and reference in Megatron TP=2}.
3. Reads timing_s/* of every step from the JSONL, drops the first (warm-up), takes the min (or the
   median) of the others, and writes the measurements file (format: docs/placement_search.md,
   parser: include/verl/parallel/placement_calibration.hpp) with each run's layout and batch.
   timing_s/gen includes the 3D-HybridEngine's reshard (the worker does it inside
   generate_sequences); the file's gen is gen - reshard, the reshard its own stage.
4. Runs `verl_plan --calibrate FILE`: the library fits the efficiency factors on the runs marked
   fit (both sizes at one rank, the small model at two ranks) and predicts the held-out ones (the
   large model at two ranks), printing measured, predicted and the relative error per stage.

Needs mpirun (OpenMPI; as root set OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data" / "trainer_regression" / "train.jsonl"
SMALL = REPO / "tests" / "data" / "models" / "tiny-qwen2"

PROMPTS, RESPONSES, RESPONSE_LENGTH, MINI_BATCH, MICRO_BATCH = 4, 4, 16, 2, 4
STAGES = ["gen", "reshard", "old_log_prob", "ref", "values", "update_actor", "update_critic"]

# layout -> (ranks, extra keys, meshes for the measurements file: PPxTPxDP)
LAYOUTS = {
    "1-colocated": (1, ["trainer.n_gpus_per_node=1"],
                    "actor=1x1x1 gen=1x1x1 ref=1x1x1 critic=1x1x1"),
    "2-colocated": (2, ["trainer.n_gpus_per_node=2"],
                    "actor=1x1x2 gen=1x1x2 ref=1x1x2 critic=1x1x2"),
    "2-split": (2, ["trainer.n_gpus_per_node=1", "+critic.nnodes=1", "+critic.n_gpus_per_node=1"],
                "actor=1x1x1 gen=1x1x1 ref=1x1x1 critic=1x1x1"),
    "2-tp2": (2, ["trainer.n_gpus_per_node=2", "actor_rollout_ref.actor.strategy=megatron",
                  "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2",
                  "actor_rollout_ref.actor.megatron.sequence_parallel=False",
                  "actor_rollout_ref.actor.megatron.use_distributed_optimizer=False",
                  # Generation dense (tg = 1), as the layout line says: the reshard all-gathers the
                  # TP shards (verl's default rollout TP 2 would keep tg = 2 and move nothing).
                  "actor_rollout_ref.rollout.tensor_model_parallel_size=1"],
              "actor=1x2x1 gen=1x1x2 ref=1x2x1 critic=1x1x2"),
}
# Fitted: both sizes at one rank and the small model at two; held out: the large model at two.
FIT = {"small-1-colocated", "small-2-colocated", "small-2-split", "small-2-tp2", "large-1-colocated"}


def model_record(name, path):
    """A `model` line from a Hugging Face folder's config.json and safetensors header."""
    cfg = json.loads((Path(path) / "config.json").read_text())
    with open(Path(path) / "model.safetensors", "rb") as fh:
        n = int.from_bytes(fh.read(8), "little")
        header = json.loads(fh.read(n))
    params = 0
    for key, value in header.items():
        if key != "__metadata__":
            count = 1
            for s in value["shape"]:
                count *= s
            params += count
    return (f"model {name} params={params} layers={cfg['num_hidden_layers']} heads={cfg['num_attention_heads']} "
            f"kv_heads={cfg['num_key_value_heads']} hidden={cfg['hidden_size']} ffn={cfg['intermediate_size']} "
            f"vocab={cfg['vocab_size']}")


def env():
    e = dict(os.environ, VERL_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
             OMPI_MCA_rmaps_base_oversubscribe="1")
    return e


def probe(bin_dir, repeats=3):
    """The best of `repeats` probes, figure by figure (the highest FLOP/s and bandwidths, the lowest
    latency): on a shared machine each probe gets whatever share of the cores the others leave."""
    best = {}
    for _ in range(repeats):
        out = subprocess.run(["mpirun", "-np", "2", str(bin_dir / "verl_device_probe")], env=env(), check=True,
                             capture_output=True, text=True).stdout
        lines = [l for l in out.splitlines() if l.startswith("device ")]
        if not lines:
            sys.exit(f"calibrate_placement: verl_device_probe printed no device line:\n{out}")
        for item in lines[-1].split()[1:]:
            key, value = item.split("=")
            value = float(value)
            if key not in best or (value < best[key] if key == "latency" else value > best[key]):
                best[key] = value
    return "device " + " ".join(f"{k}={v:.4g}" for k, v in best.items())


def read_rows(metrics):
    rows = [json.loads(l) for l in metrics.read_text().splitlines() if l.strip()]
    rows = [r.get("data", r) for r in rows]  # the file logger's lines: {"data": {...}, "step": N}
    return [r for r in rows if any(k.startswith("timing_s/") for k in r)]


def run_case(bin_dir, work, name, model_path, layout, steps, reuse=False, mpirun_args=()):
    ranks, extra, _ = LAYOUTS[layout]
    out = work / name
    out.mkdir(parents=True, exist_ok=True)
    metrics = out / "metrics.jsonl"
    if reuse and metrics.exists() and len(read_rows(metrics)) >= 2:
        return read_rows(metrics)
    if metrics.exists():
        metrics.unlink()
    keys = [f"data.train_files=[{DATA}]", f"data.val_files=[{DATA}]",
            f"actor_rollout_ref.model.path={model_path}", f"critic.model.path={model_path}",
            "data.max_prompt_length=48", f"data.max_response_length={RESPONSE_LENGTH}",
            f"data.train_batch_size={PROMPTS}", f"actor_rollout_ref.rollout.n={RESPONSES}",
            "actor_rollout_ref.rollout.ignore_eos=True",
            f"actor_rollout_ref.actor.ppo_mini_batch_size={MINI_BATCH}", f"critic.ppo_mini_batch_size={MINI_BATCH}",
            f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={MICRO_BATCH}",
            f"critic.ppo_micro_batch_size_per_gpu={MICRO_BATCH}",
            f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={MICRO_BATCH}",
            f"actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu={MICRO_BATCH}",
            f"critic.forward_micro_batch_size_per_gpu={MICRO_BATCH}",
            "algorithm.adv_estimator=gae", "actor_rollout_ref.actor.use_kl_loss=True",
            "actor_rollout_ref.actor.optim.lr=0.001", "critic.optim.lr=0.001", "data.seed=7",
            f"trainer.total_training_steps={steps}", "trainer.test_freq=-1", "trainer.val_before_train=False",
            "trainer.logger=[file]", "trainer.save_freq=-1", "trainer.resume_mode=disable",
            f"trainer.default_local_dir={out / 'checkpoints'}"] + extra
    cmd = [str(bin_dir / "verl_train")] + keys
    if ranks > 1:
        cmd = ["mpirun", "-np", str(ranks), "--oversubscribe", *mpirun_args] + cmd
    e = env()
    e["VERL_FILE_LOGGER_PATH"] = str(metrics)
    with open(out / "stdout.txt", "w") as log:
        rc = subprocess.run(cmd, env=e, stdout=log, stderr=subprocess.STDOUT).returncode
    if rc != 0:
        sys.exit(f"calibrate_placement: {name} failed (exit {rc}); see {out / 'stdout.txt'}")
    return read_rows(metrics)


def summarize(rows, stat, layout):
    """Per stage, min or median over the steps after the first; gen without the reshard. In the
    split layout the controller waits for the critic's values after the actor pool's old_log_prob
    and ref, which the critic's pool computed at the same time: timing_s/values is then only the
    wait for an already finished future, not the stage, and is left out."""
    if len(rows) < 2:
        sys.exit("calibrate_placement: expected at least two steps (the first is dropped)")
    rows = rows[1:]
    pick = min if stat == "min" else statistics.median
    per_step = []
    for r in rows:
        t = {s: r[f"timing_s/{s}"] for s in STAGES if f"timing_s/{s}" in r}
        if "reshard" in t and "gen" in t:
            t["gen"] -= t["reshard"]
        per_step.append(t)
    out = {}
    for s in STAGES:
        if layout == "2-split" and s == "values":
            continue
        values = [t[s] for t in per_step if s in t]
        if values:
            out[s] = (pick(values), min(values), max(values))
    prompt = statistics.mean(r["prompt_length/mean"] for r in rows)
    response = statistics.mean(r["response_length/mean"] for r in rows)
    return out, prompt, response


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", type=Path, default=REPO / "build" / "bin")
    ap.add_argument("--work", type=Path, default=Path("/tmp/verl_calibration"))
    ap.add_argument("--large", type=Path, help="the larger model's folder (default: made in --work)")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--stat", choices=["min", "median"], default="min")
    ap.add_argument("--only", help="comma-separated case names (e.g. small-1-colocated)")
    ap.add_argument("--out", type=Path, help="measurements file (default: WORK/placement_timings.txt)")
    ap.add_argument("--reuse", action="store_true", help="read the runs already in --work instead of rerunning them")
    ap.add_argument("--device", help="a 'device ...' line to use instead of running verl_device_probe")
    ap.add_argument("--mpirun-args", help="extra mpirun options for the two-rank runs, e.g. '--bind-to none'")
    ap.add_argument("--markdown", type=Path, help="also write the result as a Markdown table here")
    args = ap.parse_args()
    bin_dir, work = args.bin.resolve(), args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    large = args.large
    if large is None:
        large = work / "model-13m"
        if not (large / "model.safetensors").exists():
            subprocess.run([sys.executable, str(REPO / "tools/scripts/make_calibration_model.py"), str(large)],
                           check=True)
    models = {"small": SMALL, "large": large.resolve()}
    device = args.device or probe(bin_dir)
    print(device, flush=True)
    lines = ["verl-placement-timings 1",
             f"# calibrate_placement.py --steps {args.steps} --stat {args.stat}: {args.stat} over steps 2..{args.steps}"
             " of each run; one rank = one core (VERL_NUM_THREADS=1); the machine was shared",
             device, "memory param=4 grad=4 optimizer=8 activation=4 kv=4 distributed_optimizer=0"]
    lines += [model_record(n, p) for n, p in models.items()]
    only = set(args.only.split(",")) if args.only else None
    for size in models:
        for layout in LAYOUTS:
            name = f"{size}-{layout}"
            if only and name not in only:
                continue
            rows = run_case(bin_dir, work, name, models[size], layout, args.steps, args.reuse,
                            args.mpirun_args.split() if args.mpirun_args else ())
            stages, prompt, response = summarize(rows, args.stat, layout)
            ranks, _, meshes = LAYOUTS[layout]
            lines.append(f"run {name} model={size} devices={ranks} set={'fit' if name in FIT else 'predict'} "
                         f"prompts={PROMPTS} responses={RESPONSES} prompt_length={round(prompt)} "
                         f"response_length={round(response)} epochs=1 mini_batches={PROMPTS // MINI_BATCH} "
                         f"micro_batch={MICRO_BATCH} {meshes}")
            for s, (value, lo, hi) in stages.items():
                lines.append(f"stage {name} {s} {value:.6g}  # steps 2..: {lo:.4g}..{hi:.4g}")
            print(f"{name}: " + ", ".join(f"{s} {v[0]:.4g}" for s, v in stages.items()), flush=True)
    out = args.out or work / "placement_timings.txt"
    out.write_text("\n".join(lines) + "\n")
    print(f"wrote {out}", flush=True)
    result = subprocess.run([str(bin_dir / "verl_plan"), "--calibrate", str(out)], capture_output=True, text=True)
    print(result.stdout + result.stderr)
    if result.returncode == 0 and args.markdown:
        js = subprocess.run([str(bin_dir / "verl_plan"), "--calibrate", str(out), "--json"], capture_output=True,
                            text=True, check=True).stdout
        args.markdown.write_text(markdown(json.loads(js)))
        print(f"wrote {args.markdown}")
    sys.exit(result.returncode)


def markdown(result):
    """verl_plan --calibrate --json as a Markdown table: one row per run, measured / predicted
    seconds and the relative error per stage."""
    f = result["fitted"]
    g = {k: ("inf" if f[k] is None else f"{f[k]:.3g}") for k in ("compute", "memory", "link", "latency")}
    lines = [f"Fitted on {f['measurements']} stages: compute {g['compute']}, memory {g['memory']}, "
             f"link {g['link']}, latency {g['latency']} s per collective (inf: the data give the term no time).", "",
             "| run | set | " + " | ".join(STAGES) + " |", "|---|---|" + "---:|" * len(STAGES)]
    runs = {}
    for st in result["stages"]:
        runs.setdefault((st["run"], st["set"]), {})[st["stage"]] = st
    for (run, set_), stages in runs.items():
        cells = []
        for s in STAGES:
            st = stages.get(s)
            if st is None:
                cells.append("")
            elif not st["modelled"]:
                cells.append(f"{st['measured_seconds']:.3g} / - ")
            else:
                cells.append(f"{st['measured_seconds']:.3g} / {st['predicted_seconds']:.3g} "
                             f"({100 * st['relative_error']:+.0f}%)")
        lines.append(f"| {run} | {set_} | " + " | ".join(cells) + " |")
    for set_ in ("fit", "predict"):
        errs = [abs(st["relative_error"]) for st in result["stages"] if st["set"] == set_ and st["modelled"]]
        if errs:
            lines.append("")
            lines.append(f"Mean |error| over the {len(errs)} {'fitted' if set_ == 'fit' else 'held-out'} stages: "
                         f"{100 * sum(errs) / len(errs):.1f}%.")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
