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
#include "verl/algo/advantages/gdpo.hpp"
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
#include "verl/core/type_list.hpp"

namespace verl::algo {

/// Every estimator verl registers by name (ADV_ESTIMATOR_REGISTRY), in its AdvantageEstimator enum
/// order: the one list of the family. The variant, the names and make_advantage_estimator derive
/// from it; a new estimator is its header, one entry here, and its test.
using AdvantageEstimators =
    TypeList<GAE, GRPO, ReinforcePlusPlus, ReinforcePlusPlusBaseline, ReMax, RLOO, OPO, GRPOPassK, GPG,
             RLOOVectorized, GRPOVectorized, OptimalTokenBaseline, MultiTurnOptimalTokenBaseline, GDPO>;

/// Every estimator type: the registered ones, then Dr.GRPO (verl's "grpo" with
/// norm_adv_by_std_in_grpo=False, so it has no name of its own).
using AdvantageEstimatorVariant = variant_of_t<append_t<AdvantageEstimators, DrGRPO>>;

/// verl's registry names, in its enum order.
inline constexpr auto advantage_estimator_name_list = names_of(AdvantageEstimators{});

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
  /// The inputs the held estimator needs beyond the rewards and the mask.
  AdvantageInputs needs() const {
    return std::visit([](const auto& e) { return advantage_inputs_v<std::decay_t<decltype(e)>>; }, estimator_);
  }
  bool needs_critic() const { return needs().critic_values; }
  bool needs_group_index() const { return needs().group_index; }
  bool needs_reward_baseline() const { return needs().reward_baselines; }
  bool needs_old_log_probs() const { return needs().old_log_probs; }
  bool reads_reward_components() const { return needs().reward_components; }

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
  AdvantageEstimatorVariant estimator_;
};

/// verl's get_adv_estimator_fn(name) with the knobs bound: throws verl::InvalidArgument naming
/// `adv_estimator` and listing the valid names for an unknown name.
inline AnyAdvantageEstimator make_advantage_estimator(std::string_view name, const AdvantageConfig& config = {}) {
  std::optional<AnyAdvantageEstimator> made;
  visit_by_name(AdvantageEstimators{}, name,
                [&](auto type) { made.emplace(decltype(type)::type::from_config(config)); });
  if (!made)
    verl::detail::throw_invalid_argument("adv_estimator: expected one of {}, got '{}'",
                                         joined_names_of<AdvantageEstimators>(), name);
  return *std::move(made);
}

}  // namespace verl::algo
