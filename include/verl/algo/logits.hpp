// Per-token numerics of the logits: log-probabilities and entropy (fused, with their backward) and
// next-token sampling (temperature, top-k, top-p; vLLM's semantics).
#pragma once

#include "verl/algo/logits/logprob_entropy.hpp"
#include "verl/algo/logits/logprob.hpp"
#include "verl/algo/logits/entropy.hpp"
#include "verl/algo/logits/sampling.hpp"
