// The AdvantageEstimator concept: what every advantage estimator (verl's ADV_ESTIMATOR_REGISTRY)
// takes, returns and declares about the inputs it needs, plus the compile-time and runtime checks
// that a trainer applies before calling one.
#pragma once

#include <concepts>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>
#include <type_traits>
#include <utility>

#include "verl/config.hpp"
#include "verl/core/error.hpp"
#include "verl/core/tensor.hpp"

namespace verl::algo {

/// A batch's reward components by name (verl's non_tensor_batch[key], filled from the entries of the
/// reward function's dict): one score per response each. GDPO normalises them one by one.
using RewardComponents = std::map<std::string, VectorF, std::less<>>;

/// The batch an advantage estimator reads: views only, nothing is copied. Shapes are verl's:
/// B responses of T tokens. Which optional inputs must be present is declared by each estimator's
/// `needs` constant and checked by `compute` (a missing one is a verl::InvalidArgument naming it).
struct AdvantageBatch {
  ConstMatrixRefF token_level_rewards;     ///< (B, T)
  ConstMatrixRefF response_mask;           ///< (B, T), 0/1: 1 for generated tokens
  std::span<const std::int64_t> index{};   ///< (B,) prompt group ids (verl's uid): equal ids share a group
  std::optional<ConstMatrixRefF> values{};              ///< (B, T) critic values (GAE)
  std::optional<ConstVectorRefF> reward_baselines{};    ///< (B,) greedy-rollout rewards (ReMax)
  std::optional<ConstMatrixRefF> old_log_probs{};       ///< (B, T) (optimal token baseline)
  std::optional<ConstMatrixRefF> sum_pi_squared{};      ///< (B, T) sum over the vocabulary of pi^2 (OTB)
  std::optional<ConstMatrixRefF> rollout_is_weights{};  ///< (B, T) truncated IS weights; optional for OTB
  const RewardComponents* reward_components = nullptr;   ///< named scores (GDPO); null: none

  Index batch_size() const { return token_level_rewards.rows(); }
  Index response_length() const { return token_level_rewards.cols(); }
};

/// What every estimator returns, as verl's `(advantages, returns)` tuple. verl's outcome-reward
/// estimators (GRPO, Dr.GRPO, RLOO, OPO, GPG, grpo_passk, REINFORCE++ with baseline) return one
/// tensor as both; so does a result built with `shared`: one matrix holds both, `returns()` is
/// `advantages` (half the memory and the writes at verl's scale), and writing either writes both,
/// as with verl's tensor. GAE, REINFORCE++, ReMax and the optimal token baseline keep two.
class AdvantageResult {
 public:
  MatrixF advantages;  ///< (B, T)

  AdvantageResult() = default;
  /// Distinct advantages and returns.
  AdvantageResult(MatrixF advantages_in, MatrixF returns_in)
      : advantages(std::move(advantages_in)), returns_(std::move(returns_in)) {}
  /// Returns that are the advantages (one matrix).
  static AdvantageResult shared(MatrixF advantages_in) {
    AdvantageResult result;
    result.advantages = std::move(advantages_in);
    result.returns_are_advantages_ = true;
    return result;
  }

  /// (B, T); `advantages` itself when returns_are_advantages().
  const MatrixF& returns() const noexcept { return returns_are_advantages_ ? advantages : returns_; }
  MatrixF& returns() noexcept { return returns_are_advantages_ ? advantages : returns_; }
  bool returns_are_advantages() const noexcept { return returns_are_advantages_; }

  /// For an estimator's compute_into: from now on the returns are the advantages (a separate
  /// returns matrix, say from a previous step of another estimator, is released).
  void share_returns() noexcept {
    returns_are_advantages_ = true;
    returns_ = MatrixF();
  }
  /// For an estimator's compute_into: the returns as a matrix of their own, keeping its storage
  /// when it already was one (contents unspecified after a switch from shared).
  MatrixF& separate_returns() noexcept {
    returns_are_advantages_ = false;
    return returns_;
  }

