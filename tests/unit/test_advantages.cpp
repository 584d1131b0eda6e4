// Advantage estimators: concept and traits, registry, input errors, hand-checked semantics of each
// estimator, invariances (group order, strided views), and the torch-order float32 sums and
// whitening they are built on. verl computes advantages under torch.no_grad (they are constants
// of the policy loss), so there is no gradient to check here.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "verl/algo/advantages.hpp"
#include "verl/algo/advantages/detail/masked_whiten.hpp"
#include "verl/algo/advantages/detail/torch_sum.hpp"
#include "verl/algo/masked_stats.hpp"
#include "verl/testing/golden.hpp"
#include "../support/error_message.hpp"

using namespace verl;
using namespace verl::algo;
using verl::test_support::message_of;
namespace adv_detail = verl::algo::detail;
namespace golden = verl::testing;

namespace {

// ---- helpers ---------------------------------------------------------------------------------

MatrixF random_matrix(Index rows, Index cols, std::uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  MatrixF m(rows, cols);
  for (Index i = 0; i < m.size(); ++i) m.data()[i] = dist(rng);
  return m;
}

/// Right-padded 0/1 mask with the given valid lengths.
MatrixF length_mask(const std::vector<Index>& lengths, Index cols) {
  MatrixF m = MatrixF::Zero(static_cast<Index>(lengths.size()), cols);
  for (std::size_t i = 0; i < lengths.size(); ++i) m.row(static_cast<Index>(i)).head(lengths[i]).setOnes();
  return m;
}

/// Outcome rewards: the score sits on the last valid token, as a reward manager places it.
MatrixF outcome_rewards(const std::vector<float>& scores, const MatrixF& mask) {
  MatrixF r = MatrixF::Zero(mask.rows(), mask.cols());
  for (Index i = 0; i < mask.rows(); ++i) {
    const Index last = std::max<Index>(static_cast<Index>(mask.row(i).sum()) - 1, 0);
    r(i, last) = scores[static_cast<std::size_t>(i)];
  }
  return r;
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// ---- concept, traits and compile-time checks ----------------------------------------------------

static_assert(AdvantageEstimator<GAE>);
static_assert(AdvantageEstimator<GRPO>);
static_assert(AdvantageEstimator<DrGRPO>);
static_assert(AdvantageEstimator<GRPOVectorized>);
static_assert(AdvantageEstimator<GRPOPassK>);
static_assert(AdvantageEstimator<ReinforcePlusPlus>);
static_assert(AdvantageEstimator<ReinforcePlusPlusBaseline>);
static_assert(AdvantageEstimator<ReMax>);
static_assert(AdvantageEstimator<RLOO>);
static_assert(AdvantageEstimator<RLOOVectorized>);
static_assert(AdvantageEstimator<OPO>);
static_assert(AdvantageEstimator<GPG>);
static_assert(AdvantageEstimator<OptimalTokenBaseline>);
static_assert(AdvantageEstimator<MultiTurnOptimalTokenBaseline>);
static_assert(!AdvantageEstimator<int>);
static_assert(!AdvantageEstimator<MatrixF>);

template <class E>
constexpr AdvantageInputs needs = advantage_inputs_v<E>;
static_assert(needs<GAE>.critic_values && !needs<GRPO>.critic_values && !needs<ReinforcePlusPlus>.critic_values);
static_assert(needs<GRPO>.group_index && needs<RLOO>.group_index && needs<OPO>.group_index && needs<GPG>.group_index);
static_assert(!needs<GAE>.group_index && !needs<ReinforcePlusPlus>.group_index && !needs<ReMax>.group_index);
static_assert(needs<ReMax>.reward_baselines && !needs<GRPO>.reward_baselines);
static_assert(needs<OptimalTokenBaseline>.old_log_probs && needs<MultiTurnOptimalTokenBaseline>.old_log_probs);

// An estimator written against the concept's first form (four needs_* booleans) still satisfies it.
struct LegacyTraitsEstimator {
  static constexpr std::string_view name = "legacy";
  static constexpr bool needs_critic = true;
  static constexpr bool needs_group_index = false;
  static constexpr bool needs_reward_baseline = true;
  static constexpr bool needs_old_log_probs = false;
  AdvantageResult compute(const AdvantageBatch&) const { return {}; }
};
static_assert(AdvantageEstimator<LegacyTraitsEstimator>);
static_assert(needs<LegacyTraitsEstimator>.critic_values && needs<LegacyTraitsEstimator>.reward_baselines &&
              !needs<LegacyTraitsEstimator>.group_index && !needs<LegacyTraitsEstimator>.old_log_probs);

static_assert(inputs_suffice<GAE>({.critic_values = true}));
static_assert(!inputs_suffice<GAE>({.group_index = true}));
static_assert(inputs_suffice<GRPO>({.group_index = true}));
static_assert(!inputs_suffice<GRPO>({}));
static_assert(inputs_suffice<ReinforcePlusPlus>({}));
static_assert(!inputs_suffice<ReMax>({.group_index = true}));
static_assert(inputs_suffice<OptimalTokenBaseline>({.group_index = true, .old_log_probs = true}));

// The positive side of the static_asserts (the negative side is in tests/compile_fail).
constexpr bool compile_time_checks_pass() {
  require_inputs<GAE, AvailableInputs{.critic_values = true}>();
  require_inputs<GRPO, AvailableInputs{.group_index = true}>();
  require_critic<GRPO, false>();
  require_critic<GAE, true>();
  require_group_index<ReinforcePlusPlus, false>();
  require_group_index<RLOO, true>();
  return true;
}
static_assert(compile_time_checks_pass());

TEST(AdvantageEstimatorNames, MatchVerlRegistryNames) {
  EXPECT_EQ(GAE::name, "gae");
  EXPECT_EQ(GRPO::name, "grpo");
  EXPECT_EQ(DrGRPO::name, "grpo");
  EXPECT_EQ(GRPOVectorized::name, "grpo_vectorized");
  EXPECT_EQ(GRPOPassK::name, "grpo_passk");
  EXPECT_EQ(ReinforcePlusPlus::name, "reinforce_plus_plus");
  EXPECT_EQ(ReinforcePlusPlusBaseline::name, "reinforce_plus_plus_baseline");
  EXPECT_EQ(ReMax::name, "remax");
  EXPECT_EQ(RLOO::name, "rloo");
  EXPECT_EQ(RLOOVectorized::name, "rloo_vectorized");
  EXPECT_EQ(OPO::name, "opo");
  EXPECT_EQ(GPG::name, "gpg");
  EXPECT_EQ(OptimalTokenBaseline::name, "optimal_token_baseline");
  EXPECT_EQ(MultiTurnOptimalTokenBaseline::name, "tir_optimal_token_baseline");
}

// ---- registry ---------------------------------------------------------------------------------

TEST(AdvantageRegistry, ListsVerlNamesInEnumOrder) {
  const std::vector<std::string_view> expected{"gae",
                                               "grpo",
                                               "reinforce_plus_plus",
                                               "reinforce_plus_plus_baseline",
                                               "remax",
                                               "rloo",
                                               "opo",
                                               "grpo_passk",
                                               "gpg",
                                               "rloo_vectorized",
                                               "grpo_vectorized",
                                               "optimal_token_baseline",
                                               "tir_optimal_token_baseline",
                                               "gdpo"};
  const auto names = advantage_estimator_names();
  EXPECT_EQ(std::vector<std::string_view>(names.begin(), names.end()), expected);
}

TEST(AdvantageRegistry, EveryNameMakesAnEstimatorOfThatName) {
  for (const auto name : advantage_estimator_names()) {
    const auto estimator = make_advantage_estimator(name);
    EXPECT_EQ(estimator.name(), name);
    EXPECT_EQ(estimator.needs_critic(), name == "gae") << name;
    EXPECT_EQ(estimator.needs_reward_baseline(), name == "remax") << name;
    EXPECT_EQ(estimator.needs_old_log_probs(), name.find("optimal_token_baseline") != std::string_view::npos) << name;
    const bool grouped = name != "gae" && name != "reinforce_plus_plus" && name != "remax";
    EXPECT_EQ(estimator.needs_group_index(), grouped) << name;
  }
}

TEST(AdvantageRegistry, UnknownNameListsTheValidNames) {
  const std::string message = message_of([] { (void)make_advantage_estimator("ppo"); });
  EXPECT_TRUE(contains(message, "adv_estimator")) << message;
  EXPECT_TRUE(contains(message, "'ppo'")) << message;
  for (const auto name : advantage_estimator_names()) EXPECT_TRUE(contains(message, std::string(name))) << name;
}

TEST(AdvantageRegistry, ConfigKnobsReachTheEstimators) {
  const AdvantageConfig config{.gamma = 0.9, .lam = 0.8, .norm_adv_by_std_in_grpo = false, .epsilon = 1e-3,
                               .f_norm = 2.0};
  const auto gae = make_advantage_estimator("gae", config);
  ASSERT_NE(gae.get_if<GAE>(), nullptr);
  EXPECT_EQ(gae.get_if<GAE>()->gamma, 0.9);
  EXPECT_EQ(gae.get_if<GAE>()->lam, 0.8);
  const auto grpo = make_advantage_estimator("grpo", config);
  ASSERT_NE(grpo.get_if<GRPO>(), nullptr);
  EXPECT_FALSE(grpo.get_if<GRPO>()->norm_adv_by_std_in_grpo);
  EXPECT_EQ(grpo.get_if<GRPO>()->epsilon, 1e-3);
  EXPECT_EQ(make_advantage_estimator("reinforce_plus_plus", config).get_if<ReinforcePlusPlus>()->gamma, 0.9);
  EXPECT_EQ(make_advantage_estimator("gpg", config).get_if<GPG>()->f_norm, 2.0);
  EXPECT_FALSE(make_advantage_estimator("grpo_passk", config).get_if<GRPOPassK>()->norm_adv_by_std_in_grpo);
}

TEST(AdvantageRegistry, UnsetKnobsTakeVerlsPerFunctionDefaults) {
  const auto grpo = make_advantage_estimator("grpo");
  EXPECT_EQ(grpo.get_if<GRPO>()->epsilon, 1e-6);
  EXPECT_TRUE(grpo.get_if<GRPO>()->norm_adv_by_std_in_grpo);
  const auto otb = make_advantage_estimator("optimal_token_baseline");
  EXPECT_EQ(otb.get_if<OptimalTokenBaseline>()->epsilon, 1e-8);
  EXPECT_TRUE(otb.get_if<OptimalTokenBaseline>()->handle_zero_tail);  // verl 0.9.1: true for both forms
  const auto tir = make_advantage_estimator("tir_optimal_token_baseline");
  EXPECT_EQ(tir.get_if<MultiTurnOptimalTokenBaseline>()->epsilon, 1e-8);
  EXPECT_TRUE(tir.get_if<MultiTurnOptimalTokenBaseline>()->handle_zero_tail);
  EXPECT_EQ(otb.get_if<GRPO>(), nullptr);
}

TEST(AdvantageRegistry, TypeErasedComputeEqualsTheConcreteOne) {
  const MatrixF mask = length_mask({3, 5, 2, 5}, 5);
  const MatrixF rewards = outcome_rewards({1.0f, 0.25f, 0.5f, 0.0f}, mask);
  const std::vector<std::int64_t> index{7, 7, 3, 3};
  const AdvantageBatch batch{.token_level_rewards = rewards, .response_mask = mask, .index = index};
  const AnyAdvantageEstimator any = GRPO{.epsilon = 1e-6};
  const auto a = any.compute(batch);
  const auto b = GRPO{.epsilon = 1e-6}.compute(batch);
  EXPECT_EQ(a.advantages, b.advantages);
  EXPECT_EQ(a.returns(), b.returns());
  const AnyAdvantageEstimator dr = DrGRPO{};
  EXPECT_EQ(dr.name(), "grpo");
  EXPECT_EQ(dr.compute(batch).advantages, (GRPO{.norm_adv_by_std_in_grpo = false}.compute(batch).advantages));
}

// ---- input errors -----------------------------------------------------------------------------

struct SmallBatch {
  MatrixF mask = length_mask({3, 4, 2, 4}, 4);
  MatrixF rewards = outcome_rewards({1.0f, 0.0f, 0.5f, 0.25f}, mask);
  MatrixF values = random_matrix(4, 4, 1);
  std::vector<std::int64_t> index{0, 0, 1, 1};
  VectorF baselines = VectorF::Constant(4, 0.5f);
  MatrixF log_probs = random_matrix(4, 4, 2, -3.0f, -0.1f);
  MatrixF sum_pi_sq = random_matrix(4, 4, 3, 0.1f, 0.9f);
};

TEST(AdvantageErrors, GaeWithoutValuesNamesTheCritic) {
  SmallBatch s;
  const std::string message = message_of([&] {
    (void)GAE{}.compute({.token_level_rewards = s.rewards, .response_mask = s.mask});
  });
  EXPECT_TRUE(contains(message, "values: gae needs the critic's values (4, 4), got none")) << message;
}

TEST(AdvantageErrors, GroupEstimatorsWithoutIndexNameIt) {
  SmallBatch s;
  for (const auto name : {"grpo", "grpo_vectorized", "grpo_passk", "rloo", "rloo_vectorized", "opo", "gpg",
                          "reinforce_plus_plus_baseline"}) {
    const std::string message = message_of([&] {
      (void)make_advantage_estimator(name).compute({.token_level_rewards = s.rewards, .response_mask = s.mask});
    });
    EXPECT_TRUE(contains(message, "index:")) << message;
    EXPECT_TRUE(contains(message, "got none")) << message;
    EXPECT_TRUE(contains(message, name)) << message;
  }
}

TEST(AdvantageErrors, WrongLengthIndex) {
  SmallBatch s;
  const std::vector<std::int64_t> short_index{0, 0, 1};
  const std::string message = message_of([&] {
    (void)GRPO{}.compute({.token_level_rewards = s.rewards, .response_mask = s.mask, .index = short_index});
  });
  EXPECT_TRUE(contains(message, "index: expected length 4, got 3")) << message;
}

TEST(AdvantageErrors, MismatchedMaskShape) {
  SmallBatch s;
  const MatrixF mask = MatrixF::Ones(4, 3);
  const std::string message = message_of([&] {
    (void)GRPO{}.compute({.token_level_rewards = s.rewards, .response_mask = mask, .index = s.index});
  });
  EXPECT_TRUE(contains(message, "response_mask")) << message;
  EXPECT_TRUE(contains(message, "(4, 4)")) << message;
  EXPECT_TRUE(contains(message, "(4, 3)")) << message;
}

TEST(AdvantageErrors, NonBinaryMaskIsRejectedWithItsPosition) {
  SmallBatch s;
  s.mask(2, 1) = 0.5f;
  for (const auto name : advantage_estimator_names()) {
    const std::string message = message_of([&] {
      (void)make_advantage_estimator(name).compute({.token_level_rewards = s.rewards,
                                                    .response_mask = s.mask,
                                                    .index = s.index,
                                                    .values = s.values,
                                                    .reward_baselines = s.baselines,
                                                    .old_log_probs = s.log_probs,
                                                    .sum_pi_squared = s.sum_pi_sq});
    });
    EXPECT_TRUE(contains(message, "response_mask: expected a 0/1 mask, got 0.5 at (2, 1)")) << name << ": " << message;
  }
}

TEST(AdvantageErrors, ShapeOfOptionalInputsIsChecked) {
  SmallBatch s;
  const MatrixF wrong = MatrixF::Zero(4, 5);
  EXPECT_TRUE(contains(message_of([&] {
                         (void)GAE{}.compute(
                             {.token_level_rewards = s.rewards, .response_mask = s.mask, .values = wrong});
                       }),
                       "values: expected the shape of token_level_rewards (4, 4), got (4, 5)"));
  EXPECT_TRUE(contains(message_of([&] {
                         (void)OptimalTokenBaseline{}.compute({.token_level_rewards = s.rewards,
                                                               .response_mask = s.mask,
                                                               .index = s.index,
                                                               .old_log_probs = s.log_probs,
                                                               .sum_pi_squared = s.sum_pi_sq,
                                                               .rollout_is_weights = wrong});
                       }),
                       "rollout_is_weights"));
  const VectorF short_baselines = VectorF::Zero(3);
  EXPECT_TRUE(contains(message_of([&] {
                         (void)ReMax{}.compute({.token_level_rewards = s.rewards,
                                                .response_mask = s.mask,
                                                .reward_baselines = short_baselines});
                       }),
                       "reward_baselines: expected length 4, got 3"));
}

TEST(AdvantageErrors, MissingRequiredInputsAreNamed) {
  SmallBatch s;
  EXPECT_TRUE(contains(message_of([&] {
                         (void)ReMax{}.compute({.token_level_rewards = s.rewards, .response_mask = s.mask});
                       }),
                       "reward_baselines: remax needs"));
  EXPECT_TRUE(contains(message_of([&] {
                         (void)OptimalTokenBaseline{}.compute(
                             {.token_level_rewards = s.rewards, .response_mask = s.mask, .index = s.index});
                       }),
                       "old_log_probs: optimal_token_baseline needs"));
  EXPECT_TRUE(contains(message_of([&] {
                         (void)MultiTurnOptimalTokenBaseline{}.compute({.token_level_rewards = s.rewards,
                                                                        .response_mask = s.mask,
                                                                        .index = s.index,
                                                                        .old_log_probs = s.log_probs});
                       }),
                       "sum_pi_squared: tir_optimal_token_baseline needs"));
}

TEST(AdvantageErrors, PassKNeedsTwoResponsesPerGroup) {
  SmallBatch s;
  const std::vector<std::int64_t> index{0, 0, 1, 2};
  const std::string message = message_of([&] {
    (void)GRPOPassK{}.compute({.token_level_rewards = s.rewards, .response_mask = s.mask, .index = index});
  });
  EXPECT_TRUE(contains(message, "at least 2 responses per prompt group, got 1 for uid 1")) << message;
}

TEST(AdvantageErrors, WhiteningNeedsTwoValidTokens) {
  const MatrixF mask = length_mask({1, 0}, 3);
  const MatrixF rewards = random_matrix(2, 3, 4);
  const MatrixF values = random_matrix(2, 3, 5);
  const std::string message = message_of(
      [&] { (void)ReinforcePlusPlus{}.compute({.token_level_rewards = rewards, .response_mask = mask}); });
  EXPECT_TRUE(contains(message, "at least 2 valid tokens in the batch")) << message;
  EXPECT_TRUE(contains(message, "got 1")) << message;
  const MatrixF empty_mask = MatrixF::Zero(2, 3);
  EXPECT_THROW(
      (void)GAE{}.compute({.token_level_rewards = rewards, .response_mask = empty_mask, .values = values}),
      InvalidArgument);
}

// ---- semantics of each estimator ----------------------------------------------------------------

TEST(Grpo, NormalisesByTheGroupsUnbiasedStd) {
  const MatrixF mask = length_mask({4, 2, 3, 4, 1}, 4);
  const std::vector<float> scores{1.0f, 0.0f, 1.0f, 0.5f, 2.0f};
  const MatrixF rewards = outcome_rewards(scores, mask);
  const std::vector<std::int64_t> index{11, 11, 11, 11, 42};  // uid 42 is a group of one
  const auto out = GRPO{.epsilon = 1e-6}.compute({.token_level_rewards = rewards, .response_mask = mask, .index = index});
  const double mean = 0.625, std = std::sqrt((0.375 * 0.375 * 2 + 0.625 * 0.625 + 0.125 * 0.125) / 3.0);
  for (Index i = 0; i < 4; ++i) {
    const double expected = (scores[static_cast<std::size_t>(i)] - mean) / (std + 1e-6);
    for (Index t = 0; t < 4; ++t) EXPECT_NEAR(out.advantages(i, t), expected * mask(i, t), 1e-6) << i << "," << t;
  }
  EXPECT_NEAR(out.advantages(4, 0), 2.0 / (1.0 + 1e-6), 1e-6);  // singleton: mean 0, std 1
  EXPECT_EQ(out.advantages(4, 1), 0.0f);
  EXPECT_EQ(out.advantages, out.returns());
}

TEST(Grpo, DrGrpoOnlySubtractsTheMean) {
  const MatrixF mask = length_mask({4, 4, 4}, 4);
  const MatrixF rewards = outcome_rewards({3.0f, 1.0f, 2.0f}, mask);
  const std::vector<std::int64_t> index{5, 5, 5};
  const auto out = DrGRPO{}.compute({.token_level_rewards = rewards, .response_mask = mask, .index = index});
  EXPECT_FLOAT_EQ(out.advantages(0, 0), 1.0f);
  EXPECT_FLOAT_EQ(out.advantages(1, 3), -1.0f);
  EXPECT_FLOAT_EQ(out.advantages(2, 2), 0.0f);
}

TEST(Grpo, VectorizedMatchesGrpoWithATwoPassVarianceAndNoFloor) {
  // verl 0.9.1: scores 1e-4 apart (unbiased var ~1e-8) divide by the true std in both forms (the
  // January form floored the variance at epsilon); scores near 1000 with a small spread need the
  // two-pass variance (S2 - S1^2/n in float32 loses every digit there).
  const MatrixF mask = length_mask({2, 2, 2, 2, 2}, 2);
  const MatrixF rewards = outcome_rewards({0.5f, 0.5001f, 1000.0f, 1000.25f, 999.5f}, mask);
  const std::vector<std::int64_t> index{1, 1, 2, 2, 2};
  const AdvantageBatch batch{.token_level_rewards = rewards, .response_mask = mask, .index = index};
  const auto vectorized = GRPOVectorized{}.compute(batch);
  const auto loop = GRPO{}.compute(batch);
  const double gap = static_cast<double>(0.5001f) - static_cast<double>(0.5f);
  EXPECT_NEAR(vectorized.advantages(1, 1), (gap / 2) / (gap / std::sqrt(2.0) + 1e-6), 1e-3);
  for (Index i = 0; i < 5; ++i) EXPECT_NEAR(vectorized.advantages(i, 0), loop.advantages(i, 0), 2e-4) << i;
}

TEST(Gdpo, NormalisesEachComponentThenWhitensTheWeightedSum) {
  const MatrixF mask = length_mask({3, 2, 4, 1, 3, 2}, 4);
  const std::vector<std::int64_t> index{0, 0, 0, 1, 1, 1};
  const VectorF format = (VectorF(6) << 1.0f, 0.0f, 1.0f, 1.0f, 1.0f, 0.0f).finished();
  const VectorF accuracy = (VectorF(6) << 0.0f, 1.0f, 1.0f, 0.5f, 0.0f, 0.25f).finished();
  const MatrixF unused_rewards = MatrixF::Zero(6, 4);
  const AdvantageBatch batch{.token_level_rewards = unused_rewards, .response_mask = mask, .index = index};
  const GDPO gdpo{.epsilon = 1e-6, .norm_adv_by_std_in_grpo = true, .reward_weights = std::vector<double>{0.3, 1.7, 9.0}};
  const RewardComponents components{{"format", format}, {"accuracy", accuracy}, {"unused", VectorF::Zero(6)}};
  const std::vector<std::string> keys{"format", "accuracy"};
  const auto out = gdpo.compute(batch, keys, components);
  // By hand: GRPO of each component (as token rewards summing to the score), weighted, whitened.
  const auto grpo_of = [&](const VectorF& scores) {
    return GRPO{.epsilon = 1e-6}.compute({.token_level_rewards = outcome_rewards(std::vector<float>(scores.begin(), scores.end()), mask),
                                          .response_mask = mask, .index = index}).advantages;
  };
  MatrixF sum = (0.3f * grpo_of(format).array() + 1.7f * grpo_of(accuracy).array()).matrix();
  const double n = mask.sum();
  const double mean = sum.cwiseProduct(mask).sum() / n;
  double var = 0;
  for (Index i = 0; i < 6; ++i)
    for (Index t = 0; t < 4; ++t)
      if (mask(i, t) != 0) var += (sum(i, t) - mean) * (sum(i, t) - mean);
  var /= n - 1;
  for (Index i = 0; i < 6; ++i)
    for (Index t = 0; t < 4; ++t)
      EXPECT_NEAR(out.advantages(i, t), mask(i, t) * (sum(i, t) - mean) / std::sqrt(var + 1e-8), 1e-5) << i << "," << t;
  EXPECT_EQ(out.returns(), out.advantages);
  // The fallback normalises token_level_rewards' row sums as the one component (weight 1).
  const MatrixF rewards = outcome_rewards({1.0f, 0.0f, 1.0f, 1.0f, 1.0f, 0.0f}, mask);
  const auto fallback = GDPO{}.compute({.token_level_rewards = rewards, .response_mask = mask, .index = index});
  const auto one_key = GDPO{}.compute(batch, std::vector<std::string>{"format"}, components);
  EXPECT_TRUE(fallback.advantages.isApprox(one_key.advantages, 1e-6f));
}

TEST(Gdpo, RejectsMissingKeysAndWeights) {
  const MatrixF mask = length_mask({2, 2, 2}, 2);
  const std::vector<std::int64_t> index{0, 0, 1};
  const MatrixF rewards = MatrixF::Zero(3, 2);
  const AdvantageBatch batch{.token_level_rewards = rewards, .response_mask = mask, .index = index};
  const RewardComponents components{{"format", VectorF::Ones(3)}};
  EXPECT_NE(message_of([&] { (void)GDPO{}.compute(batch, std::vector<std::string>{}, components); }).find("gdpo_reward_keys"),
            std::string::npos);
  const std::string missing = message_of([&] { (void)GDPO{}.compute(batch, std::vector<std::string>{"acc"}, components); });
  EXPECT_NE(missing.find("'acc'"), std::string::npos) << missing;
  EXPECT_NE(missing.find("format"), std::string::npos) << missing;
  const GDPO short_weights{.reward_weights = std::vector<double>{1.0}};
  const RewardComponents two{{"a", VectorF::Ones(3)}, {"b", VectorF::Zero(3)}};
  EXPECT_NE(message_of([&] { (void)short_weights.compute(batch, std::vector<std::string>{"a", "b"}, two); })
                .find("gdpo_reward_weights"),
            std::string::npos);
  const RewardComponents wrong_size{{"format", VectorF::Ones(2)}};
  EXPECT_NE(message_of([&] { (void)GDPO{}.compute(batch, std::vector<std::string>{"format"}, wrong_size); }).find("format"),
            std::string::npos);
}

TEST(GrpoPassK, CreditsOnlyTheBestResponseWithItsMargin) {
  const MatrixF mask = length_mask({2, 2, 2, 2, 2}, 2);
  const std::vector<float> scores{0.2f, 0.9f, 0.5f, 1.0f, 1.0f};
  const MatrixF rewards = outcome_rewards(scores, mask);
  const std::vector<std::int64_t> index{0, 0, 0, 1, 1};
  const AdvantageBatch batch{.token_level_rewards = rewards, .response_mask = mask, .index = index};
  const auto raw = GRPOPassK{.norm_adv_by_std_in_grpo = false}.compute(batch);
  EXPECT_FLOAT_EQ(raw.advantages(1, 0), 0.9f - 0.5f);
  EXPECT_EQ(raw.advantages(0, 0), 0.0f);
  EXPECT_EQ(raw.advantages(2, 1), 0.0f);
  EXPECT_EQ(raw.advantages(3, 0), 0.0f);  // tied maximum: a margin of 0
  EXPECT_EQ(raw.advantages(4, 0), 0.0f);
  const auto normalised = GRPOPassK{}.compute(batch);
  const double mean = (0.2 + 0.9 + 0.5) / 3, std = std::sqrt(((0.2 - mean) * (0.2 - mean) + (0.9 - mean) * (0.9 - mean) +
                                                              (0.5 - mean) * (0.5 - mean)) / 2);
  EXPECT_NEAR(normalised.advantages(1, 1), 0.4 / (std + 1e-6), 1e-5);
}

TEST(Rloo, LeaveOneOutBaselineAndSingletons) {
  const MatrixF mask = length_mask({3, 3, 3, 3}, 3);
  const std::vector<float> scores{1.0f, 0.0f, 0.5f, 0.75f};
  const MatrixF rewards = outcome_rewards(scores, mask);
  const std::vector<std::int64_t> index{4, 4, 4, 9};
  const AdvantageBatch batch{.token_level_rewards = rewards, .response_mask = mask, .index = index};
  const auto loop = RLOO{}.compute(batch);
  const auto vectorized = RLOOVectorized{}.compute(batch);
  const double others_mean_0 = (0.0 + 0.5) / 2;
  EXPECT_NEAR(loop.advantages(0, 0), 1.0 - others_mean_0, 1e-6);
  EXPECT_NEAR(vectorized.advantages(0, 0), 1.0 - others_mean_0, 1e-6);
  for (Index i = 0; i < 3; ++i) EXPECT_NEAR(loop.advantages(i, 1), vectorized.advantages(i, 1), 1e-6);
  EXPECT_FLOAT_EQ(loop.advantages(3, 2), 0.75f);  // the loop keeps a singleton's score
  EXPECT_EQ(vectorized.advantages(3, 2), 0.0f);   // the vectorized form zeroes it
}

TEST(Opo, LengthWeightedBaselineAndNaNForAllMaskedGroups) {
  const MatrixF mask = length_mask({2, 4, 0, 0, 3}, 4);
  const std::vector<float> scores{1.0f, 0.0f, 0.0f, 0.0f, 0.5f};
  MatrixF rewards = outcome_rewards(scores, mask);
  const std::vector<std::int64_t> index{0, 0, 1, 1, 2};
  const auto out = OPO{}.compute({.token_level_rewards = rewards, .response_mask = mask, .index = index});
  const double baseline = (2 * 1.0 + 4 * 0.0) / 6.0;
  EXPECT_NEAR(out.advantages(0, 0), 1.0 - baseline, 1e-6);
  EXPECT_NEAR(out.advantages(1, 3), -baseline, 1e-6);
  EXPECT_EQ(out.advantages(0, 3), 0.0f);
  EXPECT_TRUE(std::isnan(out.advantages(2, 0)));  // 0/0, and NaN * 0 stays NaN as in verl
  EXPECT_TRUE(std::isnan(out.returns()(3, 3)));
  EXPECT_FLOAT_EQ(out.advantages(4, 2), 0.5f);  // singleton: baseline 0
}

TEST(Gpg, ScalesByBatchOverNonzeroScores) {
  const MatrixF mask = length_mask({2, 2, 2, 2}, 2);
  const std::vector<float> scores{1.0f, 0.0f, 0.0f, 3.0f};
  const MatrixF rewards = outcome_rewards(scores, mask);
  const std::vector<std::int64_t> index{0, 0, 1, 1};
  const auto out = GPG{.f_norm = 2.0}.compute({.token_level_rewards = rewards, .response_mask = mask, .index = index});
  const double alpha = 4.0 / 2.0;  // two nonzero scores in a batch of four
  EXPECT_NEAR(out.advantages(0, 0), alpha * (1.0 - 0.5) / 2.0, 1e-6);
  EXPECT_NEAR(out.advantages(2, 1), alpha * (0.0 - 1.5) / 2.0, 1e-6);
  // All scores zero: alpha = B / max(0, 1) and every advantage is 0.
  const MatrixF zeros = MatrixF::Zero(4, 2);
  const auto none = GPG{}.compute({.token_level_rewards = zeros, .response_mask = mask, .index = index});
  EXPECT_TRUE(none.advantages.isZero());
}

TEST(ReMax, RewardToGoMinusTheGreedyBaseline) {
  const MatrixF mask = length_mask({3, 2}, 4);
  MatrixF rewards(2, 4);
  rewards << 1, 2, 3, 4, 0.5f, 0.25f, 9, 9;  // positions past the mask never count
  const VectorF baselines = (VectorF(2) << 0.5f, 1.0f).finished();
  const auto out = ReMax{}.compute({.token_level_rewards = rewards, .response_mask = mask, .reward_baselines = baselines});
  MatrixF returns(2, 4), advantages(2, 4);
  returns << 6, 5, 3, 0, 0.75f, 0.25f, 0, 0;
  advantages << 5.5f, 4.5f, 2.5f, 0, -0.25f, -0.75f, 0, 0;
  EXPECT_EQ(out.returns(), returns);
  EXPECT_EQ(out.advantages, advantages);
}

/// verl's GAE as written: a loop over columns, the whole batch at once, in double.
MatrixD naive_gae_raw(const MatrixF& r, const MatrixF& v, const MatrixF& m, double gamma, double lam) {
  MatrixD adv(r.rows(), r.cols());
  VectorD next_values = VectorD::Zero(r.rows()), last = VectorD::Zero(r.rows());
  for (Index t = r.cols() - 1; t >= 0; --t) {
    for (Index i = 0; i < r.rows(); ++i) {
      const double delta = r(i, t) + gamma * next_values[i] - v(i, t);
      const double candidate = delta + gamma * lam * last[i];
      next_values[i] = v(i, t) * m(i, t) + (1 - m(i, t)) * next_values[i];
      last[i] = candidate * m(i, t) + (1 - m(i, t)) * last[i];
      adv(i, t) = last[i];
    }
  }
  return adv;
}

TEST(Gae, MatchesVerlsRecursionIncludingMaskHoles) {
  const Index rows = 11, cols = 13;  // 11 rows: one block of 8 side-by-side rows plus 3 single rows
  const MatrixF rewards = random_matrix(rows, cols, 21);
  const MatrixF values = random_matrix(rows, cols, 22);
  MatrixF mask = (random_matrix(rows, cols, 23, 0.0f, 1.0f).array() > 0.3f).cast<float>();  // holes anywhere
  mask(0, 0) = 1;
  const GAE gae{.gamma = 0.9, .lam = 0.8};
  const auto out = gae.compute({.token_level_rewards = rewards, .response_mask = mask, .values = values});
  const MatrixD raw = naive_gae_raw(rewards, values, mask, 0.9, 0.8);
  // returns = raw + values everywhere, padding included.
  EXPECT_LT((out.returns().cast<double>() - (raw + values.cast<double>())).cwiseAbs().maxCoeff(), 1e-5);
  // advantages = masked_whiten(raw, mask), not masked.
  const MatrixF whitened = masked_whiten(raw.cast<float>(), mask);
  EXPECT_LT((out.advantages - whitened).cwiseAbs().maxCoeff(), 1e-4);
}

TEST(Gae, GammaLambdaOneIsRewardToGoMinusValue) {
  const MatrixF mask = length_mask({5, 3, 5}, 5);
  const MatrixF rewards = random_matrix(3, 5, 31);
  const MatrixF values = random_matrix(3, 5, 32);
  const auto out = GAE{}.compute({.token_level_rewards = rewards, .response_mask = mask, .values = values});
  for (Index i = 0; i < 3; ++i)
    for (Index t = 0; t < 5; ++t) {
      if (mask(i, t) == 0) continue;
      double to_go = 0;
      for (Index s = t; s < 5; ++s) to_go += mask(i, s) * rewards(i, s);
      EXPECT_NEAR(out.returns()(i, t), to_go, 1e-5);  // A_t + V_t = sum of rewards to go
    }
}

TEST(ReinforcePlusPlus, DiscountedReturnsCarryOverMaskedTokensAndAreWhitened) {
  // verl 0.9.1: a masked position (here observation holes inside the response, and padding) gets
  // return 0, drops its reward and leaves the running return unchanged.
  MatrixF mask = length_mask({4, 2, 3}, 4);
  mask(0, 1) = 0.0f;  // a hole inside row 0
  const MatrixF rewards = random_matrix(3, 4, 41);
  const double gamma = 0.9;
  const auto out = ReinforcePlusPlus{.gamma = gamma}.compute({.token_level_rewards = rewards, .response_mask = mask});
  for (Index i = 0; i < 3; ++i) {
    double running = 0;
    for (Index t = 3; t >= 0; --t) {
      if (mask(i, t) == 0) {
        EXPECT_EQ(out.returns()(i, t), 0.0f) << i << "," << t;
        continue;
      }
      running = rewards(i, t) + gamma * running;
      EXPECT_NEAR(out.returns()(i, t), running, 1e-5) << i << "," << t;
    }
  }
  // Whitened over the valid tokens: mean 0, unbiased variance 1; zero elsewhere.
  double sum = 0, squares = 0;
  const double n = mask.sum();
  for (Index i = 0; i < 3; ++i)
    for (Index t = 0; t < 4; ++t) {
      if (mask(i, t) == 0) {
        EXPECT_EQ(out.advantages(i, t), 0.0f);
        continue;
      }
      sum += out.advantages(i, t);
      squares += static_cast<double>(out.advantages(i, t)) * out.advantages(i, t);
    }
  EXPECT_NEAR(sum / n, 0.0, 1e-6);
  EXPECT_NEAR(squares / (n - 1), 1.0, 1e-4);
}

TEST(ReinforcePlusPlusBaseline, GroupMeanThenWhitening) {
  const MatrixF mask = length_mask({3, 2, 3, 1}, 3);
  const std::vector<float> scores{1.0f, 0.0f, 0.5f, 2.0f};
  const MatrixF rewards = outcome_rewards(scores, mask);
  const std::vector<std::int64_t> index{0, 0, 1, 1};
  const auto out = ReinforcePlusPlusBaseline{}.compute({.token_level_rewards = rewards, .response_mask = mask, .index = index});
  MatrixF centered(4, 3);
  const float c[4] = {0.5f, -0.5f, -0.75f, 0.75f};
  for (Index i = 0; i < 4; ++i) centered.row(i) = mask.row(i) * c[i];
  const MatrixF expected = (masked_whiten(centered, mask).array() * mask.array()).matrix();
  EXPECT_LT((out.advantages - expected).cwiseAbs().maxCoeff(), 1e-5);
  EXPECT_EQ(out.advantages, out.returns());
}

struct OtbBatch {
  MatrixF mask;
  MatrixF rewards;
  MatrixF log_probs;
  MatrixF sum_pi_sq;
  std::vector<std::int64_t> index;
  AdvantageBatch batch() const {
    return {.token_level_rewards = rewards,
            .response_mask = mask,
            .index = index,
            .old_log_probs = log_probs,
            .sum_pi_squared = sum_pi_sq};
  }
};

OtbBatch otb_batch(std::vector<Index> lengths, std::vector<std::int64_t> index, Index cols, std::uint32_t seed) {
  OtbBatch b;
  b.mask = length_mask(lengths, cols);
  b.rewards = random_matrix(b.mask.rows(), cols, seed);
  b.log_probs = random_matrix(b.mask.rows(), cols, seed + 1, -4.0f, -0.05f);
  b.sum_pi_sq = random_matrix(b.mask.rows(), cols, seed + 2, 0.05f, 0.9f);
  b.index = std::move(index);
  return b;
}

TEST(OptimalTokenBaseline, PerPositionWeightedBaseline) {
  const OtbBatch b = otb_batch({4, 3, 2}, {0, 0, 1}, 4, 51);
  const auto out = OptimalTokenBaseline{.handle_zero_tail = false}.compute(b.batch());
  // returns: reward-to-go of r * m.
  for (Index i = 0; i < 3; ++i)
    for (Index t = 0; t < 4; ++t) {
      double to_go = 0;
      for (Index s = t; s < 4; ++s) to_go += b.rewards(i, s) * b.mask(i, s);
      EXPECT_NEAR(out.returns()(i, t), to_go, 1e-5);
    }
  // Group {0, 1}: b_t = sum(G W m) / sum(W m).
  MatrixD w_cum(2, 4);
  for (Index i = 0; i < 2; ++i) {
    double running = 0;
    for (Index t = 0; t < 4; ++t) {
      running += (1 - 2 * std::exp(static_cast<double>(b.log_probs(i, t))) + b.sum_pi_sq(i, t)) * b.mask(i, t);
      w_cum(i, t) = running;
    }
  }
  for (Index t = 0; t < 4; ++t) {
    double num = 0, den = 0;
    for (Index i = 0; i < 2; ++i) {
      num += out.returns()(i, t) * w_cum(i, t) * b.mask(i, t);
      den += w_cum(i, t) * b.mask(i, t);
    }
    const double baseline = num / (den + 1e-8);
    for (Index i = 0; i < 2; ++i)
      EXPECT_NEAR(out.advantages(i, t), (out.returns()(i, t) - baseline) * b.mask(i, t), 1e-4) << i << "," << t;
  }
  // Group of one: no baseline.
  for (Index t = 0; t < 4; ++t) EXPECT_FLOAT_EQ(out.advantages(2, t), out.returns()(2, t) * b.mask(2, t));
}

TEST(OptimalTokenBaseline, ZeroTailFreesTheUniqueLongestResponse) {
  const OtbBatch b = otb_batch({6, 3, 4}, {0, 0, 0}, 6, 61);
  const auto plain = OptimalTokenBaseline{.handle_zero_tail = false}.compute(b.batch());
  const auto tail = OptimalTokenBaseline{}.compute(b.batch());  // verl 0.9.1's default: true
  EXPECT_TRUE(OptimalTokenBaseline{}.handle_zero_tail);
  // Row 0 is the unique longest (6 > 4): from position 4 on it gets no baseline.
  for (Index t = 4; t < 6; ++t) EXPECT_FLOAT_EQ(tail.advantages(0, t), tail.returns()(0, t));
  for (Index t = 0; t < 4; ++t) EXPECT_EQ(tail.advantages(0, t), plain.advantages(0, t));
  EXPECT_EQ(tail.advantages.bottomRows(2), plain.advantages.bottomRows(2));
  // A tie for the longest: nothing changes.
  const OtbBatch tied = otb_batch({5, 5, 2}, {3, 3, 3}, 5, 62);
  EXPECT_EQ(OptimalTokenBaseline{.handle_zero_tail = true}.compute(tied.batch()).advantages,
            OptimalTokenBaseline{.handle_zero_tail = false}.compute(tied.batch()).advantages);
}

TEST(MultiTurnOptimalTokenBaseline, AlignsRowsByValidTokenIndex) {
  // Row 1 is row 0 with an observation hole: compacted, their valid tokens line up, so both see the
  // same baseline sequence; aligned by position (optimal_token_baseline) they would not.
  OtbBatch b = otb_batch({4, 6}, {0, 0}, 6, 71);
  b.mask.row(1) << 1, 0, 0, 1, 1, 1;
  b.mask.row(0) << 1, 1, 1, 1, 0, 0;
  const auto out = MultiTurnOptimalTokenBaseline{.handle_zero_tail = false}.compute(b.batch());
  const std::vector<Index> positions0{0, 1, 2, 3}, positions1{0, 3, 4, 5};
  for (std::size_t k = 0; k < 4; ++k) {
    const Index t0 = positions0[k], t1 = positions1[k];
    const double baseline0 = out.returns()(0, t0) - out.advantages(0, t0);
    const double baseline1 = out.returns()(1, t1) - out.advantages(1, t1);
    EXPECT_NEAR(baseline0, baseline1, 1e-5) << k;
  }
  EXPECT_EQ(out.advantages(1, 1), 0.0f);  // masked positions stay 0
  EXPECT_EQ(out.advantages(0, 5), 0.0f);
}

TEST(MultiTurnOptimalTokenBaseline, FullyMaskedRowsLeaveTheirGroup) {
  // Row 2 is fully masked: row 1 is then alone in group 7 and keeps its returns.
  const OtbBatch b = otb_batch({3, 4, 0, 2}, {5, 7, 7, 5}, 4, 81);
  const auto out = MultiTurnOptimalTokenBaseline{}.compute(b.batch());
  for (Index t = 0; t < 4; ++t) EXPECT_FLOAT_EQ(out.advantages(1, t), out.returns()(1, t));
  EXPECT_TRUE(out.advantages.row(2).isZero());
  // In optimal_token_baseline the masked row still counts: group 7 has two rows and a baseline.
  const auto by_position = OptimalTokenBaseline{.handle_zero_tail = false}.compute(b.batch());
  EXPECT_NE(by_position.advantages(1, 0), by_position.returns()(1, 0));
}

// ---- invariances ----------------------------------------------------------------------------------

TEST(AdvantageInvariance, GroupsNeedNotBeContiguous) {
  const Index rows = 12, cols = 6;
  std::vector<Index> lengths(rows);
  for (Index i = 0; i < rows; ++i) lengths[static_cast<std::size_t>(i)] = 1 + i % cols;
  const MatrixF mask = length_mask(lengths, cols);
  const MatrixF rewards = random_matrix(rows, cols, 91);
  std::vector<std::int64_t> index(rows);
  for (Index i = 0; i < rows; ++i) index[static_cast<std::size_t>(i)] = 1000 + i / 4;  // contiguous groups of 4
  std::vector<Index> perm(rows);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), std::mt19937(92));
  MatrixF mask_p(rows, cols), rewards_p(rows, cols);
  std::vector<std::int64_t> index_p(rows);
  for (Index i = 0; i < rows; ++i) {
    mask_p.row(i) = mask.row(perm[static_cast<std::size_t>(i)]);
    rewards_p.row(i) = rewards.row(perm[static_cast<std::size_t>(i)]);
    index_p[static_cast<std::size_t>(i)] = index[static_cast<std::size_t>(perm[static_cast<std::size_t>(i)])];
  }
  for (const auto name : {"grpo", "grpo_vectorized", "grpo_passk", "rloo", "rloo_vectorized", "opo", "gpg",
                          "reinforce_plus_plus_baseline"}) {
    const auto estimator = make_advantage_estimator(name);
    const auto a = estimator.compute({.token_level_rewards = rewards, .response_mask = mask, .index = index});
    const auto b = estimator.compute({.token_level_rewards = rewards_p, .response_mask = mask_p, .index = index_p});
    for (Index i = 0; i < rows; ++i)
      EXPECT_LT((a.advantages.row(perm[static_cast<std::size_t>(i)]) - b.advantages.row(i)).cwiseAbs().maxCoeff(),
                2e-6)
          << name << " row " << i;
  }
}

