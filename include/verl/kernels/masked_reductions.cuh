// Masked reductions and verl's loss aggregation as CUDA kernels (CPU reference:
// masked_reductions.hpp / verl::algo masked_stats and loss_aggregation).
//
// Shape: one warp per row reduces the row (double accumulators, the CPU references' precision);
// one block then combines the per-row results in a fixed order, so every result is deterministic.
// Results stay in device memory (no synchronisation); temporary storage is caller-provided,
// cub-style (temp == nullptr: size query). Masks must be 0/1.
#pragma once

#include <cuda_runtime.h>

#include <cub/block/block_reduce.cuh>

#include <cstdint>

#include "verl/kernels/advantages.cuh"  // detail::Moments, merge, whitening kernels
#include "verl/kernels/detail/device_utils.cuh"
#include "verl/kernels/masked_reductions.hpp"

namespace verl::kernels {

/// masked_sum / masked_mean / masked_var (unbiased) of a whole batch. var is NaN for fewer than 2
/// valid elements, where verl raises.
struct MaskedStats {
  double sum;
  double count;
  double mean;          ///< sum / (count + 1e-8), as verl::algo::masked_mean
  float var;            ///< unbiased, around the float32 mean
  float var_biased;     ///< masked_var(unbiased=False)
  float mean_f;         ///< the float32 mean verl keeps for the variance
  double centered_sum;  ///< sum of m (v - mean_f): 0 up to rounding, part of masked_var's gradient
};

/// agg_loss's result and what its gradient needs.
struct AggLossState {
  float loss;
  Aggregation aggregation;
  long long tokens;
  long long nonempty_rows;
};

namespace detail {

/// verl's count denominator: float32(count) + 1e-8, used in double as the CPU reference does.
__device__ __forceinline__ double count_denominator(double count) {
  return static_cast<double>(static_cast<float>(count) + 1e-8f);
}

/// One warp per row: Welford moments of where(mask, v, 0) over the valid positions (lanes merged).
VERL_HEADER_KERNEL void row_moments_kernel(const float* __restrict values, const float* __restrict mask, std::int64_t rows,
                                   std::int64_t cols, Moments* __restrict out) {
  const int lane = threadIdx.x & 31;
  const std::int64_t warps = static_cast<std::int64_t>(gridDim.x) * (blockDim.x / 32);
  for (std::int64_t row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; row < rows; row += warps) {
    Moments m{0, 0, 0};
    for (std::int64_t t = lane; t < cols; t += 32)
      if (mask[row * cols + t] != 0.0f) add_value(m, static_cast<double>(values[row * cols + t]));
    for (int offset = 16; offset > 0; offset >>= 1) {
      const Moments other{__shfl_xor_sync(0xffffffffu, m.count, offset), __shfl_xor_sync(0xffffffffu, m.mean, offset),
                          __shfl_xor_sync(0xffffffffu, m.m2, offset)};
      // Lanes merge in a butterfly; merge() is symmetric up to rounding, so order by lane index.
      m = (lane & offset) ? merge(other, m) : merge(m, other);
    }
    if (lane == 0) out[row] = m;
  }
}

VERL_HEADER_KERNEL void finish_stats_kernel(const Moments* __restrict rows_moments, std::int64_t rows, MaskedStats* stats) {
  using Reduce = cub::BlockReduce<Moments, kThreads>;
  __shared__ typename Reduce::TempStorage temp;
  Moments local{0, 0, 0};
  for (std::int64_t i = threadIdx.x; i < rows; i += blockDim.x) local = merge(local, rows_moments[i]);
  const Moments total = Reduce(temp).Reduce(local, MergeMoments{});
  if (threadIdx.x != 0) return;
  const double sum = total.mean * total.count;
  const double denominator = static_cast<double>(static_cast<float>(total.count) + 1e-8f);
  const float mean = static_cast<float>(sum / denominator);
  const double shift = total.mean - static_cast<double>(mean);
  const double squares = total.m2 + total.count * shift * shift;
  float var = __int_as_float(0x7fc00000);
  if (total.count >= 2) {
    const double bessel = static_cast<double>(static_cast<float>(total.count) / static_cast<float>(total.count - 1));
    var = static_cast<float>(squares / denominator * bessel);
  }
  *stats = MaskedStats{sum,  total.count, sum / denominator, var, static_cast<float>(squares / denominator),
                       mean, total.count * shift};
}

/// d masked_var / d v (cotangent 1): with z = v - mean, D = n + 1e-8 and k the Bessel factor,
/// k 2 m z / D plus the path through the mean, k (-2 sum(m z) / D) m / D; 0 at masked positions.
VERL_HEADER_KERNEL void masked_var_backward_kernel(const float* __restrict values, const float* __restrict mask, std::int64_t n,
                                           bool unbiased, const MaskedStats* stats, float* __restrict grad) {
  const double count = stats->count;
  const double denominator = count_denominator(count);
  const double bessel =
      unbiased ? static_cast<double>(static_cast<float>(count) / static_cast<float>(count - 1)) : 1.0;
  const float direct = static_cast<float>(bessel * 2.0 / denominator);
  const float through_mean = static_cast<float>(bessel * (-2.0 * stats->centered_sum / denominator) / denominator);
  const float mean = stats->mean_f;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const float m = mask[i];
    grad[i] = m != 0.0f ? mul_rn(add_rn(mul_rn(values[i] - mean, direct), through_mean), m) : 0.0f;
  }
}

/// One warp per row: valid-token count and the masked loss sum (where(m, L, 0) under token-mean,
/// L * m otherwise). loss == nullptr: counts only.
VERL_HEADER_KERNEL void agg_rows_kernel(const float* __restrict loss, const float* __restrict mask, std::int64_t rows,
                                std::int64_t cols, bool select_valid, std::int32_t* __restrict lengths,
                                double* __restrict row_sums) {
  const int lane = threadIdx.x & 31;
  const std::int64_t warps = static_cast<std::int64_t>(gridDim.x) * (blockDim.x / 32);
  for (std::int64_t row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; row < rows; row += warps) {
    double sum = 0;
    long long count = 0;
    for (std::int64_t t = lane; t < cols; t += 32) {
      const float m = mask[row * cols + t];
      count += m != 0.0f;
      if (loss != nullptr) {
        const float l = loss[row * cols + t];
        sum += (select_valid && m == 0.0f) ? 0.0 : static_cast<double>(l) * static_cast<double>(m);
      }
    }
    count = warp_sum(count);
    if (loss != nullptr) sum = warp_sum(sum);
    if (lane == 0) {
      lengths[row] = static_cast<std::int32_t>(count);
      if (row_sums != nullptr) row_sums[row] = sum;
    }
  }
}

/// One block: the batch counts, the aggregation, and (row_sums != nullptr) the loss
/// scale * sum_i row_weight_i * rowsum_i, rows combined in a fixed order.
VERL_HEADER_KERNEL void finish_agg_kernel(const std::int32_t* __restrict lengths, const double* __restrict row_sums,
                                  std::int64_t rows, std::int64_t cols, AggregationParams params, AggLossState* state) {
  using ReduceL = cub::BlockReduce<long long, kThreads>;
  using ReduceD = cub::BlockReduce<double, kThreads>;
  __shared__ union {
    typename ReduceL::TempStorage l;
    typename ReduceD::TempStorage d;
  } temp;
  __shared__ long long shared_tokens, shared_nonempty;
  long long tokens = 0, nonempty = 0;
  for (std::int64_t i = threadIdx.x; i < rows; i += blockDim.x) {
    tokens += lengths[i];
    nonempty += lengths[i] > 0;
  }
  tokens = ReduceL(temp.l).Sum(tokens);
  __syncthreads();
  nonempty = ReduceL(temp.l).Sum(nonempty);
  if (threadIdx.x == 0) {
    shared_tokens = tokens;
    shared_nonempty = nonempty;
  }
  __syncthreads();
  const Aggregation a = make_aggregation(params, shared_tokens, shared_nonempty, cols);
  double total = 0;
  if (row_sums != nullptr)
    for (std::int64_t i = threadIdx.x; i < rows; i += blockDim.x)
      if (!a.drops(lengths[i])) total += row_sums[i] * static_cast<double>(a.row_weight(lengths[i]));
  total = ReduceD(temp.d).Sum(total);
  if (threadIdx.x == 0)
    *state = AggLossState{static_cast<float>(total * static_cast<double>(a.scale)), a, shared_tokens, shared_nonempty};
}

VERL_HEADER_KERNEL void agg_weights_kernel(const float* __restrict mask, const std::int32_t* __restrict lengths,
                                   std::int64_t rows, std::int64_t cols, const AggLossState* state,
                                   float* __restrict weights) {
  const Aggregation a = state->aggregation;
  const std::int64_t n = rows * cols;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    weights[i] = mask[i] != 0.0f ? a.gradient_weight(lengths[i / cols]) : 0.0f;
}

inline unsigned warp_rows_grid(std::int64_t rows) { return grid_for(rows * 32, kThreads); }

/// One warp per row: masked_sum / masked_mean of where(mask, v, 0) along the row.
VERL_HEADER_KERNEL void masked_rows_kernel(const float* __restrict values, const float* __restrict mask, std::int64_t rows,
                                   std::int64_t cols, bool mean, float* __restrict out) {
  const int lane = threadIdx.x & 31;
  const std::int64_t warps = static_cast<std::int64_t>(gridDim.x) * (blockDim.x / 32);
  for (std::int64_t row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; row < rows; row += warps) {
    double sum = 0;
    long long count = 0;
    for (std::int64_t t = lane; t < cols; t += 32) {
      const bool valid = mask[row * cols + t] != 0.0f;
      sum += valid ? static_cast<double>(values[row * cols + t]) : 0.0;
      count += valid;
    }
    sum = warp_sum(sum);
    count = warp_sum(count);
    if (lane == 0)
      out[row] = static_cast<float>(mean ? sum / count_denominator(static_cast<double>(count)) : sum);
  }
}

/// One thread per column (coalesced across the threads of a warp): the same along columns.
VERL_HEADER_KERNEL void masked_cols_kernel(const float* __restrict values, const float* __restrict mask, std::int64_t rows,
                                   std::int64_t cols, bool mean, float* __restrict out) {
  for (std::int64_t col = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; col < cols;
       col += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    double sum = 0;
    long long count = 0;
    for (std::int64_t i = 0; i < rows; ++i) {
      const bool valid = mask[i * cols + col] != 0.0f;
      sum += valid ? static_cast<double>(values[i * cols + col]) : 0.0;
      count += valid;
    }
    out[col] = static_cast<float>(mean ? sum / count_denominator(static_cast<double>(count)) : sum);
  }
}

/// VJP along rows: grad = m * cot_row (/ (count_row + 1e-8) for the mean).
VERL_HEADER_KERNEL void masked_rows_backward_kernel(const float* __restrict mask, std::int64_t rows, std::int64_t cols,
                                            bool mean, const float* __restrict cotangent, float* __restrict grad) {
  const int lane = threadIdx.x & 31;
  const std::int64_t warps = static_cast<std::int64_t>(gridDim.x) * (blockDim.x / 32);
  for (std::int64_t row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; row < rows; row += warps) {
    float scale = cotangent[row];
    if (mean) {
      long long count = 0;
      for (std::int64_t t = lane; t < cols; t += 32) count += mask[row * cols + t] != 0.0f;
      count = warp_sum(count);
      scale = static_cast<float>(static_cast<double>(scale) / count_denominator(static_cast<double>(count)));
    }
    for (std::int64_t t = lane; t < cols; t += 32) grad[row * cols + t] = mask[row * cols + t] * scale;
  }
}

VERL_HEADER_KERNEL void masked_cols_backward_kernel(const float* __restrict mask, std::int64_t rows, std::int64_t cols,
                                            bool mean, const float* __restrict cotangent, float* __restrict grad) {
  for (std::int64_t col = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; col < cols;
       col += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    float scale = cotangent[col];
    if (mean) {
      long long count = 0;
      for (std::int64_t i = 0; i < rows; ++i) count += mask[i * cols + col] != 0.0f;
      scale = static_cast<float>(static_cast<double>(scale) / count_denominator(static_cast<double>(count)));
    }
    for (std::int64_t i = 0; i < rows; ++i) grad[i * cols + col] = mask[i * cols + col] * scale;
  }
}

/// VJP of the whole-batch masked_sum (1) or masked_mean (1 / (count + 1e-8)), count from `stats`.
VERL_HEADER_KERNEL void masked_all_backward_kernel(const float* __restrict mask, std::int64_t n, bool mean,
                                           const MaskedStats* stats, float* __restrict grad) {
  const float scale = mean ? static_cast<float>(1.0 / count_denominator(stats->count)) : 1.0f;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    grad[i] = mask[i] * scale;
}

}  // namespace detail

