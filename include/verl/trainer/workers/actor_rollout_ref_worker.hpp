// ActorRolloutRefWorker: verl's ActorRolloutRefWorker (fsdp_workers.py) for the HybridFlow runtime.
// One worker group holds the actor, its rollout and the reference policy in the same processes
// (verl's hybrid_engine): generation, log-probs and the PPO update all use the actor's weights in
// place, and the reference is a frozen copy (or, with LoRA, the actor with its adapter disabled).
//
//   ActorRolloutRefWorker<Models>
//
// `Models` says where the models come from (ActorModels below): verl_train's reads
// actor_rollout_ref.model.path, a user's can build any CausalLM. Every method runs SPMD on the
// group's ranks; the DataProto methods get their rank's contiguous chunk of the batch
// (DP_COMPUTE_PROTO), so a rank computes only its rows, and the collectives inside the group
// (gradient averaging, the mini-batch token counts, metric reduction) go through the group's own
// communicator. verl's names: generate_sequences, compute_log_prob, compute_ref_log_prob,
// update_actor, plus the checkpoint and export methods.
//
// Ulysses sequence parallelism (actor_rollout_ref.actor.ulysses_sequence_parallel_size = sp > 1,
// verl's fsdp_workers with dp_actor): the group's world is (dp = world / sp, sp), sp fastest, so
// ranks [d * sp, (d + 1) * sp) form data-parallel rank d's sequence-parallel group. Every rank of
// one such group computes on the same rows, dp rank d's: as verl's Ulysses sharding manager does,
// DP_COMPUTE_PROTO hands each rank 1/world of the rows, and the sp group all-gathers its
// ranks' chunks, which together are dp rank d's (for update_actor, re-interleaved per mini-batch,
// as mini_batch_major_order over dp would have ordered them); each rank returns its own chunk's
// rows of the result (SequenceParallelGroups). The actor, reference and old policy then compute
// each micro-batch together: each rank holds a contiguous 1/sp slice of its packed tokens outside
// attention and all tokens x 1/sp of the heads inside it
// (model::UlyssesRegions over the sp group); log-probs and entropy are gathered over sp, so every
// rank sees the whole rows' values. Gradients are summed over the sp group (each rank saw other
// tokens), then averaged over the dp group as without sp; token counts and metrics are reduced
// over dp only. The results are those of sp = 1 up to rounding, the same on every sp rank.
//
// FSDP's sharding (actor_rollout_ref.actor.fsdp_config.fsdp_size = f; verl's default -1 is the
// whole group; fsdp_sharding.hpp): with f > 1 the group is verl's device mesh (ddp, fsdp), ranks
// [g f, (g+1) f) one FSDP group, and each rank keeps only its 1/f shard of the actor's flat
// parameter (parallel::FullyShardedParameters: every tensor end to end, padded by fewer than f
// elements), of its gradient and of AdamW's moments; the model object holds no tensors between
// calls. FSDP's units are the decoder layers and the root (embedding, final norm, head), each a
// flat parameter of its own: compute_log_prob, compute_ref_log_prob and update_actor gather the
// root for the call and each layer just before its forward and again before its backward (one
// all_gather_v per tensor, straight into it), freeing it right after, so a call holds the root,
// one layer and the shards (FsdpShardedModel::Layerwise, through the body's layer hooks);
// generate_sequences (the KV-cache decode runs every layer at every step), save_old_policy,
// checkpoint_state, actor_weights and export_actor gather the whole model. In update_actor a
// layer's gradients are reduce-scattered over the FSDP group after each backward and added to its
// shard (FSDP's accumulation over micro-batches), the root's once per mini-batch; the shards are
// all-reduced over the world / f replicas (HYBRID_SHARD), divided by the world size (as the
// replicated engine's average), clipped by the global norm from the shards (each tensor's squared
// sum over the group), and AdamW steps each shard. The same numbers as f = 1 up to the order of
// the sums (micro-batches are summed after the ranks; tests/mpi/test_fsdp_sharding.cpp). The reference is sharded the same way with
// actor_rollout_ref.ref.fsdp_config.fsdp_size (values only). f = 1 is the replicated engine, the
// code path of before. A LoRA actor stays replicated (an explicit f > 1 is refused by name), and
// separate_async's pi_old copy (save_old_policy) is kept whole. Checkpoints hold full tensors and
// moments (gathered on save, each rank keeping its shard on load), so they resume at any f.
// update_actor's metrics carry perf/actor_{param,grad,optimizer}_bytes_at_rest: what this rank's
// buffers hold after the update (the shards, plus whatever the model still holds: nothing), and
// perf/ref_param_bytes_at_rest (the reference's shard, or its full tensors).
//
// The two compose as in verl, whose FSDP mesh and Ulysses mesh are independent views of the same
// ranks: the FSDP groups span consecutive ranks of the whole worker group whatever sp is, every
// rank gathers the whole model for a call and computes its sequence-parallel slice, and in
// update_actor the shards' gradients (reduce-scattered over FSDP, all-reduced over the replicas:
// the sum over every rank, sp ranks included) are divided by the dp size, as the sum over sp then
// the average over dp of the replicated engine.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "verl/algo/kl/registry.hpp"
#include "verl/algo/loss_aggregation.hpp"
#include "verl/algo/policy_losses/registry.hpp"
#include "verl/core/error.hpp"
#include "verl/core/finite.hpp"
#include "verl/core/metrics.hpp"
#include "verl/cpu/decode_precision.hpp"
#include "verl/data/data_proto.hpp"
#include "verl/hybridflow/worker.hpp"
#include "verl/model/causal_lm.hpp"
#include "verl/optim/adamw.hpp"
#include "verl/optim/clip_grad_norm.hpp"
#include "verl/optim/lr_scheduler.hpp"
#include "verl/parallel/process_group.hpp"
#include "verl/rollout/sampling.hpp"
#include "verl/trainer/components_from_config.hpp"
#include "verl/trainer/config.hpp"
#include "verl/trainer/ppo_trainer_algorithm.hpp"
#include "verl/trainer/ppo_trainer_roles.hpp"
#include "verl/trainer/workers/actor_update.hpp"
#include "verl/trainer/workers/batch_keys.hpp"
#include "verl/trainer/workers/fsdp_sharding.hpp"
#include "verl/trainer/workers/role_state.hpp"
#include "verl/trainer/workers/sequence_parallel_groups.hpp"

