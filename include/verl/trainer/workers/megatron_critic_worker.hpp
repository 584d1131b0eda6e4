// MegatronCriticWorker: verl's Megatron CriticWorker (megatron_workers.py) for the HybridFlow
// runtime: the value model tensor- and pipeline-parallel, with the same method names, result
// columns and metrics as CriticWorker (the FSDP one), so PPOController runs either.
//
//   MegatronCriticWorker<Models>                              // the mesh from the keys
//   MegatronCriticWorker<Models, Mesh<TP<2>, DP<>, PP<2>>>     // static sizes, checked against them
//   // Models::critic_type = model::TransformerCritic, models.critic(config)
//
// The training mesh type (parallel::Mesh over TP, DP and PP in Megatron's order, static or dynamic
// sizes) is checked when the type is instantiated (critic_mesh_rules: axes, order, and TP against
// the value model's heads when Models declares num_attention_heads / num_key_value_heads); its
// static sizes must equal what the keys give (an error naming the key and the mesh type).
//
// Layout: the group's ranks form Megatron's (tp, dp, pp) mesh (tp fastest, then dp) from
// critic.megatron.tensor_model_parallel_size and pipeline_model_parallel_size (tp x pp must divide
// the group's ranks and tp fit the value model's heads: errors name the keys). Every rank builds the dense critic from Models and keeps
// its TP shard (model::TensorParallelCritic over its TP group: the body column/row/vocabulary-
// parallel as the actor's, the value head replicated). critic.megatron.sequence_parallel (verl's
// default) runs Megatron's sequence parallelism at tp > 1.
// The batch methods use Dispatch::megatron_compute_proto: each DP group receives one chunk, every
// TP rank of it the same rows, and tp rank 0's result is collected. update_critic runs
// CriticWorker's value-loss loop (update_critic_rows) with the token and row counts summed over
// the DP group; the optimizer step is the Megatron actor's (megatron_optimizer_step): gradients
// averaged over the DP group, the norm of the whole TP-sharded gradient, clipping, AdamW on the
// shards; with critic.megatron.use_distributed_optimizer (verl's default) and dp > 1, Megatron's
// distributed optimizer (ZeRO-1: each DP rank keeps the AdamW moments of its 1/dp slice of its TP
// shard). The same numbers as CriticWorker on one process up to the order of sums.
// Checkpoints hold full tensors and moments in the dense critic's order (gathered over DP and TP:
// checkpoint_state is collective, hence one_to_all; the first rank's state is the group's), so a
// checkpoint resumes under any layout or under CriticWorker. Context parallelism is refused by key
// (config.hpp).
//
// Pipeline parallelism (critic.megatron.pipeline_model_parallel_size = p > 1), as the Megatron
// actor's: the value model's layers split evenly over the p stages (Megatron's split; a layer
// count p does not divide is an error naming the key), the embedding on the first stage, the
// final norm and the value head on the last; the mesh (tp, dp, pp) with tp fastest, then dp.
// compute_values runs its micro-batches forward through the stages, update_critic each optimizer
// step's micro-batches with 1F1B; the last stage computes the values and the value loss, the
// others run their layers (pipeline_stages.hpp); every stage steps its own parameters with the
// whole model's norm. Checkpoints gather every stage's tensors on the first rank.
#pragma once

#include <concepts>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "verl/core/error.hpp"
#include "verl/core/metrics.hpp"
#include "verl/data/data_proto.hpp"
#include "verl/hybridflow/dispatch.hpp"
#include "verl/hybridflow/worker.hpp"
#include "verl/model/transformer/critic.hpp"
#include "verl/model/transformer/tensor_parallel_critic.hpp"
#include "verl/optim/adamw.hpp"
#include "verl/optim/lr_scheduler.hpp"
#include "verl/parallel/distributed_optimizer.hpp"
#include "verl/parallel/mesh.hpp"
#include "verl/parallel/mpi_communicator.hpp"
#include "verl/trainer/components_from_config.hpp"
#include "verl/trainer/config.hpp"
#include "verl/trainer/layouts.hpp"
#include "verl/trainer/metrics.hpp"
#include "verl/trainer/workers/batch_keys.hpp"
#include "verl/trainer/workers/critic_update.hpp"
#include "verl/trainer/workers/critic_worker.hpp"
#include "verl/trainer/workers/fsdp_sharding.hpp"
#include "verl/trainer/workers/megatron_optimizer_step.hpp"
#include "verl/trainer/workers/pipeline_stages.hpp"
#include "verl/trainer/workers/role_state.hpp"
#include "verl/trainer/workers/tensor_parallel_role_state.hpp"