/// masked_sum, masked_mean and the unbiased masked_var of values (B, T) under mask (B, T).
inline void masked_stats(void* temp, std::size_t& temp_bytes, const float* values, const float* mask,
                         std::int64_t rows, std::int64_t cols, MaskedStats* stats, cudaStream_t stream = nullptr) {
  check_batch_shape(rows, cols);
  detail::TempCarver carve(temp);
  auto* moments = carve.take<detail::Moments>(static_cast<std::size_t>(rows));
  if (carve.answer_size_query(temp_bytes)) return;
  if (rows > 0)
    detail::row_moments_kernel<<<detail::warp_rows_grid(rows), detail::kThreads, 0, stream>>>(values, mask, rows, cols,
                                                                                             moments);
  detail::finish_stats_kernel<<<1, detail::kThreads, 0, stream>>>(moments, rows, stats);
  VERL_CUDA_CHECK(cudaGetLastError());
}

/// verl's masked_sum / masked_mean along `axis` (-1/1: one value per row into out[rows]; 0/-2: one
/// per column into out[cols]), as float32; an empty row/column gives 0 for the mean.
inline void masked_reduce_axis(const float* values, const float* mask, std::int64_t rows, std::int64_t cols, int axis,
                               bool mean, float* out, cudaStream_t stream = nullptr) {
  check_batch_shape(rows, cols);
  const bool by_rows = algo::detail::reduces_rows(axis);
  if (by_rows && rows > 0)
    detail::masked_rows_kernel<<<detail::warp_rows_grid(rows), detail::kThreads, 0, stream>>>(values, mask, rows, cols,
                                                                                             mean, out);
  if (!by_rows && cols > 0)
    detail::masked_cols_kernel<<<detail::grid_for(cols, detail::kThreads), detail::kThreads, 0, stream>>>(
        values, mask, rows, cols, mean, out);
  VERL_CUDA_CHECK(cudaGetLastError());
}

