// Deprecated path: this header moved to verl/optim/schedules.hpp. Include that instead; this forwarding
// header goes away in the next release.
#pragma once
#pragma message("verl/trainer/optim/schedules.hpp is deprecated: include verl/optim/schedules.hpp")

#include "verl/optim/schedules.hpp"
