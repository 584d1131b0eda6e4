// Advantage estimators as CUDA kernels (CPU reference: advantages.hpp / verl::algo).
//
// Outcome estimators (GRPO, Dr.GRPO, RLOO, GPG, OPO, REINFORCE++ with baseline) work on one score
// per response and the int64 group ids:
//   * row_scores: each response's score (its rewards summed over the whole row, padding
//     included, as verl's token_level_rewards.sum(-1)) and its valid-token count;
//   * groups as runs: with GroupLayout::any the (id, row) pairs are radix-sorted first (stable, so
//     a group keeps batch order); with GroupLayout::contiguous the ids are used as they are. A run
//     starts where the id changes. One thread per run head walks a short run (<= kSmallGroup rows:
//     the usual groups of 4..64 cost one pass over their scores); longer runs are queued and a
//     whole block reduces each of them, so a single huge group is still O(n);
//   * the scalar of each row (outcome_scalar, shared with the host) and, for full (B, T) outputs,
//     a broadcast over the mask.
// Row-wise recurrences (GAE, REINFORCE++ returns, ReMax returns) run backwards over the response as
// an associative scan: each step is an affine map of the carried state, maps compose, and a block
// scans its tile of the row with cub::BlockScan. Inside a thread the exact sequential recurrence of
// the CPU reference runs from the state the scan hands it. The same kernel emits each row's masked
// moments (count, mean, M2, merged exactly in double), so whitening needs one more pass, not two.
//
// Memory: every entry point takes caller-provided device temporary storage, cub-style: call with
// temp == nullptr to get temp_bytes, then again with a buffer of that size. Nothing synchronises the
// stream. Masks must be 0/1 (the CPU references check it; the kernels do not).
#pragma once

#include <cuda_runtime.h>

#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <cub/device/device_radix_sort.cuh>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <limits>

#include "verl/kernels/advantages.hpp"
#include "verl/kernels/detail/device_utils.cuh"

namespace verl::kernels {

/// Batch statistics of a masked whitening, left in device memory by the kernels that whiten.
/// count < 2 is where verl's masked_var raises: the kernels then write NaN advantages, and a caller
/// that wants verl's error reads `count` back.
struct WhitenStats {
  long long count;
  float mean;
  float inv_std;
};

namespace detail {

inline constexpr int kThreads = 256;
inline constexpr std::int64_t kSmallGroup = 64;  ///< longest run one thread walks

// ---- per-row scores and lengths ----------------------------------------------------------------

/// One warp per row: score = sum of the row's rewards (double, rounded once), length = #(m != 0).
VERL_HEADER_KERNEL void row_scores_kernel(const float* __restrict rewards, const float* __restrict mask, std::int64_t rows,
                                  std::int64_t cols, float* __restrict scores, std::int32_t* __restrict lengths) {
  const int lane = threadIdx.x & 31;
  const std::int64_t warps_per_grid = static_cast<std::int64_t>(gridDim.x) * (blockDim.x / 32);
  for (std::int64_t row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; row < rows; row += warps_per_grid) {
    const float* r = rewards + row * cols;
    const float* m = mask + row * cols;
    double sum = 0;
    long long count = 0;
    for (std::int64_t t = lane; t < cols; t += 32) {
      sum += static_cast<double>(r[t]);
      count += m[t] != 0.0f;
    }
    sum = warp_sum(sum);
    count = warp_sum(count);
    if (lane == 0) {
      scores[row] = static_cast<float>(sum);
      if (lengths != nullptr) lengths[row] = static_cast<std::int32_t>(count);
    }
  }
}

// ---- groups ------------------------------------------------------------------------------------

struct GroupRuns {
  const float* scores;          ///< by row
  const std::int32_t* lengths;  ///< by row (opo only)
  const std::int64_t* keys;     ///< by run position: ids, sorted or already contiguous
  const std::int32_t* perm;     ///< run position -> row (nullptr: identity)
  std::int64_t n;

  __device__ std::int64_t row_at(std::int64_t k) const { return perm != nullptr ? perm[k] : k; }
  __device__ bool is_head(std::int64_t k) const { return k == 0 || keys[k - 1] != keys[k]; }
  __device__ float score_at(std::int64_t k) const { return scores[row_at(k)]; }
  __device__ std::int32_t length_at(std::int64_t k) const { return lengths[row_at(k)]; }
};

VERL_HEADER_KERNEL void iota_kernel(std::int32_t* out, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    out[i] = static_cast<std::int32_t>(i);
}

/// GroupLayout::any's stable sort of (id, row) pairs, which gathers equal ids wherever they are
/// and keeps batch order inside a group. Carved from the caller's temp in the constructor (the
/// same carve in the size query and the real call); `apply` sorts and points `runs` at the result.
/// With GroupLayout::contiguous it takes nothing and does nothing.
struct GroupSort {
  std::int64_t* sorted_keys = nullptr;
  std::int32_t* perm = nullptr;
  std::int32_t* iota = nullptr;
  void* temp = nullptr;
  std::size_t bytes = 0;
  bool sorts = false;

  GroupSort(TempCarver& carve, GroupLayout layout, const std::int64_t* ids, std::int64_t rows, cudaStream_t stream)
      : sorts(layout == GroupLayout::any) {
    if (!sorts) return;
    const auto n = static_cast<std::size_t>(rows);
    sorted_keys = carve.take<std::int64_t>(n);
    perm = carve.take<std::int32_t>(n);
    iota = carve.take<std::int32_t>(n);
    VERL_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, bytes, ids, sorted_keys, iota, perm,
                                                      static_cast<int>(rows > 0 ? rows : 1), 0, 64, stream));
    temp = carve.take<unsigned char>(bytes);
  }

