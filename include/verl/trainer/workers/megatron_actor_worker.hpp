// MegatronActorRolloutRefWorker: verl's Megatron ActorRolloutRefWorker (megatron_workers.py) for
// the HybridFlow runtime, with tensor parallelism and the 3D-HybridEngine's reshard executed every
// step. Same method names, result columns and metrics as ActorRolloutRefWorker (the FSDP one), so
// PPOController runs either.
//
//   MegatronActorRolloutRefWorker<Models>                                        // sizes from the keys
//   MegatronActorRolloutRefWorker<Models, Mesh<TP<2>, DP<>>, Mesh<TP<1>, DP<>>>  // tp 2 -> tg 1 as types
//   MegatronActorRolloutRefWorker<Models, Mesh<TP<2>, DP<>, PP<2>>, Mesh<TP<1>, DP<>>>  // 2 stages
//
// Layouts (trainer/layouts.hpp): the training and generation meshes are template parameters,
// each axis static or dynamic (the defaults, Mesh<TP<>, DP<>, PP<>> and Mesh<TP<>, DP<>>, take every
// size from the keys). The rules on the pair (tg divides tp, one world size, generation pp = 1,
// axes in Megatron's order, tp within the model's heads when
// model_heads<Models> knows them) are static asserts for static sizes; at run time the keys are
// checked against them and against the static sizes (errors name the key, expected and got).
// The worker's TP and DP groups are slices of the training mesh (Mesh::group), its generation
// groups those of the reshard plan between the two meshes.
//
// Training layout: the group's ranks form Megatron's (tp, dp, pp) mesh (tp fastest, then dp, then
// pp) from actor_rollout_ref.actor.megatron.tensor_model_parallel_size and
// pipeline_model_parallel_size (pipeline parallelism: see below).
// Each rank holds a TensorParallelTransformer over its TP group: column/row-parallel attention and
// MLP, vocabulary-parallel embedding and LM head, log-probs and entropy without gathering the
// logits. Gradients are averaged over the DP group, clipped with the TP-correct global norm
// (gradient_squared_norm: every element of the full gradient once) and AdamW steps on the shards.
// With actor_rollout_ref.actor.megatron.use_distributed_optimizer (verl's default) and dp > 1,
// Megatron's distributed optimizer (ZeRO-1, parallel::DistributedAdamW): the TP shard's tensors
// flattened and cut into dp slices, each DP rank keeping AdamW's moments for its slice only;
// gradients reduce-scattered over the DP group (not all-reduced), the global norm summed from the
// slices over DP and TP, the slice updated, the parameters all-gathered. The same numbers as
// without it (the same AdamW element kernel; only sums may run in another order: the norm's
// double sum, and MPI's reduction over dp > 2 ranks; at dp = 2 the runs are bit-identical).
// Checkpoints hold the full moments either way (gathered over DP, then TP). At dp = 1 the key
// does nothing (as in Megatron).
// The batch methods use Dispatch::megatron_compute_proto: each DP group receives one chunk, every
// TP rank of it the same rows, and tp rank 0's result is collected.
//
// Generation (the 3D-HybridEngine with generation tp = 1): before generate_sequences each rank
// all-gathers the full weights from its TP group (the plan's micro-DP group), generates its DP
// chunk with the dense KV-cache engine, and drops the dense copy. The result's meta_info["metrics"]
// carries timing_s/reshard, perf/reshard_bytes_received (counted by the communicator in its
// all-gathers as they happen) and perf/peak_param_bytes (the parameter buffers this rank held at
// once: its training shard plus the dense copy, counted over the tensors allocated); both are
// per-rank figures, reported as the max over the group's ranks (equal when the plan is balanced)
// by every rank; the controller logs them at any dp (detail::worker_meta_metrics). Against
// parallel::ReshardPlan<HybridFlow> (tp -> tg = 1) for a model of M bytes:
//   - received = (t-1)/t * (M - R) where R are the replicated tensors (RMSNorm weights, row-parallel
//     biases): they are not gathered, so the measured bytes are the plan's minus (t-1)/t * R. With
//     fewer KV heads than ranks, the KV copies travel too (more than the plan).
//   - peak = M + (M - R)/t + R: HybridFlow keeps the training shard inside the generation buffer
//     (peak M, zero redundancy); this worker keeps its shard beside the dense copy (the shard's
//     bytes are redundant during generation). Per-tensor staging buffers of the gather (at most two
//     copies of the largest tensor) are not included.
//
// Generation with tg > 1 (actor_rollout_ref.rollout.tensor_model_parallel_size dividing tp): the
// generation mesh (pg = 1, tg, dg = ranks / tg) of parallel::ReshardPlan<HybridFlow>. Each step
// every rank lends its training shards to a generation model (TensorParallelTransformer::
// lend_to_generation): its buffers grow in place into generation shards, filled by in-place
// all-gathers inside the plan's micro-DP group (t / tg consecutive training TP ranks), so that the
// training shard lives inside the generation buffer (zero redundancy). Each generation group of tg
// ranks decodes its contiguous share (1 / (t / tg)) of its training DP group's prompts with the KV
// cache, TP-sharded (the logits row gathered for sampling: the dense model's tokens for the same
// seeds); the weights are then cut back to the training shards and the generation model dropped,
// and the parts are all-gathered over the micro-DP group so that tp rank 0 returns its DP group's
// whole chunk. perf/reshard_bytes_received is the micro-DP communicator's count during the lend;
// perf/peak_param_bytes the ParameterMemoryMeter's peak (every buffer change counted as made).
// Against the plan: received = comm_bytes_per_rank - (1/tg - 1/t) (R + K) and peak =
// peak_param_bytes_per_rank + (1 - 1/tg) R, where R are the replicated tensors (held whole, not
// gathered) and K the KV tensors when the training TP copies KV heads (their training block is
// already their generation block); redundancy 0. Not counted: the packed decode copy of the
// weights the KV cache carries (as the dense engine's) and the KV cache itself.
// The reference policy is a TP copy over its own TP communicator (and the same pipeline stage).
//
// Sequence parallelism (actor_rollout_ref.actor.megatron.sequence_parallel, verl's default, at
// tp > 1): the actor and the reference run Megatron's sequence parallelism
// (TensorParallelTransformer::set_sequence_parallel): each TP rank keeps 1/tp of the packed tokens
// outside the tensor-parallel regions; the same numbers as without it up to the order of sums.
// Generation never splits the tokens. With pipeline stages each TP rank sends its slice of the
// stage's output to the same TP rank of the next stage (and the slice's gradient back), as
// Megatron's stages do: the messages are 1/tp of the tokens.
//
// Pipeline parallelism (actor_rollout_ref.actor.megatron.pipeline_model_parallel_size = p > 1):
// the layers split evenly over the p stages (Megatron's split; a layer count p does not divide is
// an error naming the key, expected and given values), the embedding on the first stage, the final
// norm and the vocabulary-parallel LM head on the last; tied embeddings over stages are refused by
// name (Megatron would keep a copy of the embedding on the last stage and all-reduce the two
// copies' gradients: not built). Each stage is a TensorParallelTransformer of its layers over its
// TP group; a stage's pipeline group is the mesh's slice along pp (same tp and dp coordinates).
// The batch methods run the micro-batches of the dense worker (update_micro_batches, the log-prob
// micro-batch keys) through the stages: log-probs forward only, update_actor with 1F1B
// (parallel::OneFOneB: warm-up forwards, one forward / one backward, cool-down backwards; each
// stage keeps the saved passes of its micro-batches in flight). The last stage computes the losses
// with update_actor_rows, whose forward and backward calls drive the schedule's steps there
// (PipelineStageRunner checks the order); the other stages run their layers
// (run_pipeline_stage). Activations and their gradients travel between neighbouring stages as
// (tokens x hidden) messages whose sizes every stage knows from the micro-batch's tokens (micro-
// batches differ). Every stage steps its own parameters: the DP reduction (or the distributed
// optimizer) per stage as without stages, the gradient norm summed over TP and then over the
// stages (each element once), so clipping and the skipped non-finite steps agree everywhere. The
// results are the last stage's (megatron_compute_proto collects tp rank 0 of the last stage of
// each DP group; the other stages return nothing). Generation needs every layer (tg = 1 with
// stages; actor_rollout_ref.rollout.tensor_model_parallel_size > 1 is refused by name): each
// tensor is all-gathered over its stage's TP group, then broadcast from its stage over the
// pipeline group (gather_dense_over_stages), so that every rank holds the dense copy. Against
// parallel::ReshardPlan<HybridFlow> (t, p -> tg = pg = 1: comm (t p - 1)/(t p) M, peak M) for a
// rank of stage s whose tensors take F_s bytes of the model's M (R_s of them replicated):
//   - received = M - F_s + (t-1)/t (F_s - R_s) = plan + (M/p - F_s)/t - (t-1)/t R_s: the stages are
//     not equal (the embedding on the first, the head on the last), and replicated tensors are not
//     gathered over TP;
//   - peak = M + (F_s - R_s)/t + R_s (the shard kept beside the dense copy, as without stages);
// both reported as the max over the group's ranks. Checkpoints: checkpoint_state gathers each
// stage's tensors (and moments) over TP (and DP), the later stages send theirs to the first stage
// (tensor names, shapes, values), and rank 0 returns the whole model in the dense order: the same
// state as the worker without stages (hence resumable at any mesh); load_checkpoint_state keeps
// each stage's share. export_actor writes the gathered dense model. virtual_pipeline_model_
// parallel_size (interleaving) is not built.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "verl/algo/kl/registry.hpp"
#include "verl/algo/loss_aggregation.hpp"
#include "verl/algo/policy_losses/registry.hpp"
#include "verl/core/error.hpp"
#include "verl/core/metrics.hpp"
#include "verl/cpu/decode_precision.hpp"
#include "verl/data/data_proto.hpp"
#include "verl/hybridflow/worker.hpp"
#include "verl/model/causal_lm.hpp"
#include "verl/model/transformer/tensor_parallel_transformer.hpp"
#include "verl/model/transformer/transformer.hpp"
#include "verl/optim/adamw.hpp"
#include "verl/optim/lr_scheduler.hpp"
#include "verl/parallel/counting_communicator.hpp"
#include "verl/parallel/distributed_optimizer.hpp"
#include "verl/parallel/mesh.hpp"
#include "verl/parallel/mpi_communicator.hpp"
#include "verl/parallel/pipeline_executor.hpp"
#include "verl/parallel/pipeline_schedule.hpp"
#include "verl/parallel/reshard_plan.hpp"
#include "verl/rollout/kv_cache_rollout.hpp"
#include "verl/rollout/sampling.hpp"
#include "verl/trainer/components_from_config.hpp"
#include "verl/trainer/config.hpp"
#include "verl/trainer/layouts.hpp"
#include "verl/trainer/ppo_trainer_algorithm.hpp"
#include "verl/trainer/ppo_trainer_roles.hpp"
#include "verl/trainer/workers/actor_rollout_ref_worker.hpp"
#include "verl/trainer/workers/actor_update.hpp"
#include "verl/trainer/workers/batch_keys.hpp"
#include "verl/trainer/workers/megatron_optimizer_step.hpp"
#include "verl/trainer/workers/pipeline_stages.hpp"
#include "verl/trainer/workers/role_state.hpp"
#include "verl/trainer/workers/tensor_parallel_role_state.hpp"

