// verl's vanilla PPO policy loss as one fused CUDA pass (CPU reference: verl::algo::VanillaPPO).
//
// Three small steps and one fused pass: the mask's row lengths (one warp per row), the aggregation
// (one block: the loss_agg_mode's scale from the batch counts or GlobalBatchInfo), then one warp per
// row computes every token's loss term, -log-ratio, clip indicators and d pg_loss / d log_prob
// (which needs the row's aggregation weight, hence the first pass), and one block combines the
// per-row sums in a fixed order into pg_loss and verl's metrics. Advantages are read either per
// token (B, T) or per response (B) and broadcast inside the kernel (outcome estimators give one
// scalar per response: no B x T advantage matrix is needed).
#pragma once

#include <cuda_runtime.h>

#include <cub/block/block_reduce.cuh>

#include <cstdint>

#include "verl/kernels/detail/cuda_b_common.cuh"
#include "verl/kernels/masked_reductions.cuh"
#include "verl/kernels/policy_loss.hpp"

namespace verl::kernels {

/// pg_loss and verl's metrics (actor/pg_clipfrac, actor/ppo_kl, actor/pg_clipfrac_lower).
struct PolicyLossState {
  float pg_loss;
  float pg_clipfrac;
  float ppo_kl;
  float pg_clipfrac_lower;
};

struct PolicyLossInputs {
  const float* old_log_prob = nullptr;  ///< (B, T)
  const float* log_prob = nullptr;      ///< (B, T): the differentiated input
  const float* advantages = nullptr;    ///< (B, T), or (B) when advantages_per_row
  bool advantages_per_row = false;
  const float* response_mask = nullptr;       ///< (B, T) 0/1
  const float* rollout_is_weights = nullptr;  ///< (B, T) or nullptr
  std::int64_t rows = 0, cols = 0;
};

namespace detail {

struct PpoRow {
  double loss_sum;
  double kl_sum;
  long long clipped;
  long long clipped_lower;
};

__global__ void vanilla_ppo_rows_kernel(PolicyLossInputs in, VanillaPPOParams p, const AggLossState* agg,
                                        const std::int32_t* __restrict lengths, float* __restrict grad,
                                        PpoRow* __restrict rows_out) {
  const int lane = threadIdx.x & 31;
  const Aggregation a = agg->aggregation;
  const bool select_valid = a.selects_valid();
  const std::int64_t warps = static_cast<std::int64_t>(gridDim.x) * (blockDim.x / 32);
  for (std::int64_t row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; row < in.rows; row += warps) {
    const float row_weight = a.gradient_weight(lengths[row]);
    const std::int64_t base = row * in.cols;
    const float row_advantage = in.advantages_per_row ? in.advantages[row] : 0.0f;
    double loss_sum = 0, kl_sum = 0;
    long long clipped = 0, clipped_lower = 0;
    for (std::int64_t t = lane; t < in.cols; t += 32) {
      const std::int64_t i = base + t;
      const float advantage = in.advantages_per_row ? row_advantage : in.advantages[i];
      const float w = in.rollout_is_weights != nullptr ? in.rollout_is_weights[i] : 1.0f;
      const PpoToken tok = vanilla_ppo_token(p, in.log_prob[i], in.old_log_prob[i], advantage, in.response_mask[i], w,
                                             row_weight, select_valid);
      grad[i] = tok.grad;
      loss_sum += static_cast<double>(tok.loss_term);
      kl_sum += static_cast<double>(tok.kl_term);
      clipped += tok.clipped;
      clipped_lower += tok.clipped_lower;
    }
    loss_sum = warp_sum(loss_sum);
    kl_sum = warp_sum(kl_sum);
    clipped = warp_sum(clipped);
    clipped_lower = warp_sum(clipped_lower);
    if (lane == 0) rows_out[row] = PpoRow{loss_sum, kl_sum, clipped, clipped_lower};
  }
}

struct SumPpoRow {
  __device__ PpoRow operator()(const PpoRow& a, const PpoRow& b) const {
    return {a.loss_sum + b.loss_sum, a.kl_sum + b.kl_sum, a.clipped + b.clipped, a.clipped_lower + b.clipped_lower};
  }
};

__global__ void finish_ppo_kernel(const PpoRow* __restrict rows_in, const std::int32_t* __restrict lengths,
                                  std::int64_t rows, const AggLossState* agg, PolicyLossState* out) {
  using Reduce = cub::BlockReduce<PpoRow, kThreads>;
  __shared__ typename Reduce::TempStorage temp;
  const Aggregation a = agg->aggregation;
  PpoRow local{0, 0, 0, 0};
  for (std::int64_t i = threadIdx.x; i < rows; i += blockDim.x) {
    PpoRow r = rows_in[i];
    // The loss weights each row; the metrics are plain masked means over tokens.
    r.loss_sum = a.drops(lengths[i]) ? 0.0 : r.loss_sum * static_cast<double>(a.row_weight(lengths[i]));
    local = SumPpoRow{}(local, r);
  }
  const PpoRow total = Reduce(temp).Reduce(local, SumPpoRow{});
  if (threadIdx.x != 0) return;
  const double tokens = static_cast<double>(agg->tokens);
  *out = PolicyLossState{static_cast<float>(total.loss_sum * static_cast<double>(a.scale)),
                         masked_mean_of(static_cast<double>(total.clipped), tokens), masked_mean_of(total.kl_sum, tokens),
                         masked_mean_of(static_cast<double>(total.clipped_lower), tokens)};
}

}  // namespace detail

/// verl's compute_policy_loss_vanilla: pg_loss and metrics into `state` (device), d pg_loss /
/// d log_prob into grad_log_prob (B, T). agg_state (optional, device) receives the aggregation.
inline void vanilla_policy_loss(void* temp, std::size_t& temp_bytes, const PolicyLossInputs& in,
                                const VanillaPPOParams& params, LossAggMode mode, const GlobalBatchInfo& info,
                                float* grad_log_prob, PolicyLossState* state, cudaStream_t stream = nullptr) {
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
  const auto agg_params = AggregationParams::from(mode, info);
  const unsigned grid = detail::warp_rows_grid(in.rows);
  if (in.rows > 0)
    detail::agg_rows_kernel<<<grid, detail::kThreads, 0, stream>>>(nullptr, in.response_mask, in.rows, in.cols, true,
                                                                   lengths, nullptr);
  detail::finish_agg_kernel<<<1, detail::kThreads, 0, stream>>>(lengths, nullptr, in.rows, in.cols, agg_params, agg);
  if (in.rows > 0)
    detail::vanilla_ppo_rows_kernel<<<grid, detail::kThreads, 0, stream>>>(in, params, agg, lengths, grad_log_prob,
                                                                           rows_out);
  detail::finish_ppo_kernel<<<1, detail::kThreads, 0, stream>>>(rows_out, lengths, in.rows, agg, state);
  VERL_CUDA_CHECK(cudaGetLastError());
}

}  // namespace verl::kernels
