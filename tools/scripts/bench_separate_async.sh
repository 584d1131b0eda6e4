#!/usr/bin/env bash
# How long the trainer waits for samples per step: trainer.v1.trainer_mode=separate_async against
# the synchronous step on the same two-rank placement (rank 0 trains, rank 1 is the rollout pool,
# actor_rollout_ref.hybrid_engine=False), same model, prompts, seeds and keys otherwise.
#
#   tools/scripts/bench_separate_async.sh VERL_TRAIN MODEL_DIR [STEPS] [WARMUP_BATCHES] [RESPONSE_LENGTH]
#
# MODEL_DIR: a Qwen2 folder sharing tiny-qwen2's tokenizer (tools/scripts/make_calibration_model.py
# writes a 13.3M-parameter one; tests/data/models/tiny-qwen2 works but is all overhead). Prints,
# per mode, the mean over the steps after the first of timing_s/gen (the trainer's wait for
# generations), timing_s/step and the rest of the step, and the ratio of the waits. RESPONSE_LENGTH
# (default 16) plus the longest prompt (44 tokens) must fit the model's context (64 for the calibration model).
set -euo pipefail
verl_train=$1 model=$2 steps=${3:-6} warmup=${4:-1} response=${5:-16}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=$(mktemp -d /tmp/bench_separate_async.XXXXXX)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 VERL_NUM_THREADS=1
common=(data.train_files="[$here/tests/data/trainer_regression/train.jsonl]" data.val_files="[$here/tests/data/trainer_regression/train.jsonl]"
  actor_rollout_ref.model.path="$model" data.max_prompt_length=48 data.max_response_length="$response"
  data.train_batch_size=8 actor_rollout_ref.rollout.n=4 actor_rollout_ref.actor.ppo_mini_batch_size=2
  trainer.v1.separate_async.parameter_sync_step=4 algorithm.adv_estimator=grpo actor_rollout_ref.actor.optim.lr=1e-4
  data.seed=7 trainer.total_training_steps="$steps" trainer.test_freq=-1 trainer.val_before_train=False
  trainer.logger=[file] trainer.save_freq=-1 trainer.resume_mode=disable trainer.n_gpus_per_node=1
  actor_rollout_ref.hybrid_engine=False actor_rollout_ref.rollout.nnodes=1 actor_rollout_ref.rollout.n_gpus_per_node=1)
for mode in sync separate_async; do
  extra=(trainer.v1.trainer_mode="$mode" trainer.default_local_dir="$out/$mode/checkpoints")
  [ "$mode" = separate_async ] && extra+=(trainer.v1.separate_async.num_warmup_batches="$warmup")
  VERL_FILE_LOGGER_PATH="$out/$mode.jsonl" mpirun -np 2 --bind-to none "$verl_train" "${common[@]}" "${extra[@]}" \
    > "$out/$mode.log" 2>&1 || { cat "$out/$mode.log" >&2; exit 1; }
done
python3 - "$out" <<'EOF'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
def steps(mode):
    rows = {}
    for line in (out / f"{mode}.jsonl").read_text().splitlines():
        if line.strip():
            r = json.loads(line)
            rows.setdefault(r["step"], {}).update(r["data"])
    return [rows[s] for s in sorted(rows) if s > 1]  # the first step builds caches and (async) fills the queue
result = {}
print("| mode | timing_s/gen (trainer waits) | timing_s/step | step - gen | steps |")
print("|---|---|---|---|---|")
for mode in ("sync", "separate_async"):
    rows = steps(mode)
    gen = sum(r["timing_s/gen"] for r in rows) / len(rows)
    step = sum(r["timing_s/step"] for r in rows) / len(rows)
    result[mode] = (gen, step)
    print(f"| {mode} | {gen:.3f} | {step:.3f} | {step - gen:.3f} | {len(rows)} |")
print(f"wait ratio separate_async / sync: {result['separate_async'][0] / result['sync'][0]:.3f}; "
      f"step ratio: {result['separate_async'][1] / result['sync'][1]:.3f}")
EOF
rm -rf "$out"