namespace verl::trainer {

template <class Models, parallel::MeshType TrainMesh = parallel::Mesh<parallel::TP<>, parallel::DP<>, parallel::PP<>>,
          parallel::MeshType GenMesh = parallel::Mesh<parallel::TP<>, parallel::DP<>>>
  requires(check_actor_models<Models>())
class MegatronActorRolloutRefWorker {
 public:
  using models_type = Models;
  /// The meshes' types, checked with the model's static heads (model_heads<Models>) if it has them.
  using layouts_type = Layouts<TrainMesh, GenMesh, Models>;
  static_assert(sizeof(layouts_type) > 0, "instantiating the layouts checks their rules");
  using Dense = typename Models::policy_type;
  VERL_STATIC_ASSERT((std::same_as<Dense, model::Transformer>),
                     THE_MEGATRON_WORKER_SHARDS_THE_REFERENCE_TRANSFORMER_ITS_MODELS_MUST_BUILD_A_MODEL_TRANSFORMER);
  using Communicator = parallel::CountingCommunicator<parallel::MpiCommunicator>;
  using Policy = model::TensorParallelTransformer<Communicator>;
  // TP-sharded generation decodes with the KV cache (not the recomputing fallback).
  static_assert(rollout::check_incremental_decoder<Policy>());
  static constexpr std::string_view name = "MegatronActorRolloutRefWorker";