TEST(AdvantageInvariance, StridedViewsGiveTheSameResult) {
  // Blocks of a wider matrix bind to the batch's views without a copy (outer stride != cols).
  const MatrixF wide_rewards = random_matrix(6, 9, 101);
  const MatrixF wide_values = random_matrix(6, 9, 102);
  MatrixF wide_mask = MatrixF::Ones(6, 9);
  wide_mask(1, 5) = 0;
  wide_mask(4, 2) = 0;
  const MatrixF rewards = wide_rewards.leftCols(5), values = wide_values.leftCols(5), mask = wide_mask.leftCols(5);
  const std::vector<std::int64_t> index{1, 2, 1, 2, 3, 3};
  for (const auto name : advantage_estimator_names()) {
    if (name == "remax" || name.find("optimal") != std::string_view::npos) continue;
    const auto estimator = make_advantage_estimator(name);
    const auto dense = estimator.compute(
        {.token_level_rewards = rewards, .response_mask = mask, .index = index, .values = values});
    const auto strided = estimator.compute({.token_level_rewards = wide_rewards.leftCols(5),
                                            .response_mask = wide_mask.leftCols(5),
                                            .index = index,
                                            .values = ConstMatrixRefF(wide_values.leftCols(5))});
    EXPECT_EQ(dense.advantages, strided.advantages) << name;
    EXPECT_EQ(dense.returns(), strided.returns()) << name;
  }
}

