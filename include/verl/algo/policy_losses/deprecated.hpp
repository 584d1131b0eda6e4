// verl's deprecated compute_policy_loss (superseded by "vanilla"): the same dual-clip PPO loss
// with keyword clip ranges, no IS weights, no global batch info, and a 4-tuple result.
#pragma once

#include <optional>

#include "verl/algo/policy_losses/vanilla.hpp"

namespace verl::algo {

/// verl's (pg_loss, pg_clipfrac, ppo_kl, pg_clipfrac_lower), plus d pg_loss / d log_prob.
struct DeprecatedPolicyLossResult {
  float pg_loss = 0;
  float pg_clipfrac = 0;
  float ppo_kl = 0;
  float pg_clipfrac_lower = 0;
  MatrixF grad_log_prob;
};

/// verl's deprecated compute_policy_loss. cliprange_low / cliprange_high fall back to cliprange;
/// at least one of each pair must be given (verl fails on 1 - None).
[[deprecated("use verl::algo::VanillaPPO (verl's \"vanilla\" policy loss)")]]
inline DeprecatedPolicyLossResult compute_policy_loss_deprecated(
    const ConstMatrixRefF& old_log_prob, const ConstMatrixRefF& log_prob, const ConstMatrixRefF& advantages,
    const ConstMatrixRefF& response_mask, std::optional<double> cliprange, std::optional<double> cliprange_low,
    std::optional<double> cliprange_high, double clip_ratio_c = 3.0,
    LossAggMode loss_agg_mode = LossAggMode::token_mean) {
  const auto low = cliprange_low ? cliprange_low : cliprange;
  const auto high = cliprange_high ? cliprange_high : cliprange;
  VERL_CHECK_ARG(low.has_value(), "cliprange_low: expected a number (or cliprange), got neither");
  VERL_CHECK_ARG(high.has_value(), "cliprange_high: expected a number (or cliprange), got neither");
  const PolicyLossBatch batch{old_log_prob, log_prob, advantages, response_mask};
  auto out = detail::dual_clip_ppo(batch, AggregationContext{loss_agg_mode, {}}, *low, *high, clip_ratio_c);
  return {out.pg_loss, out.pg_clipfrac, out.ppo_kl, out.pg_clipfrac_lower, std::move(out.grad_log_prob)};
}

}  // namespace verl::algo
