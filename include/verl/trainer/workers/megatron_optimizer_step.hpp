// The optimizer step of the Megatron workers' tensor-parallel models (the actor's and reference's
// worker, the critic's): gradients averaged over the DP group, or reduce-scattered over it with
// Megatron's distributed optimizer (ZeRO-1, parallel::DistributedAdamW); the whole model's gradient
// norm (each element once: over TP by the model's gradient_squared_norm / gradient_copies, over
// pipeline stages by a sum); torch's clip_grad_norm_ coefficient; AdamW on the shards, skipped and
// counted when the norm is not finite.
#pragma once

#include <Eigen/Core>

#include <cmath>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "verl/core/error.hpp"
#include "verl/optim/adamw.hpp"
#include "verl/optim/clip_grad_norm.hpp"
#include "verl/parallel/distributed_optimizer.hpp"
#include "verl/parallel/mpi_communicator.hpp"
#include "verl/trainer/workers/role_state.hpp"

namespace verl::trainer {

/// The groups a Megatron worker's optimizer step reduces over.
template <class Stages = parallel::MpiCommunicator>
struct MegatronStepGroups {
  parallel::MpiCommunicator* dp = nullptr;  ///< the DP group (the ranks with this rank's TP and PP coordinates)
  Index dp_size = 1;
  Stages* pipeline = nullptr;               ///< the pipeline group (stage s is rank s), or none without stages
  parallel::MpiCommunicator* model_group = nullptr;  ///< every rank of the model (DP x TP x PP): the distributed norm's sum
};

/// One optimizer step on `model`'s shards (a tensor-parallel model with gradient_squared_norm()
/// and gradient_copies(name)): `distributed` is Megatron's distributed optimizer (null: AdamW in
/// `optimizer` on the averaged gradients; else `optimizer` only carries the hyper-parameters the
/// scheduler set). `grad_clip_key` names grad_clip in errors. Returns the norm.
template <class Model, class Stages>
float megatron_optimizer_step(Model& model, const MegatronStepGroups<Stages>& groups, optim::AdamW& optimizer,
                              parallel::DistributedAdamW* distributed, double grad_clip, std::string_view grad_clip_key,
                              std::int64_t& updates, std::int64_t& nonfinite) {
  VERL_CHECK_ARG(grad_clip >= 0.0 && !std::isnan(grad_clip), "{}: expected a value >= 0, got {}", grad_clip_key, grad_clip);
  std::vector<optim::ParameterRef> refs = parameter_refs(model);
  double squares = 0;
  std::span<float> distributed_grads;
  if (distributed != nullptr) {
    // This rank's slice of the DP-averaged gradients; the norm from every rank's slice (each
    // element once: over DP by the slices, over TP by gradient_copies), summed over the model's ranks.
    distributed_grads = distributed->reduce_scatter_gradients(*groups.dp, refs);
    for (const auto& segment : distributed->segments()) {
      const Eigen::Map<const Eigen::VectorXf> slice(distributed_grads.data() + segment.slice_offset,
                                                    static_cast<Index>(segment.length));
      squares += slice.cast<double>().squaredNorm() / model.gradient_copies(refs[segment.tensor].name);
    }
    groups.model_group->all_reduce(std::span<double>(&squares, 1), parallel::ReduceOp::sum);
  } else {
    if (groups.dp_size > 1) average_gradients(*groups.dp, refs);
    // Over TP (gradient_squared_norm), then over the stages (each holds other tensors).
    squares = model.gradient_squared_norm();
    if (groups.pipeline != nullptr) groups.pipeline->all_reduce(std::span<double>(&squares, 1), parallel::ReduceOp::sum);
  }
  const auto norm = static_cast<float>(std::sqrt(squares));
  const float coefficient = optim::detail::clip_coefficient(norm, grad_clip);
  if (coefficient != 1.0f) {
    if (distributed != nullptr) {
      for (float& g : distributed_grads) g *= coefficient;
    } else {
      for (auto& p : refs)
        for (float& g : p.grad) g *= coefficient;
    }
  }
  ++updates;
  if (std::isfinite(norm)) {
    if (distributed != nullptr) {
      distributed->step(*groups.dp, refs, optimizer.config());
    } else {
      optimizer.step(refs);
    }
  } else {
    if (distributed != nullptr) distributed->skip();
    ++nonfinite;
  }
  return norm;
}

}  // namespace verl::trainer
