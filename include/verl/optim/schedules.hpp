// verl's learning-rate schedules (verl.utils.torch_functional): constant with linear warmup and
// cosine with linear warmup, as policy types satisfying LrSchedule, and the registry that picks
// one by verl's `lr_scheduler_type` name.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <string_view>
#include <variant>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "verl/core/error.hpp"
#include "verl/optim/lr_schedule.hpp"

namespace verl::optim {

/// get_constant_schedule_with_warmup: step / max(1, warmup) during warmup, then 1.
struct ConstantWithWarmup {
  static constexpr std::string_view name = "constant";
  std::int64_t num_warmup_steps = 0;

  [[nodiscard]] double multiplier(std::int64_t step) const {
    if (step < num_warmup_steps) {
      return static_cast<double>(step) / std::max(1.0, static_cast<double>(num_warmup_steps));
    }
    return 1.0;
  }
};

/// get_cosine_schedule_with_warmup: linear warmup from init_lr_ratio to 1, then
/// max(min_lr_ratio, cos(2 pi num_cycles progress) * (1 - min)/2 + (1 + min)/2), where progress
/// runs from 0 to 1 over the steps after warmup.
struct CosineWithWarmup {
  static constexpr std::string_view name = "cosine";
  std::int64_t num_warmup_steps = 0;
  std::int64_t num_training_steps = 0;
  double min_lr_ratio = 0.0;
  double num_cycles = 0.5;
  double init_lr_ratio = 0.0;
  /// verl 0.9.1's optim.zero_indexed_step: false counts steps from 1 (the multiplier of step s is
  /// the zero-indexed one of s + 1).
  bool zero_indexed_step = true;

  CosineWithWarmup() = default;
  CosineWithWarmup(std::int64_t warmup_steps, std::int64_t training_steps, double min_ratio = 0.0,
                   double cycles = 0.5, double init_ratio = 0.0)
      : num_warmup_steps(warmup_steps),
        num_training_steps(training_steps),
        min_lr_ratio(min_ratio),
        num_cycles(cycles),
        init_lr_ratio(init_ratio) {
    // verl asserts both ratios lie in [0, 1].
    VERL_CHECK_ARG(min_ratio >= 0.0 && min_ratio <= 1.0, "min_lr_ratio: expected a value in [0, 1], got {}",
                   min_ratio);
    VERL_CHECK_ARG(init_ratio >= 0.0 && init_ratio <= 1.0, "init_lr_ratio: expected a value in [0, 1], got {}",
                   init_ratio);
  }

  [[nodiscard]] double multiplier(std::int64_t step) const {
    if (!zero_indexed_step) ++step;
    if (step < num_warmup_steps) {
      return init_lr_ratio + (1.0 - init_lr_ratio) * (static_cast<double>(step) /
                                                      static_cast<double>(std::max<std::int64_t>(1, num_warmup_steps)));
    }
    const double coefficient = (1.0 - min_lr_ratio) * 0.5;
    const double intercept = (1.0 + min_lr_ratio) * 0.5;
    const double progress = static_cast<double>(step - num_warmup_steps) /
                            static_cast<double>(std::max<std::int64_t>(1, num_training_steps - num_warmup_steps));
    const double x = std::cos(std::numbers::pi * num_cycles * 2.0 * progress);
    return std::max(min_lr_ratio, x * coefficient + intercept);
  }
};

static_assert(LrSchedule<ConstantWithWarmup> && LrSchedule<CosineWithWarmup>);

/// One of the schedules, chosen at run time by name.
using AnyLrSchedule = std::variant<ConstantWithWarmup, CosineWithWarmup>;

inline constexpr std::array<std::string_view, 2> lr_scheduler_type_names = {ConstantWithWarmup::name,
                                                                             CosineWithWarmup::name};

inline double multiplier(const AnyLrSchedule& schedule, std::int64_t step) {
  return std::visit([step](const auto& s) { return s.multiplier(step); }, schedule);
}

inline std::string_view schedule_name(const AnyLrSchedule& schedule) {
  return std::visit([](const auto& s) -> std::string_view { return s.name; }, schedule);
}

/// The knobs verl reads from an optim config to build its scheduler.
struct LrScheduleConfig {
  std::string_view lr_scheduler_type = "constant";
  std::int64_t lr_warmup_steps = -1;
  double lr_warmup_steps_ratio = 0.0;
  std::int64_t total_training_steps = 0;
  double min_lr_ratio = 0.0;
  double num_cycles = 0.5;
};

/// verl's scheduler construction: the warmup length from lr_warmup_steps or its ratio, then the
/// schedule named by lr_scheduler_type ("constant" or "cosine"); any other name throws
/// verl::InvalidArgument naming `lr_scheduler_type` and listing the valid names.
inline AnyLrSchedule make_lr_schedule(const LrScheduleConfig& config) {
  const std::int64_t warmup =
      resolve_warmup_steps(config.lr_warmup_steps, config.lr_warmup_steps_ratio, config.total_training_steps);
  if (config.lr_scheduler_type == ConstantWithWarmup::name) return ConstantWithWarmup{warmup};
  if (config.lr_scheduler_type == CosineWithWarmup::name) {
    return CosineWithWarmup(warmup, config.total_training_steps, config.min_lr_ratio, config.num_cycles);
  }
  ::verl::detail::throw_invalid_argument("lr_scheduler_type: expected one of {}, got '{}'",
                                         fmt::join(lr_scheduler_type_names, ", "), config.lr_scheduler_type);
}

}  // namespace verl::optim
