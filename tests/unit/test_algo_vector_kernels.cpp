// The vectorised, multi-threaded paths of the element-wise algo kernels (dual-clip PPO, agg_loss,
// low_var_kl, the outcome-advantage broadcast) on batches large enough to be split over threads
// and with row lengths that leave vector tails, checked against plain scalar references written
// here: clip decisions exactly (ratios placed on the clip thresholds, where the vector exp hands
// over to std::exp), values to float rounding, and mask errors naming the first bad row in row
// order whichever thread found it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "verl/algo/advantages/grpo.hpp"
#include "verl/algo/kl/penalty.hpp"
#include "verl/algo/loss_aggregation.hpp"
#include "verl/algo/policy_losses.hpp"

using namespace verl;
using namespace verl::algo;

namespace {

// 2^18 elements or more: two threads wherever the hardware has two; 1001 columns: every row
// ends in a tail shorter than any vector width.
constexpr Index kRows = 300;
constexpr Index kCols = 1001;

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "(no exception)";
}

bool close(double got, double want, double rtol, double atol) {
  return std::abs(got - want) <= atol + rtol * std::abs(want);
}

MatrixF right_padded_mask(std::mt19937& gen, Index rows, Index cols) {
  std::uniform_int_distribution<Index> length(0, cols);
  MatrixF mask = MatrixF::Zero(rows, cols);
  for (Index i = 0; i < rows; ++i) mask.row(i).head(length(gen)).setOnes();
  return mask;
}

/// Log-probs drawn uniformly from [-4, 1): log-ratios of either sign, none near a clamp.
MatrixF random_log_probs(std::mt19937& gen, Index rows, Index cols) {
  std::uniform_real_distribution<float> u(-4.0f, 1.0f);
  MatrixF lp(rows, cols);
  for (Index i = 0; i < rows; ++i)
    for (Index j = 0; j < cols; ++j) lp(i, j) = u(gen);
  return lp;
}

}  // namespace

TEST(AlgoVectorKernels, VanillaMatchesScalarReferenceWithRatiosOnTheClipThresholds) {
  std::mt19937 gen(3);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const float low = static_cast<float>(1.0 - 0.2), high = static_cast<float>(1.0 + 0.28), dual = 3.0f;
  // Log-ratios whose exp lands on (or an ulp around) a threshold: the branch decisions there
  // must be std::exp's.
  const float on_threshold[] = {std::log(low), std::log(high), std::log(dual), std::nextafter(std::log(low), 0.0f),
                                std::nextafter(std::log(high), 1.0f), 0.0f, 25.0f, -25.0f};
  MatrixF old_lp(kRows, kCols), lp(kRows, kCols), adv(kRows, kCols);
  const MatrixF mask = right_padded_mask(gen, kRows, kCols);
  for (Index i = 0; i < kRows; ++i) {
    const float a = u(gen);
    for (Index j = 0; j < kCols; ++j) {
      old_lp(i, j) = -2.0f + u(gen);
      const bool special = (i * kCols + j) % 7 == 0;
      lp(i, j) = old_lp(i, j) + (special ? on_threshold[(i + j) % 8] : 0.4f * u(gen));
      adv(i, j) = (j % 5 == 0) ? -a : a;
    }
  }
  const PolicyLossBatch batch{old_lp, lp, adv, mask};
  const VanillaPPO loss{.clip_ratio_low = 0.2, .clip_ratio_high = 0.28, .clip_ratio_c = 3.0};
  const PolicyLossResult got = loss.compute(batch, AggregationContext{});

  // Scalar reference, verl's formulas in float32 with double sums.
  double tokens = 0, loss_sum = 0, kl_sum = 0;
  std::int64_t clipped = 0, clipped_lower = 0;
  MatrixF want_grad(kRows, kCols);
  for (Index i = 0; i < kRows; ++i)
    for (Index j = 0; j < kCols; ++j) tokens += mask(i, j);
  const float weight = 1.0f / static_cast<float>(tokens);
  for (Index i = 0; i < kRows; ++i) {
    for (Index j = 0; j < kCols; ++j) {
      const float log_ratio = lp(i, j) - old_lp(i, j);
      const float x = std::min(std::max(log_ratio, -20.0f), 20.0f);
      const float r = std::exp(x), neg_a = -adv(i, j);
      const float pg1 = neg_a * r, pg2 = neg_a * std::min(std::max(r, low), high);
      const float c1 = std::max(pg1, pg2), pg3 = neg_a * dual;
      const bool negative = adv(i, j) < 0.0f, valid = mask(i, j) != 0.0f;
      const float value = negative ? std::min(pg3, c1) : c1;
      if (valid) {
        loss_sum += value;
        kl_sum += -x;
        clipped += pg2 > pg1;
        clipped_lower += negative && c1 > pg3;
      }
      const float share1 = pg1 > pg2 ? 1.0f : (pg1 == pg2 ? 0.5f : 0.0f);
      const float share2 = pg2 > pg1 ? 1.0f : (pg1 == pg2 ? 0.5f : 0.0f);
      const float in_range = (r >= low && r <= high) ? 1.0f : 0.0f;
      const float dual_share = negative ? (c1 > pg3 ? 0.0f : (c1 == pg3 ? 0.5f : 1.0f)) : 1.0f;
      const float passes = (log_ratio >= -20.0f && log_ratio <= 20.0f) ? 1.0f : 0.0f;
      want_grad(i, j) = (valid ? weight : 0.0f) * ((share1 + share2 * in_range) * dual_share) * neg_a * r * passes;
    }
  }
  const float count = static_cast<float>(tokens) + 1e-8f;
  EXPECT_EQ(got.metrics.at("actor/pg_clipfrac"), static_cast<float>(clipped) / count);
  EXPECT_EQ(got.metrics.at("actor/pg_clipfrac_lower"), static_cast<float>(clipped_lower) / count);
  EXPECT_TRUE(close(got.metrics.at("actor/ppo_kl"), kl_sum / tokens, 1e-5, 1e-7));
  EXPECT_TRUE(close(got.pg_loss, loss_sum / tokens, 1e-5, 1e-7)) << got.pg_loss << " vs " << loss_sum / tokens;
  Index mismatches = 0;
  for (Index i = 0; i < kRows; ++i)
    for (Index j = 0; j < kCols; ++j)
      mismatches += !close(got.grad_log_prob(i, j), want_grad(i, j), 1e-5, 1e-12);
  EXPECT_EQ(mismatches, 0);
}

