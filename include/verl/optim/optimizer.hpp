// The Optimizer concept: what the trainer needs to update a model from its gradients.
#pragma once

#include <concepts>
#include <span>
#include <string_view>

#include "verl/optim/parameter.hpp"

namespace verl::optim {

/// step(parameters) updates every parameter in place from its gradient; lr()/set_lr() expose
/// the learning rate a scheduler drives (torch's param_group["lr"]); `name` is the config's
/// optimizer name (actor_rollout_ref.actor.optim.optimizer).
template <class O>
concept Optimizer = requires(O& optimizer, const O& const_optimizer, std::span<const ParameterRef> parameters,
                             double lr) {
  { O::name } -> std::convertible_to<std::string_view>;
  optimizer.step(parameters);
  optimizer.set_lr(lr);
  { const_optimizer.lr() } -> std::convertible_to<double>;
};

}  // namespace verl::optim
