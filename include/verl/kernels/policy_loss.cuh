// verl's policy losses as one fused CUDA pass (CPU references: verl::algo::VanillaPPO, GPGLoss,
// ReinforceLoss, CISPO, SAPO, GSPO, GeoMean, ClipCov, KLCov; the per-token math is shared with the
// host through policy_loss.hpp).
//
// Three small steps and one fused pass: the mask's row lengths (one warp per row), the aggregation
// (one block: the loss_agg_mode's scale from the batch counts or GlobalBatchInfo), then one warp per
// row computes every token's loss term, ppo_kl term, clip indicators and d pg_loss / d log_prob
// (which needs the row's aggregation weight, hence the first pass; sequence-level losses first sum
// their row statistics over the same warp), and one block combines the per-row sums in a fixed
// order into pg_loss and verl's metrics. Advantages are read either per token (B, T) or per
// response (B) and broadcast inside the kernel (outcome estimators give one scalar per response:
// no B x T advantage matrix is needed).
//
// clip_cov and kl_cov add a selection pass before the fused one: the batch means of A and
// log_prob (warp per row, one block), then clip_cov compacts its candidates in batch order (cub
// DeviceSelect) and draws from them on one thread with verl::algo's std::mt19937_64 sequence, and
// kl_cov sorts rank keys with their indices (cub's stable descending radix sort) and takes the
// first k; a (B, T) byte mask carries the choice into the fused pass.
#pragma once

#include <cuda_runtime.h>

#include <cub/block/block_reduce.cuh>
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_select.cuh>

#include <cstdint>
#include <limits>

#include "verl/kernels/detail/device_utils.cuh"
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

// ---- the selection pass of clip_cov and kl_cov ---------------------------------------------------------

/// Per-row double sums of the valid tokens' advantages and log-probs: the centres of cov.
struct CovarianceRowSums {
  double advantage;
  double log_prob;
};

struct SumCovarianceRows {
  __device__ CovarianceRowSums operator()(const CovarianceRowSums& a, const CovarianceRowSums& b) const {
    return {a.advantage + b.advantage, a.log_prob + b.log_prob};
  }
};

template <class Loss>
__global__ void covariance_row_sums_kernel(PolicyLossInputs in, CovarianceRowSums* __restrict rows_out) {
  const int lane = threadIdx.x & 31;
  const std::int64_t warps = static_cast<std::int64_t>(gridDim.x) * (blockDim.x / 32);
  for (std::int64_t row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; row < in.rows; row += warps) {
    CovarianceRowSums sums{0.0, 0.0};
    for (std::int64_t t = lane; t < in.cols; t += 32) {
      const PolicyTokenInput tok = policy_token_input<Loss>(in, row, row * in.cols + t);
      if (tok.mask > 0.0f) {
        sums.advantage += static_cast<double>(tok.advantage);
        sums.log_prob += static_cast<double>(tok.log_prob);
      }
    }
    sums.advantage = warp_sum(sums.advantage);
    sums.log_prob = warp_sum(sums.log_prob);
    if (lane == 0) rows_out[row] = sums;
  }
}

/// One block combines the rows in a fixed order (the centres do not depend on the launch).
template <class Loss>
__global__ void covariance_centres_kernel(Loss loss, const CovarianceRowSums* __restrict rows_in, std::int64_t rows,
                                          const AggLossState* agg, CovarianceCentres* centres) {
  using Reduce = cub::BlockReduce<CovarianceRowSums, kThreads>;
  __shared__ typename Reduce::TempStorage temp;
  CovarianceRowSums local{0.0, 0.0};
  for (std::int64_t i = threadIdx.x; i < rows; i += blockDim.x) local = SumCovarianceRows{}(local, rows_in[i]);
  const CovarianceRowSums total = Reduce(temp).Reduce(local, SumCovarianceRows{});
  if (threadIdx.x == 0) *centres = loss.centres(total.advantage, total.log_prob, agg->tokens);
}

