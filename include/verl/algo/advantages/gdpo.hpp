// verl 0.9.1's "gdpo" (compute_gdpo_outcome_advantage): GRPO applied to each reward component on
// its own, the normalised components summed with weights, then whitened over the batch.
//
// verl's trainer always takes the multi-key path: the components named by
// algorithm.gdpo_reward_keys, which its reward manager fills from the entries of the reward
// function's dict (non_tensor_batch[key]). verl-cpp's trainer passes them as
// AdvantageBatch::reward_components; a batch without them takes verl's fallback, where
// token_level_rewards is the single component.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "verl/algo/advantages/detail/masked_whiten.hpp"
#include "verl/algo/advantages/detail/outcome.hpp"
#include "verl/algo/advantages/estimator.hpp"
#include "verl/algo/advantages/grpo.hpp"
#include "verl/core/error.hpp"

namespace verl::algo {

/// For reward components s^1..s^K (one score per response each):
///   A^k_i = grpo(s^k)_i (group mean and unbiased std, epsilon, norm_adv_by_std_in_grpo),
///   S_it  = sum_k w_k (A^k_i m_it)   (float32 weights, all 1 when none are given),
///   advantages = returns = masked_whiten(S, m) * m over the whole batch.
/// Without components (compute(batch)), the only component is the row sum of token_level_rewards.
/// Weights beyond the components are unused; fewer weights than components is an error, as is
/// fewer than 2 valid tokens in the batch (verl's masked_var).
struct GDPO {
  static constexpr std::string_view name = "gdpo";
  static constexpr AdvantageInputs needs{.group_index = true, .reward_components = true};

  static GDPO from_config(const AdvantageConfig& config) {
    return {.epsilon = config.group_epsilon(),
            .norm_adv_by_std_in_grpo = config.norm_adv_by_std_in_grpo,
            .reward_weights = config.gdpo_reward_weights,
            .reward_keys = config.gdpo_reward_keys};
  }

  double epsilon = 1e-6;
  bool norm_adv_by_std_in_grpo = true;
  std::optional<std::vector<double>> reward_weights{};  ///< algorithm.gdpo_reward_weights (unset: all 1)
  std::vector<std::string> reward_keys{};               ///< algorithm.gdpo_reward_keys: used with components

  /// With batch.reward_components: the components named by reward_keys (verl's trainer path);
  /// without: verl's fallback, token_level_rewards as the single component.
  AdvantageResult compute(const AdvantageBatch& batch) const {
    AdvantageResult out;
    compute_into(batch, out);
    return out;
  }
  void compute_into(const AdvantageBatch& batch, AdvantageResult& out) const {
    if (batch.reward_components != nullptr) {
      combine_into(batch, component_scores(batch, reward_keys, *batch.reward_components), out);
      return;
    }
    detail::validate_advantage_batch<GDPO>(batch);
    combine_into(batch, {detail::response_scores(batch.token_level_rewards)}, out);
  }

  /// verl's multi-key path: the components named by `reward_keys`, in that order.
  AdvantageResult compute(const AdvantageBatch& batch, std::span<const std::string> reward_keys,
                          const RewardComponents& components) const {
    AdvantageResult out;
    combine_into(batch, component_scores(batch, reward_keys, components), out);
    return out;
  }

 private:
  static std::vector<VectorF> component_scores(const AdvantageBatch& batch, std::span<const std::string> reward_keys,
                                               const RewardComponents& components) {
    detail::validate_advantage_batch<GDPO>(batch);
    VERL_CHECK_ARG(!reward_keys.empty(),
                   "gdpo_reward_keys: expected the names of the reward components to normalise (verl asserts), got "
                   "none");
    std::vector<VectorF> scores;
    for (const std::string& key : reward_keys) {
      const auto found = components.find(key);
      if (found == components.end()) {
        std::string available;
        for (const auto& [name, values] : components) available += (available.empty() ? "" : ", ") + name;
        verl::detail::throw_invalid_argument("gdpo_reward_keys: reward key '{}' not found in the batch's components ({})",
                                             key, available);
      }
      VERL_CHECK_ARG(found->second.size() == batch.batch_size(),
                     "reward component '{}': expected one score per response ({}), got {}", key, batch.batch_size(),
                     found->second.size());
      scores.push_back(found->second);
    }
    return scores;
  }

  void combine_into(const AdvantageBatch& batch, const std::vector<VectorF>& scores, AdvantageResult& out) const {
    const std::size_t components = scores.size();
    if (reward_weights)
      VERL_CHECK_ARG(reward_weights->size() >= components,
                     "gdpo_reward_weights: expected a weight for each of the {} reward components, got {}",
                     components, reward_weights->size());
    const detail::PromptGroups groups(batch.index);
    const GRPO grpo{.epsilon = epsilon, .norm_adv_by_std_in_grpo = norm_adv_by_std_in_grpo};
    const auto& mask = batch.response_mask;
    const Index rows = batch.batch_size(), cols = batch.response_length();
    for (Index i = 0; i < rows; ++i) detail::require_binary_mask_row("response_mask", detail::row_of(mask, i), cols, i);
    out.share_returns();
    if (out.advantages.rows() != rows || out.advantages.cols() != cols) out.advantages.resize(rows, cols);
    out.advantages.setZero();
    for (std::size_t k = 0; k < components; ++k) {
      const VectorF normalised = grpo.response_scalars(batch, scores[k], groups);
      const float weight = reward_weights ? static_cast<float>((*reward_weights)[k]) : 1.0f;
      for (Index i = 0; i < rows; ++i)
        for (Index t = 0; t < cols; ++t) {
          const float term = weight * (normalised[i] * mask(i, t));
          out.advantages(i, t) = k == 0 ? term : out.advantages(i, t) + term;
        }
    }
    detail::MaskedBatchSum whitening(rows, cols);
    for (Index i = 0; i < rows; ++i) whitening.add_row(detail::row_of(out.advantages, i), detail::row_of(mask, i));
    detail::masked_whiten(out.advantages, mask, whitening, detail::MaskedPositions::zeroed, out.advantages);
  }
};

static_assert(AdvantageEstimator<GDPO>);

}  // namespace verl::algo
