#!/usr/bin/env bash
# One recorded verl_train run of the trainer's regression test (tests/data/trainer_regression):
#   run_case.sh CASE VERL_TRAIN OUT_DIR [NP] [PLACEMENT]
# CASE is grpo (GRPO with a KL loss to the reference, two mini-batches), grpo_entropy (the same with an
# entropy bonus) or gae (PPO with a critic).
# Writes OUT_DIR/metrics.jsonl (the file logger) and OUT_DIR/generations/ (trainer.rollout_data_dir).
# With NP > 1 the run goes through mpirun (data parallel); the results must not change.
# PLACEMENT is colocated (every role on the NP ranks, the default) or split (gae only: the actor on
# the first NP/2 ranks, the critic on a pool of its own, the other NP/2), which must give what a
# colocated run over NP/2 ranks gives. tp2: the Megatron worker with tensor_model_parallel_size=2
# (generation dense, tg = 1); tpTgenG: training TP T, generation TP G (the 3D-HybridEngine's
# TP-sharded generation), e.g. tp2gen2, tp4gen2. tp2zero: tp2 with Megatron's distributed optimizer
# (use_distributed_optimizer=True, verl's default: ZeRO-1 over the dp = NP / 2 ranks); must give
# what tp2 gives. The Megatron placements also check that every step logs the reshard's metrics
# (perf/reshard_bytes_received, perf/peak_param_bytes, timing_s/reshard).
# critic_tpT, critic_tpTppP: the critic's micro-batches of one row (see below); critic_tp1 the
# data-parallel critic, otherwise the Megatron critic (critic.strategy=megatron,
# tensor_model_parallel_size=T, pipeline_model_parallel_size=P (default 1) with verl's defaults:
# sequence parallelism, and the distributed optimizer over dp = NP / (T P)), beside the
# data-parallel actor over NP ranks (gae only); they must give what critic_tp1 gives.
# separate: the rollout on a pool of its own (actor_rollout_ref.hybrid_engine=False), the first NP/2
# ranks training and the other NP/2 generating with the actor's weights; must give what a colocated
# run over NP/2 ranks gives.
set -euo pipefail
# The recorded runs were made on an AVX2 machine; the kernels' cross-lane sums round differently at
# AVX-512's width, so replay them at AVX2's level wherever the CPU has it (VERL_SIMD, vector_math.hpp).
if [ -z "${VERL_SIMD:-}" ] && grep -qw avx2 /proc/cpuinfo 2>/dev/null && grep -qw fma /proc/cpuinfo; then
  export VERL_SIMD=avx2
fi
case_name=$1 verl_train=$2 out=$3 np=${4:-1} placement=${5:-colocated}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../../.." && pwd)
rm -rf "$out" && mkdir -p "$out"
common=(data.train_files="[$here/train.jsonl]" data.val_files="[$here/train.jsonl]"
  actor_rollout_ref.model.path="$root/tests/data/models/tiny-qwen2" data.max_prompt_length=48 data.max_response_length=6
  data.train_batch_size=4 actor_rollout_ref.rollout.n=4 actor_rollout_ref.actor.ppo_mini_batch_size=2
  actor_rollout_ref.actor.optim.lr=0.001 data.seed=7 trainer.total_training_steps=3 trainer.test_freq=-1
  trainer.val_before_train=False trainer.logger=[file] trainer.save_freq=-1 trainer.resume_mode=disable trainer.balance_batch=True
  trainer.default_local_dir="$out/checkpoints" trainer.rollout_data_dir="$out/generations")
case "$case_name" in
  # KL in the reward makes the (otherwise all-zero: the tiny random model never answers right) scores
  # differ between responses once the actor has moved from the reference.
  grpo) extra=(algorithm.adv_estimator=grpo actor_rollout_ref.actor.use_kl_loss=True algorithm.use_kl_in_reward=True
              algorithm.kl_ctrl.kl_coef=0.5) ;;
  # grpo with an entropy bonus: the first step's gradient is real (grpo's is zero up to rounding,
  # which AdamW's first step turns into +-lr moves: any other summation order, TP's included,
  # then takes another path). For comparing layouts against a dense run of the same binary.
  grpo_entropy) extra=(algorithm.adv_estimator=grpo actor_rollout_ref.actor.use_kl_loss=True algorithm.use_kl_in_reward=True
              algorithm.kl_ctrl.kl_coef=0.5 actor_rollout_ref.actor.entropy_coeff=0.01) ;;
  gae) extra=(algorithm.adv_estimator=gae critic.model.path="$root/tests/data/models/tiny-qwen2" critic.optim.lr=0.001) ;;
  *) echo "run_case.sh: unknown case '$case_name' (grpo, grpo_entropy or gae)" >&2; exit 2 ;;
