// Every advantage estimator of verl (ADV_ESTIMATOR_REGISTRY), its concept and its registry.
#pragma once

#include "verl/algo/advantages/estimator.hpp"
#include "verl/algo/advantages/registry.hpp"
#include "verl/algo/advantages/gae.hpp"
#include "verl/algo/advantages/gdpo.hpp"
#include "verl/algo/advantages/gpg.hpp"
#include "verl/algo/advantages/grpo.hpp"
#include "verl/algo/advantages/grpo_passk.hpp"
#include "verl/algo/advantages/grpo_vectorized.hpp"
#include "verl/algo/advantages/opo.hpp"
#include "verl/algo/advantages/optimal_token_baseline.hpp"
#include "verl/algo/advantages/reinforce_plus_plus.hpp"
#include "verl/algo/advantages/remax.hpp"
#include "verl/algo/advantages/rloo.hpp"
