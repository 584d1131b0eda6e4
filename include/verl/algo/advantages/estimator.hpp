// The AdvantageEstimator concept: what every advantage estimator (verl's ADV_ESTIMATOR_REGISTRY)
// takes, returns and declares about the inputs it needs, plus the compile-time and runtime checks
// that a trainer applies before calling one.
#pragma once

#include <concepts>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <type_traits>
#include <utility>

#include "verl/config.hpp"
#include "verl/core/error.hpp"
#include "verl/core/tensor.hpp"

namespace verl::algo {

/// The batch an advantage estimator reads: views only, nothing is copied. Shapes are verl's:
/// B responses of T tokens. Which optional inputs must be present is declared by each estimator's
/// `needs_*` traits and checked by `compute` (a missing one is a verl::InvalidArgument naming it).
struct AdvantageBatch {
  ConstMatrixRefF token_level_rewards;     ///< (B, T)
  ConstMatrixRefF response_mask;           ///< (B, T), 0/1: 1 for generated tokens
  std::span<const std::int64_t> index{};   ///< (B,) prompt group ids (verl's uid): equal ids share a group
  std::optional<ConstMatrixRefF> values{};              ///< (B, T) critic values (GAE)
  std::optional<ConstVectorRefF> reward_baselines{};    ///< (B,) greedy-rollout rewards (ReMax)
  std::optional<ConstMatrixRefF> old_log_probs{};       ///< (B, T) (optimal token baseline)
  std::optional<ConstMatrixRefF> sum_pi_squared{};      ///< (B, T) sum over the vocabulary of pi^2 (OTB)
  std::optional<ConstMatrixRefF> rollout_is_weights{};  ///< (B, T) truncated IS weights; optional for OTB

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

/// An advantage estimator is a small value type: runtime knobs as members, verl's registry name
/// and the inputs it needs as compile-time constants, and a `compute` that never mutates it.
template <class E>
concept AdvantageEstimator = std::copyable<E> && requires(const E& estimator, const AdvantageBatch& batch) {
  { E::name } -> std::convertible_to<std::string_view>;
  typename std::bool_constant<E::needs_critic>;           // GAE: the critic's values
  typename std::bool_constant<E::needs_group_index>;      // group baselines: the prompt uid of each row
  typename std::bool_constant<E::needs_reward_baseline>;  // ReMax: the greedy rollout's reward
  typename std::bool_constant<E::needs_old_log_probs>;    // OTB: old_log_probs and sum_pi_squared
  { estimator.compute(batch) } -> std::same_as<AdvantageResult>;
};

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

/// The inputs a trainer can provide, for the compile-time check below (a structural type, so it
/// can be a template argument: `require_inputs<GAE, AvailableInputs{.critic_values = true}>()`).
struct AvailableInputs {
  bool critic_values = false;
  bool group_index = false;
  bool reward_baselines = false;
  bool old_log_probs = false;
};

/// Compile-time check that a trainer composed with estimator E provides what E needs. Each missing
/// input is a static_assert naming it (tests/compile_fail asserts on the messages).
template <class E, AvailableInputs Have>
constexpr void require_inputs() {
  VERL_STATIC_ASSERT(AdvantageEstimator<E>, TYPE_IS_NOT_AN_ADVANTAGE_ESTIMATOR);
  if constexpr (AdvantageEstimator<E>) {
    VERL_STATIC_ASSERT(!E::needs_critic || Have.critic_values, GAE_NEEDS_A_CRITIC_MODEL);
    VERL_STATIC_ASSERT(!E::needs_group_index || Have.group_index,
                       ADVANTAGE_ESTIMATOR_NEEDS_A_PROMPT_GROUP_INDEX);
    VERL_STATIC_ASSERT(!E::needs_reward_baseline || Have.reward_baselines,
                       REMAX_NEEDS_GREEDY_REWARD_BASELINES);
    VERL_STATIC_ASSERT(!E::needs_old_log_probs || Have.old_log_probs,
                       OPTIMAL_TOKEN_BASELINE_NEEDS_OLD_LOG_PROBS_AND_SUM_PI_SQUARED);
  }
}

/// Shorthand for the two checks a trainer makes most: a critic, and a prompt group index.
template <class E, bool HasCritic>
constexpr void require_critic() {
  require_inputs<E, AvailableInputs{.critic_values = HasCritic, .group_index = true, .reward_baselines = true,
                                    .old_log_probs = true}>();
}
template <class E, bool HasGroupIndex>
constexpr void require_group_index() {
  require_inputs<E, AvailableInputs{.critic_values = true, .group_index = HasGroupIndex, .reward_baselines = true,
                                    .old_log_probs = true}>();
}

/// True when E can run on a trainer that provides `have` (for `if constexpr` and static_assert).
template <AdvantageEstimator E>
constexpr bool inputs_suffice(AvailableInputs have) {
  return (!E::needs_critic || have.critic_values) && (!E::needs_group_index || have.group_index) &&
         (!E::needs_reward_baseline || have.reward_baselines) && (!E::needs_old_log_probs || have.old_log_probs);
}

namespace detail {

/// Runtime counterpart of the traits: shapes of every input and presence of those estimator E
/// needs. The 0/1 mask check is fused into each estimator's pass over the rows (it is a full pass
/// over B x T otherwise).
template <class E>
void validate_advantage_batch(const AdvantageBatch& batch) {
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
  require_matrix("values", batch.values, E::needs_critic, "the critic's values");
  require_matrix("old_log_probs", batch.old_log_probs, E::needs_old_log_probs, "the rollout policy's log-probs");
  require_matrix("sum_pi_squared", batch.sum_pi_squared, E::needs_old_log_probs,
                 "the per-token sum of squared probabilities");
  require_matrix("rollout_is_weights", batch.rollout_is_weights, false, "");
  if (batch.reward_baselines) {
    verl::detail::require_length("reward_baselines", batch.reward_baselines->size(), shape.rows);
  } else {
    VERL_CHECK_ARG(!E::needs_reward_baseline, "reward_baselines: {} needs the greedy rollout's rewards ({},), got none",
                   E::name, shape.rows);
  }
  if constexpr (E::needs_group_index) {
    const auto length = static_cast<Index>(batch.index.size());
    VERL_CHECK_ARG(length != 0 || shape.rows == 0,
                   "index: {} needs the prompt group index (uid) of every response ({},), got none", E::name,
                   shape.rows);
    verl::detail::require_length("index", length, shape.rows);
  }
}

}  // namespace detail
}  // namespace verl::algo
