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
#include "verl/algo/policy_losses/config.hpp"
#include "verl/algo/policy_losses/bypass_mode.hpp"
#include "verl/algo/policy_losses/cispo.hpp"
#include "verl/algo/policy_losses/clip_cov.hpp"
#include "verl/algo/policy_losses/dppo.hpp"
#include "verl/algo/policy_losses/geo_mean.hpp"
#include "verl/algo/policy_losses/gpg.hpp"
#include "verl/algo/policy_losses/gspo.hpp"
#include "verl/algo/policy_losses/kl_cov.hpp"
#include "verl/algo/policy_losses/reinforce.hpp"
#include "verl/algo/policy_losses/sapo.hpp"
#include "verl/algo/policy_losses/vanilla.hpp"
#include "verl/algo/rollout_correction.hpp"

namespace verl::algo {

/// verl's POLICY_LOSS_REGISTRY, in its registration order (0.9.1's dppo_tv, dppo_kl and dro
/// last): the one list of the family. The variant, the names and make_policy_loss derive from it.
using PolicyLosses =
    TypeList<VanillaPPO, GSPO, SAPO, GPGLoss, ClipCov, KLCov, GeoMean, CISPO, BypassMode, DPPOTV, DPPOKL, DRO>;

/// Any policy loss, chosen at runtime.
class AnyPolicyLoss {
 public:
  /// Every loss type: the registered ones, then ReinforceLoss (bypass_mode's reinforce branch).
  using Variant = variant_of_t<append_t<PolicyLosses, ReinforceLoss>>;

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
inline constexpr auto policy_loss_registry_names = names_of(PolicyLosses{});

inline std::span<const std::string_view> policy_loss_names() { return policy_loss_registry_names; }

/// The loss verl's get_policy_loss_fn(loss_mode) returns, with its knobs from `config`.
inline AnyPolicyLoss make_policy_loss(std::string_view loss_mode, const PolicyLossConfig& config) {
  std::optional<AnyPolicyLoss> made;
  visit_by_name(PolicyLosses{}, loss_mode, [&](auto type) { made.emplace(decltype(type)::type::from_config(config)); });
  if (!made)
    verl::detail::throw_invalid_argument("loss_mode: expected one of {}, got '{}'", joined_names_of<PolicyLosses>(),
                                         loss_mode);
  return *std::move(made);
}

/// make_policy_loss(config.policy_loss.loss_mode, config).
inline AnyPolicyLoss make_policy_loss(const PolicyLossConfig& config) {
  return make_policy_loss(config.policy_loss.loss_mode, config);
}

}  // namespace verl::algo
