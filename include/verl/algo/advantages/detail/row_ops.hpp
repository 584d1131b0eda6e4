// Row-wise building blocks shared by the advantage estimators: the fused 0/1 mask check, the
// response scores (torch's float32 row sums) and the `scalar_i * mask` broadcast that every
// outcome-reward estimator ends with.
#pragma once

#include <atomic>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string_view>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "verl/algo/advantages/estimator.hpp"
#include "verl/algo/detail/output_buffers.hpp"
#include "verl/algo/advantages/detail/torch_sum.hpp"
#include "verl/algo/detail/parallel_rows.hpp"
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

/// where(mask != 0, x, 0), written with bit operations: a float compare feeding a `?:` keeps GCC
/// from vectorising the loop around it, a bit mask does not. (Also keeps a NaN or inf at a masked
/// position out, as verl's torch.where does.)
inline float where_valid(float mask, float x) {
  const std::uint32_t keep = 0u - static_cast<std::uint32_t>(mask != 0.0f);
  return std::bit_cast<float>(std::bit_cast<std::uint32_t>(x) & keep);
}

/// where(mask != 0, if_valid, otherwise), branch-free like where_valid.
inline float select_valid(float mask, float if_valid, float otherwise) {
  const std::uint32_t keep = 0u - static_cast<std::uint32_t>(mask != 0.0f);
  return std::bit_cast<float>((std::bit_cast<std::uint32_t>(if_valid) & keep) |
                              (std::bit_cast<std::uint32_t>(otherwise) & ~keep));
}

/// Number of valid tokens in a mask row (verl's response_mask.sum(-1)).
inline Index row_count(const float* mask, Index n) {
  Index count = 0;
  for (Index j = 0; j < n; ++j) count += mask[j] != 0.0f ? 1 : 0;
  return count;
}

/// verl's `scores = token_level_rewards.sum(dim=-1)`: every position counts, padding included,
/// summed in torch's float32 order (rows split over threads for large batches).
inline VectorF response_scores(const ConstMatrixRefF& rewards) {
  VectorF scores(rewards.rows());
  parallel_rows(rewards.rows(), rewards.cols(), [&](Index begin, Index end) {
    for (Index i = begin; i < end; ++i) scores[i] = torch_sum(row_of(rewards, i), rewards.cols());
  });
  return scores;
}

/// Reused outputs at least this big bypass the caches on their way to memory (non-temporal
/// stores): they could not stay cached anyway, and skipping the read-for-ownership saves a third
/// of the traffic.
inline constexpr std::size_t kStreamingStoreBytes = std::size_t{32} << 20;

/// One row of broadcast_over_mask: out = a * m, returning nonzero when the mask row holds
/// something other than 0/1.
inline unsigned broadcast_row(float a, const float* m, float* out, Index cols) {
  unsigned bad = 0;
  for (Index j = 0; j < cols; ++j) {
    bad |= static_cast<unsigned>(m[j] != 0.0f) & static_cast<unsigned>(m[j] != 1.0f);
    out[j] = a * m[j];
  }
  return bad;
}

#if defined(__SSE2__)
/// broadcast_row with non-temporal stores; `out` 16-byte aligned and cols a multiple of 4.
inline unsigned broadcast_row_streaming(float a, const float* m, float* out, Index cols) {
  const __m128 scale = _mm_set1_ps(a), zero = _mm_setzero_ps(), one = _mm_set1_ps(1.0f);
  __m128 bad = _mm_setzero_ps();
  for (Index j = 0; j < cols; j += 4) {
    const __m128 mask = _mm_loadu_ps(m + j);
    bad = _mm_or_ps(bad, _mm_and_ps(_mm_cmpneq_ps(mask, zero), _mm_cmpneq_ps(mask, one)));
    _mm_stream_ps(out + j, _mm_mul_ps(scale, mask));
  }
  return static_cast<unsigned>(_mm_movemask_ps(bad));
}
#endif

/// verl's `scalars.unsqueeze(-1) * response_mask` into `out.advantages`, which its returns then
/// share: every estimator ending with this broadcast returns one tensor twice in verl. Checks on
/// the way that the mask is 0/1 (the check rides on loads the broadcast makes anyway).
inline void broadcast_over_mask(const VectorF& per_row, const ConstMatrixRefF& mask, AdvantageResult& out) {
  const Index rows = mask.rows(), cols = mask.cols();
  out.share_returns();
  // Non-temporal stores pay off only over reused storage: freshly allocated pages were just
  // zeroed by the kernel and are still cached, and plain stores into them measured ~25% faster.
  const bool reused = out.advantages.rows() == rows && out.advantages.cols() == cols;
  prepare_output(out.advantages, rows, cols);
  bool streaming = false;
  (void)reused;  // streaming is x86-only
#if defined(__SSE2__)
  const std::size_t bytes = static_cast<std::size_t>(rows * cols) * sizeof(float);
  streaming = reused && bytes >= kStreamingStoreBytes && cols % 4 == 0 &&
              reinterpret_cast<std::uintptr_t>(out.advantages.data()) % 16 == 0;
#endif
  // Rows split over threads (first-touch page faults of fresh outputs included); each block
  // notes its first row with a non-0/1 mask and the first such row overall is reported, as a
  // sequential pass would.
  std::atomic<Index> first_bad{rows};
  parallel_rows(rows, cols, [&](Index begin, Index end) {
    Index bad_row = rows;
    for (Index i = begin; i < end; ++i) {
      const float* m = row_of(mask, i);
      float* adv = row_of(out.advantages, i);
      unsigned bad = 0;
#if defined(__SSE2__)
      if (streaming)
        bad = broadcast_row_streaming(per_row[i], m, adv, cols);
      else
#endif
        bad = broadcast_row(per_row[i], m, adv, cols);
      if (bad != 0 && bad_row == rows) bad_row = i;
    }
#if defined(__SSE2__)
    if (streaming) _mm_sfence();  // order this thread's streamed stores before anyone reads them
#endif
    Index seen = first_bad.load();
    while (bad_row < seen && !first_bad.compare_exchange_weak(seen, bad_row)) {
    }
  });
  const Index bad_row = first_bad.load();
  if (bad_row < rows) [[unlikely]]
    throw_non_binary_mask("response_mask", row_of(mask, bad_row), cols, bad_row);
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
