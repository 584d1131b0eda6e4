// Safe RLHF numerics: the Lagrange multiplier (worked by hand, against an independent re-derivation,
// its gradient by finite differences, checkpoint state), the KL split between rewards and costs,
// episode costs and the actor's combined advantages.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "verl/algo/safe_rlhf.hpp"
#include "../support/error_message.hpp"

using namespace verl;
using namespace verl::algo;
using verl::test_support::message_of;

namespace {

bool mentions(const std::string& message, const std::string& what) { return message.find(what) != std::string::npos; }

/// An independent reading of the reference's update, in double: the window as the last N entries
/// of the whole cost history, the SGD step written from the Lagrangian's derivative.
struct ReferenceMultiplier {
  LagrangeMultiplierConfig config;
  std::vector<double> history;
  double log_lambda;
  std::int64_t step = 0;

  explicit ReferenceMultiplier(const LagrangeMultiplierConfig& c) : config(c), log_lambda(std::log(c.lambda_init)) {}

  double update(const std::vector<double>& costs) {
    history.insert(history.end(), costs.begin(), costs.end());
    const auto window = std::min<std::size_t>(history.size(), static_cast<std::size_t>(config.episode_cost_window_size));
    double sum = 0;
    for (std::size_t k = history.size() - window; k < history.size(); ++k) sum += history[k];
    const double expected_cost = sum / static_cast<double>(window);
    if (step >= config.lambda_update_delay_steps) {
      // d/dx of -(J - d) e^x is -(J - d) e^x; SGD subtracts lr times it.
      log_lambda = log_lambda + config.lambda_lr * (expected_cost - config.cost_limit) * std::exp(log_lambda);
      if (config.lambda_max && log_lambda > std::log(*config.lambda_max)) log_lambda = std::log(*config.lambda_max);
    }
    ++step;
    return std::exp(log_lambda);
  }
};

MatrixF random_matrix(std::mt19937& rng, Index rows, Index cols, float scale) {
  std::normal_distribution<float> normal(0.0f, scale);
  MatrixF m(rows, cols);
  for (Index i = 0; i < rows; ++i)
    for (Index j = 0; j < cols; ++j) m(i, j) = normal(rng);
  return m;
}

/// Right-padded 0/1 mask with response lengths in [0, cols].
MatrixF random_mask(std::mt19937& rng, Index rows, Index cols) {
  std::uniform_int_distribution<Index> length(0, cols);
  MatrixF m = MatrixF::Zero(rows, cols);
  for (Index i = 0; i < rows; ++i) m.row(i).head(length(rng)).setOnes();
  return m;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// The multiplier
// ---------------------------------------------------------------------------------------------

// By hand, lambda_init = 1 (log lambda = 0), lambda_lr = 0.1, cost limit d = 0.5, lambda_max = 1.5,
// delay 1 update, window of 4 costs. Step: log l <- log l + 0.1 (J - 0.5) l, then min(., log 1.5).
//   step 0: costs {1, 3}    window {1, 3}          J = 2   delayed: log l = 0, l = 1
//   step 1: costs {-2, 2}   window {1, 3, -2, 2}   J = 1   log l = 0 + 0.1 * 0.5 * 1 = 0.05
//                                                          l = e^0.05 = 1.0512710963760241
//   step 2: costs {-6, -6}  window {-2, 2, -6, -6} J = -3  log l = 0.05 + 0.1 * (-3.5) * 1.0512710963760241
//                                                                = 0.05 - 0.36794488373160845 = -0.31794488373160845
//                                                          l = 0.7276428922703414
//   step 3: costs {10, 10}  window {-6, -6, 10, 10} J = 2  log l = -0.31794488373160845 + 0.15 * 0.7276428922703414
//                                                                = -0.20879844989105723, l = 0.811558788923088
//   step 4: costs {10, 10}  window {10, 10, 10, 10} J = 10 log l = -0.2088 + 0.95 * 0.8116 = 0.5622 > log 1.5
//                                                          clamped: l = 1.5
TEST(LagrangeMultiplier, WorkedByHand) {
  LagrangeMultiplier multiplier({.cost_limit = 0.5, .lambda_init = 1.0, .lambda_lr = 0.1, .lambda_max = 1.5,
                                 .lambda_update_delay_steps = 1, .episode_cost_window_size = 4});
  EXPECT_EQ(multiplier.value(), 1.0);

  auto step = multiplier.update(std::vector<double>{1, 3});
  EXPECT_FALSE(step.updated);
  EXPECT_EQ(step.episode_cost, 2.0);
  EXPECT_EQ(step.lambda, 1.0);
  EXPECT_EQ(step.loss, -1.5);  // -(2 - 0.5) * 1
  EXPECT_EQ(step.metrics.at("safe_rlhf/lambda_updated"), 0.0);

  step = multiplier.update(std::vector<double>{-2, 2});
  EXPECT_TRUE(step.updated);
  EXPECT_EQ(step.episode_cost, 1.0);
  EXPECT_NEAR(multiplier.log_value(), 0.05, 1e-15);
  EXPECT_NEAR(step.lambda, 1.0512710963760241, 1e-15);

  step = multiplier.update(std::vector<double>{-6, -6});
  EXPECT_EQ(step.episode_cost, -3.0);
  EXPECT_NEAR(multiplier.log_value(), -0.31794488373160845, 1e-15);
  EXPECT_NEAR(step.lambda, 0.7276428922703414, 1e-15);
  EXPECT_EQ(step.metrics.at("safe_rlhf/cost_violation"), -3.5);
  EXPECT_NEAR(step.metrics.at("safe_rlhf/lambda_loss"), 3.5 * 1.0512710963760241, 1e-14);

  step = multiplier.update(std::vector<double>{10, 10});
  EXPECT_EQ(step.episode_cost, 2.0);
  EXPECT_NEAR(step.lambda, 0.811558788923088, 1e-15);

  step = multiplier.update(std::vector<double>{10, 10});
  EXPECT_EQ(step.episode_cost, 10.0);
  EXPECT_NEAR(step.lambda, 1.5, 1e-15);
  EXPECT_EQ(multiplier.log_value(), std::log(1.5));
  EXPECT_EQ(step.metrics.at("safe_rlhf/lambda"), step.lambda);
  EXPECT_EQ(step.metrics.at("safe_rlhf/episode_cost"), 10.0);
  EXPECT_EQ(multiplier.steps(), 5);
}

TEST(LagrangeMultiplier, FallsBelowOneWhenTheConstraintHoldsAndNeverReachesZero) {
  LagrangeMultiplier multiplier({.cost_limit = 0.0, .lambda_init = 1.0, .lambda_lr = 1.0});
  double previous = multiplier.value();
  for (int k = 0; k < 50; ++k) {
    const double lambda = multiplier.update(std::vector<double>{-1.0}).lambda;
    EXPECT_LT(lambda, previous);
    EXPECT_GT(lambda, 0.0);
    previous = lambda;
  }
}

TEST(LagrangeMultiplier, MatchesAnIndependentRederivationOnRandomCosts) {
  std::mt19937 rng(25);
  std::normal_distribution<double> cost(0.3, 2.0);
  std::uniform_real_distribution<double> limit(-0.5, 1.0);  // near the costs' mean: lambda stays in range
  std::uniform_int_distribution<int> batch(1, 9);
  for (int trial = 0; trial < 20; ++trial) {
    LagrangeMultiplierConfig config{.cost_limit = limit(rng), .lambda_init = 0.2 + 0.1 * trial,
                                    .lambda_lr = 0.005 * (1 + trial % 7),
                                    .lambda_update_delay_steps = trial % 4,
                                    .episode_cost_window_size = 1 + trial * 3};
    if (trial % 2 == 0) config.lambda_max = config.lambda_init * 2.5;
    LagrangeMultiplier multiplier(config);
    ReferenceMultiplier reference(config);
    for (int s = 0; s < 30; ++s) {
      std::vector<double> costs(static_cast<std::size_t>(batch(rng)));
      for (double& c : costs) c = cost(rng);
      const double lambda = multiplier.update(costs).lambda;
      const double expected = reference.update(costs);
      ASSERT_NEAR(lambda, expected, 1e-12 * std::max(1.0, expected)) << "trial " << trial << " step " << s;
      if (config.lambda_max) {
        ASSERT_LE(lambda, *config.lambda_max * (1 + 1e-15));
      }
    }
  }
}

TEST(LagrangeMultiplier, RefusesAStepBeyondDoubleRangeAndKeepsItsState) {
  // log l = log 100 + 10 * (1000 - 0) * 100 = 10^6 + 4.6: exp overflows.
  LagrangeMultiplier multiplier({.lambda_init = 100.0, .lambda_lr = 10.0});
  const LagrangeMultiplierState before = multiplier.state();
  const std::string msg = message_of<InvalidArgument>([&] { multiplier.update(std::vector<double>{1000.0}); });
  EXPECT_TRUE(mentions(msg, "lambda_lr") && mentions(msg, "lambda_max")) << msg;
  EXPECT_EQ(multiplier.log_value(), before.log_lambda);
  EXPECT_EQ(multiplier.steps(), 0);
  // With a bound the same step is clamped.
  LagrangeMultiplier bounded({.lambda_init = 100.0, .lambda_lr = 10.0, .lambda_max = 200.0});
  EXPECT_DOUBLE_EQ(bounded.update(std::vector<double>{1000.0}).lambda, 200.0);
}

TEST(LagrangeMultiplier, RecordsFloatCostsFromAnyRange) {
  LagrangeMultiplier multiplier({.episode_cost_window_size = 3});
  VectorF costs(4);
  costs << 1.0f, 2.0f, 4.0f, 8.0f;
  multiplier.record_episode_costs(costs);
  EXPECT_EQ(multiplier.expected_episode_cost(), (2.0 + 4.0 + 8.0) / 3.0);  // the oldest fell out
  EXPECT_EQ(multiplier.state().episode_cost_window, (std::vector<double>{2, 4, 8}));
}

TEST(LagrangeMultiplier, ZeroLearningRateKeepsLambda) {
  LagrangeMultiplier multiplier({.lambda_init = 0.7, .lambda_lr = 0.0});
  for (int k = 0; k < 3; ++k) EXPECT_EQ(multiplier.update(std::vector<double>{5.0}).lambda, multiplier.value());
  EXPECT_EQ(multiplier.log_value(), std::log(0.7));
}

// The step is SGD on the Lagrangian: its gradient in log lambda against central differences, and
// the step equal to -lr times that gradient.
TEST(LagrangianLoss, GradientMatchesFiniteDifferences) {
  const double h = 1e-6;
  for (const double log_lambda : {-3.0, -0.5, 0.0, 0.4, 2.0}) {
    for (const double cost : {-2.0, 0.25, 3.0}) {
      const double limit = 0.5;
      const auto loss = lagrangian_loss(log_lambda, cost, limit);
      EXPECT_NEAR(loss.value, -(cost - limit) * std::exp(log_lambda), 1e-15 * std::exp(log_lambda) * 4);
      const double numeric =
          (lagrangian_loss(log_lambda + h, cost, limit).value - lagrangian_loss(log_lambda - h, cost, limit).value) /
          (2 * h);
      EXPECT_NEAR(loss.grad_log_lambda, numeric, 1e-7 * std::max(1.0, std::abs(numeric)));

      LagrangeMultiplier multiplier({.cost_limit = limit, .lambda_init = std::exp(log_lambda), .lambda_lr = 0.05});
      multiplier.update(std::vector<double>{cost});
      EXPECT_NEAR(multiplier.log_value(), std::log(std::exp(log_lambda)) - 0.05 * numeric, 1e-9);
    }
  }
}

TEST(LagrangeMultiplier, StateRoundTripsThroughACheckpoint) {
  const LagrangeMultiplierConfig config{.cost_limit = 0.1, .lambda_init = 0.5, .lambda_lr = 0.2, .lambda_max = 3.0,
                                        .lambda_update_delay_steps = 2, .episode_cost_window_size = 5};
  LagrangeMultiplier original(config);
  for (int k = 0; k < 4; ++k) original.update(std::vector<double>{0.1 * k, 1.0 - k, 0.75});
  const LagrangeMultiplierState saved = original.state();
  EXPECT_EQ(saved.steps, 4);
  EXPECT_EQ(saved.episode_cost_window.size(), 5u);

  LagrangeMultiplier resumed(config);
  EXPECT_NE(resumed.state(), saved);
  resumed.restore(saved);
  EXPECT_EQ(resumed.state(), saved);
  EXPECT_EQ(resumed.value(), original.value());
  for (int k = 0; k < 3; ++k) {
    const std::vector<double> costs{2.0 * k, -0.5};
    EXPECT_EQ(resumed.update(costs).lambda, original.update(costs).lambda);
  }
  EXPECT_EQ(resumed.state(), original.state());
}

TEST(LagrangeMultiplier, BadInputsAreRefusedByName) {
  using Config = LagrangeMultiplierConfig;
  EXPECT_TRUE(mentions(message_of<InvalidArgument>([] { LagrangeMultiplier(Config{.lambda_init = 0.0}); }),
                       "lambda_init"));
  EXPECT_TRUE(mentions(message_of<InvalidArgument>([] { LagrangeMultiplier(Config{.lambda_init = NAN}); }),
                       "lambda_init"));
  EXPECT_TRUE(mentions(message_of<InvalidArgument>([] { LagrangeMultiplier(Config{.lambda_lr = -0.1}); }),
                       "lambda_lr"));
  EXPECT_TRUE(mentions(message_of<InvalidArgument>([] { LagrangeMultiplier(Config{.cost_limit = INFINITY}); }),
                       "cost_limit"));
  EXPECT_TRUE(mentions(message_of<InvalidArgument>([] { LagrangeMultiplier(Config{.lambda_max = 0.0}); }),
                       "lambda_max"));
  const std::string above_max =
      message_of<InvalidArgument>([] { LagrangeMultiplier(Config{.lambda_init = 2.0, .lambda_max = 1.0}); });
  EXPECT_TRUE(mentions(above_max, "lambda_init") && mentions(above_max, "lambda_max")) << above_max;
  EXPECT_TRUE(mentions(
      message_of<InvalidArgument>([] { LagrangeMultiplier(Config{.lambda_update_delay_steps = -1}); }),
      "lambda_update_delay_steps"));
  EXPECT_TRUE(mentions(message_of<InvalidArgument>([] { LagrangeMultiplier(Config{.episode_cost_window_size = 0}); }),
                       "episode_cost_window_size"));

  LagrangeMultiplier multiplier;
  const std::string empty = message_of<InvalidArgument>([&] { multiplier.update(); });
  EXPECT_TRUE(mentions(empty, "episode_costs")) << empty;
  multiplier.record_episode_costs(std::vector<double>{1.0});
  const std::string nan_cost =
      message_of<InvalidArgument>([&] { multiplier.update(std::vector<double>{2.0, NAN}); });
  EXPECT_TRUE(mentions(nan_cost, "episode_costs") && mentions(nan_cost, "index 1")) << nan_cost;
  // All-or-nothing: the finite cost before the NaN was not recorded, and nothing stepped.
  EXPECT_EQ(multiplier.state().episode_cost_window, std::vector<double>{1.0});
  EXPECT_EQ(multiplier.steps(), 0);

  LagrangeMultiplier bounded({.lambda_max = 2.0, .episode_cost_window_size = 2});
  LagrangeMultiplierState state;
  state.log_lambda = std::log(3.0);
  EXPECT_TRUE(mentions(message_of<InvalidArgument>([&] { bounded.restore(state); }), "state.log_lambda"));
  state.log_lambda = NAN;
  EXPECT_TRUE(mentions(message_of<InvalidArgument>([&] { bounded.restore(state); }), "state.log_lambda"));
  state.log_lambda = 0;
  state.episode_cost_window = {1, 2, 3};
  EXPECT_TRUE(mentions(message_of<InvalidArgument>([&] { bounded.restore(state); }), "state.episode_cost_window"));
  state.episode_cost_window = {1, INFINITY};
  EXPECT_TRUE(mentions(message_of<InvalidArgument>([&] { bounded.restore(state); }), "state.episode_cost_window"));
  state.episode_cost_window = {};
  state.steps = -1;
  EXPECT_TRUE(mentions(message_of<InvalidArgument>([&] { bounded.restore(state); }), "state.steps"));
}

// ---------------------------------------------------------------------------------------------
// The actor's advantages
// ---------------------------------------------------------------------------------------------

// By hand, lambda = 0.25: A = (A_r - 0.25 A_c) / 1.25, 0 at padding.
//   row 0: (1 - 0.25*4)/1.25 = 0      (2 + 0.25*2)/1.25 = 2     (3 - 0)/1.25 = 2.4
//   row 1: (-1 - 0.25*2)/1.25 = -1.2  (0.5 - 0.25*2)/1.25 = 0   padding: 0 (A_c = NaN there is ignored)
// and lambda = 3: A = (A_r - 3 A_c) / 4.
//   row 0: (1 - 12)/4 = -2.75         (2 + 6)/4 = 2             3/4 = 0.75
//   row 1: (-1 - 6)/4 = -1.75         (0.5 - 6)/4 = -1.375      padding: 0
TEST(CombineRewardAndCostAdvantages, WorkedByHand) {
  MatrixF reward(2, 3), cost(2, 3), mask(2, 3);
  reward << 1, 2, 3, -1, 0.5f, 4;
  cost << 4, -2, 0, 2, 2, NAN;
  mask << 1, 1, 1, 1, 1, 0;
  MatrixF expected(2, 3);
  expected << 0, 2, 2.4f, -1.2f, 0, 0;
  const MatrixF quarter = combine_reward_and_cost_advantages(reward, cost, mask, 0.25);
  for (Index i = 0; i < 2; ++i)
    for (Index j = 0; j < 3; ++j) EXPECT_FLOAT_EQ(quarter(i, j), expected(i, j)) << i << "," << j;
  expected << -2.75f, 2, 0.75f, -1.75f, -1.375f, 0;
  EXPECT_EQ(combine_reward_and_cost_advantages(reward, cost, mask, 3.0), expected);  // exact in binary
  // lambda = 0: the reward advantages alone.
  MatrixF masked_reward = reward;
  masked_reward(1, 2) = 0;
  EXPECT_EQ(combine_reward_and_cost_advantages(reward, cost, mask, 0.0), masked_reward);
}

TEST(CombineRewardAndCostAdvantages, MatchesADoubleRederivationOnRandomBatches) {
  std::mt19937 rng(2310);
  std::uniform_real_distribution<double> lambda_draw(0.0, 8.0);
  for (int trial = 0; trial < 10; ++trial) {
    const Index rows = 1 + trial, cols = 3 + 5 * trial;
    const MatrixF reward = random_matrix(rng, rows, cols, 2.0f);
    const MatrixF cost = random_matrix(rng, rows, cols, 3.0f);
    const MatrixF mask = random_mask(rng, rows, cols);
    const double lambda = lambda_draw(rng);
    const MatrixF combined = combine_reward_and_cost_advantages(reward, cost, mask, lambda);
    for (Index i = 0; i < rows; ++i) {
      for (Index j = 0; j < cols; ++j) {
        const double expected =
            mask(i, j) == 0 ? 0.0 : (double(reward(i, j)) - lambda * double(cost(i, j))) / (1.0 + lambda);
        ASSERT_NEAR(combined(i, j), expected, 1e-6 * (1.0 + std::abs(expected))) << trial << ": " << i << "," << j;
      }
    }
  }
}

TEST(CombineRewardAndCostAdvantages, BadInputsAreRefusedByName) {
  const MatrixF a = MatrixF::Ones(2, 3), mask = MatrixF::Ones(2, 3);
  const MatrixF narrow = MatrixF::Ones(2, 2);
  MatrixF not_binary = mask;
  not_binary(1, 2) = 0.5f;
  std::string msg = message_of<InvalidArgument>([&] { (void)combine_reward_and_cost_advantages(a, narrow, mask, 1.0); });
  EXPECT_TRUE(mentions(msg, "cost_advantages") && mentions(msg, "(2, 3)") && mentions(msg, "(2, 2)")) << msg;
  msg = message_of<InvalidArgument>([&] { (void)combine_reward_and_cost_advantages(a, a, narrow, 1.0); });
  EXPECT_TRUE(mentions(msg, "response_mask")) << msg;
  msg = message_of<InvalidArgument>([&] { (void)combine_reward_and_cost_advantages(a, a, not_binary, 1.0); });
  EXPECT_TRUE(mentions(msg, "response_mask") && mentions(msg, "0.5")) << msg;
  for (const double lambda : {-0.1, double(NAN), double(INFINITY)}) {
    msg = message_of<InvalidArgument>([&] { (void)combine_reward_and_cost_advantages(a, a, mask, lambda); });
    EXPECT_TRUE(mentions(msg, "lambda")) << msg;
  }
}

// ---------------------------------------------------------------------------------------------
// The KL split and the episode costs
// ---------------------------------------------------------------------------------------------

// By hand, beta = 0.1, clip 50, k1 = old - ref:
//   row 0 (3 tokens): k1 = {0.5, 0, -1}; reward score 1 and cost score -2 on the last token
//     rewards = {-0.05, 0, 1 + 0.1} = {-0.05, 0, 1.1}; costs = {0.05, 0, -2 - 0.1} = {0.05, 0, -2.1}
//   row 1 (1 token): k1 = {1}; scores 0.5 and 3 on it; padding gives 0 whatever the log-probs
//     rewards = {0.4, 0, 0}; costs = {3.1, 0, 0}
//   kl_divergence = ((0.5 + 0 - 1) + 1) / 2 = 0.25; reward_with_kl_penalty = (1.05 + 0.4) / 2 = 0.725;
//   cost_with_kl_penalty = (-2.05 + 3.1) / 2 = 0.525; current_kl = ((-0.5/3) + 1) / 2
TEST(KLPenalizedRewardsAndCosts, WorkedByHand) {
  MatrixF scores(2, 3), cost_scores(2, 3), old_lp(2, 3), ref_lp(2, 3), mask(2, 3);
  scores << 0, 0, 1, 0.5f, 0, 0;
  cost_scores << 0, 0, -2, 3, 0, 0;
  old_lp << -1.0f, -0.5f, -2.0f, -0.25f, -3.0f, -1.0f;
  ref_lp << -1.5f, -0.5f, -1.0f, -1.25f, -0.5f, -7.0f;
  mask << 1, 1, 1, 1, 0, 0;
  const auto out = kl_penalized_rewards_and_costs(scores, cost_scores, old_lp, ref_lp, mask, 0.1);
  MatrixF rewards(2, 3), costs(2, 3);
  rewards << -0.05f, 0, 1.1f, 0.4f, 0, 0;
  costs << 0.05f, 0, -2.1f, 3.1f, 0, 0;
  for (Index i = 0; i < 2; ++i) {
    for (Index j = 0; j < 3; ++j) {
      EXPECT_FLOAT_EQ(out.token_level_rewards(i, j), rewards(i, j)) << i << "," << j;
      EXPECT_FLOAT_EQ(out.token_level_costs(i, j), costs(i, j)) << i << "," << j;
    }
  }
  EXPECT_NEAR(out.metrics.at("safe_rlhf/kl_divergence"), 0.25, 1e-7);
  EXPECT_NEAR(out.metrics.at("safe_rlhf/reward_with_kl_penalty"), 0.725, 1e-7);
  EXPECT_NEAR(out.metrics.at("safe_rlhf/cost_with_kl_penalty"), 0.525, 1e-7);
  EXPECT_NEAR(out.current_kl, (-0.5 / 3 + 1) / 2, 1e-7);
  EXPECT_EQ(out.metrics.at("actor/reward_kl_penalty"), out.current_kl);
  EXPECT_EQ(out.metrics.at("actor/reward_kl_penalty_coeff"), 0.1);

  // The KL shares cancel in reward + cost (before any clamp): scores + cost_scores.
  for (Index j = 0; j < 3; ++j)
    EXPECT_FLOAT_EQ(out.token_level_rewards(0, j) + out.token_level_costs(0, j), scores(0, j) + cost_scores(0, j));

  // Episode costs are the cost scores alone: -2 and 3.
  const VectorD episode = episode_costs(cost_scores, mask);
  EXPECT_EQ(episode[0], -2.0);
  EXPECT_EQ(episode[1], 3.0);
}

TEST(KLPenalizedRewardsAndCosts, ClampsToTheScoreRangeOnlyWhenAsked) {
  MatrixF scores(1, 2), cost_scores(1, 2), old_lp(1, 2), ref_lp(1, 2), mask(1, 2);
  scores << 0, 80;
  cost_scores << 0, -70;
  old_lp << -1, -1;
  ref_lp << -41, -1;  // k1 = 40 on the first token: beta * kl = 4 with beta 0.1
  mask << 1, 1;
  const auto clipped = kl_penalized_rewards_and_costs(scores, cost_scores, old_lp, ref_lp, mask, 0.1, 3.0);
  EXPECT_EQ(clipped.token_level_rewards(0, 0), -3.0f);
  EXPECT_EQ(clipped.token_level_rewards(0, 1), 3.0f);
  EXPECT_EQ(clipped.token_level_costs(0, 0), 3.0f);
  EXPECT_EQ(clipped.token_level_costs(0, 1), -3.0f);
  const auto unclipped = kl_penalized_rewards_and_costs(scores, cost_scores, old_lp, ref_lp, mask, 0.1, std::nullopt);
  EXPECT_FLOAT_EQ(unclipped.token_level_rewards(0, 0), -4.0f);
  EXPECT_EQ(unclipped.token_level_rewards(0, 1), 80.0f);
  EXPECT_FLOAT_EQ(unclipped.token_level_costs(0, 0), 4.0f);
  EXPECT_EQ(unclipped.token_level_costs(0, 1), -70.0f);
  // The default range, 50: the reward of 80 becomes 50.
  EXPECT_EQ(kl_penalized_rewards_and_costs(scores, cost_scores, old_lp, ref_lp, mask, 0.1).token_level_rewards(0, 1),
            50.0f);
}

TEST(KLPenalizedRewardsAndCosts, MatchesADoubleRederivationOnRandomBatches) {
  std::mt19937 rng(12773);
  for (int trial = 0; trial < 8; ++trial) {
    const Index rows = 2 + trial, cols = 4 + 3 * trial;
    const MatrixF scores = random_matrix(rng, rows, cols, 3.0f);
    const MatrixF cost_scores = random_matrix(rng, rows, cols, 3.0f);
    const MatrixF old_lp = random_matrix(rng, rows, cols, 1.0f).array() - 2.0f;
    const MatrixF ref_lp = random_matrix(rng, rows, cols, 1.0f).array() - 2.0f;
    const MatrixF mask = random_mask(rng, rows, cols);
    const double beta = 0.05 * (trial + 1), clip = 4.0;
    const auto out = kl_penalized_rewards_and_costs(scores, cost_scores, old_lp, ref_lp, mask, beta, clip, LowVarKL{});
    for (Index i = 0; i < rows; ++i) {
      for (Index j = 0; j < cols; ++j) {
        double kl = 0;
        if (mask(i, j) != 0) {  // k3 = exp(x) - x - 1 with x = ref - old, both clamps of verl's low_var_kl
          const double x = std::clamp(double(ref_lp(i, j)) - double(old_lp(i, j)), -20.0, 20.0);
          kl = std::clamp(std::exp(x) - x - 1.0, -10.0, 10.0);
        }
        const double reward = std::clamp(double(scores(i, j)) - beta * kl, -clip, clip);
        const double cost = std::clamp(double(cost_scores(i, j)) + beta * kl, -clip, clip);
        ASSERT_NEAR(out.token_level_rewards(i, j), reward, 2e-6 * (1 + std::abs(reward))) << i << "," << j;
        ASSERT_NEAR(out.token_level_costs(i, j), cost, 2e-6 * (1 + std::abs(cost))) << i << "," << j;
      }
    }
  }
}

TEST(KLPenalizedRewardsAndCosts, BadInputsAreRefusedByName) {
  const MatrixF m = MatrixF::Zero(2, 3), mask = MatrixF::Ones(2, 3), narrow = MatrixF::Zero(2, 2);
  std::string msg =
      message_of<InvalidArgument>([&] { (void)kl_penalized_rewards_and_costs(m, narrow, m, m, mask, 0.1); });
  EXPECT_TRUE(mentions(msg, "token_level_cost_scores") && mentions(msg, "(2, 2)")) << msg;
  msg = message_of<InvalidArgument>([&] { (void)kl_penalized_rewards_and_costs(m, m, narrow, m, mask, 0.1); });
  EXPECT_TRUE(mentions(msg, "old_log_probs")) << msg;
  msg = message_of<InvalidArgument>([&] { (void)kl_penalized_rewards_and_costs(m, m, m, narrow, mask, 0.1); });
  EXPECT_TRUE(mentions(msg, "ref_log_prob")) << msg;
  msg = message_of<InvalidArgument>([&] { (void)kl_penalized_rewards_and_costs(m, m, m, m, narrow, 0.1); });
  EXPECT_TRUE(mentions(msg, "response_mask")) << msg;
  msg = message_of<InvalidArgument>([&] { (void)kl_penalized_rewards_and_costs(m, m, m, m, mask, NAN); });
  EXPECT_TRUE(mentions(msg, "kl_coef")) << msg;
  msg = message_of<InvalidArgument>([&] { (void)kl_penalized_rewards_and_costs(m, m, m, m, mask, 0.1, 0.0); });
  EXPECT_TRUE(mentions(msg, "clip_range_score")) << msg;
  const MatrixF empty(0, 3);
  msg = message_of<InvalidArgument>([&] { (void)kl_penalized_rewards_and_costs(empty, empty, empty, empty, empty, 0.1); });
  EXPECT_TRUE(mentions(msg, "token_level_scores")) << msg;
  MatrixF not_binary = mask;
  not_binary(0, 1) = 2;
  msg = message_of<InvalidArgument>([&] { (void)kl_penalized_rewards_and_costs(m, m, m, m, not_binary, 0.1); });
  EXPECT_TRUE(mentions(msg, "response_mask")) << msg;
  msg = message_of<InvalidArgument>([&] { (void)episode_costs(m, narrow); });
  EXPECT_TRUE(mentions(msg, "response_mask")) << msg;
  msg = message_of<InvalidArgument>([&] { (void)episode_costs(m, not_binary); });
  EXPECT_TRUE(mentions(msg, "response_mask")) << msg;
}

// One step of a controller program on a small batch, the pieces chained as the reference chains
// them: the KL split, the episode costs into the multiplier, then the combined advantages with the
// multiplier after its step. (GAE sits between the split and the combination; here the shaped
// signals stand in for the advantages.)
TEST(SafeRLHFStep, ChainsThePiecesInTheReferencesOrder) {
  MatrixF scores(2, 2), cost_scores(2, 2), old_lp(2, 2), ref_lp(2, 2), mask(2, 2);
  scores << 0, 2, 1, 0;
  cost_scores << 0, 1, 3, 0;
  old_lp << -1, -1, -1, -1;
  ref_lp << -1, -1, -1, -1;  // no KL: the signals are the scores
  mask << 1, 1, 1, 0;
  const auto signals = kl_penalized_rewards_and_costs(scores, cost_scores, old_lp, ref_lp, mask, 0.2);
  LagrangeMultiplier multiplier({.cost_limit = 1.0, .lambda_init = 1.0, .lambda_lr = 0.5});
  const auto step = multiplier.update(episode_costs(cost_scores, mask));  // J = (1 + 3) / 2 = 2
  EXPECT_EQ(step.episode_cost, 2.0);
  EXPECT_DOUBLE_EQ(step.lambda, std::exp(0.5));  // log l = 0 + 0.5 * (2 - 1) * 1
  const MatrixF actor = combine_reward_and_cost_advantages(signals.token_level_rewards, signals.token_level_costs,
                                                           mask, step.lambda);
  const double l = step.lambda;
  EXPECT_NEAR(actor(0, 1), (2 - l * 1) / (1 + l), 1e-6);
  EXPECT_NEAR(actor(1, 0), (1 - l * 3) / (1 + l), 1e-6);
  EXPECT_EQ(actor(1, 1), 0.0f);
}