TEST(AdvantageInvariance, EmptyBatchOfGroupEstimators) {
  const MatrixF empty(0, 4);
  for (const auto name : {"grpo", "grpo_vectorized", "rloo", "rloo_vectorized", "opo", "gpg", "grpo_passk"}) {
    const auto out = make_advantage_estimator(name).compute({.token_level_rewards = empty, .response_mask = empty});
    EXPECT_EQ(out.advantages.rows(), 0) << name;
    EXPECT_EQ(out.returns().cols(), 4) << name;
  }
}

/// A 4 x 6 batch with every input some estimator needs (critic values, baselines, OTB's inputs).
struct EveryEstimatorsInputs {
  explicit EveryEstimatorsInputs(unsigned seed)
      : rewards(random_matrix(4, 6, seed)),
        values(random_matrix(4, 6, seed + 1)),
        log_probs(random_matrix(4, 6, seed + 2, -3.0f, -0.1f)),
        sum_pi_sq(random_matrix(4, 6, seed + 3, 0.1f, 0.9f)) {}
  AdvantageBatch batch() const {
    return {.token_level_rewards = rewards,
            .response_mask = mask,
            .index = index,
            .values = values,
            .reward_baselines = baselines,
            .old_log_probs = log_probs,
            .sum_pi_squared = sum_pi_sq};
  }
  MatrixF mask = length_mask({5, 3, 6, 2}, 6);
  MatrixF rewards, values, log_probs, sum_pi_sq;
  VectorF baselines = VectorF::Constant(4, 0.25f);
  std::vector<std::int64_t> index{3, 1, 3, 1};
};

