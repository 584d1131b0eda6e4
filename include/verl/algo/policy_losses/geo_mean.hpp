// verl's "geo_mean" policy loss (Geometric-Mean Policy Optimization, arXiv:2507.20673): a
// sequence-level ratio from the geometric mean of token ratios, clipped per token in log space.
#pragma once

#include <cmath>
#include <cstdint>
#include <string_view>

#include "verl/algo/policy_losses/config.hpp"
#include "verl/algo/policy_losses/policy_loss.hpp"
#include "verl/algo/policy_losses/common.hpp"

namespace verl::algo {

namespace detail {

struct GeoMeanRowCounts {
  std::int64_t clipped_positive = 0;  ///< clamped log-ratio, A > 0
  std::int64_t clipped_negative = 0;  ///< clamped log-ratio, A < 0
};

/// The per-token log-ratio s * min(s * x, s * clamp(x, low, high)) with s = sign(A).
VERL_FORCE_INLINE float geo_mean_token_log_ratio(float log_ratio, float advantage, float low, float high) {
  const float s = sign_of(advantage);
  return s * minimum_value(s * log_ratio, s * clamp_value(log_ratio, low, high));
}

/// The terms of one row's sums: token log-ratios * m, A * m and -log-ratio on valid tokens
/// (ppo_kl); returns the clip counts.
inline GeoMeanRowCounts geo_mean_terms(const float* __restrict log_prob, const float* __restrict old_log_prob,
                                       const float* __restrict advantages, const float* __restrict mask,
                                       float* __restrict log_ratio_terms, float* __restrict advantage_terms,
                                       float* __restrict kl_terms, Index cols, float low, float high) {
  std::int32_t positive = 0, negative = 0;
  for (Index j = 0; j < cols; ++j) {
    const float m = mask[j], advantage = advantages[j], log_ratio = log_prob[j] - old_log_prob[j];
    const bool valid = m != 0.0f, clipped = log_ratio != clamp_value(log_ratio, low, high);
    log_ratio_terms[j] = geo_mean_token_log_ratio(log_ratio, advantage, low, high) * m;
    advantage_terms[j] = advantage * m;
    kl_terms[j] = select(valid, -log_ratio * m, 0.0f);
    positive += valid & clipped & (advantage > 0.0f);
    negative += valid & clipped & (advantage < 0.0f);
  }
  return {positive, negative};
}

/// log(w + 1e-10) * m for one row: the terms of the per-sequence geometric mean of IS weights.
inline void log_weight_terms(const float* __restrict weights, const float* __restrict mask, float* __restrict terms,
                             Index cols) {
  for (Index j = 0; j < cols; ++j) terms[j] = std::log(weights[j] + 1e-10f) * mask[j];
}

/// d pg_loss / d log_prob for one row, from d pg_loss / d(the row's token log-ratio sum): through
/// the mask, sign(A), and min/clamp with torch's shares.
inline void geo_mean_gradient(const float* __restrict log_prob, const float* __restrict old_log_prob,
                              const float* __restrict advantages, const float* __restrict mask,
                              float* __restrict grad, Index cols, float row_gradient, float low, float high) {
  for (Index j = 0; j < cols; ++j) {
    const float log_ratio = log_prob[j] - old_log_prob[j];
    const float s = sign_of(advantages[j]);
    const float unclamped_term = s * log_ratio, clamped_term = s * clamp_value(log_ratio, low, high);
    const float share = minimum_share(unclamped_term, clamped_term) * s +
                        minimum_share(clamped_term, unclamped_term) * s * clamp_passes(log_ratio, low, high);
    grad[j] = row_gradient * mask[j] * s * share;
  }
}

}  // namespace detail

/// Per token, with nk = log_prob - old (unclamped) and s = sign(A):
/// s * min(s * nk, s * clamp(nk, -clip_ratio_low, clip_ratio_high)). Per row,
/// ratio_i = exp(sum_t(. * m) / (len + 1e-8)) and adv_i = sum_t(A * m) / (len + 1e-8);
/// pg_loss = mean over all B rows (fully masked rows included) of -adv_i * ratio_i, times the
/// per-row geometric mean of the IS weights when given. loss_agg_mode and global_batch_info are
/// ignored. Tokens with A = 0 get no gradient (sign(A) = 0). Metrics: actor/pg_clipfrac
/// (clamped, A > 0), actor/ppo_kl, actor/pg_clipfrac_lower (clamped, A < 0).
struct GeoMean {
  static constexpr std::string_view name = "geo_mean";
  static constexpr AggregationRule aggregation = AggregationRule::own_reduction();
  static GeoMean from_config(const PolicyLossConfig& config) { return {.clip_ratio_low = config.resolved_clip_ratio_low(), .clip_ratio_high = config.resolved_clip_ratio_high()}; }

