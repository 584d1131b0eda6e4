// The rollout's next-token sampling (temperature, top-k, top-p, greedy; vLLM's semantics): the
// numerics live in algo/logits/sampling.hpp, where the CUDA sampling kernel's reference also reads
// them; the rollout names them as part of its own interface.
#pragma once

#include "verl/algo/logits/sampling.hpp"

namespace verl::rollout {
using algo::counter_uniform;
using algo::derive_seed;
using algo::sample_token;
using algo::SampledToken;
using algo::SamplerScratch;
using algo::SamplingParams;
using algo::TokenId;
}  // namespace verl::rollout
