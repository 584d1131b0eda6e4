// expect: AN_LR_SCHEDULE_NEEDS_A_NAME_AND_A_MULTIPLIER_FOR_EACH_STEP
// A scheduler drives a schedule that maps a step to a learning-rate multiplier.
#include "verl/optim/lr_scheduler.hpp"

struct StepDecay {
  static constexpr const char* name = "step";
  double gamma = 0.5;  // no multiplier(step)
};

int main() {
  verl::optim::LrScheduler<StepDecay> scheduler(1e-3, StepDecay{});
  return static_cast<int>(scheduler.last_epoch());
}
