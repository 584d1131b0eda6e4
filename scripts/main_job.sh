#!/usr/bin/env bash
# The toy job (scripts/verl.sh run-toy; the default main job until issue 27 made it SmolLM2's,
# scripts/main_job_smollm2.sh): a tiny Qwen2 learns the built-in arithmetic task (sums of
# one-digit numbers, graded by verl's gsm8k rule scorer) on the CPU: generate the task and the
# initial model (verl_make_task), an SFT warm start (verl_sft), then GRPO (verl_train with
# examples/config/main_job_grpo.yaml), validating greedily before and during GRPO. Writes the
# JSONL metrics and the reward curve (SVG) and prints the accuracies after SFT and after GRPO.
#
#   scripts/main_job.sh [--smoke] [--out DIR] [--bin DIR] [extra verl_train key=value ...]
#
# --smoke runs the same pipeline with tiny budgets (seconds; for the test suite).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bin=${VERL_BIN:-$here/build/bin}
out=$here/out/main_job
smoke=0
extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --smoke) smoke=1 ;;
    --out) out=$2; shift ;;
    --bin) bin=$2; shift ;;
    *) extra+=("$1") ;;
  esac
  shift
done
for tool in verl_make_task verl_sft verl_train verl_task_report; do
  [ -x "$bin/$tool" ] || { echo "main_job: $bin/$tool not found (build first, or pass --bin DIR)" >&2; exit 1; }
done

# Budgets, measured on a 2-core machine (README's quick start gives the figures).
seed=1
# The SFT demonstrations come from a demonstrator that forgets the carry in 60% of the problems
# that have one (verl_make_task --sft-carry-slip): SFT learns the sums' digits and the demonstrator's
# habit; GRPO, rewarded by the gsm8k scorer against the true sums, unlearns the habit.
digits=1 operands=3 train=800 val=200 slip=0.6
sft_steps=600
grpo=()
if [ "$smoke" = 1 ]; then
  train=64 val=16 sft_steps=3
  grpo=(trainer.total_training_steps=2 trainer.test_freq=1 data.train_batch_size=8 actor_rollout_ref.rollout.n=4
        actor_rollout_ref.actor.ppo_mini_batch_size=8)
fi

start=$(date +%s)
rm -rf "$out"
mkdir -p "$out"
echo "== main job: task -> SFT -> GRPO, output in $out"

echo "== 1/3 task: sums of ${operands} numbers of ${digits} digit(s), $train train / $val val problems, tiny Qwen2"
"$bin/verl_make_task" --out "$out/task" --seed "$seed" --digits "$digits" --operands "$operands" \
  --train "$train" --val "$val" --sft-carry-slip "$slip"

echo "== 2/3 SFT warm start ($sft_steps steps, examples/config/main_job_sft.yaml)"
VERL_FILE_LOGGER_PATH="$out/sft_metrics.jsonl" "$bin/verl_sft" --config "$here/examples/config/main_job_sft.yaml" \
  data.train_files="$out/task/sft_train.jsonl" data.val_files="$out/task/sft_val.jsonl" \
  model.partial_pretrain="$out/task/model" trainer.default_local_dir="$out/sft" \
  trainer.total_training_steps="$sft_steps"
sft_model="$out/sft/global_step_$(cat "$out/sft/latest_checkpointed_iteration.txt")/huggingface"

echo "== 3/3 GRPO from $sft_model"
VERL_FILE_LOGGER_PATH="$out/grpo_metrics.jsonl" "$bin/verl_train" --config "$here/examples/config/main_job_grpo.yaml" \
  data.train_files="$out/task/train.jsonl" data.val_files="$out/task/val.jsonl" \
  actor_rollout_ref.model.path="$sft_model" trainer.default_local_dir="$out/grpo" \
  "${grpo[@]}" "${extra[@]}"

echo "== summary"
"$bin/verl_task_report" --metrics "$out/grpo_metrics.jsonl" --svg "$out/reward_curve.svg"
echo "metrics: $out/sft_metrics.jsonl, $out/grpo_metrics.jsonl"
echo "main job finished in $(( $(date +%s) - start )) s"
