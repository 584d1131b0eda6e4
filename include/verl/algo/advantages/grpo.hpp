// GRPO (verl's "grpo", compute_grpo_outcome_advantage) and Dr.GRPO, its variant without the
// division by the group's standard deviation (verl: norm_adv_by_std_in_grpo=False).
#pragma once

#include <string_view>

#include "verl/algo/advantages/detail/outcome.hpp"

namespace verl::algo {

/// a_i = (s_i - mean_g) / (std_g + epsilon), s_i the sum of row i's rewards (padding included),
/// mean and unbiased std over the rows sharing row i's prompt; a group of one has mean 0, std 1.
/// advantages = returns = a_i * response_mask.
struct GRPO {
  static constexpr std::string_view name = "grpo";
  static constexpr AdvantageInputs needs{.group_index = true};
  static GRPO from_config(const AdvantageConfig& config) {
    return {.epsilon = config.group_epsilon(), .norm_adv_by_std_in_grpo = config.norm_adv_by_std_in_grpo};
  }

  double epsilon = 1e-6;                ///< added to the std (a Python float: rounded to float32 on use)
  bool norm_adv_by_std_in_grpo = true;  ///< false: Dr.GRPO, a_i = s_i - mean_g

  AdvantageResult compute(const AdvantageBatch& batch) const { return detail::compute_fresh(*this, batch); }
  void compute_into(const AdvantageBatch& batch, AdvantageResult& out) const { detail::outcome_into(*this, batch, out); }
  /// (s_i - mean_g) / (std_g + epsilon), or s_i - mean_g without the std normalisation.
  VectorF response_scalars(const AdvantageBatch& /*batch*/, const VectorF& scores,
                           const detail::PromptGroups& groups) const {
    const auto moments = detail::torch_group_moments(scores, groups);
    const float eps = static_cast<float>(epsilon);
    VectorF scalars(scores.size());
    for (Index i = 0; i < scores.size(); ++i) {
      const auto g = static_cast<std::size_t>(groups.group_of(i));
      const float centered = scores[i] - moments.mean[g];
      scalars[i] = norm_adv_by_std_in_grpo ? centered / (moments.std[g] + eps) : centered;
    }
    return scalars;
  }
};

/// Dr.GRPO (arXiv:2503.20783): GRPO without the std normalisation. verl runs it as "grpo" with
/// norm_adv_by_std_in_grpo=False, so it carries the same registry name.
struct DrGRPO {
  static constexpr std::string_view name = "grpo";
  static constexpr AdvantageInputs needs{.group_index = true};
  static DrGRPO from_config(const AdvantageConfig& config) { return {.epsilon = config.group_epsilon()}; }

  double epsilon = 1e-6;  ///< unused without the std normalisation; kept for a uniform config

  AdvantageResult compute(const AdvantageBatch& batch) const { return detail::compute_fresh(*this, batch); }
  /// As compute(), reusing the storage of `out` (the previous step's result) when it fits.
  void compute_into(const AdvantageBatch& batch, AdvantageResult& out) const {
    GRPO{.epsilon = epsilon, .norm_adv_by_std_in_grpo = false}.compute_into(batch, out);
  }
};

}  // namespace verl::algo
