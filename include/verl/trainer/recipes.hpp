// Recipes: PPO-family algorithms composed at compile time from policy types, and trainers built
// from them.
//
//   Recipe<Estimator, PolicyLoss, KLTerm, Aggregation, RewardKL, Extras>
//
// Estimator: an advantage estimator type (algo::GAE, algo::GRPO, ...); PolicyLoss: algo::VanillaPPO,
// algo::GSPO, ...; KLTerm: algo::NoKLLoss or algo::KLLoss<E> (KL to the reference as a loss);
// Aggregation: algo::TokenMean, ...; RewardKL: NoRewardKL or RewardKL<E> (KL in the reward with
// algorithm.kl_ctrl's fixed or adaptive controller); Extras: DAPO's dynamic sampling and overlong
// penalty. The numeric knobs (clip ratios, gamma, lambda, coefficients) still come from the
// PPOConfig, under verl's keys. Misuse is a compile error: a recipe whose estimator needs a
// critic in a trainer without one (GAE_NEEDS_A_CRITIC_MODEL), a loss that overrides the chosen
// aggregation, a KL term that is not one.
//
// The aliases are verl's recipes: PPO, GRPO, DrGRPO, DAPO, RLOO, ReinforcePlusPlus, ReMax.
#pragma once

#include <algorithm>
#include <optional>
#include <type_traits>

#include "verl/algo/actor_objective.hpp"
#include "verl/algo/advantages/registry.hpp"
#include "verl/algo/kl/penalty.hpp"
#include "verl/algo/loss_aggregation.hpp"
#include "verl/algo/policy_losses/registry.hpp"
#include "verl/trainer/ppo_trainer.hpp"

namespace verl::trainer {

/// No KL in the reward (algorithm.use_kl_in_reward=False).
struct NoRewardKL {
  static constexpr bool enabled = false;
};

/// KL in the reward with estimator E (algorithm.kl_penalty); the controller is algorithm.kl_ctrl.
template <algo::KLEstimator E>
struct RewardKL {
  static constexpr bool enabled = true;
  using estimator = E;
};

/// Recipe extras beyond the four policies.
struct RecipeExtras {
  bool dynamic_sampling = false;     ///< DAPO: algorithm.filter_groups
  bool overlong_penalty = false;     ///< DAPO: reward_model.overlong_buffer
  double clip_ratio_high = 0;  ///< > 0: DAPO's clip-higher (0.28), used unless clip_ratio_high is configured
};

namespace detail {

template <class T>
struct is_reward_kl : std::false_type {};
template <>
struct is_reward_kl<NoRewardKL> : std::true_type {};
template <class E>
struct is_reward_kl<RewardKL<E>> : std::true_type {};

/// The estimator of type E with the config's knobs, built as the by-name path builds it; an
/// estimator type of the user's without from_config gets its own defaults.
template <class E>
E estimator_from(const PPOConfig& config) {
  if constexpr (requires { { E::from_config(advantage_config(config)) } -> std::convertible_to<E>; }) {
    return E::from_config(advantage_config(config));
  } else {
    return E{};
  }
}

/// The loss of type L with the config's knobs (actor.policy_loss.* included), built as the by-name
/// path builds it; a loss type of the user's without from_config gets its own defaults.
template <class L>
L policy_loss_from(const algo::PolicyLossConfig& config) {
  if constexpr (requires { { L::from_config(config) } -> std::convertible_to<L>; }) {
    return L::from_config(config);
  } else {
    return L{};
  }
}

}  // namespace detail

template <class Estimator, class Loss, class KLTerm = algo::NoKLLoss, class Mode = algo::TokenMean,
          class RewardKLTerm = NoRewardKL, RecipeExtras Extras = RecipeExtras{}>
struct Recipe {
  VERL_STATIC_ASSERT(algo::AdvantageEstimator<Estimator>, THE_ESTIMATOR_TYPE_DOES_NOT_SATISFY_THE_ADVANTAGE_ESTIMATOR_CONCEPT);
  VERL_STATIC_ASSERT(!algo::advantage_inputs_v<Estimator>.old_log_probs, THE_TRAINER_DOES_NOT_COMPUTE_SUM_PI_SQUARED_FOR_THIS_ESTIMATOR);
  VERL_STATIC_ASSERT(detail::is_reward_kl<RewardKLTerm>::value, THE_REWARD_KL_TERM_MUST_BE_NoRewardKL_OR_RewardKL_OF_A_KL_ESTIMATOR);
  // ActorObjective checks the policy loss, the KL term and the aggregation (and that the loss
  // does not override the aggregation).
  using objective = algo::ActorObjective<Loss, KLTerm, Mode>;

  using estimator_type = Estimator;
  using loss_type = Loss;
  static constexpr bool needs_critic = algo::advantage_inputs_v<Estimator>.critic_values;
  static constexpr bool needs_reference = KLTerm::enabled || RewardKLTerm::enabled;

