// OPO, on-policy RL with the optimal (length-weighted) reward baseline (arXiv:2505.23585): verl's
// "opo", compute_opo_outcome_advantage.
#pragma once

#include <string_view>
#include <vector>

#include "verl/algo/advantage_estimator.hpp"
#include "verl/algo/advantages/detail/prompt_groups.hpp"
#include "verl/algo/advantages/detail/row_ops.hpp"

namespace verl::algo {

/// a_i = s_i - b_g with b_g = sum(len_j * s_j) / sum(len_j) over the group (len = valid tokens of a
/// row); a group of one has b = 0. A group whose rows are all fully masked has b = 0/0 = NaN, and
/// like verl we return NaN for its rows (NaN * 0 stays NaN). advantages = returns = a_i * m.
struct OPO {
  static constexpr std::string_view name = "opo";
  static constexpr bool needs_critic = false;
  static constexpr bool needs_group_index = true;
  static constexpr bool needs_reward_baseline = false;
  static constexpr bool needs_old_log_probs = false;

  double epsilon = 1e-6;  ///< accepted for verl's signature; unused

  AdvantageResult compute(const AdvantageBatch& batch) const {
    detail::validate_advantage_batch<OPO>(batch);
    const auto& mask = batch.response_mask;
    const VectorF scores = detail::response_scores(batch.token_level_rewards);
    const detail::PromptGroups groups(batch.index);
    const auto num_groups = static_cast<std::size_t>(groups.num_groups());
    std::vector<double> weighted(num_groups, 0.0);
    std::vector<Index> total_length(num_groups, 0);
    for (Index i = 0; i < scores.size(); ++i) {
      const auto g = static_cast<std::size_t>(groups.group_of(i));
      const Index length = detail::row_count(detail::row_of(mask, i), mask.cols());
      weighted[g] += static_cast<double>(static_cast<float>(length) * scores[i]);  // float32 product, as torch
      total_length[g] += length;
    }
    VectorF scalars(scores.size());
    for (Index i = 0; i < scores.size(); ++i) {
      const Index g = groups.group_of(i);
      const auto gi = static_cast<std::size_t>(g);
      const float baseline =
          groups.size_of(g) > 1 ? static_cast<float>(weighted[gi]) / static_cast<float>(total_length[gi]) : 0.0f;
      scalars[i] = scores[i] - baseline;
    }
    return detail::broadcast_over_mask(scalars, mask);
  }
};

}  // namespace verl::algo
