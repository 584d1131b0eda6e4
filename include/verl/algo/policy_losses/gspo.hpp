// verl's "gspo" policy loss (Group Sequence Policy Optimization, arXiv:2507.18071): the PPO clip
// applied to a per-sequence importance ratio, always aggregated with seq-mean-token-mean.
#pragma once

#include <algorithm>
#include <cmath>
#include <string_view>

#include "verl/algo/policy_loss.hpp"
#include "verl/algo/policy_losses/common.hpp"

namespace verl::algo {

/// s_i = exp(min(mean_t(log_prob - old_log_prob), 10)) over the valid tokens of row i (no ±20
/// clamp), clipped to [1 - clip_ratio_low, 1 + clip_ratio_high] as in PPO. verl writes the
/// token ratio as exp(sg(log s_i) + log_prob - sg(log_prob)), so each token's gradient is
/// -A * s_i * W with no cross-token terms (zero where the cap at 10 or the clip is active).
/// pg_clipfrac_lower is always 0.
struct GSPO {
  static constexpr std::string_view name = "gspo";
  static constexpr AggregationRule aggregation = AggregationRule::forces(LossAggMode::seq_mean_token_mean);
  static constexpr float kMaxLogRatio = 10.0f;

  double clip_ratio_low = 0.2;
  double clip_ratio_high = 0.2;

  PolicyLossResult compute(const PolicyLossBatch& batch, const AggregationContext& context) const {
    using namespace detail;
    const MaskCounts counts = validate_policy_loss_batch(batch);
    FusedAggregation aggregation(counts, *GSPO::aggregation.effective_mode(context.loss_agg_mode),
                                 context.global_batch_info);
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

      // Sequence log-ratio: sum(nk * m) / max(len, 1), a float32 sum over float32 products.
      double log_ratio_sum = 0;
      for (Index j = 0; j < cols; ++j) log_ratio_sum += static_cast<double>((lp[j] - old[j]) * mask[j]);
      const auto length = static_cast<float>(std::max<Index>(counts.row_lengths[i], 1));
      const float seq_log_ratio = static_cast<float>(log_ratio_sum) / length;
      const float seq_ratio = std::exp(std::min(seq_log_ratio, kMaxLogRatio));
      const float cap_passes = seq_log_ratio <= kMaxLogRatio ? 1.0f : 0.0f;  // clamp(max=10) passes at 10

      const float row_weight = aggregation.gradient_weight(i);
      double row_sum = 0;
      for (Index j = 0; j < cols; ++j) {
        const float m = mask[j];
        const float neg_advantage = -adv[j];
        const ClippedSurrogate surrogate = clipped_surrogate(neg_advantage, seq_ratio, range);
        const float weight = is_weight ? is_weight[j] : 1.0f;
        row_sum += aggregation.row_term(surrogate.loss * weight, m);
        kl.add(-(lp[j] - old[j]), m);
        clipfrac.add(surrogate.clip_active() ? 1.0f : 0.0f, m);
        const float upstream = (m != 0.0f ? row_weight : 0.0f) * weight;
        grad[j] = upstream * surrogate.ratio_share * neg_advantage * seq_ratio * cap_passes;
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
