// torch.optim.AdamW, element for element: decoupled weight decay applied to the parameter
// first, bias-corrected moments, and eps added after the bias correction of the second
// moment's square root:
//   p <- p * (1 - lr * wd)
//   m <- lerp(m, g, 1 - beta1)            v <- v * beta2 + (1 - beta2) * g * g
//   p <- p - (lr / (1 - beta1^t)) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
// Scalars are computed in double as Python floats and rounded to float32 where torch passes
// them to a float32 kernel; tensor arithmetic is float32 in torch's operation order.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "verl/core/error.hpp"
#include "verl/trainer/optim/optimizer.hpp"
#include "verl/trainer/optim/parameter.hpp"

namespace verl::optim {

/// AdamW's hyper-parameters, named as verl's optim config (betas as a pair, eps torch's default).
struct AdamWConfig {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;
};

class AdamW {
 public:
  static constexpr std::string_view name = "AdamW";

  /// Per-parameter moments and the shared step count (torch keeps one `step` per parameter; they
  /// are equal here because every parameter is updated at every step).
  struct State {
    std::int64_t step = 0;
    std::vector<std::vector<float>> exp_avg;
    std::vector<std::vector<float>> exp_avg_sq;
    friend bool operator==(const State&, const State&) = default;
  };

  AdamW() : AdamW(AdamWConfig{}) {}
  explicit AdamW(const AdamWConfig& config) : config_(config) { validate(config); }

  [[nodiscard]] double lr() const { return config_.lr; }
  void set_lr(double lr) {
    VERL_CHECK_ARG(lr >= 0.0, "lr: expected a learning rate >= 0, got {}", lr);
    config_.lr = lr;
  }
  [[nodiscard]] const AdamWConfig& config() const { return config_; }
  [[nodiscard]] const State& state() const { return state_; }

  /// Restores moments saved by state(); the layout is checked against the parameters at the
  /// next step.
  void load_state(State state) {
    VERL_CHECK_ARG(state.exp_avg.size() == state.exp_avg_sq.size(),
                   "state: expected as many exp_avg ({}) as exp_avg_sq ({}) tensors", state.exp_avg.size(),
                   state.exp_avg_sq.size());
    for (std::size_t i = 0; i < state.exp_avg.size(); ++i) {
      VERL_CHECK_ARG(state.exp_avg[i].size() == state.exp_avg_sq[i].size(),
                     "state: exp_avg[{}] has {} elements but exp_avg_sq[{}] has {}", i, state.exp_avg[i].size(), i,
                     state.exp_avg_sq[i].size());
    }
    VERL_CHECK_ARG(state.step >= 0, "state.step: expected a step count >= 0, got {}", state.step);
    state_ = std::move(state);
  }

  /// One optimizer step over `parameters` (the same parameters, in the same order, every step).
  void step(std::span<const ParameterRef> parameters) {
    prepare_state(parameters);
    ++state_.step;
    const double lr = config_.lr;
    const double step = static_cast<double>(state_.step);
    const float decay = static_cast<float>(1.0 - lr * config_.weight_decay);
    // torch's lerp(start, end, w) is one fused multiply-add: start + w * (end - start) for
    // w < 0.5, end + (w - 1) * (end - start) otherwise.
    const float lerp_weight = static_cast<float>(1.0 - config_.beta1);
    const bool small_weight = std::abs(lerp_weight) < 0.5f;
    const double lerp_coefficient = small_weight ? lerp_weight : lerp_weight - 1.0f;
    const float beta2 = static_cast<float>(config_.beta2);
    const float one_minus_beta2 = static_cast<float>(1.0 - config_.beta2);
    const double bias_correction1 = 1.0 - std::pow(config_.beta1, step);
    const double bias_correction2 = 1.0 - std::pow(config_.beta2, step);
    const float negative_step_size = static_cast<float>(-(lr / bias_correction1));
    const float bias_correction2_sqrt = static_cast<float>(std::pow(bias_correction2, 0.5));
    const float eps = static_cast<float>(config_.eps);
    const bool decays = config_.weight_decay != 0.0;

    for (std::size_t k = 0; k < parameters.size(); ++k) {
      float* __restrict value = parameters[k].value.data();
      const float* __restrict grad = parameters[k].grad.data();
      float* __restrict exp_avg = state_.exp_avg[k].data();
      float* __restrict exp_avg_sq = state_.exp_avg_sq[k].data();
      const std::size_t n = parameters[k].value.size();
      for (std::size_t i = 0; i < n; ++i) {
        const float g = grad[i];
        float p = value[i];
        if (decays) p *= decay;
        // The product is exact in double, so this rounds like the fused multiply-add.
        const float difference = g - exp_avg[i];
        const float base = small_weight ? exp_avg[i] : g;
        const float m = static_cast<float>(lerp_coefficient * static_cast<double>(difference) + static_cast<double>(base));
        exp_avg[i] = m;
        // mul_, then addcmul_ (v + (s * g) * g with the last multiply-add fused in torch's kernel).
        const float v_scaled = exp_avg_sq[i] * beta2;
        const float scaled_grad = one_minus_beta2 * g;
        const float v = static_cast<float>(static_cast<double>(scaled_grad) * static_cast<double>(g) +
                                           static_cast<double>(v_scaled));
        exp_avg_sq[i] = v;
        const float denom = std::sqrt(v) / bias_correction2_sqrt + eps;
        value[i] = p + negative_step_size * m / denom;  // addcdiv_: self + value * t1 / t2
      }
    }
  }

 private:
  static void validate(const AdamWConfig& config) {
    VERL_CHECK_ARG(config.lr >= 0.0, "lr: expected a learning rate >= 0, got {}", config.lr);
    VERL_CHECK_ARG(config.eps >= 0.0, "eps: expected a value >= 0, got {}", config.eps);
    VERL_CHECK_ARG(config.beta1 >= 0.0 && config.beta1 < 1.0, "betas[0]: expected a value in [0, 1), got {}",
                   config.beta1);
    VERL_CHECK_ARG(config.beta2 >= 0.0 && config.beta2 < 1.0, "betas[1]: expected a value in [0, 1), got {}",
                   config.beta2);
    VERL_CHECK_ARG(config.weight_decay >= 0.0, "weight_decay: expected a value >= 0, got {}", config.weight_decay);
  }

  void prepare_state(std::span<const ParameterRef> parameters) {
    for (std::size_t k = 0; k < parameters.size(); ++k) detail::require_matching_grad(parameters[k], k);
    if (state_.exp_avg.empty() && state_.step == 0) {
      state_.exp_avg.resize(parameters.size());
      state_.exp_avg_sq.resize(parameters.size());
      for (std::size_t k = 0; k < parameters.size(); ++k) {
        state_.exp_avg[k].assign(parameters[k].value.size(), 0.0f);
        state_.exp_avg_sq[k].assign(parameters[k].value.size(), 0.0f);
      }
      return;
    }
    VERL_CHECK_ARG(parameters.size() == state_.exp_avg.size(),
                   "parameters: expected the {} parameters the optimizer state was built for, got {}",
                   state_.exp_avg.size(), parameters.size());
    for (std::size_t k = 0; k < parameters.size(); ++k) {
      VERL_CHECK_ARG(parameters[k].value.size() == state_.exp_avg[k].size(),
                     "parameters[{}] ('{}'): expected {} elements (the optimizer state's), got {}", k,
                     parameters[k].name, state_.exp_avg[k].size(), parameters[k].value.size());
    }
  }

  AdamWConfig config_;
  State state_;
};

static_assert(Optimizer<AdamW>);

}  // namespace verl::optim