namespace verl::trainer {

/// Where an actor worker's models come from: `M::policy_type` (a float32 CausalLM),
/// `m.actor(config)` builds the actor, `m.reference(config, actor)` the frozen reference policy
/// (called only when a KL term needs one); static functions do (the sources that read verl's
/// keys), and so do members of a source object handed to the worker in process (ProvidedModels).
/// Optional: `m.save(actor, folder, adapter_folder, config)` writes the trained actor as a Hugging
/// Face folder (export_actor).
template <class M>
concept ActorModels = requires(M& m, const PPOConfig& config, const typename M::policy_type& actor) {
  typename M::policy_type;
  { m.actor(config) } -> std::same_as<typename M::policy_type>;
  { m.reference(config, actor) } -> std::same_as<typename M::policy_type>;
} && model::CausalLM<typename M::policy_type>;

template <class M>
consteval bool check_actor_models() {
  VERL_STATIC_ASSERT(ActorModels<M>,
                     ACTOR_MODELS_NEED_A_POLICY_TYPE_AND_ACTOR_AND_REFERENCE_BUILDERS_FROM_A_PPO_CONFIG);
  return ActorModels<M>;
}

/// What the controller needs to know about the actor model, read once after init_model.
struct PolicyFacts {
  std::int64_t vocab_size = 0;
  std::int64_t parameter_count = 0;
  std::vector<std::int64_t> eos_token_ids;     ///< the model config's
  std::optional<std::int64_t> pad_token_id;    ///< the model config's
};

}  // namespace verl::trainer

