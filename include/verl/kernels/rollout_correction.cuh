// verl's rollout correction and the bypass_mode policy loss on CUDA (CPU references:
// verl::algo::compute_rollout_correction_and_rejection_mask and verl::algo::BypassMode; the row
// math is shared with the host through rollout_correction.hpp, whose comment describes the
// passes and their summation order).
//
// Shape: a team of 8 threads per row (4 rows per warp; the team's lane k owns the columns j with
// j % 8 == k, which is verl::algo's lane order), rows in a grid-stride loop. Each row pass writes
// one statistics record per row; the host downloads them (O(rows) records, after a stream sync),
// combines them in row order and launches the next pass with the batch-level numbers it needs:
//   pass 1   row statistics, the corrected mask m * keep
//   host     every metric but two; the batch mean of the clamped IS weights
//   pass 2   (IS only) ESS terms, truncated weights min(w, threshold) and their sums
//   host     ESS; batch_normalize's divisor
//   pass 3   (batch_normalize only) weights / divisor, element-wise
// bypass_mode then runs policy_loss (vanilla PPO on the corrected mask, or REINFORCE with the IS
// weights) on the same stream. Both entry points are synchronous: they return host metrics.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "verl/kernels/detail/device_utils.cuh"
#include "verl/kernels/detail/cuda_check.cuh"
#include "verl/kernels/policy_loss.cuh"
#include "verl/kernels/rollout_correction.hpp"

namespace verl::kernels {

namespace detail {

inline constexpr int kCorrectionThreads = 256;
inline constexpr int kTeamsPerBlock = kCorrectionThreads / kTeamLanes;
static_assert(32 % kTeamLanes == 0, "a team must not straddle two warps");

/// A team of kTeamLanes threads of one warp walking one row (see walk_row); `mask` names the
/// team's threads, so the teams of a warp may run different numbers of rows.
struct DeviceTeam {
  static constexpr int kLanesPerThread = 1;
  unsigned mask;
  int k;  ///< this thread's lane in the team

  __device__ int lane(int) const { return k; }
  __device__ std::int64_t first_token() const { return k; }
  __device__ std::int64_t token_step() const { return kTeamLanes; }
  template <class Terms>
  __device__ float ordered_term(const Terms* terms, int lane, int q) const {
    return __shfl_sync(mask, terms[0].ordered[q], lane, kTeamLanes);
  }
  template <class Terms>
  __device__ float lane_term(const Terms* terms, int lane, int q) const {
    return __shfl_sync(mask, terms[0].lane[q], lane, kTeamLanes);
  }
  /// lane_sum's combination: lanes 0..7 from 0, then the tail (the same on every thread).
  template <class Terms>
  __device__ RowSums<Terms> combine(const RowSums<Terms>* lanes, const double* ordered, const double* tail) const {
    const RowSums<Terms>& mine = lanes[0];
    RowSums<Terms> row = RowSums<Terms>::empty();
#pragma unroll
    for (int q = 0; q < Terms::kLane; ++q) {
      double total = 0;
#pragma unroll
      for (int source = 0; source < kTeamLanes; ++source) total += __shfl_sync(mask, mine.lane[q], source, kTeamLanes);
      row.lane[q] = total + tail[q];
    }
#pragma unroll
    for (int q = 0; q < Terms::kOrdered; ++q) row.ordered[q] = ordered[q];
#pragma unroll
    for (int q = 0; q < Terms::kTally; ++q) {
      std::int32_t v = mine.tally[q];
      for (int offset = kTeamLanes / 2; offset > 0; offset >>= 1) v += __shfl_xor_sync(mask, v, offset, kTeamLanes);
      row.tally[q] = v;
    }
#pragma unroll
    for (int q = 0; q < Terms::kExtreme; ++q) {
      float hi = mine.max[q], lo = mine.min[q];  // never NaN: the walk skips NaN values
      for (int offset = kTeamLanes / 2; offset > 0; offset >>= 1) {
        hi = larger_of(hi, __shfl_xor_sync(mask, hi, offset, kTeamLanes));
        lo = smaller_of(lo, __shfl_xor_sync(mask, lo, offset, kTeamLanes));
      }
      row.max[q] = hi;
      row.min[q] = lo;
    }
    return row;
  }
};

__device__ __forceinline__ DeviceTeam this_team() {
  const int lane_in_warp = static_cast<int>(threadIdx.x) & 31;
  return DeviceTeam{0xffu << (lane_in_warp / kTeamLanes * kTeamLanes), lane_in_warp % kTeamLanes};
}

/// The first row of this thread's team and the stride of the grid's teams.
__device__ __forceinline__ std::int64_t first_team_row() {
  return static_cast<std::int64_t>(blockIdx.x) * kTeamsPerBlock + static_cast<std::int64_t>(threadIdx.x) / kTeamLanes;
}
__device__ __forceinline__ std::int64_t team_row_stride() {
  return static_cast<std::int64_t>(gridDim.x) * kTeamsPerBlock;
}

VERL_HEADER_KERNEL void __launch_bounds__(kCorrectionThreads)
    correction_rows_kernel(RolloutCorrectionBatch in, const RolloutCorrectionParams* __restrict params,
                           float* __restrict corrected_mask, RolloutCorrectionRow* __restrict rows_out) {
  const DeviceTeam team = this_team();
  for (std::int64_t row = first_team_row(); row < in.rows; row += team_row_stride()) {
    const RolloutCorrectionRow r = correction_row(team, *params, in, row, corrected_mask);
    if (team.k == 0) rows_out[row] = r;
  }
}

VERL_HEADER_KERNEL void __launch_bounds__(kCorrectionThreads)
    importance_rows_kernel(RolloutCorrectionBatch in, const RolloutCorrectionParams* __restrict params,
                           const RolloutCorrectionRow* __restrict pass1, float shifted_mean, float* __restrict weights,
                           ImportanceRow* __restrict rows_out) {
  const DeviceTeam team = this_team();
  for (std::int64_t row = first_team_row(); row < in.rows; row += team_row_stride()) {
    const ImportanceRow r = importance_row(team, *params, in, row, pass1[row], shifted_mean, weights);
    if (team.k == 0) rows_out[row] = r;
  }
}

VERL_HEADER_KERNEL void divide_weights_kernel(float* __restrict weights, std::int64_t n, float divisor) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    weights[i] = div_rn(weights[i], divisor);
}

/// The correction's device scratch, carved from the caller's temp storage.
struct CorrectionScratch {
  RolloutCorrectionParams* params = nullptr;
  RolloutCorrectionRow* rows = nullptr;
  ImportanceRow* importance = nullptr;