TEST(AlgoVectorKernels, AggLossMatchesDoubleSumsInEveryMode) {
  std::mt19937 gen(5);
  std::normal_distribution<float> n(0.0f, 3.0f);
  MatrixF loss(kRows, kCols);
  for (Index i = 0; i < kRows; ++i)
    for (Index j = 0; j < kCols; ++j) loss(i, j) = n(gen);
  MatrixF mask = right_padded_mask(gen, kRows, kCols);
  mask.row(17).setZero();  // dropped by the seq-mean modes
  mask.row(18).setZero();
  mask.row(18).head(500).setOnes();
  // Garbage on padding never reaches token-mean (where(mask, L, 0)).
  loss(18, 700) = std::numeric_limits<float>::infinity();
  for (auto mode : {LossAggMode::token_mean, LossAggMode::token_sum, LossAggMode::seq_mean_token_sum,
                    LossAggMode::seq_mean_token_mean, LossAggMode::seq_mean_token_sum_norm}) {
    double total = 0, tokens = 0, rows_kept = 0;
    for (Index i = 0; i < kRows; ++i) {
      double row = 0, length = 0;
      for (Index j = 0; j < kCols; ++j)
        if (mask(i, j) != 0.0f) {
          row += loss(i, j);
          length += 1;
        }
      tokens += length;
      rows_kept += length > 0;
      if (mode == LossAggMode::seq_mean_token_mean) row = length > 0 ? row / length : 0;
      total += row;
    }
    const double want = mode == LossAggMode::token_mean                ? total / tokens
                        : mode == LossAggMode::token_sum               ? total
                        : mode == LossAggMode::seq_mean_token_sum_norm ? total / rows_kept / static_cast<double>(kCols)
                                                                        : total / rows_kept;
    const float got = agg_loss(loss, mask, mode);
    if (mode == LossAggMode::token_mean || mode == LossAggMode::token_sum) {
      EXPECT_TRUE(close(got, want, 1e-5, 1e-7)) << to_string(mode) << ": " << got << " vs " << want;
    } else {
      // seq-mean modes multiply by the mask, so the inf on padding gives NaN, as in verl.
      EXPECT_TRUE(std::isnan(got)) << to_string(mode);
      loss(18, 700) = 0.0f;
      EXPECT_TRUE(close(agg_loss(loss, mask, mode), want, 1e-5, 1e-7)) << to_string(mode);
      loss(18, 700) = std::numeric_limits<float>::infinity();
    }
  }
}

TEST(AlgoVectorKernels, AggLossNamesTheFirstNonBinaryMaskRow) {
  std::mt19937 gen(7);
  const MatrixF loss = MatrixF::Ones(kRows, kCols);
  MatrixF mask = right_padded_mask(gen, kRows, kCols);
  mask(260, 999) = 0.5f;  // in the last block (another thread's, where there are two)
  mask(41, 1000) = 2.0f;  // in the first block, in the row's scalar tail
  const std::string message = error_of([&] { (void)agg_loss(loss, mask, LossAggMode::token_mean); });
  EXPECT_NE(message.find("loss_mask: expected a 0/1 mask, got 2 at (41, 1000)"), std::string::npos) << message;
  mask(41, 1000) = 1.0f;
  const std::string later = error_of([&] { (void)agg_loss(loss, mask, LossAggMode::seq_mean_token_mean); });
  EXPECT_NE(later.find("got 0.5 at (260, 999)"), std::string::npos) << later;
}