namespace verl::hybridflow {

template <>
struct WireCodec<trainer::PolicyFacts> {
  static void write(WireWriter& w, const trainer::PolicyFacts& facts) {
    hybridflow::write(w, facts.vocab_size);
    hybridflow::write(w, facts.parameter_count);
    hybridflow::write(w, facts.eos_token_ids);
    hybridflow::write(w, facts.pad_token_id);
  }
  static trainer::PolicyFacts read(WireReader& r) {
    trainer::PolicyFacts facts;
    facts.vocab_size = hybridflow::read<std::int64_t>(r);
    facts.parameter_count = hybridflow::read<std::int64_t>(r);
    facts.eos_token_ids = hybridflow::read<std::vector<std::int64_t>>(r);
    facts.pad_token_id = hybridflow::read<std::optional<std::int64_t>>(r);
    return facts;
  }
};

}  // namespace verl::hybridflow

namespace verl::trainer {

/// actor_rollout_ref.rollout.dtype: the precision `policy` decodes in (bfloat16 as verl's
/// inference engines run; training stays float32).
template <class Policy>
void set_rollout_precision(Policy& policy, const PPOConfig& config) {
  const cpu::DecodePrecision precision =
      cpu::parse_decode_precision(config.actor_rollout_ref.rollout.dtype, "actor_rollout_ref.rollout.dtype");
  if constexpr (requires { policy.set_decode_precision(precision); }) {
    policy.set_decode_precision(precision);
  } else {
    VERL_CHECK_ARG(precision == cpu::DecodePrecision::float32,
                   "actor_rollout_ref.rollout.dtype: this policy type decodes in float32 only (it has no "
                   "set_decode_precision), got '{}'",
                   config.actor_rollout_ref.rollout.dtype);
  }
}

/// A rollout's output as generate_sequences' rows (verl's column names).
inline data::DataProto rollout_rows(rollout::RolloutOutput out) {
  data::DataProto result;
  result.set(std::string(keys::responses), std::move(out.responses));
  result.set(std::string(keys::response_mask), std::move(out.response_mask));
  result.set(std::string(keys::rollout_log_probs), std::move(out.rollout_log_probs));
  result.set(std::string(keys::input_ids), std::move(out.input_ids));
  result.set(std::string(keys::attention_mask), std::move(out.attention_mask));
  result.set(std::string(keys::position_ids), std::move(out.position_ids));
  return result;
}

/// verl's generate_sequences on `policy`: the prompts of a rank's chunk (left-padded input_ids and
/// attention_mask, a seed per prompt) -> rollout.n responses each. The sampling settings travel
/// in meta_info (sampling_params_to_json).
template <class Policy>
data::DataProto generate_with(Policy& policy, const data::DataProto& prompts) {
  const rollout::SamplingParams params = sampling_params_from_json(prompts.meta_info().at("sampling_params"));
  rollout::PromptBatch batch{int_column(prompts, keys::input_ids), float_column(prompts, keys::attention_mask), {}};
  for (const std::int64_t bits : prompts.non_tensor<std::int64_t>(keys::seed)) batch.seeds.push_back(static_cast<std::uint64_t>(bits));
  auto engine = make_rollout_engine(policy);
  return rollout_rows(engine.generate(batch, params));
}

template <class Models>
  requires(check_actor_models<Models>())
class ActorRolloutRefWorker {
 public:
  using models_type = Models;
  using Policy = typename Models::policy_type;
  static constexpr std::string_view name = "ActorRolloutRefWorker";
  VERL_STATIC_ASSERT((std::same_as<typename Policy::scalar_type, float>), THE_TRAINER_NEEDS_A_FLOAT32_POLICY_MODEL);

  /// `models`: where the models come from (a default-built source under the MPI runtime; the
  /// in-process runtime may hand one over with models in it).
  explicit ActorRolloutRefWorker(hybridflow::WorkerContext& context, Models models = Models{})
      : context_(&context), models_(std::move(models)) {}

  /// In process only: train with `algorithm` (a compile-time recipe's, which cannot travel over
  /// MPI) instead of the one the configuration names. Called before init_model.
  void use_algorithm(PPOAlgorithm algorithm) { algorithm_override_ = std::move(algorithm); }