  void apply(const std::int64_t* ids, std::int64_t rows, GroupRuns& runs, cudaStream_t stream) {
    if (!sorts || rows == 0) return;
    iota_kernel<<<grid_for(rows, kThreads), kThreads, 0, stream>>>(iota, rows);
    VERL_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp, bytes, ids, sorted_keys, iota, perm, static_cast<int>(rows),
                                                      0, 64, stream));
    runs.keys = sorted_keys;
    runs.perm = perm;
  }
};

/// GPG's alpha needs the number of nonzero scores in the batch (integer atomics: exact).
VERL_HEADER_KERNEL void count_nonzero_kernel(const float* __restrict scores, std::int64_t n, unsigned long long* count) {
  using Reduce = cub::BlockReduce<long long, kThreads>;
  __shared__ typename Reduce::TempStorage temp;
  long long local = 0;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    local += scores[i] != 0.0f;
  const long long total = Reduce(temp).Sum(local);
  if (threadIdx.x == 0 && total != 0) atomicAdd(count, static_cast<unsigned long long>(total));
}

__device__ __forceinline__ float gpg_alpha_of(const unsigned long long* nonzero, std::int64_t n) {
  if (nonzero == nullptr) return 1.0f;
  const unsigned long long c = *nonzero;
  // verl: bsz / m.clamp(min=1) as torch's reciprocal(m) * bsz, in float32.
  return (1.0f / static_cast<float>(c > 0 ? c : 1ull)) * static_cast<float>(n);
}

__device__ __forceinline__ bool needs_std(const OutcomeParams& p) {
  return (p.estimator == OutcomeEstimator::grpo || p.estimator == OutcomeEstimator::grpo_passk) &&
         p.norm_adv_by_std_in_grpo;  // grpo_vectorized: its own
}

/// grpo_passk's top row as verl::algo picks it: the first of the run, replaced by any later row
/// with a strictly larger score (so the first maximum; NaN never wins, a NaN first row stays).
struct RunBest {
  float score;
  std::int64_t position;  ///< run position; LLONG_MAX for none
};
/// Combines two partial bests of disjoint position sets (NaN ignored; ties to the earlier row).
struct BetterRunBest {
  __device__ RunBest operator()(const RunBest& a, const RunBest& b) const {
    if (isnan(b.score)) return a;
    if (isnan(a.score)) return b;
    if (b.score > a.score) return b;
    if (a.score > b.score) return a;
    return b.position < a.position ? b : a;
  }
};
/// max over the other rows, ignoring NaN (std::max(runner_up, s) from -inf never takes a NaN).
struct MaxIgnoringNaN {
  __device__ float operator()(float a, float b) const { return a < b ? b : a; }
};

/// A group's running sums over its rows: the scores, and for opo the length-weighted scores and
/// the lengths (each thread adds its own rows; a block reduces them).
struct GroupSums {
  double sum = 0, weighted = 0;
  long long total_length = 0;

  __device__ void add(const GroupRuns& in, const OutcomeParams& p, std::int64_t j) {
    const float s = in.score_at(j);
    sum += static_cast<double>(s);
    if (p.estimator == OutcomeEstimator::opo) {
      const std::int32_t len = in.length_at(j);
      weighted += static_cast<double>(static_cast<float>(len) * s);
      total_length += len;
    }
  }
};

/// Statistics of a group from its sums: the mean as torch.mean (float32 sum / n), the baseline of
/// OPO (float32 weighted sum / float32 total length: 0/0 = NaN as in verl).
__device__ __forceinline__ void finish_mean(GroupStats& g, double sum, double weighted, long long total_length) {
  g.mean = g.size > 1 ? static_cast<float>(sum) / static_cast<float>(g.size) : 0.0f;
  g.baseline = g.size > 1 ? static_cast<float>(weighted) / static_cast<float>(total_length) : 0.0f;
}
__device__ __forceinline__ void finish_std(GroupStats& g, double squares) {
  // torch.std: sum of squares around the float32 mean in double, / (n - 1), sqrt, rounded.
  g.std = g.size > 1 ? static_cast<float>(sqrt(squares / static_cast<double>(g.size - 1))) : 1.0f;
}

__device__ __forceinline__ bool is_vectorized(const OutcomeParams& p) {
  return p.estimator == OutcomeEstimator::grpo_vectorized || p.estimator == OutcomeEstimator::rloo_vectorized;
}

/// verl.utils.groupwise.group_mean_std (0.9.1) and rloo_vectorized's bincount: float32 sums in
/// batch order (the run order: the radix sort is stable), every step rounded as torch does (no
/// FMA): mean = S1 / n, var = sum((s - mean)^2) / (n - 1) in a second pass, std = sqrt(max(var, 0))
/// (NaN kept); a group of one has mean 0 and std 1.
__device__ __forceinline__ void finish_batch_order(GroupStats& g, const GroupRuns& in, std::int64_t start,
                                                   std::int64_t end) {
  float s1 = 0.0f;
  for (std::int64_t j = start; j < end; ++j) s1 = add_rn(s1, in.score_at(j));
  g.sum = s1;
  if (g.size <= 1) {
    g.mean = 0.0f;
    g.std = 1.0f;
    return;
  }
  const float n = static_cast<float>(g.size);
  g.mean = s1 / n;
  float squares = 0.0f;
  for (std::int64_t j = start; j < end; ++j) {
    const float d = add_rn(in.score_at(j), -g.mean);
    squares = add_rn(squares, mul_rn(d, d));
  }
  const float var = squares / (n - 1.0f);
  g.std = sqrtf(isnan(var) ? var : fmaxf(var, 0.0f));
}

