// verl's "bypass_mode" policy loss: the rollout policy's log-probs stand in for old_log_prob,
// rollout correction (IS weights, rejection sampling) is computed on the fly, and the loss is
// PPO-clip or REINFORCE on the rejection-masked batch.
#pragma once

#include <string_view>
#include <utility>

#include "verl/algo/policy_losses/config.hpp"
#include "verl/algo/policy_losses/policy_loss.hpp"
#include "verl/algo/policy_losses/reinforce.hpp"
#include "verl/algo/policy_losses/vanilla.hpp"
#include "verl/algo/rollout_correction.hpp"
#include "verl/core/enum_names.hpp"

namespace verl::algo {

/// rollout_correction.loss_type.
enum class BypassLossType { ppo_clip, reinforce };

inline constexpr EnumNames bypass_loss_type_names{std::pair{BypassLossType::ppo_clip, std::string_view("ppo_clip")},
                                                  std::pair{BypassLossType::reinforce, std::string_view("reinforce")}};

constexpr std::string_view to_string(BypassLossType type) { return bypass_loss_type_names.name(type); }

inline BypassLossType parse_bypass_loss_type(std::string_view name) {
  return bypass_loss_type_names.parse(name, "loss_type");
}

/// batch.old_log_prob is the rollout policy's log-prob. IS weights and the rejection mask come
/// from compute_rollout_correction_and_rejection_mask(log_prob, old_log_prob, ...) and are
/// constants (verl computes them under no_grad). ppo_clip runs `ppo_clip` (vanilla) on the
/// rejection-masked mask without IS weights (the PPO ratio already is the IS ratio); reinforce
/// runs ReinforceLoss with the IS weights. batch.rollout_is_weights is ignored, as in verl.
/// Metrics: the loss's, plus every "rollout_corr/..." metric. An all-zero mask is an error.
struct BypassMode {
  static constexpr std::string_view name = "bypass_mode";
  static constexpr AggregationRule aggregation = AggregationRule::follows_config();
  /// This loss with verl's knobs from `config`: policy_loss.rollout_correction is required.
  static BypassMode from_config(const PolicyLossConfig& config) {
    VERL_CHECK_ARG(config.policy_loss.rollout_correction.has_value(),
                   "policy_loss.rollout_correction: expected a rollout_correction config for loss_mode 'bypass_mode', "
                   "got none");
    const RolloutCorrectionConfig& correction = *config.policy_loss.rollout_correction;
    return {.loss_type = parse_bypass_loss_type(correction.loss_type),
            .ppo_clip = VanillaPPO::from_config(config),
            .rollout_correction = make_rollout_correction(correction)};
  }

  BypassLossType loss_type = BypassLossType::ppo_clip;
  VanillaPPO ppo_clip{};  ///< clip knobs for loss_type ppo_clip
  RolloutCorrection rollout_correction{};

  PolicyLossResult compute(const PolicyLossBatch& batch, const AggregationContext& context) const {
    const detail::MaskCounts counts = detail::validate_policy_loss_batch(batch);
    VERL_CHECK_ARG(counts.tokens > 0,
                   "response_mask: bypass_mode expected at least one valid token (1), got none in a ({}, {}) mask",
                   batch.response_mask.rows(), batch.response_mask.cols());
    auto correction = compute_rollout_correction_and_rejection_mask(batch.log_prob, batch.old_log_prob,
                                                                    batch.response_mask, rollout_correction);
    PolicyLossBatch corrected{batch.old_log_prob, batch.log_prob, batch.advantages, correction.response_mask};
    PolicyLossResult result;
    if (loss_type == BypassLossType::reinforce) {
      if (correction.rollout_is_weights) corrected.rollout_is_weights.emplace(*correction.rollout_is_weights);
      result = ReinforceLoss{}.compute(corrected, context);
    } else {
      result = ppo_clip.compute(corrected, context);
    }
    result.metrics.merge(correction.metrics);
    return result;
  }
};

}  // namespace verl::algo
