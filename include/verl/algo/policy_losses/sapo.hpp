// verl's "sapo" policy loss (Soft Adaptive Policy Optimization, arXiv:2511.20347): a smooth
// sigmoid gate on the token ratio instead of a hard clip, always aggregated with
// seq-mean-token-mean.
#pragma once

#include <cmath>
#include <string_view>

#include "verl/algo/policy_losses/config.hpp"
#include "verl/algo/policy_losses/policy_loss.hpp"
#include "verl/algo/policy_losses/common.hpp"

namespace verl::algo {

namespace detail {

/// exp(-(tau * (r - 1))) for one row: the exponential inside the sigmoid gate.
inline void sapo_gate_exponent(const float* __restrict advantages, const float* __restrict ratio,
                               float* __restrict out, Index cols, float tau_positive, float tau_negative) {
  for (Index j = 0; j < cols; ++j) {
    const float tau = select(advantages[j] > 0.0f, tau_positive, tau_negative);
    out[j] = std::exp(-(tau * (ratio[j] - 1.0f)));
  }
}

/// One row of SAPO from the ratios and the gate exponentials: loss terms, ppo_kl terms, gradient.
inline void sapo_row(const float* __restrict log_prob, const float* __restrict old_log_prob,
                     const float* __restrict advantages, const float* __restrict mask,
                     const float* __restrict weights, const float* __restrict ratio,
                     const float* __restrict gate_exponent, float* __restrict loss_terms,
                     float* __restrict kl_terms, float* __restrict grad, Index cols, float tau_positive,
                     float tau_negative, float row_weight, bool select_valid) {
  const float scale_positive = 4.0f / tau_positive, scale_negative = 4.0f / tau_negative;
  for (Index j = 0; j < cols; ++j) {
    const float m = mask[j], advantage = advantages[j], r = ratio[j];
    const float log_ratio = log_prob[j] - old_log_prob[j];
    const bool valid = m != 0.0f, positive = advantage > 0.0f;
    const float tau = select(positive, tau_positive, tau_negative);
    const float gate_scale = select(positive, scale_positive, scale_negative);  // 4 / tau, in float32
    const float sigmoid = 1.0f / (1.0f + gate_exponent[j]);
    const float loss = -(sigmoid * gate_scale) * advantage;
    loss_terms[j] = row_sum_term(loss * weights[j], m, select_valid);
    kl_terms[j] = select(valid, -clamp_value(log_ratio, -kLogRatioBound, kLogRatioBound) * m, 0.0f);
    // d loss / d r = -A * (4 / tau) * g (1 - g) * tau; then exp's r and the clamp's mask.
    const float upstream = select(valid, row_weight, 0.0f) * weights[j];
    grad[j] = upstream * -advantage * gate_scale * (sigmoid * (1.0f - sigmoid)) * tau * r *
              clamp_passes(log_ratio, -kLogRatioBound, kLogRatioBound);
  }
}

}  // namespace detail

/// loss = -A * sigmoid(tau * (r - 1)) * 4 / tau with r = exp(clamp(log_prob - old, ±20)) and
/// tau = tau_pos where A > 0, tau_neg elsewhere. Both clipfracs are reported as 0.
struct SAPO {
  static constexpr std::string_view name = "sapo";
  static constexpr AggregationRule aggregation = AggregationRule::forces(LossAggMode::seq_mean_token_mean);
  static SAPO from_config(const PolicyLossConfig& config) { return {.tau_pos = config.tau_pos, .tau_neg = config.tau_neg}; }

  double tau_pos = 1.0;
  double tau_neg = 1.05;

  PolicyLossResult compute(const PolicyLossBatch& batch, const AggregationContext& context) const {
    using namespace detail;
    LossPass pass(batch, *SAPO::aggregation.effective_mode(context.loss_agg_mode), context.global_batch_info);
    // verl makes float32 tensors of the temperatures, so the gate runs in float32.
    const auto tau_positive = static_cast<float>(tau_pos), tau_negative = static_cast<float>(tau_neg);
    RowScratch& scratch = pass.scratch;
    const Index cols = pass.cols;
    for (Index i = 0; i < pass.rows; ++i) {
      const float* lp = row_of(batch.log_prob, i);
      const float* old = row_of(batch.old_log_prob, i);
      const float* adv = row_of(batch.advantages, i);
      row_ratio(lp, old, scratch.ratio.data(), cols, kLogRatioBound);
      sapo_gate_exponent(adv, scratch.ratio.data(), scratch.second.data(), cols, tau_positive, tau_negative);
      sapo_row(lp, old, adv, row_of(batch.response_mask, i), pass.is_weights(i), scratch.ratio.data(),
               scratch.second.data(), scratch.loss_terms.data(), scratch.metric_terms.data(), pass.grad_row(i), cols,
               tau_positive, tau_negative, pass.reduction.gradient_weight(i), pass.reduction.selects_valid());
      pass.add_loss_and_kl_terms(i);
    }
    return pass.finish_with_clip_metrics();  // SAPO's gate clips nothing: pg_clipfrac is 0
  }
};

}  // namespace verl::algo