/// Statistics of the short run [start, end), walked in run order by one thread (the order of the
/// CPU reference's sums).
__device__ __forceinline__ GroupStats short_run_stats(const GroupRuns& in, const OutcomeParams& p, std::int64_t start,
                                                      std::int64_t end) {
  GroupStats g;
  g.size = end - start;
  GroupSums sums;
  for (std::int64_t j = start; j < end; ++j) sums.add(in, p, j);
  finish_mean(g, sums.sum, sums.weighted, sums.total_length);
  if (is_vectorized(p)) finish_batch_order(g, in, start, end);
  if (needs_std(p)) {
    double squares = 0;
    for (std::int64_t j = start; j < end; ++j) {
      const double d = static_cast<double>(in.score_at(j)) - static_cast<double>(g.mean);
      squares += d * d;
    }
    finish_std(g, squares);
  }
  if (p.estimator == OutcomeEstimator::grpo_passk) {
    std::int64_t best = start;
    for (std::int64_t j = start + 1; j < end; ++j)
      if (in.score_at(j) > in.score_at(best)) best = j;
    float runner_up = -INFINITY;
    for (std::int64_t j = start; j < end; ++j)
      if (j != best) runner_up = MaxIgnoringNaN{}(runner_up, in.score_at(j));
    g.best_row = in.row_at(best);
    g.margin = g.size < 2 ? NAN : in.score_at(best) - runner_up;  // verl raises for a group of one
  }
  return g;
}

/// One thread per run position: it finds its run (at most kSmallGroup rows), computes the run's
/// statistics itself and writes its own row. Every row of a run repeats the same cached reads and
/// arithmetic, which measured faster on an H200 than one thread per run head (idle lanes, and a
/// run's rows written by one thread) and than a block staging its tile in shared memory with the
/// heads compacted (one busy warp per block, the others waiting at the barrier): a run's
/// statistics are a chain of dependent double-precision steps, and this form keeps the most warps
/// in flight to hide it. Longer runs are queued by their head for large_groups_kernel.
VERL_HEADER_KERNEL void small_groups_kernel(GroupRuns in, OutcomeParams p, const unsigned long long* nonzero,
                                    float* __restrict out, std::int64_t* large_starts, unsigned int* large_count) {
  const float alpha = gpg_alpha_of(nonzero, in.n);
  for (std::int64_t k = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; k < in.n;
       k += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t key = in.keys[k];
    std::int64_t start = k;
    while (start > 0 && k - start < kSmallGroup && in.keys[start - 1] == key) --start;
    const bool long_before = start > 0 && k - start == kSmallGroup && in.keys[start - 1] == key;
    std::int64_t end = k + 1;
    while (end < in.n && end - start <= kSmallGroup && in.keys[end] == key) ++end;
    if (long_before || end - start > kSmallGroup) {  // more than kSmallGroup rows: a block's work
      if (k == start && !long_before) large_starts[atomicAdd(large_count, 1u)] = k;
      continue;
    }
    const GroupStats g = short_run_stats(in, p, start, end);
    const std::int64_t row = in.row_at(k);
    out[row] = outcome_scalar(p, in.score_at(k), g, alpha, row);
  }
}

/// One block per queued long run: finds its end, reduces it (fixed tree: deterministic), writes it.
VERL_HEADER_KERNEL void large_groups_kernel(GroupRuns in, OutcomeParams p, const unsigned long long* nonzero,
                                    float* __restrict out, const std::int64_t* large_starts,
                                    const unsigned int* large_count) {
  using ReduceD = cub::BlockReduce<double, kThreads>;
  using ReduceL = cub::BlockReduce<long long, kThreads>;
  __shared__ union {
    typename ReduceD::TempStorage d;
    typename ReduceL::TempStorage l;
  } temp;
  __shared__ std::int64_t shared_end;
  __shared__ float shared_mean, shared_std, shared_baseline;  // GroupStats has initializers: not __shared__
  const float alpha = gpg_alpha_of(nonzero, in.n);
  const unsigned int queued = *large_count;
  for (unsigned int q = blockIdx.x; q < queued; q += gridDim.x) {
    const std::int64_t start = large_starts[q];
    const std::int64_t key = in.keys[start];
    // The run's end: the first position whose key differs, searched one block-width at a time.
    if (threadIdx.x == 0) shared_end = -1;
    __syncthreads();
    for (std::int64_t base = start; ; base += blockDim.x) {
      const std::int64_t j = base + threadIdx.x;
      const bool stop = j >= in.n || in.keys[j] != key;
      const long long candidate = stop ? j : LLONG_MAX;
      const long long first = ReduceL(temp.l).Reduce(candidate, [](long long a, long long b) { return a < b ? a : b; });
      if (threadIdx.x == 0 && first != LLONG_MAX) shared_end = first;
      __syncthreads();
      if (shared_end >= 0) break;
    }
    const std::int64_t end = shared_end;
    GroupSums sums;
    for (std::int64_t j = start + threadIdx.x; j < end; j += blockDim.x) sums.add(in, p, j);
    const double sum = ReduceD(temp.d).Sum(sums.sum);
    __syncthreads();
    const double weighted = ReduceD(temp.d).Sum(sums.weighted);
    __syncthreads();
    const long long total_length = ReduceL(temp.l).Sum(sums.total_length);
    if (threadIdx.x == 0) {
      GroupStats g;
      g.size = end - start;
      finish_mean(g, sum, weighted, total_length);
      shared_mean = g.mean;
      shared_baseline = g.baseline;
    }
    __syncthreads();
    GroupStats g;
    g.size = end - start;
    g.mean = shared_mean;
    g.baseline = shared_baseline;
    if (is_vectorized(p)) {
      __syncthreads();  // every thread has read the shared statistics above
      // A long run is reduced by the block, not in batch order: thread 0 replays the float32 sums
      // serially so that the vectorized estimators keep verl's rounding (long runs are rare).
      if (threadIdx.x == 0) {
        finish_batch_order(g, in, start, end);
        shared_mean = g.mean;
        shared_std = g.std;
        shared_baseline = g.sum;
      }
      __syncthreads();
      g.mean = shared_mean;
      g.std = shared_std;
      g.sum = shared_baseline;
    }
    if (needs_std(p)) {
      double squares = 0;
      for (std::int64_t j = start + threadIdx.x; j < end; j += blockDim.x) {
        const double d = static_cast<double>(in.scores[in.row_at(j)]) - static_cast<double>(g.mean);
        squares += d * d;
      }
      squares = ReduceD(temp.d).Sum(squares);
      if (threadIdx.x == 0) {
        finish_std(g, squares);
        shared_std = g.std;
      }
      __syncthreads();
      g.std = shared_std;
    }
    if (p.estimator == OutcomeEstimator::grpo_passk) {
      using ReduceBest = cub::BlockReduce<RunBest, kThreads>;
      using ReduceF = cub::BlockReduce<float, kThreads>;
      __shared__ union {
        typename ReduceBest::TempStorage best;
        typename ReduceF::TempStorage f;
      } passk_temp;
      __shared__ std::int64_t shared_best;
      __shared__ float shared_margin;
      RunBest local{-INFINITY, LLONG_MAX};
      for (std::int64_t j = start + threadIdx.x; j < end; j += blockDim.x)
        local = BetterRunBest{}(local, RunBest{in.scores[in.row_at(j)], j});
      const RunBest best = ReduceBest(passk_temp.best).Reduce(local, BetterRunBest{});
      if (threadIdx.x == 0) {
        // A NaN first row is never replaced (no score compares greater than it).
        shared_best = isnan(in.scores[in.row_at(start)]) || best.position == LLONG_MAX ? start : best.position;
      }
      __syncthreads();
      const std::int64_t best_position = shared_best;
      float runner_up = -INFINITY;
      for (std::int64_t j = start + threadIdx.x; j < end; j += blockDim.x)
        if (j != best_position) runner_up = MaxIgnoringNaN{}(runner_up, in.scores[in.row_at(j)]);
      runner_up = ReduceF(passk_temp.f).Reduce(runner_up, MaxIgnoringNaN{});
      if (threadIdx.x == 0) shared_margin = in.scores[in.row_at(best_position)] - runner_up;
      __syncthreads();
      g.best_row = in.row_at(best_position);
      g.margin = shared_margin;
    }
    for (std::int64_t j = start + threadIdx.x; j < end; j += blockDim.x) {
      const std::int64_t row = in.row_at(j);
      out[row] = outcome_scalar(p, in.scores[row], g, alpha, row);
    }
    __syncthreads();  // shared_end / shared_stats are reused by the next queued run
  }
}