TEST(AdvantageInvariance, ComputeIntoReusesTheCallersStorage) {
  const EveryEstimatorsInputs inputs(121);
  const AdvantageBatch batch = inputs.batch();
  for (const auto name : advantage_estimator_names()) {
    const auto estimator = make_advantage_estimator(name);
    AdvantageResult reused{MatrixF::Constant(4, 6, 7.0f), MatrixF::Constant(4, 6, 7.0f)};
    const float* advantages_storage = reused.advantages.data();
    const float* returns_storage = reused.returns().data();
    estimator.compute_into(batch, reused);
    const auto fresh = estimator.compute(batch);
    EXPECT_EQ(reused.advantages, fresh.advantages) << name;
    EXPECT_EQ(reused.returns(), fresh.returns()) << name;
    EXPECT_EQ(reused.advantages.data(), advantages_storage) << name;
    EXPECT_EQ(reused.returns_are_advantages(), fresh.returns_are_advantages()) << name;
    // One matrix for both when the estimator returns its advantages as returns, else the caller's.
    EXPECT_EQ(reused.returns().data(), reused.returns_are_advantages() ? advantages_storage : returns_storage) << name;
    AdvantageResult reshaped{MatrixF::Zero(2, 3), MatrixF()};  // wrong shapes are replaced
    compute_advantages_into(GRPO{}, batch, reshaped);
    EXPECT_EQ(reshaped.advantages, GRPO{}.compute(batch).advantages);
  }
}

