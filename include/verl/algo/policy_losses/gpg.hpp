// verl's "gpg" policy loss (Group Policy Gradient): plain policy gradient on log_prob.
#pragma once

#include <string_view>

#include "verl/algo/policy_losses/config.hpp"
#include "verl/algo/policy_losses/policy_loss.hpp"
#include "verl/algo/policy_losses/common.hpp"

namespace verl::algo {

namespace detail {

/// One row of a policy-gradient loss on log_prob itself (gpg, reinforce): loss terms
/// (-A * log_prob) * w, written as verl orders its products, and the gradient -A * w * W.
inline void policy_gradient_row(const float* __restrict log_prob, const float* __restrict advantages,
                                const float* __restrict mask, const float* __restrict weights,
                                float* __restrict loss_terms, float* __restrict grad, Index cols, float row_weight,
                                bool select_valid) {
  for (Index j = 0; j < cols; ++j) {
    const float m = mask[j];
    loss_terms[j] = row_sum_term((-advantages[j] * log_prob[j]) * weights[j], m, select_valid);
    grad[j] = select(m != 0.0f, row_weight, 0.0f) * weights[j] * -advantages[j];
  }
}

}  // namespace detail

/// loss = -log_prob * A (times rollout_is_weights); gradient -A * w * W. No metrics.
/// old_log_prob is not read (its shape is still checked).
struct GPGLoss {
  static constexpr std::string_view name = "gpg";
  static constexpr AggregationRule aggregation = AggregationRule::follows_config();
  /// This loss (it has no knobs).
  static GPGLoss from_config(const PolicyLossConfig&) { return {}; }

  PolicyLossResult compute(const PolicyLossBatch& batch, const AggregationContext& context) const {
    using namespace detail;
    LossPass pass(batch, context.loss_agg_mode, context.global_batch_info);
    for (Index i = 0; i < pass.rows; ++i) {
      // verl writes -log_prob * A; the product is the same float as -A * log_prob.
      policy_gradient_row(row_of(batch.log_prob, i), row_of(batch.advantages, i), row_of(batch.response_mask, i),
                          pass.is_weights(i), pass.scratch.loss_terms.data(), pass.grad_row(i), pass.cols,
                          pass.reduction.gradient_weight(i), pass.reduction.selects_valid());
      pass.add_loss_terms(i);
    }
    return pass.finish();
  }
};

}  // namespace verl::algo
