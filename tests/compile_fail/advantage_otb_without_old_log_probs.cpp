// expect: OPTIMAL_TOKEN_BASELINE_NEEDS_OLD_LOG_PROBS_AND_SUM_PI_SQUARED
// The optimal token baseline weighs each token by 1 - 2 pi + sum pi^2: it needs the rollout's
// log-probs and the actor's sum of squared probabilities.
#include "verl/algo/advantages.hpp"

int main() {
  verl::algo::require_inputs<verl::algo::OptimalTokenBaseline, verl::algo::AvailableInputs{.group_index = true}>();
  return 0;
}