TEST(AdvantageInvariance, OutcomeEstimatorsReturnOneMatrixAsVerlReturnsOneTensor) {
  // verl's outcome-reward estimators end with `return scores, scores`; the others compute returns
  // of their own. The shared form holds one matrix; switching a result between estimators (as a
  // trainer reusing the previous step's result might) keeps each one's returns right.
  const std::set<std::string_view> shared{"grpo", "grpo_vectorized", "rloo", "rloo_vectorized", "opo", "gpg",
                                          "grpo_passk", "reinforce_plus_plus_baseline", "gdpo"};
  const EveryEstimatorsInputs inputs(131);
  const AdvantageBatch batch = inputs.batch();
  std::size_t shared_seen = 0;
  for (const auto name : advantage_estimator_names()) {
    const auto estimator = make_advantage_estimator(name);
    const AdvantageResult fresh = estimator.compute(batch);
    const bool expect_shared = shared.contains(name);
    shared_seen += expect_shared ? 1 : 0;
    EXPECT_EQ(fresh.returns_are_advantages(), expect_shared) << name;
    if (expect_shared) {
      EXPECT_EQ(fresh.returns().data(), fresh.advantages.data()) << name;
    }
    for (const auto other : {std::string_view{"gae"}, std::string_view{"grpo"}}) {
      AdvantageResult switched = make_advantage_estimator(other).compute(batch);
      estimator.compute_into(batch, switched);
      EXPECT_EQ(switched.returns_are_advantages(), expect_shared) << name << " after " << other;
      EXPECT_EQ(switched.advantages, fresh.advantages) << name << " after " << other;
      EXPECT_EQ(switched.returns(), fresh.returns()) << name << " after " << other;
    }
  }
  EXPECT_EQ(shared_seen, shared.size());
  // Writing through either name writes the one matrix, as with verl's single tensor.
  AdvantageResult result = AdvantageResult::shared(MatrixF::Zero(2, 3));
  result.returns()(1, 2) = 5.0f;
  EXPECT_EQ(result.advantages(1, 2), 5.0f);
  const AdvantageResult copy = result;  // a copy shares within itself, not with the original
  result.advantages(0, 0) = 1.0f;
  EXPECT_EQ(copy.returns()(0, 0), 0.0f);
  EXPECT_EQ(copy.returns().data(), copy.advantages.data());
  const AdvantageResult separate{MatrixF::Zero(2, 3), MatrixF::Ones(2, 3)};
  EXPECT_FALSE(separate.returns_are_advantages());
  EXPECT_EQ(separate.returns(), MatrixF::Ones(2, 3));
}

