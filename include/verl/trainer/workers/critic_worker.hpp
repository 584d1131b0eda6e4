// CriticWorker: verl's CriticWorker for the HybridFlow runtime: the value model's estimates
// (compute_values) and its clipped value-loss update (update_critic), SPMD over the group's ranks
// with each rank's contiguous chunk of the batch. critic.ulysses_sequence_parallel_size = sp > 1
// splits the group into (dp = world / sp, sp) as the actor worker does (SequenceParallelGroups):
// the sp ranks of a dp rank compute on its rows together, each holding a slice of the packed
// tokens, the values gathered over sp and the gradients summed over sp before the dp average.
//
//   CriticWorker<Models>   // Models::critic_type, models.critic(config)
//
// FSDP's sharding (critic.fsdp.fsdp_size = f, verl's default -1: the whole group) as the actor's
// (actor_rollout_ref_worker.hpp, fsdp_sharding.hpp): with f > 1 each rank keeps its 1/f shard of
// the value model's flat parameters (FSDP units: one per decoder layer and the root), gradients
// and AdamW moments; compute_values and update_critic gather the root for the call and each layer
// around its forward and backward (FsdpShardedModel::Layerwise); gradients are reduce-scattered
// over the FSDP group, all-reduced over the replicas, divided by the dp size (the world size without sp:
// the sum over sp then the average over dp, as the replicated engine), clipped from the shards.
// The same numbers as f = 1 (the replicated engine, the code path of before). Checkpoints hold
// full tensors (gathered on save: checkpoint_state is collective, one_to_all; the first rank's
// state is the group's). update_critic's metrics carry perf/critic_{param,grad,optimizer}_bytes_at_rest.
#pragma once

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "verl/core/error.hpp"
#include "verl/core/metrics.hpp"
#include "verl/data/data_proto.hpp"
#include "verl/hybridflow/worker.hpp"
#include "verl/model/value_model.hpp"
#include "verl/optim/adamw.hpp"
#include "verl/optim/clip_grad_norm.hpp"
#include "verl/optim/lr_scheduler.hpp"
#include "verl/parallel/process_group.hpp"
#include "verl/trainer/components_from_config.hpp"
#include "verl/trainer/config.hpp"
#include "verl/trainer/metrics.hpp"
#include "verl/trainer/workers/batch_keys.hpp"
#include "verl/trainer/workers/critic_update.hpp"
#include "verl/trainer/workers/fsdp_sharding.hpp"
#include "verl/trainer/workers/role_state.hpp"
#include "verl/trainer/workers/sequence_parallel_groups.hpp"

namespace verl::trainer {

/// Where a critic worker's model comes from: `M::critic_type` (a float32 ValueModel) and
/// `M::critic(config)`.
template <class M>
concept CriticModels = requires(M& m, const PPOConfig& config) {
  typename M::critic_type;
  { m.critic(config) } -> std::same_as<typename M::critic_type>;
} && model::ValueModel<typename M::critic_type>;

template <class M>
consteval bool check_critic_models() {
  VERL_STATIC_ASSERT(CriticModels<M>, CRITIC_MODELS_NEED_A_CRITIC_TYPE_AND_A_CRITIC_BUILDER_FROM_A_PPO_CONFIG);
  return CriticModels<M>;
}

template <class Models>
  requires(check_critic_models<Models>())
class CriticWorker {
 public:
  using models_type = Models;
  using Critic = typename Models::critic_type;
  static constexpr std::string_view name = "CriticWorker";

  /// `models`: where the critic comes from (a default-built source under the MPI runtime; the
  /// in-process runtime may hand one over with the model in it).
  explicit CriticWorker(hybridflow::WorkerContext& context, Models models = Models{})
      : context_(&context), models_(std::move(models)) {}

