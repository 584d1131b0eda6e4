// RMSNorm's vectorized float rows against the generic path run in double.
#include <gtest/gtest.h>

#include <random>

#include "verl/model/transformer/rms_norm.hpp"

namespace {

using verl::Index;
using verl::RowMatrix;
using verl::Vector;
using namespace verl::model::detail;
namespace cpu = verl::cpu;

template <class S>
RowMatrix<S> random_matrix(Index rows, Index cols, std::mt19937& rng, double scale) {
  std::normal_distribution<double> normal(0.0, scale);
  RowMatrix<S> m(rows, cols);
  for (Index i = 0; i < m.size(); ++i) m.data()[i] = static_cast<S>(normal(rng));
  return m;
}

/// Largest error relative to `scale`, by default the largest reference value.
double worst_relative(const RowMatrix<float>& got, const RowMatrix<double>& want, double scale = 0) {
  if (scale == 0) scale = std::max(1e-30, want.cwiseAbs().maxCoeff());
  return (got.cast<double>() - want).cwiseAbs().maxCoeff() / scale;
}

TEST(RmsNorm, FloatRowsMatchTheDoubleComputation) {
  std::mt19937 rng(11);
  // Widths around the vector lengths (tails of every size) and a wide row.
  for (const Index width : {1, 3, 8, 15, 16, 17, 31, 64, 100, 896}) {
    const Index rows = 5;
    const RowMatrix<double> x = random_matrix<double>(rows, width, rng, 3.0);
    const RowMatrix<double> w = random_matrix<double>(1, width, rng, 1.0);
    const RowMatrix<double> dy = random_matrix<double>(rows, width, rng, 1.0);
    const RowMatrix<float> xf = x.cast<float>(), wf = w.cast<float>(), dyf = dy.cast<float>();
    const RowMatrix<double> xr = xf.cast<double>(), wr = wf.cast<double>(), dyr = dyf.cast<double>();

    RowMatrix<double> y(rows, width);
    Vector<double> r;
    rms_norm_forward<double>(xr, wr, 1e-6, y, r);
    RowMatrix<float> yf(rows, width);
    Vector<float> rf;
    rms_norm_forward<float>(xf, wf, 1e-6, yf, rf);
    EXPECT_LT(worst_relative(yf, y), 1e-6) << width;
    for (Index t = 0; t < rows; ++t) EXPECT_NEAR(rf[t], r[t], 1e-6 * r[t]) << width;

    RowMatrix<float> recomputed(rows, width);
    rms_norm_recompute<float>(xf, wf, rf, recomputed);
    EXPECT_EQ(recomputed, yf) << width;  // the same products as the forward pass

    // Backward: overwrite, then accumulate onto the first result; weight gradients accumulate.
    RowMatrix<double> dx(rows, width), dw = RowMatrix<double>::Zero(1, width);
    rms_norm_backward<double>(xr, wr, rf.cast<double>(), dyr, &dw, dx, false);
    RowMatrix<float> dxf(rows, width), dwf = RowMatrix<float>::Zero(1, width);
    rms_norm_backward<float>(xf, wf, rf, dyf, &dwf, dxf, false);
    // dx = r g - c x is a difference of terms of size r |g| (at width 1 it cancels to ~eps / x^2):
    // float rounding is relative to those terms.
    double term = 0;
    for (Index t = 0; t < rows; ++t) term = std::max(term, rf[t] * wr.cwiseProduct(dyr.row(t)).cwiseAbs().maxCoeff());
    EXPECT_LT(worst_relative(dxf, dx, term), 2e-6) << width;
    EXPECT_LT(worst_relative(dwf, dw), 2e-6) << width;
    rms_norm_backward<float>(xf, wf, rf, dyf, nullptr, dxf, true);
    EXPECT_LT(worst_relative(dxf, 2.0 * dx, term), 4e-6) << width;
  }
}

TEST(RmsNorm, ARowsResultDoesNotDependOnItsNeighbours) {
  // The same row inside a wider block of rows, or alone, gives the same bits.
  std::mt19937 rng(3);
  const Index width = 37;
  const RowMatrix<float> x = random_matrix<float>(6, width, rng, 2.0), w = random_matrix<float>(1, width, rng, 1.0);
  RowMatrix<float> all(6, width), one(1, width);
  Vector<float> r_all, r_one;
  rms_norm_forward<float>(x, w, 1e-6, all, r_all);
  rms_norm_forward<float>(x.middleRows(4, 1), w, 1e-6, one, r_one);
  EXPECT_EQ(one.row(0), all.row(4));
  EXPECT_EQ(r_one[0], r_all[4]);
}

}  // namespace