namespace verl::trainer {

template <class Models, parallel::MeshType TrainMesh = parallel::Mesh<parallel::TP<>, parallel::DP<>, parallel::PP<>>>
  requires(check_critic_models<Models>())
class MegatronCriticWorker {
 public:
  using models_type = Models;
  using train_mesh_type = TrainMesh;
  using mesh_rules = critic_mesh_rules<TrainMesh, Models>;
  static_assert(sizeof(mesh_rules) > 0, "instantiating the rules checks them (their own messages name a broken one)");
  using Dense = typename Models::critic_type;
  VERL_STATIC_ASSERT((std::same_as<Dense, model::TransformerCritic>),
                     THE_MEGATRON_CRITIC_SHARDS_THE_REFERENCE_VALUE_MODEL_ITS_MODELS_MUST_BUILD_A_MODEL_TRANSFORMER_CRITIC);
  using Critic = model::TensorParallelCritic<parallel::MpiCommunicator>;
  static constexpr std::string_view name = "MegatronCriticWorker";

  /// `models`: where the dense critic comes from (a default-built source under the MPI runtime).
  explicit MegatronCriticWorker(hybridflow::WorkerContext& context, Models models = Models{})
      : context_(&context), models_(std::move(models)) {}

  /// The group's (tp, dp, pp) mesh over `ranks` from critic.megatron.tensor_model_parallel_size
  /// and pipeline_model_parallel_size (the runtime spawns the critic's group with it). Throws
  /// naming the keys when tp x pp does not divide the ranks.
  static hybridflow::GroupMesh group_mesh(const PPOConfig& config, int ranks) {
    const auto& megatron = config.critic.megatron;
    const std::int64_t tp = megatron.tensor_model_parallel_size, pp = megatron.pipeline_model_parallel_size;
    VERL_CHECK_ARG(pp >= 1, "critic.megatron.pipeline_model_parallel_size: expected a value >= 1, got {}", pp);
    VERL_CHECK_ARG(tp >= 1 && ranks % (tp * pp) == 0,
                   "critic.megatron.tensor_model_parallel_size x pipeline_model_parallel_size: expected a divisor of "
                   "the critic's {} ranks (its group is tp x dp x pp), got {} x {}",
                   ranks, tp, pp);
    mesh_rules::check_sizes(ranks, tp, ranks / (tp * pp), pp);
    return hybridflow::GroupMesh(tp, ranks / (tp * pp), pp);
  }

