// Deprecated path: this header moved to verl/optim/optimizer_step.hpp. Include that instead; this forwarding
// header goes away in the next release.
#pragma once
#pragma message("verl/trainer/optim/optimizer_step.hpp is deprecated: include verl/optim/optimizer_step.hpp")

#include "verl/optim/optimizer_step.hpp"
