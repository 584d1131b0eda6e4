// Deprecated path: this header moved to verl/algo/policy_losses/registry.hpp. Include that instead; this forwarding
// header goes away in the next release.
#pragma once
#pragma message("verl/algo/policy_loss_registry.hpp is deprecated: include verl/algo/policy_losses/registry.hpp")

#include "verl/algo/policy_losses/registry.hpp"
