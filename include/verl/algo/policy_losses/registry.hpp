// The policy losses by verl's names (actor.policy_loss.loss_mode): a type-erased AnyPolicyLoss
// made from the actor configuration under verl's keys, as verl's get_policy_loss_fn does.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "verl/algo/policy_losses/policy_loss.hpp"
#include "verl/algo/policy_losses/bypass_mode.hpp"
#include "verl/algo/policy_losses/cispo.hpp"
#include "verl/algo/policy_losses/clip_cov.hpp"
#include "verl/algo/policy_losses/geo_mean.hpp"
#include "verl/algo/policy_losses/gpg.hpp"
#include "verl/algo/policy_losses/gspo.hpp"
#include "verl/algo/policy_losses/kl_cov.hpp"
#include "verl/algo/policy_losses/reinforce.hpp"
#include "verl/algo/policy_losses/sapo.hpp"
#include "verl/algo/policy_losses/vanilla.hpp"
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

/// Any policy loss, chosen at runtime.
class AnyPolicyLoss {
 public:
  using Variant = std::variant<VanillaPPO, GSPO, SAPO, GPGLoss, ClipCov, KLCov, GeoMean, CISPO, BypassMode, ReinforceLoss>;

  template <PolicyLoss Loss>
    requires std::is_constructible_v<Variant, Loss>
  AnyPolicyLoss(Loss loss) : loss_(std::move(loss)) {}  // NOLINT(google-explicit-constructor): a loss is an AnyPolicyLoss

  /// verl's name of the held loss.
  std::string_view name() const {
    return std::visit([](const auto& loss) { return std::string_view(std::decay_t<decltype(loss)>::name); }, loss_);
  }
  AggregationRule aggregation() const {
    return std::visit([](const auto& loss) { return AggregationRule(std::decay_t<decltype(loss)>::aggregation); },
                      loss_);
  }
  PolicyLossResult compute(const PolicyLossBatch& batch, const AggregationContext& context) const {
    return std::visit([&](const auto& loss) { return loss.compute(batch, context); }, loss_);
  }
  const Variant& variant() const { return loss_; }
  template <class Loss>
  const Loss* get_if() const {
    return std::get_if<Loss>(&loss_);
  }

 private:
  Variant loss_;
};

inline PolicyLossResult compute_policy_loss(const AnyPolicyLoss& loss, const PolicyLossBatch& batch,
                                            const AggregationContext& context = {}) {
  return loss.compute(batch, context);
}

/// verl's POLICY_LOSS_REGISTRY names, in its registration order.
inline constexpr std::array<std::string_view, 9> policy_loss_registry_names = {
    VanillaPPO::name, GSPO::name,   SAPO::name,  GPGLoss::name,   ClipCov::name,
    KLCov::name,      GeoMean::name, CISPO::name, BypassMode::name};

inline std::span<const std::string_view> policy_loss_names() { return policy_loss_registry_names; }

/// The loss verl's get_policy_loss_fn(loss_mode) returns, with its knobs from `config`.
inline AnyPolicyLoss make_policy_loss(std::string_view loss_mode, const PolicyLossConfig& config) {
  const double low = config.resolved_clip_ratio_low();
  const double high = config.resolved_clip_ratio_high();
  const PolicyLossOptions& options = config.policy_loss;
  if (loss_mode == VanillaPPO::name) return VanillaPPO{low, high, config.clip_ratio_c};
  if (loss_mode == GSPO::name) return GSPO{low, high};
  if (loss_mode == SAPO::name) return SAPO{config.tau_pos, config.tau_neg};
  if (loss_mode == GPGLoss::name) return GPGLoss{};
  if (loss_mode == ClipCov::name)
    return ClipCov{low,
                   high,
                   options.clip_cov_ratio.value_or(0.0002),
                   options.clip_cov_lb.value_or(1.0),
                   options.clip_cov_ub.value_or(5.0),
                   config.clip_cov_seed};
  if (loss_mode == KLCov::name) return KLCov{options.kl_cov_ratio.value_or(0.0002), options.ppo_kl_coef.value_or(1.0)};
  if (loss_mode == GeoMean::name) return GeoMean{low, high};
  if (loss_mode == CISPO::name) return CISPO{low, high};
  if (loss_mode == BypassMode::name) {
    VERL_CHECK_ARG(options.rollout_correction.has_value(),
                   "policy_loss.rollout_correction: expected a rollout_correction config for loss_mode 'bypass_mode', "
                   "got none");
    const RolloutCorrectionConfig& correction = *options.rollout_correction;
    return BypassMode{parse_bypass_loss_type(correction.loss_type), VanillaPPO{low, high, config.clip_ratio_c},
                      make_rollout_correction(correction)};
  }
  verl::detail::throw_invalid_argument("loss_mode: expected one of {}, got '{}'", fmt::join(policy_loss_registry_names, ", "),
                                 loss_mode);
}

/// make_policy_loss(config.policy_loss.loss_mode, config).
inline AnyPolicyLoss make_policy_loss(const PolicyLossConfig& config) {
  return make_policy_loss(config.policy_loss.loss_mode, config);
}

}  // namespace verl::algo
