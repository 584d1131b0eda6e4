// Deprecated path: this header moved to verl/algo/kl/penalty.hpp. Include that instead; this forwarding
// header goes away in the next release.
#pragma once
#pragma message("verl/algo/kl_penalty.hpp is deprecated: include verl/algo/kl/penalty.hpp")

#include "verl/algo/kl/penalty.hpp"
