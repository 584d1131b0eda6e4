// Small CUDA utilities of the advantage / reduction / loss kernels (errors: cuda_check.cuh's
// VERL_CUDA_CHECK): caller-provided temporary storage carved into aligned pieces (cub's two-phase convention), and
// warp-level reductions in double (the CPU references accumulate long sums in double).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "verl/core/error.hpp"
#include "verl/kernels/detail/cuda_check.cuh"

namespace verl::kernels::detail {

/// Carves one caller-provided buffer into aligned pieces. Used twice per call, as cub does: with
/// base == nullptr it only adds up the bytes needed (the size query), then for real.
class TempCarver {
 public:
  explicit TempCarver(void* base) : base_(static_cast<unsigned char*>(base)) {}

  template <class T>
  T* take(std::size_t count) {
    offset_ = (offset_ + kAlign - 1) / kAlign * kAlign;
    T* p = base_ == nullptr ? nullptr : reinterpret_cast<T*>(base_ + offset_);
    offset_ += count * sizeof(T);
    return p;
  }
  std::size_t bytes() const { return (offset_ + kAlign - 1) / kAlign * kAlign; }
  bool querying() const { return base_ == nullptr; }

  /// The two-phase call's checkpoint, once every piece is taken (cub's size query, kept out of
  /// each entry point): on the size query, writes the bytes needed into `temp_bytes` and returns
  /// true, and the caller returns; on the real call, checks that the caller's buffer holds them.
  [[nodiscard]] bool answer_size_query(std::size_t& temp_bytes) const {
    if (querying()) {
      temp_bytes = bytes();
      return true;
    }
    VERL_CHECK_ARG(temp_bytes >= bytes(), "temp_bytes: expected at least {} (the size query), got {}", bytes(),
                   temp_bytes);
    return false;
  }

 private:
  static constexpr std::size_t kAlign = 256;  // what cudaMalloc guarantees, enough for any vector load
  unsigned char* base_;
  std::size_t offset_ = 0;
};

/// Blocks for a grid-stride loop over n items, capped (the loop covers the rest).
inline unsigned grid_for(std::int64_t n, int threads, unsigned cap = 65535u * 8u) {
  const std::int64_t blocks = (n + threads - 1) / threads;
  if (blocks < 1) return 1;
  return blocks > static_cast<std::int64_t>(cap) ? cap : static_cast<unsigned>(blocks);
}

__device__ __forceinline__ double warp_sum(double v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}
__device__ __forceinline__ long long warp_sum(long long v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}
__device__ __forceinline__ int warp_min(int v) {
  for (int offset = 16; offset > 0; offset >>= 1) v = min(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

/// torch's where(mask, x, 0): exactly 0 where masked, whatever x is (inf and NaN included).
__device__ __forceinline__ float where_valid(float mask, float x) { return mask != 0.0f ? x : 0.0f; }

}  // namespace verl::kernels::detail
