// Advantage estimators by verl's names (algorithm.adv_estimator): make_advantage_estimator("grpo",
// config) returns a type-erased estimator holding one of the policy types of verl/algo/advantages.
#pragma once

#include <array>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>

#include "verl/algo/advantages/estimator.hpp"
#include "verl/algo/advantages/gae.hpp"
#include "verl/algo/advantages/gpg.hpp"
#include "verl/algo/advantages/grpo.hpp"
#include "verl/algo/advantages/grpo_passk.hpp"
#include "verl/algo/advantages/grpo_vectorized.hpp"
#include "verl/algo/advantages/opo.hpp"
#include "verl/algo/advantages/optimal_token_baseline.hpp"
#include "verl/algo/advantages/reinforce_plus_plus.hpp"
#include "verl/algo/advantages/remax.hpp"
#include "verl/algo/advantages/rloo.hpp"
#include "verl/core/error.hpp"

namespace verl::algo {

/// verl's knobs of the advantage estimators, named like its config keys and keyword arguments.
/// An unset optional takes the estimator's own default, as verl's function signatures do.
struct AdvantageConfig {
  double gamma = 1.0;                     ///< algorithm.gamma (gae, reinforce_plus_plus)
  double lam = 1.0;                       ///< algorithm.lam (gae)
  bool norm_adv_by_std_in_grpo = true;    ///< algorithm.norm_adv_by_std_in_grpo (grpo*, false = Dr.GRPO)
  std::optional<double> epsilon{};        ///< 1e-6 for the group estimators, 1e-8 for the OTB ones
  double f_norm = 1.0;                    ///< gpg
  double alpha = 1.0;                     ///< gpg (ignored by verl: recomputed from the batch)
  std::optional<bool> handle_zero_tail{}; ///< OTB: false for optimal_token_baseline, true for tir_*
};

/// Every estimator type, in verl's AdvantageEstimator enum order (DrGRPO, the "grpo" variant, last).
using AdvantageEstimatorVariant =
    std::variant<GAE, GRPO, ReinforcePlusPlus, ReinforcePlusPlusBaseline, ReMax, RLOO, OPO, GRPOPassK, GPG,
                 RLOOVectorized, GRPOVectorized, OptimalTokenBaseline, MultiTurnOptimalTokenBaseline, DrGRPO>;

/// verl's registry names, in its enum order.
inline constexpr std::array<std::string_view, 13> advantage_estimator_name_list{
    GAE::name,        GRPO::name,           ReinforcePlusPlus::name, ReinforcePlusPlusBaseline::name,
    ReMax::name,      RLOO::name,           OPO::name,               GRPOPassK::name,
    GPG::name,        RLOOVectorized::name, GRPOVectorized::name,    OptimalTokenBaseline::name,
    MultiTurnOptimalTokenBaseline::name};

inline std::span<const std::string_view> advantage_estimator_names() { return advantage_estimator_name_list; }

/// A type-erased advantage estimator: any of the policy types, chosen at runtime by name.
class AnyAdvantageEstimator {
 public:
  template <AdvantageEstimator E>
    requires std::is_constructible_v<AdvantageEstimatorVariant, E>
  AnyAdvantageEstimator(E estimator) : estimator_(std::move(estimator)) {}  // NOLINT: implicit by design

  std::string_view name() const {
    return std::visit([](const auto& e) { return std::string_view(std::decay_t<decltype(e)>::name); }, estimator_);
  }
  bool needs_critic() const { return trait([](auto tag) { return decltype(tag)::type::needs_critic; }); }
  bool needs_group_index() const { return trait([](auto tag) { return decltype(tag)::type::needs_group_index; }); }
  bool needs_reward_baseline() const {
    return trait([](auto tag) { return decltype(tag)::type::needs_reward_baseline; });
  }
  bool needs_old_log_probs() const {
    return trait([](auto tag) { return decltype(tag)::type::needs_old_log_probs; });
  }

  AdvantageResult compute(const AdvantageBatch& batch) const {
    return std::visit([&](const auto& e) { return e.compute(batch); }, estimator_);
  }
  /// As compute(), reusing the storage of `out` when it fits.
  void compute_into(const AdvantageBatch& batch, AdvantageResult& out) const {
    std::visit([&](const auto& e) { compute_advantages_into(e, batch, out); }, estimator_);
  }

  /// The concrete policy, or nullptr if it holds another type.
  template <AdvantageEstimator E>
  const E* get_if() const {
    return std::get_if<E>(&estimator_);
  }
  const AdvantageEstimatorVariant& variant() const { return estimator_; }

 private:
  template <class Trait>
  bool trait(Trait t) const {
    return std::visit([&](const auto& e) { return t(std::type_identity<std::decay_t<decltype(e)>>{}); }, estimator_);
  }

  AdvantageEstimatorVariant estimator_;
};

namespace detail {
inline std::string joined_advantage_estimator_names() {
  std::string names;
  for (const auto name : advantage_estimator_names()) {
    if (!names.empty()) names += ", ";
    names += name;
  }
  return names;
}
}  // namespace detail

/// verl's get_adv_estimator_fn(name) with the knobs bound: throws verl::InvalidArgument naming
/// `adv_estimator` and listing the valid names for an unknown name.
inline AnyAdvantageEstimator make_advantage_estimator(std::string_view name, const AdvantageConfig& config = {}) {
  const double group_eps = config.epsilon.value_or(1e-6);
  const double otb_eps = config.epsilon.value_or(1e-8);
  if (name == GAE::name) return GAE{.gamma = config.gamma, .lam = config.lam};
  if (name == GRPO::name)
    return GRPO{.epsilon = group_eps, .norm_adv_by_std_in_grpo = config.norm_adv_by_std_in_grpo};
  if (name == ReinforcePlusPlus::name) return ReinforcePlusPlus{.gamma = config.gamma};
  if (name == ReinforcePlusPlusBaseline::name) return ReinforcePlusPlusBaseline{.epsilon = group_eps};
  if (name == ReMax::name) return ReMax{};
  if (name == RLOO::name) return RLOO{.epsilon = group_eps};
  if (name == OPO::name) return OPO{.epsilon = group_eps};
  if (name == GRPOPassK::name)
    return GRPOPassK{.epsilon = group_eps, .norm_adv_by_std_in_grpo = config.norm_adv_by_std_in_grpo};
  if (name == GPG::name) return GPG{.epsilon = group_eps, .f_norm = config.f_norm, .alpha = config.alpha};
  if (name == RLOOVectorized::name) return RLOOVectorized{.epsilon = group_eps};
  if (name == GRPOVectorized::name)
    return GRPOVectorized{.epsilon = group_eps, .norm_adv_by_std_in_grpo = config.norm_adv_by_std_in_grpo};
  if (name == OptimalTokenBaseline::name)
    return OptimalTokenBaseline{.handle_zero_tail = config.handle_zero_tail.value_or(false), .epsilon = otb_eps};
  if (name == MultiTurnOptimalTokenBaseline::name)
    return MultiTurnOptimalTokenBaseline{.handle_zero_tail = config.handle_zero_tail.value_or(true),
                                         .epsilon = otb_eps};
  verl::detail::throw_invalid_argument("adv_estimator: expected one of {}, got '{}'",
                                       detail::joined_advantage_estimator_names(), name);
}

}  // namespace verl::algo
