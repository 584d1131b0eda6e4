// verl's clipped value loss (compute_value_loss) as one fused CUDA pass (CPU reference:
// verl::algo::compute_value_loss; the per-token math is shared with the host through
// value_loss.hpp).
//
// As the policy loss: the mask's row lengths (one warp per row), the aggregation (one block), then
// one warp per row computes every token's loss term and d vf_loss / d vpred (which needs the row's
// aggregation weight), and one block combines the per-row sums in a fixed order into vf_loss,
// vf_clipfrac and vpred_mean.
#pragma once

#include <cuda_runtime.h>

#include <cub/block/block_reduce.cuh>

#include <cstdint>

#include "verl/kernels/detail/device_utils.cuh"
#include "verl/kernels/masked_reductions.cuh"
#include "verl/kernels/value_loss.hpp"

namespace verl::kernels {

namespace detail {

VERL_HEADER_KERNEL void value_loss_rows_kernel(ValueLossInputs in, float clip_range, const AggLossState* agg,
                                       const std::int32_t* __restrict lengths, float* __restrict grad,
                                       ValueRow* __restrict rows_out) {
  const int lane = threadIdx.x & 31;
  const Aggregation a = agg->aggregation;
  const bool select_valid = a.selects_valid();
  const std::int64_t warps = static_cast<std::int64_t>(gridDim.x) * (blockDim.x / 32);
  for (std::int64_t row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; row < in.rows; row += warps) {
    ValueRow sums = value_loss_token_pass(in, row, clip_range, 0.5f * a.gradient_weight(lengths[row]), select_valid,
                                          grad, lane, 32);
    sums.loss_sum = warp_sum(sums.loss_sum);
    sums.vpred_sum = warp_sum(sums.vpred_sum);
    sums.clipped = warp_sum(sums.clipped);
    if (lane == 0) rows_out[row] = sums;
  }
}

struct SumValueRow {
  __device__ ValueRow operator()(const ValueRow& a, const ValueRow& b) const {
    return {a.loss_sum + b.loss_sum, a.vpred_sum + b.vpred_sum, a.clipped + b.clipped};
  }
};

VERL_HEADER_KERNEL void finish_value_loss_kernel(const ValueRow* __restrict rows_in, const std::int32_t* __restrict lengths,
                                         std::int64_t rows, const AggLossState* agg, ValueLossState* out) {
  using Reduce = cub::BlockReduce<ValueRow, kThreads>;
  __shared__ typename Reduce::TempStorage temp;
  const Aggregation a = agg->aggregation;
  ValueRow local{0, 0, 0};
  for (std::int64_t i = threadIdx.x; i < rows; i += blockDim.x) {
    ValueRow r = rows_in[i];
    r.loss_sum = a.drops(lengths[i]) ? 0.0 : r.loss_sum * static_cast<double>(a.row_weight(lengths[i]));
    local = SumValueRow{}(local, r);
  }
  const ValueRow total = Reduce(temp).Reduce(local, SumValueRow{});
  if (threadIdx.x == 0) *out = finish_value_loss(total, a, static_cast<double>(agg->tokens));
}

}  // namespace detail

/// verl's compute_value_loss on a (B, T) batch: vf_loss and the critic metrics into `state`
/// (device), d vf_loss / d vpreds into grad_vpreds (B, T). `cliprange_value` is rounded to float32
/// before it is added to the values, as torch does. Two-phase like cub: temp == nullptr only sets
/// temp_bytes.
inline void value_loss(void* temp, std::size_t& temp_bytes, const ValueLossInputs& in, double cliprange_value,
                       LossAggMode mode, const GlobalBatchInfo& info, float* grad_vpreds, ValueLossState* state,
                       cudaStream_t stream = nullptr) {
  check_batch_shape(in.rows, in.cols);
  detail::TempCarver carve(temp);
  auto* lengths = carve.take<std::int32_t>(static_cast<std::size_t>(in.rows));
  auto* agg = carve.take<AggLossState>(1);
  auto* rows_out = carve.take<detail::ValueRow>(static_cast<std::size_t>(in.rows));
  if (carve.answer_size_query(temp_bytes)) return;
  detail::check_value_loss_inputs(in);
  VERL_CHECK_ARG(state != nullptr, "state: expected a device ValueLossState, got null");
  VERL_CHECK_ARG(in.rows * in.cols == 0 || grad_vpreds != nullptr,
                 "grad_vpreds: expected a ({}, {}) device array, got null", in.rows, in.cols);
  const unsigned grid = detail::warp_rows_grid(in.rows);
  if (in.rows > 0)
    detail::agg_rows_kernel<<<grid, detail::kThreads, 0, stream>>>(nullptr, in.response_mask, in.rows, in.cols, true,
                                                                   lengths, nullptr);
  detail::finish_agg_kernel<<<1, detail::kThreads, 0, stream>>>(lengths, nullptr, in.rows, in.cols,
                                                                AggregationParams::from(mode, info), agg);
  if (in.rows > 0)
    detail::value_loss_rows_kernel<<<grid, detail::kThreads, 0, stream>>>(in, static_cast<float>(cliprange_value), agg,
                                                                          lengths, grad_vpreds, rows_out);
  detail::finish_value_loss_kernel<<<1, detail::kThreads, 0, stream>>>(rows_out, lengths, in.rows, agg, state);
  VERL_CUDA_CHECK(cudaGetLastError());
}

}  // namespace verl::kernels
