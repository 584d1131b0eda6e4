// Deprecated path: this header moved to verl/algo/kl/rewards.hpp. Include that instead; this forwarding
// header goes away in the next release.
#pragma once
#pragma message("verl/algo/kl_rewards.hpp is deprecated: include verl/algo/kl/rewards.hpp")

#include "verl/algo/kl/rewards.hpp"
