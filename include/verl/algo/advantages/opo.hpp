// OPO, on-policy RL with the optimal (length-weighted) reward baseline (arXiv:2505.23585): verl's
// "opo", compute_opo_outcome_advantage.
#pragma once

#include <string_view>
#include <vector>

#include "verl/algo/advantages/detail/outcome.hpp"
#include "verl/algo/advantages/detail/torch_sum.hpp"

namespace verl::algo {

/// a_i = s_i - b_g with b_g = sum(len_j * s_j) / sum(len_j) over the group (len = valid tokens of a
/// row); a group of one has b = 0. A group whose rows are all fully masked has b = 0/0 = NaN, and
/// like verl we return NaN for its rows (NaN * 0 stays NaN). advantages = returns = a_i * m.
struct OPO {
  static constexpr std::string_view name = "opo";
  static constexpr AdvantageInputs needs{.group_index = true};
  static OPO from_config(const AdvantageConfig& config) { return {.epsilon = config.group_epsilon()}; }

  double epsilon = 1e-6;  ///< accepted for verl's signature; unused

  AdvantageResult compute(const AdvantageBatch& batch) const { return detail::compute_fresh(*this, batch); }
  void compute_into(const AdvantageBatch& batch, AdvantageResult& out) const { detail::outcome_into(*this, batch, out); }
  /// s_i - b_g, b_g the group's length-weighted mean score (0 for a group of one).
  VectorF response_scalars(const AdvantageBatch& batch, const VectorF& scores,
                           const detail::PromptGroups& groups) const {
    const auto& mask = batch.response_mask;
    const auto num_groups = static_cast<std::size_t>(groups.num_groups());
    std::vector<float> baseline(num_groups, 0.0f);
    std::vector<float> weighted;
    for (Index g = 0; g < groups.num_groups(); ++g) {
      const auto rows = groups.rows_of(g);
      if (rows.size() == 1) continue;  // a group of one has baseline 0
      // (len * score).sum() / len.sum(): float32 products summed in torch's order, over an integer total.
      weighted.clear();
      Index total_length = 0;
      for (const Index row : rows) {
        const Index length = detail::row_count(detail::row_of(mask, row), mask.cols());
        weighted.push_back(static_cast<float>(length) * scores[row]);
        total_length += length;
      }
      baseline[static_cast<std::size_t>(g)] =
          detail::torch_sum(weighted.data(), static_cast<Index>(weighted.size())) / static_cast<float>(total_length);
    }
    VectorF scalars(scores.size());
    for (Index i = 0; i < scores.size(); ++i) scalars[i] = scores[i] - baseline[static_cast<std::size_t>(groups.group_of(i))];
    return scalars;
  }
};

}  // namespace verl::algo
