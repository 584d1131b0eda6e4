// Row-wise building blocks shared by the advantage estimators: the fused 0/1 mask check, the
// response scores (torch's float32 row sums) and the `scalar_i * mask` broadcast that every
// outcome-reward estimator ends with.
#pragma once

#include <cmath>
#include <cstdint>
#include <string_view>

#include "verl/algo/advantage_estimator.hpp"
#include "verl/algo/advantages/detail/output_buffers.hpp"
#include "verl/algo/advantages/detail/torch_sum.hpp"
#include "verl/algo/detail/rows.hpp"  // row_of, shared with the other algo kernels
#include "verl/core/error.hpp"
#include "verl/core/tensor.hpp"

namespace verl::algo::detail {

[[noreturn]] inline void throw_non_binary_mask(std::string_view argument, const float* row, Index n, Index i) {
  for (Index j = 0; j < n; ++j)
    if (!(row[j] == 0.0f || row[j] == 1.0f))
      verl::detail::throw_invalid_argument("{}: expected a 0/1 mask, got {} at ({}, {})", argument,
                                           static_cast<double>(row[j]), i, j);
  verl::detail::throw_invalid_argument("{}: expected a 0/1 mask in row {}", argument, i);
}

/// Throws unless row `i` of the mask is 0/1. Branch-free so that it vectorises: the estimators
/// call it on a row they are about to read anyway, which keeps the check nearly free.
inline void require_binary_mask_row(std::string_view argument, const float* row, Index n, Index i) {
  unsigned bad = 0;
  for (Index j = 0; j < n; ++j) bad |= static_cast<unsigned>(row[j] != 0.0f) & static_cast<unsigned>(row[j] != 1.0f);
  if (bad != 0) [[unlikely]]
    throw_non_binary_mask(argument, row, n, i);
}

/// Number of valid tokens in a mask row (verl's response_mask.sum(-1)).
inline Index row_count(const float* mask, Index n) {
  Index count = 0;
  for (Index j = 0; j < n; ++j) count += mask[j] != 0.0f ? 1 : 0;
  return count;
}

/// verl's `scores = token_level_rewards.sum(dim=-1)`: every position counts, padding included,
/// summed in torch's float32 order.
inline VectorF response_scores(const ConstMatrixRefF& rewards) {
  VectorF scores(rewards.rows());
  for (Index i = 0; i < rewards.rows(); ++i) scores[i] = torch_sum(row_of(rewards, i), rewards.cols());
  return scores;
}

/// verl's `scalars.unsqueeze(-1) * response_mask` into `out.advantages` and, for the estimators
/// that return their advantages as returns too, into `out.returns` in the same pass. Checks on the
/// way that the mask is 0/1 (the check rides on loads the broadcast makes anyway).
inline void broadcast_over_mask(const VectorF& per_row, const ConstMatrixRefF& mask, AdvantageResult& out,
                                bool returns_equal_advantages = true) {
  const Index rows = mask.rows(), cols = mask.cols();
  prepare_output(out.advantages, rows, cols);
  if (returns_equal_advantages) prepare_output(out.returns, rows, cols);
  for (Index i = 0; i < rows; ++i) {
    const float* m = row_of(mask, i);
    const float a = per_row[i];
    float* adv = row_of(out.advantages, i);
    unsigned bad = 0;
    if (returns_equal_advantages) {
      float* ret = row_of(out.returns, i);
      for (Index j = 0; j < cols; ++j) {
        bad |= static_cast<unsigned>(m[j] != 0.0f) & static_cast<unsigned>(m[j] != 1.0f);
        const float v = a * m[j];
        adv[j] = v;
        ret[j] = v;
      }
    } else {
      for (Index j = 0; j < cols; ++j) {
        bad |= static_cast<unsigned>(m[j] != 0.0f) & static_cast<unsigned>(m[j] != 1.0f);
        adv[j] = a * m[j];
      }
    }
    if (bad != 0) [[unlikely]]
      throw_non_binary_mask("response_mask", m, cols, i);
  }
}

/// out[t] = sum_{s >= t} r[s] * m[s] (verl's `(r * m).flip(-1).cumsum(-1).flip(-1)`): torch's CPU
/// cumsum accumulates float32 in double and rounds each partial sum.
inline void reverse_cumsum_masked(const float* r, const float* m, float* out, Index n) {
  double running = 0;
  for (Index t = n - 1; t >= 0; --t) {
    running += static_cast<double>(r[t] * m[t]);
    out[t] = static_cast<float>(running);
  }
}

}  // namespace verl::algo::detail
