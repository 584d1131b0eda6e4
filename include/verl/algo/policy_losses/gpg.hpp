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
    const MaskCounts counts = validate_policy_loss_batch(batch);
    FusedAggregation reduction(counts, context.loss_agg_mode, context.global_batch_info);
    const Index rows = batch.log_prob.rows(), cols = batch.log_prob.cols();
    PolicyLossResult result{0.0f, MatrixF(rows, cols), {}};
    RowScratch scratch(cols);
    for (Index i = 0; i < rows; ++i) {
      const float* weights = batch.rollout_is_weights ? row_of(*batch.rollout_is_weights, i) : scratch.ones.data();
      // verl writes -log_prob * A; the product is the same float as -A * log_prob.
      policy_gradient_row(row_of(batch.log_prob, i), row_of(batch.advantages, i), row_of(batch.response_mask, i),
                          weights, scratch.loss_terms.data(), row_of(result.grad_log_prob, i), cols,
                          reduction.gradient_weight(i), reduction.selects_valid());
      reduction.add_row(i, sum_row_terms(scratch.loss_terms.data(), cols));
    }
    result.pg_loss = reduction.loss();
    return result;
  }
};

}  // namespace verl::algo
