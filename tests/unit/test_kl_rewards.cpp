// KL in the reward: compute_rewards and apply_kl_penalty (rewards, metrics, controller update).
#include <gtest/gtest.h>

#include <string>

#include "verl/algo/kl/rewards.hpp"
#include "../support/error_message.hpp"

using namespace verl;
using namespace verl::algo;
using verl::test_support::message_of;

namespace {

struct Batch {
  MatrixF scores{2, 3};
  MatrixF old_lp{2, 3};
  MatrixF ref_lp{2, 3};
  MatrixF mask{2, 3};
  Batch() {
    scores << 0.0f, 0.0f, 1.0f, 0.5f, 0.0f, 0.0f;
    old_lp << -1.0f, -0.5f, -2.0f, -0.25f, -3.0f, -1.0f;
    ref_lp << -1.5f, -0.5f, -1.0f, -1.25f, -0.5f, -7.0f;
    mask << 1, 1, 1, 1, 0, 0;
  }
};

}  // namespace

TEST(ComputeRewards, SubtractsTheScaledLogRatio) {
  Batch b;
  const MatrixF r = compute_rewards(b.scores, b.old_lp, b.ref_lp, 0.1);
  for (Index i = 0; i < 2; ++i)
    for (Index j = 0; j < 3; ++j)
      EXPECT_EQ(r(i, j), b.scores(i, j) - (b.old_lp(i, j) - b.ref_lp(i, j)) * 0.1f);
  const MatrixF unchanged = compute_rewards(b.scores, b.old_lp, b.ref_lp, 0.0);
  EXPECT_EQ(unchanged, b.scores);
}

TEST(ComputeRewards, ShapeErrorsNameTheArgument) {
  Batch b;
  MatrixF wrong = MatrixF::Zero(2, 2);
  const std::string msg = message_of<InvalidArgument>([&] { (void)compute_rewards(b.scores, b.old_lp, wrong, 0.1); });
  EXPECT_NE(msg.find("ref_log_prob"), std::string::npos) << msg;
}

TEST(ApplyKLPenalty, MatchesVerlsTrainerStep) {
  Batch b;
  AdaptiveKLController ctrl(0.2, 0.5, 100);
  const auto out = apply_kl_penalty(b.scores, b.old_lp, b.ref_lp, b.mask, ctrl, KL{});
  // k1 = old - ref, masked.
  const float beta = 0.2f;
  MatrixF expected(2, 3);
  expected << 0.0f - beta * 0.5f, 0.0f - beta * 0.0f, 1.0f - beta * -1.0f, 0.5f - beta * 1.0f, 0.0f, 0.0f;
  for (Index i = 0; i < 2; ++i)
    for (Index j = 0; j < 3; ++j) EXPECT_FLOAT_EQ(out.token_level_rewards(i, j), expected(i, j)) << i << "," << j;
  // Row means: (0.5 + 0 - 1)/3 and 1/1; batch mean.
  const double current_kl = static_cast<float>(((-0.5f / 3.0f) + 1.0f) / 2.0f);
  EXPECT_NEAR(out.current_kl, current_kl, 1e-7);
  EXPECT_EQ(out.beta, 0.2);
  EXPECT_EQ(out.metrics.at("actor/reward_kl_penalty"), out.current_kl);
  EXPECT_EQ(out.metrics.at("actor/reward_kl_penalty_coeff"), 0.2);
  // The controller saw (current_kl, batch size).
  AdaptiveKLController expected_ctrl(0.2, 0.5, 100);
  expected_ctrl.update(out.current_kl, 2);
  EXPECT_EQ(ctrl.value, expected_ctrl.value);
}

TEST(ApplyKLPenalty, RuntimeNamesMatchThePolicies) {
  Batch b;
  AnyKLController any = FixedKLController(0.05);
  FixedKLController fixed(0.05);
  const auto by_name = apply_kl_penalty(b.scores, b.old_lp, b.ref_lp, b.mask, any, "low_var_kl");
  const auto by_type = apply_kl_penalty(b.scores, b.old_lp, b.ref_lp, b.mask, fixed, LowVarKL{});
  EXPECT_EQ(by_name.token_level_rewards, by_type.token_level_rewards);
  EXPECT_EQ(by_name.current_kl, by_type.current_kl);
  // A straight-through name differs from its stem in the gradient only: the same rewards.
  const auto plus = apply_kl_penalty(b.scores, b.old_lp, b.ref_lp, b.mask, any, "k3+");
  const auto stem = apply_kl_penalty(b.scores, b.old_lp, b.ref_lp, b.mask, any, "k3");
  EXPECT_EQ(plus.token_level_rewards, stem.token_level_rewards);
  EXPECT_EQ(plus.current_kl, stem.current_kl);
  EXPECT_THROW((void)apply_kl_penalty(b.scores, b.old_lp, b.ref_lp, b.mask, any, "nope"), InvalidArgument);
}

TEST(ApplyKLPenalty, RejectsBadMasksAndEmptyBatches) {
  Batch b;
  FixedKLController ctrl;
  b.mask(1, 2) = 0.5f;
  std::string msg = message_of<InvalidArgument>([&] { (void)apply_kl_penalty(b.scores, b.old_lp, b.ref_lp, b.mask, ctrl); });
  EXPECT_NE(msg.find("response_mask"), std::string::npos) << msg;
  EXPECT_NE(msg.find("(1, 2)"), std::string::npos) << msg;

  MatrixF empty(0, 3);
  msg = message_of<InvalidArgument>([&] { (void)apply_kl_penalty(empty, empty, empty, empty, ctrl); });
  EXPECT_NE(msg.find("token_level_scores"), std::string::npos) << msg;

  Batch c;
  MatrixF wrong = MatrixF::Ones(3, 3);
  msg = message_of<InvalidArgument>([&] { (void)apply_kl_penalty(c.scores, c.old_lp, c.ref_lp, wrong, ctrl); });
  EXPECT_NE(msg.find("response_mask"), std::string::npos) << msg;
}
