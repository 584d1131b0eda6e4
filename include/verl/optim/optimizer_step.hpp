// verl's optimizer step for the actor and the critic: clip the gradients to `grad_clip` by
// global norm, then step the optimizer only when that norm is finite (a non-finite norm means
// the gradients are unusable: verl zeroes them and skips the update, and so do we).
#pragma once

#include <cmath>
#include <span>

#include "verl/config.hpp"

#include "verl/optim/clip_grad_norm.hpp"
#include "verl/optim/optimizer.hpp"
#include "verl/optim/parameter.hpp"

namespace verl::optim {

struct OptimizerStepResult {
  double grad_norm = 0.0;  ///< the norm before clipping (verl's actor/grad_norm, critic/grad_norm)
  bool stepped = false;    ///< false when the norm was not finite and the update was skipped
};

template <class O>
OptimizerStepResult clip_and_step(O& optimizer, std::span<const ParameterRef> parameters, double grad_clip) {
  VERL_STATIC_ASSERT(Optimizer<O>, THE_OPTIMIZER_TYPE_DOES_NOT_SATISFY_THE_OPTIMIZER_CONCEPT);
  const float norm = clip_grad_norm(parameters, grad_clip);
  if (!std::isfinite(norm)) {
    for (const auto& parameter : parameters) {
      for (float& g : parameter.grad) g = 0.0f;
    }
    return {static_cast<double>(norm), false};
  }
  optimizer.step(parameters);
  return {static_cast<double>(norm), true};
}

}  // namespace verl::optim