/// The VJP of masked_reduce_axis with `cotangent` (one value per reduced row/column): grad (B, T).
inline void masked_reduce_axis_backward(const float* mask, std::int64_t rows, std::int64_t cols, int axis, bool mean,
                                        const float* cotangent, float* grad, cudaStream_t stream = nullptr) {
  check_batch_shape(rows, cols);
  const bool by_rows = algo::detail::reduces_rows(axis);
  if (by_rows && rows > 0)
    detail::masked_rows_backward_kernel<<<detail::warp_rows_grid(rows), detail::kThreads, 0, stream>>>(
        mask, rows, cols, mean, cotangent, grad);
  if (!by_rows && cols > 0)
    detail::masked_cols_backward_kernel<<<detail::grid_for(cols, detail::kThreads), detail::kThreads, 0, stream>>>(
        mask, rows, cols, mean, cotangent, grad);
  VERL_CUDA_CHECK(cudaGetLastError());
}

/// The gradient of the whole-batch masked_sum (mean = false) or masked_mean of a batch whose
/// statistics masked_stats left in `stats`: grad (B, T).
inline void masked_reduce_backward(const float* mask, std::int64_t rows, std::int64_t cols, bool mean,
                                   const MaskedStats* stats, float* grad, cudaStream_t stream = nullptr) {
  check_batch_shape(rows, cols);
  if (rows * cols == 0) return;
  detail::masked_all_backward_kernel<<<detail::grid_for(rows * cols, detail::kThreads), detail::kThreads, 0, stream>>>(
      mask, rows * cols, mean, stats, grad);
  VERL_CUDA_CHECK(cudaGetLastError());
}

