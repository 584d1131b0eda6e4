// Module header: verl's rule-based reward scorers and the reward-function concept.
#pragma once

#include "verl/reward/scorer.hpp"
#include "verl/reward/reward_function.hpp"
#include "verl/reward/gsm8k.hpp"
#include "verl/reward/math_reward.hpp"
#include "verl/reward/math_dapo.hpp"
#include "verl/reward/reward_score.hpp"