  /// The algorithm with this recipe's policies and the config's knobs.
  static PPOAlgorithm algorithm(const PPOConfig& config) {
    const auto& actor = config.actor_rollout_ref.actor;
    PPOAlgorithm out;
    out.estimator = detail::estimator_from<Estimator>(config);
    algo::PolicyLossConfig loss = policy_loss_config(config);
    loss.policy_loss.loss_mode = std::string(Loss::name);
    if (Extras.clip_ratio_high > 0 && actor.clip_ratio_high == actor.clip_ratio)
      loss.clip_ratio_high = Extras.clip_ratio_high;  // DAPO's clip-higher unless clip_ratio_high is configured
    out.policy_loss = detail::policy_loss_from<Loss>(loss);
    out.loss_agg_mode = Mode::mode;
    out.entropy_coeff = actor.entropy_coeff;
    if constexpr (KLTerm::enabled) out.kl_loss = decltype(KLTerm{}.estimator){};
    out.kl_loss_coef = actor.kl_loss_coef;
    out.use_kl_in_reward = RewardKLTerm::enabled;
    if constexpr (RewardKLTerm::enabled) out.kl_penalty = std::string(RewardKLTerm::estimator::name);
    const auto& al = config.algorithm;
    out.kl_ctrl = kl_control_config(config);
    if constexpr (Extras.dynamic_sampling) {
      // The recipe's own metric (acc) unless the user configured dynamic sampling.
      out.filter_groups = GroupFilter{.metric = al.filter_groups.enable ? al.filter_groups.metric : std::string("acc"),
                                      .max_num_gen_batches = al.filter_groups.max_num_gen_batches};
    }
    if constexpr (Extras.overlong_penalty) {
      const auto& buffer = config.reward_model.overlong_buffer;
      // DAPO's defaults scaled to the response length: a buffer of a quarter of it, factor 1.
      out.overlong_penalty = OverlongPenalty{
          buffer.len > 0 ? buffer.len : std::max<std::int64_t>(1, config.data.max_response_length / 4),
          buffer.penalty_factor > 0 ? buffer.penalty_factor : 1.0, buffer.log};
    }
    out.rollout = rollout_log_prob_use(config);
    VERL_CHECK_ARG(!out.rollout.bypass,
                   "algorithm.rollout_correction.bypass_mode: a recipe fixes its policy loss ({}); bypass mode replaces it, "
                   "so build the algorithm from the configuration (PPOAlgorithm::from_config) instead",
                   Loss::name);
    return out;
  }
};

template <class R>
concept PPORecipe = requires(const PPOConfig& config) {
  typename R::estimator_type;
  { R::algorithm(config) } -> std::same_as<PPOAlgorithm>;
  { R::needs_critic } -> std::convertible_to<bool>;
};

// ---- verl's recipes (in their own namespace: algo has estimators of the same names) -------------

namespace recipes {

/// PPO: actor, critic (GAE), reference and reward.
using PPO = Recipe<algo::GAE, algo::VanillaPPO>;
/// PPO with KL in the reward (algorithm.use_kl_in_reward=True, kl_penalty=kl).
using PPOWithRewardKL = Recipe<algo::GAE, algo::VanillaPPO, algo::NoKLLoss, algo::TokenMean, RewardKL<algo::KL>>;
/// GRPO: group-normalised advantages, a k3 (low_var_kl) KL loss.
using GRPO = Recipe<algo::GRPO, algo::VanillaPPO, algo::KLLoss<algo::LowVarKL>>;
/// Dr.GRPO: no std normalisation, seq-mean-token-sum-norm, no KL.
using DrGRPO = Recipe<algo::DrGRPO, algo::VanillaPPO, algo::NoKLLoss, algo::SeqMeanTokenSumNorm>;
/// DAPO: clip-higher (0.28), token-mean, dynamic sampling, overlong penalty, no KL.
using DAPO = Recipe<algo::GRPO, algo::VanillaPPO, algo::NoKLLoss, algo::TokenMean, NoRewardKL,
                    RecipeExtras{.dynamic_sampling = true, .overlong_penalty = true, .clip_ratio_high = 0.28}>;
/// RLOO: leave-one-out baselines, k3 KL loss.
using RLOO = Recipe<algo::RLOO, algo::VanillaPPO, algo::KLLoss<algo::LowVarKL>>;
/// REINFORCE++: discounted returns whitened over the batch, mse (k2) KL loss.
using ReinforcePlusPlus = Recipe<algo::ReinforcePlusPlus, algo::VanillaPPO, algo::KLLoss<algo::MSE>>;
/// ReMax: the greedy response's reward as baseline, KL in the reward.
using ReMax = Recipe<algo::ReMax, algo::VanillaPPO, algo::NoKLLoss, algo::TokenMean, RewardKL<algo::KL>>;

}  // namespace recipes

/// A PPOTrainer running recipe R, checked against its roles at compile time.
template <class R, class Policy, class Critic = NoCritic, class Reward = reward::DefaultRewardFunction>
class RecipeTrainer : public PPOTrainer<Policy, Critic, Reward> {
  VERL_STATIC_ASSERT(PPORecipe<R>, THE_RECIPE_TYPE_MUST_BE_A_TRAINER_RECIPE);
  VERL_STATIC_ASSERT((!R::needs_critic || !std::same_as<Critic, NoCritic>), GAE_NEEDS_A_CRITIC_MODEL);

 public:
  RecipeTrainer(PPOConfig config, Policy actor, std::optional<Policy> reference, Critic critic, Reward reward_fn,
                TokenizerHooks tokenizer, data::RLHFDataset train, data::RLHFDataset val)
      : PPOTrainer<Policy, Critic, Reward>(config, R::algorithm(config), std::move(actor), std::move(reference),
                                           std::move(critic), std::move(reward_fn), std::move(tokenizer), std::move(train),
                                           std::move(val)) {}
};

}  // namespace verl::trainer