  /// A static mesh's world size is checked against the group's ranks here (the keys in init_model).
  explicit MegatronActorRolloutRefWorker(hybridflow::WorkerContext& context) : context_(&context) {
    layouts_type::check_ranks(context.world_size);
  }

  /// The sizes the configuration gives the meshes over `ranks` (the actor pool's ranks).
  static LayoutSizes layout_sizes(const PPOConfig& config, std::int64_t ranks) {
    const auto& megatron = config.actor_rollout_ref.actor.megatron;
    return {.ranks = ranks,
            .train_tp = megatron.tensor_model_parallel_size,
            .train_pp = megatron.pipeline_model_parallel_size,
            .gen_tp = config.actor_rollout_ref.rollout.tensor_model_parallel_size};
  }

  /// The training and generation meshes over `ranks` from the configuration (checked against the
  /// static sizes and the pair's rules; errors name the keys).
  static layouts_type layouts(const PPOConfig& config, std::int64_t ranks) {
    return layouts_type::from_sizes(layout_sizes(config, ranks));
  }

  /// The group's (tp, dp, pp) mesh over `ranks` from the configuration: tp from
  /// actor_rollout_ref.actor.megatron.tensor_model_parallel_size, dp the ranks left over (the
  /// training mesh's sizes in the runtime's Megatron-order mesh).
  static hybridflow::GroupMesh group_mesh(const PPOConfig& config, int ranks) {
    return group_mesh_of(layouts(config, ranks).train);
  }

