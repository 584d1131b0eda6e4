// verl's "cispo" policy loss (Clipped IS-weight Policy Optimization, arXiv:2506.13585): a
// REINFORCE-style loss weighted by the clipped, detached importance ratio.
#pragma once

#include <cmath>
#include <cstdint>
#include <string_view>

#include "verl/algo/policy_losses/config.hpp"
#include "verl/algo/policy_losses/policy_loss.hpp"
#include "verl/algo/policy_losses/common.hpp"

namespace verl::algo {

namespace detail {

/// One row of CISPO from the ratios: loss terms, ppo_kl terms, gradient; returns the pg_clipfrac
/// count (ratio != clipped ratio).
inline std::int64_t cispo_row(const float* __restrict log_prob, const float* __restrict old_log_prob,
                              const float* __restrict advantages, const float* __restrict mask,
                              const float* __restrict weights, const float* __restrict ratio,
                              float* __restrict loss_terms, float* __restrict kl_terms, float* __restrict grad,
                              Index cols, RatioClipRange range, float row_weight, bool select_valid) {
  std::int32_t clipped = 0;
  for (Index j = 0; j < cols; ++j) {
    const float m = mask[j], r = ratio[j];
    const bool valid = m != 0.0f;
    const float clipped_ratio = clamp_value(r, range.low, range.high);
    const float coefficient = -clipped_ratio * advantages[j];  // the detached factor of log_prob
    loss_terms[j] = row_sum_term((coefficient * log_prob[j]) * weights[j], m, select_valid);
    kl_terms[j] =
        select(valid, -clamp_value(log_prob[j] - old_log_prob[j], -kLogRatioBound, kLogRatioBound) * m, 0.0f);
    clipped += valid & (r != clipped_ratio);
    grad[j] = select(valid, row_weight, 0.0f) * weights[j] * coefficient;
  }
  return clipped;
}

}  // namespace detail

/// loss = -sg(clamp(r, 1 - clip_ratio_low, 1 + clip_ratio_high)) * A * log_prob with
/// r = exp(clamp(log_prob - old, ±20)). The clipped ratio is detached, so the gradient
/// -clamp(r) * A * w * W flows through the explicit log_prob factor only, also outside the clip
/// range and past ±20. pg_clipfrac = masked_mean(r != clamp(r)); pg_clipfrac_lower = 0.
struct CISPO {
  static constexpr std::string_view name = "cispo";
  static constexpr AggregationRule aggregation = AggregationRule::follows_config();
  static CISPO from_config(const PolicyLossConfig& config) { return {.clip_ratio_low = config.resolved_clip_ratio_low(), .clip_ratio_high = config.resolved_clip_ratio_high()}; }

  double clip_ratio_low = 0.2;
  double clip_ratio_high = 0.2;

  PolicyLossResult compute(const PolicyLossBatch& batch, const AggregationContext& context) const {
    using namespace detail;
    LossPass pass(batch, context.loss_agg_mode, context.global_batch_info);
    const auto range = RatioClipRange::from_clip_ratios(clip_ratio_low, clip_ratio_high);
    RowScratch& scratch = pass.scratch;
    for (Index i = 0; i < pass.rows; ++i) {
      const float* lp = row_of(batch.log_prob, i);
      const float* old = row_of(batch.old_log_prob, i);
      row_ratio(lp, old, scratch.ratio.data(), pass.cols, kLogRatioBound);
      pass.clipped += cispo_row(lp, old, row_of(batch.advantages, i), row_of(batch.response_mask, i),
                                pass.is_weights(i), scratch.ratio.data(), scratch.loss_terms.data(),
                                scratch.metric_terms.data(), pass.grad_row(i), pass.cols, range,
                                pass.reduction.gradient_weight(i), pass.reduction.selects_valid());
      pass.add_loss_and_kl_terms(i);
    }
    return pass.finish_with_clip_metrics();
  }
};

}  // namespace verl::algo
