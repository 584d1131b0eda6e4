// compute_value_loss: loss and clip fraction, the gradient (central differences in double away
// from kinks; torch's conventions at ties), metrics and argument errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>

#include "verl/algo/loss_aggregation.hpp"
#include "verl/algo/value_loss.hpp"
#include "../support/error_message.hpp"

using namespace verl;
using namespace verl::algo;
using verl::test_support::message_of;

namespace {

constexpr LossAggMode kModes[] = {LossAggMode::token_mean, LossAggMode::seq_mean_token_sum,
                                  LossAggMode::seq_mean_token_mean, LossAggMode::seq_mean_token_sum_norm};

/// A batch whose value predictions stay at least `margin` away from every kink (the clip bounds
/// and the tie between the two squared errors), so central differences are valid.
struct Batch {
  MatrixD vpreds, returns, values, mask;
  Batch(Index rows, Index cols, double clip, unsigned seed) : vpreds(rows, cols), returns(rows, cols), values(rows, cols), mask(rows, cols) {
    std::mt19937 gen(seed);
    std::uniform_real_distribution<double> u(-1.0, 1.0);
    for (Index i = 0; i < rows; ++i)
      for (Index j = 0; j < cols; ++j) {
        values(i, j) = u(gen);
        returns(i, j) = u(gen);
        const double lower = values(i, j) - clip, upper = values(i, j) + clip;
        double v;
        for (;;) {
          v = values(i, j) + 2 * clip * u(gen);
          const double vclip = std::clamp(v, lower, upper);
          const bool near_bound = std::abs(v - upper) < 1e-3 || std::abs(v - lower) < 1e-3;
          // Outside the range the two squared errors differ; a near-tie there is a kink of max.
          const bool near_tie = vclip != v && std::abs(std::abs(v - returns(i, j)) - std::abs(vclip - returns(i, j))) < 1e-3;
          if (!near_bound && !near_tie) break;
        }
        vpreds(i, j) = v;
        mask(i, j) = j < cols - i ? 1.0 : 0.0;  // ragged lengths, one row may be empty
      }
  }
};

}  // namespace

TEST(ValueLoss, SmallExampleByHand) {
  MatrixF vpreds(1, 3), returns(1, 3), values(1, 3), mask(1, 3);
  vpreds << 1.0f, 0.0f, 5.0f;
  returns << 0.0f, 1.0f, 0.0f;
  values << 0.5f, 0.0f, 0.0f;
  mask << 1, 1, 0;
  const auto out = compute_value_loss(vpreds, returns, values, mask, 0.2);
  // Token 0: vclip = 0.7, errors 1 and 0.7 -> unclipped 1 wins. Token 1: vclip = 0, equal errors
  // (1 and 1): a tie, not counted as clipped. Token 2 is masked.
  EXPECT_FLOAT_EQ(out.vf_loss, 0.5f * (1.0f + 1.0f) / 2.0f);
  EXPECT_FLOAT_EQ(out.vf_clipfrac, 0.0f);
  EXPECT_FLOAT_EQ(out.grad_vpreds(0, 0), 0.5f * 0.5f * 2.0f * 1.0f);
  EXPECT_EQ(out.grad_vpreds(0, 2), 0.0f);
  EXPECT_EQ(out.metrics.at("critic/vf_loss"), static_cast<double>(out.vf_loss));
  EXPECT_EQ(out.metrics.at("critic/vf_clipfrac"), static_cast<double>(out.vf_clipfrac));
  EXPECT_NEAR(out.metrics.at("critic/vpred_mean"), 0.5, 1e-6);
}

TEST(ValueLoss, ClippedTermWinsOutsideTheRange) {
  MatrixF vpreds(1, 2), returns(1, 2), values(1, 2), mask = MatrixF::Ones(1, 2);
  vpreds << 2.0f, -0.1f;
  returns << 0.0f, 0.0f;
  values << 3.0f, 0.0f;  // token 0: vclip = 2.8, further from the return than vpred
  const auto out = compute_value_loss(vpreds, returns, values, mask, 0.2);
  const float vclip = 3.0f - 0.2f;
  EXPECT_FLOAT_EQ(out.vf_loss, 0.5f * (vclip * vclip + 0.01f) / 2.0f);
  EXPECT_FLOAT_EQ(out.vf_clipfrac, 0.5f);
  // The clipped term is constant in vpred outside [values - c, values + c]: no gradient.
  EXPECT_EQ(out.grad_vpreds(0, 0), 0.0f);
  EXPECT_FLOAT_EQ(out.grad_vpreds(0, 1), 0.5f * 0.5f * 2.0f * -0.1f);
}

