// FSDP's parameter sharding (verl's fsdp_config.fsdp_size; FULL_SHARD, or HYBRID_SHARD when it is
// smaller than the group) for a data-parallel worker's model: the group's ranks form verl's
// device mesh (ddp, fsdp) (create_device_mesh: fsdp the inner dimension, ranks [g f, (g+1) f) one
// FSDP group), each rank keeping its 1/f shard of the flat parameter, of the gradient and of
// AdamW's moments (parallel::FullyShardedParameters). The model itself holds no tensors at rest:
// a call that runs it gathers every tensor (the whole model at once, not a decoder layer at a
// time: our model's forward has no per-layer hook) and frees them at the end (FullModel).
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "verl/core/error.hpp"
#include "verl/optim/adamw.hpp"
#include "verl/optim/parameter.hpp"
#include "verl/parallel/fully_sharded_parameters.hpp"
#include "verl/parallel/process_group.hpp"
#include "verl/trainer/workers/role_state.hpp"

namespace verl::trainer {

/// fsdp_size for a group of `world` ranks: -1 is the whole group; it must divide `world`. `key`
/// names the setting in errors.
inline int resolve_fsdp_size(std::int64_t fsdp_size, int world, std::string_view key) {
  VERL_CHECK_ARG(fsdp_size == -1 || fsdp_size >= 1,
                 "{}: expected -1 (every rank of the worker group) or a positive number of ranks, got {}", key, fsdp_size);
  const std::int64_t size = fsdp_size == -1 ? world : fsdp_size;
  VERL_CHECK_ARG(size <= world && world % size == 0,
                 "{}: expected a divisor of the worker group's world size {} (or -1), got {}", key, world, fsdp_size);
  return static_cast<int>(size);
}

/// A model type whose parameter storage can be freed and given back (the reference transformer's
/// release_parameter_storage / allocate_parameter_storage).
template <class M>
concept ReleasesParameterStorage = requires(M& model) {
  model.release_parameter_storage();
  model.allocate_parameter_storage();
};

/// Frees / reallocates a model's parameter storage (no-ops for a type that cannot: the workers
/// refuse to shard those, so that these calls compile for every model type).
template <class M>
void free_parameter_tensors(M& model) {
  if constexpr (ReleasesParameterStorage<M>) model.release_parameter_storage();
}
template <class M>
void allocate_parameter_tensors(M& model) {
  if constexpr (ReleasesParameterStorage<M>) model.allocate_parameter_storage();
}

/// The bytes of parameters, gradients and optimizer moments a rank holds, counted over the
/// buffers allocated.
struct HeldParameterBytes {
  std::int64_t parameters = 0, gradients = 0, optimizer = 0;
};

/// Held bytes of a model that keeps its full tensors (the replicated engine, fsdp_size 1).
template <class M>
HeldParameterBytes replicated_held_bytes(M& model, const optim::AdamW& optimizer) {
  HeldParameterBytes held;
  model.for_each_parameter([&](const auto& p) {
    held.parameters += static_cast<std::int64_t>(p.value.size_bytes());
    held.gradients += static_cast<std::int64_t>(p.grad.size_bytes());
  });
  for (const auto* moments : {&optimizer.state().exp_avg, &optimizer.state().exp_avg_sq})
    for (const auto& m : *moments) held.optimizer += static_cast<std::int64_t>(m.size() * sizeof(float));
  return held;
}

/// One model's shards over its FSDP group (built collectively over the worker group).
template <class Policy>
class FsdpShardedModel {
 public:
  /// Splits `group` into FSDP groups of `fsdp_size` and replicate groups, keeps this rank's shard
  /// of `model`'s tensors and frees the model's.
  FsdpShardedModel(Policy& model, parallel::ProcessGroup& group, int fsdp_size)
      : fsdp_(group.split(group.rank() / fsdp_size, group.rank() % fsdp_size)),
        replicate_(group.split(group.rank() % fsdp_size, group.rank() / fsdp_size)),
        world_(group.size()),
        flat_(tensor_sizes(model), fsdp_.rank(), fsdp_.size()) {
    std::vector<optim::ParameterRef> refs = parameter_refs(model);
    flat_.shard_from(refs);
    free_parameter_tensors(model);
  }

