// Deprecated path: this header moved to verl/algo/logits/logprob.hpp. Include that instead; this forwarding
// header goes away in the next release.
#pragma once
#pragma message("verl/algo/logprob.hpp is deprecated: include verl/algo/logits/logprob.hpp")

#include "verl/algo/logits/logprob.hpp"