  /// verl's init_model: builds the actor (and the reference when a KL term needs one), its
  /// optimizer and learning-rate schedule, and the rollout's precision. `config_overrides` is the
  /// controller's configuration (to_overrides), `total_training_steps` what the schedule spans.
  void init_model(const std::vector<std::string>& config_overrides, std::int64_t total_training_steps) {
    config_ = load_ppo_config(config_overrides);
    algorithm_ = algorithm_override_ ? *algorithm_override_ : PPOAlgorithm::from_config(config_);
    sequence_parallel_.split(context_->process_group, group_size(),
                             config_.actor_rollout_ref.actor.ulysses_sequence_parallel_size, sequence_parallel_key);
    actor_.emplace(models_.actor(config_));
    sequence_parallel_.use(*actor_, sequence_parallel_key);
    if (algorithm_.needs_reference()) {
      reference_.emplace(models_.reference(config_, *actor_));
      sequence_parallel_.use(*reference_, sequence_parallel_key);
    }
    optimizer_.emplace(adamw_config(config_.actor_rollout_ref.actor.optim));
    scheduler_.emplace(lr_scheduler(config_.actor_rollout_ref.actor.optim, total_training_steps));
    set_rollout_precision(*actor_, config_);
    parameter_count_ = static_cast<std::int64_t>(model::parameter_count(*actor_));
    shard_models();
  }

  [[nodiscard]] PolicyFacts policy_facts() {
    Policy& actor = require_model();  // a CausalLM's for_each_parameter need not be const
    PolicyFacts facts;
    facts.vocab_size = actor.vocab_size();
    facts.parameter_count = parameter_count_;  // counted before sharding freed the tensors
    if constexpr (requires { actor.config().eos_token_ids; }) {
      for (const auto id : actor.config().eos_token_ids) facts.eos_token_ids.push_back(id);
      if (actor.config().pad_token_id) facts.pad_token_id = *actor.config().pad_token_id;
    }
    return facts;
  }

  /// verl's generate_sequences: the prompts of this rank's chunk (left-padded input_ids and
  /// attention_mask, a seed per prompt) → rollout.n responses each. The sampling settings travel
  /// in meta_info (sampling_params_to_json).
  data::DataProto generate_sequences(const data::DataProto& prompts) {
    return with_full(actor_shards_, require_model(), [&](Policy& actor) { return generate_with(actor, prompts); });
  }

  /// verl's compute_log_prob: the actor's log-probs of the responses (old_log_probs) at the
  /// rollout temperature, with the entropy (entropys) and, when
  /// actor.calculate_sum_pi_squared, sum_j pi_j^2 per token. Micro-batches of the rollout's
  /// log_prob_micro_batch_size(_per_gpu).
  data::DataProto compute_log_prob(const data::DataProto& batch) {
    const data::DataProto rows = sequence_parallel_.rows(batch);
    return sequence_parallel_.own_rows(
        layerwise(actor_shards_, require_model(), [&](Policy& actor) { return log_probs_of(actor, rows); }), batch.size());
  }

  /// separate_async's pi_old (verl's save_model_to_cpu(0)): keeps a copy of the actor's weights
  /// now, so that every mini-batch of the step takes its old log-probs from the same policy while
  /// the actor updates between them.
  void save_old_policy() {
    if (!old_policy_) {
      old_policy_.emplace(models_.actor(config_));
      sequence_parallel_.use(*old_policy_, sequence_parallel_key);
    }
    const PolicyWeights weights = with_full(actor_shards_, require_model(), [](Policy& actor) { return weights_of(actor); });
    trainer::load_weights(*old_policy_, weights, "the actor's saved old policy");
  }

  /// compute_log_prob with the weights save_old_policy kept (verl's restore_model_from_cpu(0),
  /// compute_log_prob, then the current weights back).
  data::DataProto compute_old_policy_log_prob(const data::DataProto& batch) {
    VERL_CHECK_ARG(old_policy_.has_value(), "compute_old_policy_log_prob: save_old_policy was never called");
    return sequence_parallel_.own_rows(log_probs_of(*old_policy_, sequence_parallel_.rows(batch)), batch.size());
  }

 private:
  data::DataProto log_probs_of(Policy& policy, const data::DataProto& batch) {
    const auto& rollout = config_.actor_rollout_ref.rollout;
    const bool sum_pi_squared = config_.actor_rollout_ref.actor.calculate_sum_pi_squared;
    ResponseStatistics stats = response_statistics(policy, batch, {.entropy = true, .sum_pi_squared = sum_pi_squared},
                                                   micro_batch(rollout.log_prob_micro_batch_size_per_gpu,
                                                               rollout.log_prob_micro_batch_size, batch.size()),
                                                   rollout_temperature());
    data::DataProto out;
    out.set(std::string(keys::old_log_probs), std::move(stats.log_probs));
    out.set(std::string(keys::entropys), std::move(stats.entropy));
    if (sum_pi_squared) out.set(std::string(keys::sum_pi_squared), std::move(stats.sum_pi_squared));
    return out;
  }

