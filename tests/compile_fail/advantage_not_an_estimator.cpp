// expect: TYPE_IS_NOT_AN_ADVANTAGE_ESTIMATOR
// A type without verl's registry name, input traits and compute() is not an advantage estimator.
#include "verl/algo/advantages.hpp"

struct MeanBaseline {
  double epsilon = 1e-6;
};

int main() {
  verl::algo::require_inputs<MeanBaseline, verl::algo::AvailableInputs{}>();
  return 0;
}
