#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>

#include "verl/algo/loss_aggregation.hpp"
#include "../support/error_message.hpp"

using namespace verl;
using namespace verl::algo;
using verl::test_support::message_of;

TEST(LossAggregation, UnknownModeNamesTheArgument) {
  try {
    (void)parse_loss_agg_mode("token-max");
    FAIL() << "expected an exception";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("loss_agg_mode"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("token-max"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("token-sum"), std::string::npos);  // listed among the valid ones
  }
}

TEST(LossAggregation, MismatchedMaskShapeIsAnError) {
  MatrixF loss = MatrixF::Ones(2, 3);
  MatrixF mask = MatrixF::Ones(3, 2);
  EXPECT_THROW((void)agg_loss(loss, mask, LossAggMode::token_mean), InvalidArgument);
}

// ---- values, gradients and edge cases --------------------------------------------------------

namespace {

constexpr LossAggMode kModes[] = {LossAggMode::token_mean, LossAggMode::token_sum, LossAggMode::seq_mean_token_sum,
                                  LossAggMode::seq_mean_token_mean, LossAggMode::seq_mean_token_sum_norm};

/// rows x cols loss in double with a ragged mask (row i has cols - i valid tokens, so the last
/// rows may be empty) and garbage on the padding.
struct Ragged {
  MatrixD loss;
  MatrixD mask;
  Ragged(Index rows, Index cols, unsigned seed) : loss(rows, cols), mask(rows, cols) {
    std::mt19937 gen(seed);
    std::uniform_real_distribution<double> u(-1.0, 1.0);
    for (Index i = 0; i < rows; ++i)
      for (Index j = 0; j < cols; ++j) {
        mask(i, j) = j < cols - i ? 1.0 : 0.0;
        loss(i, j) = mask(i, j) != 0 ? u(gen) : 1e4 * u(gen);
      }
  }
};

}  // namespace

TEST(LossAggregation, ModesByHand) {
  MatrixF loss(2, 3), mask(2, 3);
  loss << 1, 2, 3, 4, 5, 6;
  mask << 1, 1, 0, 1, 0, 0;
  // Valid: row 0 {1, 2}, row 1 {4}.
  EXPECT_FLOAT_EQ(agg_loss(loss, mask, LossAggMode::token_mean), 7.0f / 3.0f);
  EXPECT_FLOAT_EQ(agg_loss(loss, mask, LossAggMode::seq_mean_token_sum), (3.0f + 4.0f) / 2.0f);
  EXPECT_FLOAT_EQ(agg_loss(loss, mask, LossAggMode::seq_mean_token_mean), (1.5f + 4.0f) / 2.0f);
  EXPECT_FLOAT_EQ(agg_loss(loss, mask, LossAggMode::token_sum), 7.0f);
  // verl 0.9.1: the seq-mean-token-sum value over loss_scale_factor (default T = 3).
  EXPECT_FLOAT_EQ(agg_loss(loss, mask, LossAggMode::seq_mean_token_sum_norm), (3.0f + 4.0f) / 2.0f / 3.0f);
  EXPECT_FLOAT_EQ(agg_loss<TokenMean>(loss, mask), agg_loss(loss, mask, LossAggMode::token_mean));
  EXPECT_FLOAT_EQ(agg_loss<SeqMeanTokenMean>(loss, mask), agg_loss(loss, mask, LossAggMode::seq_mean_token_mean));
}

TEST(LossAggregation, GlobalBatchInfoAsVerl) {
  MatrixF loss(2, 3), mask(2, 3);
  loss << 1, 2, 3, 4, 5, 6;
  mask << 1, 1, 0, 1, 0, 0;
  GlobalBatchInfo info;
  info.dp_size = 4;
  info.batch_num_tokens = 12;
  info.global_batch_size = 8;
  info.loss_scale_factor = 7;
  EXPECT_FLOAT_EQ(agg_loss(loss, mask, LossAggMode::token_mean, info), 7.0f / 12.0f * 4.0f);
  EXPECT_FLOAT_EQ(agg_loss(loss, mask, LossAggMode::seq_mean_token_sum, info), 7.0f / 8.0f * 4.0f);
  EXPECT_FLOAT_EQ(agg_loss(loss, mask, LossAggMode::seq_mean_token_mean, info), 5.5f / 8.0f * 4.0f);
  EXPECT_FLOAT_EQ(agg_loss(loss, mask, LossAggMode::token_sum, info), 7.0f * 4.0f);
  EXPECT_FLOAT_EQ(agg_loss(loss, mask, LossAggMode::seq_mean_token_sum_norm, info), 7.0f / 8.0f * 4.0f / 7.0f);
  // With several data-parallel ranks the global numbers are required (verl 0.9.1 raises).
  GlobalBatchInfo local;
  local.dp_size = 2;
  for (const auto mode : {LossAggMode::token_mean, LossAggMode::seq_mean_token_sum, LossAggMode::seq_mean_token_mean,
                          LossAggMode::seq_mean_token_sum_norm}) {
    const std::string message = message_of<InvalidArgument>([&] { (void)agg_loss(loss, mask, mode, local); });
    EXPECT_NE(message.find(mode == LossAggMode::token_mean ? "batch_num_tokens" : "global_batch_size"), std::string::npos)
        << message;
    EXPECT_THROW((void)agg_loss_weights(mask, mode, local), InvalidArgument);
  }
  EXPECT_FLOAT_EQ(agg_loss(loss, mask, LossAggMode::token_sum, local), 14.0f);  // token-sum never needs them
}

TEST(LossAggregation, WeightsAreTheExactDerivative) {
  // agg_loss is linear in loss_mat, so central differences are exact up to rounding.
  const Ragged b(6, 9, 5);
  GlobalBatchInfo info;
  for (int variant = 0; variant < 2; ++variant) {
    if (variant == 1) {
      info.dp_size = 2;
      info.batch_num_tokens = 101;
      info.global_batch_size = 17;
      info.loss_scale_factor = 4096;
    }
    for (auto mode : kModes) {
      const MatrixD w = agg_loss_weights<double>(b.mask, mode, info);
      for (Index i = 0; i < b.loss.rows(); ++i)
        for (Index j = 0; j < b.loss.cols(); ++j) {
          MatrixD plus = b.loss, minus = b.loss;
          plus(i, j) += 0.5;
          minus(i, j) -= 0.5;
          const double fd = agg_loss(plus, b.mask, mode, info) - agg_loss(minus, b.mask, mode, info);
          EXPECT_NEAR(w(i, j), fd, 1e-12) << to_string(mode) << " at " << i << "," << j;
          if (b.mask(i, j) == 0) {
            EXPECT_EQ(w(i, j), 0.0);
          }
        }
    }
  }
}

TEST(LossAggregation, WeightsInFloatMatchDouble) {
  const Ragged b(5, 7, 9);
  const MatrixF mask = b.mask.cast<float>();
  for (auto mode : kModes) {
    const MatrixF wf = agg_loss_weights(mask, mode);
    const MatrixD wd = agg_loss_weights<double>(b.mask, mode);
    for (Index k = 0; k < wf.size(); ++k) EXPECT_NEAR(wf.data()[k], wd.data()[k], 1e-7 * std::abs(wd.data()[k]));
  }
  EXPECT_EQ(agg_loss_weights<SeqMeanTokenMean>(mask), agg_loss_weights(mask, LossAggMode::seq_mean_token_mean));
}

TEST(LossAggregation, AllMaskedBatchesGiveVerlsNaN) {
  const MatrixF loss = MatrixF::Constant(3, 4, 2.0f);
  const MatrixF mask = MatrixF::Zero(3, 4);
  EXPECT_TRUE(std::isnan(agg_loss(loss, mask, LossAggMode::token_mean)));
  EXPECT_TRUE(std::isnan(agg_loss(loss, mask, LossAggMode::seq_mean_token_sum)));
  EXPECT_TRUE(std::isnan(agg_loss(loss, mask, LossAggMode::seq_mean_token_mean)));
  EXPECT_TRUE(std::isnan(agg_loss(loss, mask, LossAggMode::seq_mean_token_sum_norm)));  // 0.9.1: as seq-mean-token-sum
  EXPECT_EQ(agg_loss(loss, mask, LossAggMode::token_sum), 0.0f);
  for (auto mode : kModes) EXPECT_EQ(agg_loss_weights(mask, mode), MatrixF::Zero(3, 4));
  // An empty batch behaves the same way.
  const MatrixF none(0, 4);
  EXPECT_TRUE(std::isnan(agg_loss(none, none, LossAggMode::token_mean)));
  EXPECT_TRUE(std::isnan(agg_loss(none, none, LossAggMode::seq_mean_token_sum_norm)));
  EXPECT_EQ(agg_loss(none, none, LossAggMode::token_sum), 0.0f);
}

TEST(LossAggregation, NonFinitePaddingFollowsVerl) {
  MatrixF loss(2, 3), mask(2, 3);
  loss << 1, 2, std::numeric_limits<float>::infinity(), 4, std::numeric_limits<float>::quiet_NaN(), 6;
  mask << 1, 1, 0, 1, 0, 0;
  // token-mean uses where(mask, L, 0): padding never matters.
  EXPECT_FLOAT_EQ(agg_loss(loss, mask, LossAggMode::token_mean), 7.0f / 3.0f);
  // The seq-mean modes sum L * mask: inf * 0 = NaN, as in verl.
  EXPECT_TRUE(std::isnan(agg_loss(loss, mask, LossAggMode::seq_mean_token_sum)));
  EXPECT_TRUE(std::isnan(agg_loss(loss, mask, LossAggMode::seq_mean_token_sum_norm)));
  // ... except in fully masked rows, which the seq-mean modes select out.
  MatrixF mask2(2, 3);
  mask2 << 1, 1, 1, 0, 0, 0;
  MatrixF loss2 = loss;
  loss2(0, 2) = 3;
  EXPECT_FLOAT_EQ(agg_loss(loss2, mask2, LossAggMode::seq_mean_token_mean), 2.0f);
}

TEST(LossAggregation, NonBinaryMaskNamesThePosition) {
  MatrixF loss = MatrixF::Ones(2, 3), mask = MatrixF::Ones(2, 3);
  mask(1, 2) = 0.5f;
  for (auto mode : kModes) {
    std::string msg = message_of<InvalidArgument>([&] { (void)agg_loss(loss, mask, mode); });
    EXPECT_NE(msg.find("loss_mask"), std::string::npos) << msg;
    EXPECT_NE(msg.find("0/1"), std::string::npos) << msg;
    EXPECT_NE(msg.find("0.5"), std::string::npos) << msg;
    EXPECT_NE(msg.find("(1, 2)"), std::string::npos) << msg;
    msg = message_of<InvalidArgument>([&] { (void)agg_loss_weights(mask, mode); });
    EXPECT_NE(msg.find("(1, 2)"), std::string::npos) << msg;
  }
}

TEST(LossAggregation, AcceptsBlocksIntegerAndBoolMasks) {
  const Ragged b(6, 8, 13);
  const MatrixF loss = b.loss.cast<float>();
  const MatrixF mask = b.mask.cast<float>();
  const RowMatrix<std::int64_t> int_mask = b.mask.cast<std::int64_t>();
  const RowMatrix<bool> bool_mask = b.mask.cast<bool>();
  const Eigen::MatrixXf col_major_loss = loss;
  for (auto mode : kModes) {
    const float reference = agg_loss(loss, mask, mode);
    EXPECT_EQ(agg_loss(loss, int_mask, mode), reference);
    EXPECT_EQ(agg_loss(loss, bool_mask, mode), reference);
    EXPECT_EQ(agg_loss(col_major_loss, mask, mode), reference);
    EXPECT_EQ(agg_loss_weights(int_mask, mode), agg_loss_weights(mask, mode));
    // A block of a larger row-major matrix (outer stride != cols) binds without a copy.
    MatrixF big = MatrixF::Constant(8, 11, 7.0f);
    MatrixF big_mask = MatrixF::Zero(8, 11);
    big.block(1, 2, 6, 8) = loss;
    big_mask.block(1, 2, 6, 8) = mask;
    EXPECT_EQ(agg_loss(big.block(1, 2, 6, 8), big_mask.block(1, 2, 6, 8), mode), reference);
    EXPECT_EQ(agg_loss_weights(big_mask.block(1, 2, 6, 8), mode), agg_loss_weights(mask, mode));
  }
}

TEST(LossAggregation, PoliciesSatisfyTheConcept) {
  static_assert(LossAggregation<TokenMean> && LossAggregation<SeqMeanTokenSum> && LossAggregation<SeqMeanTokenMean> &&
                LossAggregation<SeqMeanTokenSumNorm>);
  static_assert(!LossAggregation<int>);
  for (auto mode : kModes) EXPECT_EQ(parse_loss_agg_mode(to_string(mode)), mode);
  EXPECT_EQ(TokenMean::name, to_string(TokenMean::mode));
  EXPECT_EQ(SeqMeanTokenSumNorm::name, "seq-mean-token-sum-norm");
}

TEST(LossAggregation, LongRowsSumAccurately) {
  // 1 + many tiny terms: the double lanes keep what a float running sum would lose.
  MatrixF loss = MatrixF::Constant(1, 4099, 1e-8f);
  loss(0, 0) = 1.0f;
  const MatrixF mask = MatrixF::Ones(1, 4099);
  const double exact = (1.0 + 4098 * static_cast<double>(1e-8f)) / 4099.0;
  EXPECT_NEAR(agg_loss(loss, mask, LossAggMode::token_mean), exact, 1e-7 * exact);
}