  CorrectionScratch(TempCarver& carve, std::int64_t rows_count, const RolloutCorrectionParams& p) {
    params = carve.take<RolloutCorrectionParams>(1);
    rows = carve.take<RolloutCorrectionRow>(static_cast<std::size_t>(rows_count));
    if (p.importance_sampling) importance = carve.take<ImportanceRow>(static_cast<std::size_t>(rows_count));
  }
};

template <class T>
std::vector<T> download_rows(const T* device, std::int64_t rows, cudaStream_t stream) {
  std::vector<T> host(static_cast<std::size_t>(rows));
  VERL_CUDA_CHECK(cudaMemcpyAsync(host.data(), device, host.size() * sizeof(T), cudaMemcpyDeviceToHost, stream));
  VERL_CUDA_CHECK(cudaStreamSynchronize(stream));  // the host reads them next
  return host;
}

/// The passes and the host finishes on a non-empty batch; returns the prefixed metrics. The
/// weights' last pass may still run on `stream` when it returns.
inline Metrics run_rollout_correction(const CorrectionScratch& scratch, const RolloutCorrectionBatch& in,
                                      const RolloutCorrectionParams& p, float* weights, float* corrected_mask,
                                      EmptyMaskError empty, cudaStream_t stream) {
  const unsigned grid = grid_for(in.rows, kTeamsPerBlock);
  // Pageable source: the call returns once `p` is staged, so it may go out of scope after.
  VERL_CUDA_CHECK(cudaMemcpyAsync(scratch.params, &p, sizeof(p), cudaMemcpyHostToDevice, stream));
  correction_rows_kernel<<<grid, kCorrectionThreads, 0, stream>>>(in, scratch.params, corrected_mask, scratch.rows);
  VERL_CUDA_CHECK_LAUNCH();
  const std::vector<RolloutCorrectionRow> rows = download_rows(scratch.rows, in.rows, stream);
  CorrectionSummary summary = finish_correction_rows(p, rows, in.cols, empty);
  if (p.importance_sampling) {
    importance_rows_kernel<<<grid, kCorrectionThreads, 0, stream>>>(in, scratch.params, scratch.rows,
                                                                    summary.shifted_mean, weights, scratch.importance);
    VERL_CUDA_CHECK_LAUNCH();
    const std::vector<ImportanceRow> importance = download_rows(scratch.importance, in.rows, stream);
    const float divisor = finish_importance_rows(p, importance, summary);
    if (divisor != 0.0f && weights != nullptr) {
      const std::int64_t n = in.rows * in.cols;
      divide_weights_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(weights, n, divisor);
      VERL_CUDA_CHECK_LAUNCH();
    }
  }
  return prefixed_correction_metrics(summary.metrics);
}

}  // namespace detail

