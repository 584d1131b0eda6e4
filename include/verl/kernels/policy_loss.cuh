// verl's policy losses as one fused CUDA pass (CPU references: verl::algo::VanillaPPO, GPGLoss,
// ReinforceLoss, CISPO, SAPO, GSPO, GeoMean; the per-token math is shared with the host through
// policy_loss.hpp).
//
// Three small steps and one fused pass: the mask's row lengths (one warp per row), the aggregation
// (one block: the loss_agg_mode's scale from the batch counts or GlobalBatchInfo), then one warp per
// row computes every token's loss term, ppo_kl term, clip indicators and d pg_loss / d log_prob
// (which needs the row's aggregation weight, hence the first pass; sequence-level losses first sum
// their row statistics over the same warp), and one block combines the per-row sums in a fixed
// order into pg_loss and verl's metrics. Advantages are read either per token (B, T) or per
// response (B) and broadcast inside the kernel (outcome estimators give one scalar per response:
// no B x T advantage matrix is needed).
#pragma once

#include <cuda_runtime.h>

#include <cub/block/block_reduce.cuh>

#include <cstdint>

#include "verl/kernels/detail/cuda_b_common.cuh"
#include "verl/kernels/masked_reductions.cuh"
#include "verl/kernels/policy_loss.hpp"

namespace verl::kernels {

namespace detail {

template <class Loss>
__global__ void policy_loss_rows_kernel(PolicyLossInputs in, Loss loss, const AggLossState* agg,
                                        const std::int32_t* __restrict lengths, float* __restrict grad,
                                        PpoRow* __restrict rows_out) {
  const int lane = threadIdx.x & 31;
  const Aggregation a = agg->aggregation;
  const bool select_valid = a.selects_valid();
  const std::int64_t warps = static_cast<std::int64_t>(gridDim.x) * (blockDim.x / 32);
  for (std::int64_t row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; row < in.rows; row += warps) {
    typename Loss::Row state{};
    if constexpr (Loss::kRowPass) {
      PolicyRowSums sums = policy_row_sums(loss, in, row, lane, 32);
      for (double& term : sums.terms) term = warp_sum(term);
      state = loss.finish_row(sums, PolicyRowContext{lengths[row], in.rows});
    }
    PpoRow sums =
        policy_token_pass(loss, in, state, row, a.gradient_weight(lengths[row]), select_valid, grad, lane, 32);
    sums.loss_sum = warp_sum(sums.loss_sum);
    sums.kl_sum = warp_sum(sums.kl_sum);
    sums.clipped = warp_sum(sums.clipped);
    sums.clipped_lower = warp_sum(sums.clipped_lower);
    if constexpr (Loss::kOwnReduction) sums.loss_sum = state.loss;
    if (lane == 0) rows_out[row] = sums;
  }
}

struct SumPpoRow {
  __device__ PpoRow operator()(const PpoRow& a, const PpoRow& b) const {
    return {a.loss_sum + b.loss_sum, a.kl_sum + b.kl_sum, a.clipped + b.clipped, a.clipped_lower + b.clipped_lower};
  }
};

template <class Loss>
__global__ void finish_policy_loss_kernel(const PpoRow* __restrict rows_in, const std::int32_t* __restrict lengths,
                                          std::int64_t rows, const AggLossState* agg, PolicyLossState* out) {
  using Reduce = cub::BlockReduce<PpoRow, kThreads>;
  __shared__ typename Reduce::TempStorage temp;
  const Aggregation a = agg->aggregation;
  PpoRow local{0, 0, 0, 0};
  for (std::int64_t i = threadIdx.x; i < rows; i += blockDim.x) {
    PpoRow r = rows_in[i];
    // The loss weights each row; the metrics are plain masked means over tokens.
    r.loss_sum = weighted_row_loss<Loss>(r, a, lengths[i]);
    local = SumPpoRow{}(local, r);
  }
  const PpoRow total = Reduce(temp).Reduce(local, SumPpoRow{});
  if (threadIdx.x == 0) *out = finish_policy_loss<Loss>(total, a, static_cast<double>(agg->tokens), rows);
}

}  // namespace detail

/// One of verl's policy losses (`loss`: a KernelPolicyLoss, e.g. kernel_policy_loss(algo::CISPO{}))
/// on a (B, T) batch: pg_loss and metrics into `state` (device), d pg_loss / d log_prob into
/// grad_log_prob (B, T). Two-phase like cub: temp == nullptr only sets temp_bytes. sapo and gspo
/// aggregate with seq-mean-token-mean whatever `mode` says, geo_mean with its own mean over rows.
template <class Loss>
void policy_loss(void* temp, std::size_t& temp_bytes, const PolicyLossInputs& in, const Loss& loss,
                 LossAggMode mode, const GlobalBatchInfo& info, float* grad_log_prob, PolicyLossState* state,
                 cudaStream_t stream = nullptr) {
  detail::check_kernel_policy_loss<Loss>();
  check_batch_shape(in.rows, in.cols);
  detail::TempCarver carve(temp);
  auto* lengths = carve.take<std::int32_t>(static_cast<std::size_t>(in.rows));
  auto* agg = carve.take<AggLossState>(1);
  auto* rows_out = carve.take<detail::PpoRow>(static_cast<std::size_t>(in.rows));
  if (carve.querying()) {
    temp_bytes = carve.bytes();
    return;
  }
  VERL_CHECK_ARG(temp_bytes >= carve.bytes(), "temp_bytes: expected at least {} (the size query), got {}",
                 carve.bytes(), temp_bytes);
  detail::check_policy_loss_inputs(in, Loss::kReadsOldLogProb);
  VERL_CHECK_ARG(state != nullptr, "state: expected a device PolicyLossState, got null");
  VERL_CHECK_ARG(in.rows * in.cols == 0 || grad_log_prob != nullptr,
                 "grad_log_prob: expected a ({}, {}) device array, got null", in.rows, in.cols);
  const auto agg_params = AggregationParams::from(detail::effective_mode<Loss>(mode), info);
  const unsigned grid = detail::warp_rows_grid(in.rows);
  if (in.rows > 0)
    detail::agg_rows_kernel<<<grid, detail::kThreads, 0, stream>>>(nullptr, in.response_mask, in.rows, in.cols, true,
                                                                   lengths, nullptr);
  detail::finish_agg_kernel<<<1, detail::kThreads, 0, stream>>>(lengths, nullptr, in.rows, in.cols, agg_params, agg);
  if (in.rows > 0)
    detail::policy_loss_rows_kernel<Loss>
        <<<grid, detail::kThreads, 0, stream>>>(in, loss, agg, lengths, grad_log_prob, rows_out);
  detail::finish_policy_loss_kernel<Loss><<<1, detail::kThreads, 0, stream>>>(rows_out, lengths, in.rows, agg, state);
  VERL_CUDA_CHECK(cudaGetLastError());
}

/// verl's compute_policy_loss_vanilla (policy_loss with VanillaPPOParams).
inline void vanilla_policy_loss(void* temp, std::size_t& temp_bytes, const PolicyLossInputs& in,
                                const VanillaPPOParams& params, LossAggMode mode, const GlobalBatchInfo& info,
                                float* grad_log_prob, PolicyLossState* state, cudaStream_t stream = nullptr) {
  policy_loss(temp, temp_bytes, in, params, mode, info, grad_log_prob, state, stream);
}

}  // namespace verl::kernels