TEST(AdvantageInvariance, LargeBatchesStreamTheirOutputs) {
  // 4096 x 2048 floats = 32 MiB of output: a broadcast into reused storage bypasses the caches
  // then (fresh storage takes plain stores). Same values either way.
  const Index rows = 4096, cols = 2048;
  MatrixF mask = MatrixF::Ones(rows, cols);
  for (Index i = 0; i < rows; ++i) mask.row(i).tail(i % cols).setZero();
  MatrixF rewards = MatrixF::Zero(rows, cols);
  std::vector<std::int64_t> index(static_cast<std::size_t>(rows));
  for (Index i = 0; i < rows; ++i) {
    rewards(i, 0) = static_cast<float>(i % 5) * 0.25f;
    index[static_cast<std::size_t>(i)] = (i * 7) % 256;
  }
  const AdvantageBatch batch{.token_level_rewards = rewards, .response_mask = mask, .index = index};
  const auto fresh = GRPO{}.compute(batch);
  VectorF scalars(rows);
  for (Index i = 0; i < rows; ++i) scalars[i] = fresh.advantages(i, 0);
  EXPECT_EQ(fresh.advantages, (mask.array().colwise() * scalars.array()).matrix());
  AdvantageResult reused{MatrixF::Constant(rows, cols, 7.0f), MatrixF()};
  GRPO{}.compute_into(batch, reused);
  EXPECT_EQ(reused.advantages, fresh.advantages);
  EXPECT_EQ(reused.returns().data(), reused.advantages.data());
  mask(rows - 1, 3) = 2.0f;
  EXPECT_TRUE(contains(message_of([&] { GRPO{}.compute_into(batch, reused); }), "got 2 at (4095, 3)"));
  EXPECT_TRUE(contains(message_of([&] { (void)GRPO{}.compute(batch); }), "got 2 at (4095, 3)"));
}

