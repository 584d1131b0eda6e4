// verl's optimal-token-baseline advantage estimators as CUDA kernels (CPU reference:
// verl::algo::OptimalTokenBaseline and MultiTurnOptimalTokenBaseline; the algorithm and its
// numerics are described in optimal_token_baseline.hpp, whose detail:: functions the kernels share).
//
//   1. otb_row_series_kernel, one block per row: the returns G (reverse cumsum) and the cumulative
//      path variance W (forward cumsum) as block scans in double over tiles, each thread walking
//      its chunk in the CPU's order; multi-turn compacts the valid tokens' G W, W and positions.
//   2. groups as runs of ids (GroupLayout::any: (id, row) radix-sorted, stable), numbered by an
//      inclusive scan of the run heads; one thread summarises each run (members, unique longest).
//   3. otb_group_baseline_kernel: one thread per (run, position) sums the run's rows in batch order
//      (the CPU's order, so the double sums and the baseline are the CPU's given the same G and W).
//   4. the advantages, element-wise.
//
// Memory: caller-provided device temporary storage, cub-style (temp == nullptr: size query), about
// 2 (single-turn) or 4 (multi-turn) floats per token plus per-row arrays. Nothing synchronises the
// stream. Masks must be 0/1 (the CPU reference checks it; the kernels do not).
#pragma once

#include <cuda_runtime.h>

#include <cub/block/block_scan.cuh>
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "verl/kernels/advantages.cuh"  // GroupRuns, GroupSort, padded, row_grid, kThreads, kScanTile
#include "verl/kernels/detail/device_utils.cuh"
#include "verl/kernels/optimal_token_baseline.hpp"