TEST(AlgoVectorKernels, LowVarKLMatchesTheScalarEstimate) {
  std::mt19937 gen(11);
  MatrixF lp = random_log_probs(gen, kRows, kCols), ref = random_log_probs(gen, kRows, kCols);
  lp(5, 5) = std::numeric_limits<float>::quiet_NaN();
  ref(6, 6) = 30.0f;   // log-ratio clamp (+20), then the estimate's clamp (10)
  ref(7, 7) = -40.0f;  // log-ratio clamp (-20): exp(-20) + 20 - 1, then 10
  lp(8, 8) = ref(8, 8);
  const MatrixF got = kl_penalty(lp, ref, LowVarKL{});
  const LowVarKL scalar;
  Index mismatches = 0;
  for (Index i = 0; i < kRows; ++i)
    for (Index j = 0; j < kCols; ++j) {
      const float want = scalar.value(lp(i, j), ref(i, j));
      if (std::isnan(want)) {
        mismatches += !std::isnan(got(i, j));
      } else {
        mismatches += !close(got(i, j), want, 1e-5, 1e-6);
      }
    }
  EXPECT_EQ(mismatches, 0);
  EXPECT_TRUE(std::isnan(got(5, 5)));
  EXPECT_EQ(got(6, 6), 10.0f);
  EXPECT_EQ(got(7, 7), 10.0f);
  EXPECT_EQ(got(8, 8), 0.0f);
}

TEST(AlgoVectorKernels, LowVarKLIntoLargeReusedStorageGivesTheFreshValues) {
  constexpr Index rows = 4096, cols = 1024;  // split over threads
  std::mt19937 gen(17);
  const MatrixF lp = random_log_probs(gen, rows, cols);
  MatrixF ref = random_log_probs(gen, rows, cols);
  ref(100, 7) = 30.0f;
  const MatrixF fresh = kl_penalty(lp, ref, LowVarKL{});
  MatrixF reused = MatrixF::Constant(rows, cols, -1.0f);
  const float* storage = reused.data();
  kl_penalty_into(reused, lp, ref, LowVarKL{});
  ASSERT_EQ(reused.data(), storage);
  EXPECT_EQ((reused.array() != fresh.array()).count(), 0);
  EXPECT_EQ(reused(100, 7), 10.0f);
  // Rows whose length is no multiple of the vector width: the scalar tail, same values.
  const MatrixF lp_odd = lp.leftCols(cols - 1), ref_odd = ref.leftCols(cols - 1);
  MatrixF odd = MatrixF::Constant(rows, cols - 1, -1.0f);
  kl_penalty_into(odd, lp_odd, ref_odd, LowVarKL{});
  EXPECT_EQ((odd.array() != kl_penalty(lp_odd, ref_odd, LowVarKL{}).array()).count(), 0);
}

TEST(AlgoVectorKernels, GRPOBroadcastNamesTheFirstNonBinaryMaskRow) {
  constexpr Index rows = 2048, cols = 256;  // above the threading threshold
  std::mt19937 gen(13);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  MatrixF rewards(rows, cols);
  for (Index i = 0; i < rows; ++i)
    for (Index j = 0; j < cols; ++j) rewards(i, j) = u(gen) < 0.01f ? u(gen) : 0.0f;
  MatrixF mask = right_padded_mask(gen, rows, cols);
  std::vector<std::int64_t> index(static_cast<std::size_t>(rows));
  for (Index i = 0; i < rows; ++i) index[static_cast<std::size_t>(i)] = i / 8;
  const GRPO grpo;
  const AdvantageResult result = grpo.compute({rewards, mask, index});
  for (Index i = 0; i < rows; i += 97) {
    for (Index j = 0; j < cols; ++j) {
      EXPECT_EQ(result.advantages(i, j), result.returns()(i, j));
      if (mask(i, j) == 0.0f) {
        EXPECT_EQ(result.advantages(i, j), 0.0f);
      }
    }
  }
  mask(1900, 4) = 0.25f;
  mask(77, 200) = -1.0f;
  const std::string message = error_of([&] { (void)grpo.compute({rewards, mask, index}); });
  EXPECT_NE(message.find("response_mask: expected a 0/1 mask, got -1 at (77, 200)"), std::string::npos) << message;
}
