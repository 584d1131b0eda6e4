// verl's "grpo_passk" (compute_grpo_passk_outcome_advantage, arXiv:2503.19595): only the best
// response of each group is credited, with its margin over the runner-up.
#pragma once

#include <algorithm>
#include <limits>
#include <span>
#include <string_view>

#include "verl/algo/advantages/detail/outcome.hpp"

namespace verl::algo {

/// In each group the top-scoring row gets r_max - r_second (divided by std_unbiased + epsilon when
/// normalising; torch.std accumulates in double); every other row gets 0. advantages = returns =
/// a_i * m. Every group needs at least two responses (verl raises ValueError otherwise).
struct GRPOPassK {
  static constexpr std::string_view name = "grpo_passk";
  static constexpr AdvantageInputs needs{.group_index = true};
  static GRPOPassK from_config(const AdvantageConfig& config) {
    return {.epsilon = config.group_epsilon(), .norm_adv_by_std_in_grpo = config.norm_adv_by_std_in_grpo};
  }

  double epsilon = 1e-6;
  /// verl reads this from config.norm_adv_by_std_in_grpo (its keyword argument is ignored).
  bool norm_adv_by_std_in_grpo = true;

  AdvantageResult compute(const AdvantageBatch& batch) const { return detail::compute_fresh(*this, batch); }
  void compute_into(const AdvantageBatch& batch, AdvantageResult& out) const { detail::outcome_into(*this, batch, out); }
  /// The margin of each group's best response over the runner-up (over std_g + epsilon when
  /// normalising); 0 for the other responses.
  VectorF response_scalars(const AdvantageBatch& batch, const VectorF& scores,
                           const detail::PromptGroups& groups) const {
    const auto moments = detail::torch_group_moments(scores, groups);
    VectorF scalars = VectorF::Zero(scores.size());
    for (Index g = 0; g < groups.num_groups(); ++g) {
      const auto rows = groups.rows_of(g);
      VERL_CHECK_ARG(rows.size() >= 2, "index: grpo_passk needs at least 2 responses per prompt group, got {} for uid {}",
                     rows.size(), batch.index[static_cast<std::size_t>(rows[0])]);
      // torch.topk(rewards, 2). Which of several tied maxima it reports cannot matter: the margin
      // is then 0 for whichever row carries it.
      Index best = rows[0];
      for (const Index row : rows)
        if (scores[row] > scores[best]) best = row;
      float runner_up = -std::numeric_limits<float>::infinity();
      for (const Index row : rows)
        if (row != best) runner_up = std::max(runner_up, scores[row]);
      float advantage = scores[best] - runner_up;
      if (norm_adv_by_std_in_grpo)
        advantage = advantage / (moments.std[static_cast<std::size_t>(g)] + static_cast<float>(epsilon));
      scalars[best] = advantage;
    }
    return scalars;
  }
};

}  // namespace verl::algo