 private:
  MatrixF returns_;
  bool returns_are_advantages_ = false;
};

/// The inputs beyond the rewards and the mask: what an estimator needs (its `needs` constant) and
/// what a trainer provides (a structural type, so it can be a template argument:
/// `require_inputs<GAE, AdvantageInputs{.critic_values = true}>()`).
struct AdvantageInputs {
  bool critic_values = false;     ///< GAE: the critic's values
  bool group_index = false;       ///< group baselines: the prompt uid of each row
  bool reward_baselines = false;  ///< ReMax: the greedy rollout's reward
  bool old_log_probs = false;     ///< OTB: old_log_probs and sum_pi_squared
  bool reward_components = false; ///< GDPO: the reward function's named scores (reward_components)
};
/// The name the trainer-side checks used first.
using AvailableInputs = AdvantageInputs;

/// verl's knobs of the advantage estimators, named like its config keys and keyword arguments.
/// An unset optional takes the estimator's own default, as verl's function signatures do. Every
/// estimator type builds itself from one (`E::from_config`), so the registry, the trainer's
/// configuration and the recipes make it one way.
struct AdvantageConfig {
  double gamma = 1.0;                     ///< algorithm.gamma (gae, reinforce_plus_plus)
  double lam = 1.0;                       ///< algorithm.lam (gae)
  bool norm_adv_by_std_in_grpo = true;    ///< algorithm.norm_adv_by_std_in_grpo (grpo*, false = Dr.GRPO)
  std::optional<double> epsilon{};        ///< 1e-6 for the group estimators, 1e-8 for the OTB ones
  double f_norm = 1.0;                    ///< gpg
  double alpha = 1.0;                     ///< gpg (ignored by verl: recomputed from the batch)
  std::optional<bool> handle_zero_tail{}; ///< OTB: unset is verl 0.9.1's default, true for both forms
  std::vector<std::string> gdpo_reward_keys{};              ///< algorithm.gdpo_reward_keys (gdpo)
  std::optional<std::vector<double>> gdpo_reward_weights{};  ///< algorithm.gdpo_reward_weights (unset: all 1)

