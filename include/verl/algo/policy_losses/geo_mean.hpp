// verl's "geo_mean" policy loss (Geometric-Mean Policy Optimization, arXiv:2507.20673): a
// sequence-level ratio from the geometric mean of token ratios, clipped per token in log space.
#pragma once

#include <cmath>
#include <string_view>

#include "verl/algo/policy_loss.hpp"
#include "verl/algo/policy_losses/common.hpp"

namespace verl::algo {

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

  double clip_ratio_low = 0.2;
  double clip_ratio_high = 0.2;

  PolicyLossResult compute(const PolicyLossBatch& batch, const AggregationContext& /*context*/) const {
    using namespace detail;
    const MaskCounts counts = validate_policy_loss_batch(batch);
    const auto low = static_cast<float>(-clip_ratio_low), high = static_cast<float>(clip_ratio_high);
    const Index rows = batch.log_prob.rows(), cols = batch.log_prob.cols();
    const float mean_weight = 1.0f / static_cast<float>(rows);  // torch.mean's backward

    PolicyLossResult result{0.0f, MatrixF(rows, cols), {}};
    MaskedMean kl, clipfrac, clipfrac_lower;
    double loss_sum = 0;
    for (Index i = 0; i < rows; ++i) {
      const float* old = row_of(batch.old_log_prob, i);
      const float* lp = row_of(batch.log_prob, i);
      const float* adv = row_of(batch.advantages, i);
      const float* mask = row_of(batch.response_mask, i);
      const float* is_weight = batch.rollout_is_weights ? row_of(*batch.rollout_is_weights, i) : nullptr;
      float* grad = row_of(result.grad_log_prob, i);

      double clipped_log_ratio_sum = 0, advantage_sum = 0, log_weight_sum = 0;
      for (Index j = 0; j < cols; ++j) {
        const float m = mask[j];
        const float log_ratio = lp[j] - old[j];
        const float clamped = clamp_value(log_ratio, low, high);
        const float s = sign_of(adv[j]);
        const float token_log_ratio = s * minimum_value(s * log_ratio, s * clamped);
        clipped_log_ratio_sum += static_cast<double>(token_log_ratio * m);
        advantage_sum += static_cast<double>(adv[j] * m);
        if (is_weight) log_weight_sum += static_cast<double>(std::log(is_weight[j] + 1e-10f) * m);
        kl.add(-log_ratio, m);
        const float clip_active = log_ratio != clamped ? 1.0f : 0.0f;
        clipfrac.add(adv[j] > 0.0f ? clip_active : 0.0f, m);
        clipfrac_lower.add(adv[j] < 0.0f ? clip_active : 0.0f, m);
      }
      const float length = static_cast<float>(counts.row_lengths[i]) + 1e-8f;
      const float sequence_ratio = std::exp(static_cast<float>(clipped_log_ratio_sum) / length);
      const float sequence_advantage = static_cast<float>(advantage_sum) / length;
      const float sequence_weight = is_weight ? std::exp(static_cast<float>(log_weight_sum) / length) : 1.0f;
      loss_sum += static_cast<double>((-sequence_advantage * sequence_ratio) * sequence_weight);

      // d pg_loss / d(token log-ratio sum of row i), then per token through min/clamp.
      const float row_gradient = mean_weight * sequence_weight * -sequence_advantage * sequence_ratio / length;
      for (Index j = 0; j < cols; ++j) {
        const float log_ratio = lp[j] - old[j];
        const float clamped = clamp_value(log_ratio, low, high);
        const float s = sign_of(adv[j]);
        const float unclamped_term = s * log_ratio, clamped_term = s * clamped;
        const float share = minimum_share(unclamped_term, clamped_term) * s +
                            minimum_share(clamped_term, unclamped_term) * s * clamp_passes(log_ratio, low, high);
        grad[j] = row_gradient * mask[j] * s * share;
      }
    }
    result.pg_loss = static_cast<float>(loss_sum) / static_cast<float>(rows);
    const double valid = static_cast<double>(counts.tokens);
    result.metrics["actor/pg_clipfrac"] = clipfrac.mean(valid);
    result.metrics["actor/ppo_kl"] = kl.mean(valid);
    result.metrics["actor/pg_clipfrac_lower"] = clipfrac_lower.mean(valid);
    return result;
  }
};

}  // namespace verl::algo
