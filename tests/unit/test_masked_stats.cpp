// Masked statistics (verl/algo/masked_stats.hpp): values against a plain double computation,
// axis variants, verl's edge cases (empty mask, n = 0/1 with the Bessel correction, garbage at
// masked positions), argument errors, and every gradient against central finite differences.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <string>

#include "verl/algo/masked_stats.hpp"
#include "../support/error_message.hpp"

namespace {

using verl::Index;
using verl::InvalidArgument;
using verl::MatrixD;
using verl::MatrixF;
using verl::MatrixI64;
using verl::VectorF;
using namespace verl::algo;
using verl::test_support::message_of;

MatrixF random_values(Index rows, Index cols, unsigned seed, float scale = 1.5f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.3f, scale);
  MatrixF m(rows, cols);
  for (Index i = 0; i < m.size(); ++i) m.data()[i] = normal(rng);
  return m;
}

/// Right-padded response masks with at least `min_len` valid tokens per row.
MatrixF random_mask(Index rows, Index cols, unsigned seed, Index min_len = 1) {
  std::mt19937 rng(seed);
  MatrixF m = MatrixF::Zero(rows, cols);
  for (Index i = 0; i < rows; ++i) {
    const Index len = min_len + static_cast<Index>(rng() % static_cast<unsigned>(cols - min_len + 1));
    m.row(i).head(len).setOnes();
  }
  return m;
}

/// Central differences of a scalar function of `values` (perturbed in double).
MatrixD finite_differences(const MatrixF& values, const std::function<double(const MatrixF&)>& f, float h) {
  MatrixD g(values.rows(), values.cols());
  for (Index k = 0; k < values.size(); ++k) {
    MatrixF plus = values, minus = values;
    plus.data()[k] += h;
    minus.data()[k] -= h;
    g.data()[k] = (f(plus) - f(minus)) / (static_cast<double>(plus.data()[k]) - minus.data()[k]);
  }
  return g;
}

void expect_close(const MatrixF& got, const MatrixD& want, double atol, double rtol) {
  ASSERT_EQ(got.rows(), want.rows());
  ASSERT_EQ(got.cols(), want.cols());
  for (Index k = 0; k < got.size(); ++k)
    EXPECT_NEAR(got.data()[k], want.data()[k], atol + rtol * std::abs(want.data()[k])) << "element " << k;
}

TEST(MaskedStats, SumAndMeanIgnoreMaskedPositions) {
  MatrixF values = random_values(4, 7, 1);
  const MatrixF mask = random_mask(4, 7, 2);
  double sum = 0, count = 0;
  for (Index k = 0; k < values.size(); ++k)
    if (mask.data()[k] != 0) {
      sum += values.data()[k];
      count += 1;
    }
  // Garbage (even NaN/inf) at masked positions never matters: verl uses where(mask, v, 0).
  for (Index k = 0; k < values.size(); ++k)
    if (mask.data()[k] == 0) values.data()[k] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_NEAR(masked_sum(values, mask), sum, 1e-9);
  EXPECT_NEAR(masked_mean(values, mask), sum / count, 1e-9);
  // Integer and bool masks behave like float ones.
  const MatrixI64 int_mask = mask.cast<std::int64_t>();
  EXPECT_EQ(masked_sum(values, int_mask), masked_sum(values, mask));
  const verl::RowMatrix<bool> bool_mask = mask.cast<bool>();
  EXPECT_EQ(masked_mean(values, bool_mask), masked_mean(values, mask));
}

TEST(MaskedStats, NonFiniteGarbageAtMaskedPositionsNeverLeaks) {
  const MatrixF clean = random_values(4, 9, 18);
  const MatrixF mask = random_mask(4, 9, 19, 2);
  MatrixF dirty = clean;
  for (Index k = 0; k < dirty.size(); ++k)
    if (mask.data()[k] == 0) dirty.data()[k] = (k % 2) ? std::numeric_limits<float>::infinity() : std::nanf("");
  EXPECT_NEAR(masked_var(dirty, mask), masked_var(clean, mask), 1e-6);
  EXPECT_EQ(masked_sum(dirty, mask, 0), masked_sum(clean, mask, 0));
  EXPECT_TRUE(masked_mean(dirty, mask, -1).isApprox(masked_mean(clean, mask, -1), 1e-6f));
  const MatrixF gv = masked_var_backward(dirty, mask);
  const MatrixF gv_clean = masked_var_backward(clean, mask);
  for (Index k = 0; k < mask.size(); ++k) EXPECT_NEAR(gv.data()[k], gv_clean.data()[k], 1e-6);
  // masked_whiten's output is not masked: garbage there is whitened (and its gradient poisons
  // the statistics), exactly as in verl.
  EXPECT_TRUE(std::isnan(masked_whiten(dirty, mask)(0, 8)) || mask(0, 8) != 0);
}

