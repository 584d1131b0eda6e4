// verl's "grpo_vectorized" (compute_grpo_vectorized_outcome_advantage): GRPO with the group
// statistics of verl.utils.groupwise.group_mean_std (0.9.1: float32, a two-pass variance, no
// floor), so it equals "grpo" up to float32 rounding.
#pragma once

#include <string_view>

#include "verl/algo/advantages/detail/outcome.hpp"

namespace verl::algo {

/// a_i = (s_i - mean_g) / (std_g + epsilon) (or s_i - mean_g), with std_g = sqrt(max(var_g, 0))
/// from float32 group sums in batch order, var_g two-pass; a group of one has mean 0 and std 1.
/// advantages = returns = a_i * m.
struct GRPOVectorized {
  static constexpr std::string_view name = "grpo_vectorized";
  static constexpr AdvantageInputs needs{.group_index = true};
  static GRPOVectorized from_config(const AdvantageConfig& config) {
    return {.epsilon = config.group_epsilon(), .norm_adv_by_std_in_grpo = config.norm_adv_by_std_in_grpo};
  }

  double epsilon = 1e-6;  ///< std offset
  bool norm_adv_by_std_in_grpo = true;

  AdvantageResult compute(const AdvantageBatch& batch) const { return detail::compute_fresh(*this, batch); }
  void compute_into(const AdvantageBatch& batch, AdvantageResult& out) const { detail::outcome_into(*this, batch, out); }
  /// (s_i - mean_g) / (std_g + epsilon) from float32 batch-order sums.
  VectorF response_scalars(const AdvantageBatch& /*batch*/, const VectorF& scores,
                           const detail::PromptGroups& groups) const {
    const float eps = static_cast<float>(epsilon);
    const auto moments = detail::groupwise_mean_std(scores, groups);
    VectorF scalars(scores.size());
    for (Index i = 0; i < scores.size(); ++i) {
      const auto g = static_cast<std::size_t>(groups.group_of(i));
      const float centered = scores[i] - moments.mean[g];
      scalars[i] = norm_adv_by_std_in_grpo ? centered / (moments.std[g] + eps) : centered;
    }
    return scalars;
  }
};

}  // namespace verl::algo