/// advantages = returns = a_i * m (returns may be nullptr).
VERL_HEADER_KERNEL void broadcast_kernel(const float* __restrict per_row, const float* __restrict mask, std::int64_t rows,
                                 std::int64_t cols, float* __restrict advantages, float* __restrict returns) {
  const std::int64_t n = rows * cols;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const float v = per_row[i / cols] * mask[i];
    advantages[i] = v;
    if (returns != nullptr) returns[i] = v;
  }
}

// ---- masked moments and whitening ----------------------------------------------------------------

/// Count, mean and sum of squared deviations of a set of values, merged exactly (Chan et al.).
struct Moments {
  double count;
  double mean;
  double m2;
};

__host__ __device__ __forceinline__ Moments merge(const Moments& a, const Moments& b) {
  const double n = a.count + b.count;
  if (n == 0) return {0, 0, 0};
  const double delta = b.mean - a.mean;
  return {n, a.mean + delta * (b.count / n), a.m2 + b.m2 + delta * delta * (a.count * b.count / n)};
}
__host__ __device__ __forceinline__ void add_value(Moments& m, double x) {
  m.count += 1;
  const double delta = x - m.mean;
  m.mean += delta / m.count;
  m.m2 += delta * (x - m.mean);
}
struct MergeMoments {
  __device__ Moments operator()(const Moments& a, const Moments& b) const { return merge(a, b); }
};

/// One block merges the per-row moments in a fixed order and finishes verl's masked_whiten
/// statistics in float32: mean = sum / (n + 1e-8), var = squares / (n + 1e-8) * n / (n - 1),
/// inv_std = 1 / sqrt(var + 1e-8).
__host__ __device__ inline WhitenStats whiten_stats_of(const Moments& total) {
  const float count = static_cast<float>(total.count);
  const float mean = static_cast<float>(total.mean * total.count) / (count + 1e-8f);
  // Squares around the float32 mean: M2 shifted exactly from the double mean.
  const double shift = total.mean - static_cast<double>(mean);
  const double squares = total.m2 + total.count * shift * shift;
  const long long n = static_cast<long long>(total.count);
  float inv_std = std::numeric_limits<float>::quiet_NaN();  // verl raises for fewer than 2 valid tokens
  if (n >= 2) {
    const float bessel = count / static_cast<float>(n - 1);
    const float var = (static_cast<float>(squares) / (count + 1e-8f)) * bessel;
    inv_std = 1.0f / sqrtf(var + 1e-8f);
  }
  return WhitenStats{n, mean, inv_std};
}

/// One block of kFinishThreads: a merge costs a double division, so more threads with fewer
/// merges each (4096 rows: 4 merges a thread, not 16).
inline constexpr int kFinishThreads = 1024;
VERL_HEADER_KERNEL void __launch_bounds__(kFinishThreads)
    finish_whiten_kernel(const Moments* __restrict rows_moments, std::int64_t rows, WhitenStats* stats) {
  using Reduce = cub::BlockReduce<Moments, kFinishThreads>;
  __shared__ typename Reduce::TempStorage temp;
  Moments local{0, 0, 0};
  for (std::int64_t i = threadIdx.x; i < rows; i += blockDim.x) local = merge(local, rows_moments[i]);
  const Moments total = Reduce(temp).Reduce(local, MergeMoments{});
  if (threadIdx.x == 0) *stats = whiten_stats_of(total);
}

