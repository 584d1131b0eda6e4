// Module header: verl's RL numerics — masked statistics, loss aggregation, advantage
// estimators, KL estimators and controllers, policy/value/entropy losses, the logits kernels and
// the composed actor objective, each with its gradient; the Safe RLHF multiplier and advantages.
#pragma once

#include "verl/algo/masked_stats.hpp"
#include "verl/algo/loss_aggregation.hpp"
#include "verl/algo/functional.hpp"
#include "verl/algo/logits.hpp"
#include "verl/algo/entropy_loss.hpp"
#include "verl/algo/advantages.hpp"
#include "verl/algo/kl.hpp"
#include "verl/algo/policy_losses.hpp"
#include "verl/algo/value_loss.hpp"
#include "verl/algo/actor_objective.hpp"
#include "verl/algo/safe_rlhf.hpp"
