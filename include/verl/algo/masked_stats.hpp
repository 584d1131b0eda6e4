// verl's masked statistics (verl/utils/torch_functional.py): masked_sum, masked_mean, masked_var
// and masked_whiten over a (B, T) batch and a 0/1 mask, their axis variants, and the gradient
// (vector-Jacobian product) of each with respect to `values`, as verl's autograd computes it.
//
// verl works in float32; here long sums accumulate in double and the quantities verl rounds to
// float32 before reusing them (the mean, the variance) are rounded the same way.
#pragma once

#include <cmath>
#include <cstdint>
#include <string_view>

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

/// Reads one mask element as 0/1, rejecting anything else (verl slices masks from
/// attention_mask; another value would silently reweight the statistic).
template <class MaskScalar>
VERL_FORCE_INLINE bool mask_bit(MaskScalar m, Index i, Index j) {
  if (m == MaskScalar(0)) return false;
  if (m == MaskScalar(1)) return true;
  verl::detail::throw_invalid_argument("mask: expected a 0/1 mask, got {} at ({}, {})", static_cast<double>(m), i, j);
}

struct MaskedTotals {
  double sum = 0;    ///< sum of values at valid positions
  double count = 0;  ///< number of valid positions
};

/// Sum and count of one row; four independent accumulators keep the additions pipelined (a
/// single chain would be bound by the add latency).
template <class VD, class MD>
MaskedTotals masked_row_totals(const Eigen::MatrixBase<VD>& values, const Eigen::MatrixBase<MD>& mask, Index row) {
  double s[4] = {0, 0, 0, 0};
  Index n = 0;
  const Index cols = values.cols();
  Index j = 0;
  for (; j + 4 <= cols; j += 4) {
    for (int k = 0; k < 4; ++k) {
      if (mask_bit(mask(row, j + k), row, j + k)) {
        s[k] += static_cast<double>(values(row, j + k));
        ++n;
      }
    }
  }
  for (; j < cols; ++j) {
    if (mask_bit(mask(row, j), row, j)) {
      s[0] += static_cast<double>(values(row, j));
      ++n;
    }
  }
  return {(s[0] + s[1]) + (s[2] + s[3]), static_cast<double>(n)};
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
    sums.setZero(values.cols());
    counts.setZero(values.cols());
    for (Index i = 0; i < values.rows(); ++i)
      for (Index j = 0; j < values.cols(); ++j)
        if (mask_bit(mask(i, j), i, j)) {
          sums[j] += static_cast<double>(values(i, j));
          counts[j] += 1;
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
  double c[4] = {0, 0, 0, 0}, s[4] = {0, 0, 0, 0};
  for (Index i = 0; i < values.rows(); ++i)
    for (Index j = 0; j < values.cols(); ++j)
      if (mask(i, j) != 0) {
        const double d = static_cast<double>(static_cast<float>(values(i, j)) - m.mean);
        c[j & 3] += d;
        s[j & 3] += d * d;
      }
  m.centered_sum = (c[0] + c[1]) + (c[2] + c[3]);
  m.square_sum = (s[0] + s[1]) + (s[2] + s[3]);
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
  MatrixF out(values.rows(), values.cols());
  for (Index i = 0; i < values.rows(); ++i)
    for (Index j = 0; j < values.cols(); ++j) {
      float w = (static_cast<float>(values(i, j)) - m.mean) * inv_std;
      if (!shift_mean) w += m.mean;
      out(i, j) = w;
    }
  return out;
}

// ---- gradients with respect to `values` --------------------------------------------------------
// verl's where(mask, v, 0) passes the gradient only at valid positions, so every gradient below is
// exactly 0 at masked positions except masked_whiten's, whose output is not masked.

/// d(cotangent * masked_sum(v, m)) / dv = cotangent * m.
template <class MD>
MatrixF masked_sum_backward(const Eigen::MatrixBase<MD>& mask, double cotangent = 1.0) {
  MatrixF grad(mask.rows(), mask.cols());
  for (Index i = 0; i < mask.rows(); ++i)
    for (Index j = 0; j < mask.cols(); ++j)
      grad(i, j) = detail::mask_bit(mask(i, j), i, j) ? static_cast<float>(cotangent) : 0.0f;
  return grad;
}

/// VJP of masked_sum along `axis`: the cotangent (one value per reduced row/column) broadcast
/// back over the reduced axis, times the mask.
template <class MD>
MatrixF masked_sum_backward(const Eigen::MatrixBase<MD>& mask, const ConstVectorRefF& cotangent, int axis) {
  const bool rows = detail::reduces_rows(axis);
  detail::require_cotangent_length("cotangent", cotangent.size(), rows ? mask.rows() : mask.cols());
  MatrixF grad(mask.rows(), mask.cols());
  for (Index i = 0; i < mask.rows(); ++i)
    for (Index j = 0; j < mask.cols(); ++j)
      grad(i, j) = detail::mask_bit(mask(i, j), i, j) ? cotangent[rows ? i : j] : 0.0f;
  return grad;
}

/// d(cotangent * masked_mean(v, m)) / dv = cotangent * m / (sum m + 1e-8).
template <class MD>
MatrixF masked_mean_backward(const Eigen::MatrixBase<MD>& mask, double cotangent = 1.0) {
  double count = 0;
  for (Index i = 0; i < mask.rows(); ++i)
    for (Index j = 0; j < mask.cols(); ++j) count += detail::mask_bit(mask(i, j), i, j) ? 1 : 0;
  const float g = static_cast<float>(cotangent / detail::masked_count_denominator(count));
  MatrixF grad(mask.rows(), mask.cols());
  for (Index i = 0; i < mask.rows(); ++i)
    for (Index j = 0; j < mask.cols(); ++j) grad(i, j) = mask(i, j) != 0 ? g : 0.0f;
  return grad;
}

/// VJP of masked_mean along `axis`: cotangent_k * m / (count_k + 1e-8) for the row/column k.
template <class MD>
MatrixF masked_mean_backward(const Eigen::MatrixBase<MD>& mask, const ConstVectorRefF& cotangent, int axis) {
  const bool rows = detail::reduces_rows(axis);
  const Index reduced = rows ? mask.rows() : mask.cols();
  detail::require_cotangent_length("cotangent", cotangent.size(), reduced);
  VectorD counts = VectorD::Zero(reduced);
  for (Index i = 0; i < mask.rows(); ++i)
    for (Index j = 0; j < mask.cols(); ++j)
      if (detail::mask_bit(mask(i, j), i, j)) counts[rows ? i : j] += 1;
  VectorD scale(reduced);
  for (Index k = 0; k < reduced; ++k)
    scale[k] = static_cast<double>(cotangent[k]) / detail::masked_count_denominator(counts[k]);
  MatrixF grad(mask.rows(), mask.cols());
  for (Index i = 0; i < mask.rows(); ++i)
    for (Index j = 0; j < mask.cols(); ++j) grad(i, j) = mask(i, j) != 0 ? static_cast<float>(scale[rows ? i : j]) : 0.0f;
  return grad;
}

/// d(cotangent * masked_var(v, m, unbiased)) / dv. With z = v - mean, D = n + 1e-8 and k the
/// Bessel factor: k * 2 m z / D directly, plus the path through the mean,
/// k * (-2 sum(m z) / D) * m / D (zero up to rounding, kept because autograd keeps it).
template <class VD, class MD>
MatrixF masked_var_backward(const Eigen::MatrixBase<VD>& values, const Eigen::MatrixBase<MD>& mask, bool unbiased = true,
                            double cotangent = 1.0) {
  const detail::MaskedMoments m = detail::masked_moments(values, mask, unbiased);
  const double denominator = detail::masked_count_denominator(m.count);
  const double direct = cotangent * m.bessel * 2.0 / denominator;
  const double through_mean = cotangent * m.bessel * (-2.0 * m.centered_sum / denominator) / denominator;
  MatrixF grad(values.rows(), values.cols());
  for (Index i = 0; i < values.rows(); ++i)
    for (Index j = 0; j < values.cols(); ++j) {
      if (mask(i, j) != 0) {
        const double z = static_cast<double>(static_cast<float>(values(i, j)) - m.mean);
        grad(i, j) = static_cast<float>(direct * z + through_mean);
      } else {
        grad(i, j) = 0.0f;
      }
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
  // Reductions of the cotangent: sum c and sum c z over every element.
  double sum_c = 0, sum_cz = 0;
  for (Index i = 0; i < values.rows(); ++i)
    for (Index j = 0; j < values.cols(); ++j) {
      const double c = static_cast<double>(cotangent(i, j));
      sum_c += c;
      sum_cz += c * static_cast<double>(static_cast<float>(values(i, j)) - m.mean);
    }
  const double grad_var = sum_cz * (-0.5 * r * r * r);
  // var = k * sum(m z^2) / D: dvar/dv_j = 2 k m_j z_j / D directly, and dvar/dmean = -2 k sum(m z) / D.
  const double var_direct = grad_var * m.bessel * 2.0 / denominator;
  double grad_mean = -r * sum_c + grad_var * m.bessel * (-2.0 * m.centered_sum) / denominator;
  if (!shift_mean) grad_mean += sum_c;
  const double mean_share = grad_mean / denominator;  // dmean/dv_j = m_j / D
  MatrixF grad(values.rows(), values.cols());
  for (Index i = 0; i < values.rows(); ++i)
    for (Index j = 0; j < values.cols(); ++j) {
      double g = static_cast<double>(cotangent(i, j)) * r;
      if (mask(i, j) != 0) {
        const double z = static_cast<double>(static_cast<float>(values(i, j)) - m.mean);
        g += var_direct * z + mean_share;
      }
      grad(i, j) = static_cast<float>(g);
    }
  return grad;
}

}  // namespace verl::algo