/// clip_cov: which tokens may be zeroed (flags), beside their flat indices.
template <class Loss>
__global__ void covariance_candidates_kernel(PolicyLossInputs in, Loss loss, const CovarianceCentres* centres,
                                             std::uint8_t* __restrict flags, std::int32_t* __restrict indices) {
  const std::int64_t n = in.rows * in.cols;
  const CovarianceCentres c = *centres;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    flags[i] = loss.candidate(policy_token_input<Loss>(in, i / in.cols, i), c) ? 1 : 0;
    indices[i] = static_cast<std::int32_t>(i);
  }
}

/// clip_cov: verl::algo's draw, one thread (a partial Fisher-Yates is sequential: budget =
/// clip_cov_ratio * N_valid steps, a few hundred at verl's default ratio of 2e-4 but a long serial
/// kernel at ratios like 0.1 over millions of tokens). The engine's 2.5 KB live in shared memory.
template <class Loss>
__global__ void covariance_draw_kernel(Loss loss, std::int32_t* candidates, const std::int32_t* candidate_count,
                                       const AggLossState* agg, std::int32_t* chosen_count) {
  __shared__ std::uint64_t engine_state[Mt19937_64::kStateSize];
  const std::int64_t size = *candidate_count;
  const std::int64_t budget = loss.budget(agg->tokens);
  const std::int64_t chosen = size < budget ? size : budget;
  if (chosen < size) choose_front(candidates, size, chosen, loss.seed, engine_state);
  *chosen_count = static_cast<std::int32_t>(chosen);
}

/// kl_cov: each token's rank key (covariance_rank_key) beside its flat index.
template <class Loss>
__global__ void covariance_keys_kernel(PolicyLossInputs in, const CovarianceCentres* centres,
                                       std::uint64_t* __restrict keys, std::int32_t* __restrict indices) {
  const std::int64_t n = in.rows * in.cols;
  const CovarianceCentres c = *centres;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const PolicyTokenInput tok = policy_token_input<Loss>(in, i / in.cols, i);
    keys[i] = covariance_rank_key(token_covariance(tok, c), tok.mask > 0.0f);
    indices[i] = static_cast<std::int32_t>(i);
  }
}