namespace verl::kernels {
namespace detail {

static_assert(otb_block_threads == kThreads && otb_items_per_thread == kScanItems,
              "the host walk's tiles must be the kernel's (padded() is laid out for kScanItems)");

/// Per-row series of pass 1 (device). Single-turn fills w_cum (B, T); multi-turn the compacted
/// arrays, whose row r holds at k < lengths[r] the k-th valid token's G W, W and position.
struct OtbSeries {
  float* returns;
  float* w_cum;
  float* compact_product;
  float* compact_w;
  std::int32_t* compact_position;
  std::int32_t* lengths;
};

/// The groups as numbered runs of run positions, and what each row needs from its group.
struct OtbGroups {
  std::int32_t* run_start;     ///< run r covers run positions [run_start[r], run_start[r + 1])
  std::int32_t* run_count;     ///< device scalar
  std::int32_t* run_of_row;    ///< by row
  std::int32_t* baseline_end;  ///< by row: positions (valid indices) from here on take no baseline
  std::int32_t* span;          ///< by run: positions (valid indices) a baseline is computed for
  std::uint8_t* has_baseline;  ///< by run: more than one member
};

/// Forward scan state: W's double sum and the valid tokens so far.
struct ForwardPartial {
  double w;
  int count;
};
struct AddForwardPartial {
  __device__ ForwardPartial operator()(const ForwardPartial& a, const ForwardPartial& b) const {
    return {a.w + b.w, a.count + b.count};
  }
};

/// Pass 1: one block per row (grid-stride). Tiles of kScanTile tokens are staged in shared memory
/// (coalesced loads), each thread sums its chunk, a block scan gives the chunk's start, and the
/// thread walks the chunk sequentially from it.
template <bool kMultiTurn>
__global__ void __launch_bounds__(kThreads) otb_row_series_kernel(OtbInputs in, std::int64_t rows, std::int64_t cols,
                                                                   OtbSeries out) {
  using ReverseScan = cub::BlockScan<double, kThreads>;
  using ForwardScan = cub::BlockScan<ForwardPartial, kThreads>;
  constexpr int kPadded = kScanTile + kScanTile / 32;
  __shared__ float tile_term[kPadded], tile_mask[kPadded];
  __shared__ float tile_return[kMultiTurn ? kPadded : 1];
  __shared__ union {
    typename ReverseScan::TempStorage reverse;
    typename ForwardScan::TempStorage forward;
  } temp;
  const int tid = static_cast<int>(threadIdx.x);
  for (std::int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const std::int64_t base = row * cols;
    // Returns: tiles from the row's end, thread 0 owning each tile's last tokens.
    double carry = 0;
    for (std::int64_t tile_end = cols; tile_end > 0; tile_end -= kScanTile) {
      const std::int64_t tile_begin = tile_end > kScanTile ? tile_end - kScanTile : 0;
      const int width = static_cast<int>(tile_end - tile_begin);
      for (int j = tid; j < width; j += kThreads) {
        const std::int64_t i = base + tile_begin + j;
        tile_term[padded(j)] = reward_term(in.token_level_rewards[i], in.response_mask[i]);
      }
      __syncthreads();
      const TokenSpan chunk = reverse_chunk(width, tid);
      double own = 0;
      for (int j = chunk.hi - 1; j >= chunk.lo; --j) own += static_cast<double>(tile_term[padded(j)]);
      double before, tile_total;
      ReverseScan(temp.reverse).ExclusiveSum(own, before, tile_total);
      double running = carry + before;
      for (int j = chunk.hi - 1; j >= chunk.lo; --j) {
        running += static_cast<double>(tile_term[padded(j)]);
        tile_term[padded(j)] = static_cast<float>(running);  // this thread alone reads and writes j
      }
      carry += tile_total;
      __syncthreads();
      for (int j = tid; j < width; j += kThreads) out.returns[base + tile_begin + j] = tile_term[padded(j)];
      __syncthreads();  // tile_term and the scan storage are reused next
    }
    // W, valid counts and (multi-turn) the compaction: tiles from the row's start. The returns
    // read back here were written by this block above (visible after its __syncthreads).
    ForwardPartial w_carry{0.0, 0};
    for (std::int64_t tile_begin = 0; tile_begin < cols; tile_begin += kScanTile) {
      const int width = static_cast<int>(cols - tile_begin < kScanTile ? cols - tile_begin : kScanTile);
      for (int j = tid; j < width; j += kThreads) {
        const std::int64_t i = base + tile_begin + j;
        const float m = in.response_mask[i];
        const float* is_weight = in.rollout_is_weights != nullptr ? in.rollout_is_weights + i : nullptr;
        tile_term[padded(j)] = path_variance_term(in.old_log_probs[i], in.sum_pi_squared[i], is_weight, m);
        tile_mask[padded(j)] = m;
        if constexpr (kMultiTurn) tile_return[padded(j)] = out.returns[i];
      }
      __syncthreads();
      const TokenSpan chunk = forward_chunk(width, tid);
      ForwardPartial own{0.0, 0};
      for (int j = chunk.lo; j < chunk.hi; ++j) {
        own.w += static_cast<double>(tile_term[padded(j)]);
        own.count += tile_mask[padded(j)] != 0.0f;
      }
      ForwardPartial before, tile_total;
      ForwardScan(temp.forward).ExclusiveScan(own, before, ForwardPartial{0.0, 0}, AddForwardPartial{}, tile_total);
      double running = w_carry.w + before.w;
      std::int64_t k = w_carry.count + before.count;  // valid tokens before this chunk
      for (int j = chunk.lo; j < chunk.hi; ++j) {
        running += static_cast<double>(tile_term[padded(j)]);
        const auto w = static_cast<float>(running);
        if constexpr (kMultiTurn) {
          if (tile_mask[padded(j)] != 0.0f) {
            out.compact_product[base + k] = mul_rn(tile_return[padded(j)], w);
            out.compact_w[base + k] = w;
            out.compact_position[base + k] = static_cast<std::int32_t>(tile_begin + j);
            ++k;
          }
        } else {
          tile_term[padded(j)] = w;
        }
      }
      w_carry = AddForwardPartial{}(w_carry, tile_total);
      __syncthreads();
      if constexpr (!kMultiTurn)
        for (int j = tid; j < width; j += kThreads) out.w_cum[base + tile_begin + j] = tile_term[padded(j)];
      __syncthreads();
    }
    if (tid == 0) out.lengths[row] = w_carry.count;
  }
}

/// 1 at each run head, 0 elsewhere (an inclusive sum then numbers the runs from 1).
VERL_HEADER_KERNEL void otb_run_heads_kernel(GroupRuns runs, std::int32_t* run_number) {
  for (std::int64_t p = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; p < runs.n;
       p += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    run_number[p] = runs.is_head(p) ? 1 : 0;
}

/// From the run numbers: each run's start, the number of runs, and each row's run.
VERL_HEADER_KERNEL void otb_run_table_kernel(GroupRuns runs, const std::int32_t* __restrict run_number, OtbGroups g) {
  for (std::int64_t p = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; p < runs.n;
       p += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int32_t run = run_number[p] - 1;
    g.run_of_row[runs.row_at(p)] = run;
    if (runs.is_head(p)) g.run_start[run] = static_cast<std::int32_t>(p);
    if (p == runs.n - 1) {
      g.run_start[run + 1] = static_cast<std::int32_t>(runs.n);
      *g.run_count = run + 1;
    }
  }
}

/// One thread per run: its members and unique longest row in batch order (OtbGroupSummary), then
/// each row's baseline end.
template <bool kMultiTurn>
__global__ void otb_group_summary_kernel(GroupRuns runs, OtbGroups g, bool handle_zero_tail, std::int64_t cols) {
  const std::int32_t run_count = *g.run_count;
  for (std::int64_t run = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; run < run_count;
       run += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int32_t start = g.run_start[run], end = g.run_start[run + 1];
    OtbGroupSummary summary;
    for (std::int32_t p = start; p < end; ++p) {
      const std::int64_t row = runs.row_at(p);
      summary.add(row, runs.lengths[row], kMultiTurn);
    }
    g.has_baseline[run] = summary.has_baseline() ? 1 : 0;
    g.span[run] = static_cast<std::int32_t>(summary.span(kMultiTurn, cols));
    for (std::int32_t p = start; p < end; ++p) {
      const std::int64_t row = runs.row_at(p);
      g.baseline_end[row] = summary.baseline_end(row, handle_zero_tail);
    }
  }
}

/// One thread per (run, position t or valid index k): the run's numerator and denominator summed
/// in double over its rows in batch order, then the baseline (0 for a group of one).
template <bool kMultiTurn>
__global__ void __launch_bounds__(kThreads) otb_group_baseline_kernel(GroupRuns runs, OtbGroups g, OtbSeries s,
                                                                       const float* __restrict mask, std::int64_t cols,
                                                                       float epsilon, float* __restrict baseline) {
  const std::int32_t run_count = *g.run_count;
  for (std::int64_t run = blockIdx.y; run < run_count; run += gridDim.y) {
    const std::int32_t start = g.run_start[run], end = g.run_start[run + 1];
    const std::int64_t span = g.span[run];
    const bool has_baseline = g.has_baseline[run] != 0;
    for (std::int64_t t = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; t < span;
         t += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
      double numerator = 0, denominator = 0;
      for (std::int32_t p = start; p < end && has_baseline; ++p) {
        const std::int64_t row = runs.row_at(p);
        const std::int64_t i = row * cols + t;
        if constexpr (kMultiTurn) {
          if (t >= runs.lengths[row]) continue;
          numerator += static_cast<double>(s.compact_product[i]);
          denominator += static_cast<double>(s.compact_w[i]);
        } else {
          const float m = mask[i], w = s.w_cum[i];
          numerator += static_cast<double>(numerator_term(s.returns[i], w, m));
          denominator += static_cast<double>(denominator_term(w, m));
        }
      }
      baseline[run * cols + t] = has_baseline ? otb_baseline(numerator, denominator, epsilon) : 0.0f;
    }
  }
}

/// Single-turn advantages, element-wise: (G - b_t) * m, G * m on a zero tail.
VERL_HEADER_KERNEL void otb_single_turn_advantages_kernel(const float* __restrict returns, const float* __restrict mask,
                                                          OtbGroups g, const float* __restrict baseline,
                                                          std::int64_t rows, std::int64_t cols,
                                                          float* __restrict advantages) {
  const std::int64_t n = rows * cols;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t row = i / cols, t = i - row * cols;
    const bool with_baseline = t < g.baseline_end[row];
    const float b = with_baseline ? baseline[g.run_of_row[row] * cols + t] : 0.0f;
    advantages[i] = single_turn_advantage(returns[i], b, mask[i], with_baseline);
  }
}

/// Multi-turn advantages at the valid tokens (the rest was zeroed): one thread per (row, valid
/// index k), G - b_k, G on a zero tail.
VERL_HEADER_KERNEL void otb_multi_turn_advantages_kernel(OtbSeries s, OtbGroups g, const float* __restrict baseline,
                                                         std::int64_t rows, std::int64_t cols,
                                                         float* __restrict advantages) {
  const std::int64_t n = rows * cols;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t row = i / cols, k = i - row * cols;
    if (k >= s.lengths[row]) continue;
    const std::int64_t position = row * cols + s.compact_position[i];
    const bool with_baseline = k < g.baseline_end[row];
    const float b = with_baseline ? baseline[g.run_of_row[row] * cols + k] : 0.0f;
    advantages[position] = multi_turn_advantage(s.returns[position], b, with_baseline);
  }
}

}  // namespace detail

