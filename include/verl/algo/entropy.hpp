// Deprecated path: this header moved to verl/algo/logits/entropy.hpp. Include that instead; this forwarding
// header goes away in the next release.
#pragma once
#pragma message("verl/algo/entropy.hpp is deprecated: include verl/algo/logits/entropy.hpp")

#include "verl/algo/logits/entropy.hpp"