TEST(ValueLoss, TieAtTheClipBoundGivesThreeQuartersOfTheGradient) {
  // vpreds == values + c exactly (in float): torch.min splits the gradient, and then the two
  // squared errors tie in torch.max, so vpred gets 0.5 + 0.5 * 0.5 = 0.75 of 2 (v - R).
  MatrixF vpreds(1, 2), returns(1, 2), values(1, 2), mask = MatrixF::Ones(1, 2);
  values << 1.0f, -1.0f;
  vpreds << 1.0f + 0.25f, -1.0f - 0.25f;
  returns << 0.0f, 0.5f;
  const auto out = compute_value_loss(vpreds, returns, values, mask, 0.25, LossAggMode::seq_mean_token_sum);
  // seq-mean-token-sum, one row: W = 1.
  EXPECT_FLOAT_EQ(out.grad_vpreds(0, 0), 0.5f * 0.75f * 2.0f * 1.25f);
  EXPECT_FLOAT_EQ(out.grad_vpreds(0, 1), 0.5f * 0.75f * 2.0f * (-1.25f - 0.5f));
  EXPECT_EQ(out.vf_clipfrac, 0.0f);  // equal errors are not "clipped"
}

TEST(ValueLoss, GradientMatchesCentralDifferencesInEveryMode) {
  const double clip = 0.2;
  const Batch b(5, 9, clip, 7);
  for (auto mode : kModes) {
    const auto out = compute_value_loss(b.vpreds, b.returns, b.values, b.mask, clip, mode);
    const double h = 1e-6;
    for (Index i = 0; i < b.vpreds.rows(); ++i)
      for (Index j = 0; j < b.vpreds.cols(); ++j) {
        MatrixD plus = b.vpreds, minus = b.vpreds;
        plus(i, j) += h;
        minus(i, j) -= h;
        const double fd = (compute_value_loss(plus, b.returns, b.values, b.mask, clip, mode).vf_loss -
                           compute_value_loss(minus, b.returns, b.values, b.mask, clip, mode).vf_loss) /
                          (2 * h);
        EXPECT_NEAR(out.grad_vpreds(i, j), fd, 1e-7) << to_string(mode) << " at " << i << "," << j;
      }
  }
}

/// With a clip range wider than any error the loss is half the aggregated squared error, in
/// every mode: loss, gradient, clip fraction and vpred_mean against the aggregation's own code.
void expect_wide_clip_is_half_the_aggregated_squared_error(const Batch& b) {
  for (auto mode : kModes) {
    const auto out = compute_value_loss(b.vpreds, b.returns, b.values, b.mask, 1e6, mode);
    const MatrixD sq = (b.vpreds - b.returns).array().square().matrix();
    EXPECT_NEAR(out.vf_loss, 0.5 * agg_loss(sq, b.mask, mode), 1e-12) << to_string(mode);
    EXPECT_EQ(out.vf_clipfrac, 0.0);
    const MatrixD expected_grad =
        (agg_loss_weights<double>(b.mask, mode).array() * (b.vpreds - b.returns).array()).matrix();
    EXPECT_LE((out.grad_vpreds - expected_grad).cwiseAbs().maxCoeff(), 1e-15) << to_string(mode);
    const double vpred_mean = (b.vpreds.array() * b.mask.array()).sum() / (b.mask.sum() + 1e-8);
    EXPECT_NEAR(out.metrics.at("critic/vpred_mean"), vpred_mean, 1e-12);
  }
}

TEST(ValueLoss, WideClipIsHalfTheAggregatedSquaredError) {
  expect_wide_clip_is_half_the_aggregated_squared_error(Batch(4, 6, 0.3, 11));
}

// Large enough for the rows to be split over threads (when the machine has more than one): the
// per-row partial results must still combine into the aggregated loss and the exact gradient.
TEST(ValueLoss, RowsSplitOverThreadsAgreeWithTheAggregation) {
  expect_wide_clip_is_half_the_aggregated_squared_error(Batch(600, 1024, 0.3, 12));
}