/// out = (v - mean) * inv_std, times the mask when `zero_masked` (REINFORCE++), else not (GAE);
/// plus the mean again when `add_mean` (masked_whiten with shift_mean=False), rounded as the CPU's
/// separate multiply and add (no FMA).
VERL_HEADER_KERNEL void whiten_apply_kernel(const float* values, const float* __restrict mask, std::int64_t n,
                                    const WhitenStats* stats, bool zero_masked, bool add_mean,
                                    float* out) {  // out may be values
  const float mean = stats->mean, inv_std = stats->inv_std;
  const auto whiten = [&](float v, float m) {
    float w = (v - mean) * inv_std;
    if (add_mean) w = add_rn(w, mean);
    return zero_masked ? w * m : w;
  };
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  const std::int64_t first = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  // 16-byte accesses when the arrays allow them (four times the bytes in flight per load), then
  // the last n % 4 elements one by one.
  const bool vector = reinterpret_cast<std::uintptr_t>(values) % 16 == 0 &&
                      reinterpret_cast<std::uintptr_t>(out) % 16 == 0 &&
                      (!zero_masked || reinterpret_cast<std::uintptr_t>(mask) % 16 == 0);
  const std::int64_t body = vector ? n / 4 : 0;
  for (std::int64_t i = first; i < body; i += stride) {
    const float4 v = reinterpret_cast<const float4*>(values)[i];
    const float4 m = zero_masked ? reinterpret_cast<const float4*>(mask)[i] : make_float4(1.0f, 1.0f, 1.0f, 1.0f);
    reinterpret_cast<float4*>(out)[i] = make_float4(whiten(v.x, m.x), whiten(v.y, m.y), whiten(v.z, m.z), whiten(v.w, m.w));
  }
  for (std::int64_t i = 4 * body + first; i < n; i += stride) out[i] = whiten(values[i], zero_masked ? mask[i] : 1.0f);
}

/// Per-row moments of a_i broadcast over the mask: n_i copies of a_i (REINFORCE++ with baseline).
VERL_HEADER_KERNEL void broadcast_moments_kernel(const float* __restrict per_row, const std::int32_t* __restrict lengths,
                                         std::int64_t rows, Moments* __restrict out) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < rows;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    out[i] = Moments{static_cast<double>(lengths[i]), lengths[i] > 0 ? static_cast<double>(per_row[i]) : 0.0, 0.0};
}

/// out = ((a_i * m) - mean) * inv_std * m: verl's masked_whiten(a * m, m) * m.
VERL_HEADER_KERNEL void whiten_broadcast_kernel(const float* __restrict per_row, const float* __restrict mask,
                                        std::int64_t rows, std::int64_t cols, const WhitenStats* stats,
                                        float* __restrict advantages, float* __restrict returns) {
  const float mean = stats->mean, inv_std = stats->inv_std;
  const std::int64_t n = rows * cols;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const float m = mask[i];
    const float w = ((per_row[i / cols] * m - mean) * inv_std) * m;
    advantages[i] = w;
    if (returns != nullptr) returns[i] = w;
  }
}

// ---- reverse recurrences as a block scan --------------------------------------------------------

/// GAE with verl's mask skipping. State (next_value, advantage); a valid token maps it to
/// (v_t, (r_t - v_t) + gamma next_value + gamma*lam advantage), a masked token leaves it alone.
/// As a matrix: s' = [[p, 0], [q, w]] s + c, and such matrices compose into the same form.
struct GaeRecurrence {
  GaeParams params;
  struct State {
    float next_value, advantage;
  };
  struct Map {
    float p, q, w, c0, c1;
  };
  static constexpr bool kHasMoments = true;
  __host__ __device__ static Map identity() { return {1.0f, 0.0f, 1.0f, 0.0f, 0.0f}; }
  __host__ __device__ static State initial() { return {0.0f, 0.0f}; }
  __host__ __device__ Map token_map(float r, float v, float m) const {
    if (m == 0.0f) return identity();
    return {0.0f, params.discount, params.trace_decay, v, r - v};
  }
  /// `first` applied, then `second`.
  __host__ __device__ static Map then(const Map& first, const Map& second) {
    return {second.p * first.p, second.q * first.p + second.w * first.q, second.w * first.w,
            second.p * first.c0 + second.c0, second.q * first.c0 + second.w * first.c1 + second.c1};
  }
  __host__ __device__ static State apply(const Map& f, const State& s) {
    return {f.p * s.next_value + f.c0, f.q * s.next_value + f.w * s.advantage + f.c1};
  }
  /// The CPU reference's exact step: outputs advantage (pre-whitening) and returns.
  __host__ __device__ State step(State s, float r, float v, float m, std::int64_t, float& out0, float& out1) const {
    const float delta = (r + params.discount * s.next_value) - v;
    const float candidate = delta + params.trace_decay * s.advantage;
    const bool valid = m != 0.0f;
    const State next{valid ? v : s.next_value, valid ? candidate : s.advantage};
    out0 = next.advantage;
    out1 = next.advantage + v;
    return next;
  }
};

/// REINFORCE++ discounted returns (verl 0.9.1): g_t = r_t + gamma * s, returns_t = g_t * m_t,
/// s = g_t * m_t + s * (1 - m_t) (carried unchanged over masked positions).
struct ReinforceRecurrence {
  float discount;
  struct State {
    float running;
  };
  struct Map {
    float a, b;
  };
  static constexpr bool kHasMoments = true;
  __host__ __device__ static Map identity() { return {1.0f, 0.0f}; }
  __host__ __device__ static State initial() { return {0.0f}; }
  /// A valid token maps G to r + gamma G; a masked one leaves G as it is (verl 0.9.1).
  __host__ __device__ Map token_map(float r, float, float m) const {
    return m != 0.0f ? Map{discount, r} : identity();
  }
  __host__ __device__ static Map then(const Map& first, const Map& second) {
    return {second.a * first.a, second.a * first.b + second.b};
  }
  __host__ __device__ static State apply(const Map& f, const State& s) { return {f.a * s.running + f.b}; }
  __host__ __device__ State step(State s, float r, float, float m, std::int64_t, float& out0, float& out1) const {
    const float g = r + discount * s.running;
    out0 = g * m;
    out1 = g * m;
    return {g * m + s.running * (1.0f - m)};
  }
};

