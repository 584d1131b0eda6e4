// ReMax (arXiv:2310.10505): verl's "remax", compute_remax_outcome_advantage. The baseline is the
// reward of a greedy rollout of the same prompt.
#pragma once

#include <string_view>

#include "verl/algo/advantages/estimator.hpp"
#include "verl/algo/advantages/detail/row_ops.hpp"

namespace verl::algo {

/// returns_t = sum_{s >= t} r_s * m_s (reward-to-go), advantages = returns - baseline_i * m.
struct ReMax {
  static constexpr std::string_view name = "remax";
  static constexpr AdvantageInputs needs{.reward_baselines = true};
  static ReMax from_config(const AdvantageConfig&) { return {}; }

  AdvantageResult compute(const AdvantageBatch& batch) const { return detail::compute_fresh(*this, batch); }
  /// As compute(), reusing the storage of `out` (the previous step's result) when it fits.
  void compute_into(const AdvantageBatch& batch, AdvantageResult& out) const {
    detail::validate_advantage_batch<ReMax>(batch);
    const Index rows = batch.batch_size(), cols = batch.response_length();
    const float* baselines = batch.reward_baselines.value().data();  // present: validated above
    detail::prepare_output(out.advantages, rows, cols);
    detail::prepare_output(out.separate_returns(), rows, cols);
    for (Index i = 0; i < rows; ++i) {
      const float* m = detail::row_of(batch.response_mask, i);
      detail::require_binary_mask_row("response_mask", m, cols, i);
      float* ret = detail::row_of(out.returns(), i);
      detail::reverse_cumsum_masked(detail::row_of(batch.token_level_rewards, i), m, ret, cols);
      float* adv = detail::row_of(out.advantages, i);
      const float b = baselines[i];
      for (Index j = 0; j < cols; ++j) adv[j] = ret[j] - b * m[j];
    }
  }
};

}  // namespace verl::algo
