// verl's masked statistics (verl/utils/torch_functional.py): masked_sum, masked_mean, masked_var
// and masked_whiten over a (B, T) batch and a 0/1 mask, their axis variants, and the gradient
// (vector-Jacobian product) of each with respect to `values`, as verl's autograd computes it.
//
// verl works in float32: each row is reduced in float32 (vectorised), rows are combined in
// double, and the quantities verl rounds to float32 before reusing them (the mean, the variance)
// are rounded the same way. Values at masked positions never matter (verl's where(mask, v, 0)).
#pragma once

#include <cmath>
#include <cstdint>
#include <string_view>
#include <type_traits>

#include "verl/config.hpp"
#include "verl/core/error.hpp"
#include "verl/core/tensor.hpp"

namespace verl::algo {

namespace detail {

/// verl adds 1e-8 to the float32 mask count: for a count >= 1 that changes nothing, and an empty
/// mask gives 0 / 1e-8 = 0 instead of NaN.
inline double masked_count_denominator(double count) {
  return static_cast<double>(static_cast<float>(count) + 1e-8f);
}

// Masks are 0/1 (verl slices them from attention_mask; another value would silently reweight a
// statistic). Row sums use Eigen's vectorised reductions of v*m, which equal verl's
// where(mask, v, 0)*mask whenever the values are finite; a row whose result is not finite is
// recomputed with the exact select, so NaN/inf garbage at masked positions never leaks.

/// Accumulation type: the values' own precision (float32 like verl's tensors), double for double.
template <class Scalar>
using MaskedAccumulator = std::conditional_t<std::is_same_v<Scalar, double>, double, float>;

template <class MD>
[[noreturn]] void throw_non_binary_row(const Eigen::MatrixBase<MD>& mask, Index row) {
  for (Index j = 0; j < mask.cols(); ++j) {
    const auto m = mask(row, j);
    if (!(m == 0 || m == 1))
      verl::detail::throw_invalid_argument("mask: expected a 0/1 mask, got {} at ({}, {})", static_cast<double>(m), row,
                                           j);
  }
  verl::detail::throw_invalid_argument("mask: expected a 0/1 mask in row {}", row);
}

/// m*(m-1) is 0 exactly for 0 and 1 (NaN fails too).
template <class MaskRow>
bool row_is_binary(const MaskRow& m) {
  using Acc = typename MaskRow::Scalar;
  return !((m * (m - Acc(1))) != Acc(0)).any();
}

template <class MD>
void require_binary(const Eigen::MatrixBase<MD>& mask) {
  for (Index i = 0; i < mask.rows(); ++i)
    if (!row_is_binary(mask.row(i).template cast<float>().array())) throw_non_binary_row(mask, i);
}

struct MaskedTotals {
  double sum = 0;    ///< sum of values at valid positions
  double count = 0;  ///< number of valid positions
};

/// The exact where(mask, v - shift, 0) sums of one row (the slow path for non-finite values).
template <class VD, class MD>
void masked_row_exact(const Eigen::MatrixBase<VD>& values, const Eigen::MatrixBase<MD>& mask, Index row, float shift,
                      double& sum, double& square_sum) {
  sum = 0;
  square_sum = 0;
  for (Index j = 0; j < values.cols(); ++j)
    if (mask(row, j) != 0) {
      const double d = static_cast<double>(static_cast<float>(values(row, j)) - shift);
      sum += d;
      square_sum += d * d;
    }
}

/// Sum and count of one row (and the 0/1 check of its mask).
template <class VD, class MD>
MaskedTotals masked_row_totals(const Eigen::MatrixBase<VD>& values, const Eigen::MatrixBase<MD>& mask, Index row) {
  using Acc = MaskedAccumulator<typename VD::Scalar>;
  const auto v = values.row(row).template cast<Acc>().array();
  const auto m = mask.row(row).template cast<Acc>().array();
  if (!row_is_binary(m)) throw_non_binary_row(mask, row);
  MaskedTotals totals{static_cast<double>((v * m).sum()), static_cast<double>(m.sum())};
  if (!std::isfinite(totals.sum)) {
    double unused = 0;
    if constexpr (std::is_same_v<Acc, double>) {
      totals.sum = 0;
      for (Index j = 0; j < values.cols(); ++j)
        if (mask(row, j) != 0) totals.sum += static_cast<double>(values(row, j));
    } else {
      masked_row_exact(values, mask, row, 0.0f, totals.sum, unused);
    }
  }
  return totals;
}

template <class VD, class MD>
MaskedTotals masked_totals(const Eigen::MatrixBase<VD>& values, const Eigen::MatrixBase<MD>& mask) {
  verl::detail::require_same_shape("mask", shape_of(mask), "values", shape_of(values));
  MaskedTotals total;
  for (Index i = 0; i < values.rows(); ++i) {
    const MaskedTotals row = masked_row_totals(values, mask, i);
    total.sum += row.sum;
    total.count += row.count;
  }
  return total;
}

/// verl's `axis` for a (B, T) tensor: -1/1 reduce each row (result length B), 0/-2 each column
/// (result length T).
inline bool reduces_rows(int axis) {
  VERL_CHECK_ARG(axis >= -2 && axis <= 1, "axis: expected -2, -1, 0 or 1 for a (B, T) tensor, got {}", axis);
  return axis == -1 || axis == 1;
}

/// Per-row (reduce_rows) or per-column masked sums and counts.
template <class VD, class MD>
void masked_axis_totals(const Eigen::MatrixBase<VD>& values, const Eigen::MatrixBase<MD>& mask, bool reduce_rows,
                        VectorD& sums, VectorD& counts) {
  verl::detail::require_same_shape("mask", shape_of(mask), "values", shape_of(values));
  if (reduce_rows) {
    sums.resize(values.rows());
    counts.resize(values.rows());
    for (Index i = 0; i < values.rows(); ++i) {
      const MaskedTotals row = masked_row_totals(values, mask, i);
      sums[i] = row.sum;
      counts[i] = row.count;
    }
  } else {
    using Acc = MaskedAccumulator<typename VD::Scalar>;
    sums.setZero(values.cols());
    counts.setZero(values.cols());
    for (Index i = 0; i < values.rows(); ++i) {
      const auto m = mask.row(i).template cast<Acc>().array();
      if (!row_is_binary(m)) throw_non_binary_row(mask, i);
      sums += (values.row(i).template cast<Acc>().array() * m).template cast<double>().matrix().transpose();
      counts += m.template cast<double>().matrix().transpose();
    }
    for (Index j = 0; j < values.cols(); ++j) {
      if (std::isfinite(sums[j])) continue;
      sums[j] = 0;  // a non-finite value somewhere in the column: recompute it with the exact select
      for (Index i = 0; i < values.rows(); ++i)
        if (mask(i, j) != 0) sums[j] += static_cast<double>(values(i, j));
    }
  }
}

/// The unbiased correction needs n >= 2; verl raises ValueError otherwise.
inline void require_unbiased_count(double count) {
  VERL_CHECK_ARG(count != 0, "mask: masked_var(unbiased=true) needs at least 2 valid elements, got 0 "
                             "(verl: at least one element in the mask has to be 1)");
  VERL_CHECK_ARG(count != 1, "mask: masked_var(unbiased=true) needs at least 2 valid elements, got 1 "
                             "(verl: the sum of the mask is one, which can cause a division by zero)");
}

/// Everything masked_var and masked_whiten derive from one batch.
struct MaskedMoments {
  double count = 0;
  float mean = 0;          ///< masked_mean, rounded to float32 as verl stores it
  double centered_sum = 0;  ///< sum of m*(v - mean): 0 up to rounding, still part of the gradient
  double square_sum = 0;    ///< sum of m*(v - mean)^2
  double bessel = 1;        ///< n/(n-1) when unbiased
  float var = 0;            ///< masked_var, rounded to float32
};

template <class VD, class MD>
MaskedMoments masked_moments(const Eigen::MatrixBase<VD>& values, const Eigen::MatrixBase<MD>& mask, bool unbiased) {
  const MaskedTotals totals = masked_totals(values, mask);
  MaskedMoments m;
  m.count = totals.count;
  const double denominator = masked_count_denominator(totals.count);
  m.mean = static_cast<float>(totals.sum / denominator);
  // (v - mean) in float32 as verl computes it, zeroed at masked positions (mask validated above).
  for (Index i = 0; i < values.rows(); ++i) {
    const auto d = (values.row(i).template cast<float>().array() - m.mean) * mask.row(i).template cast<float>().array();
    double row_sum = static_cast<double>(d.sum()), row_squares = static_cast<double>(d.square().sum());
    if (!std::isfinite(row_sum) || !std::isfinite(row_squares))
      masked_row_exact(values, mask, i, m.mean, row_sum, row_squares);
    m.centered_sum += row_sum;
    m.square_sum += row_squares;
  }
  double var = m.square_sum / denominator;
  if (unbiased) {
    require_unbiased_count(totals.count);
    m.bessel = static_cast<double>(static_cast<float>(totals.count) / static_cast<float>(totals.count - 1));
    var *= m.bessel;
  }
  m.var = static_cast<float>(var);
  return m;
}

inline void require_cotangent_length(std::string_view argument, Index actual, Index expected) {
  VERL_CHECK_ARG(actual == expected, "{}: expected length {} (the reduced axis), got {}", argument, expected, actual);
}

}  // namespace detail

// ---- forward --------------------------------------------------------------------------------

/// sum(where(mask, v, 0) * mask) over every element: values at masked positions never matter.
template <class VD, class MD>
double masked_sum(const Eigen::MatrixBase<VD>& values, const Eigen::MatrixBase<MD>& mask) {
  return detail::masked_totals(values, mask).sum;
}

/// masked_sum along `axis` (-1/1: one value per row, 0/-2: one per column), as float32.
template <class VD, class MD>
VectorF masked_sum(const Eigen::MatrixBase<VD>& values, const Eigen::MatrixBase<MD>& mask, int axis) {
  VectorD sums, counts;
  detail::masked_axis_totals(values, mask, detail::reduces_rows(axis), sums, counts);
  return sums.cast<float>();
}

/// masked_sum / (mask.sum() + 1e-8): 0 for an empty mask, as in verl.
template <class VD, class MD>
double masked_mean(const Eigen::MatrixBase<VD>& values, const Eigen::MatrixBase<MD>& mask) {
  const detail::MaskedTotals totals = detail::masked_totals(values, mask);
  return totals.sum / detail::masked_count_denominator(totals.count);
}

/// masked_mean along `axis` (-1/1 per row, 0/-2 per column); an empty row/column gives 0.
template <class VD, class MD>
VectorF masked_mean(const Eigen::MatrixBase<VD>& values, const Eigen::MatrixBase<MD>& mask, int axis) {
  VectorD sums, counts;
  detail::masked_axis_totals(values, mask, detail::reduces_rows(axis), sums, counts);
  VectorF out(sums.size());
  for (Index k = 0; k < sums.size(); ++k)
    out[k] = static_cast<float>(sums[k] / detail::masked_count_denominator(counts[k]));
  return out;
}

/// Masked variance around the masked mean: masked_mean((v - mean)^2); `unbiased` multiplies by
/// n/(n-1) and, as in verl, needs at least two valid elements.
template <class VD, class MD>
double masked_var(const Eigen::MatrixBase<VD>& values, const Eigen::MatrixBase<MD>& mask, bool unbiased = true) {
  return detail::masked_moments(values, mask, unbiased).var;
}

/// (v - mean) * rsqrt(var_unbiased + 1e-8) (+ mean unless shift_mean) with the statistics of
/// every valid element of the whole tensor; the result is NOT masked (padded positions hold
/// whitened values too).
template <class VD, class MD>
MatrixF masked_whiten(const Eigen::MatrixBase<VD>& values, const Eigen::MatrixBase<MD>& mask, bool shift_mean = true) {
  const detail::MaskedMoments m = detail::masked_moments(values, mask, true);
  const float inv_std = 1.0f / std::sqrt(m.var + 1e-8f);
  const float offset = shift_mean ? 0.0f : m.mean;
  MatrixF out(values.rows(), values.cols());
  for (Index i = 0; i < values.rows(); ++i)
    out.row(i).array() = (values.row(i).template cast<float>().array() - m.mean) * inv_std + offset;
  return out;
}

// ---- gradients with respect to `values` --------------------------------------------------------
// verl's where(mask, v, 0) passes the gradient only at valid positions, so every gradient below is
// exactly 0 at masked positions except masked_whiten's, whose output is not masked.

/// d(cotangent * masked_sum(v, m)) / dv = cotangent * m.
template <class MD>
MatrixF masked_sum_backward(const Eigen::MatrixBase<MD>& mask, double cotangent = 1.0) {
  detail::require_binary(mask);
  return mask.template cast<float>() * static_cast<float>(cotangent);
}

/// VJP of masked_sum along `axis`: the cotangent (one value per reduced row/column) broadcast
/// back over the reduced axis, times the mask.
template <class MD>
MatrixF masked_sum_backward(const Eigen::MatrixBase<MD>& mask, const ConstVectorRefF& cotangent, int axis) {
  const bool rows = detail::reduces_rows(axis);
  detail::require_cotangent_length("cotangent", cotangent.size(), rows ? mask.rows() : mask.cols());
  detail::require_binary(mask);
  MatrixF grad = mask.template cast<float>();
  if (rows)
    grad.array().colwise() *= cotangent.array();
  else
    grad.array().rowwise() *= cotangent.transpose().array();
  return grad;
}

/// d(cotangent * masked_mean(v, m)) / dv = cotangent * m / (sum m + 1e-8).
template <class MD>
MatrixF masked_mean_backward(const Eigen::MatrixBase<MD>& mask, double cotangent = 1.0) {
  detail::require_binary(mask);
  const double count = mask.template cast<double>().sum();
  return mask.template cast<float>() * static_cast<float>(cotangent / detail::masked_count_denominator(count));
}

/// VJP of masked_mean along `axis`: cotangent_k * m / (count_k + 1e-8) for the row/column k.
template <class MD>
MatrixF masked_mean_backward(const Eigen::MatrixBase<MD>& mask, const ConstVectorRefF& cotangent, int axis) {
  const bool rows = detail::reduces_rows(axis);
  const Index reduced = rows ? mask.rows() : mask.cols();
  detail::require_cotangent_length("cotangent", cotangent.size(), reduced);
  detail::require_binary(mask);
  const VectorD counts = rows ? VectorD(mask.template cast<double>().rowwise().sum())
                              : VectorD(mask.template cast<double>().colwise().sum().transpose());
  VectorF scale(reduced);
  for (Index k = 0; k < reduced; ++k)
    scale[k] = static_cast<float>(static_cast<double>(cotangent[k]) / detail::masked_count_denominator(counts[k]));
  MatrixF grad = mask.template cast<float>();
  if (rows)
    grad.array().colwise() *= scale.array();
  else
    grad.array().rowwise() *= scale.transpose().array();
  return grad;
}

namespace detail {
/// grad(i, j) = mask ? term(z) : 0 where a row computed as term(z) * mask came out non-finite
/// (non-finite values at masked positions must give 0, as verl's where() does).
template <class VD, class MD, class Term>
void zero_masked_non_finite(MatrixF& grad, const Eigen::MatrixBase<VD>& values, const Eigen::MatrixBase<MD>& mask,
                            Index row, const Term& term) {
  if (grad.row(row).allFinite()) return;
  for (Index j = 0; j < grad.cols(); ++j) grad(row, j) = mask(row, j) != 0 ? term(row, j) : 0.0f;
}
}  // namespace detail

/// d(cotangent * masked_var(v, m, unbiased)) / dv. With z = v - mean, D = n + 1e-8 and k the
/// Bessel factor: k * 2 m z / D directly, plus the path through the mean,
/// k * (-2 sum(m z) / D) * m / D (zero up to rounding, kept because autograd keeps it).
template <class VD, class MD>
MatrixF masked_var_backward(const Eigen::MatrixBase<VD>& values, const Eigen::MatrixBase<MD>& mask, bool unbiased = true,
                            double cotangent = 1.0) {
  const detail::MaskedMoments m = detail::masked_moments(values, mask, unbiased);
  const double denominator = detail::masked_count_denominator(m.count);
  const float direct = static_cast<float>(cotangent * m.bessel * 2.0 / denominator);
  const float through_mean = static_cast<float>(cotangent * m.bessel * (-2.0 * m.centered_sum / denominator) / denominator);
  MatrixF grad(values.rows(), values.cols());
  const auto term = [&](Index i, Index j) { return direct * (static_cast<float>(values(i, j)) - m.mean) + through_mean; };
  for (Index i = 0; i < values.rows(); ++i) {
    grad.row(i).array() = ((values.row(i).template cast<float>().array() - m.mean) * direct + through_mean) *
                          mask.row(i).template cast<float>().array();
    detail::zero_masked_non_finite(grad, values, mask, i, term);
  }
  return grad;
}

/// VJP of masked_whiten with the (B, T) `cotangent` c. With z = v - mean, r = rsqrt(var + 1e-8),
/// out = z r (+ mean): the direct term c r, the path through r (var depends on every valid z)
/// and the path through the mean, which every output element (valid or not) depends on.
template <class VD, class MD, class CD>
MatrixF masked_whiten_backward(const Eigen::MatrixBase<VD>& values, const Eigen::MatrixBase<MD>& mask,
                               const Eigen::MatrixBase<CD>& cotangent, bool shift_mean = true) {
  verl::detail::require_same_shape("cotangent", shape_of(cotangent), "values", shape_of(values));
  const detail::MaskedMoments m = detail::masked_moments(values, mask, true);
  const double denominator = detail::masked_count_denominator(m.count);
  const double r = 1.0 / std::sqrt(static_cast<double>(m.var) + 1e-8);
  // sum c and sum c z over every element (the output is not masked).
  double sum_c = 0, sum_cz = 0;
  for (Index i = 0; i < values.rows(); ++i) {
    const auto c = cotangent.row(i).template cast<float>().array();
    sum_c += static_cast<double>(c.sum());
    sum_cz += static_cast<double>((c * (values.row(i).template cast<float>().array() - m.mean)).sum());
  }
  const double grad_var = sum_cz * (-0.5 * r * r * r);
  // var = k * sum(m z^2) / D: dvar/dv_j = 2 k m_j z_j / D directly, and dvar/dmean = -2 k sum(m z) / D.
  const float var_direct = static_cast<float>(grad_var * m.bessel * 2.0 / denominator);
  double grad_mean = -r * sum_c + grad_var * m.bessel * (-2.0 * m.centered_sum) / denominator;
  if (!shift_mean) grad_mean += sum_c;
  const float mean_share = static_cast<float>(grad_mean / denominator);  // dmean/dv_j = m_j / D
  const float rf = static_cast<float>(r);
  MatrixF grad(values.rows(), values.cols());
  for (Index i = 0; i < values.rows(); ++i) {
    const auto z = values.row(i).template cast<float>().array() - m.mean;
    const auto c = cotangent.row(i).template cast<float>().array();
    // Not masked: a non-finite value anywhere is in the output and poisons sum(c z), as in verl.
    grad.row(i).array() = c * rf + (z * var_direct + mean_share) * mask.row(i).template cast<float>().array();
  }
  return grad;
}

}  // namespace verl::algo