 public:

  /// verl's compute_ref_log_prob: the reference policy's log-probs (ref_log_prob).
  data::DataProto compute_ref_log_prob(const data::DataProto& chunk) {
    const data::DataProto batch = sequence_parallel_.rows(chunk);
    VERL_CHECK_ARG(reference_.has_value(),
                   "compute_ref_log_prob: this actor worker has no reference policy (no KL term in the configuration "
                   "needs one)");
    const auto& ref = config_.actor_rollout_ref.ref;
    ResponseStatistics stats = layerwise(reference_shards_, *reference_, [&](Policy& reference) {
      return response_statistics(
          reference, batch, {}, micro_batch(ref.log_prob_micro_batch_size_per_gpu, ref.log_prob_micro_batch_size, batch.size()),
          rollout_temperature());
    });
    data::DataProto out;
    out.set(std::string(keys::ref_log_prob), std::move(stats.log_probs));
    return sequence_parallel_.own_rows(out, chunk.size());
  }

  /// verl's update_actor: ppo_epochs over this rank's share of each mini-batch (the controller
  /// orders the rows with mini_batch_major_order), micro-batches whose gradients accumulate,
  /// losses aggregated over the whole mini-batch (GlobalBatchInfo: its token and row counts over
  /// every rank), gradients averaged over the group, clipped, and an AdamW step. meta_info in:
  /// "entropy_metric" (also report actor/entropy from the update's forward). Returns the metrics
  /// (reduced over the group: every rank reports the same) and the update counts in meta_info.
  /// The result's metrics also carry what this rank holds at rest after the update (bytes of
  /// the buffers allocated): perf/actor_param_bytes_at_rest, perf/actor_grad_bytes_at_rest,
  /// perf/actor_optimizer_bytes_at_rest (the shards with fsdp_size > 1, the full replica otherwise).
  data::DataProto update_actor(const data::DataProto& chunk) {
    const data::DataProto batch = sequence_parallel_.update_rows(
        chunk, config_.actor_rollout_ref.actor.ppo_mini_batch_size * config_.actor_rollout_ref.rollout.n);
    data::DataProto result;
    if (!actor_shards_) {
      result = update_actor_rows(
          require_model(), batch, config_, algorithm_, *optimizer_, *scheduler_, dp_size(),
          [&](double value) { return group_sum(value); },
          [&](double grad_clip, std::int64_t& updates, std::int64_t& nonfinite) {
            return optimizer_step(require_model(), grad_clip, updates, nonfinite);
          },
          [&](Metrics& metrics) { reduce_over_group(metrics); });
      report_held_bytes(result, replicated_held_bytes(require_model(), *optimizer_));
      return result;
    }
    // The root's tensors gathered again after every optimizer step but the last (the next
    // mini-batch's forward needs them; the layers are gathered as they run), freed when the call
    // ends.
    const std::size_t steps = update_micro_batches(batch.size(), config_, dp_size()).size();
    std::size_t taken = 0;
    {
      typename FsdpShardedModel<Policy>::Layerwise actor(*actor_shards_, require_model());
      result = update_actor_rows(
          *actor, batch, config_, algorithm_, *optimizer_, *scheduler_, dp_size(),
          [&](double value) { return group_sum(value); },
          [&](double grad_clip, std::int64_t& updates, std::int64_t& nonfinite) {
            return actor_shards_->optimizer_step(*actor, grad_clip, optimizer_->config(), dp_size(), ++taken < steps,
                                                 updates, nonfinite);
          },
          [&](Metrics& metrics) { reduce_over_group(metrics); });
    }
    // The shards, plus whatever the model and the (unused) replicated AdamW still hold: nothing,
    // unless a tensor was not freed.
    HeldParameterBytes held = actor_shards_->held_bytes();
    const HeldParameterBytes residue = replicated_held_bytes(require_model(), *optimizer_);
    held.parameters += residue.parameters;
    held.gradients += residue.gradients;
    held.optimizer += residue.optimizer;
    report_held_bytes(result, held);
    return result;
  }

