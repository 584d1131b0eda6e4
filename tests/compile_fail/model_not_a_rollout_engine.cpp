// expect: THE_ROLLOUT_ENGINE_NEEDS_GENERATE_OF_PROMPTS_AND_SAMPLING_PARAMS_RETURNING_ROLLOUT_OUTPUT
// An external engine stands in for ours by generating a RolloutOutput from prompts and params.
#include <string>
#include <vector>

#include "verl/rollout/rollout_engine.hpp"

struct TextOnlyEngine {
  std::vector<std::string> generate(const std::vector<std::string>& prompts) { return prompts; }
};

static_assert(verl::rollout::check_rollout_engine<TextOnlyEngine>());
int main() {}
