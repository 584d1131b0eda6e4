#!/usr/bin/env python3
"""Step time of two verl_train builds side by side: the HybridFlow controller program against the
in-process trainer it replaced (a build from before the rebuild), at one and two ranks, on the same
data, model and settings. Each run logs verl's timing_s/* through the file logger; the table gives
the median over the steps after the first (which includes start-up) and the ratio new / old.

  tools/scripts/bench_trainer_step.py --new build/bin/verl_train --old OLD_BUILD/bin/verl_train \
      [--ranks 1 2] [--steps 6] [--case grpo|gae] [--repeats 3]

The old build ran data parallel over every rank it was started with; the new one needs the pool's
size (trainer.n_gpus_per_node=N), which the script passes to it only.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "trainer_regression" / "train.jsonl"
MODEL = ROOT / "tests" / "data" / "models" / "tiny-qwen2"


def overrides(case, steps, out):
    common = [
        f"data.train_files=[{DATA}]", f"data.val_files=[{DATA}]", f"actor_rollout_ref.model.path={MODEL}",
        "data.max_prompt_length=48", "data.max_response_length=16", "data.train_batch_size=8",
        "actor_rollout_ref.rollout.n=4", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        "actor_rollout_ref.actor.optim.lr=0.001", "data.seed=7", f"trainer.total_training_steps={steps}",
        "trainer.test_freq=-1", "trainer.val_before_train=False", "trainer.logger=[file]", "trainer.save_freq=-1",
        "trainer.resume_mode=disable", f"trainer.default_local_dir={out}/checkpoints",
    ]
    if case == "grpo":
        return common + ["algorithm.adv_estimator=grpo", "actor_rollout_ref.actor.use_kl_loss=True"]
    return common + ["algorithm.adv_estimator=gae", f"critic.model.path={MODEL}", "critic.optim.lr=0.001"]


def run(binary, ranks, case, steps, pool_keys):
    with tempfile.TemporaryDirectory() as out:
        args = overrides(case, steps, out)
        if pool_keys:
            args.append(f"trainer.n_gpus_per_node={ranks}")
        command = [binary] + args
        if ranks > 1:
            command = ["mpirun", "-np", str(ranks), "--oversubscribe"] + command
        env = dict(os.environ, VERL_FILE_LOGGER_PATH=f"{out}/metrics.jsonl", OMPI_ALLOW_RUN_AS_ROOT="1",
                   OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        done = subprocess.run(command, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"{' '.join(command)} failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
        lines = [json.loads(line) for line in Path(f"{out}/metrics.jsonl").read_text().splitlines() if line.strip()]
    steps_data = [line["data"] if "data" in line else line for line in lines]
    times = [d["timing_s/step"] for d in steps_data if "timing_s/step" in d][1:]
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--new", required=True, help="verl_train of the HybridFlow controller program")
    parser.add_argument("--old", required=True, help="verl_train of the in-process trainer")
    parser.add_argument("--ranks", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--case", choices=["grpo", "gae"], nargs="+", default=["grpo", "gae"])
    parser.add_argument("--repeats", type=int, default=3, help="runs of each build, alternating; the median is kept")
    args = parser.parse_args()
    print("| case | ranks | old step (ms) | new step (ms) | new / old |")
    print("|---|---:|---:|---:|---:|")
    for case in args.case:
        for ranks in args.ranks:
            old, new = [], []
            for _ in range(args.repeats):  # alternate, so that a change in machine load hits both
                old.append(run(args.old, ranks, case, args.steps, pool_keys=False))
                new.append(run(args.new, ranks, case, args.steps, pool_keys=True))
            o, n = statistics.median(old), statistics.median(new)
            print(f"| {case} | {ranks} | {o * 1e3:.1f} | {n * 1e3:.1f} | {n / o:.3f} |", flush=True)


if __name__ == "__main__":
    main()
