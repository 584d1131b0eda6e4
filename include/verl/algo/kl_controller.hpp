// Deprecated path: this header moved to verl/algo/kl/controller.hpp. Include that instead; this forwarding
// header goes away in the next release.
#pragma once
#pragma message("verl/algo/kl_controller.hpp is deprecated: include verl/algo/kl/controller.hpp")

#include "verl/algo/kl/controller.hpp"
