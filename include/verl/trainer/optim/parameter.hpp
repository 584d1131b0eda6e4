// Deprecated path: this header moved to verl/optim/parameter.hpp. Include that instead; this forwarding
// header goes away in the next release.
#pragma once
#pragma message("verl/trainer/optim/parameter.hpp is deprecated: include verl/optim/parameter.hpp")

#include "verl/optim/parameter.hpp"