  void init_model(const std::vector<std::string>& config_overrides, std::int64_t total_training_steps) {
    config_ = load_ppo_config(config_overrides);
    sequence_parallel_.split(context_->process_group, group_size(), config_.critic.ulysses_sequence_parallel_size,
                             sequence_parallel_key);
    critic_.emplace(models_.critic(config_));
    sequence_parallel_.use(*critic_, sequence_parallel_key);
    optimizer_.emplace(adamw_config(config_.critic.optim));
    scheduler_.emplace(lr_scheduler(config_.critic.optim, total_training_steps));
    constexpr std::string_view key = "critic.fsdp.fsdp_size";
    const int fsdp = resolve_fsdp_size(config_.critic.fsdp.fsdp_size, group_size(), key);
    if (fsdp > 1) {
      if constexpr (ReleasesParameterStorage<Critic>) {
        shards_.emplace(*critic_, *context_->process_group, fsdp);
      } else {
        ::verl::detail::throw_invalid_argument(
            "{}: sharding needs a critic type that frees and reallocates its parameter storage "
            "(release_parameter_storage / allocate_parameter_storage); expected 1 for this one, got {} (world size {})",
            key, fsdp, group_size());
      }
    }
  }

  /// verl's compute_values: the value at every response token (values), in micro-batches of
  /// critic.forward_micro_batch_size(_per_gpu).
  data::DataProto compute_values(const data::DataProto& chunk) {
    const data::DataProto batch = sequence_parallel_.rows(chunk);
    const Index micro = forward_micro_batch_size(config_.critic.forward_micro_batch_size_per_gpu,
                                                 config_.critic.forward_micro_batch_size, dp_size(), batch.size());
    data::DataProto out;
    if (shards_) {
      typename FsdpShardedModel<Critic>::Layerwise critic(*shards_, require_model());
      out.set(std::string(keys::values), response_values(*critic, batch, micro));
    } else {
      out.set(std::string(keys::values), response_values(require_model(), batch, micro));
    }
    return sequence_parallel_.own_rows(out, chunk.size());
  }

  /// verl's update_critic: critic.ppo_epochs over this rank's share of each mini-batch of
  /// critic.ppo_mini_batch_size prompts x rollout.n (rows ordered by mini_batch_major_order), the
  /// clipped value loss aggregated over the whole mini-batch, gradients averaged over the group.
  data::DataProto update_critic(const data::DataProto& chunk) {
    // Sharded: the root gathered for the call, each layer around its passes; freed at the end.
    std::optional<typename FsdpShardedModel<Critic>::Layerwise> gathered;
    if (shards_) gathered.emplace(*shards_, require_model());
    Critic& critic = require_model();
    const auto& cfg = config_.critic;
    const data::DataProto batch =
        sequence_parallel_.update_rows(chunk, cfg.ppo_mini_batch_size * config_.actor_rollout_ref.rollout.n);
    const Index dp = dp_size();
    // Sharded: the tensors are gathered again after every optimizer step but the last.
    const std::size_t steps = critic_update_micro_batches(batch.size(), config_, dp).size();
    std::size_t taken = 0;
    CriticUpdate update = update_critic_rows(
        critic, batch, config_, *optimizer_, *scheduler_, dp, [&](double value) { return group_sum(value); },
        [&](double grad_clip, std::int64_t& updates, std::int64_t& nonfinite) {
          if (shards_) {
            return shards_->optimizer_step(critic, grad_clip, optimizer_->config(), dp, ++taken < steps, updates, nonfinite);
          }
          std::vector<optim::ParameterRef> refs = parameter_refs(critic);
          sequence_parallel_.sum_gradients(refs);
          if (dp > 1) average_gradients(sequence_parallel_.dp_group(), refs);
          const float norm = optim::clip_grad_norm(refs, grad_clip);
          ++updates;
          if (std::isfinite(norm)) {
            optimizer_->step(refs);
          } else {
            ++nonfinite;
          }
          return norm;
        },
        [&](Metrics& metrics) {
          if (dp > 1) reduce_metrics_over_ranks(sequence_parallel_.dp_group(), metrics);
        });
    Metrics& step_metrics = update.metrics;
    gathered.reset();
    // What this rank's buffers hold after the update: the shards (sharded) plus whatever the
    // model and the replicated AdamW hold (everything at fsdp_size 1, nothing when sharded).
    HeldParameterBytes held = replicated_held_bytes(critic, *optimizer_);
    if (shards_) {
      const HeldParameterBytes shard = shards_->held_bytes();
      held.parameters += shard.parameters;
      held.gradients += shard.gradients;
      held.optimizer += shard.optimizer;
    }
    step_metrics["perf/critic_param_bytes_at_rest"] = static_cast<double>(held.parameters);
    step_metrics["perf/critic_grad_bytes_at_rest"] = static_cast<double>(held.gradients);
    step_metrics["perf/critic_optimizer_bytes_at_rest"] = static_cast<double>(held.optimizer);
    return update_result(step_metrics, update.updates, update.nonfinite);
  }

