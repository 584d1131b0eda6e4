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
    LossPass pass(batch, context.loss_agg_mode, context.global_batch_info);
    RowScratch& scratch = pass.scratch;
    for (Index i = 0; i < pass.rows; ++i) {
      const float* lp = row_of(batch.log_prob, i);
      const float* mask = row_of(batch.response_mask, i);
      policy_gradient_row(lp, row_of(batch.advantages, i), mask, pass.is_weights(i), scratch.loss_terms.data(),
                          pass.grad_row(i), pass.cols, pass.reduction.gradient_weight(i),
                          pass.reduction.selects_valid());
      negative_log_ratio_terms(lp, row_of(batch.old_log_prob, i), mask, scratch.metric_terms.data(), pass.cols);
      pass.add_loss_and_kl_terms(i);
    }
    return pass.finish_with_kl();
  }
};

}  // namespace verl::algo
