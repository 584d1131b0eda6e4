// FSDP's parameter sharding (verl's fsdp_config.fsdp_size; FULL_SHARD, or HYBRID_SHARD when it is
// smaller than the group) for a data-parallel worker's model: the group's ranks form verl's
// device mesh (ddp, fsdp) (create_device_mesh: fsdp the inner dimension, ranks [g f, (g+1) f) one
// FSDP group), each rank keeping its 1/f shard of the flat parameter, of the gradient and of
// AdamW's moments (parallel::FullyShardedParameters), per FSDP unit: one per decoder layer and
// the root (FsdpShardedModel). The model itself holds no tensors at rest: a training or log-prob
// call gathers the root for the call and each layer around its forward and its backward
// (Layerwise, through the body's LayerParameterHooks); generation, checkpoints and exports
// gather the whole model (FullModel). Both free what they gathered at the end.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "verl/core/error.hpp"
#include "verl/model/transformer/layer_parameter_hooks.hpp"
#include "verl/model/transformer/weights.hpp"
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

/// A model whose decoder layers can be gathered one at a time: a DecoderBody that calls
/// LayerParameterHooks around each layer, and its tensors reachable one by one (the reference
/// transformer and its critic). Other sharded models are gathered whole for every call.
template <class M>
concept HasLayerwiseBody = requires(M& model, model::LayerParameterHooks* hooks) {
  model.body().set_layer_parameter_hooks(hooks);
  model.body().weights().layers.size();
  model.for_each_tensor([](model::ParameterTensor<typename M::scalar_type>&) {});
};

/// One model's shards over its FSDP group (built collectively over the worker group), in FSDP's
/// units: with a layerwise body, one flat parameter per decoder layer and a root unit for the
/// rest (embedding, final norm, head), as verl's auto-wrap policy wraps the decoder layers;
/// otherwise the whole model is one unit. The root unit is gathered for a whole call; a layer's
/// unit only while that layer computes (Layerwise), so a training call holds the root, one
/// layer's full tensors and the shards (FSDP's reshard_after_forward: a layer is gathered again
/// for its backward, and its gradients reduce-scattered into its shard right after it, added
/// over the micro-batches of a mini-batch).
template <class Policy>
class FsdpShardedModel {
 private:
  struct Unit {
    std::vector<std::size_t> tensors;  ///< indices in the model's for_each_parameter order
    parallel::FullyShardedParameters flat;
  };

  /// The body's hooks: layer l's unit (units_[l + 1]) gathered before its forward and its
  /// backward, freed after; after its backward its gradients are added to its shard.
  class LayerHooks final : public model::LayerParameterHooks {
   public:
    LayerHooks(FsdpShardedModel& owner, Policy& model) : owner_(&owner), model_(&model) {}
    void before_forward(std::size_t layer) override { owner_->gather_layer(*model_, layer, false); }
    void after_forward(std::size_t layer) override { owner_->free_layer(*model_, layer); }
    void before_backward(std::size_t layer) override { owner_->gather_layer(*model_, layer, true); }
    void after_backward(std::size_t layer) override {
      owner_->reduce_layer_gradients(*model_, layer);
      owner_->free_layer(*model_, layer);
    }

   private:
    FsdpShardedModel* owner_;
    Policy* model_;
  };

 public:
  /// Splits `group` into FSDP groups of `fsdp_size` and replicate groups, keeps this rank's shard
  /// of `model`'s tensors and frees the model's.
  FsdpShardedModel(Policy& model, parallel::ProcessGroup& group, int fsdp_size)
      : fsdp_(group.split(group.rank() / fsdp_size, group.rank() % fsdp_size)),
        replicate_(group.split(group.rank() % fsdp_size, group.rank() / fsdp_size)),
        world_(group.size()) {
    std::vector<std::int64_t> sizes;
    model.for_each_parameter([&](const auto& p) { sizes.push_back(static_cast<std::int64_t>(p.value.size())); });
    tensor_count_ = sizes.size();
    std::vector<std::vector<std::size_t>> members = unit_members(model, sizes.size());
    for (auto& tensors : members) {
      std::vector<std::int64_t> unit_sizes;
      for (const std::size_t k : tensors) unit_sizes.push_back(sizes[k]);
      units_.push_back({std::move(tensors), parallel::FullyShardedParameters(std::move(unit_sizes), fsdp_.rank(), fsdp_.size())});
    }
    const std::vector<optim::ParameterRef> refs = value_refs(model);
    for (Unit& unit : units_) unit.flat.shard_from(pick(refs, unit.tensors));
    free_parameter_tensors(model);
  }