  /// The actor's state for a checkpoint (weights, AdamW moments, the schedule's position): full
  /// tensors, gathered from the shards when sharded (collective, hence one_to_all); the group's
  /// first rank returns it, the others an empty state (the controller keeps the first).
  [[nodiscard]] RoleState checkpoint_state() {
    if (!actor_shards_) return context_->rank == 0 ? role_state_of(require_model(), *optimizer_, *scheduler_) : RoleState{};
    const optim::AdamW::State moments = actor_shards_->gather_moments();
    typename FsdpShardedModel<Policy>::FullModel actor(*actor_shards_, require_model());
    if (context_->rank != 0) return {};
    optim::AdamW full(optimizer_->config());
    full.load_state(moments);
    return role_state_of(*actor, full, *scheduler_);
  }

  /// Restores checkpoint_state()'s result on every rank (each keeping its shard when sharded).
  void load_checkpoint_state(const RoleState& state) {
    if (!actor_shards_) {
      restore_role_state(state, require_model(), *optimizer_, *scheduler_, "actor");
      return;
    }
    Policy& actor = require_model();
    allocate_parameter_tensors(actor);
    optim::AdamW full(optimizer_->config());
    restore_role_state(state, actor, full, *scheduler_, "actor");
    actor_shards_->reshard(actor, full.state());
    free_parameter_tensors(actor);
  }

  /// The actor's weights, for a rollout on a pool of its own (actor_rollout_ref.hybrid_engine=
  /// False): gathered from the shards when sharded (collective, hence one_to_all); the group's
  /// first rank returns them, the others nothing.
  [[nodiscard]] PolicyWeights actor_weights() {
    return with_full(actor_shards_, require_model(),
                     [&](Policy& actor) { return context_->rank == 0 ? weights_of(actor) : PolicyWeights{}; });
  }

  /// Writes the actor as a Hugging Face folder (Models::save) from the group's first rank (the
  /// full tensors gathered from the shards on every rank first); returns what was written (the
  /// other ranks: an empty string).
  std::string export_actor(const std::string& folder, const std::string& adapter_folder) {
    if constexpr (requires(const Policy& p) { models_.save(p, folder, adapter_folder, config_); }) {
      return with_full(actor_shards_, require_model(), [&](Policy& actor) {
        return context_->rank == 0 ? models_.save(actor, folder, adapter_folder, config_) : std::string();
      });
    } else {
      ::verl::detail::throw_invalid_argument("export_actor: this worker's Models type has no save(...) for '{}'", folder);
    }
  }

  using methods = TypeList<
      hybridflow::Method<&ActorRolloutRefWorker::init_model, hybridflow::Dispatch::one_to_all, "init_model">,
      hybridflow::Method<&ActorRolloutRefWorker::policy_facts, hybridflow::Dispatch::rank_zero, "policy_facts">,
      hybridflow::Method<&ActorRolloutRefWorker::generate_sequences, hybridflow::Dispatch::dp_compute_proto,
                         "generate_sequences">,
      hybridflow::Method<&ActorRolloutRefWorker::compute_log_prob, hybridflow::Dispatch::dp_compute_proto,
                         "compute_log_prob">,
      hybridflow::Method<&ActorRolloutRefWorker::compute_ref_log_prob, hybridflow::Dispatch::dp_compute_proto,
                         "compute_ref_log_prob">,
      hybridflow::Method<&ActorRolloutRefWorker::save_old_policy, hybridflow::Dispatch::one_to_all, "save_old_policy">,
      hybridflow::Method<&ActorRolloutRefWorker::compute_old_policy_log_prob, hybridflow::Dispatch::dp_compute_proto,
                         "compute_old_policy_log_prob">,
      hybridflow::Method<&ActorRolloutRefWorker::update_actor, hybridflow::Dispatch::dp_compute_proto, "update_actor">,
      hybridflow::Method<&ActorRolloutRefWorker::checkpoint_state, hybridflow::Dispatch::one_to_all, "checkpoint_state">,
      hybridflow::Method<&ActorRolloutRefWorker::load_checkpoint_state, hybridflow::Dispatch::one_to_all,
                         "load_checkpoint_state">,
      hybridflow::Method<&ActorRolloutRefWorker::export_actor, hybridflow::Dispatch::one_to_all, "export_actor">,
      hybridflow::Method<&ActorRolloutRefWorker::actor_weights, hybridflow::Dispatch::one_to_all, "actor_weights">>;

