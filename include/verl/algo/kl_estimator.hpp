// Deprecated path: this header moved to verl/algo/kl/estimator.hpp. Include that instead; this forwarding
// header goes away in the next release.
#pragma once
#pragma message("verl/algo/kl_estimator.hpp is deprecated: include verl/algo/kl/estimator.hpp")

#include "verl/algo/kl/estimator.hpp"
