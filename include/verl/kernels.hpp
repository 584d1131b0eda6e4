// Module header: the host-side references of the CUDA kernels (each *.hpp replays its kernel's
// arithmetic on the CPU, for tests and for the conformance runner). The kernels themselves
// (*.cuh) are included only by translation units compiled with nvcc.
#pragma once

#include "verl/kernels/advantages.hpp"
#include "verl/kernels/kl_penalty.hpp"
#include "verl/kernels/logprob_entropy.hpp"
#include "verl/kernels/masked_reductions.hpp"
#include "verl/kernels/optimal_token_baseline.hpp"
#include "verl/kernels/policy_loss.hpp"
#include "verl/kernels/rollout_correction.hpp"
#include "verl/kernels/sampling.hpp"
#include "verl/kernels/value_loss.hpp"