// ---- torch-order sums and whitening -------------------------------------------------------------

TEST(TorchFloatSum, ReproducesTheGoldenMaskedSumsBitForBit) {
  // masked_sum over the whole batch (axis None) and over each row (axis -1, the response scores).
  const auto file = golden::GoldenFile::load(std::string(VERL_GOLDEN_DIR) + "/functional.json");
  int checked = 0;
  for (const auto& c : file.cases()) {
    if (c.fn() != "masked_sum" || c.raises()) continue;
    const bool whole = !c.has_arg("axis");
    if (!whole && c.args().at("axis").get<int>() != -1) continue;
    const MatrixF values = c.input_tensor("values").matrix<float>();
    const MatrixF mask = c.input_tensor("mask").matrix<float>();
    const MatrixF masked = (mask.array() != 0).select(values, 0.0f).cwiseProduct(mask);
    if (whole) {
      const float want = static_cast<float>(c.outputs().at("result").get<double>());
      EXPECT_EQ(adv_detail::torch_sum(masked.data(), masked.size()), want) << c.name();
    } else {
      const auto rows = golden::parse_tensor(c.outputs().at("result")).data;
      for (Index i = 0; i < masked.rows(); ++i)
        EXPECT_EQ(adv_detail::torch_sum(masked.data() + i * masked.cols(), masked.cols()),
                  static_cast<float>(rows[static_cast<std::size_t>(i)]))
            << c.name() << " row " << i;
    }
    ++checked;
  }
  EXPECT_GT(checked, 10);
}

