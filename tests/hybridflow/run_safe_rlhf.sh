#!/usr/bin/env bash
# The Safe-RLHF example's test (examples/safe_rlhf.cpp): two steps on the tiny policy with a reward
# and a cost model made for it (make_score_models), once with a cost limit below any episode cost
# and once above, then check_safe_rlhf_run.py on each run's metrics.
#   run_safe_rlhf.sh EXAMPLE MAKE_SCORE_MODELS PYTHON OUT_DIR NP [KEY=VALUE ...]
# The keys after NP are passed on to the example.
set -euo pipefail
example=$1 make_models=$2 python=$3 out=$4 np=$5
shift 5
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
rm -rf "$out" && mkdir -p "$out"
"$make_models" "$root/tests/data/models/tiny-qwen2" "$out/models"
data="$root/tests/data/trainer_regression/train.jsonl"
launch=("$example")
if [ "$np" -gt 1 ]; then launch=(mpirun -np "$np" --oversubscribe "$example"); fi
for limit in -2 2; do
  run="$out/limit$limit"
  mkdir -p "$run"
  VERL_FILE_LOGGER_PATH="$run/metrics.jsonl" "${launch[@]}" \
    data.train_files="[$data]" data.val_files=[] data.max_prompt_length=48 data.max_response_length=6 \
    data.train_batch_size=4 data.seed=7 actor_rollout_ref.model.path="$root/tests/data/models/tiny-qwen2" \
    actor_rollout_ref.rollout.n=2 actor_rollout_ref.actor.ppo_mini_batch_size=2 actor_rollout_ref.actor.optim.lr=0.001 \
    critic.model.path="$root/tests/data/models/tiny-qwen2" critic.ppo_mini_batch_size=2 critic.optim.lr=0.001 \
    reward.reward_model.model_path="$out/models/reward_model" reward.cost_model.model_path="$out/models/cost_model" \
    algorithm.kl_ctrl.kl_coef=0.05 +algorithm.safe_rlhf.cost_limit="$limit" +algorithm.safe_rlhf.lambda_lr=0.1 \
    trainer.n_gpus_per_node="$np" trainer.total_training_steps=2 trainer.logger=[file] trainer.resume_mode=disable \
    trainer.default_local_dir="$run/checkpoints" "$@" > "$run/stdout.txt" 2>&1 || { cat "$run/stdout.txt" >&2; exit 1; }
  cat "$run/stdout.txt"
  "$python" "$here/check_safe_rlhf_run.py" "$run/metrics.jsonl" "$limit" 1.0
done
