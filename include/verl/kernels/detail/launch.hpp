// Launch shapes shared by the kernels, as plain host functions (g++-compilable, tested on the
// host): how many threads a row-per-block kernel uses for a row of V elements, and the batch-shape
// check of every (B, T) entry point.
#pragma once

#include <algorithm>
#include <cstdint>

#include "verl/config.hpp"
#include "verl/core/error.hpp"

namespace verl::kernels::detail {

inline constexpr int warp_size = 32;
/// Upper bound of the block size of every row kernel here (shared scratch is sized for it).
inline constexpr int max_block_threads = 1024;

template <class T>
VERL_HOST_DEVICE constexpr T ceil_div(T a, T b) {
  return (a + b - 1) / b;
}

/// Elements one 16-byte vector load carries.
template <class Scalar>
VERL_HOST_DEVICE constexpr int elements_per_vector() {
  return static_cast<int>(16 / sizeof(Scalar));
}

/// Threads for one block per row of `vocab` elements of `element_bytes` bytes: enough 16-byte
/// vectors per thread (at least `min_vectors_per_thread`) that the loop, not the reduction,
/// dominates; a whole number of warps; at least one warp, at most `max_threads` (a multiple of
/// 32). A row of V = 151936 bf16 gets `max_threads`; V = 1 gets one warp.
inline constexpr int row_block_threads(std::int64_t vocab, int element_bytes, int max_threads,
                                       int min_vectors_per_thread = 4) {
  const std::int64_t vectors = ceil_div<std::int64_t>(std::max<std::int64_t>(vocab, 1) * element_bytes, 16);
  const std::int64_t wanted = ceil_div<std::int64_t>(vectors, min_vectors_per_thread);
  const std::int64_t warps = std::clamp<std::int64_t>(ceil_div<std::int64_t>(wanted, warp_size), 1,
                                                      std::max(1, max_threads / warp_size));
  return static_cast<int>(warps * warp_size);
}

/// Elements before the first 16-byte boundary at or after `address` (which is aligned to the
/// element size), capped at `count`: the scalar head of a vectorized row.
VERL_HOST_DEVICE inline constexpr std::int64_t misaligned_head(std::uintptr_t address, int element_bytes, std::int64_t count) {
  const std::uintptr_t offset = address % 16;
  const std::int64_t head = offset == 0 ? 0 : static_cast<std::int64_t>((16 - offset) / static_cast<std::uintptr_t>(element_bytes));
  return std::min(head, count);
}

}  // namespace verl::kernels::detail

namespace verl::kernels {

/// Checks shared by every host entry point of the (B, T) kernels: sizes are non-negative and fit
/// the kernels' 32-bit row indices and in-group offsets.
inline void check_batch_shape(std::int64_t rows, std::int64_t cols) {
  VERL_CHECK_ARG(rows >= 0, "rows: expected >= 0, got {}", rows);
  VERL_CHECK_ARG(cols >= 0, "cols: expected >= 0, got {}", cols);
  VERL_CHECK_ARG(rows <= (std::int64_t{1} << 31) - 1, "rows: expected < 2^31 (32-bit row indices), got {}", rows);
}

}  // namespace verl::kernels
