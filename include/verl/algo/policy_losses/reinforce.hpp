// verl's compute_policy_loss_reinforce: REINFORCE with optional (detached) IS weights, the loss
// bypass_mode uses for loss_type "reinforce". Not in verl's registry by itself.
#pragma once

#include <string_view>

#include "verl/algo/policy_losses/policy_loss.hpp"
#include "verl/algo/policy_losses/common.hpp"
#include "verl/algo/policy_losses/gpg.hpp"

namespace verl::algo {

/// loss = -A * log_prob * w; gradient -A * w * W. Here batch.old_log_prob is verl's
/// rollout_log_prob; it only feeds actor/ppo_kl = masked_mean(rollout_log_prob - log_prob).
/// verl's default loss_agg_mode for it is seq-mean-token-sum (pass it in the context).
struct ReinforceLoss {
  static constexpr std::string_view name = "reinforce";
  static constexpr AggregationRule aggregation = AggregationRule::follows_config();

  PolicyLossResult compute(const PolicyLossBatch& batch, const AggregationContext& context) const {
    using namespace detail;
    const MaskCounts counts = validate_policy_loss_batch(batch);
    FusedAggregation reduction(counts, context.loss_agg_mode, context.global_batch_info);
    const Index rows = batch.log_prob.rows(), cols = batch.log_prob.cols();
    PolicyLossResult result{0.0f, MatrixF(rows, cols), {}};
    RowScratch scratch(cols);
    double kl_sum = 0;
    for (Index i = 0; i < rows; ++i) {
      const float* lp = row_of(batch.log_prob, i);
      const float* mask = row_of(batch.response_mask, i);
      const float* weights = batch.rollout_is_weights ? row_of(*batch.rollout_is_weights, i) : scratch.ones.data();
      policy_gradient_row(lp, row_of(batch.advantages, i), mask, weights, scratch.loss_terms.data(),
                          row_of(result.grad_log_prob, i), cols, reduction.gradient_weight(i),
                          reduction.selects_valid());
      reduction.add_row(i, sum_row_terms(scratch.loss_terms.data(), cols));
      negative_log_ratio_terms(lp, row_of(batch.old_log_prob, i), mask, scratch.metric_terms.data(), cols);
      kl_sum += sum_row_terms(scratch.metric_terms.data(), cols);
    }
    result.pg_loss = reduction.loss();
    result.metrics["actor/ppo_kl"] = masked_mean_of(kl_sum, static_cast<double>(counts.tokens));
    return result;
  }
};

}  // namespace verl::algo
