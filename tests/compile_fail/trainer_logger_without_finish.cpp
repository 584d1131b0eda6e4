// expect: A_LOGGER_NEEDS_A_NAME_AND_LOG_METRICS_STEP_AND_FINISH
// Tracking backends must log a step's metrics and finish (flush and close).
#include "verl/trainer/logging/tracking.hpp"

struct PrintOnly {
  static constexpr const char* name = "print";
  void log(const verl::Metrics&, std::int64_t) {}
};

int main() {
  verl::trainer::Tracking tracking;
  tracking.add(PrintOnly{});
}
