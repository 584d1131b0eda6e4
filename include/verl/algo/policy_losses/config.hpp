// The actor settings the policy losses read (verl's actor.* and actor.policy_loss.* keys), from
// which every loss type builds itself (`Loss::from_config`): the registry, the trainer's
// configuration and the recipes make a loss one way.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "verl/algo/rollout_correction.hpp"

namespace verl::algo {

/// actor.policy_loss.* (verl's PolicyLossConfig). A null (nullopt) value falls back to the loss's
/// own default in verl's code (clip_cov_ratio 2e-4, clip_cov_lb 1, clip_cov_ub 5, kl_cov_ratio
/// 2e-4, ppo_kl_coef 1); the member initialisers are the dataclass defaults.
struct PolicyLossOptions {
  std::string loss_mode = "vanilla";
  std::optional<double> clip_cov_ratio = 0.0002;
  std::optional<double> clip_cov_lb = 1.0;
  std::optional<double> clip_cov_ub = 5.0;
  std::optional<double> kl_cov_ratio = 0.0002;
  std::optional<double> ppo_kl_coef = 0.1;
  std::optional<double> dro_beta{};  ///< dro's penalty weight; must be set (> 0) for loss_mode dro
  std::optional<RolloutCorrectionConfig> rollout_correction;  ///< required by bypass_mode
};

/// The actor keys (actor.*) the policy losses read, with verl's defaults. A null
/// clip_ratio_low / clip_ratio_high falls back to clip_ratio.
struct PolicyLossConfig {
  double clip_ratio = 0.2;
  std::optional<double> clip_ratio_low = 0.2;
  std::optional<double> clip_ratio_high = 0.2;
  double clip_ratio_c = 3.0;
  double tau_pos = 1.0;
  double tau_neg = 1.05;
  PolicyLossOptions policy_loss{};
  /// Not a verl key: seeds clip_cov's random choice of tokens (verl uses torch's global RNG).
  std::uint64_t clip_cov_seed = 0;

  double resolved_clip_ratio_low() const { return clip_ratio_low.value_or(clip_ratio); }
  double resolved_clip_ratio_high() const { return clip_ratio_high.value_or(clip_ratio); }
};

}  // namespace verl::algo
