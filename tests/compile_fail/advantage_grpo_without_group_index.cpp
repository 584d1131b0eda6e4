// expect: ADVANTAGE_ESTIMATOR_NEEDS_A_PROMPT_GROUP_INDEX
// GRPO's baseline is the mean of the responses to the same prompt: it needs the uid of each row.
#include "verl/algo/advantages.hpp"

int main() {
  verl::algo::require_group_index<verl::algo::GRPO, /*HasGroupIndex=*/false>();
  return 0;
}