  [[nodiscard]] double group_epsilon() const { return epsilon.value_or(1e-6); }
  [[nodiscard]] double otb_epsilon() const { return epsilon.value_or(1e-8); }
};

namespace detail {
/// What E needs: its `needs` constant, or (estimators written against the first version of the
/// concept) its four `needs_*` booleans.
template <class E>
consteval AdvantageInputs inputs_of() {
  if constexpr (requires { E::needs; }) {
    return E::needs;
  } else {
    return {.critic_values = E::needs_critic, .group_index = E::needs_group_index,
            .reward_baselines = E::needs_reward_baseline, .old_log_probs = E::needs_old_log_probs};
  }
}
}  // namespace detail

/// An advantage estimator is a small value type: runtime knobs as members, verl's registry name
/// and the inputs it needs as compile-time constants, and a `compute` that never mutates it.
template <class E>
concept AdvantageEstimator = std::copyable<E> && requires(const E& estimator, const AdvantageBatch& batch) {
  { E::name } -> std::convertible_to<std::string_view>;
  requires requires { { E::needs } -> std::convertible_to<AdvantageInputs>; } || requires {
    typename std::bool_constant<E::needs_critic>;
    typename std::bool_constant<E::needs_group_index>;
    typename std::bool_constant<E::needs_reward_baseline>;
    typename std::bool_constant<E::needs_old_log_probs>;
  };
  { estimator.compute(batch) } -> std::same_as<AdvantageResult>;
};

/// The inputs estimator E needs beyond the rewards and the mask.
template <AdvantageEstimator E>
inline constexpr AdvantageInputs advantage_inputs_v = detail::inputs_of<E>();

/// Runs `estimator` into `out`, reusing out's storage (say, the previous step's result) when the
/// estimator offers compute_into, as every verl-cpp estimator does; others fall back to compute().
template <AdvantageEstimator E>
void compute_advantages_into(const E& estimator, const AdvantageBatch& batch, AdvantageResult& out) {
  if constexpr (requires { estimator.compute_into(batch, out); }) {
    estimator.compute_into(batch, out);
  } else {
    out = estimator.compute(batch);
  }
}

/// Compile-time check that a trainer composed with estimator E provides what E needs. Each missing
/// input is a static_assert naming it (tests/compile_fail asserts on the messages).
template <class E, AdvantageInputs Have>
constexpr void require_inputs() {
  VERL_STATIC_ASSERT(AdvantageEstimator<E>, TYPE_IS_NOT_AN_ADVANTAGE_ESTIMATOR);
  if constexpr (AdvantageEstimator<E>) {
    constexpr AdvantageInputs needs = advantage_inputs_v<E>;
    VERL_STATIC_ASSERT(!needs.critic_values || Have.critic_values, GAE_NEEDS_A_CRITIC_MODEL);
    VERL_STATIC_ASSERT(!needs.group_index || Have.group_index, ADVANTAGE_ESTIMATOR_NEEDS_A_PROMPT_GROUP_INDEX);
    VERL_STATIC_ASSERT(!needs.reward_baselines || Have.reward_baselines, REMAX_NEEDS_GREEDY_REWARD_BASELINES);
    VERL_STATIC_ASSERT(!needs.old_log_probs || Have.old_log_probs,
                       OPTIMAL_TOKEN_BASELINE_NEEDS_OLD_LOG_PROBS_AND_SUM_PI_SQUARED);
  }
}

/// Shorthand for the two checks a trainer makes most: a critic, and a prompt group index.
template <class E, bool HasCritic>
constexpr void require_critic() {
  require_inputs<E, AdvantageInputs{.critic_values = HasCritic, .group_index = true, .reward_baselines = true,
                                    .old_log_probs = true}>();
}
template <class E, bool HasGroupIndex>
constexpr void require_group_index() {
  require_inputs<E, AdvantageInputs{.critic_values = true, .group_index = HasGroupIndex, .reward_baselines = true,
                                    .old_log_probs = true}>();
}

/// True when E can run on a trainer that provides `have` (for `if constexpr` and static_assert).
template <AdvantageEstimator E>
constexpr bool inputs_suffice(AdvantageInputs have) {
  constexpr AdvantageInputs needs = advantage_inputs_v<E>;
  return (!needs.critic_values || have.critic_values) && (!needs.group_index || have.group_index) &&
         (!needs.reward_baselines || have.reward_baselines) && (!needs.old_log_probs || have.old_log_probs);
}

namespace detail {

/// Runtime counterpart of the traits: shapes of every input and presence of those estimator E
/// needs. The 0/1 mask check is fused into each estimator's pass over the rows (it is a full pass
/// over B x T otherwise).
template <class E>
void validate_advantage_batch(const AdvantageBatch& batch) {
  constexpr AdvantageInputs needs = inputs_of<E>();
  const Shape2 shape = shape_of(batch.token_level_rewards);
  verl::detail::require_same_shape("response_mask", shape_of(batch.response_mask), "token_level_rewards", shape);
  const auto require_matrix = [&](std::string_view argument, const std::optional<ConstMatrixRefF>& m, bool needed,
                                  std::string_view why) {
    if (!m) {
      VERL_CHECK_ARG(!needed, "{}: {} needs {} ({}, {}), got none", argument, E::name, why, shape.rows, shape.cols);
      return;
    }
    verl::detail::require_same_shape(argument, shape_of(*m), "token_level_rewards", shape);
  };
  require_matrix("values", batch.values, needs.critic_values, "the critic's values");
  require_matrix("old_log_probs", batch.old_log_probs, needs.old_log_probs, "the rollout policy's log-probs");
  require_matrix("sum_pi_squared", batch.sum_pi_squared, needs.old_log_probs,
                 "the per-token sum of squared probabilities");
  require_matrix("rollout_is_weights", batch.rollout_is_weights, false, "");
  if (batch.reward_baselines) {
    verl::detail::require_length("reward_baselines", batch.reward_baselines->size(), shape.rows);
  } else {
    VERL_CHECK_ARG(!needs.reward_baselines, "reward_baselines: {} needs the greedy rollout's rewards ({},), got none",
                   E::name, shape.rows);
  }
  if constexpr (needs.group_index) {
    const auto length = static_cast<Index>(batch.index.size());
    VERL_CHECK_ARG(length != 0 || shape.rows == 0,
                   "index: {} needs the prompt group index (uid) of every response ({},), got none", E::name,
                   shape.rows);
    verl::detail::require_length("index", length, shape.rows);
  }
}

/// compute() of an estimator that offers compute_into: a fresh result.
template <class E>
AdvantageResult compute_fresh(const E& estimator, const AdvantageBatch& batch) {
  AdvantageResult out;
  estimator.compute_into(batch, out);
  return out;
}

}  // namespace detail
}  // namespace verl::algo
