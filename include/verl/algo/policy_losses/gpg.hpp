// verl's "gpg" policy loss (Group Policy Gradient): plain policy gradient on log_prob.
#pragma once

#include <string_view>

#include "verl/algo/policy_loss.hpp"
#include "verl/algo/policy_losses/common.hpp"

namespace verl::algo {

/// loss = -log_prob * A (times rollout_is_weights); gradient -A * w * W. No metrics.
/// old_log_prob is not read (its shape is still checked).
struct GPGLoss {
  static constexpr std::string_view name = "gpg";
  static constexpr AggregationRule aggregation = AggregationRule::follows_config();

  PolicyLossResult compute(const PolicyLossBatch& batch, const AggregationContext& context) const {
    using namespace detail;
    const MaskCounts counts = validate_policy_loss_batch(batch);
    FusedAggregation aggregation(counts, context.loss_agg_mode, context.global_batch_info);
    const Index rows = batch.log_prob.rows(), cols = batch.log_prob.cols();
    PolicyLossResult result{0.0f, MatrixF(rows, cols), {}};
    for (Index i = 0; i < rows; ++i) {
      const float* lp = row_of(batch.log_prob, i);
      const float* adv = row_of(batch.advantages, i);
      const float* mask = row_of(batch.response_mask, i);
      const float* is_weight = batch.rollout_is_weights ? row_of(*batch.rollout_is_weights, i) : nullptr;
      float* grad = row_of(result.grad_log_prob, i);
      const float row_weight = aggregation.gradient_weight(i);
      double row_sum = 0;
      for (Index j = 0; j < cols; ++j) {
        const float m = mask[j];
        const float weight = is_weight ? is_weight[j] : 1.0f;
        row_sum += aggregation.row_term((-lp[j] * adv[j]) * weight, m);
        grad[j] = -((m != 0.0f ? row_weight : 0.0f) * weight * adv[j]);
      }
      aggregation.add_row(i, row_sum);
    }
    result.pg_loss = aggregation.loss();
    return result;
  }
};

}  // namespace verl::algo
