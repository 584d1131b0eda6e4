// verl's "gspo" policy loss (Group Sequence Policy Optimization, arXiv:2507.18071): the PPO clip
// applied to a per-sequence importance ratio, aggregated with loss_agg_mode (verl 0.9.1; the
// January version always used seq-mean-token-mean).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string_view>

#include "verl/algo/policy_losses/config.hpp"
#include "verl/algo/policy_losses/policy_loss.hpp"
#include "verl/algo/policy_losses/common.hpp"

namespace verl::algo {

namespace detail {

/// One row of GSPO from its sequence ratio: loss terms, -log-ratio terms (ppo_kl) and gradient;
/// returns the pg_clipfrac count.
inline std::int64_t gspo_row(const float* __restrict log_prob, const float* __restrict old_log_prob,
                             const float* __restrict advantages, const float* __restrict mask,
                             const float* __restrict weights, float* __restrict loss_terms,
                             float* __restrict kl_terms, float* __restrict grad, Index cols, float seq_ratio,
                             float cap_passes, RatioClipRange range, float row_weight, bool select_valid) {
  std::int32_t clipped = 0;
  for (Index j = 0; j < cols; ++j) {
    const float m = mask[j], neg_advantage = -advantages[j];
    const bool valid = m != 0.0f;
    const ClippedSurrogate surrogate = clipped_surrogate(neg_advantage, seq_ratio, range);
    loss_terms[j] = row_sum_term(surrogate.loss * weights[j], m, select_valid);
    kl_terms[j] = select(valid, -(log_prob[j] - old_log_prob[j]) * m, 0.0f);
    clipped += valid & surrogate.clip_active();
    const float upstream = select(valid, row_weight, 0.0f) * weights[j];
    grad[j] = upstream * surrogate.ratio_share * neg_advantage * seq_ratio * cap_passes;
  }
  return clipped;
}

/// (log_prob - old) * m for one row: the terms of the sequence log-ratio.
inline void masked_log_ratio_terms(const float* __restrict log_prob, const float* __restrict old_log_prob,
                                   const float* __restrict mask, float* __restrict terms, Index cols) {
  for (Index j = 0; j < cols; ++j) terms[j] = (log_prob[j] - old_log_prob[j]) * mask[j];
}

}  // namespace detail

/// s_i = exp(min(mean_t(log_prob - old_log_prob), 10)) over the valid tokens of row i (no ±20
/// clamp), clipped to [1 - clip_ratio_low, 1 + clip_ratio_high] as in PPO. verl writes the
/// token ratio as exp(sg(log s_i) + log_prob - sg(log_prob)), so each token's gradient is
/// -A * s_i * W with no cross-token terms (zero where the cap at 10 or the clip is active).
/// pg_clipfrac_lower is always 0.
struct GSPO {
  static constexpr std::string_view name = "gspo";
  static constexpr AggregationRule aggregation = AggregationRule::follows_config();
  static GSPO from_config(const PolicyLossConfig& config) { return {.clip_ratio_low = config.resolved_clip_ratio_low(), .clip_ratio_high = config.resolved_clip_ratio_high()}; }
  static constexpr float kMaxLogRatio = 10.0f;

  double clip_ratio_low = 0.2;
  double clip_ratio_high = 0.2;

  PolicyLossResult compute(const PolicyLossBatch& batch, const AggregationContext& context) const {
    using namespace detail;
    LossPass pass(batch, context.loss_agg_mode, context.global_batch_info);
    const auto range = RatioClipRange::from_clip_ratios(clip_ratio_low, clip_ratio_high);
    RowScratch& scratch = pass.scratch;
    const Index cols = pass.cols;
    for (Index i = 0; i < pass.rows; ++i) {
      const float* lp = row_of(batch.log_prob, i);
      const float* old = row_of(batch.old_log_prob, i);
      const float* mask = row_of(batch.response_mask, i);
      // Sequence log-ratio: sum(nk * m) / max(len, 1) in float32.
      masked_log_ratio_terms(lp, old, mask, scratch.metric_terms.data(), cols);
      const auto length = static_cast<float>(std::max<Index>(pass.counts.row_lengths[i], 1));
      const float seq_log_ratio = static_cast<float>(sum_row_terms(scratch.metric_terms.data(), cols)) / length;
      const float seq_ratio = std::exp(std::min(seq_log_ratio, kMaxLogRatio));
      const float cap_passes = indicator(seq_log_ratio <= kMaxLogRatio);  // clamp(max=10) passes at 10
      pass.clipped += gspo_row(lp, old, row_of(batch.advantages, i), mask, pass.is_weights(i),
                               scratch.loss_terms.data(), scratch.metric_terms.data(), pass.grad_row(i), cols,
                               seq_ratio, cap_passes, range, pass.reduction.gradient_weight(i),
                               pass.reduction.selects_valid());
      pass.add_loss_and_kl_terms(i);
    }
    return pass.finish_with_clip_metrics();
  }
};

}  // namespace verl::algo