  /// verl's init_model: the dense actor from Models, cut into this rank's TP shard (every rank
  /// reads the whole model once, then keeps its shard), the reference likewise, AdamW on the
  /// shards and the learning-rate schedule.
  void init_model(const std::vector<std::string>& config_overrides, std::int64_t total_training_steps) {
    config_ = load_ppo_config(config_overrides);
    algorithm_ = PPOAlgorithm::from_config(config_);
    VERL_CHECK_ARG(context_->group != nullptr, "{}: needs the worker group's communicator (run it under the HybridFlow runtime)",
                   name);
    layouts_.emplace(layouts(config_, context_->world_size));
    const TrainMesh& train = layouts_->train;
    const hybridflow::GroupMesh mesh = context_->mesh.value_or(group_mesh_of(train));
    const auto tp = static_cast<int>(train.size(parallel::AxisKind::tp));
    VERL_CHECK_ARG(mesh == group_mesh_of(train),
                   "{}: the group's mesh {} does not match the training mesh {} ({}) from "
                   "actor_rollout_ref.actor.megatron.tensor_model_parallel_size = {} (spawn the group with "
                   "group_mesh(config, ranks))",
                   name, mesh.to_string(), train.to_string(), layouts_type::describe(),
                   config_.actor_rollout_ref.actor.megatron.tensor_model_parallel_size);
    const std::int64_t rank = context_->rank;
    tp_rank_ = static_cast<int>(train.coord(rank, parallel::AxisKind::tp));
    dp_rank_ = static_cast<int>(train.coord(rank, parallel::AxisKind::dp));
    dp_size_ = static_cast<Index>(train.size(parallel::AxisKind::dp));
    parallel::MpiCommunicator& group = *context_->group;
    // Collective splits over the group, in the same order on every rank: the DP group (the
    // training mesh's slice along dp: same tp coordinate), then one TP group per model (its slice
    // along tp; each model owns its communicator).
    dp_.emplace(split_along(group, train, rank, parallel::AxisKind::dp));
    // The pipeline group (the slice along pp: same tp and dp coordinates), rank s at stage s.
    pp_size_ = static_cast<int>(train.size(parallel::AxisKind::pp));
    pp_rank_ = static_cast<int>(train.coord(rank, parallel::AxisKind::pp));
    if (pp_size_ > 1) pp_.emplace(split_along(group, train, rank, parallel::AxisKind::pp));
    Dense dense = Models::actor(config_);
    layouts_type::check_model_heads(dense.config().num_attention_heads, dense.config().num_key_value_heads,
                                    "actor_rollout_ref.model.path");
    check_tensor_parallel_fits(config_, dense.config());
    facts_ = dense_facts(dense);
    std::optional<Dense> dense_reference;
    if (algorithm_.needs_reference()) dense_reference.emplace(Models::reference(config_, dense));
    const model::PipelineStageLayers stage = pipeline_stage(config_, dense.config(), pp_rank_, pp_size_);
    actor_.emplace(dense, Communicator(split_along(group, train, rank, parallel::AxisKind::tp)), stage);
    if (dense_reference)
      reference_.emplace(*dense_reference, Communicator(split_along(group, train, rank, parallel::AxisKind::tp)), stage);
    // Megatron's sequence parallelism (acts at tp > 1): the actor and its reference, a TP copy in
    // this worker, alike (the ref's own megatron keys act only with its strategy=megatron, refused by name).
    if (config_.actor_rollout_ref.actor.megatron.sequence_parallel && tp > 1) {
      actor_->set_sequence_parallel(true);
      if (reference_) reference_->set_sequence_parallel(true);
    }
    // The generation layout (tg > 1): the micro-DP groups and generation TP groups of the reshard
    // plan between the two meshes (tg divides tp: checked by layouts()).
    tp_size_ = tp;
    tg_ = static_cast<int>(layouts_->generation.size(parallel::AxisKind::tp));
    VERL_CHECK_ARG(pp_size_ == 1 || tg_ == 1,
                   "{}: expected 1 with actor_rollout_ref.actor.megatron.pipeline_model_parallel_size = {} > 1 (the "
                   "generation gathers every stage's layers into a dense copy; TP-sharded generation from a pipeline is "
                   "not built), got {}",
                   detail::gen_tp_key, pp_size_, tg_);
    if (tg_ > 1) {
      const auto plan = parallel::make_reshard_plan(train, layouts_->generation);
      VERL_CHECK_ARG(plan.geometry().train_coords(rank) == (parallel::ParallelCoords{tp_rank_, 0, dp_rank_}),
                     "{}: rank {} is at tp={} dp={} in the group's mesh, the plan's training mesh puts it elsewhere", name,
                     rank, tp_rank_, dp_rank_);
      const parallel::ParallelCoords gen = plan.generation_coords(rank);
      micro_dp_.emplace(group.split(static_cast<int>(plan.gather_group_index(rank)),
                                    static_cast<int>(*plan.micro_dp_group(rank).index_of(rank))));
      generation_color_ = static_cast<int>(gen.dp);
      generation_key_ = static_cast<int>(gen.tp);
    }
    optimizer_.emplace(adamw_config(config_.actor_rollout_ref.actor.optim));
    if (config_.actor_rollout_ref.actor.megatron.use_distributed_optimizer && dp_size_ > 1) {
      std::vector<std::int64_t> sizes;
      for (const auto& p : parameter_refs(*actor_)) sizes.push_back(static_cast<std::int64_t>(p.value.size()));
      distributed_optimizer_.emplace(std::move(sizes), dp_rank_, static_cast<int>(dp_size_));
    }
    scheduler_.emplace(lr_scheduler(config_.actor_rollout_ref.actor.optim, total_training_steps));
    precision_ = cpu::parse_decode_precision(config_.actor_rollout_ref.rollout.dtype, "actor_rollout_ref.rollout.dtype");
  }

  [[nodiscard]] PolicyFacts policy_facts() const {
    require_model();
    return facts_;
  }

  /// verl's generate_sequences with the 3D-HybridEngine's reshard (tp -> tg = 1) around it: the
  /// dense weights gathered from the TP group, this DP group's prompts generated, the copy
  /// dropped. meta_info["metrics"]: timing_s/reshard, perf/reshard_bytes_received,
  /// perf/peak_param_bytes (see the file's comment).
  data::DataProto generate_sequences(const data::DataProto& prompts) {
    Policy& actor = require_model();
    const rollout::SamplingParams params = sampling_params_from_json(prompts.meta_info().at("sampling_params"));
    rollout::PromptBatch batch{int_column(prompts, keys::input_ids), float_column(prompts, keys::attention_mask), {}};
    for (const std::int64_t bits : prompts.non_tensor<std::int64_t>(keys::seed)) batch.seeds.push_back(static_cast<std::uint64_t>(bits));
    if (tg_ > 1) return generate_sharded(actor, std::move(batch), params);

    const auto start = std::chrono::steady_clock::now();
    actor.communicator().reset_counts();
    if (pp_) pp_->reset_counts();
    std::optional<Dense> dense(pp_ ? actor.gather_dense_over_stages(*pp_, misplace_blocks_) : actor.gather_dense(misplace_blocks_));
    const std::int64_t received = actor.communicator().received_bytes() + (pp_ ? pp_->received_bytes() : 0);
    if (precision_ != cpu::DecodePrecision::float32) dense->set_decode_precision(precision_);
    const double reshard_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const std::int64_t peak = parameter_bytes(actor) + parameter_bytes(*dense);

    rollout::RolloutOutput out = [&] {
      auto engine = make_rollout_engine(*dense);
      return engine.generate(batch, params);
    }();
    dense.reset();  // the generation copy is dropped: back to the training layout

    return rollout_result(std::move(out), reshard_s, received, peak);
  }

