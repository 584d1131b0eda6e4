// Each policy family is one TypeList; its variant, its names, its by-name factory and the kernels'
// parameters derive from it. These tests hold the derived pieces to verl's names and to each other.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <string_view>
#include <variant>

#include "verl/algo.hpp"
#include "verl/core/type_list.hpp"
#include "verl/kernels/advantages.hpp"
#include "verl/kernels/kl_penalty.hpp"
#include "verl/reward.hpp"
#include "verl/trainer/logging/tracking.hpp"
#include "../support/error_message.hpp"

namespace {

using namespace verl;
using verl::test_support::message_of;

static_assert(index_in_v<double, TypeList<int, double, char>> == 1);
static_assert(index_in_v<float, TypeList<int, double>> == 2);
static_assert(contains_v<char, TypeList<int, char>> && !contains_v<float, TypeList<int, char>>);
static_assert(std::is_same_v<append_t<TypeList<int>, char, float>, TypeList<int, char, float>>);
static_assert(std::is_same_v<variant_of_t<TypeList<int, char>>, std::variant<int, char>>);

/// Every type of the list is an alternative of the variant, and the names are the types' names.
template <class... Ts, class Variant>
void expect_variant_holds_every_type(TypeList<Ts...>, std::type_identity<Variant>) {
  for_each_type(TypeList<Ts...>{}, [](auto type) {
    using T = typename decltype(type)::type;
    EXPECT_TRUE((std::is_constructible_v<Variant, T>)) << T::name;
  });
}

template <class List>
std::set<std::string_view> distinct_names() {
  const auto names = names_of(List{});
  return {names.begin(), names.end()};
}

TEST(PolicyFamilies, AdvantageEstimatorsAreVerlsRegistryInItsOrder) {
  using algo::AdvantageEstimators;
  const auto names = algo::advantage_estimator_names();
  const std::vector<std::string_view> verl_order = {"gae", "grpo", "reinforce_plus_plus", "reinforce_plus_plus_baseline",
                                                    "remax", "rloo", "opo", "grpo_passk", "gpg", "rloo_vectorized",
                                                    "grpo_vectorized", "optimal_token_baseline",
                                                    "tir_optimal_token_baseline", "gdpo"};
  EXPECT_EQ(std::vector<std::string_view>(names.begin(), names.end()), verl_order);
  EXPECT_EQ(distinct_names<AdvantageEstimators>().size(), AdvantageEstimators::size);
  expect_variant_holds_every_type(AdvantageEstimators{}, std::type_identity<algo::AdvantageEstimatorVariant>{});
  EXPECT_EQ(std::variant_size_v<algo::AdvantageEstimatorVariant>, AdvantageEstimators::size + 1);  // and DrGRPO
  for_each_type(AdvantageEstimators{}, [](auto type) {
    using E = typename decltype(type)::type;
    const algo::AnyAdvantageEstimator made = algo::make_advantage_estimator(E::name);
    EXPECT_NE(made.get_if<E>(), nullptr) << E::name;
    EXPECT_EQ(made.name(), E::name);
    constexpr algo::AdvantageInputs needs = algo::advantage_inputs_v<E>;
    EXPECT_EQ(made.needs_critic(), needs.critic_values) << E::name;
    EXPECT_EQ(made.needs_old_log_probs(), needs.old_log_probs) << E::name;
  });
  const std::string error = message_of<InvalidArgument>([] { (void)algo::make_advantage_estimator("grpo2"); });
  EXPECT_EQ(error, "adv_estimator: expected one of " + joined_names_of<AdvantageEstimators>() + ", got 'grpo2'");
}

TEST(PolicyFamilies, EstimatorsTakeTheirKnobsFromOneConfig) {
  const algo::AdvantageConfig config{.gamma = 0.5, .lam = 0.25, .norm_adv_by_std_in_grpo = false, .epsilon = 1e-3,
                                     .f_norm = 2.0, .handle_zero_tail = true};
  const auto gae = algo::make_advantage_estimator("gae", config);
  EXPECT_EQ(gae.get_if<algo::GAE>()->gamma, 0.5);
  EXPECT_EQ(gae.get_if<algo::GAE>()->lam, 0.25);
  const auto grpo = algo::make_advantage_estimator("grpo", config);
  EXPECT_EQ(grpo.get_if<algo::GRPO>()->epsilon, 1e-3);
  EXPECT_FALSE(grpo.get_if<algo::GRPO>()->norm_adv_by_std_in_grpo);
  EXPECT_EQ(algo::make_advantage_estimator("gpg", config).get_if<algo::GPG>()->f_norm, 2.0);
  EXPECT_TRUE(algo::make_advantage_estimator("optimal_token_baseline", config)
                  .get_if<algo::OptimalTokenBaseline>()
                  ->handle_zero_tail);
  // verl's own defaults where the config leaves a knob unset.
  EXPECT_EQ(algo::make_advantage_estimator("rloo").get_if<algo::RLOO>()->epsilon, 1e-6);
  EXPECT_EQ(algo::make_advantage_estimator("optimal_token_baseline").get_if<algo::OptimalTokenBaseline>()->epsilon,
            1e-8);
  EXPECT_TRUE(algo::make_advantage_estimator("optimal_token_baseline")  // verl 0.9.1's default
                  .get_if<algo::OptimalTokenBaseline>()
                  ->handle_zero_tail);
  EXPECT_TRUE(algo::make_advantage_estimator("tir_optimal_token_baseline")
                  .get_if<algo::MultiTurnOptimalTokenBaseline>()
                  ->handle_zero_tail);
}

TEST(PolicyFamilies, PolicyLossesAreVerlsRegistryInItsOrder) {
  using algo::PolicyLosses;
  const auto names = algo::policy_loss_names();
  const std::vector<std::string_view> verl_order = {"vanilla", "gspo",  "sapo",        "gpg",     "clip_cov", "kl_cov",
                                                    "geo_mean", "cispo", "bypass_mode", "dppo_tv", "dppo_kl",  "dro"};
  EXPECT_EQ(std::vector<std::string_view>(names.begin(), names.end()), verl_order);
  expect_variant_holds_every_type(PolicyLosses{}, std::type_identity<algo::AnyPolicyLoss::Variant>{});
  algo::PolicyLossConfig config;
  config.clip_ratio_low = 0.1;
  config.clip_ratio_high = 0.4;
  config.policy_loss.rollout_correction = algo::RolloutCorrectionConfig{};
  config.policy_loss.dro_beta = 0.1;
  for_each_type(PolicyLosses{}, [&](auto type) {
    using L = typename decltype(type)::type;
    const algo::AnyPolicyLoss made = algo::make_policy_loss(L::name, config);
    EXPECT_NE(made.get_if<L>(), nullptr) << L::name;
    EXPECT_EQ(made.name(), L::name);
  });
  EXPECT_EQ(algo::make_policy_loss("cispo", config).get_if<algo::CISPO>()->clip_ratio_high, 0.4);
  const std::string error = message_of<InvalidArgument>([&] { (void)algo::make_policy_loss("ppo2", config); });
  EXPECT_EQ(error, "loss_mode: expected one of " + joined_names_of<PolicyLosses>() + ", got 'ppo2'");
  config.policy_loss.rollout_correction.reset();
  const std::string bypass = message_of<InvalidArgument>([&] { (void)algo::make_policy_loss("bypass_mode", config); });
  EXPECT_NE(bypass.find("policy_loss.rollout_correction"), std::string::npos) << bypass;
}

TEST(PolicyFamilies, KLEstimatorsAndTheKernelsFormulas) {
  using algo::KLEstimators;
  const std::vector<std::string_view> verl_order = {"kl",  "k1",  "abs",  "mse",  "k2",  "low_var_kl",  "k3",
                                                    "kl+", "k1+", "abs+", "mse+", "k2+", "low_var_kl+", "k3+"};
  EXPECT_EQ(std::vector<std::string_view>(algo::kl_penalty_names.begin(), algo::kl_penalty_names.end()), verl_order);
  for_each_type(KLEstimators{}, [](auto type) {
    using E = typename decltype(type)::type;
    const algo::AnyKLEstimator made = algo::make_kl_estimator(E::name);
    EXPECT_TRUE(std::holds_alternative<E>(made)) << E::name;
    EXPECT_EQ(algo::name_of(made), E::name);
    if (E::name.ends_with('+')) {
      // No straight-through gradient on the GPU yet: refused, never given the stem's gradient.
      const std::string error = message_of<NotImplemented>([] { (void)kernels::parse_kl_type(E::name); });
      EXPECT_NE(error.find("no CUDA kernel"), std::string::npos) << error;
    } else {
      EXPECT_EQ(kernels::parse_kl_type(E::name), E::formula) << E::name;
    }
  });
  EXPECT_EQ(kernels::parse_kl_type("k3"), kernels::KlType::low_var_kl);
  EXPECT_EQ(kernels::parse_kl_type("k2"), kernels::KlType::mse);
  const std::string error = message_of<InvalidArgument>([] { (void)kernels::parse_kl_type("k4"); });
  EXPECT_EQ(error, "kl_penalty: expected one of kl, k1, abs, mse, k2, low_var_kl, k3, kl+, k1+, abs+, mse+, k2+, "
                   "low_var_kl+, k3+, got 'k4'");
}

TEST(PolicyFamilies, AggregationModesRoundTripTheirNames) {
  for_each_type(algo::LossAggregations{}, [](auto type) {
    using A = typename decltype(type)::type;
    EXPECT_EQ(algo::to_string(A::mode), A::name);
    EXPECT_EQ(algo::parse_loss_agg_mode(A::name), A::mode);
  });
  const std::string error = message_of<InvalidArgument>([] { (void)algo::parse_loss_agg_mode("token-sum-mean"); });
  EXPECT_EQ(error,
            "loss_agg_mode: expected one of token-mean, token-sum, seq-mean-token-sum, seq-mean-token-mean, "
            "seq-mean-token-sum-norm, got 'token-sum-mean'");
}

TEST(PolicyFamilies, OutcomeKernelsNameAlgosEstimators) {
  for_each_type(kernels::OutcomeEstimators{}, [](auto type) {
    using E = typename decltype(type)::type;
    EXPECT_EQ(kernels::to_string(kernels::outcome_estimator_of<E>), E::name);
  });
  EXPECT_EQ(kernels::outcome_estimator_of<algo::GRPOPassK>, kernels::OutcomeEstimator::grpo_passk);
  EXPECT_EQ(kernels::outcome_estimator_of<algo::RLOOVectorized>, kernels::OutcomeEstimator::rloo_vectorized);
  EXPECT_EQ(kernels::to_string(kernels::OutcomeEstimator::reinforce_plus_plus_baseline),
            "reinforce_plus_plus_baseline");
}

TEST(PolicyFamilies, ScorersAndLoggersByName) {
  for_each_type(reward::Scorers{}, [](auto type) {
    using S = typename decltype(type)::type;
    EXPECT_TRUE(std::holds_alternative<S>(reward::make_scorer(S::name))) << S::name;
  });
  EXPECT_EQ(message_of<InvalidArgument>([] { (void)reward::make_scorer("gsm9k"); }),
            "scorer name: expected one of gsm8k, math_reward, math_dapo, got 'gsm9k'");
  const std::vector<std::string_view> loggers(trainer::supported_logger_names.begin(),
                                              trainer::supported_logger_names.end());
  EXPECT_EQ(loggers, (std::vector<std::string_view>{"console", "file", "tensorboard"}));
}

}  // namespace