TEST(MaskedStats, EmptyMaskMeanIsZero) {
  const MatrixF values = random_values(2, 3, 3);
  const MatrixF mask = MatrixF::Zero(2, 3);
  EXPECT_EQ(masked_sum(values, mask), 0.0);
  EXPECT_EQ(masked_mean(values, mask), 0.0);
  EXPECT_EQ(masked_var(values, mask, false), 0.0);
}

TEST(MaskedStats, AxisVariants) {
  const MatrixF values = random_values(5, 6, 4);
  MatrixF mask = random_mask(5, 6, 5);
  mask.row(3).setZero();  // an empty row: mean 0
  const VectorF row_sums = masked_sum(values, mask, -1);
  const VectorF row_means = masked_mean(values, mask, 1);
  const VectorF col_sums = masked_sum(values, mask, 0);
  const VectorF col_means = masked_mean(values, mask, -2);
  ASSERT_EQ(row_sums.size(), 5);
  ASSERT_EQ(col_sums.size(), 6);
  for (Index i = 0; i < 5; ++i) {
    const double s = (values.row(i).array() * mask.row(i).array()).cast<double>().sum();
    const double n = mask.row(i).sum();
    EXPECT_NEAR(row_sums[i], s, 1e-6);
    EXPECT_NEAR(row_means[i], n > 0 ? s / n : 0.0, 1e-6);
  }
  for (Index j = 0; j < 6; ++j) {
    const double s = (values.col(j).array() * mask.col(j).array()).cast<double>().sum();
    const double n = mask.col(j).sum();
    EXPECT_NEAR(col_sums[j], s, 1e-6);
    EXPECT_NEAR(col_means[j], n > 0 ? s / n : 0.0, 1e-6);
  }
  EXPECT_EQ(row_means[3], 0.0f);
}

TEST(MaskedStats, VarianceAndWhitening) {
  const MatrixF values = random_values(8, 16, 6);
  const MatrixF mask = random_mask(8, 16, 7);
  double sum = 0, n = 0;
  for (Index k = 0; k < values.size(); ++k)
    if (mask.data()[k] != 0) {
      sum += values.data()[k];
      n += 1;
    }
  const double mean = sum / n;
  double sq = 0;
  for (Index k = 0; k < values.size(); ++k)
    if (mask.data()[k] != 0) sq += (values.data()[k] - mean) * (values.data()[k] - mean);
  EXPECT_NEAR(masked_var(values, mask, false), sq / n, 1e-5);
  EXPECT_NEAR(masked_var(values, mask, true), sq / (n - 1), 1e-5);
  const MatrixF w = masked_whiten(values, mask);
  const double inv_std = 1.0 / std::sqrt(sq / (n - 1) + 1e-8);
  for (Index k = 0; k < values.size(); ++k) EXPECT_NEAR(w.data()[k], (values.data()[k] - mean) * inv_std, 1e-5);
  const MatrixF shifted = masked_whiten(values, mask, false);
  for (Index k = 0; k < values.size(); ++k) EXPECT_NEAR(shifted.data()[k], (values.data()[k] - mean) * inv_std + mean, 1e-5);
  // The whitened valid elements have mean 0 and unbiased variance 1 (up to the 1e-8).
  EXPECT_NEAR(masked_mean(w, mask), 0.0, 1e-6);
  EXPECT_NEAR(masked_var(w, mask, true), 1.0, 1e-5);
}

TEST(MaskedStats, UnbiasedVarianceNeedsTwoElements) {
  const MatrixF values = random_values(2, 3, 8);
  MatrixF mask = MatrixF::Zero(2, 3);
  EXPECT_EQ(message_of([&] { masked_var(values, mask); }),
            "mask: masked_var(unbiased=true) needs at least 2 valid elements, got 0 (verl: at least one element in "
            "the mask has to be 1)");
  EXPECT_NE(message_of([&] { masked_whiten(values, mask); }).find("got 0"), std::string::npos);
  mask(1, 2) = 1;
  EXPECT_NE(message_of([&] { masked_var(values, mask); }).find("got 1"), std::string::npos);
  EXPECT_NE(message_of([&] { masked_var_backward(values, mask); }).find("got 1"), std::string::npos);
  EXPECT_EQ(masked_var(values, mask, false), 0.0);  // the biased variance of one element is 0
}

TEST(MaskedStats, ErrorsNameTheArgument) {
  const MatrixF values = random_values(2, 3, 9);
  MatrixF mask = MatrixF::Ones(2, 3);
  mask(1, 0) = 0.5f;
  EXPECT_EQ(message_of([&] { masked_sum(values, mask); }), "mask: expected a 0/1 mask, got 0.5 at (1, 0)");
  EXPECT_EQ(message_of([&] { masked_mean(values, MatrixF::Ones(3, 2)); }),
            "mask: expected the shape of values (2, 3), got (3, 2)");
  EXPECT_EQ(message_of([&] { masked_sum(values, MatrixF::Ones(2, 3), 2); }),
            "axis: expected -2, -1, 0 or 1 for a (B, T) tensor, got 2");
  const VectorF wrong = VectorF::Ones(3);
  EXPECT_EQ(message_of([&] { masked_sum_backward(MatrixF::Ones(2, 3), wrong, -1); }),
            "cotangent: expected length 2 (the reduced axis), got 3");
  EXPECT_EQ(message_of([&] { masked_whiten_backward(values, MatrixF::Ones(2, 3), MatrixF::Ones(2, 2)); }),
            "cotangent: expected the shape of values (2, 3), got (2, 2)");
}

