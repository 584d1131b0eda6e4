#!/usr/bin/env bash
# verl_train with trainer.v1.trainer_mode=separate_async on two ranks (training on rank 0, the
# rollout pool on rank 1, two batches sent ahead): a run of 4 steps, and a run stopped after step 2
# then resumed from its checkpoint (trainer.resume_mode=auto) to step 4. The resumed steps must log
# the uninterrupted run's metrics exactly (timings aside): the checkpoint holds the generations in
# flight. Prints "resumes exactly" on success.
#   separate_async_resume.sh VERL_TRAIN OUT_DIR
set -euo pipefail
verl_train=$1 out=$2
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../../.." && pwd)
rm -rf "$out" && mkdir -p "$out"
common=(data.train_files="[$here/train.jsonl]" data.val_files="[$here/train.jsonl]"
  actor_rollout_ref.model.path="$root/tests/data/models/tiny-qwen2" data.max_prompt_length=48 data.max_response_length=6
  data.train_batch_size=4 actor_rollout_ref.rollout.n=4 actor_rollout_ref.actor.ppo_mini_batch_size=2
  trainer.v1.trainer_mode=separate_async trainer.v1.separate_async.parameter_sync_step=2
  trainer.v1.separate_async.num_warmup_batches=2 algorithm.adv_estimator=grpo actor_rollout_ref.actor.entropy_coeff=0.01
  actor_rollout_ref.actor.optim.lr=0.001 data.seed=7 trainer.test_freq=2 trainer.val_before_train=False
  trainer.logger=[file] trainer.n_gpus_per_node=1 actor_rollout_ref.hybrid_engine=False actor_rollout_ref.rollout.nnodes=1
  actor_rollout_ref.rollout.n_gpus_per_node=1 trainer.save_freq=2)
run() {
  local name=$1 steps=$2 dir=$3
  VERL_FILE_LOGGER_PATH="$out/$name.jsonl" mpirun -np 2 --oversubscribe "$verl_train" "${common[@]}" \
    trainer.total_training_steps="$steps" trainer.default_local_dir="$dir" > "$out/$name.log" 2>&1 || {
    cat "$out/$name.log" >&2
    exit 1
  }
}
run full 4 "$out/full"
run part 2 "$out/part"
[ -f "$out/part/global_step_2/separate_async_in_flight.bin" ] || { echo "no in-flight file in the checkpoint" >&2; exit 1; }
run resumed 4 "$out/part"
python3 - "$out" <<'PY'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
def load(name):
    steps = {}
    for line in (out / f"{name}.jsonl").read_text().splitlines():
        if line.strip():
            record = json.loads(line)
            steps.setdefault(record["step"], {}).update(record["data"])
    return steps
full, resumed = load("full"), load("resumed")
if sorted(resumed) != [3, 4]:
    sys.exit(f"the resumed run logged steps {sorted(resumed)}, expected [3, 4]")
skip = ("timing_s/", "timing_per_token_ms/", "perf/", "memory/")
compared = 0
for step, metrics in resumed.items():
    for key, value in metrics.items():
        if key.startswith(skip):
            continue
        compared += 1
        if full[step].get(key) != value:
            sys.exit(f"step {step}: {key}: resumed {value}, uninterrupted {full[step].get(key)}")
print(f"resumes exactly ({compared} metrics over steps 3-4)")
PY