  /// verl's compute_log_prob (old_log_probs, entropys, sum_pi_squared when asked), on the shards.
  data::DataProto compute_log_prob(const data::DataProto& batch) {
    const auto& rollout = config_.actor_rollout_ref.rollout;
    const bool sum_pi_squared = config_.actor_rollout_ref.actor.calculate_sum_pi_squared;
    ResponseStatistics stats =
        statistics(require_model(), batch, {.entropy = true, .sum_pi_squared = sum_pi_squared},
                   forward_micro_batch_size(rollout.log_prob_micro_batch_size_per_gpu, rollout.log_prob_micro_batch_size,
                                            dp_size_, batch.size()));
    if (!require_model().last_stage()) return {};  // the last stage's rows are collected
    data::DataProto out;
    out.set(std::string(keys::old_log_probs), std::move(stats.log_probs));
    out.set(std::string(keys::entropys), std::move(stats.entropy));
    if (sum_pi_squared) out.set(std::string(keys::sum_pi_squared), std::move(stats.sum_pi_squared));
    return out;
  }

  /// verl's compute_ref_log_prob (ref_log_prob), on the reference's shards.
  data::DataProto compute_ref_log_prob(const data::DataProto& batch) {
    require_model();
    VERL_CHECK_ARG(reference_.has_value(),
                   "compute_ref_log_prob: this actor worker has no reference policy (no KL term in the configuration "
                   "needs one)");
    const auto& ref = config_.actor_rollout_ref.ref;
    ResponseStatistics stats = statistics(
        *reference_, batch, {},
        forward_micro_batch_size(ref.log_prob_micro_batch_size_per_gpu, ref.log_prob_micro_batch_size, dp_size_, batch.size()));
    if (!reference_->last_stage()) return {};
    data::DataProto out;
    out.set(std::string(keys::ref_log_prob), std::move(stats.log_probs));
    return out;
  }

  /// verl's update_actor, as ActorRolloutRefWorker's with the DP reductions over the DP group and
  /// the gradient norm over the whole (TP-sharded) model.
  data::DataProto update_actor(const data::DataProto& batch) {
    if (pp_) return update_actor_pipelined(batch);
    return update_actor_rows(
        require_model(), batch, config_, algorithm_, *optimizer_, *scheduler_, dp_size_,
        [&](double value) { return dp_sum(value); },
        [&](double grad_clip, std::int64_t& updates, std::int64_t& nonfinite) {
          return optimizer_step(require_model(), grad_clip, updates, nonfinite);
        },
        // The TP ranks of a DP group computed the same values: the mean over the DP group.
        [&](Metrics& metrics) {
          if (dp_size_ > 1) reduce_metrics_over_ranks(*dp_, metrics);
        });
  }

  /// The actor's state as the dense worker saves it (full tensors, full AdamW moments): gathered
  /// from the TP group on every rank (collective, hence one_to_all); the group's first rank
  /// returns it, the others an empty state (the controller keeps the first).
  [[nodiscard]] RoleState checkpoint_state() {
    Policy& actor = require_model();
    // This TP shard's moments: this rank's own, or gathered from the DP group's slices.
    const optim::AdamW::State moments = distributed_optimizer_ ? distributed_optimizer_->gather_moments(*dp_) : optimizer_->state();
    // Under pipeline parallelism each stage's (tp 0, dp 0) rank gathers its stage, and the later
    // stages send theirs to the first (rank 0) after it, in stage order: the whole model's
    // parameter order (embedding, layers, norm, head), as the dense worker saves it.
    const bool keeps = pp_ ? tp_rank_ == 0 && dp_rank_ == 0 : context_->rank == 0;
    RoleState state = gather_tensor_parallel_state(actor, moments, *scheduler_, keeps);
    if (pp_ && keeps) collect_stage_states(*pp_, pp_rank_, pp_size_, state, "actor");
    if (context_->rank != 0) return {};
    return state;
  }

  /// Restores a full (dense-layout) checkpoint_state() on every rank: each keeps its shards (this
  /// stage's tensors; the others' are skipped), the moments of a stage starting at the parameters
  /// of the stages before it.
  void load_checkpoint_state(const RoleState& state) {
    Policy& actor = require_model();
    optim::AdamW::State moments =
        load_tensor_parallel_state(actor, state, *scheduler_, "actor",
                                   pp_ ? parameters_before_stage(actor, *pp_, pp_rank_, pp_size_) : 0);
    if (distributed_optimizer_) {
      distributed_optimizer_->load_moments(moments);  // this rank's slice of its TP shard's moments
    } else {
      optimizer_->load_state(std::move(moments));
    }
  }

  /// Writes the actor as a Hugging Face folder (Models::save) from the gathered dense weights
  /// (every stage's layers under pipeline parallelism): every rank gathers (collective), the
  /// group's first rank writes and returns the path.
  std::string export_actor(const std::string& folder, const std::string& adapter_folder) {
    Dense dense = pp_ ? require_model().gather_dense_over_stages(*pp_) : require_model().gather_dense();
    if (context_->rank != 0) return {};
    if constexpr (requires(const Dense& p) { Models::save(p, folder, adapter_folder, config_); }) {
      return Models::save(dense, folder, adapter_folder, config_);
    } else {
      ::verl::detail::throw_invalid_argument("export_actor: this worker's Models type has no save(...) for '{}'", folder);
    }
  }

