// Deprecated path: this header moved to verl/algo/advantages/estimator.hpp. Include that instead; this forwarding
// header goes away in the next release.
#pragma once
#pragma message("verl/algo/advantage_estimator.hpp is deprecated: include verl/algo/advantages/estimator.hpp")

#include "verl/algo/advantages/estimator.hpp"