/// ReMax: returns = reverse cumsum of r * m (double running sum, as the CPU reference), advantages
/// = returns - baseline_i * m.
struct RemaxRecurrence {
  const float* baselines;
  struct State {
    double running;
  };
  struct Map {
    double b;
  };
  static constexpr bool kHasMoments = false;
  __host__ __device__ static Map identity() { return {0.0}; }
  __host__ __device__ static State initial() { return {0.0}; }
  __host__ __device__ Map token_map(float r, float, float m) const { return {static_cast<double>(r * m)}; }
  __host__ __device__ static Map then(const Map& first, const Map& second) { return {first.b + second.b}; }
  __host__ __device__ static State apply(const Map& f, const State& s) { return {s.running + f.b}; }
  __host__ __device__ State step(State s, float r, float, float m, std::int64_t row, float& out0, float& out1) const {
    const double running = s.running + static_cast<double>(r * m);
    const float ret = static_cast<float>(running);
    out0 = ret - baselines[row] * m;  // advantages
    out1 = ret;                       // returns
    return {running};
  }
};

template <class R>
struct ThenOp {
  __device__ typename R::Map operator()(const typename R::Map& a, const typename R::Map& b) const {
    return R::then(a, b);
  }
};

inline constexpr int kScanItems = 8;
inline constexpr int kScanTile = kThreads * kScanItems;

/// Shared-memory index with one pad per 32 floats: thread k touches j ~ c - 8k, conflict-free.
__device__ __forceinline__ int padded(int j) { return j + (j >> 5); }
/// Four consecutive floats from j (a multiple of 4: never across a pad) into / out of a padded tile.
__device__ __forceinline__ void store4(float* tile, int j, float4 x) {
  float* at = tile + padded(j);
  at[0] = x.x;
  at[1] = x.y;
  at[2] = x.z;
  at[3] = x.w;
}
__device__ __forceinline__ float4 load4(const float* tile, int j) {
  const float* at = tile + padded(j);
  return make_float4(at[0], at[1], at[2], at[3]);
}

/// Whether every row of (rows, cols) starts 16-byte aligned in each of these arrays.
inline bool rows_are_float4_aligned(std::int64_t cols, std::initializer_list<const void*> arrays) {
  if (cols % 4 != 0) return false;
  for (const void* a : arrays)
    if (a != nullptr && reinterpret_cast<std::uintptr_t>(a) % 16 != 0) return false;
  return true;
}

/// One block per row (grid-stride), tiles of kScanTile tokens from the end of the row. Inputs
/// in0..in2 (rewards, values or nullptr, mask); outputs out0 (advantage-like), out1 (returns).
/// When R::kHasMoments, the masked moments of out0 of each row go to row_moments.
template <class R>
// At most 64 registers, so that four blocks share an SM (the shared tiles allow four): with 120
// registers only two did, and one block's load phase could not cover another's scan (33% of DRAM
// bandwidth on an H200).
__global__ void __launch_bounds__(kThreads, 4) reverse_scan_kernel(R rec, std::int64_t rows, std::int64_t cols,
                                                                const float* __restrict rewards,
                                                                const float* __restrict values,
                                                                const float* __restrict mask, float* __restrict out0,
                                                                float* __restrict out1, Moments* __restrict row_moments,
                                                                bool vector_rows) {
  using Map = typename R::Map;
  using State = typename R::State;
  using Scan = cub::BlockScan<Map, kThreads>;
  using Reduce = cub::BlockReduce<Moments, kThreads>;
  constexpr int kPadded = kScanTile + kScanTile / 32;
  __shared__ float tile_r[kPadded], tile_v[kPadded], tile_m[kPadded];
  __shared__ union {
    typename Scan::TempStorage scan;
    typename Reduce::TempStorage reduce;
  } temp;
  const int tid = threadIdx.x;
  for (std::int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const std::int64_t base = row * cols;
    State carry = R::initial();
    Moments moments{0, 0, 0};
    for (std::int64_t tile_end = cols; tile_end > 0; tile_end -= kScanTile) {
      const std::int64_t tile_begin = tile_end > kScanTile ? tile_end - kScanTile : 0;
      const int width = static_cast<int>(tile_end - tile_begin);
      // 16-byte loads where rows allow them: four times the bytes in flight per load, which is
      // what keeps a tile's load phase near the copy bandwidth.
      if (vector_rows) {
        for (int j = 4 * tid; j < width; j += 4 * kThreads) {
          const float4 r = *reinterpret_cast<const float4*>(rewards + base + tile_begin + j);
          const float4 v = values != nullptr ? *reinterpret_cast<const float4*>(values + base + tile_begin + j)
                                             : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
          const float4 m = *reinterpret_cast<const float4*>(mask + base + tile_begin + j);
          store4(tile_r, j, r);
          store4(tile_v, j, v);
          store4(tile_m, j, m);
        }
      } else {
        for (int j = tid; j < width; j += kThreads) {
          tile_r[padded(j)] = rewards[base + tile_begin + j];
          tile_v[padded(j)] = values != nullptr ? values[base + tile_begin + j] : 0.0f;
          tile_m[padded(j)] = mask[base + tile_begin + j];
        }
      }
      __syncthreads();
      // Thread k owns [hi - kScanItems, hi) counted from the tile's end: thread 0 the last tokens.
      const int hi = width - tid * kScanItems;
      const int lo = hi - kScanItems > 0 ? hi - kScanItems : 0;
      Map own = R::identity();
      for (int j = hi - 1; j >= lo; --j)
        own = R::then(own, rec.token_map(tile_r[padded(j)], tile_v[padded(j)], tile_m[padded(j)]));
      Map prefix, whole;
      Scan(temp.scan).ExclusiveScan(own, prefix, R::identity(), ThenOp<R>{}, whole);
      State s = R::apply(prefix, carry);
      for (int j = hi - 1; j >= lo; --j) {
        float o0, o1;
        const float m = tile_m[padded(j)];
        s = rec.step(s, tile_r[padded(j)], tile_v[padded(j)], m, row, o0, o1);
        if constexpr (R::kHasMoments) {
          if (m != 0.0f) add_value(moments, static_cast<double>(o0));
        }
        tile_r[padded(j)] = o0;  // this thread alone reads and writes j
        tile_v[padded(j)] = o1;
      }
      carry = R::apply(whole, carry);
      __syncthreads();
      if (vector_rows) {
        for (int j = 4 * tid; j < width; j += 4 * kThreads) {
          *reinterpret_cast<float4*>(out0 + base + tile_begin + j) = load4(tile_r, j);
          *reinterpret_cast<float4*>(out1 + base + tile_begin + j) = load4(tile_v, j);
        }
      } else {
        for (int j = tid; j < width; j += kThreads) {
          out0[base + tile_begin + j] = tile_r[padded(j)];
          out1[base + tile_begin + j] = tile_v[padded(j)];
        }
      }
      __syncthreads();
    }
    if constexpr (R::kHasMoments) {
      const Moments total = Reduce(temp.reduce).Reduce(moments, MergeMoments{});
      if (tid == 0) row_moments[row] = total;
      __syncthreads();
    }
  }
}