  using methods = TypeList<
      hybridflow::Method<&MegatronActorRolloutRefWorker::init_model, hybridflow::Dispatch::one_to_all, "init_model">,
      hybridflow::Method<&MegatronActorRolloutRefWorker::policy_facts, hybridflow::Dispatch::rank_zero, "policy_facts">,
      hybridflow::Method<&MegatronActorRolloutRefWorker::generate_sequences, hybridflow::Dispatch::megatron_compute_proto,
                         "generate_sequences">,
      hybridflow::Method<&MegatronActorRolloutRefWorker::compute_log_prob, hybridflow::Dispatch::megatron_compute_proto,
                         "compute_log_prob">,
      hybridflow::Method<&MegatronActorRolloutRefWorker::compute_ref_log_prob,
                         hybridflow::Dispatch::megatron_compute_proto, "compute_ref_log_prob">,
      hybridflow::Method<&MegatronActorRolloutRefWorker::update_actor, hybridflow::Dispatch::megatron_compute_proto,
                         "update_actor">,
      hybridflow::Method<&MegatronActorRolloutRefWorker::checkpoint_state, hybridflow::Dispatch::one_to_all,
                         "checkpoint_state">,
      hybridflow::Method<&MegatronActorRolloutRefWorker::load_checkpoint_state, hybridflow::Dispatch::one_to_all,
                         "load_checkpoint_state">,
      hybridflow::Method<&MegatronActorRolloutRefWorker::export_actor, hybridflow::Dispatch::one_to_all, "export_actor">>;

  // ---- in-process access and testing hooks ----------------------------------------------------
  [[nodiscard]] Policy& actor() { return require_model(); }
  /// The training and generation meshes (after init_model).
  [[nodiscard]] const layouts_type& mesh_layouts() const {
    VERL_CHECK_ARG(layouts_.has_value(), "{}: init_model must be called before any other method", name);
    return *layouts_;
  }
  /// The AdamW moment elements (exp_avg's; exp_avg_sq holds as many) this rank keeps: its TP
  /// shard's, or its 1/dp slice of them with the distributed optimizer.
  [[nodiscard]] std::int64_t optimizer_state_elements() const {
    if (distributed_optimizer_) return static_cast<std::int64_t>(distributed_optimizer_->state().exp_avg.size());
    std::int64_t elements = 0;
    for (const auto& m : optimizer_->state().exp_avg) elements += static_cast<std::int64_t>(m.size());
    return elements;
  }
  /// Whether Megatron's distributed optimizer acts (use_distributed_optimizer with dp > 1).
  [[nodiscard]] bool distributed_optimizer() const { return distributed_optimizer_.has_value(); }
  /// This rank's pipeline stage and the stages (1 without pipeline parallelism).
  [[nodiscard]] int pipeline_rank() const { return pp_rank_; }
  [[nodiscard]] int pipeline_size() const { return pp_size_; }
  /// Testing hook: the reshard writes rank r's blocks where rank (r + k) % tp's belong (a wrong
  /// shard assignment; results must then differ). 0: correct.
  void set_misplaced_reshard_for_testing(int k) { misplace_blocks_ = k; }

 private:
  /// The rows and the reshard's metrics. The byte figures are per-rank: every rank of the group
  /// reports the max over the group's ranks (collective), so that the ranks the dispatch collects
  /// (tp rank 0 of each DP group) carry the figure of every rank: equal on every rank when the
  /// plan is balanced, otherwise the worst rank's (the controller also keeps the max over the
  /// collected ranks: detail::worker_meta_metrics).
  data::DataProto rollout_result(rollout::RolloutOutput out, double reshard_s, std::int64_t received, std::int64_t peak) {
    std::array<std::int64_t, 2> figures{received, peak};
    context_->group->all_reduce(std::span<std::int64_t>(figures), parallel::ReduceOp::max);
    data::DataProto result = rollout_rows(std::move(out));
    result.meta_info()["metrics"] = {{"timing_s/reshard", reshard_s},
                                     {"perf/reshard_bytes_received", figures[0]},
                                     {"perf/peak_param_bytes", figures[1]}};
    return result;
  }

