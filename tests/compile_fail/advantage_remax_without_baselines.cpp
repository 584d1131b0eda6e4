// expect: REMAX_NEEDS_GREEDY_REWARD_BASELINES
// ReMax subtracts the reward of a greedy rollout, which this trainer does not produce.
#include "verl/algo/advantages.hpp"

int main() {
  verl::algo::require_inputs<verl::algo::ReMax, verl::algo::AvailableInputs{.critic_values = true, .group_index = true}>();
  return 0;
}
