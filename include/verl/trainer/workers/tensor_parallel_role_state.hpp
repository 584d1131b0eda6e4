// A tensor-parallel model's checkpoint state as the dense workers save it (full tensors, full
// AdamW moments, in the model's parameter order), gathered from the TP shards, and the way back
// to each rank's shards: shared by the Megatron workers (the actor's, the critic's), so that a
// checkpoint resumes under any layout, or under the dense worker.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "verl/core/error.hpp"
#include "verl/model/transformer/tensor_parallel_transformer.hpp"
#include "verl/model/transformer/weights.hpp"
#include "verl/optim/adamw.hpp"
#include "verl/optim/lr_scheduler.hpp"
#include "verl/trainer/workers/role_state.hpp"

namespace verl::trainer {

/// The full shape of a tensor whose shard on this rank has `shape`.
template <class Model>
std::vector<std::int64_t> full_shape_of(const Model& model, std::string_view tensor, std::span<const std::int64_t> shape) {
  std::vector<std::int64_t> out(shape.begin(), shape.end());
  const model::TensorParallelShard shard = model.shard_of(tensor);
  if (!shard.replicated()) out[static_cast<std::size_t>(shard.dim)] = shard.full;
  return out;
}

/// Collective over `model`'s TP group: every parameter (and its AdamW moments from this rank's
/// `moments`, when it has them) gathered whole, in for_each_parameter's order, with the moments'
/// step and `scheduler`'s position. The ranks with `keeps` get them, the others an empty state.
template <class Model>
RoleState gather_tensor_parallel_state(Model& model, const optim::AdamW::State& moments,
                                       const optim::LrScheduler<>& scheduler, bool keeps) {
  RoleState state;
  if (keeps) {
    state.optimizer.step = moments.step;
    state.extra = {{"lr_scheduler_last_epoch", scheduler.last_epoch()}};
  }
  std::size_t k = 0;
  model.for_each_parameter([&](const auto& p) {
    std::vector<float> value = model.gather_full(p.name, std::span<const float>(p.value.data(), p.value.size()));
    std::vector<float> m, v;
    if (k < moments.exp_avg.size()) {
      m = model.gather_full(p.name, moments.exp_avg[k]);
      v = model.gather_full(p.name, moments.exp_avg_sq[k]);
    }
    if (keeps) {
      state.model.push_back(NamedTensor{std::string(p.name), full_shape_of(model, p.name, p.shape), std::move(value)});
      if (k < moments.exp_avg.size()) {
        state.optimizer.exp_avg.push_back(std::move(m));
        state.optimizer.exp_avg_sq.push_back(std::move(v));
      }
    }
    ++k;
  });
  return state;
}

/// Sets `model`'s shards from a full-tensor `state` (refusing non-finite weights: a damaged
/// checkpoint is not resumed) and `scheduler`'s position; returns this rank's blocks of the AdamW
/// moments, whose parameters start at `first_parameter` of the state's (a pipeline stage's
/// offset). `role` names the checkpoint role in errors.
template <class Model>
optim::AdamW::State load_tensor_parallel_state(Model& model, const RoleState& state, optim::LrScheduler<>& scheduler,
                                               std::string_view role, std::size_t first_parameter = 0) {
  model::StateDict dict;
  for (const auto& t : state.model) {
    for (std::size_t j = 0; j < t.values.size(); ++j)
      if (!std::isfinite(t.values[j]))
        ::verl::detail::throw_invalid_argument(
            "checkpoint role '{}': tensor '{}': expected finite weights, got {} at index {} (a damaged checkpoint is "
            "not resumed)",
            role, t.name, t.values[j], j);
    dict[t.name] = model::StateTensor{t.shape, t.values};
  }
  model.load_full_state_dict(dict);
  optim::AdamW::State moments;
  moments.step = state.optimizer.step;
  if (!state.optimizer.exp_avg.empty()) {
    // The moments are in the whole model's parameters' order (for_each_parameter, as AdamW holds
    // them), not the checkpoint's tensor order (by name).
    std::size_t k = first_parameter;
    model.for_each_parameter([&](const auto& p) {
      VERL_CHECK_ARG(k < state.optimizer.exp_avg.size() && k < state.optimizer.exp_avg_sq.size(),
                     "checkpoint role '{}': no optimizer moments for '{}' (parameter {})", role, p.name, k);
      moments.exp_avg.push_back(model.shard_values(p.name, state.optimizer.exp_avg[k]));
      moments.exp_avg_sq.push_back(model.shard_values(p.name, state.optimizer.exp_avg_sq[k]));
      ++k;
    });
  }
  VERL_CHECK_ARG(state.extra.contains("lr_scheduler_last_epoch"),
                 "checkpoint role '{}': extra_state.json has no lr_scheduler_last_epoch", role);
  scheduler.set_last_epoch(state.extra["lr_scheduler_last_epoch"].template get<std::int64_t>());
  return moments;
}

}  // namespace verl::trainer
