// Deprecated path: this header moved to verl/algo/logits/logprob_entropy.hpp. Include that instead; this forwarding
// header goes away in the next release.
#pragma once
#pragma message("verl/algo/logprob_entropy.hpp is deprecated: include verl/algo/logits/logprob_entropy.hpp")

#include "verl/algo/logits/logprob_entropy.hpp"
