#!/usr/bin/env bash
# An example controller program (examples/remax.cpp, examples/ppo.cpp) against verl_train with the
# same keys: three steps on the tiny policy each, then compare_trainer_run.py --subset checks that
# every metric the example logs is one verl_train logs, with the same value (the same generations
# and scores exactly, losses within 1e-5 relative).
#   run_example_vs_verl_train.sh EXAMPLE VERL_TRAIN PYTHON OUT_DIR NP [KEY=VALUE ...]
set -euo pipefail
example=$1 verl_train=$2 python=$3 out=$4 np=$5
shift 5
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
rm -rf "$out" && mkdir -p "$out"
data="$root/tests/data/trainer_regression/train.jsonl"
# Two mini-batches per step (an off-policy update), so both sides send the old log-probs.
keys=(data.train_files="[$data]" data.max_prompt_length=48 data.max_response_length=6 data.train_batch_size=4
      data.seed=7 actor_rollout_ref.model.path="$root/tests/data/models/tiny-qwen2" actor_rollout_ref.rollout.n=2
      actor_rollout_ref.actor.ppo_mini_batch_size=2 actor_rollout_ref.actor.optim.lr=0.001
      trainer.total_training_steps=3 trainer.logger=[file] trainer.resume_mode=disable trainer.save_freq=-1 "$@")
run() {  # run NAME PROGRAM: the program's metrics in $out/NAME/metrics.jsonl
  local name=$1 program=$2
  local launch=("$program")
  if [ "$np" -gt 1 ]; then launch=(mpirun -np "$np" --oversubscribe "$program"); fi
  mkdir -p "$out/$name"
  VERL_FILE_LOGGER_PATH="$out/$name/metrics.jsonl" "${launch[@]}" "${keys[@]}" \
    trainer.default_local_dir="$out/$name/checkpoints" > "$out/$name/stdout.txt" 2>&1 || { cat "$out/$name/stdout.txt" >&2; exit 1; }
}
run verl_train "$verl_train"
run example "$example"
tail -n 1 "$out/example/stdout.txt"
"$python" "$root/tools/scripts/compare_trainer_run.py" --subset --min-metrics 12 "$out/verl_train" "$out/example"