  double clip_ratio_low = 0.2;
  double clip_ratio_high = 0.2;

  PolicyLossResult compute(const PolicyLossBatch& batch, const AggregationContext& /*context*/) const {
    using namespace detail;
    const MaskCounts counts = validate_policy_loss_batch(batch);
    const auto low = static_cast<float>(-clip_ratio_low), high = static_cast<float>(clip_ratio_high);
    const Index rows = batch.log_prob.rows(), cols = batch.log_prob.cols();
    const float mean_weight = 1.0f / static_cast<float>(rows);  // torch.mean's backward

    PolicyLossResult result{0.0f, MatrixF(rows, cols), {}};
    RowScratch scratch(cols);
    double loss_sum = 0, kl_sum = 0;
    GeoMeanRowCounts clipped;
    for (Index i = 0; i < rows; ++i) {
      const float* lp = row_of(batch.log_prob, i);
      const float* old = row_of(batch.old_log_prob, i);
      const float* adv = row_of(batch.advantages, i);
      const float* mask = row_of(batch.response_mask, i);
      const GeoMeanRowCounts row = geo_mean_terms(lp, old, adv, mask, scratch.loss_terms.data(), scratch.second.data(),
                                                  scratch.metric_terms.data(), cols, low, high);
      clipped.clipped_positive += row.clipped_positive;
      clipped.clipped_negative += row.clipped_negative;
      kl_sum += sum_row_terms(scratch.metric_terms.data(), cols);
      const float length = static_cast<float>(counts.row_lengths[i]) + 1e-8f;
      const float sequence_ratio = std::exp(static_cast<float>(sum_row_terms(scratch.loss_terms.data(), cols)) / length);
      const float sequence_advantage = static_cast<float>(sum_row_terms(scratch.second.data(), cols)) / length;
      float sequence_weight = 1.0f;
      if (batch.rollout_is_weights) {
        log_weight_terms(row_of(*batch.rollout_is_weights, i), mask, scratch.ratio.data(), cols);
        sequence_weight = std::exp(static_cast<float>(sum_row_terms(scratch.ratio.data(), cols)) / length);
      }
      loss_sum += static_cast<double>((-sequence_advantage * sequence_ratio) * sequence_weight);
      // d pg_loss / d(token log-ratio sum of row i).
      const float row_gradient = mean_weight * sequence_weight * -sequence_advantage * sequence_ratio / length;
      geo_mean_gradient(lp, old, adv, mask, row_of(result.grad_log_prob, i), cols, row_gradient, low, high);
    }
    result.pg_loss = static_cast<float>(loss_sum) / static_cast<float>(rows);
    const double valid = static_cast<double>(counts.tokens);
    result.metrics["actor/pg_clipfrac"] = masked_mean_of(static_cast<double>(clipped.clipped_positive), valid);
    result.metrics["actor/ppo_kl"] = masked_mean_of(kl_sum, valid);
    result.metrics["actor/pg_clipfrac_lower"] = masked_mean_of(static_cast<double>(clipped.clipped_negative), valid);
    return result;
  }
};

}  // namespace verl::algo
