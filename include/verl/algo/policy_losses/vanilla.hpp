// verl's "vanilla" policy loss: PPO's clipped surrogate with an asymmetric clip range and the
// dual clip for negative advantages (compute_policy_loss_vanilla).
#pragma once

#include <cmath>
#include <cstdint>
#include <string_view>

#include "verl/algo/policy_loss.hpp"
#include "verl/algo/policy_losses/common.hpp"

namespace verl::algo {

namespace detail {

/// The dual-clip PPO pass shared by vanilla, the deprecated compute_policy_loss and bypass_mode's
/// ppo_clip: loss, gradient and the three metrics, in one pass over the batch.
struct DualClipPPOOutput {
  float pg_loss = 0;
  MatrixF grad_log_prob;
  float pg_clipfrac = 0;
  float ppo_kl = 0;
  float pg_clipfrac_lower = 0;
};

struct DualClipCounts {
  std::int64_t clipped = 0;        ///< pg_losses2 > pg_losses1
  std::int64_t clipped_lower = 0;  ///< the dual clip is active (A < 0)
};

/// One row of the dual-clip PPO loss: loss terms (for the row sum), -log-ratio terms (ppo_kl) and
/// the gradient, from the row's ratios; returns the clip-indicator counts.
inline DualClipCounts dual_clip_ppo_row(const float* __restrict log_prob, const float* __restrict old_log_prob,
                                        const float* __restrict advantages, const float* __restrict mask,
                                        const float* __restrict weights, const float* __restrict ratio,
                                        float* __restrict loss_terms, float* __restrict kl_terms,
                                        float* __restrict grad, Index cols, RatioClipRange range, float dual_clip,
                                        float row_weight, bool select_valid) {
  std::int32_t clipped = 0, clipped_lower = 0;
  for (Index j = 0; j < cols; ++j) {
    const float m = mask[j], r = ratio[j], advantage = advantages[j], neg_advantage = -advantage;
    const float log_ratio = log_prob[j] - old_log_prob[j];
    const bool valid = m != 0.0f, negative = advantage < 0.0f;
    const ClippedSurrogate surrogate = clipped_surrogate(neg_advantage, r, range);
    const float dual = neg_advantage * dual_clip;  // pg_losses3
    // where(A < 0, min(pg3, clip_pg_losses1), clip_pg_losses1)
    const float loss = select(negative, minimum_value(dual, surrogate.loss), surrogate.loss);
    const float dual_share = select(negative, minimum_share(surrogate.loss, dual), 1.0f);
    loss_terms[j] = row_sum_term(loss * weights[j], m, select_valid);
    kl_terms[j] = select(valid, -clamp_value(log_ratio, -kLogRatioBound, kLogRatioBound) * m, 0.0f);
    clipped += valid & surrogate.clip_active();
    clipped_lower += valid & negative & (surrogate.loss > dual);
    // Autograd's chain, in its order: W * w, the where/min/max shares, * (-A), * r (exp), and the
    // ±20 clamp's mask.
    const float upstream = select(valid, row_weight, 0.0f) * weights[j];
    grad[j] = upstream * (surrogate.ratio_share * dual_share) * neg_advantage * r *
              clamp_passes(log_ratio, -kLogRatioBound, kLogRatioBound);
  }
  return {clipped, clipped_lower};
}

inline DualClipPPOOutput dual_clip_ppo(const PolicyLossBatch& batch, const AggregationContext& context,
                                       double clip_ratio_low, double clip_ratio_high, double clip_ratio_c) {
  VERL_CHECK_ARG(clip_ratio_c > 1.0,
                 "clip_ratio_c: expected a value > 1.0 (the dual-clip lower bound of the ratio), got {}",
                 clip_ratio_c);
  const MaskCounts counts = validate_policy_loss_batch(batch);
  FusedAggregation reduction(counts, context.loss_agg_mode, context.global_batch_info);
  const auto range = RatioClipRange::from_clip_ratios(clip_ratio_low, clip_ratio_high);
  const float dual_clip = static_cast<float>(clip_ratio_c);
  const Index rows = batch.log_prob.rows(), cols = batch.log_prob.cols();

  DualClipPPOOutput out;
  out.grad_log_prob.resize(rows, cols);
  RowScratch scratch(cols);
  double kl_sum = 0;
  DualClipCounts total;
  for (Index i = 0; i < rows; ++i) {
    const float* lp = row_of(batch.log_prob, i);
    const float* old = row_of(batch.old_log_prob, i);
    const float* weights = batch.rollout_is_weights ? row_of(*batch.rollout_is_weights, i) : scratch.ones.data();
    row_ratio(lp, old, scratch.ratio.data(), cols, kLogRatioBound);
    const DualClipCounts row = dual_clip_ppo_row(
        lp, old, row_of(batch.advantages, i), row_of(batch.response_mask, i), weights, scratch.ratio.data(),
        scratch.loss_terms.data(), scratch.metric_terms.data(), row_of(out.grad_log_prob, i), cols, range, dual_clip,
        reduction.gradient_weight(i), reduction.selects_valid());
    reduction.add_row(i, sum_row_terms(scratch.loss_terms.data(), cols));
    kl_sum += sum_row_terms(scratch.metric_terms.data(), cols);
    total.clipped += row.clipped;
    total.clipped_lower += row.clipped_lower;
  }
  const double valid = static_cast<double>(counts.tokens);
  out.pg_loss = reduction.loss();
  out.pg_clipfrac = masked_mean_of(static_cast<double>(total.clipped), valid);
  out.ppo_kl = masked_mean_of(kl_sum, valid);
  out.pg_clipfrac_lower = masked_mean_of(static_cast<double>(total.clipped_lower), valid);
  return out;
}

}  // namespace detail

/// PPO clipped surrogate with asymmetric clip [1 - clip_ratio_low, 1 + clip_ratio_high] and the
/// dual clip: for A < 0 the loss is capped at -A * clip_ratio_c. The log-ratio is clamped to
/// ±20 before exp. Metrics: actor/pg_clipfrac, actor/ppo_kl, actor/pg_clipfrac_lower.
struct VanillaPPO {
  static constexpr std::string_view name = "vanilla";
  static constexpr AggregationRule aggregation = AggregationRule::follows_config();

  double clip_ratio_low = 0.2;
  double clip_ratio_high = 0.2;
  double clip_ratio_c = 3.0;  ///< must be > 1

  PolicyLossResult compute(const PolicyLossBatch& batch, const AggregationContext& context) const {
    auto out = detail::dual_clip_ppo(batch, context, clip_ratio_low, clip_ratio_high, clip_ratio_c);
    PolicyLossResult result{out.pg_loss, std::move(out.grad_log_prob), {}};
    result.metrics["actor/pg_clipfrac"] = out.pg_clipfrac;
    result.metrics["actor/ppo_kl"] = out.ppo_kl;
    result.metrics["actor/pg_clipfrac_lower"] = out.pg_clipfrac_lower;
    return result;
  }
};

}  // namespace verl::algo
