// Deprecated path: this header moved to verl/optim/adamw.hpp. Include that instead; this forwarding
// header goes away in the next release.
#pragma once
#pragma message("verl/trainer/optim/adamw.hpp is deprecated: include verl/optim/adamw.hpp")

#include "verl/optim/adamw.hpp"
