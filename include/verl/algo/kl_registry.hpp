// Deprecated path: this header moved to verl/algo/kl/registry.hpp. Include that instead; this forwarding
// header goes away in the next release.
#pragma once
#pragma message("verl/algo/kl_registry.hpp is deprecated: include verl/algo/kl/registry.hpp")

#include "verl/algo/kl/registry.hpp"