TEST(TorchFloatSum, StreamingInAnyChunksEqualsOneShot) {
  for (const Index n : {Index{0}, Index{1}, Index{5}, Index{7}, Index{8}, Index{31}, Index{33}, Index{100},
                        Index{1027}, Index{40000}, Index{3000000}}) {
    const MatrixF x = random_matrix(1, std::max<Index>(n, 1), static_cast<std::uint32_t>(n) + 7);
    const float one_shot = adv_detail::torch_sum(x.data(), n);
    adv_detail::TorchFloatSum streamed(n);
    std::mt19937 rng(static_cast<std::uint32_t>(n));
    Index at = 0;
    while (at < n) {
      const Index chunk = std::min<Index>(n - at, 1 + static_cast<Index>(rng() % 77));
      streamed.add(x.data() + at, chunk);
      at += chunk;
    }
    EXPECT_EQ(streamed.result(), one_shot) << n;
    double exact = 0;
    for (Index i = 0; i < n; ++i) exact += x.data()[i];
    EXPECT_NEAR(one_shot, exact, 1e-5 * std::max(1.0, std::sqrt(static_cast<double>(n)))) << n;
  }
}

TEST(TorchFloatSum, SmallRunsAreInterleavedScalarSums) {
  // Fewer than 8 floats: partial sums of indices i % 4, the rest into the first, then in order.
  const float x[7] = {1e8f, 1.0f, -1e8f, 1.0f, 1.0f, 3.0f, 0.5f};
  float p0 = (1e8f + 1.0f) + 3.0f;
  p0 = p0 + 0.5f;
  const float expected = ((p0 + 1.0f) + -1e8f) + 1.0f;
  EXPECT_EQ(adv_detail::torch_sum(x, 7), expected);
}

TEST(MaskedWhiten, FusedWhiteningAgreesWithMaskedStats) {
  const MatrixF values = random_matrix(37, 29, 111, -3.0f, 5.0f);
  const MatrixF mask = (random_matrix(37, 29, 112, 0.0f, 1.0f).array() > 0.4f).cast<float>();
  adv_detail::MaskedBatchSum sum(values.rows(), values.cols());
  for (Index i = 0; i < values.rows(); ++i) sum.add_row(values.data() + i * values.cols(), mask.data() + i * mask.cols());
  MatrixF fused;
  adv_detail::masked_whiten(values, mask, sum, adv_detail::MaskedPositions::whitened, fused);
  EXPECT_LT((fused - masked_whiten(values, mask)).cwiseAbs().maxCoeff(), 1e-5);
}

TEST(MaskedWhiten, ReproducesTheGoldenMaskedWhiten) {
  const auto file = golden::GoldenFile::load(std::string(VERL_GOLDEN_DIR) + "/functional.json");
  int checked = 0;
  for (const auto& c : file.cases()) {
    if (c.fn() != "masked_whiten" || c.raises()) continue;
    if (c.args().value("shift_mean", true) == false) continue;
    const MatrixF values = c.input_tensor("values").matrix<float>();
    const MatrixF mask = c.input_tensor("mask").matrix<float>();
    adv_detail::MaskedBatchSum sum(values.rows(), values.cols());
    for (Index i = 0; i < values.rows(); ++i)
      sum.add_row(values.data() + i * values.cols(), mask.data() + i * mask.cols());
    MatrixF whitened;
    adv_detail::masked_whiten(values, mask, sum, adv_detail::MaskedPositions::whitened, whitened);
    golden::CaseCheck check(c);
    check.tensor("result", whitened, c.tolerance());
    EXPECT_TRUE(check.passed()) << c.name() << ": " << check.worst();
    ++checked;
  }
  EXPECT_GT(checked, 0);
}

}  // namespace