/// The gradient of masked_var (unbiased or not) of a batch whose statistics masked_stats left in
/// `stats`: grad (B, T). Unbiased with fewer than 2 valid elements gives NaN (verl raises).
inline void masked_var_backward(const float* values, const float* mask, std::int64_t rows, std::int64_t cols,
                                bool unbiased, const MaskedStats* stats, float* grad, cudaStream_t stream = nullptr) {
  check_batch_shape(rows, cols);
  if (rows * cols == 0) return;
  detail::masked_var_backward_kernel<<<detail::grid_for(rows * cols, detail::kThreads), detail::kThreads, 0, stream>>>(
      values, mask, rows * cols, unbiased, stats, grad);
  VERL_CUDA_CHECK(cudaGetLastError());
}

/// verl's masked_whiten: (v - mean) * rsqrt(var + 1e-8), plus the mean unless shift_mean; not
/// masked. `out` may be `values`. Fewer than 2 valid elements give NaN (verl raises).
inline void masked_whiten(void* temp, std::size_t& temp_bytes, const float* values, const float* mask,
                          std::int64_t rows, std::int64_t cols, float* out, bool shift_mean = true,
                          cudaStream_t stream = nullptr) {
  check_batch_shape(rows, cols);
  detail::TempCarver carve(temp);
  auto* moments = carve.take<detail::Moments>(static_cast<std::size_t>(rows));
  auto* stats = carve.take<WhitenStats>(1);
  if (carve.answer_size_query(temp_bytes)) return;
  if (rows == 0 || cols == 0) return;
  detail::row_moments_kernel<<<detail::warp_rows_grid(rows), detail::kThreads, 0, stream>>>(values, mask, rows, cols,
                                                                                           moments);
  detail::whiten_rows(moments, rows, cols, values, mask, /*zero_masked=*/false, stats, out, stream,
                      /*add_mean=*/!shift_mean);
  VERL_CUDA_CHECK(cudaGetLastError());
}