  /// verl's init_model: the dense critic from Models, cut into this rank's TP shard, AdamW on the
  /// shards (or Megatron's distributed optimizer) and the learning-rate schedule.
  void init_model(const std::vector<std::string>& config_overrides, std::int64_t total_training_steps) {
    config_ = load_ppo_config(config_overrides);
    VERL_CHECK_ARG(context_->group != nullptr,
                   "{}: needs the worker group's communicator (run it under the HybridFlow runtime)", name);
    VERL_CHECK_ARG(config_.critic.strategy == "megatron",
                   "critic.strategy: the Megatron critic worker reads critic.megatron's layout; expected megatron, got {}",
                   config_.critic.strategy);
    const auto& megatron = config_.critic.megatron;
    const hybridflow::GroupMesh mesh = group_mesh(config_, context_->world_size);
    VERL_CHECK_ARG(context_->mesh.value_or(mesh) == mesh,
                   "{}: the group's mesh {} does not match the one of critic.megatron.tensor_model_parallel_size = {} "
                   "over {} ranks, {} (spawn the group with group_mesh(config, ranks))",
                   name, context_->mesh ? context_->mesh->to_string() : std::string(), megatron.tensor_model_parallel_size,
                   context_->world_size, mesh.to_string());
    const std::int64_t rank = context_->rank;
    tp_rank_ = static_cast<int>(mesh.coord(rank, parallel::AxisKind::tp));
    dp_rank_ = static_cast<int>(mesh.coord(rank, parallel::AxisKind::dp));
    pp_rank_ = static_cast<int>(mesh.coord(rank, parallel::AxisKind::pp));
    dp_size_ = static_cast<Index>(mesh.size(parallel::AxisKind::dp));
    pp_size_ = static_cast<int>(mesh.size(parallel::AxisKind::pp));
    const int tp = static_cast<int>(mesh.size(parallel::AxisKind::tp)), dp = static_cast<int>(dp_size_);
    parallel::MpiCommunicator& group = *context_->group;
    // Collective splits over the group, in the same order on every rank: the DP group (same tp
    // and pp coordinates), the pipeline group (same tp and dp), then the TP group (same dp and
    // pp), each ordered by its coordinate.
    dp_.emplace(group.split(pp_rank_ * tp + tp_rank_, dp_rank_));
    if (pp_size_ > 1) pp_.emplace(group.split(dp_rank_ * tp + tp_rank_, pp_rank_));
    const Dense dense = models_.critic(config_);
    check_critic_tensor_parallel_fits(config_, dense.config());
    critic_.emplace(dense, group.split(pp_rank_ * dp + dp_rank_, tp_rank_), pipeline_stage(config_, dense.config(), pp_rank_, pp_size_));
    // Megatron turns sequence parallelism off at tp = 1 itself.
    if (megatron.sequence_parallel && megatron.tensor_model_parallel_size > 1) critic_->set_sequence_parallel(true);
    optimizer_.emplace(adamw_config(config_.critic.optim));
    if (megatron.use_distributed_optimizer && dp_size_ > 1) {
      std::vector<std::int64_t> sizes;
      for (const auto& p : parameter_refs(*critic_)) sizes.push_back(static_cast<std::int64_t>(p.value.size()));
      distributed_optimizer_.emplace(std::move(sizes), dp_rank_, static_cast<int>(dp_size_));
    }
    scheduler_.emplace(lr_scheduler(config_.critic.optim, total_training_steps));
  }

  /// verl's compute_values: the value at every response token (values) of this DP group's rows,
  /// in micro-batches of critic.forward_micro_batch_size(_per_gpu); every TP rank returns them.
  data::DataProto compute_values(const data::DataProto& batch) {
    const Index micro = forward_micro_batch_size(config_.critic.forward_micro_batch_size_per_gpu,
                                                 config_.critic.forward_micro_batch_size, dp_size_, batch.size());
    Critic& critic = require_model();
    if (pp_) {
      std::vector<std::pair<Index, Index>> rows;
      for (Index b = 0; b < batch.size(); b += micro) rows.emplace_back(b, std::min(batch.size(), b + micro));
      PipelinePass pass = pipeline_pass(critic, batch, std::move(rows), /*forward_only=*/true, pp_rank_, pp_size_);
      if (!critic.last_stage()) {
        run_earlier_stage(critic, *pp_, batch, std::span<const PipelinePass>(&pass, 1), false, [] {});
        return {};  // the last stage's rows are collected
      }
      LastStage last(critic, *pp_, {std::move(pass)});
      data::DataProto out;
      out.set(std::string(keys::values), response_values(last, batch, micro));
      last.finish_pass();
      return out;
    }
    data::DataProto out;
    out.set(std::string(keys::values), response_values(critic, batch, micro));
    return out;
  }

