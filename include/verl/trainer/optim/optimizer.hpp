// Deprecated path: this header moved to verl/optim/optimizer.hpp. Include that instead; this forwarding
// header goes away in the next release.
#pragma once
#pragma message("verl/trainer/optim/optimizer.hpp is deprecated: include verl/optim/optimizer.hpp")

#include "verl/optim/optimizer.hpp"