namespace detail {

/// The scalars of masked_whiten's VJP: grad = c * inv_std + ((v - mean) * var_share + mean_share) * m.
struct WhitenBackwardScalars {
  float inv_std;
  float var_share;
  float mean_share;
};

/// One warp per row: sum c and sum c (v - mean) over every element of the row (whiten's output is
/// not masked, so masked positions count too).
VERL_HEADER_KERNEL void whiten_cotangent_rows_kernel(const float* __restrict values, const float* __restrict cotangent,
                                             std::int64_t rows, std::int64_t cols, const MaskedStats* stats,
                                             double2* __restrict row_sums) {
  const int lane = threadIdx.x & 31;
  const float mean = stats->mean_f;
  const std::int64_t warps = static_cast<std::int64_t>(gridDim.x) * (blockDim.x / 32);
  for (std::int64_t row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; row < rows; row += warps) {
    double sum_c = 0, sum_cz = 0;
    for (std::int64_t t = lane; t < cols; t += 32) {
      const float c = cotangent[row * cols + t];
      sum_c += static_cast<double>(c);
      sum_cz += static_cast<double>(c * (values[row * cols + t] - mean));
    }
    sum_c = warp_sum(sum_c);
    sum_cz = warp_sum(sum_cz);
    if (lane == 0) row_sums[row] = make_double2(sum_c, sum_cz);
  }
}

struct SumDouble2 {
  __device__ double2 operator()(const double2& a, const double2& b) const { return make_double2(a.x + b.x, a.y + b.y); }
};

/// One block: the rows' sums in a fixed order, then the VJP's scalars as verl::algo computes them
/// (in double from the float32 statistics).
VERL_HEADER_KERNEL void whiten_backward_scalars_kernel(const double2* __restrict row_sums, std::int64_t rows,
                                               const MaskedStats* stats, bool shift_mean,
                                               WhitenBackwardScalars* out) {
  using Reduce = cub::BlockReduce<double2, kThreads>;
  __shared__ typename Reduce::TempStorage temp;
  double2 local = make_double2(0.0, 0.0);
  for (std::int64_t i = threadIdx.x; i < rows; i += blockDim.x) local = SumDouble2{}(local, row_sums[i]);
  const double2 total = Reduce(temp).Reduce(local, SumDouble2{});
  if (threadIdx.x != 0) return;
  const double count = stats->count;
  const double denominator = count_denominator(count);
  const double r = 1.0 / sqrt(static_cast<double>(stats->var) + 1e-8);
  const double bessel = static_cast<double>(static_cast<float>(count) / static_cast<float>(count - 1.0));
  const double grad_var = total.y * (-0.5 * r * r * r);
  // var = k sum(m z^2) / D: d var / d v_j = 2 k m_j z_j / D, and d var / d mean = -2 k sum(m z) / D.
  double grad_mean = -r * total.x + grad_var * bessel * (-2.0 * stats->centered_sum) / denominator;
  if (!shift_mean) grad_mean += total.x;
  *out = WhitenBackwardScalars{static_cast<float>(r), static_cast<float>(grad_var * bessel * 2.0 / denominator),
                               static_cast<float>(grad_mean / denominator)};
}

VERL_HEADER_KERNEL void whiten_backward_kernel(const float* __restrict values, const float* __restrict mask,
                                       const float* __restrict cotangent, std::int64_t n, const MaskedStats* stats,
                                       const WhitenBackwardScalars* scalars, float* __restrict grad) {
  const float mean = stats->mean_f;
  const WhitenBackwardScalars k = *scalars;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const float z = values[i] - mean;
    // Each product and sum rounded on its own (no FMA), as the CPU reference.
    grad[i] = add_rn(mul_rn(cotangent[i], k.inv_std), mul_rn(add_rn(mul_rn(z, k.var_share), k.mean_share), mask[i]));
  }
}

}  // namespace detail

