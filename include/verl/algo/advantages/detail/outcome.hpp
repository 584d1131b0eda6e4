// The pass every outcome estimator shares (GRPO and its variants, RLOO, OPO, GPG, REINFORCE++ with
// baseline): check the batch, sum each response's rewards into its score, group the responses by
// prompt, take one scalar per response from the estimator, and broadcast it over the response's
// valid tokens (advantages = returns, one matrix).
#pragma once

#include "verl/algo/advantages/estimator.hpp"
#include "verl/algo/advantages/detail/group_moments.hpp"
#include "verl/algo/advantages/detail/prompt_groups.hpp"
#include "verl/algo/advantages/detail/row_ops.hpp"

namespace verl::algo::detail {

/// An estimator whose advantage is one scalar per response: `response_scalars(batch, scores,
/// groups)` gives a_i from the scores s_i and their prompt groups.
template <class E>
concept OutcomeScalars = requires(const E& estimator, const AdvantageBatch& batch, const VectorF& scores,
                                  const PromptGroups& groups) {
  { estimator.response_scalars(batch, scores, groups) } -> std::convertible_to<VectorF>;
};

template <OutcomeScalars E>
void outcome_into(const E& estimator, const AdvantageBatch& batch, AdvantageResult& out) {
  validate_advantage_batch<E>(batch);
  const VectorF scores = response_scores(batch.token_level_rewards);
  const PromptGroups groups(batch.index);
  broadcast_over_mask(estimator.response_scalars(batch, scores, groups), batch.response_mask, out);
}

}  // namespace verl::algo::detail
