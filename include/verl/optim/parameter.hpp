// A trainable tensor as optimizers see it: its values and its gradient, both flat float32
// spans of the same length (row-major storage of whatever shape the model gives it).
#pragma once

#include <cstddef>
#include <span>
#include <string_view>

#include "verl/core/error.hpp"

namespace verl::optim {

/// One parameter tensor and its gradient (same length). The gradient is mutable because
/// gradient clipping scales it in place, as torch's clip_grad_norm_ does.
struct ParameterRef {
  std::span<float> value;
  std::span<float> grad;
  std::string_view name = {};  ///< for error messages and checkpoints; may be empty
};

namespace detail {

inline void require_matching_grad(const ParameterRef& parameter, std::size_t index) {
  VERL_CHECK_ARG(parameter.grad.size() == parameter.value.size(),
                 "parameters[{}] ('{}'): expected a gradient of {} elements (the parameter's), got {}", index,
                 parameter.name, parameter.value.size(), parameter.grad.size());
}

}  // namespace detail
}  // namespace verl::optim