esac
case "$placement" in
  colocated) extra+=(trainer.n_gpus_per_node="$np") ;;
  split)
    if [ "$case_name" != gae ] || [ $((np % 2)) -ne 0 ]; then
      echo "run_case.sh: split placement needs the gae case and an even NP, got $case_name at $np" >&2; exit 2
    fi
    extra+=(trainer.n_gpus_per_node=$((np / 2)) +critic.nnodes=1 +critic.n_gpus_per_node=$((np / 2))) ;;
  separate)
    if [ $((np % 2)) -ne 0 ]; then echo "run_case.sh: separate placement needs an even NP, got $np" >&2; exit 2; fi
    extra+=(trainer.n_gpus_per_node=$((np / 2)) actor_rollout_ref.hybrid_engine=False actor_rollout_ref.rollout.nnodes=1
            actor_rollout_ref.rollout.n_gpus_per_node=$((np / 2))) ;;
  tp2 | tp2zero | tp[0-9]gen[0-9])
    # The Megatron actor worker: tensor parallel over groups of T ranks (dp = NP / T), the reshard
    # to the generation layout every step (dense at tg = 1, TP-sharded at tg = G); must give what
    # the data-parallel run gives (losses within the comparison's --rtol: the TP sums run in
    # another order).
    tp=${placement#tp}; tp=${tp%%gen*}; tp=${tp%zero}; tg=1
    if [[ "$placement" == *gen* ]]; then tg=${placement##*gen}; fi
    distributed_optimizer=False
    if [ "$placement" = tp2zero ]; then distributed_optimizer=True; fi
    if [ $((np % tp)) -ne 0 ]; then echo "run_case.sh: $placement needs NP divisible by $tp, got $np" >&2; exit 2; fi
    extra+=(trainer.n_gpus_per_node="$np" actor_rollout_ref.actor.strategy=megatron
            actor_rollout_ref.actor.megatron.tensor_model_parallel_size="$tp"
            actor_rollout_ref.rollout.tensor_model_parallel_size="$tg"
            actor_rollout_ref.actor.megatron.sequence_parallel=False
            actor_rollout_ref.actor.megatron.use_distributed_optimizer="$distributed_optimizer") ;;
  critic_tp[0-9] | critic_tp[0-9]pp[0-9])
    # One row per critic micro-batch on both sides: the critic's per-micro-batch metrics
    # (critic/vpred_mean, vpredclipfrac) are means of micro-batch means, as verl's, so they depend
    # on how a DP group's rows fall into micro-batches; with one row each, they are the mean over
    # rows at any dp (the dense critic has dp = NP, the Megatron one NP / T).
    tp=${placement#critic_tp}; tp=${tp%%pp*}; pp=1
    if [[ "$placement" == *pp* ]]; then pp=${placement##*pp}; fi
    if [ "$case_name" != gae ] || [ $((np % (tp * pp))) -ne 0 ]; then
      echo "run_case.sh: $placement needs the gae case and NP divisible by $((tp * pp)), got $case_name at $np" >&2; exit 2
    fi
    extra+=(trainer.n_gpus_per_node="$np" critic.ppo_micro_batch_size_per_gpu=1)
    if [ $((tp * pp)) -gt 1 ]; then
      extra+=(critic.strategy=megatron critic.megatron.tensor_model_parallel_size="$tp"
              critic.megatron.pipeline_model_parallel_size="$pp")
    fi ;;
  *) echo "run_case.sh: unknown placement '$placement' (colocated, split, separate, tp2, tp2zero, tpTgenG, critic_tpT or critic_tpTppP)" >&2; exit 2 ;;
esac
launch=("$verl_train")
if [ "$np" -gt 1 ]; then
  launch=(mpirun -np "$np" --oversubscribe "$verl_train")
fi
VERL_FILE_LOGGER_PATH="$out/metrics.jsonl" "${launch[@]}" "${extra[@]}" "${common[@]}" > "$out/stdout.txt" 2>&1 || {
  cat "$out/stdout.txt" >&2
  exit 1
}
# The Megatron worker's reshard metrics are logged every step, at every layout (dp > 1 included).
case "$placement" in
  tp2 | tp2zero | tp[0-9]gen[0-9])
    steps=$(wc -l < "$out/metrics.jsonl")
    for key in perf/reshard_bytes_received perf/peak_param_bytes timing_s/reshard; do
      logged=$(grep -c "\"$key\"" "$out/metrics.jsonl" || true)
      if [ "$logged" -ne "$steps" ]; then
        echo "run_case.sh: $key logged at $logged of $steps steps ($placement, NP $np)" >&2; exit 1
      fi
    done ;;
esac
