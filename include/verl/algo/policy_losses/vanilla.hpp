// verl's "vanilla" policy loss: PPO's clipped surrogate with an asymmetric clip range and the
// dual clip for negative advantages (compute_policy_loss_vanilla).
#pragma once

#include <cmath>
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

inline DualClipPPOOutput dual_clip_ppo(const PolicyLossBatch& batch, const AggregationContext& context,
                                       double clip_ratio_low, double clip_ratio_high, double clip_ratio_c) {
  VERL_CHECK_ARG(clip_ratio_c > 1.0,
                 "clip_ratio_c: expected a value > 1.0 (the dual-clip lower bound of the ratio), got {}",
                 clip_ratio_c);
  const MaskCounts counts = validate_policy_loss_batch(batch);
  FusedAggregation aggregation(counts, context.loss_agg_mode, context.global_batch_info);
  const auto range = RatioClipRange::from_clip_ratios(clip_ratio_low, clip_ratio_high);
  const float dual_clip = static_cast<float>(clip_ratio_c);
  const Index rows = batch.log_prob.rows(), cols = batch.log_prob.cols();

  DualClipPPOOutput out;
  out.grad_log_prob.resize(rows, cols);
  MaskedMean kl, clipfrac, clipfrac_lower;
  for (Index i = 0; i < rows; ++i) {
    const float* old = row_of(batch.old_log_prob, i);
    const float* lp = row_of(batch.log_prob, i);
    const float* adv = row_of(batch.advantages, i);
    const float* mask = row_of(batch.response_mask, i);
    const float* is_weight = batch.rollout_is_weights ? row_of(*batch.rollout_is_weights, i) : nullptr;
    float* grad = row_of(out.grad_log_prob, i);
    const float row_weight = aggregation.gradient_weight(i);
    double row_sum = 0;
    for (Index j = 0; j < cols; ++j) {
      const float m = mask[j];
      const float log_ratio = lp[j] - old[j];
      const float clamped_log_ratio = clamp_value(log_ratio, -kLogRatioBound, kLogRatioBound);
      const float ratio = std::exp(clamped_log_ratio);
      const float advantage = adv[j];
      const float neg_advantage = -advantage;
      const ClippedSurrogate surrogate = clipped_surrogate(neg_advantage, ratio, range);
      const float dual = neg_advantage * dual_clip;  // pg_losses3
      float loss = surrogate.loss;
      float ratio_share = surrogate.ratio_share;
      if (advantage < 0.0f) {  // where(A < 0, min(pg3, clip_pg_losses1), clip_pg_losses1)
        loss = minimum_value(dual, surrogate.loss);
        ratio_share *= minimum_share(surrogate.loss, dual);
      }
      const float weight = is_weight ? is_weight[j] : 1.0f;
      row_sum += aggregation.row_term(loss * weight, m);

      kl.add(-clamped_log_ratio, m);
      clipfrac.add(surrogate.clip_active() ? 1.0f : 0.0f, m);
      clipfrac_lower.add((surrogate.loss > dual && advantage < 0.0f) ? 1.0f : 0.0f, m);

      // Autograd's chain, in its order: W * w, the where/min/max shares, * (-A), * r (exp), and
      // the ±20 clamp's mask.
      const float upstream = (m != 0.0f ? row_weight : 0.0f) * weight;
      grad[j] = upstream * ratio_share * neg_advantage * ratio *
                clamp_passes(log_ratio, -kLogRatioBound, kLogRatioBound);
    }
    aggregation.add_row(i, row_sum);
  }
  const double valid = static_cast<double>(counts.tokens);
  out.pg_loss = aggregation.loss();
  out.pg_clipfrac = clipfrac.mean(valid);
  out.ppo_kl = kl.mean(valid);
  out.pg_clipfrac_lower = clipfrac_lower.mean(valid);
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