/// The VJP of masked_whiten (verl::algo::masked_whiten_backward) with the (B, T) `cotangent`:
/// grad (B, T) w.r.t. values, through the mean and the unbiased variance of the valid elements.
/// Fewer than 2 valid elements give NaN (verl raises). Two-phase like cub.
inline void masked_whiten_backward(void* temp, std::size_t& temp_bytes, const float* values, const float* mask,
                                   const float* cotangent, std::int64_t rows, std::int64_t cols, float* grad,
                                   bool shift_mean = true, cudaStream_t stream = nullptr) {
  check_batch_shape(rows, cols);
  std::size_t stats_bytes = 0;
  masked_stats(nullptr, stats_bytes, nullptr, nullptr, rows, cols, nullptr);
  detail::TempCarver carve(temp);
  auto* stats_temp = carve.take<unsigned char>(stats_bytes);
  auto* stats = carve.take<MaskedStats>(1);
  auto* row_sums = carve.take<double2>(static_cast<std::size_t>(rows));
  auto* scalars = carve.take<detail::WhitenBackwardScalars>(1);
  if (carve.answer_size_query(temp_bytes)) return;
  if (rows * cols == 0) return;
  VERL_CHECK_ARG(values != nullptr && mask != nullptr && cotangent != nullptr && grad != nullptr,
                 "values, mask, cotangent, grad: expected ({}, {}) device arrays, got a null pointer", rows, cols);
  masked_stats(stats_temp, stats_bytes, values, mask, rows, cols, stats, stream);
  detail::whiten_cotangent_rows_kernel<<<detail::warp_rows_grid(rows), detail::kThreads, 0, stream>>>(
      values, cotangent, rows, cols, stats, row_sums);
  detail::whiten_backward_scalars_kernel<<<1, detail::kThreads, 0, stream>>>(row_sums, rows, stats, shift_mean,
                                                                            scalars);
  detail::whiten_backward_kernel<<<detail::grid_for(rows * cols, detail::kThreads), detail::kThreads, 0, stream>>>(
      values, mask, cotangent, rows * cols, stats, scalars, grad);
  VERL_CUDA_CHECK(cudaGetLastError());
}

/// verl's agg_loss of loss (B, T) under mask (B, T): state->loss on the device. With
/// `weights` != nullptr also d loss / d loss_mat (B, T).
inline void agg_loss(void* temp, std::size_t& temp_bytes, const float* loss, const float* mask, std::int64_t rows,
                     std::int64_t cols, LossAggMode mode, const GlobalBatchInfo& info, AggLossState* state,
                     float* weights = nullptr, cudaStream_t stream = nullptr) {
  check_batch_shape(rows, cols);
  detail::TempCarver carve(temp);
  auto* lengths = carve.take<std::int32_t>(static_cast<std::size_t>(rows));
  auto* row_sums = carve.take<double>(static_cast<std::size_t>(rows));
  if (carve.answer_size_query(temp_bytes)) return;
  const auto params = AggregationParams::from(mode, info);
  const bool select_valid = Aggregation{mode, 1.0f}.selects_valid();
  if (rows > 0)
    detail::agg_rows_kernel<<<detail::warp_rows_grid(rows), detail::kThreads, 0, stream>>>(
        loss, mask, rows, cols, select_valid, lengths, loss != nullptr ? row_sums : nullptr);
  detail::finish_agg_kernel<<<1, detail::kThreads, 0, stream>>>(lengths, loss != nullptr ? row_sums : nullptr, rows,
                                                                 cols, params, state);
  if (weights != nullptr && rows * cols > 0)
    detail::agg_weights_kernel<<<detail::grid_for(rows * cols, detail::kThreads), detail::kThreads, 0, stream>>>(
        mask, lengths, rows, cols, state, weights);
  VERL_CUDA_CHECK(cudaGetLastError());
}

}  // namespace verl::kernels