  /// verl's update_critic, as CriticWorker's (update_critic_rows) with the DP reductions over the
  /// DP group and the Megatron optimizer step over the TP-sharded model.
  data::DataProto update_critic(const data::DataProto& batch) {
    Critic& critic = require_model();
    const auto step = [&](double grad_clip, std::int64_t& updates, std::int64_t& nonfinite) {
      const MegatronStepGroups<> groups{.dp = &*dp_,
                                        .dp_size = dp_size_,
                                        .pipeline = pp_ ? &*pp_ : nullptr,
                                        .model_group = context_->group};
      return megatron_optimizer_step(critic, groups, *optimizer_, distributed_optimizer_ ? &*distributed_optimizer_ : nullptr,
                                     grad_clip, "critic.grad_clip", updates, nonfinite);
    };
    std::vector<PipelinePass> passes;
    if (pp_) {
      for (auto& rows : critic_update_micro_batches(batch.size(), config_, dp_size_))
        passes.push_back(pipeline_pass(critic, batch, std::move(rows), /*forward_only=*/false, pp_rank_, pp_size_));
    }
    if (pp_ && !critic.last_stage()) {
      // The learning rate as update_critic_rows sets it; the metrics are the last stage's.
      scheduler_->apply(*optimizer_);
      std::int64_t updates = 0, nonfinite = 0;
      run_earlier_stage(critic, *pp_, batch, std::span<const PipelinePass>(passes), true,
                        [&] { (void)step(config_.critic.grad_clip, updates, nonfinite); });
      scheduler_->step();
      return {};
    }
    // The TP ranks of a DP group computed the same values: the mean over the DP group.
    const auto reduce = [&](Metrics& metrics) {
      if (dp_size_ > 1) reduce_metrics_over_ranks(*dp_, metrics);
    };
    const auto dp_total = [&](double value) { return dp_sum(value); };
    CriticUpdate update;
    if (pp_) {
      LastStage last(critic, *pp_, std::move(passes));
      update = update_critic_rows(
          last, batch, config_, *optimizer_, *scheduler_, dp_size_, dp_total,
          [&](double grad_clip, std::int64_t& updates, std::int64_t& nonfinite) {
            last.finish_pass();  // the last gradient goes out before the stages reduce the norm
            return step(grad_clip, updates, nonfinite);
          },
          reduce);
      VERL_CHECK_ARG(last.finished(), "pipeline: the critic's last stage ran fewer passes than planned");
    } else {
      update = update_critic_rows(critic, batch, config_, *optimizer_, *scheduler_, dp_size_, dp_total, step, reduce);
    }
    // What this rank's buffers hold after the update: its TP shard's parameters and gradients,
    // and its moments (the shard's, or its 1/dp slice of them with the distributed optimizer).
    HeldParameterBytes held = replicated_held_bytes(critic, *optimizer_);
    if (distributed_optimizer_) {
      const auto& state = distributed_optimizer_->state();
      held.optimizer += static_cast<std::int64_t>((state.exp_avg.size() + state.exp_avg_sq.size()) * sizeof(float));
    }
    update.metrics["perf/critic_param_bytes_at_rest"] = static_cast<double>(held.parameters);
    update.metrics["perf/critic_grad_bytes_at_rest"] = static_cast<double>(held.gradients);
    update.metrics["perf/critic_optimizer_bytes_at_rest"] = static_cast<double>(held.optimizer);
    return update_result(update.metrics, update.updates, update.nonfinite);
  }

  /// The critic's state as CriticWorker saves it (full tensors, full AdamW moments): gathered over
  /// the DP group (the distributed optimizer's slices) and the TP group on every rank
  /// (collective, hence one_to_all); the group's first rank returns it, the others an empty state.
  [[nodiscard]] RoleState checkpoint_state() {
    Critic& critic = require_model();
    const optim::AdamW::State moments = distributed_optimizer_ ? distributed_optimizer_->gather_moments(*dp_) : optimizer_->state();
    // Under pipeline parallelism each stage's (tp 0, dp 0) rank gathers its stage, and the later
    // stages send theirs to the first (rank 0), in stage order: the dense critic's order.
    const bool keeps = pp_ ? tp_rank_ == 0 && dp_rank_ == 0 : context_->rank == 0;
    RoleState state = gather_tensor_parallel_state(critic, moments, *scheduler_, keeps);
    if (pp_ && keeps) collect_stage_states(*pp_, pp_rank_, pp_size_, state, "critic");
    if (context_->rank != 0) return {};
    return state;
  }