  /// The model's full tensors for the length of a call (generation, checkpoints, exports):
  /// every unit gathered on construction, all freed (values and gradients) on destruction.
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

  /// A training or log-prob call's model: the root unit gathered for the call, each decoder
  /// layer's unit gathered around its forward and its backward (the body's hooks), everything
  /// freed on destruction. Without a layerwise body: FullModel's behaviour.
  class Layerwise {
   public:
    Layerwise(FsdpShardedModel& owner, Policy& model) : model_(&model), hooks_(owner, model) {
      owner.layers_held_ = owner.most_layers_held_ = 0;
      owner.gather_root(model);
      if constexpr (HasLayerwiseBody<Policy>) model.body().set_layer_parameter_hooks(&hooks_);
    }
    Layerwise(const Layerwise&) = delete;
    Layerwise& operator=(const Layerwise&) = delete;
    ~Layerwise() {
      if constexpr (HasLayerwiseBody<Policy>) model_->body().set_layer_parameter_hooks(nullptr);
      free_parameter_tensors(*model_);
    }
    Policy& operator*() const { return *model_; }

   private:
    Policy* model_;
    LayerHooks hooks_;
  };

  /// Collective over the FSDP group: every tensor allocated and filled from the shards.
  void gather(Policy& model) {
    allocate_parameter_tensors(model);
    const std::vector<optim::ParameterRef> refs = value_refs(model);
    for (const Unit& unit : units_) unit.flat.gather_into(fsdp_, pick(refs, unit.tensors));
  }

  /// verl's FSDP optimizer step on the shards: the root unit's full local gradients reduce-
  /// scattered over the FSDP group (the layers' were, after each backward), every unit's shard
  /// all-reduced over the replicas (the sum over every rank), divided by `data_parallel_ranks`
  /// (the world size, or the world over the Ulysses size when the ranks of a sequence-parallel
  /// group hold parts of the same rows' gradients: the replicated engine's average), clipped by
  /// the global norm from the shards (torch's per-tensor norms, in the model's tensor order),
  /// AdamW on each shard (skipped, and counted, when the norm is not finite); the layers'
  /// accumulated gradients start over. With `gather_after` the root's updated tensors are gathered
  /// back into the model (another mini-batch follows; the layers are gathered when they run).
  /// Returns the norm.
  float optimizer_step(Policy& model, double grad_clip, const optim::AdamWConfig& config, std::int64_t data_parallel_ranks,
                       bool gather_after, std::int64_t& updates, std::int64_t& nonfinite) {
    VERL_CHECK_ARG(data_parallel_ranks >= 1 && world_ % data_parallel_ranks == 0,
                   "FsdpShardedModel::optimizer_step: data_parallel_ranks must divide the world size {}, got {}", world_,
                   data_parallel_ranks);
    VERL_CHECK_ARG(grad_clip >= 0.0 && !std::isnan(grad_clip), "grad_clip: expected a value >= 0, got {}", grad_clip);
    Unit& root = units_.front();
    root.flat.reduce_scatter_gradients(fsdp_, pick(parameter_refs(model), root.tensors));
    std::vector<double> squares(tensor_count_, 0.0);
    for (Unit& unit : units_) {
      if (replicate_.size() > 1) unit.flat.all_reduce_gradients(replicate_);
      unit.flat.scale_gradients(1.0f / static_cast<float>(data_parallel_ranks));
      const std::vector<double> local = unit.flat.local_gradient_squares();
      for (std::size_t i = 0; i < unit.tensors.size(); ++i) squares[unit.tensors[i]] = local[i];
    }
    fsdp_.all_reduce(std::span<double>(squares), parallel::ReduceOp::sum);
    double sum = 0.0;
    for (const double square : squares) {
      const double norm = static_cast<float>(std::sqrt(square));  // torch's float32 per-tensor norm
      sum += norm * norm;
    }
    const float norm = static_cast<float>(std::sqrt(sum));
    const float coefficient = optim::detail::clip_coefficient(norm, grad_clip);
    ++updates;
    for (Unit& unit : units_) {
      if (coefficient != 1.0f) unit.flat.scale_gradients(coefficient);
      if (std::isfinite(norm)) unit.flat.adamw_step(config);
    }
    if (!std::isfinite(norm)) ++nonfinite;
    for (std::size_t u = 1; u < units_.size(); ++u) units_[u].flat.clear_gradients();
    if (gather_after) root.flat.gather_into(fsdp_, pick(value_refs(model), root.tensors));
    return norm;
  }