/// Sets selection[chosen[k]] for the first k chosen indices: clip_cov's drawn count, or kl_cov's
/// max(1, int(N_valid * kl_cov_ratio)) leaders of the descending sort.
template <class Loss>
__global__ void mark_selected_kernel(Loss loss, const std::int32_t* __restrict chosen, const std::int32_t* chosen_count,
                                     const AggLossState* agg, std::uint8_t* __restrict selection) {
  std::int64_t count = 0;
  if constexpr (Loss::kSelection == TokenSelection::top_covariance) {
    count = loss.selected_count(agg->tokens);
  } else {
    count = *chosen_count;
  }
  for (std::int64_t k = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; k < count;
       k += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    selection[chosen[k]] = 1;
}

/// The scratch of the selection pass, carved from policy_loss's temp storage.
template <class Loss>
struct SelectionScratch {
  CovarianceRowSums* row_sums = nullptr;
  CovarianceCentres* centres = nullptr;
  std::uint8_t* selection = nullptr;  ///< (B, T); clip_cov's candidate flags first
  std::int32_t* indices = nullptr;
  std::int32_t* chosen = nullptr;  ///< compacted candidates (clip_cov) or sorted indices (kl_cov)
  std::uint64_t* keys = nullptr;
  std::uint64_t* sorted_keys = nullptr;
  std::int32_t* counts = nullptr;  ///< [0] candidates, [1] drawn
  void* cub_temp = nullptr;
  std::size_t cub_bytes = 0;

  SelectionScratch(TempCarver& carve, std::int64_t rows, std::int64_t cols, cudaStream_t stream) {
    const std::int64_t n = rows * cols;
    const auto items = static_cast<std::size_t>(n);
    const int count = static_cast<int>(n > 0 ? n : 1);
    row_sums = carve.take<CovarianceRowSums>(static_cast<std::size_t>(rows));
    centres = carve.take<CovarianceCentres>(1);
    selection = carve.take<std::uint8_t>(items);
    indices = carve.take<std::int32_t>(items);
    chosen = carve.take<std::int32_t>(items);
    counts = carve.take<std::int32_t>(2);
    if constexpr (Loss::kSelection == TokenSelection::top_covariance) {
      keys = carve.take<std::uint64_t>(items);
      sorted_keys = carve.take<std::uint64_t>(items);
      VERL_CUDA_CHECK(cub::DeviceRadixSort::SortPairsDescending(nullptr, cub_bytes, keys, sorted_keys, indices, chosen,
                                                                count, 0, 33, stream));
    } else {
      VERL_CUDA_CHECK(
          cub::DeviceSelect::Flagged(nullptr, cub_bytes, indices, selection, chosen, counts, count, stream));
    }
    cub_temp = carve.take<unsigned char>(cub_bytes);
  }

  /// Fills `selection` (B, T) with the loss's batch-level choice. Needs the batch's token count in agg.
  void run(const PolicyLossInputs& in, const Loss& loss, const AggLossState* agg, cudaStream_t stream) {
    const std::int64_t n = in.rows * in.cols;
    const int count = static_cast<int>(n);
    const unsigned grid = grid_for(n, kThreads);
    covariance_row_sums_kernel<Loss><<<warp_rows_grid(in.rows), kThreads, 0, stream>>>(in, row_sums);
    covariance_centres_kernel<Loss><<<1, kThreads, 0, stream>>>(loss, row_sums, in.rows, agg, centres);
    if constexpr (Loss::kSelection == TokenSelection::top_covariance) {
      covariance_keys_kernel<Loss><<<grid, kThreads, 0, stream>>>(in, centres, keys, indices);
      // Stable: equal keys keep batch order, so ties at the boundary go to the earliest tokens.
      VERL_CUDA_CHECK(cub::DeviceRadixSort::SortPairsDescending(cub_temp, cub_bytes, keys, sorted_keys, indices,
                                                                chosen, count, 0, 33, stream));
    } else {
      covariance_candidates_kernel<Loss><<<grid, kThreads, 0, stream>>>(in, loss, centres, selection, indices);
      // Stable compaction: the candidates in batch order, as the CPU lists them before its draw.
      VERL_CUDA_CHECK(
          cub::DeviceSelect::Flagged(cub_temp, cub_bytes, indices, selection, chosen, counts, count, stream));
      covariance_draw_kernel<Loss><<<1, 1, 0, stream>>>(loss, chosen, counts, agg, counts + 1);
    }
    VERL_CUDA_CHECK(cudaMemsetAsync(selection, 0, static_cast<std::size_t>(n), stream));
    mark_selected_kernel<Loss><<<grid, kThreads, 0, stream>>>(loss, chosen, counts + 1, agg, selection);
  }
};

template <class Loss>
inline constexpr bool kSelectsTokens = token_selection_of<Loss>() != TokenSelection::none;

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
  if constexpr (detail::kSelectsTokens<Loss>)
    VERL_CHECK_ARG(in.rows * in.cols <= std::numeric_limits<std::int32_t>::max(),
                   "log_prob: this loss's token selection indexes the batch with 32-bit integers; expected at most "
                   "2^31 - 1 tokens, got ({}, {})",
                   in.rows, in.cols);
  [[maybe_unused]] auto scratch = [&] {
    if constexpr (detail::kSelectsTokens<Loss>) {
      return detail::SelectionScratch<Loss>(carve, in.rows, in.cols, stream);
    } else {
      return 0;
    }
  }();
  if (carve.answer_size_query(temp_bytes)) return;
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
  PolicyLossInputs run = in;
  if constexpr (detail::kSelectsTokens<Loss>) {
    if (in.rows * in.cols > 0) {
      scratch.run(in, loss, agg, stream);
      run.token_selection = scratch.selection;
    }
  }
  if (in.rows > 0)
    detail::policy_loss_rows_kernel<Loss>
        <<<grid, detail::kThreads, 0, stream>>>(run, loss, agg, lengths, grad_log_prob, rows_out);
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
