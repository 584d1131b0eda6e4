#!/usr/bin/env bash
# verl_train with a model-based reward (reward.reward_model.enable=True): the reward model scores
# every response on its worker group, and its score is the reward (verl's reward manager returns a
# reward model's rm_scores as the reward). Three runs of GRPO on the tiny policy with a reward model
# made for its tokenizer (make_score_models): one process, and two ranks with the reward model on a
# pool of its own. The split run must reproduce the one-process run (the actor has one rank in
# both), and the scores must come from the model (the rule reward gives the tiny random policy 0
# everywhere, a random reward model scores every response differently).
#   run_reward_model_train.sh VERL_TRAIN MAKE_SCORE_MODELS PYTHON OUT_DIR
set -euo pipefail
verl_train=$1 make_models=$2 python=$3 out=$4
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
rm -rf "$out" && mkdir -p "$out"
"$make_models" "$root/tests/data/models/tiny-qwen2" "$out/models"
data="$root/tests/data/trainer_regression/train.jsonl"
run() {
  local name=$1 np=$2
  shift 2
  local launch=("$verl_train")
  if [ "$np" -gt 1 ]; then launch=(mpirun -np "$np" --oversubscribe "$verl_train"); fi
  mkdir -p "$out/$name"
  VERL_FILE_LOGGER_PATH="$out/$name/metrics.jsonl" "${launch[@]}" \
    algorithm.adv_estimator=grpo data.train_files="[$data]" data.val_files="[$data]" data.max_prompt_length=48 \
    data.max_response_length=6 data.train_batch_size=4 data.seed=7 actor_rollout_ref.rollout.n=4 \
    actor_rollout_ref.model.path="$root/tests/data/models/tiny-qwen2" actor_rollout_ref.actor.ppo_mini_batch_size=2 \
    actor_rollout_ref.actor.optim.lr=0.001 reward.reward_model.enable=True \
    reward.reward_model.model_path="$out/models/reward_model" trainer.total_training_steps=2 trainer.test_freq=2 \
    trainer.val_before_train=False trainer.logger=[file] trainer.resume_mode=disable trainer.balance_batch=False \
    trainer.rollout_data_dir="$out/$name/generations" trainer.default_local_dir="$out/$name/checkpoints" "$@" \
    > "$out/$name/stdout.txt" 2>&1 || { cat "$out/$name/stdout.txt" >&2; exit 1; }
}
run one_rank 1 trainer.n_gpus_per_node=1
run split 2 trainer.n_gpus_per_node=1 reward.reward_model.enable_resource_pool=True reward.reward_model.nnodes=1 \
  reward.reward_model.n_gpus_per_node=1
grep -q "reward model on \[1\]" "$out/split/stdout.txt" || { echo "the reward model was not placed on rank 1" >&2; cat "$out/split/stdout.txt" >&2; exit 1; }
"$python" "$root/tools/scripts/compare_trainer_run.py" "$out/one_rank" "$out/split"
"$python" - "$out/one_rank/metrics.jsonl" <<'PY'
import json, sys
steps = [json.loads(line)["data"] for line in open(sys.argv[1]) if line.strip()]
scores = [s["critic/score/max"] - s["critic/score/min"] for s in steps]
assert all(spread > 0 for spread in scores), f"scores do not vary between responses: {scores}"
assert "val-core/openai/gsm8k/reward/mean@1" in steps[-1] or any(k.startswith("val-core/") for k in steps[-1]), steps[-1].keys()
print(f"reward-model scores vary across responses at every step (spread {scores})")
PY