  /// Restores a full (dense-layout) checkpoint_state() on every rank: each keeps its shards (and
  /// its slice of the moments with the distributed optimizer).
  void load_checkpoint_state(const RoleState& state) {
    Critic& critic = require_model();
    optim::AdamW::State moments = load_tensor_parallel_state(
        critic, state, *scheduler_, "critic", pp_ ? parameters_before_stage(critic, *pp_, pp_rank_, pp_size_) : 0);
    if (distributed_optimizer_) {
      distributed_optimizer_->load_moments(moments);
    } else {
      optimizer_->load_state(std::move(moments));
    }
  }

  using methods = TypeList<
      hybridflow::Method<&MegatronCriticWorker::init_model, hybridflow::Dispatch::one_to_all, "init_model">,
      hybridflow::Method<&MegatronCriticWorker::compute_values, hybridflow::Dispatch::megatron_compute_proto,
                         "compute_values">,
      hybridflow::Method<&MegatronCriticWorker::update_critic, hybridflow::Dispatch::megatron_compute_proto,
                         "update_critic">,
      hybridflow::Method<&MegatronCriticWorker::checkpoint_state, hybridflow::Dispatch::one_to_all, "checkpoint_state">,
      hybridflow::Method<&MegatronCriticWorker::load_checkpoint_state, hybridflow::Dispatch::one_to_all,
                         "load_checkpoint_state">>;

  // ---- in-process access ------------------------------------------------------------------------
  [[nodiscard]] Critic& critic() { return require_model(); }
  [[nodiscard]] Index dp_size() const { return dp_size_; }
  /// This rank's pipeline stage and the stages (1 without pipeline parallelism).
  [[nodiscard]] int pipeline_rank() const { return pp_rank_; }
  [[nodiscard]] int pipeline_size() const { return pp_size_; }
  /// Whether Megatron's distributed optimizer acts (use_distributed_optimizer with dp > 1).
  [[nodiscard]] bool distributed_optimizer() const { return distributed_optimizer_.has_value(); }

 private:
  /// The last stage as update_critic_rows and response_values drive it (pipeline_stages.hpp).
  using LastStage =
      PipelineLastStage<Critic, parallel::MpiCommunicator, model::ValueForwardOptions, model::ValueCotangents<float>>;

  /// This rank's stage of the value model's layers (Megatron's even split), the error naming the key.
  static model::PipelineStageLayers pipeline_stage(const PPOConfig& config, const model::HfModelConfig& shape, int stage,
                                                   int stages) {
    if (stages == 1) return {};
    VERL_CHECK_ARG(shape.num_hidden_layers % stages == 0,
                   "critic.megatron.pipeline_model_parallel_size: expected a divisor of the value model's "
                   "num_hidden_layers = {} (Megatron splits the layers evenly over the stages; critic.model.path = "
                   "'{}'), got {}",
                   shape.num_hidden_layers, config.critic.model.path, stages);
    return model::pipeline_stage_layers(shape, stage, stages, /*lm_head=*/false);  // tied embeddings tie nothing here
  }

  Critic& require_model() {
    VERL_CHECK_ARG(critic_.has_value(), "{}: init_model must be called before any other method", name);
    return *critic_;
  }

  double dp_sum(double value) {
    if (dp_size_ == 1) return value;
    dp_->all_reduce(std::span<double>(&value, 1), parallel::ReduceOp::sum);
    return value;
  }

  hybridflow::WorkerContext* context_;
  Models models_;
  PPOConfig config_;
  int tp_rank_ = 0, dp_rank_ = 0, pp_rank_ = 0, pp_size_ = 1;
  Index dp_size_ = 1;
  std::optional<parallel::MpiCommunicator> dp_;  ///< the DP group: the ranks with this rank's tp and pp coordinates
  std::optional<parallel::MpiCommunicator> pp_;  ///< the pipeline group (pp > 1): stage s is rank s
  std::optional<Critic> critic_;
  std::optional<optim::AdamW> optimizer_;
  /// Megatron's distributed optimizer (use_distributed_optimizer with dp > 1); optimizer_ then
  /// only carries the hyper-parameters (the scheduler's learning rate).
  std::optional<parallel::DistributedAdamW> distributed_optimizer_;
  std::optional<optim::LrScheduler<>> scheduler_;
};

}  // namespace verl::trainer