  /// The critic's state for a checkpoint: full tensors and moments (gathered from the shards when
  /// sharded: collective, hence one_to_all); the group's first rank returns it, the others an
  /// empty state.
  [[nodiscard]] RoleState checkpoint_state() {
    if (!shards_) return context_->rank == 0 ? role_state_of(require_model(), *optimizer_, *scheduler_) : RoleState{};
    const optim::AdamW::State moments = shards_->gather_moments();
    typename FsdpShardedModel<Critic>::FullModel critic(*shards_, require_model());
    if (context_->rank != 0) return {};
    optim::AdamW full(optimizer_->config());
    full.load_state(moments);
    return role_state_of(*critic, full, *scheduler_);
  }
  /// Restores checkpoint_state()'s result on every rank (each keeping its shard when sharded).
  void load_checkpoint_state(const RoleState& state) {
    if (!shards_) {
      restore_role_state(state, require_model(), *optimizer_, *scheduler_, "critic");
      return;
    }
    Critic& critic = require_model();
    allocate_parameter_tensors(critic);
    optim::AdamW full(optimizer_->config());
    restore_role_state(state, critic, full, *scheduler_, "critic");
    shards_->reshard(critic, full.state());
    free_parameter_tensors(critic);
  }

  // ---- in process (the in-process runtime's worker() gives the object) ----------------------
  [[nodiscard]] Critic& critic() { return require_model(); }
  [[nodiscard]] const Critic& critic_model() const { return require_model(); }
  [[nodiscard]] const optim::AdamW& optimizer() const {
    VERL_CHECK_ARG(optimizer_.has_value(), "{}: init_model must be called before any other method", name);
    return *optimizer_;
  }
  /// The critic's FSDP shards (empty at fsdp_size 1: a full replica; the model then holds no
  /// tensors between calls).
  [[nodiscard]] const std::optional<FsdpShardedModel<Critic>>& shards() const { return shards_; }

  using methods =
      TypeList<hybridflow::Method<&CriticWorker::init_model, hybridflow::Dispatch::one_to_all, "init_model">,
               hybridflow::Method<&CriticWorker::compute_values, hybridflow::Dispatch::dp_compute_proto, "compute_values">,
               hybridflow::Method<&CriticWorker::update_critic, hybridflow::Dispatch::dp_compute_proto, "update_critic">,
               hybridflow::Method<&CriticWorker::checkpoint_state, hybridflow::Dispatch::one_to_all, "checkpoint_state">,
               hybridflow::Method<&CriticWorker::load_checkpoint_state, hybridflow::Dispatch::one_to_all,
                                  "load_checkpoint_state">>;

 private:
  Critic& require_model() {
    VERL_CHECK_ARG(critic_.has_value(), "{}: init_model must be called before any other method", name);
    return *critic_;
  }
  const Critic& require_model() const { return const_cast<CriticWorker&>(*this).require_model(); }

  static constexpr std::string_view sequence_parallel_key = "critic.ulysses_sequence_parallel_size";

  Index group_size() const { return context_->group_size(); }
  /// The data-parallel ranks: the group's over the sequence-parallel size.
  Index dp_size() const { return sequence_parallel_.dp_size(); }

  /// Sums over the data-parallel ranks (the sp ranks of one dp rank hold the same rows).
  double group_sum(double value) const {
    if (dp_size() == 1) return value;
    std::vector<double> buffer{value};
    sequence_parallel_.dp_group().all_reduce(std::span<double>(buffer), parallel::ReduceOp::sum);
    return buffer[0];
  }

  hybridflow::WorkerContext* context_;
  Models models_;
  PPOConfig config_;
  std::optional<Critic> critic_;
  std::optional<optim::AdamW> optimizer_;
  std::optional<optim::LrScheduler<>> scheduler_;
  SequenceParallelGroups sequence_parallel_;
  std::optional<FsdpShardedModel<Critic>> shards_;  ///< critic.fsdp.fsdp_size > 1
};

}  // namespace verl::trainer
