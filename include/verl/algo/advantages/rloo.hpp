// RLOO, REINFORCE with the leave-one-out baseline (arXiv:2402.14740): verl's "rloo" per-group loop
// and "rloo_vectorized". They disagree on a group of one: the loop keeps the raw score, the
// vectorized form gives 0.
#pragma once

#include <algorithm>
#include <string_view>
#include <vector>

#include "verl/algo/advantages/detail/outcome.hpp"

namespace verl::algo {

/// For a group of n > 1: a_i = s_i * n/(n-1) - mean_g * n/(n-1), i.e. s_i minus the mean of the
/// other n-1 scores; a group of one keeps a_i = s_i. advantages = returns = a_i * m.
struct RLOO {
  static constexpr std::string_view name = "rloo";
  static constexpr AdvantageInputs needs{.group_index = true};
  static RLOO from_config(const AdvantageConfig& config) { return {.epsilon = config.group_epsilon()}; }

  double epsilon = 1e-6;  ///< accepted for verl's signature; unused

  AdvantageResult compute(const AdvantageBatch& batch) const { return detail::compute_fresh(*this, batch); }
  void compute_into(const AdvantageBatch& batch, AdvantageResult& out) const { detail::outcome_into(*this, batch, out); }
  /// s_i minus the mean of the other scores of its group (s_i for a group of one).
  VectorF response_scalars(const AdvantageBatch& /*batch*/, const VectorF& scores,
                           const detail::PromptGroups& groups) const {
    const auto moments = detail::torch_group_moments(scores, groups);
    VectorF scalars(scores.size());
    for (Index i = 0; i < scores.size(); ++i) {
      const Index g = groups.group_of(i);
      const Index n = groups.size_of(g);
      if (n > 1) {
        // verl: scores[i] * n / (n - 1) - mean * n / (n - 1), each step in float32.
        const float fn = static_cast<float>(n), fn1 = static_cast<float>(n - 1);
        scalars[i] = (scores[i] * fn) / fn1 - (moments.mean[static_cast<std::size_t>(g)] * fn) / fn1;
      } else {
        scalars[i] = scores[i];
      }
    }
    return scalars;
  }
};

/// a_i = (c * s_i - groupsum) / max(c - 1, 1) * (c > 1), float32 group sums in batch order (torch.
/// bincount); a group of one gets 0. advantages = returns = a_i * m.
struct RLOOVectorized {
  static constexpr std::string_view name = "rloo_vectorized";
  static constexpr AdvantageInputs needs{.group_index = true};
  static RLOOVectorized from_config(const AdvantageConfig& config) { return {.epsilon = config.group_epsilon()}; }

  double epsilon = 1e-6;  ///< accepted for verl's signature; unused

  AdvantageResult compute(const AdvantageBatch& batch) const { return detail::compute_fresh(*this, batch); }
  void compute_into(const AdvantageBatch& batch, AdvantageResult& out) const { detail::outcome_into(*this, batch, out); }
  /// (c s_i - sum_g) / max(c - 1, 1) for a group of c > 1 responses, 0 for a group of one.
  VectorF response_scalars(const AdvantageBatch& /*batch*/, const VectorF& scores,
                           const detail::PromptGroups& groups) const {
    std::vector<float> group_sum(static_cast<std::size_t>(groups.num_groups()), 0.0f);
    for (Index i = 0; i < scores.size(); ++i) group_sum[static_cast<std::size_t>(groups.group_of(i))] += scores[i];
    VectorF scalars(scores.size());
    for (Index i = 0; i < scores.size(); ++i) {
      const Index g = groups.group_of(i);
      const float c = static_cast<float>(groups.size_of(g));
      const float leave_one_out = (c * scores[i] - group_sum[static_cast<std::size_t>(g)]) / std::max(c - 1.0f, 1.0f);
      scalars[i] = leave_one_out * (c > 1.0f ? 1.0f : 0.0f);
    }
    return scalars;
  }
};

}  // namespace verl::algo
