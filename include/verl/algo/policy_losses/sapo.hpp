// verl's "sapo" policy loss (Soft Adaptive Policy Optimization, arXiv:2511.20347): a smooth
// sigmoid gate on the token ratio instead of a hard clip, always aggregated with
// seq-mean-token-mean.
#pragma once

#include <cmath>
#include <string_view>

#include "verl/algo/policy_loss.hpp"
#include "verl/algo/policy_losses/common.hpp"

namespace verl::algo {

/// loss = -A * sigmoid(tau * (r - 1)) * 4 / tau with r = exp(clamp(log_prob - old, ±20)) and
/// tau = tau_pos where A > 0, tau_neg elsewhere. Both clipfracs are reported as 0.
struct SAPO {
  static constexpr std::string_view name = "sapo";
  static constexpr AggregationRule aggregation = AggregationRule::forces(LossAggMode::seq_mean_token_mean);

  double tau_pos = 1.0;
  double tau_neg = 1.05;

  PolicyLossResult compute(const PolicyLossBatch& batch, const AggregationContext& context) const {
    using namespace detail;
    const MaskCounts counts = validate_policy_loss_batch(batch);
    FusedAggregation aggregation(counts, *SAPO::aggregation.effective_mode(context.loss_agg_mode),
                                 context.global_batch_info);
    // verl makes float32 tensors of the temperatures, so the gate runs in float32.
    const auto tau_positive = static_cast<float>(tau_pos), tau_negative = static_cast<float>(tau_neg);
    const float scale_positive = 4.0f / tau_positive, scale_negative = 4.0f / tau_negative;
    const Index rows = batch.log_prob.rows(), cols = batch.log_prob.cols();

    PolicyLossResult result{0.0f, MatrixF(rows, cols), {}};
    MaskedMean kl;
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
        const float log_ratio = lp[j] - old[j];
        const float clamped_log_ratio = clamp_value(log_ratio, -kLogRatioBound, kLogRatioBound);
        const float ratio = std::exp(clamped_log_ratio);
        const float advantage = adv[j];
        const bool positive = advantage > 0.0f;
        const float tau = positive ? tau_positive : tau_negative;
        const float gate_scale = positive ? scale_positive : scale_negative;
        const float sigmoid = 1.0f / (1.0f + std::exp(-(tau * (ratio - 1.0f))));
        const float loss = -(sigmoid * gate_scale) * advantage;
        const float weight = is_weight ? is_weight[j] : 1.0f;
        row_sum += aggregation.row_term(loss * weight, m);
        kl.add(-clamped_log_ratio, m);
        // d loss / d r = -A * (4 / tau) * g (1 - g) * tau; then exp's r and the clamp's mask.
        const float upstream = (m != 0.0f ? row_weight : 0.0f) * weight;
        grad[j] = upstream * -advantage * gate_scale * (sigmoid * (1.0f - sigmoid)) * tau * ratio *
                  clamp_passes(log_ratio, -kLogRatioBound, kLogRatioBound);
      }
      aggregation.add_row(i, row_sum);
    }
    result.pg_loss = aggregation.loss();
    result.metrics["actor/pg_clipfrac"] = 0.0;
    result.metrics["actor/ppo_kl"] = kl.mean(static_cast<double>(counts.tokens));
    result.metrics["actor/pg_clipfrac_lower"] = 0.0;
    return result;
  }
};

}  // namespace verl::algo