TEST(ValueLoss, RuntimeModeNamesAndGlobalBatchInfo) {
  const Batch b(3, 5, 0.2, 3);
  const auto by_enum = compute_value_loss(b.vpreds, b.returns, b.values, b.mask, 0.2, LossAggMode::seq_mean_token_mean);
  const auto by_name = compute_value_loss(b.vpreds, b.returns, b.values, b.mask, 0.2, "seq-mean-token-mean");
  EXPECT_EQ(by_enum.vf_loss, by_name.vf_loss);
  EXPECT_EQ(by_enum.grad_vpreds, by_name.grad_vpreds);
  GlobalBatchInfo info;
  info.dp_size = 4;
  info.global_batch_size = 12;
  const auto scaled = compute_value_loss(b.vpreds, b.returns, b.values, b.mask, 0.2, "seq-mean-token-mean", info);
  // 3 non-empty local rows: dp 4 / 12 = 1/3 of the local seq-mean, i.e. the same here.
  EXPECT_NEAR(scaled.vf_loss, by_enum.vf_loss, 1e-12);
  EXPECT_THROW((void)compute_value_loss(b.vpreds, b.returns, b.values, b.mask, 0.2, "token-max"), InvalidArgument);
  // verl 0.9.1: token-sum is a mode; dp_size > 1 without the global numbers is an error.
  const auto summed = compute_value_loss(b.vpreds, b.returns, b.values, b.mask, 0.2, "token-sum");
  const auto mean = compute_value_loss(b.vpreds, b.returns, b.values, b.mask, 0.2, "token-mean");
  EXPECT_NEAR(summed.vf_loss, mean.vf_loss * b.mask.sum(), 1e-4 * std::abs(summed.vf_loss));
  GlobalBatchInfo local;
  local.dp_size = 2;
  EXPECT_THROW((void)compute_value_loss(b.vpreds, b.returns, b.values, b.mask, 0.2, "token-mean", local), InvalidArgument);
}

TEST(ValueLoss, EmptyMaskGivesNaNLossAndZeroClipFraction) {
  MatrixF v = MatrixF::Ones(2, 3), mask = MatrixF::Zero(2, 3);
  const auto out = compute_value_loss(v, v, v, mask, 0.2);
  EXPECT_TRUE(std::isnan(out.vf_loss));  // verl's 0/0
  EXPECT_EQ(out.vf_clipfrac, 0.0f);      // masked_mean's + 1e-8
  EXPECT_EQ(out.grad_vpreds, MatrixF::Zero(2, 3));
  EXPECT_TRUE(std::isnan(compute_value_loss(v, v, v, mask, 0.2, LossAggMode::seq_mean_token_sum_norm).vf_loss));
  EXPECT_EQ(compute_value_loss(v, v, v, mask, 0.2, LossAggMode::token_sum).vf_loss, 0.0f);
}

TEST(ValueLoss, ArgumentErrorsNameTheArgument) {
  MatrixF v = MatrixF::Zero(2, 3), mask = MatrixF::Ones(2, 3), wrong = MatrixF::Zero(3, 2);
  std::string msg = message_of<InvalidArgument>([&] { (void)compute_value_loss(v, wrong, v, mask, 0.2); });
  EXPECT_NE(msg.find("returns"), std::string::npos) << msg;
  msg = message_of<InvalidArgument>([&] { (void)compute_value_loss(v, v, wrong, mask, 0.2); });
  EXPECT_NE(msg.find("values"), std::string::npos) << msg;
  msg = message_of<InvalidArgument>([&] { (void)compute_value_loss(v, v, v, wrong, 0.2); });
  EXPECT_NE(msg.find("response_mask"), std::string::npos) << msg;
  mask(1, 1) = 2;
  msg = message_of<InvalidArgument>([&] { (void)compute_value_loss(v, v, v, mask, 0.2); });
  EXPECT_NE(msg.find("response_mask"), std::string::npos) << msg;
  EXPECT_NE(msg.find("0/1"), std::string::npos) << msg;
  EXPECT_NE(msg.find("(1, 1)"), std::string::npos) << msg;
}