  /// generate_sequences with tg > 1 (see the file's comment): lend, decode this generation
  /// group's share, take back, gather the shares over the micro-DP group.
  data::DataProto generate_sharded(Policy& actor, rollout::PromptBatch batch, const rollout::SamplingParams& params) {
    const Index rows = batch.size(), width = batch.input_ids.cols();
    // Seeds by the prompt's index in the chunk, so that a share draws what the whole chunk would.
    if (batch.seeds.empty()) {
      for (Index b = 0; b < rows; ++b) batch.seeds.push_back(rollout::derive_seed(params.seed, static_cast<std::uint64_t>(b)));
    }
    const auto start = std::chrono::steady_clock::now();
    micro_dp_->reset_counts();
    model::ParameterMemoryMeter meter;
    std::optional<Policy> generation(actor.lend_to_generation(
        *micro_dp_, Communicator(context_->group->split(generation_color_, generation_key_)), meter, misplace_blocks_));
    const std::int64_t received = micro_dp_->received_bytes();
    const double reshard_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (precision_ != cpu::DecodePrecision::float32) generation->set_decode_precision(precision_);

    // This generation group's contiguous share of the chunk: part m of the micro-DP group's kt.
    const int kt = micro_dp_->size(), m = micro_dp_->rank();
    const auto share = [&](int part) { return rows * part / kt; };
    const Index begin = share(m), count = share(m + 1) - begin, n = params.n, response = params.max_response_length;
    rollout::RolloutOutput part;
    if (count > 0) {
      rollout::PromptBatch mine{batch.input_ids.middleRows(begin, count), batch.attention_mask.middleRows(begin, count),
                                std::vector<std::uint64_t>(batch.seeds.begin() + begin, batch.seeds.begin() + begin + count)};
      auto engine = make_rollout_engine(*generation);
      part = engine.generate(mine, params);
    } else {
      part.responses.resize(0, response);
      part.response_mask.resize(0, response);
      part.rollout_log_probs.resize(0, response);
      part.input_ids.resize(0, width + response);
      part.attention_mask.resize(0, width + response);
      part.position_ids.resize(0, width + response);
    }
    actor.take_back_from_generation(*generation, meter);
    generation.reset();  // the generation copy is dropped: back to the training layout

    // Every rank of the micro-DP group holds one share (the micro-DP group meets every generation
    // group of the training DP group once): gather them in chunk order.
    rollout::RolloutOutput out;
    const auto gather = [&]<class T>(const RowMatrix<T>& mine, RowMatrix<T>& whole) {
      const Index cols = mine.cols();
      std::vector<std::int64_t> counts(static_cast<std::size_t>(kt));
      for (int p = 0; p < kt; ++p) counts[static_cast<std::size_t>(p)] = (share(p + 1) - share(p)) * n * cols;
      whole.resize(rows * n, cols);
      micro_dp_->all_gather_v(std::span<const T>(mine.data(), static_cast<std::size_t>(mine.size())),
                              std::span<T>(whole.data(), static_cast<std::size_t>(whole.size())),
                              std::span<const std::int64_t>(counts));
    };
    gather(part.responses, out.responses);
    gather(part.response_mask, out.response_mask);
    gather(part.rollout_log_probs, out.rollout_log_probs);
    gather(part.input_ids, out.input_ids);
    gather(part.attention_mask, out.attention_mask);
    gather(part.position_ids, out.position_ids);
    return rollout_result(std::move(out), reshard_s, received, meter.peak());
  }

  // ---- pipeline parallelism (actor_rollout_ref.actor.megatron.pipeline_model_parallel_size > 1) ----

  /// This rank's stage of the model's layers (Megatron's even split), the errors naming the keys.
  static model::PipelineStageLayers pipeline_stage(const PPOConfig& config, const model::HfModelConfig& shape, int stage,
                                                   int stages) {
    if (stages == 1) return {};
    VERL_CHECK_ARG(shape.num_hidden_layers % stages == 0,
                   "{}: expected a divisor of the model's num_hidden_layers = {} (Megatron splits the layers evenly over "
                   "the stages; actor_rollout_ref.model.path = '{}'), got {}",
                   detail::train_pp_key, shape.num_hidden_layers, config.actor_rollout_ref.model.path, stages);
    VERL_CHECK_ARG(!shape.tie_word_embeddings,
                   "{}: expected 1 for a model with tie_word_embeddings = true (actor_rollout_ref.model.path = '{}': the "
                   "first stage's embedding and the last stage's LM head would be one tensor on two stages, which this "
                   "worker does not build), got {}",
                   detail::train_pp_key, config.actor_rollout_ref.model.path, stages);
    return model::pipeline_stage_layers(shape, stage, stages);
  }

  /// The last stage as update_actor_rows and response_statistics drive it (pipeline_stages.hpp).
  using LastStage = PipelineLastStage<Policy, Communicator, model::ForwardOptions, model::CausalLMCotangents<float>>;

  PipelinePass pass_of(const data::DataProto& batch, std::vector<std::pair<Index, Index>> rows, bool forward_only) const {
    return pipeline_pass(require_model(), batch, std::move(rows), forward_only, pp_rank_, pp_size_);
  }

  /// response_statistics, through the pipeline (forward only) when there are stages: the last
  /// stage's statistics (the other stages' are empty).
  ResponseStatistics statistics(Policy& model, const data::DataProto& batch, StatisticsWanted wanted, Index micro) {
    if (!pp_) return response_statistics(model, batch, wanted, micro, rollout_temperature());
    std::vector<std::pair<Index, Index>> rows;
    for (Index b = 0; b < batch.size(); b += micro) rows.emplace_back(b, std::min(batch.size(), b + micro));
    PipelinePass pass = pass_of(batch, std::move(rows), /*forward_only=*/true);
    if (model.last_stage()) {
      LastStage last(model, *pp_, {std::move(pass)});
      ResponseStatistics stats = response_statistics(last, batch, wanted, micro, rollout_temperature());
      last.finish_pass();
      return stats;
    }
    run_earlier_stage(model, *pp_, batch, std::span<const PipelinePass>(&pass, 1), false, [] {});
    return {};
  }

