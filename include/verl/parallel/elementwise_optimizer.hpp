// Optimizers whose update of an element depends only on that element's parameter, gradient and
// state (SGD, AdamW): the property that lets ZeRO update each rank's shard independently.
// The updates follow torch.optim's order of operations in float32.
#pragma once

#include <cmath>
#include <concepts>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "verl/core/error.hpp"
#include "verl/optim/adamw.hpp"

namespace verl::parallel {

/// Updates `params` from `grads` in place; the optimizer's state covers exactly the elements
/// it is given (the first call fixes their number).
template <class O>
concept ElementwiseOptimizer = requires(O& o, std::span<float> params, std::span<const float> grads) {
  { O::name } -> std::convertible_to<std::string_view>;
  o.step(params, grads);
};

namespace detail {

inline void check_optimizer_step(std::string_view name, std::span<float> params, std::span<const float> grads,
                                 std::size_t state_size) {
  VERL_CHECK_ARG(grads.size() == params.size(), "{}: grads: expected the length of params {}, got {}", name,
                 params.size(), grads.size());
  VERL_CHECK_ARG(state_size == 0 || state_size == params.size(),
                 "{}: params: expected the {} elements of the optimizer state, got {}", name, state_size, params.size());
}

}  // namespace detail

/// torch.optim.SGD (momentum, dampening 0, no Nesterov, decoupled from nothing: L2 weight decay).
struct Sgd {
  static constexpr std::string_view name = "sgd";
  double lr = 1e-3;
  double momentum = 0.0;
  double weight_decay = 0.0;
  /// Optimizer state (public, so that it can be checkpointed).
  struct State {
    std::vector<float> momentum_buffer;
  } state{};

  void step(std::span<float> params, std::span<const float> grads) {
    std::vector<float>& momentum_buffer = state.momentum_buffer;
    detail::check_optimizer_step(name, params, grads, momentum_buffer.size());
    const bool first = momentum_buffer.empty();
    if (momentum != 0.0 && first) momentum_buffer.resize(params.size());
    const float lr_f = static_cast<float>(lr), wd = static_cast<float>(weight_decay), mu = static_cast<float>(momentum);
    for (std::size_t i = 0; i < params.size(); ++i) {
      float d = grads[i];
      if (wd != 0.0f) d += wd * params[i];
      if (mu != 0.0f) {
        float& buf = momentum_buffer[i];
        buf = first ? d : mu * buf + d;
        d = buf;
      }
      params[i] -= lr_f * d;
    }
  }
};

/// torch.optim.AdamW (decoupled weight decay, bias-corrected moments) over a flat span: one
/// shard's elements under ZeRO.
struct AdamW {
  static constexpr std::string_view name = "adamw";
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;
  /// Optimizer state (public, so that it can be checkpointed).
  struct State {
    std::int64_t steps = 0;
    std::vector<float> exp_avg, exp_avg_sq;
  } state{};

  void step(std::span<float> params, std::span<const float> grads) {
    std::vector<float>& exp_avg = state.exp_avg;
    std::vector<float>& exp_avg_sq = state.exp_avg_sq;
    std::int64_t& steps = state.steps;
    detail::check_optimizer_step(name, params, grads, exp_avg.size());
    if (exp_avg.empty()) {
      exp_avg.assign(params.size(), 0.0f);
      exp_avg_sq.assign(params.size(), 0.0f);
    }
    ++steps;
    // The same element kernel as the trainer's optim::AdamW, so a ZeRO-sharded step equals it.
    const auto scalars = optim::detail::adamw_step_scalars(
        {.lr = lr, .beta1 = beta1, .beta2 = beta2, .eps = eps, .weight_decay = weight_decay}, steps);
    optim::detail::adamw_update(scalars, params.data(), grads.data(), exp_avg.data(), exp_avg_sq.data(), params.size());
  }
};

static_assert(ElementwiseOptimizer<Sgd> && ElementwiseOptimizer<AdamW>);

}  // namespace verl::parallel