  /// The model's full tensors for the length of a call: gathered on construction, freed (values
  /// and gradients) on destruction.
  class FullModel {
   public:
    FullModel(FsdpShardedModel& owner, Policy& model) : model_(&model) { owner.gather(model); }
    FullModel(const FullModel&) = delete;
    FullModel& operator=(const FullModel&) = delete;
    ~FullModel() { free_parameter_tensors(*model_); }
    Policy& operator*() const { return *model_; }

   private:
    Policy* model_;
  };

  /// Collective over the FSDP group: the model's tensors allocated and filled from the shards.
  void gather(Policy& model) {
    allocate_parameter_tensors(model);
    std::vector<optim::ParameterRef> refs = value_refs(model);
    flat_.gather_into(fsdp_, refs);
  }

  /// verl's FSDP optimizer step on the shards, from the model's full local gradients: reduce-
  /// scattered over the FSDP group and all-reduced over the replicas (the sum over every rank),
  /// divided by `data_parallel_ranks` (the world size, or the world over the Ulysses size when
  /// the ranks of a sequence-parallel group hold parts of the same rows' gradients: the
  /// replicated engine's average), clipped by the global norm from the shards, AdamW on the shard
  /// (skipped, and counted, when the norm is not finite). With `gather_after` the updated tensors
  /// are gathered back into the model (another mini-batch follows). Returns the norm.
  float optimizer_step(Policy& model, double grad_clip, const optim::AdamWConfig& config, std::int64_t data_parallel_ranks,
                       bool gather_after, std::int64_t& updates, std::int64_t& nonfinite) {
    VERL_CHECK_ARG(data_parallel_ranks >= 1 && world_ % data_parallel_ranks == 0,
                   "FsdpShardedModel::optimizer_step: data_parallel_ranks must divide the world size {}, got {}", world_,
                   data_parallel_ranks);
    std::vector<optim::ParameterRef> refs = parameter_refs(model);
    flat_.reduce_scatter_gradients(fsdp_, refs);
    if (replicate_.size() > 1) flat_.all_reduce_gradients(replicate_);
    flat_.scale_gradients(1.0f / static_cast<float>(data_parallel_ranks));
    const float norm = flat_.clip_gradients(fsdp_, grad_clip);
    ++updates;
    if (std::isfinite(norm)) {
      flat_.adamw_step(config);
    } else {
      ++nonfinite;
    }
    if (gather_after) flat_.gather_into(fsdp_, refs);
    return norm;
  }

  /// Collective: the moments in the full layout (checkpoints), on every rank.
  [[nodiscard]] optim::AdamW::State gather_moments() { return flat_.gather_moments(fsdp_); }

  /// Keeps this rank's shard of `model`'s (full, just loaded) tensors and of `moments`.
  void reshard(Policy& model, const optim::AdamW::State& moments) {
    std::vector<optim::ParameterRef> refs = value_refs(model);
    flat_.shard_from(refs);
    flat_.load_moments(moments);
  }

  [[nodiscard]] HeldParameterBytes held_bytes() const {
    const auto held = flat_.held_bytes();
    return {held.parameters, held.gradients, held.optimizer};
  }
  [[nodiscard]] const parallel::FullyShardedParameters& flat() const { return flat_; }
  [[nodiscard]] int fsdp_size() const { return fsdp_.size(); }

 private:
  static std::vector<std::int64_t> tensor_sizes(Policy& model) {
    std::vector<std::int64_t> sizes;
    model.for_each_parameter([&](const auto& p) { sizes.push_back(static_cast<std::int64_t>(p.value.size())); });
    return sizes;
  }
  /// The values only (a model whose gradients are not allocated, e.g. frozen or just gathered).
  static std::vector<optim::ParameterRef> value_refs(Policy& model) {
    std::vector<optim::ParameterRef> refs;
    model.for_each_parameter([&](const auto& p) { refs.push_back({p.value, {}, p.name}); });
    return refs;
  }

  parallel::ProcessGroup fsdp_, replicate_;
  int world_;
  parallel::FullyShardedParameters flat_;
};

}  // namespace verl::trainer
