// Deprecated path: this header moved to verl/optim/clip_grad_norm.hpp. Include that instead; this forwarding
// header goes away in the next release.
#pragma once
#pragma message("verl/trainer/optim/clip_grad_norm.hpp is deprecated: include verl/optim/clip_grad_norm.hpp")

#include "verl/optim/clip_grad_norm.hpp"