/// verl's compute_rollout_correction_and_rejection_mask on a (B, T) batch of device arrays:
/// writes the IS weights (when IS is on and `rollout_is_weights` is given) and the corrected mask
/// (when `corrected_mask` is given), both (B, T), and returns every metric under its
/// "rollout_corr/" key. Two-phase like cub (temp == nullptr only sets temp_bytes; the size depends
/// on the rows and on whether IS is on). Synchronous: it waits for `stream` twice to read the rows'
/// statistics; the outputs are complete in `stream` order. Raises as verl does for a mask that is
/// not 0/1 or has no valid token.
inline Metrics rollout_correction(void* temp, std::size_t& temp_bytes, const RolloutCorrectionBatch& in,
                                  const RolloutCorrectionParams& params, float* rollout_is_weights,
                                  float* corrected_mask, cudaStream_t stream = nullptr) {
  check_batch_shape(in.rows, in.cols);
  detail::TempCarver carve(temp);
  const detail::CorrectionScratch scratch(carve, in.rows, params);
  if (carve.answer_size_query(temp_bytes)) return {};
  detail::check_correction_batch(in);
  detail::check_correction_outputs(in, rollout_is_weights, corrected_mask);
  if (in.rows * in.cols == 0) detail::throw_empty_mask(detail::EmptyMaskError::rollout_correction, in.rows, in.cols);
  return detail::run_rollout_correction(scratch, in, params, rollout_is_weights, corrected_mask,
                                        detail::EmptyMaskError::rollout_correction, stream);
}

/// verl's bypass_mode policy loss (`params`: kernel_policy_loss(algo::BypassMode{...})) on a
/// (B, T) batch: in.old_log_prob holds the rollout policy's log-probs; in.rollout_is_weights is
/// ignored, as in verl. Runs the correction, then policy_loss with vanilla PPO on the corrected
/// mask (ppo_clip) or REINFORCE with the correction's IS weights (reinforce), writing
/// d pg_loss / d log_prob to grad_log_prob (B, T) and the loss's state to `state` (device).
/// Returns that state and the merged metrics on the host (synchronous). Two-phase like cub.
/// Raises as verl does for an all-zero mask.
inline BypassModeResult bypass_mode_policy_loss(void* temp, std::size_t& temp_bytes, const PolicyLossInputs& in,
                                                const BypassModeParams& params, LossAggMode mode,
                                                const GlobalBatchInfo& info, float* grad_log_prob,
                                                PolicyLossState* state, cudaStream_t stream = nullptr) {
  check_batch_shape(in.rows, in.cols);
  const bool reinforce = params.loss_type == algo::BypassLossType::reinforce;
  const bool weighted = reinforce && params.correction.importance_sampling;
  const bool rejects = params.correction.criteria_count > 0;
  const auto n = static_cast<std::size_t>(in.rows * in.cols);
  detail::TempCarver carve(temp);
  const detail::CorrectionScratch scratch(carve, in.rows, params.correction);
  float* corrected_mask = rejects ? carve.take<float>(n) : nullptr;
  float* weights = weighted ? carve.take<float>(n) : nullptr;
  std::size_t loss_bytes = 0;
  if (reinforce) {
    policy_loss(nullptr, loss_bytes, in, ReinforceParams{}, mode, info, nullptr, nullptr, stream);
  } else {
    policy_loss(nullptr, loss_bytes, in, params.ppo_clip, mode, info, nullptr, nullptr, stream);
  }
  void* loss_temp = carve.take<unsigned char>(loss_bytes);
  if (carve.answer_size_query(temp_bytes)) return {};
  detail::check_policy_loss_inputs(in, true);
  VERL_CHECK_ARG(state != nullptr, "state: expected a device PolicyLossState, got null");
  VERL_CHECK_ARG(n == 0 || grad_log_prob != nullptr, "grad_log_prob: expected a ({}, {}) device array, got null",
                 in.rows, in.cols);
  const RolloutCorrectionBatch batch{in.log_prob, in.old_log_prob, in.response_mask, in.rows, in.cols};
  detail::check_correction_batch(batch);
  if (n == 0) detail::throw_empty_mask(detail::EmptyMaskError::bypass_mode, in.rows, in.cols);
  Metrics correction = detail::run_rollout_correction(scratch, batch, params.correction, weights, corrected_mask,
                                                      detail::EmptyMaskError::bypass_mode, stream);
  PolicyLossInputs run = in;
  run.response_mask = rejects ? corrected_mask : in.response_mask;
  run.rollout_is_weights = weights;  // null unless REINFORCE with IS weights
  run.token_selection = nullptr;
  if (reinforce) {
    policy_loss(loss_temp, loss_bytes, run, ReinforceParams{}, mode, info, grad_log_prob, state, stream);
  } else {
    policy_loss(loss_temp, loss_bytes, run, params.ppo_clip, mode, info, grad_log_prob, state, stream);
  }
  BypassModeResult result;
  VERL_CUDA_CHECK(cudaMemcpyAsync(&result.state, state, sizeof(PolicyLossState), cudaMemcpyDeviceToHost, stream));
  VERL_CUDA_CHECK(cudaStreamSynchronize(stream));  // the host reads the state next
  result.metrics = detail::bypass_loss_metrics(result.state, params.loss_type);
  result.metrics.merge(correction);
  return result;
}

}  // namespace verl::kernels
