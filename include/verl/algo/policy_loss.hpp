// Deprecated path: this header moved to verl/algo/policy_losses/policy_loss.hpp. Include that instead; this forwarding
// header goes away in the next release.
#pragma once
#pragma message("verl/algo/policy_loss.hpp is deprecated: include verl/algo/policy_losses/policy_loss.hpp")

#include "verl/algo/policy_losses/policy_loss.hpp"