  // ---- in-process access (the in-process runtime's worker() gives the object) ------------------
  // With fsdp_size > 1 the models hold no tensors between calls (actor_shards() has them).
  [[nodiscard]] Policy& actor() { return require_model(); }
  [[nodiscard]] const Policy& actor_model() const { return require_model(); }
  [[nodiscard]] const std::optional<Policy>& reference_model() const { return reference_; }
  [[nodiscard]] const optim::AdamW& optimizer() const {
    VERL_CHECK_ARG(optimizer_.has_value(), "{}: init_model must be called before any other method", name);
    return *optimizer_;
  }
  /// The actor's and the reference's FSDP shards (empty at fsdp_size 1: full replicas).
  [[nodiscard]] const std::optional<FsdpShardedModel<Policy>>& actor_shards() const { return actor_shards_; }
  [[nodiscard]] const std::optional<FsdpShardedModel<Policy>>& reference_shards() const { return reference_shards_; }

 private:
  Policy& require_model() {
    VERL_CHECK_ARG(actor_.has_value(), "{}: init_model must be called before any other method", name);
    return *actor_;
  }
  const Policy& require_model() const { return const_cast<ActorRolloutRefWorker&>(*this).require_model(); }

  static constexpr std::string_view sequence_parallel_key = "actor_rollout_ref.actor.ulysses_sequence_parallel_size";

  float rollout_temperature() const { return static_cast<float>(config_.actor_rollout_ref.rollout.temperature); }

  /// fsdp_size > 1: the actor (and the reference) keep their shards only (FsdpShardedModel).
  /// LoRA keeps the full replica at fsdp_size -1 (its frozen base has no gradients to shard) and
  /// refuses an explicit fsdp_size > 1.
  void shard_models() {
    constexpr std::string_view actor_key = "actor_rollout_ref.actor.fsdp_config.fsdp_size";
    constexpr std::string_view ref_key = "actor_rollout_ref.ref.fsdp_config.fsdp_size";
    const int world = group_size();
    const std::int64_t actor_setting = config_.actor_rollout_ref.actor.fsdp_config.fsdp_size;
    const int actor_fsdp = resolve_fsdp_size(actor_setting, world, actor_key);
    const int ref_fsdp = resolve_fsdp_size(config_.actor_rollout_ref.ref.fsdp_config.fsdp_size, world, ref_key);
    const bool lora = config_.actor_rollout_ref.model.lora_rank > 0;
    VERL_CHECK_ARG(!lora || actor_setting == -1 || actor_setting == 1,
                   "{}: sharding a LoRA actor is not built (its frozen base takes no optimizer step); expected -1 or 1 "
                   "with actor_rollout_ref.model.lora_rank={}, got {} (world size {})",
                   actor_key, config_.actor_rollout_ref.model.lora_rank, actor_setting, world);
    const auto shard = [&](std::optional<FsdpShardedModel<Policy>>& shards, Policy& model, int fsdp, std::string_view key) {
      if (fsdp == 1) return;
      if constexpr (ReleasesParameterStorage<Policy>) {
        shards.emplace(model, *context_->process_group, fsdp);
      } else {
        ::verl::detail::throw_invalid_argument(
            "{}: sharding needs a policy type that frees and reallocates its parameter storage "
            "(release_parameter_storage / allocate_parameter_storage); expected 1 for this one, got {} (world size {})",
            key, fsdp, world);
      }
    };
    if (!lora) shard(actor_shards_, *actor_, actor_fsdp, actor_key);
    if (reference_ && !lora) shard(reference_shards_, *reference_, ref_fsdp, ref_key);
  }