  /// Collective: the moments in the full layout (checkpoints), on every rank.
  [[nodiscard]] optim::AdamW::State gather_moments() {
    optim::AdamW::State full;
    full.step = units_.front().flat.optimizer_step_count();
    for (const Unit& unit : units_) {
      optim::AdamW::State part = unit.flat.gather_moments(fsdp_);
      if (part.exp_avg.empty()) continue;  // every unit steps together: none has moments yet
      full.exp_avg.resize(tensor_count_);
      full.exp_avg_sq.resize(tensor_count_);
      for (std::size_t i = 0; i < unit.tensors.size(); ++i) {
        full.exp_avg[unit.tensors[i]] = std::move(part.exp_avg[i]);
        full.exp_avg_sq[unit.tensors[i]] = std::move(part.exp_avg_sq[i]);
      }
    }
    return full;
  }

  /// Keeps this rank's shard of `model`'s (full, just loaded) tensors and of `moments`.
  void reshard(Policy& model, const optim::AdamW::State& moments) {
    const bool with_moments = !moments.exp_avg.empty() || !moments.exp_avg_sq.empty();
    VERL_CHECK_ARG(!with_moments || (moments.exp_avg.size() == tensor_count_ && moments.exp_avg_sq.size() == tensor_count_),
                   "state: expected the moments of {} tensors (exp_avg, exp_avg_sq), got {} and {}", tensor_count_,
                   moments.exp_avg.size(), moments.exp_avg_sq.size());
    const std::vector<optim::ParameterRef> refs = value_refs(model);
    for (Unit& unit : units_) {
      unit.flat.shard_from(pick(refs, unit.tensors));
      optim::AdamW::State part;
      part.step = moments.step;
      if (with_moments) {
        for (const std::size_t k : unit.tensors) {
          part.exp_avg.push_back(moments.exp_avg[k]);
          part.exp_avg_sq.push_back(moments.exp_avg_sq[k]);
        }
      }
      unit.flat.load_moments(part);
    }
  }

  [[nodiscard]] HeldParameterBytes held_bytes() const {
    HeldParameterBytes held;
    for (const Unit& unit : units_) {
      const auto bytes = unit.flat.held_bytes();
      held.parameters += bytes.parameters;
      held.gradients += bytes.gradients;
      held.optimizer += bytes.optimizer;
    }
    return held;
  }
  /// This rank's shards of the units' flat parameters, laid end to end (root first, then the
  /// layers in order), and their element counts and padding.
  [[nodiscard]] std::vector<float> shard_values() const {
    std::vector<float> values;
    for (const Unit& unit : units_) values.insert(values.end(), unit.flat.values().begin(), unit.flat.values().end());
    return values;
  }
  [[nodiscard]] std::int64_t shard_size() const {
    std::int64_t size = 0;
    for (const Unit& unit : units_) size += unit.flat.shard_size();
    return size;
  }
  [[nodiscard]] std::int64_t padding() const {
    std::int64_t padding = 0;
    for (const Unit& unit : units_) padding += unit.flat.padding();
    return padding;
  }
  /// The units' tensors (indices in for_each_parameter's order): the root first, then one per
  /// decoder layer when the model has a layerwise body.
  [[nodiscard]] std::vector<std::vector<std::size_t>> unit_tensors() const {
    std::vector<std::vector<std::size_t>> tensors;
    for (const Unit& unit : units_) tensors.push_back(unit.tensors);
    return tensors;
  }
  [[nodiscard]] int fsdp_size() const { return fsdp_.size(); }
  /// The most decoder layers whose full tensors were held at once during the last Layerwise call
  /// (1 when the layers are gathered one at a time; 0 without a layerwise body).
  [[nodiscard]] int most_layers_held() const { return most_layers_held_; }

