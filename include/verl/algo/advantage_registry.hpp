// Deprecated path: this header moved to verl/algo/advantages/registry.hpp. Include that instead; this forwarding
// header goes away in the next release.
#pragma once
#pragma message("verl/algo/advantage_registry.hpp is deprecated: include verl/algo/advantages/registry.hpp")

#include "verl/algo/advantages/registry.hpp"