inline unsigned row_grid(std::int64_t rows) {
  return static_cast<unsigned>(rows < 65535 * 16 ? (rows > 0 ? rows : 1) : 65535 * 16);
}

/// GAE/REINFORCE++ tail: finish the whitening statistics and write the whitened advantages.
inline void whiten_rows(const Moments* row_moments, std::int64_t rows, std::int64_t cols, const float* values,
                        const float* mask, bool zero_masked, WhitenStats* stats, float* out, cudaStream_t stream,
                        bool add_mean = false) {
  finish_whiten_kernel<<<1, kFinishThreads, 0, stream>>>(row_moments, rows, stats);
  whiten_apply_kernel<<<grid_for((rows * cols + 3) / 4, kThreads, 4096u), kThreads, 0, stream>>>(values, mask, rows * cols, stats,
                                                                                 zero_masked, add_mean, out);
}

}  // namespace detail

// ---- entry points --------------------------------------------------------------------------------

/// Per-response outcome scalars: scalars[i] from scores[i] and the group of ids[i]. `lengths`
/// (valid tokens per row) is read by OPO only. With GroupLayout::contiguous each id must form one
/// run. Not for reinforce_plus_plus_baseline's whitening (see outcome_advantages); its scalar here
/// is s - mean.
inline void outcome_scalars(void* temp, std::size_t& temp_bytes, const OutcomeParams& params, GroupLayout layout,
                            const float* scores, const std::int32_t* lengths, const std::int64_t* ids,
                            std::int64_t rows, float* scalars, cudaStream_t stream = nullptr) {
  check_batch_shape(rows, 1);
  VERL_CHECK_ARG(params.estimator != OutcomeEstimator::opo || lengths != nullptr || temp == nullptr,
                 "lengths: expected the valid-token count of each row for opo, got nullptr");
  detail::TempCarver carve(temp);
  auto* large_starts = carve.take<std::int64_t>(static_cast<std::size_t>(rows / (detail::kSmallGroup + 1) + 1));
  auto* counters = carve.take<unsigned long long>(2);  // [0]: queued long runs (as unsigned int), [1]: nonzero
  detail::GroupSort group_sort(carve, layout, ids, rows, stream);
  if (carve.answer_size_query(temp_bytes)) return;
  if (rows == 0) return;
  auto* large_count = reinterpret_cast<unsigned int*>(counters);
  unsigned long long* nonzero = params.estimator == OutcomeEstimator::gpg ? counters + 1 : nullptr;
  VERL_CUDA_CHECK(cudaMemsetAsync(counters, 0, 2 * sizeof(unsigned long long), stream));
  detail::GroupRuns runs{scores, lengths, ids, nullptr, rows};
  group_sort.apply(ids, rows, runs, stream);
  if (nonzero != nullptr)
    detail::count_nonzero_kernel<<<detail::grid_for(rows, detail::kThreads, 1024), detail::kThreads, 0, stream>>>(
        scores, rows, nonzero);
  detail::small_groups_kernel<<<detail::grid_for(rows, detail::kThreads), detail::kThreads, 0, stream>>>(
      runs, params, nonzero, scalars, large_starts, large_count);
  // Enough blocks for every queued run when there are few, a grid-stride loop when there are many.
  const auto large_blocks = static_cast<unsigned>(std::min<std::int64_t>(rows / (detail::kSmallGroup + 1) + 1, 256));
  detail::large_groups_kernel<<<large_blocks, detail::kThreads, 0, stream>>>(runs, params, nonzero, scalars,
                                                                               large_starts, large_count);
  VERL_CUDA_CHECK(cudaGetLastError());
}

