// verl's masked_whiten (verl/utils/torch_functional.py) over a whole (B, T) batch with torch's
// float32 rounding at every step, including the order of its sums. GAE and REINFORCE++ feed the
// masked sum while they produce the values, so whitening costs two more passes, never a copy.
// (verl::algo::masked_whiten in masked_stats.hpp agrees to float32 rounding; this one is fused
// and reproduces torch's sums exactly, which matters when the batch's spread is tiny.)
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "verl/algo/advantages/detail/row_ops.hpp"
#include "verl/algo/advantages/detail/torch_sum.hpp"
#include "verl/core/error.hpp"
#include "verl/core/tensor.hpp"

namespace verl::algo::detail {

/// verl's masked_sum(values, mask) over the whole batch, `(where(mask, v, 0) * mask).sum()`, and
/// the number of valid tokens, accumulated row by row in batch order.
class MaskedBatchSum {
 public:
  MaskedBatchSum(Index rows, Index cols) : sum_(rows * cols), masked_row_(static_cast<std::size_t>(cols)) {}

  void add_row(const float* values, const float* mask) {
    const auto cols = static_cast<Index>(masked_row_.size());
    float* masked = masked_row_.data();
    for (Index j = 0; j < cols; ++j) masked[j] = where_valid(mask[j], values[j]);
    sum_.add(masked, cols);
    count_ += row_count(mask, cols);
  }

  float sum() const { return sum_.result(); }
  std::int64_t count() const { return count_; }

 private:
  TorchFloatSum sum_;
  std::vector<float> masked_row_;
  std::int64_t count_ = 0;
};

/// What to do with masked positions after whitening.
enum class MaskedPositions {
  whitened,  ///< keep (v - mean) * rsqrt(var + 1e-8) there too (GAE)
  zeroed,    ///< multiply by the mask afterwards (REINFORCE++: verl's `masked_whiten(...) * mask`)
};

/// out <- (values - mean) * rsqrt(var_unbiased + 1e-8) with the mean and variance of the valid
/// tokens of the whole batch (`out` may be `values`). `batch_sum` holds masked_sum(values, mask).
/// verl's masked_var raises for fewer than two valid tokens; so do we.
inline void masked_whiten(const MatrixF& values, const ConstMatrixRefF& mask, const MaskedBatchSum& batch_sum,
                          MaskedPositions masked_positions, MatrixF& out) {
  const std::int64_t valid = batch_sum.count();
  VERL_CHECK_ARG(valid >= 2,
                 "response_mask: whitening needs at least 2 valid tokens in the batch (verl's masked_var raises), "
                 "got {}",
                 valid);
  const Index rows = values.rows(), cols = values.cols();
  // masked_mean: masked_sum / (mask.sum() + 1e-8), in float32.
  const float count = static_cast<float>(valid);
  const float mean = batch_sum.sum() / (count + 1e-8f);

  // masked_var: masked_mean((v - mean)^2) times the Bessel factor count / (count - 1), in float32.
  TorchFloatSum squares(rows * cols);
  std::vector<float> masked_row(static_cast<std::size_t>(cols));
  for (Index i = 0; i < rows; ++i) {
    const float* v = values.data() + i * cols;
    const float* m = row_of(mask, i);
    float* masked = masked_row.data();
    for (Index j = 0; j < cols; ++j) {
      const float centered = v[j] - mean;
      masked[j] = where_valid(m[j], centered * centered);
    }
    squares.add(masked, cols);
  }
  const float bessel = count / static_cast<float>(valid - 1);
  const float variance = (squares.result() / (count + 1e-8f)) * bessel;
  const float inv_std = 1.0f / std::sqrt(variance + 1e-8f);  // torch.rsqrt on CPU: 1/sqrt in float32

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
