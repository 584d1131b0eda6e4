// Safe-RLHF's settings from a PPOConfig: the Lagrange multiplier's (algorithm.safe_rlhf.*, the keys
// of algo/safe_rlhf.hpp) and the clamp on the shaped rewards and costs. Ranges are checked when the
// configuration loads (config/detail/value_ranges.hpp); what spans two keys is checked here, each
// error naming the full keys.
#pragma once

#include <optional>

#include "verl/algo/safe_rlhf.hpp"
#include "verl/core/error.hpp"
#include "verl/trainer/config/ppo_config.hpp"

namespace verl::trainer {

/// The multiplier's configuration from algorithm.safe_rlhf.*.
inline algo::LagrangeMultiplierConfig lagrange_multiplier_config(const PPOConfig& config) {
  const SafeRLHFSection& s = config.algorithm.safe_rlhf;
  if (s.lambda_max) {
    VERL_CHECK_ARG(s.lambda_init <= *s.lambda_max,
                   "algorithm.safe_rlhf.lambda_init: expected at most algorithm.safe_rlhf.lambda_max = {}, got {}",
                   *s.lambda_max, s.lambda_init);
  }
  return {.cost_limit = s.cost_limit,
          .lambda_init = s.lambda_init,
          .lambda_lr = s.lambda_lr,
          .lambda_max = s.lambda_max,
          .lambda_update_delay_steps = s.lambda_update_delay_steps,
          .episode_cost_window_size = s.episode_cost_window_size};
}

/// algorithm.safe_rlhf.clip_range_score: the bound c of clamp(., -c, c) on the shaped token
/// rewards and costs (null: no clamp).
inline std::optional<double> safe_rlhf_clip_range_score(const PPOConfig& config) {
  return config.algorithm.safe_rlhf.clip_range_score;
}

}  // namespace verl::trainer
