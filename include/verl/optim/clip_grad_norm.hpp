// Gradient clipping by global norm with the semantics of torch.nn.utils.clip_grad_norm_
// (error_if_nonfinite=False), which verl's actor and critic call before every optimizer step:
// the total norm is the norm of the per-tensor norms, every gradient is scaled by
// min(1, max_norm / (total_norm + 1e-6)) (also when that is 1), and the total norm is returned
// even when it is not finite (the caller then skips the step, as verl does).
#pragma once

#include <cmath>
#include <cstddef>
#include <limits>
#include <span>

#include "verl/core/error.hpp"
#include "verl/optim/parameter.hpp"

namespace verl::optim {

namespace detail {

/// ||x||_p of one gradient tensor, accumulated in double and rounded to float32 as torch's
/// float32 norm is (p = 2 by default; p = inf is the max magnitude).
inline float tensor_norm(std::span<const float> values, double norm_type) {
  if (std::isinf(norm_type)) {
    float largest = 0.0f;
    for (const float v : values) {
      const float magnitude = std::abs(v);
      if (magnitude > largest || std::isnan(magnitude)) largest = magnitude;
      if (std::isnan(largest)) break;
    }
    return largest;
  }
  double sum = 0.0;
  if (norm_type == 2.0) {
    for (const float v : values) sum += static_cast<double>(v) * static_cast<double>(v);
    return static_cast<float>(std::sqrt(sum));
  }
  if (norm_type == 1.0) {
    for (const float v : values) sum += std::abs(static_cast<double>(v));
    return static_cast<float>(sum);
  }
  for (const float v : values) sum += std::pow(std::abs(static_cast<double>(v)), norm_type);
  return static_cast<float>(std::pow(sum, 1.0 / norm_type));
}

/// The factor clip_grad_norm scales the gradients by: max_norm / (total_norm + 1e-6) on a float32
/// tensor (Python's float / tensor is tensor.reciprocal() * float), then clamp(max=1); NaN stays
/// NaN, as torch.clamp. Shared with the sharded optimizers, which compute the norm from shards.
inline float clip_coefficient(float total_norm, double max_norm) {
  const float shifted = total_norm + 1e-6f;
  float coefficient = (1.0f / shifted) * static_cast<float>(max_norm);
  if (coefficient > 1.0f) coefficient = 1.0f;
  return coefficient;
}

}  // namespace detail

/// The global gradient norm of `parameters` without clipping (torch's get_total_norm).
inline float total_grad_norm(std::span<const ParameterRef> parameters, double norm_type = 2.0) {
  VERL_CHECK_ARG(norm_type > 0.0 || std::isinf(norm_type), "norm_type: expected a value > 0 or inf, got {}",
                 norm_type);
  // torch stacks the per-tensor float32 norms and takes their norm.
  if (std::isinf(norm_type)) {
    float largest = 0.0f;
    for (const auto& parameter : parameters) {
      const float norm = detail::tensor_norm(parameter.grad, norm_type);
      if (norm > largest || std::isnan(norm)) largest = norm;
      if (std::isnan(largest)) break;
    }
    return largest;
  }
  double sum = 0.0;
  for (const auto& parameter : parameters) {
    const double norm = detail::tensor_norm(parameter.grad, norm_type);
    sum += norm_type == 2.0 ? norm * norm : std::pow(norm, norm_type);
  }
  if (norm_type == 2.0) return static_cast<float>(std::sqrt(sum));
  if (norm_type == 1.0) return static_cast<float>(sum);
  return static_cast<float>(std::pow(sum, 1.0 / norm_type));
}

/// Scales every gradient so that the global norm is at most `max_norm`; returns the norm before
/// clipping (float32, as torch's tensor). With no parameters the norm is 0.
inline float clip_grad_norm(std::span<const ParameterRef> parameters, double max_norm, double norm_type = 2.0) {
  VERL_CHECK_ARG(max_norm >= 0.0 && !std::isnan(max_norm), "max_norm: expected a value >= 0, got {}", max_norm);
  for (std::size_t k = 0; k < parameters.size(); ++k) detail::require_matching_grad(parameters[k], k);
  const float total_norm = total_grad_norm(parameters, norm_type);
  if (parameters.empty()) return total_norm;
  const float coefficient = detail::clip_coefficient(total_norm, max_norm);
  if (coefficient == 1.0f) return total_norm;  // scaling by 1 changes nothing
  for (const auto& parameter : parameters) {
    for (float& g : parameter.grad) g *= coefficient;
  }
  return total_norm;
}

}  // namespace verl::optim
