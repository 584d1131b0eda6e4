// The LrSchedule concept: a learning-rate multiplier as a function of the scheduler's step
// (torch's LambdaLR lambda), plus verl's rule for the number of warmup steps.
#pragma once

#include <concepts>
#include <cstdint>
#include <string_view>

#include "verl/core/error.hpp"

namespace verl::optim {

/// multiplier(step) -> factor applied to the base learning rate at scheduler step `step`
/// (0 before the first optimizer step); `name` is verl's lr_scheduler_type.
template <class S>
concept LrSchedule = requires(const S& schedule, std::int64_t step) {
  { S::name } -> std::convertible_to<std::string_view>;
  { schedule.multiplier(step) } -> std::convertible_to<double>;
};

/// verl's warmup length: `lr_warmup_steps` when it is positive, else
/// int(lr_warmup_steps_ratio * total_training_steps) (truncated toward zero, as Python's int()).
inline std::int64_t resolve_warmup_steps(std::int64_t lr_warmup_steps, double lr_warmup_steps_ratio,
                                         std::int64_t total_training_steps) {
  if (lr_warmup_steps > 0) return lr_warmup_steps;
  VERL_CHECK_ARG(lr_warmup_steps_ratio >= 0.0 && lr_warmup_steps_ratio <= 1.0,
                 "lr_warmup_steps_ratio: expected a value in [0, 1], got {}", lr_warmup_steps_ratio);
  return static_cast<std::int64_t>(lr_warmup_steps_ratio * static_cast<double>(total_training_steps));
}

}  // namespace verl::optim
