// verl's "cispo" policy loss (Clipped IS-weight Policy Optimization, arXiv:2506.13585): a
// REINFORCE-style loss weighted by the clipped, detached importance ratio.
#pragma once

#include <cmath>
#include <string_view>

#include "verl/algo/policy_loss.hpp"
#include "verl/algo/policy_losses/common.hpp"

namespace verl::algo {

/// loss = -sg(clamp(r, 1 - clip_ratio_low, 1 + clip_ratio_high)) * A * log_prob with
/// r = exp(clamp(log_prob - old, ±20)). The clipped ratio is detached, so the gradient
/// -clamp(r) * A * w * W flows through the explicit log_prob factor only, also outside the clip
/// range and past ±20. pg_clipfrac = masked_mean(r != clamp(r)); pg_clipfrac_lower = 0.
struct CISPO {
  static constexpr std::string_view name = "cispo";
  static constexpr AggregationRule aggregation = AggregationRule::follows_config();

  double clip_ratio_low = 0.2;
  double clip_ratio_high = 0.2;

  PolicyLossResult compute(const PolicyLossBatch& batch, const AggregationContext& context) const {
    using namespace detail;
    const MaskCounts counts = validate_policy_loss_batch(batch);
    FusedAggregation aggregation(counts, context.loss_agg_mode, context.global_batch_info);
    const auto range = RatioClipRange::from_clip_ratios(clip_ratio_low, clip_ratio_high);
    const Index rows = batch.log_prob.rows(), cols = batch.log_prob.cols();

    PolicyLossResult result{0.0f, MatrixF(rows, cols), {}};
    MaskedMean kl, clipfrac;
    for (Index i = 0; i < rows; ++i) {
      const float* old = row_of(batch.old_log_prob, i);
      const float* lp = row_of(batch.log_prob, i);
      const float* adv = row_of(batch.advantages, i);
      const float* mask = row_of(batch.response_mask, i);
      const float* is_weight = batch.rollout_is_weights ? row_of(*batch.rollout_is_weights, i) : nullptr;
      float* grad = row_of(result.grad_log_prob, i);
      const float row_weight = aggregation.gradient_weight(i);
      double row_sum = 0;
      for (Index j = 0; j < cols; ++j) {
        const float m = mask[j];
        const float clamped_log_ratio = clamp_value(lp[j] - old[j], -kLogRatioBound, kLogRatioBound);
        const float ratio = std::exp(clamped_log_ratio);
        const float clipped_ratio = clamp_value(ratio, range.low, range.high);
        const float coefficient = -clipped_ratio * adv[j];  // the detached factor of log_prob
        const float weight = is_weight ? is_weight[j] : 1.0f;
        row_sum += aggregation.row_term((coefficient * lp[j]) * weight, m);
        kl.add(-clamped_log_ratio, m);
        clipfrac.add(ratio != clipped_ratio ? 1.0f : 0.0f, m);
        grad[j] = (m != 0.0f ? row_weight : 0.0f) * weight * coefficient;
      }
      aggregation.add_row(i, row_sum);
    }
    const double valid = static_cast<double>(counts.tokens);
    result.pg_loss = aggregation.loss();
    result.metrics["actor/pg_clipfrac"] = clipfrac.mean(valid);
    result.metrics["actor/ppo_kl"] = kl.mean(valid);
    result.metrics["actor/pg_clipfrac_lower"] = 0.0;
    return result;
  }
};

}  // namespace verl::algo
