// verl's small tensor helpers on CUDA (CPU references: verl::algo::gather_from_labels,
// clip_by_value and get_response_mask in verl/algo/functional.hpp): gathering the label's entry
// of each row, an element-wise clamp between two tensors with torch's NaN propagation, and the
// response mask of a rollout (1 up to and including the first EOS of each row).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "verl/core/error.hpp"
#include "verl/kernels/detail/device_utils.cuh"
#include "verl/kernels/detail/cuda_check.cuh"
#include "verl/kernels/detail/launch.hpp"

namespace verl::kernels {

namespace detail {

inline constexpr int kFunctionalThreads = 256;

template <class Scalar>
__global__ void gather_from_labels_kernel(const Scalar* __restrict data, std::int64_t rows, std::int64_t vocab,
                                          const std::int64_t* __restrict labels, float* __restrict out) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < rows;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t label = labels[i];
    // verl raises on a label outside [0, vocab); the kernel cannot, so it leaves NaN there.
    out[i] = label >= 0 && label < vocab ? static_cast<float>(data[i * vocab + label]) : __int_as_float(0x7fc00000);
  }
}

/// torch.min / torch.max: NaN in either operand wins.
__device__ __forceinline__ float nan_propagating_min(float a, float b) {
  if (a != a) return a;
  if (b != b) return b;
  return b < a ? b : a;
}
__device__ __forceinline__ float nan_propagating_max(float a, float b) {
  if (a != a) return a;
  if (b != b) return b;
  return b > a ? b : a;
}

VERL_HEADER_KERNEL void clip_by_value_kernel(const float* __restrict x, const float* __restrict lower,
                                             const float* __restrict upper, std::int64_t n, float* __restrict out) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    out[i] = nan_propagating_max(nan_propagating_min(x[i], upper[i]), lower[i]);
}

/// One warp per row: the first EOS position by a ballot over 32 tokens at a time, then the mask.
template <class Out>
__global__ void response_mask_kernel(const std::int64_t* __restrict ids, std::int64_t rows, std::int64_t cols,
                                     const std::int64_t* __restrict eos_tokens, int eos_count, Out* __restrict mask) {
  const int lane = threadIdx.x & 31;
  const std::int64_t warps = static_cast<std::int64_t>(gridDim.x) * (blockDim.x / 32);
  for (std::int64_t row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; row < rows; row += warps) {
    const std::int64_t* row_ids = ids + row * cols;
    std::int64_t first_eos = cols;  // no EOS: every token is kept
    for (std::int64_t start = 0; start < cols; start += 32) {
      const std::int64_t t = start + lane;
      bool is_eos = false;
      if (t < cols) {
        const std::int64_t token = row_ids[t];
        for (int e = 0; e < eos_count; ++e) is_eos = is_eos || token == eos_tokens[e];
      }
      const unsigned hits = __ballot_sync(0xffffffffu, is_eos);
      if (hits != 0) {
        first_eos = start + __ffs(static_cast<int>(hits)) - 1;
        break;
      }
    }
    for (std::int64_t t = lane; t < cols; t += 32) mask[row * cols + t] = t <= first_eos ? Out(1) : Out(0);
  }
}

}  // namespace detail

/// verl's gather_from_labels over (rows, vocab) row-major `data` (float or bfloat16): out[i] =
/// data[i, labels[i]] as float. A label outside [0, vocab) gives NaN (verl raises: check labels on
/// the host where that matters).
template <class Scalar>
void gather_from_labels(const Scalar* data, std::int64_t rows, std::int64_t vocab, const std::int64_t* labels,
                        float* out, cudaStream_t stream = nullptr) {
  check_batch_shape(rows, vocab);
  if (rows == 0) return;
  VERL_CHECK_ARG(vocab > 0, "data: expected a last dimension of at least 1 to gather from, got ({}, {})", rows, vocab);
  VERL_CHECK_ARG(data != nullptr && labels != nullptr && out != nullptr,
                 "data, labels, out: expected device arrays, got a null pointer");
  detail::gather_from_labels_kernel<Scalar>
      <<<detail::grid_for(rows, detail::kFunctionalThreads), detail::kFunctionalThreads, 0, stream>>>(data, rows, vocab,
                                                                                                    labels, out);
  VERL_CUDA_CHECK(cudaGetLastError());
}

/// verl's clip_by_value: out = max(min(x, tensor_max), tensor_min) element-wise over n values,
/// NaN in any operand propagating as in torch. `out` may be `x`.
inline void clip_by_value(const float* x, const float* tensor_min, const float* tensor_max, std::int64_t n, float* out,
                          cudaStream_t stream = nullptr) {
  VERL_CHECK_ARG(n >= 0, "n: expected a non-negative element count, got {}", n);
  if (n == 0) return;
  VERL_CHECK_ARG(x != nullptr && tensor_min != nullptr && tensor_max != nullptr && out != nullptr,
                 "x, tensor_min, tensor_max, out: expected device arrays, got a null pointer");
  detail::clip_by_value_kernel<<<detail::grid_for(n, detail::kFunctionalThreads), detail::kFunctionalThreads, 0,
                                 stream>>>(x, tensor_min, tensor_max, n, out);
  VERL_CUDA_CHECK(cudaGetLastError());
}

/// verl's get_response_mask over (rows, cols) token ids: 1 up to and including the first token of
/// each row that is one of the `eos_count` ids in `eos_tokens` (device), 0 after it; a row without
/// one is all 1. `Out`: the mask's element type (verl's dtype; int64 by default, float for losses).
template <class Out = std::int64_t>
void response_mask(const std::int64_t* response_ids, std::int64_t rows, std::int64_t cols,
                   const std::int64_t* eos_tokens, int eos_count, Out* mask, cudaStream_t stream = nullptr) {
  check_batch_shape(rows, cols);
  VERL_CHECK_ARG(eos_count >= 1, "eos_count: expected at least one EOS id, got {}", eos_count);
  if (rows * cols == 0) return;
  VERL_CHECK_ARG(response_ids != nullptr && eos_tokens != nullptr && mask != nullptr,
                 "response_ids, eos_tokens, mask: expected device arrays, got a null pointer");
  const unsigned grid = detail::grid_for(rows * 32, detail::kFunctionalThreads);
  detail::response_mask_kernel<Out>
      <<<grid, detail::kFunctionalThreads, 0, stream>>>(response_ids, rows, cols, eos_tokens, eos_count, mask);
  VERL_CUDA_CHECK(cudaGetLastError());
}

}  // namespace verl::kernels
