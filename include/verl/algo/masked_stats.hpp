// verl's masked statistics (verl/utils/torch_functional.py): masked_sum, masked_mean,
// masked_var and masked_whiten over a (B, T) batch and a 0/1 mask.
#pragma once

#include <cmath>

#include "verl/core/error.hpp"
#include "verl/core/tensor.hpp"

namespace verl::algo {

/// sum(where(mask, v, 0) * mask): values at masked positions never matter.
template <class VD, class MD>
double masked_sum(const Eigen::MatrixBase<VD>& values, const Eigen::MatrixBase<MD>& mask) {
  verl::detail::require_same_shape("mask", shape_of(mask), "values", shape_of(values));
  double sum = 0;
  for (Index i = 0; i < values.rows(); ++i)
    for (Index j = 0; j < values.cols(); ++j) {
      const double m = static_cast<double>(mask(i, j));
      if (m != 0) sum += static_cast<double>(values(i, j)) * m;
    }
  return sum;
}

/// masked_sum / (mask.sum() + 1e-8): 0 for an empty mask, as in verl.
template <class VD, class MD>
double masked_mean(const Eigen::MatrixBase<VD>& values, const Eigen::MatrixBase<MD>& mask) {
  const double count = mask.template cast<double>().sum();
  return masked_sum(values, mask) / static_cast<double>(static_cast<float>(count) + 1e-8f);
}

/// Masked variance around the masked mean; `unbiased` multiplies by n/(n-1) and, as in verl,
/// needs at least two valid elements.
template <class VD, class MD>
double masked_var(const Eigen::MatrixBase<VD>& values, const Eigen::MatrixBase<MD>& mask, bool unbiased = true) {
  const double mean = static_cast<float>(masked_mean(values, mask));
  const double count = mask.template cast<double>().sum();
  double sq = 0;
  for (Index i = 0; i < values.rows(); ++i)
    for (Index j = 0; j < values.cols(); ++j) {
      const double m = static_cast<double>(mask(i, j));
      if (m != 0) {
        const double d = static_cast<double>(values(i, j)) - mean;
        sq += d * d * m;
      }
    }
  double var = sq / static_cast<double>(static_cast<float>(count) + 1e-8f);
  if (unbiased) {
    VERL_CHECK_ARG(count != 0, "mask: masked_var(unbiased=true) needs at least 2 valid elements, got 0");
    VERL_CHECK_ARG(count != 1, "mask: masked_var(unbiased=true) needs at least 2 valid elements, got 1");
    var *= count / (count - 1);
  }
  return var;
}

/// (v - mean) * rsqrt(var_unbiased + 1e-8) (+ mean unless shift_mean) over every valid element
/// of the whole tensor; the result is NOT masked (padded positions hold whitened zeros).
template <class VD, class MD>
MatrixF masked_whiten(const Eigen::MatrixBase<VD>& values, const Eigen::MatrixBase<MD>& mask, bool shift_mean = true) {
  const float mean = static_cast<float>(masked_mean(values, mask));
  const float var = static_cast<float>(masked_var(values, mask, true));
  const float inv_std = 1.0f / std::sqrt(var + 1e-8f);
  MatrixF out(values.rows(), values.cols());
  for (Index i = 0; i < values.rows(); ++i)
    for (Index j = 0; j < values.cols(); ++j) {
      float w = (static_cast<float>(values(i, j)) - mean) * inv_std;
      if (!shift_mean) w += mean;
      out(i, j) = w;
    }
  return out;
}

}  // namespace verl::algo
