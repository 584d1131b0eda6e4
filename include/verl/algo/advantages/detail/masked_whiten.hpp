// verl's masked_whiten (verl/utils/torch_functional.py) over a whole (B, T) batch, in place, with
// torch's float32 rounding at every step. GAE and REINFORCE++ accumulate the masked sum while they
// produce the values, so whitening costs two more passes instead of three. (verl::algo::
// masked_whiten in masked_stats.hpp computes the same numbers to within float32 rounding; this one
// is fused and never copies the batch.)
#pragma once

#include <cmath>
#include <cstdint>

#include "verl/algo/advantages/detail/row_ops.hpp"
#include "verl/core/error.hpp"
#include "verl/core/tensor.hpp"

namespace verl::algo::detail {

/// Masked sum and count of the values to whiten, accumulated row by row by their producer.
struct MaskedMoments {
  double sum = 0;
  std::int64_t count = 0;

  /// Adds one row: sum += where(m, v, 0) (values under a 0 never count, as in verl).
  void add_row(const float* values, const float* mask, Index n) {
    double lane[4] = {0, 0, 0, 0};
    Index valid = 0;
    Index j = 0;
    for (; j + 4 <= n; j += 4)
      for (int k = 0; k < 4; ++k) {
        const bool on = mask[j + k] != 0.0f;
        lane[k] += on ? static_cast<double>(values[j + k]) : 0.0;
        valid += on ? 1 : 0;
      }
    for (; j < n; ++j) {
      const bool on = mask[j] != 0.0f;
      lane[0] += on ? static_cast<double>(values[j]) : 0.0;
      valid += on ? 1 : 0;
    }
    sum += (lane[0] + lane[1]) + (lane[2] + lane[3]);
    count += valid;
  }
};

/// What to do with masked positions after whitening.
enum class MaskedPositions {
  whitened,  ///< keep (v - mean) * rsqrt(var + 1e-8) there too (GAE)
  zeroed,    ///< multiply by the mask afterwards (REINFORCE++, verl's `masked_whiten(...) * mask`)
};

/// out <- (values - mean) * rsqrt(var_unbiased + 1e-8) over the valid tokens of the whole batch
/// (`out` may be `values` itself). verl's masked_var raises for fewer than two valid tokens; so do we.
inline void masked_whiten(const MatrixF& values, const ConstMatrixRefF& mask, const MaskedMoments& moments,
                          MaskedPositions masked_positions, MatrixF& out) {
  VERL_CHECK_ARG(moments.count >= 2,
                 "response_mask: whitening needs at least 2 valid tokens in the batch (verl's masked_var raises), "
                 "got {}",
                 moments.count);
  const Index rows = values.rows(), cols = values.cols();
  // masked_mean: float32 sum / (float32 count + 1e-8).
  const float count = static_cast<float>(moments.count);
  const float mean = static_cast<float>(moments.sum) / (count + 1e-8f);

  // masked_var: the mean of the float32 squares (v - mean)^2, times the float32 Bessel factor.
  double squares = 0;
  for (Index i = 0; i < rows; ++i) {
    const float* v = values.data() + i * cols;
    const float* m = row_of(mask, i);
    double lane[4] = {0, 0, 0, 0};
    Index j = 0;
    for (; j + 4 <= cols; j += 4)
      for (int k = 0; k < 4; ++k) {
        const float centered = v[j + k] - mean;
        lane[k] += m[j + k] != 0.0f ? static_cast<double>(centered * centered) : 0.0;
      }
    for (; j < cols; ++j) {
      const float centered = v[j] - mean;
      lane[0] += m[j] != 0.0f ? static_cast<double>(centered * centered) : 0.0;
    }
    squares += (lane[0] + lane[1]) + (lane[2] + lane[3]);
  }
  const float bessel = count / static_cast<float>(moments.count - 1);
  const float variance = (static_cast<float>(squares) / (count + 1e-8f)) * bessel;
  const float inv_std = 1.0f / std::sqrt(variance + 1e-8f);  // torch.rsqrt on CPU is 1/sqrt in float32

  out.resize(rows, cols);
  for (Index i = 0; i < rows; ++i) {
    const float* v = values.data() + i * cols;
    float* w = row_of(out, i);
    if (masked_positions == MaskedPositions::zeroed) {
      const float* m = row_of(mask, i);
      for (Index j = 0; j < cols; ++j) w[j] = ((v[j] - mean) * inv_std) * m[j];
    } else {
      for (Index j = 0; j < cols; ++j) w[j] = (v[j] - mean) * inv_std;
    }
  }
}

}  // namespace verl::algo::detail