  /// fn(model) with the model's full tensors: gathered from `shards` for the call and freed after
  /// when sharded, the model as it is otherwise.
  template <class Fn>
  decltype(auto) with_full(std::optional<FsdpShardedModel<Policy>>& shards, Policy& model, Fn&& fn) {
    if (!shards) return fn(model);
    typename FsdpShardedModel<Policy>::FullModel full(*shards, model);
    return fn(*full);
  }
  /// fn(model) for a log-prob pass: when sharded, the root gathered for the call and each decoder
  /// layer around its forward (FsdpShardedModel::Layerwise); the model as it is otherwise.
  template <class Fn>
  decltype(auto) layerwise(std::optional<FsdpShardedModel<Policy>>& shards, Policy& model, Fn&& fn) {
    if (!shards) return fn(model);
    typename FsdpShardedModel<Policy>::Layerwise gathered(*shards, model);
    return fn(*gathered);
  }

  /// The actor's held bytes, and the reference's parameters (its shard, or its full tensors).
  void report_held_bytes(data::DataProto& result, const HeldParameterBytes& held) {
    auto& metrics = result.meta_info()["metrics"];
    metrics["perf/actor_param_bytes_at_rest"] = held.parameters;
    metrics["perf/actor_grad_bytes_at_rest"] = held.gradients;
    metrics["perf/actor_optimizer_bytes_at_rest"] = held.optimizer;
    if (reference_) {
      std::int64_t reference_bytes = reference_shards_ ? reference_shards_->held_bytes().parameters : 0;
      reference_->for_each_parameter([&](const auto& p) { reference_bytes += static_cast<std::int64_t>(p.value.size_bytes()); });
      metrics["perf/ref_param_bytes_at_rest"] = reference_bytes;
    }
  }

  Index group_size() const { return context_->group_size(); }
  /// The data-parallel ranks: the group's over the sequence-parallel size.
  Index dp_size() const { return sequence_parallel_.dp_size(); }
  /// The ranks holding other rows (this rank's data-parallel group): the whole group without sp.
  parallel::ProcessGroup& dp_group() const { return sequence_parallel_.dp_group(); }

  /// Sums over the data-parallel ranks (the sp ranks of one dp rank hold the same rows).
  double group_sum(double value) const {
    if (dp_size() == 1) return value;
    std::vector<double> buffer{value};
    dp_group().all_reduce(std::span<double>(buffer), parallel::ReduceOp::sum);
    return buffer[0];
  }

  void reduce_over_group(Metrics& metrics) const {
    if (dp_size() > 1) reduce_metrics_over_ranks(dp_group(), metrics);
  }

  Index micro_batch(std::optional<std::int64_t> per_gpu, std::optional<std::int64_t> global, Index rows) const {
    return forward_micro_batch_size(per_gpu, global, dp_size(), rows);
  }

  /// Averages gradients over the group (FSDP's reduce), clips and steps (skipped, and counted,
  /// when the norm is not finite, as verl does). Returns the norm.
  float optimizer_step(Policy& actor, double grad_clip, std::int64_t& updates, std::int64_t& nonfinite) {
    std::vector<optim::ParameterRef> refs = parameter_refs(actor);
    sequence_parallel_.sum_gradients(refs);
    if (dp_size() > 1) average_gradients(dp_group(), refs);
    const float norm = optim::clip_grad_norm(refs, grad_clip);
    ++updates;
    if (std::isfinite(norm)) {
      optimizer_->step(refs);
    } else {
      ++nonfinite;
    }
    return norm;
  }

  hybridflow::WorkerContext* context_;
  Models models_;
  std::optional<PPOAlgorithm> algorithm_override_;
  PPOConfig config_;
  PPOAlgorithm algorithm_;
  std::optional<Policy> actor_;
  std::optional<Policy> reference_;
  std::optional<Policy> old_policy_;  ///< separate_async's pi_old (save_old_policy)
  std::optional<optim::AdamW> optimizer_;
  std::optional<optim::LrScheduler<>> scheduler_;
  SequenceParallelGroups sequence_parallel_;
  std::int64_t parameter_count_ = 0;
  std::optional<FsdpShardedModel<Policy>> actor_shards_;      ///< fsdp_size > 1
  std::optional<FsdpShardedModel<Policy>> reference_shards_;  ///< the ref's fsdp_size > 1
};

}  // namespace verl::trainer