  /// update_actor with pipeline stages: every stage runs the same micro-batches of each optimizer
  /// step (update_micro_batches) with the 1F1B schedule; the last stage computes the losses
  /// (update_actor_rows over LastStage) and returns the metrics, the others run their layers;
  /// every stage steps its own parameters with the global norm (optimizer_step sums it over the
  /// stages).
  data::DataProto update_actor_pipelined(const data::DataProto& batch) {
    Policy& actor = require_model();
    std::vector<PipelinePass> passes;
    for (auto& rows : update_micro_batches(batch.size(), config_, dp_size_)) {
      passes.push_back(pass_of(batch, std::move(rows), /*forward_only=*/false));
    }
    const auto step = [&](double grad_clip, std::int64_t& updates, std::int64_t& nonfinite) {
      return optimizer_step(actor, grad_clip, updates, nonfinite);
    };
    if (actor.last_stage()) {
      LastStage last(actor, *pp_, std::move(passes));
      data::DataProto result = update_actor_rows(
          last, batch, config_, algorithm_, *optimizer_, *scheduler_, dp_size_, [&](double value) { return dp_sum(value); },
          [&](double grad_clip, std::int64_t& updates, std::int64_t& nonfinite) {
            last.finish_pass();  // the last gradient goes out before the stages reduce the norm
            return step(grad_clip, updates, nonfinite);
          },
          [&](Metrics& metrics) {
            if (dp_size_ > 1) reduce_metrics_over_ranks(*dp_, metrics);
          });
      VERL_CHECK_ARG(last.finished(), "pipeline: the last stage ran fewer passes than planned");
      return result;
    }
    // The learning rate as update_actor_rows sets it; the metrics are the last stage's.
    scheduler_->apply(*optimizer_);
    std::int64_t updates = 0, nonfinite = 0;
    run_earlier_stage(actor, *pp_, batch, std::span<const PipelinePass>(passes), true,
                      [&] { (void)step(config_.actor_rollout_ref.actor.grad_clip, updates, nonfinite); });
    scheduler_->step();
    return {};
  }

  /// The runtime's (tp, dp, pp) group mesh with the training mesh's sizes.
  static hybridflow::GroupMesh group_mesh_of(const TrainMesh& train) {
    using parallel::AxisKind;
    return hybridflow::GroupMesh(train.size(AxisKind::tp), train.size(AxisKind::dp), train.size(AxisKind::pp));
  }

  /// This rank's communicator over its slice of `mesh` along `axes` (collective over `group`):
  /// one colour per slice, ranks ordered by their place in it.
  template <parallel::MeshType M>
  static parallel::MpiCommunicator split_along(parallel::MpiCommunicator& group, const M& mesh, std::int64_t rank,
                                               parallel::AxisSet axes) {
    const parallel::RankGroup slice = mesh.group(rank, axes);
    return group.split(static_cast<int>(mesh.group_index(rank, axes)), static_cast<int>(*slice.index_of(rank)));
  }

  Policy& require_model() {
    VERL_CHECK_ARG(actor_.has_value(), "{}: init_model must be called before any other method", name);
    return *actor_;
  }
  const Policy& require_model() const { return const_cast<MegatronActorRolloutRefWorker&>(*this).require_model(); }

  static PolicyFacts dense_facts(const Dense& dense) {
    PolicyFacts facts;
    facts.vocab_size = dense.vocab_size();
    facts.parameter_count = static_cast<std::int64_t>(model::parameter_count(dense));
    for (const auto id : dense.config().eos_token_ids) facts.eos_token_ids.push_back(id);
    if (dense.config().pad_token_id) facts.pad_token_id = *dense.config().pad_token_id;
    return facts;
  }

  /// The bytes of a model's parameter buffers (its allocated tensors).
  template <class M>
  static std::int64_t parameter_bytes(M& model) {
    std::int64_t bytes = 0;
    model.for_each_parameter([&](const auto& p) { bytes += static_cast<std::int64_t>(p.value.size_bytes()); });
    return bytes;
  }

  float rollout_temperature() const { return static_cast<float>(config_.actor_rollout_ref.rollout.temperature); }

  double dp_sum(double value) {
    if (dp_size_ == 1) return value;
    std::vector<double> buffer{value};
    dp_->all_reduce(std::span<double>(buffer), parallel::ReduceOp::sum);
    return buffer[0];
  }

  /// Averages gradients over the DP group (or reduce-scatters them with the distributed
  /// optimizer), clips with the whole model's norm over TP and the stages, and steps
  /// (megatron_optimizer_step). Returns the norm.
  float optimizer_step(Policy& actor, double grad_clip, std::int64_t& updates, std::int64_t& nonfinite) {
    const MegatronStepGroups<Communicator> groups{
        .dp = &*dp_, .dp_size = dp_size_, .pipeline = pp_ ? &*pp_ : nullptr, .model_group = context_->group};
    return megatron_optimizer_step(actor, groups, *optimizer_, distributed_optimizer_ ? &*distributed_optimizer_ : nullptr,
                                   grad_clip, "actor_rollout_ref.actor.grad_clip", updates, nonfinite);
  }

  hybridflow::WorkerContext* context_;
  std::optional<layouts_type> layouts_;
  PPOConfig config_;
  PPOAlgorithm algorithm_;
  int tp_rank_ = 0, dp_rank_ = 0;
  Index dp_size_ = 1;
  std::optional<parallel::MpiCommunicator> dp_;
  int pp_rank_ = 0, pp_size_ = 1;
  std::optional<Communicator> pp_;  ///< the pipeline group (pp > 1): stage s is rank s; counts the reshard's bytes
  PolicyFacts facts_;
  std::optional<Policy> actor_;
  std::optional<Policy> reference_;
  std::optional<optim::AdamW> optimizer_;
  /// Megatron's distributed optimizer (use_distributed_optimizer with dp > 1); optimizer_ then
  /// only carries the hyper-parameters (the scheduler's learning rate).
  std::optional<parallel::DistributedAdamW> distributed_optimizer_;
  std::optional<optim::LrScheduler<>> scheduler_;
  cpu::DecodePrecision precision_ = cpu::DecodePrecision::float32;
  int misplace_blocks_ = 0;
  // The generation layout (tg > 1).
  int tp_size_ = 1, tg_ = 1;
  std::optional<Communicator> micro_dp_;  ///< the plan's micro-DP group (counts the reshard's bytes)
  int generation_color_ = 0, generation_key_ = 0;
};

}  // namespace verl::trainer