// ---- entry point ---------------------------------------------------------------------------------

/// verl's compute_optimal_token_baseline_advantage (params.multi_turn false) or
/// compute_multi_turn_optimal_token_baseline_advantage (true) on a full batch: token_level_rewards,
/// response_mask, old_log_probs, sum_pi_squared and rollout_is_weights (nullable) (B, T) row-major,
/// ids (B) the prompt group of each row. advantages and returns (B, T). With GroupLayout::contiguous
/// the rows of each id must form one run. Call with temp == nullptr for temp_bytes first.
inline void optimal_token_baseline_advantages(void* temp, std::size_t& temp_bytes,
                                              const OptimalTokenBaselineParams& params, GroupLayout layout,
                                              const float* token_level_rewards, const float* response_mask,
                                              const std::int64_t* ids, const float* old_log_probs,
                                              const float* sum_pi_squared, const float* rollout_is_weights,
                                              std::int64_t rows, std::int64_t cols, float* advantages, float* returns,
                                              cudaStream_t stream = nullptr) {
  detail::check_otb_shape(rows, cols);
  const bool multi = params.multi_turn;
  const auto cells = static_cast<std::size_t>(rows * cols);
  const auto n = static_cast<std::size_t>(rows);
  detail::TempCarver carve(temp);
  detail::OtbSeries series{returns, nullptr, nullptr, nullptr, nullptr, nullptr};
  series.w_cum = carve.take<float>(multi ? 0 : cells);
  series.compact_product = carve.take<float>(multi ? cells : 0);
  series.compact_w = carve.take<float>(multi ? cells : 0);
  series.compact_position = carve.take<std::int32_t>(multi ? cells : 0);
  series.lengths = carve.take<std::int32_t>(n);
  float* baseline = carve.take<float>(cells);  // by run: at most one run per row
  detail::OtbGroups groups{};
  groups.run_start = carve.take<std::int32_t>(n + 1);
  groups.run_count = carve.take<std::int32_t>(1);
  groups.run_of_row = carve.take<std::int32_t>(n);
  groups.baseline_end = carve.take<std::int32_t>(n);
  groups.span = carve.take<std::int32_t>(n);
  groups.has_baseline = carve.take<std::uint8_t>(n);
  auto* run_number = carve.take<std::int32_t>(n);
  const int items = static_cast<int>(rows > 0 ? rows : 1);
  std::size_t scan_bytes = 0;
  VERL_CUDA_CHECK(cub::DeviceScan::InclusiveSum(nullptr, scan_bytes, run_number, items, stream));
  void* scan_temp = carve.take<unsigned char>(scan_bytes);
  detail::GroupSort group_sort(carve, layout, ids, rows, stream);
  if (carve.answer_size_query(temp_bytes)) return;
  detail::check_otb_arguments(rows, cols, ids, token_level_rewards, response_mask, old_log_probs, sum_pi_squared,
                              advantages, returns);
  if (rows == 0 || cols == 0) return;

  const detail::OtbInputs inputs{token_level_rewards, response_mask, old_log_probs, sum_pi_squared,
                                 rollout_is_weights};
  if (multi)
    detail::otb_row_series_kernel<true>
        <<<detail::row_grid(rows), detail::kThreads, 0, stream>>>(inputs, rows, cols, series);
  else
    detail::otb_row_series_kernel<false>
        <<<detail::row_grid(rows), detail::kThreads, 0, stream>>>(inputs, rows, cols, series);

  detail::GroupRuns runs{nullptr, series.lengths, ids, nullptr, rows};
  const unsigned row_blocks = detail::grid_for(rows, detail::kThreads);
  group_sort.apply(ids, rows, runs, stream);
  detail::otb_run_heads_kernel<<<row_blocks, detail::kThreads, 0, stream>>>(runs, run_number);
  VERL_CUDA_CHECK(cub::DeviceScan::InclusiveSum(scan_temp, scan_bytes, run_number, items, stream));
  detail::otb_run_table_kernel<<<row_blocks, detail::kThreads, 0, stream>>>(runs, run_number, groups);
  if (multi)
    detail::otb_group_summary_kernel<true>
        <<<row_blocks, detail::kThreads, 0, stream>>>(runs, groups, params.handle_zero_tail, cols);
  else
    detail::otb_group_summary_kernel<false>
        <<<row_blocks, detail::kThreads, 0, stream>>>(runs, groups, params.handle_zero_tail, cols);

  // Runs are counted on the device: size the grid for the most there can be (one per row); blocks
  // past the count exit at once, and the grid-stride loops cover the rest.
  const dim3 baseline_grid(detail::grid_for(cols, detail::kThreads, 128u),
                           static_cast<unsigned>(std::min<std::int64_t>(rows, 1024)));
  if (multi)
    detail::otb_group_baseline_kernel<true><<<baseline_grid, detail::kThreads, 0, stream>>>(
        runs, groups, series, response_mask, cols, params.epsilon, baseline);
  else
    detail::otb_group_baseline_kernel<false><<<baseline_grid, detail::kThreads, 0, stream>>>(
        runs, groups, series, response_mask, cols, params.epsilon, baseline);

  const unsigned cell_blocks = detail::grid_for(rows * cols, detail::kThreads);
  if (multi) {
    VERL_CUDA_CHECK(cudaMemsetAsync(advantages, 0, cells * sizeof(float), stream));  // masked tokens, empty rows
    detail::otb_multi_turn_advantages_kernel<<<cell_blocks, detail::kThreads, 0, stream>>>(series, groups, baseline,
                                                                                           rows, cols, advantages);
  } else {
    detail::otb_single_turn_advantages_kernel<<<cell_blocks, detail::kThreads, 0, stream>>>(
        returns, response_mask, groups, baseline, rows, cols, advantages);
  }
  VERL_CUDA_CHECK(cudaGetLastError());
}

}  // namespace verl::kernels
