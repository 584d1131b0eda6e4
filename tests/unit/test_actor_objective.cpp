// The composed actor objective: its value is the sum of its parts and its gradient matches
// central finite differences (vanilla PPO inside the clip range + k3 KL loss + entropy bonus).
#include <gtest/gtest.h>

#include <random>

#include "verl/algo/actor_objective.hpp"
#include "verl/algo/kl/penalty.hpp"
#include "verl/algo/policy_losses.hpp"

using namespace verl;
using namespace verl::algo;

namespace {

struct Batch {
  MatrixF old_lp, lp, adv, mask, ref, entropy;
};

Batch make_batch(int rows, int cols, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> n01(0.f, 1.f);
  std::uniform_real_distribution<float> u(0.f, 1.f);
  Batch b;
  b.old_lp = MatrixF(rows, cols);
  b.lp = MatrixF(rows, cols);
  b.adv = MatrixF(rows, cols);
  b.mask = MatrixF::Zero(rows, cols);
  b.ref = MatrixF(rows, cols);
  b.entropy = MatrixF(rows, cols);
  for (int i = 0; i < rows; ++i) {
    const float a = n01(rng);
    const int len = 1 + static_cast<int>(u(rng) * cols) % cols;
    for (int j = 0; j < cols; ++j) {
      b.old_lp(i, j) = -0.2f - 2.f * u(rng);
      b.lp(i, j) = b.old_lp(i, j) + 0.05f * n01(rng);  // well inside the clip range
      b.ref(i, j) = b.old_lp(i, j) + 0.3f * n01(rng);
      b.adv(i, j) = a;
      b.mask(i, j) = j < len ? 1.f : 0.f;
      b.entropy(i, j) = 0.5f + u(rng);
    }
  }
  return b;
}

using Objective = ActorObjective<VanillaPPO, KLLoss<LowVarKL>, SeqMeanTokenMean>;

float objective_value(const Objective& objective, const Batch& b, const MatrixF& lp, const MatrixF& entropy) {
  ActorObjectiveBatch batch{.policy = {.old_log_prob = b.old_lp, .log_prob = lp, .advantages = b.adv, .response_mask = b.mask},
                            .ref_log_prob = ConstMatrixRefF(b.ref),
                            .entropy = ConstMatrixRefF(entropy)};
  return objective.compute(batch).loss;
}

}  // namespace

TEST(ActorObjective, ValueIsTheSumOfItsParts) {
  const Batch b = make_batch(6, 9, 1);
  Objective objective;
  objective.kl_loss.coef = 0.1;
  objective.entropy_coeff = 0.01;
  ActorObjectiveBatch batch{.policy = {.old_log_prob = b.old_lp, .log_prob = b.lp, .advantages = b.adv, .response_mask = b.mask},
                            .ref_log_prob = ConstMatrixRefF(b.ref),
                            .entropy = ConstMatrixRefF(b.entropy)};
  const auto result = objective.compute(batch);
  const auto pg = compute_policy_loss<SeqMeanTokenMean>(objective.policy_loss, batch.policy);
  const float kl = agg_loss(kl_penalty(b.lp, b.ref, LowVarKL{}), b.mask, LossAggMode::seq_mean_token_mean);
  const float ent = agg_loss(b.entropy, b.mask, LossAggMode::seq_mean_token_mean);
  EXPECT_NEAR(result.loss, pg.pg_loss - 0.01f * ent + 0.1f * kl, 1e-6);
  EXPECT_FLOAT_EQ(static_cast<float>(result.metrics.at("actor/kl_loss")), kl);
  EXPECT_FLOAT_EQ(static_cast<float>(result.metrics.at("actor/entropy")), ent);
  EXPECT_DOUBLE_EQ(result.metrics.at("actor/kl_coef"), 0.1);
  EXPECT_TRUE(result.metrics.contains("actor/pg_clipfrac"));
}

TEST(ActorObjective, GradientMatchesCentralDifferences) {
  const Batch b = make_batch(5, 7, 2);
  Objective objective;
  objective.kl_loss.coef = 0.2;
  objective.entropy_coeff = 0.05;
  ActorObjectiveBatch batch{.policy = {.old_log_prob = b.old_lp, .log_prob = b.lp, .advantages = b.adv, .response_mask = b.mask},
                            .ref_log_prob = ConstMatrixRefF(b.ref),
                            .entropy = ConstMatrixRefF(b.entropy)};
  const auto result = objective.compute(batch);
  const float h = 1e-2f;  // float32 objective: a wide step keeps rounding below the tolerance
  for (Index i = 0; i < b.lp.rows(); ++i)
    for (Index j = 0; j < b.lp.cols(); ++j) {
      MatrixF plus = b.lp, minus = b.lp;
      plus(i, j) += h;
      minus(i, j) -= h;
      const double fd = (objective_value(objective, b, plus, b.entropy) - objective_value(objective, b, minus, b.entropy)) / (2 * h);
      EXPECT_NEAR(result.grad_log_prob(i, j), fd, 2e-4) << "log_prob (" << i << ", " << j << ")";
      MatrixF eplus = b.entropy, eminus = b.entropy;
      eplus(i, j) += h;
      eminus(i, j) -= h;
      const double fde = (objective_value(objective, b, b.lp, eplus) - objective_value(objective, b, b.lp, eminus)) / (2 * h);
      EXPECT_NEAR(result.grad_entropy(i, j), fde, 2e-4) << "entropy (" << i << ", " << j << ")";
    }
}

TEST(ActorObjective, MissingReferenceLogProbsNamesTheArgument) {
  const Batch b = make_batch(2, 3, 3);
  Objective objective;
  ActorObjectiveBatch batch{.policy = {.old_log_prob = b.old_lp, .log_prob = b.lp, .advantages = b.adv, .response_mask = b.mask}};
  try {
    (void)objective.compute(batch);
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("ref_log_prob"), std::string::npos) << e.what();
  }
}

TEST(ActorObjective, EntropyCoefficientWithoutEntropyIsAnError) {
  const Batch b = make_batch(2, 3, 4);
  ActorObjective<VanillaPPO> objective{.entropy_coeff = 0.01};
  ActorObjectiveBatch batch{.policy = {.old_log_prob = b.old_lp, .log_prob = b.lp, .advantages = b.adv, .response_mask = b.mask}};
  EXPECT_THROW((void)objective.compute(batch), InvalidArgument);
}

TEST(ActorObjective, WithoutOptionalTermsEqualsThePolicyLoss) {
  const Batch b = make_batch(4, 6, 5);
  ActorObjective<VanillaPPO> objective;
  ActorObjectiveBatch batch{.policy = {.old_log_prob = b.old_lp, .log_prob = b.lp, .advantages = b.adv, .response_mask = b.mask}};
  const auto result = objective.compute(batch);
  const auto pg = compute_policy_loss<TokenMean>(VanillaPPO{}, batch.policy);
  EXPECT_EQ(result.loss, pg.pg_loss);
  EXPECT_TRUE(result.grad_log_prob.isApprox(pg.grad_log_prob));
  EXPECT_EQ(result.grad_entropy.size(), 0);
}
