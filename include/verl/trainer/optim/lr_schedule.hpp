// Deprecated path: this header moved to verl/optim/lr_schedule.hpp. Include that instead; this forwarding
// header goes away in the next release.
#pragma once
#pragma message("verl/trainer/optim/lr_schedule.hpp is deprecated: include verl/optim/lr_schedule.hpp")

#include "verl/optim/lr_schedule.hpp"