/// verl's outcome estimators on a full batch: token_level_rewards and response_mask (B, T)
/// row-major, ids (B). advantages and returns (B, T) (returns equal the advantages for all of them).
/// `stats` (optional, device) receives reinforce_plus_plus_baseline's whitening statistics.
inline void outcome_advantages(void* temp, std::size_t& temp_bytes, const OutcomeParams& params, GroupLayout layout,
                               const float* token_level_rewards, const float* response_mask, const std::int64_t* ids,
                               std::int64_t rows, std::int64_t cols, float* advantages, float* returns,
                               cudaStream_t stream = nullptr, WhitenStats* stats = nullptr) {
  check_batch_shape(rows, cols);
  detail::TempCarver carve(temp);
  float* scores = carve.take<float>(static_cast<std::size_t>(rows));
  auto* lengths = carve.take<std::int32_t>(static_cast<std::size_t>(rows));
  float* scalars = carve.take<float>(static_cast<std::size_t>(rows));
  auto* moments = carve.take<detail::Moments>(static_cast<std::size_t>(rows));
  auto* own_stats = carve.take<WhitenStats>(1);
  std::size_t group_bytes = 0;
  outcome_scalars(nullptr, group_bytes, params, layout, nullptr, nullptr, nullptr, rows, nullptr, stream);
  void* group_temp = carve.take<unsigned char>(group_bytes);
  if (carve.answer_size_query(temp_bytes)) return;
  if (rows == 0) return;
  if (stats == nullptr) stats = own_stats;
  detail::row_scores_kernel<<<detail::grid_for(rows * 32, detail::kThreads), detail::kThreads, 0, stream>>>(
      token_level_rewards, response_mask, rows, cols, scores, lengths);
  outcome_scalars(group_temp, group_bytes, params, layout, scores, lengths, ids, rows, scalars, stream);
  if (cols == 0) return;
  const unsigned grid = detail::grid_for(rows * cols, detail::kThreads);
  if (params.estimator == OutcomeEstimator::reinforce_plus_plus_baseline) {
    detail::broadcast_moments_kernel<<<detail::grid_for(rows, detail::kThreads), detail::kThreads, 0, stream>>>(
        scalars, lengths, rows, moments);
    detail::finish_whiten_kernel<<<1, detail::kFinishThreads, 0, stream>>>(moments, rows, stats);
    detail::whiten_broadcast_kernel<<<grid, detail::kThreads, 0, stream>>>(scalars, response_mask, rows, cols, stats,
                                                                            advantages, returns);
  } else {
    detail::broadcast_kernel<<<grid, detail::kThreads, 0, stream>>>(scalars, response_mask, rows, cols, advantages,
                                                                     returns);
  }
  VERL_CUDA_CHECK(cudaGetLastError());
}

namespace detail {

/// GAE and REINFORCE++: a reverse scan writes advantages and returns (and each row's moments),
/// then a masked whitening over the batch writes the advantages: of the advantages themselves,
/// masked tokens kept (GAE), or of the returns, masked tokens zeroed (REINFORCE++).
template <class Recurrence>
void scan_then_whiten(void* temp, std::size_t& temp_bytes, Recurrence recurrence, const float* token_level_rewards,
                      const float* values, const float* response_mask, std::int64_t rows, std::int64_t cols,
                      float* advantages, float* returns, bool whiten_returns, cudaStream_t stream, WhitenStats* stats) {
  check_batch_shape(rows, cols);
  TempCarver carve(temp);
  auto* moments = carve.take<Moments>(static_cast<std::size_t>(rows));
  auto* own_stats = carve.take<WhitenStats>(1);
  if (carve.answer_size_query(temp_bytes)) return;
  if (rows == 0) return;
  if (stats == nullptr) stats = own_stats;
  reverse_scan_kernel<Recurrence><<<row_grid(rows), kThreads, 0, stream>>>(
      recurrence, rows, cols, token_level_rewards, values, response_mask, advantages, returns, moments,
      rows_are_float4_aligned(cols, {token_level_rewards, values, response_mask, advantages, returns}));
  whiten_rows(moments, rows, cols, whiten_returns ? returns : advantages, response_mask,
              /*zero_masked=*/whiten_returns, stats, advantages, stream);
  VERL_CUDA_CHECK(cudaGetLastError());
}

}  // namespace detail

/// verl's GAE: advantages = masked_whiten(A, mask) (not masked), returns = A + values.
inline void gae_advantages(void* temp, std::size_t& temp_bytes, GaeParams params, const float* token_level_rewards,
                           const float* values, const float* response_mask, std::int64_t rows, std::int64_t cols,
                           float* advantages, float* returns, cudaStream_t stream = nullptr,
                           WhitenStats* stats = nullptr) {
  detail::scan_then_whiten(temp, temp_bytes, detail::GaeRecurrence{params}, token_level_rewards, values, response_mask,
                           rows, cols, advantages, returns, /*whiten_returns=*/false, stream, stats);
}

/// verl's REINFORCE++: returns = discounted returns with a reset after each masked token,
/// advantages = masked_whiten(returns, mask) * mask. Both outputs receive the returns from the
/// scan; the advantages are then overwritten by the whitening.
inline void reinforce_plus_plus_advantages(void* temp, std::size_t& temp_bytes, float gamma,
                                           const float* token_level_rewards, const float* response_mask,
                                           std::int64_t rows, std::int64_t cols, float* advantages, float* returns,
                                           cudaStream_t stream = nullptr, WhitenStats* stats = nullptr) {
  detail::scan_then_whiten(temp, temp_bytes, detail::ReinforceRecurrence{gamma}, token_level_rewards, nullptr,
                           response_mask, rows, cols, advantages, returns, /*whiten_returns=*/true, stream, stats);
}

/// verl's ReMax: returns = reverse cumsum of r * m, advantages = returns - baseline_i * m.
/// No temporary storage.
inline void remax_advantages(const float* token_level_rewards, const float* response_mask,
                             const float* reward_baselines, std::int64_t rows, std::int64_t cols, float* advantages,
                             float* returns, cudaStream_t stream = nullptr) {
  check_batch_shape(rows, cols);
  if (rows == 0) return;
  detail::reverse_scan_kernel<detail::RemaxRecurrence><<<detail::row_grid(rows), detail::kThreads, 0, stream>>>(
      detail::RemaxRecurrence{reward_baselines}, rows, cols, token_level_rewards, nullptr, response_mask, advantages,
      returns, nullptr,
      detail::rows_are_float4_aligned(cols, {token_level_rewards, response_mask, advantages, returns}));
  VERL_CUDA_CHECK(cudaGetLastError());
}

}  // namespace verl::kernels
