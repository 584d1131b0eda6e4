// torch.optim.AdamW, element for element: decoupled weight decay applied to the parameter
// first, bias-corrected moments, and eps added after the bias correction of the second
// moment's square root:
//   p <- p * (1 - lr * wd)
//   m <- lerp(m, g, 1 - beta1)            v <- v * beta2 + (1 - beta2) * g * g
//   p <- p - (lr / (1 - beta1^t)) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
// Scalars are computed in double as Python floats and rounded to float32 where torch passes
// them to a float32 kernel; tensor arithmetic is float32 in torch's operation order.
#pragma once

#if defined(__SSE2__) || defined(_M_X64)
#include <emmintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "verl/core/error.hpp"
#include "verl/optim/optimizer.hpp"
#include "verl/optim/parameter.hpp"

namespace verl::optim {

namespace detail {

/// out[i] = sqrt(in[i]), correctly rounded (as torch's sqrt), vectorized: std::sqrt in a loop is
/// not (errno), and Eigen's float sqrt may use an approximate reciprocal square root.
inline void correctly_rounded_sqrt(const float* in, float* out, std::size_t count) {
  std::size_t i = 0;
#if defined(__SSE2__) || defined(_M_X64)
  for (; i + 4 <= count; i += 4) _mm_storeu_ps(out + i, _mm_sqrt_ps(_mm_loadu_ps(in + i)));
#endif
  for (; i < count; ++i) out[i] = std::sqrt(in[i]);
}

}  // namespace detail

/// AdamW's hyper-parameters, named as verl's optim config (betas as a pair, eps torch's default).
struct AdamWConfig {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;
};

namespace detail {

/// One AdamW step's scalars, as torch computes them (Python floats, rounded where a float32
/// kernel takes them).
struct AdamWStepScalars {
  float decay;              ///< 1 - lr * weight_decay
  bool decays;              ///< weight_decay != 0
  double lerp_coefficient;  ///< torch's lerp weight (1 - beta1), or weight - 1 when it is >= 0.5
  bool small_weight;        ///< lerp from exp_avg (weight < 0.5) or from the gradient
  float beta2;
  float one_minus_beta2;
  float negative_step_size;  ///< -lr / (1 - beta1^t)
  float bias_correction2_sqrt;
  float eps;
};

inline AdamWStepScalars adamw_step_scalars(const AdamWConfig& config, std::int64_t step_count) {
  const double lr = config.lr;
  const double step = static_cast<double>(step_count);
  // torch's lerp(start, end, w) is one fused multiply-add: start + w * (end - start) for
  // w < 0.5, end + (w - 1) * (end - start) otherwise.
  const float lerp_weight = static_cast<float>(1.0 - config.beta1);
  const bool small_weight = std::abs(lerp_weight) < 0.5f;
  const double bias_correction1 = 1.0 - std::pow(config.beta1, step);
  const double bias_correction2 = 1.0 - std::pow(config.beta2, step);
  return {static_cast<float>(1.0 - lr * config.weight_decay),
          config.weight_decay != 0.0,
          small_weight ? lerp_weight : lerp_weight - 1.0f,
          small_weight,
          static_cast<float>(config.beta2),
          static_cast<float>(1.0 - config.beta2),
          static_cast<float>(-(lr / bias_correction1)),
          static_cast<float>(std::pow(bias_correction2, 0.5)),
          static_cast<float>(config.eps)};
}

/// One tensor's update, in chunks that stay in L1: moments first, then the square roots, then
/// the parameter update.
template <bool Decays, bool SmallWeight>
void adamw_update_kernel(float* __restrict value, const float* __restrict grad, float* __restrict exp_avg,
                         float* __restrict exp_avg_sq, std::size_t n, const AdamWStepScalars& s) {
  constexpr std::size_t chunk = 512;
  alignas(64) float root[chunk];
  for (std::size_t begin = 0; begin < n; begin += chunk) {
    const std::size_t count = std::min(chunk, n - begin);
    float* __restrict p = value + begin;
    const float* __restrict g = grad + begin;
    float* __restrict m = exp_avg + begin;
    float* __restrict v = exp_avg_sq + begin;
    for (std::size_t i = 0; i < count; ++i) {
      // lerp: the product is exact in double, so this rounds like the fused multiply-add.
      const float difference = g[i] - m[i];
      const float base = SmallWeight ? m[i] : g[i];
      m[i] = static_cast<float>(s.lerp_coefficient * static_cast<double>(difference) + static_cast<double>(base));
      // mul_, then addcmul_ (v + (s * g) * g with the last multiply-add fused in torch's kernel).
      const float v_scaled = v[i] * s.beta2;
      const float scaled_grad = s.one_minus_beta2 * g[i];
      v[i] = static_cast<float>(static_cast<double>(scaled_grad) * static_cast<double>(g[i]) +
                                static_cast<double>(v_scaled));
    }
    correctly_rounded_sqrt(v, root, count);
    for (std::size_t i = 0; i < count; ++i) {
      const float decayed = Decays ? p[i] * s.decay : p[i];
      const float denom = root[i] / s.bias_correction2_sqrt + s.eps;
      p[i] = decayed + s.negative_step_size * m[i] / denom;  // addcdiv_: self + value * t1 / t2
    }
  }
}

/// torch.optim.AdamW's update of one tensor (`n` elements of value, grad and both moments).
/// Branch-free kernels, one per combination of the loop-invariant choices, so that the compiler
/// vectorizes them. Shared by optim::AdamW and the ZeRO shard optimizer (parallel::AdamW).
inline void adamw_update(const AdamWStepScalars& s, float* value, const float* grad, float* exp_avg, float* exp_avg_sq,
                         std::size_t n) {
  if (s.decays) {
    s.small_weight ? adamw_update_kernel<true, true>(value, grad, exp_avg, exp_avg_sq, n, s)
                   : adamw_update_kernel<true, false>(value, grad, exp_avg, exp_avg_sq, n, s);
  } else {
    s.small_weight ? adamw_update_kernel<false, true>(value, grad, exp_avg, exp_avg_sq, n, s)
                   : adamw_update_kernel<false, false>(value, grad, exp_avg, exp_avg_sq, n, s);
  }
}

}  // namespace detail

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
    const auto scalars = detail::adamw_step_scalars(config_, state_.step);
    for (std::size_t k = 0; k < parameters.size(); ++k) {
      detail::adamw_update(scalars, parameters[k].value.data(), parameters[k].grad.data(), state_.exp_avg[k].data(),
                           state_.exp_avg_sq[k].data(), parameters[k].value.size());
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