 private:
  /// The units' members: with a layerwise body, the root (what no layer holds) then each layer's
  /// tensors; otherwise one unit of every tensor.
  static std::vector<std::vector<std::size_t>> unit_members(Policy& model, std::size_t count) {
    std::vector<std::vector<std::size_t>> units(1);
    if constexpr (HasLayerwiseBody<Policy>) {
      using Tensor = model::ParameterTensor<typename Policy::scalar_type>;
      std::vector<const Tensor*> order;
      model.for_each_tensor([&](Tensor& t) { order.push_back(&t); });
      VERL_CHECK_ARG(order.size() == count, "FsdpShardedModel: the model lists {} tensors and {} parameters", order.size(),
                     count);
      std::vector<bool> in_layer(count, false);
      const auto index_of = [&](const Tensor* t) {
        return static_cast<std::size_t>(std::find(order.begin(), order.end(), t) - order.begin());
      };
      auto& layers = model.body().weights().layers;
      for (auto& layer : layers) {
        std::vector<std::size_t>& unit = units.emplace_back();
        model::DecoderLayerWeights<typename Policy::scalar_type>::for_each(layer, [&](Tensor& t) {
          const std::size_t k = index_of(&t);
          VERL_CHECK_ARG(k < count, "FsdpShardedModel: layer tensor '{}' is not one of the model's parameters", t.name);
          unit.push_back(k);
          in_layer[k] = true;
        });
      }
      for (std::size_t k = 0; k < count; ++k)
        if (!in_layer[k]) units.front().push_back(k);
    } else {
      for (std::size_t k = 0; k < count; ++k) units.front().push_back(k);
    }
    return units;
  }

  /// The model's tensors in for_each_parameter's order (layerwise bodies only).
  template <class Fn>
  static void for_unit_tensors(Policy& model, const std::vector<std::size_t>& members, Fn&& fn) {
    using Tensor = model::ParameterTensor<typename Policy::scalar_type>;
    std::vector<Tensor*> order;
    model.for_each_tensor([&](Tensor& t) { order.push_back(&t); });
    for (const std::size_t k : members) fn(*order[k]);
  }

  /// The root unit's tensors allocated and gathered (the whole model without a layerwise body).
  void gather_root(Policy& model) {
    if constexpr (HasLayerwiseBody<Policy>) {
      for_unit_tensors(model, units_.front().tensors, [](auto& t) { t.allocate_storage(); });
      units_.front().flat.gather_into(fsdp_, pick(value_refs(model), units_.front().tensors));
    } else {
      gather(model);
    }
  }

  void gather_layer(Policy& model, std::size_t layer, bool with_gradients) {
    if constexpr (HasLayerwiseBody<Policy>) {
      const Unit& unit = units_.at(layer + 1);
      for_unit_tensors(model, unit.tensors, [&](auto& t) {
        t.allocate_storage();
        if (with_gradients) t.zero_grad();
      });
      unit.flat.gather_into(fsdp_, pick(value_refs(model), unit.tensors));
      most_layers_held_ = std::max(most_layers_held_, ++layers_held_);
    }
  }

  void free_layer(Policy& model, std::size_t layer) {
    if constexpr (HasLayerwiseBody<Policy>) {
      for_unit_tensors(model, units_.at(layer + 1).tensors, [](auto& t) { t.release_storage(); });
      --layers_held_;
    }
  }

  void reduce_layer_gradients(Policy& model, std::size_t layer) {
    Unit& unit = units_.at(layer + 1);
    unit.flat.reduce_scatter_gradients(fsdp_, pick(parameter_refs(model), unit.tensors), /*accumulate=*/true);
  }

  static std::vector<optim::ParameterRef> pick(const std::vector<optim::ParameterRef>& refs,
                                               const std::vector<std::size_t>& members) {
    std::vector<optim::ParameterRef> out;
    out.reserve(members.size());
    for (const std::size_t k : members) out.push_back(refs[k]);
    return out;
  }
  /// The values only (a model whose gradients are not allocated, e.g. frozen or just gathered).
  static std::vector<optim::ParameterRef> value_refs(Policy& model) {
    std::vector<optim::ParameterRef> refs;
    model.for_each_parameter([&](const auto& p) { refs.push_back({p.value, {}, p.name}); });
    return refs;
  }

  parallel::ProcessGroup fsdp_, replicate_;
  int world_;
  std::size_t tensor_count_ = 0;
  std::vector<Unit> units_;  ///< the root first
  int layers_held_ = 0, most_layers_held_ = 0;
};

}  // namespace verl::trainer