TEST(MaskedStats, SumAndMeanGradients) {
  const MatrixF values = random_values(4, 5, 10);
  const MatrixF mask = random_mask(4, 5, 11);
  // The sums accumulate in float32 like verl's: central differences carry ~1e-5 of rounding.
  const float h = 1e-2f;
  expect_close(masked_sum_backward(mask, 0.7), finite_differences(values, [&](const MatrixF& v) { return 0.7 * masked_sum(v, mask); }, h),
               1e-4, 1e-4);
  expect_close(masked_mean_backward(mask, -1.3),
               finite_differences(values, [&](const MatrixF& v) { return -1.3 * masked_mean(v, mask); }, h), 1e-4, 1e-4);
  // ... and are exactly cot * m and cot * m / n.
  EXPECT_EQ(masked_sum_backward(mask, 0.7), (mask * 0.7f).eval());
  EXPECT_EQ(masked_mean_backward(mask, 2.0), (mask * static_cast<float>(2.0 / mask.sum())).eval());
  for (const int axis : {-1, 0}) {
    const Index reduced = axis == -1 ? 4 : 5;
    VectorF cot(reduced);
    for (Index k = 0; k < reduced; ++k) cot[k] = 0.25f * static_cast<float>(k) - 0.4f;
    const auto dot = [&](const VectorF& out) { return static_cast<double>(out.cast<double>().dot(cot.cast<double>())); };
    expect_close(masked_sum_backward(mask, cot, axis),
                 finite_differences(values, [&](const MatrixF& v) { return dot(masked_sum(v, mask, axis)); }, h), 1e-4, 1e-4);
    expect_close(masked_mean_backward(mask, cot, axis),
                 finite_differences(values, [&](const MatrixF& v) { return dot(masked_mean(v, mask, axis)); }, h), 1e-4, 1e-4);
  }
}

TEST(MaskedStats, VarianceGradient) {
  const MatrixF values = random_values(4, 6, 12);
  const MatrixF mask = random_mask(4, 6, 13, 2);
  for (const bool unbiased : {true, false}) {
    // The variance is quadratic in the values: central differences are exact up to rounding.
    expect_close(masked_var_backward(values, mask, unbiased, 0.5),
                 finite_differences(values, [&](const MatrixF& v) { return 0.5 * masked_var(v, mask, unbiased); }, 1e-2f),
                 1e-4, 1e-3);
  }
}

TEST(MaskedStats, WhitenGradientFlowsThroughMeanAndVariance) {
  const MatrixF values = random_values(3, 5, 14);
  const MatrixF mask = random_mask(3, 5, 15, 2);
  MatrixF cot(3, 5);
  for (Index k = 0; k < cot.size(); ++k) cot.data()[k] = 0.1f * static_cast<float>(k % 7) - 0.3f;
  for (const bool shift_mean : {true, false}) {
    const auto loss = [&](const MatrixF& v) {
      return (masked_whiten(v, mask, shift_mean).cast<double>().array() * cot.cast<double>().array()).sum();
    };
    expect_close(masked_whiten_backward(values, mask, cot, shift_mean), finite_differences(values, loss, 1e-2f), 2e-3,
                 2e-3);
  }
  // Padded positions get only the direct term c * rsqrt(var + 1e-8): their values do not enter
  // the statistics.
  const MatrixF g = masked_whiten_backward(values, mask, cot);
  const double r = 1.0 / std::sqrt(masked_var(values, mask) + 1e-8);
  for (Index k = 0; k < values.size(); ++k) {
    if (mask.data()[k] == 0) {
      EXPECT_NEAR(g.data()[k], cot.data()[k] * r, 1e-6);
    }
  }
}

TEST(MaskedStats, GradientsAreZeroAtMaskedPositions) {
  const MatrixF values = random_values(3, 4, 16);
  const MatrixF mask = random_mask(3, 4, 17, 2);
  const MatrixF gs = masked_sum_backward(mask), gm = masked_mean_backward(mask), gv = masked_var_backward(values, mask);
  for (Index k = 0; k < mask.size(); ++k) {
    if (mask.data()[k] == 0) {
      EXPECT_EQ(gs.data()[k], 0.0f);
      EXPECT_EQ(gm.data()[k], 0.0f);
      EXPECT_EQ(gv.data()[k], 0.0f);
    }
  }
}

}  // namespace
