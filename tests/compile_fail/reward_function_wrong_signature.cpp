// expect: REWARD_FUNCTION_MUST_TAKE_DATA_SOURCE_SOLUTION_STR_GROUND_TRUTH_AND_RETURN_A_SCORE
// A user reward function must take (data_source, solution_str, ground_truth[, extra_info]).
#include "verl/reward/reward_function.hpp"

int main() {
  auto wrong = [](int) { return 1.0; };
  (void)verl::reward::call_reward_function(wrong, "openai/gsm8k", "#### 1", "1");
}
