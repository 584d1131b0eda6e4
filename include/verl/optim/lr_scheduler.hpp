// A stateful learning-rate scheduler with torch's LambdaLR protocol: built at step 0 (it sets
// the optimizer's lr to base_lr * multiplier(0)), step() after each optimizer step advances it.
// verl logs get_last_lr() (the lr the step just used) before advancing.
#pragma once

#include <concepts>
#include <cstdint>
#include <utility>

#include "verl/config.hpp"
#include "verl/core/error.hpp"
#include "verl/optim/lr_schedule.hpp"
#include "verl/optim/optimizer.hpp"
#include "verl/optim/schedules.hpp"

namespace verl::optim {

/// A schedule policy, or AnyLrSchedule (one of verl's, chosen at run time by name).
template <class S>
concept SchedulerSchedule = LrSchedule<S> || std::same_as<S, AnyLrSchedule>;

/// Drives an optimizer's learning rate; `last_epoch` (torch's name) is the number of step()
/// calls so far and is all the state a checkpoint needs.
template <class Schedule = AnyLrSchedule>
class LrScheduler {
  VERL_STATIC_ASSERT(SchedulerSchedule<Schedule>, AN_LR_SCHEDULE_NEEDS_A_NAME_AND_A_MULTIPLIER_FOR_EACH_STEP);

 public:
  LrScheduler(double base_lr, Schedule schedule, std::int64_t last_epoch = 0)
      : base_lr_(base_lr), schedule_(std::move(schedule)), last_epoch_(last_epoch) {
    VERL_CHECK_ARG(base_lr >= 0.0, "base_lr: expected a learning rate >= 0, got {}", base_lr);
    VERL_CHECK_ARG(last_epoch >= 0, "last_epoch: expected a step count >= 0, got {}", last_epoch);
  }

  /// The learning rate for the current step.
  [[nodiscard]] double get_last_lr() const { return lr_at(last_epoch_); }
  [[nodiscard]] double lr_at(std::int64_t step) const {
    if constexpr (std::same_as<Schedule, AnyLrSchedule>) {
      return base_lr_ * multiplier(schedule_, step);
    } else {
      return base_lr_ * schedule_.multiplier(step);
    }
  }
  [[nodiscard]] std::int64_t last_epoch() const { return last_epoch_; }
  [[nodiscard]] double base_lr() const { return base_lr_; }
  [[nodiscard]] const Schedule& schedule() const { return schedule_; }

  void step() { ++last_epoch_; }
  /// Restores the position saved in a checkpoint.
  void set_last_epoch(std::int64_t last_epoch) {
    VERL_CHECK_ARG(last_epoch >= 0, "last_epoch: expected a step count >= 0, got {}", last_epoch);
    last_epoch_ = last_epoch;
  }

  /// Sets the optimizer's lr for the current step.
  template <class O>
  void apply(O& optimizer) const {
    VERL_STATIC_ASSERT(Optimizer<O>, THE_OPTIMIZER_TYPE_DOES_NOT_SATISFY_THE_OPTIMIZER_CONCEPT);
    optimizer.set_lr(get_last_lr());
  }

 private:
  double base_lr_;
  Schedule schedule_;
  std::int64_t last_epoch_;
};

}  // namespace verl::optim
