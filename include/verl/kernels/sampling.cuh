// CUDA rollout sampler: one block per row of logits, greedy / temperature / top-k / top-p, the
// token a pure function of (logits row, config, seed, stream, step). The algorithm and its shared
// decisions are in sampling.hpp (sample_token_model is the same steps run sequentially):
//   1. first argmax of x = logits / T (NaN never wins; a NaN at index 0 keeps 0, as the reference);
//   2. fixed-point masses m_i = round(exp(x_i - max) 2^S) and their total (log-normalizer);
//   3. top-k: radix selection of the k-th largest key, 4 passes of 8 bits (counts);
//   4. top-p: radix selection over the survivors by cumulative mass (masses), then how many of
//      the boundary's ties stay;
//   5. inverse CDF in index order over the kept tokens: block scans over tiles, stopping at the
//      tile where the cumulative mass exceeds u * (kept mass).
// Every sum is an integer sum, so no result depends on the block size or on the order atomics
// land in. No temporary device memory: the histograms live in shared memory.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include "verl/kernels/detail/cuda_check.cuh"
#include "verl/kernels/detail/vector_load.cuh"
#include "verl/kernels/sampling.hpp"

namespace verl::kernels {
namespace detail {

inline constexpr int sampling_threads = 256;
/// Consecutive tokens per thread per tile of the final scan (blocked: index order within a thread).
inline constexpr int sampling_items = 8;

struct ArgMax {
  float value;
  std::int64_t index;
};

/// The reference's first-argmax order: larger value first, then smaller index; NaN below all.
struct ArgMaxOp {
  __device__ ArgMax operator()(const ArgMax& a, const ArgMax& b) const {
    const bool a_nan = a.value != a.value, b_nan = b.value != b.value;
    if (a_nan != b_nan) return a_nan ? b : a;
    if (!a_nan && a.value != b.value) return a.value > b.value ? a : b;
    return a.index <= b.index ? a : b;
  }
};

/// Sum over the warp, in every lane (integer: exact in any order).
__device__ __forceinline__ std::uint64_t warp_sum(std::uint64_t v) {
  for (int offset = warp_size / 2; offset > 0; offset /= 2)
    v += __shfl_xor_sync(0xffffffffu, static_cast<unsigned long long>(v), offset);
  return v;
}

struct MaxOp {
  __device__ std::uint64_t operator()(std::uint64_t a, std::uint64_t b) const { return a > b ? a : b; }
};

/// Per-row values thread 0 decides and every thread reads after a barrier.
struct SamplingShared {
  std::int64_t best;
  float max;
  std::uint64_t total;
  std::uint32_t prefix;
  std::uint64_t remaining;
  std::uint64_t above;
  std::uint32_t kept_key;  ///< KeptSet's fields (a __shared__ object cannot have initializers)
  std::uint64_t kept_ties;
  std::uint64_t kept_mass;
  std::int64_t token;
  bool found;
};

__device__ __forceinline__ void set_kept(SamplingShared& st, const KeptSet& kept) {
  st.kept_key = kept.key;
  st.kept_ties = kept.ties;
  st.kept_mass = kept.mass;
}

template <class Scalar>
__global__ void __launch_bounds__(sampling_threads)
    sample_tokens_kernel(const Scalar* __restrict__ logits, LogitsShape shape, SamplingConfig config,
                         const std::uint64_t* __restrict__ seeds, const std::uint64_t* __restrict__ streams,
                         std::uint64_t step, std::int64_t* __restrict__ tokens, float* __restrict__ log_probs) {
  using ArgMaxReduce = cub::BlockReduce<ArgMax, sampling_threads>;
  using SumReduce = cub::BlockReduce<std::uint64_t, sampling_threads>;
  using Scan = cub::BlockScan<std::uint64_t, sampling_threads>;
  __shared__ union {
    typename ArgMaxReduce::TempStorage argmax;
    typename SumReduce::TempStorage sum;
    typename Scan::TempStorage scan;
  } temp;
  __shared__ std::uint32_t counts[radix_bins];
  __shared__ std::uint64_t masses[radix_bins];
  __shared__ SamplingShared st;

  const int tid = threadIdx.x;
  const float temperature = config.greedy() ? 1.0f : config.temperature;
  const std::int64_t vocab = shape.vocab;
  const int shift = mass_shift(vocab);
  const bool use_top_k = !config.greedy() && config.top_k > 0 && config.top_k < vocab;
  const bool use_top_p = !config.greedy() && config.top_p < 1.0f;

  for (std::int64_t row = blockIdx.x; row < shape.rows; row += gridDim.x) {
    const Scalar* source = logits + row * shape.stride;
    auto x_at = [&](std::int64_t i) { return __fdiv_rn(load_as_float(source + i), temperature); };

    // 1. First argmax.
    ArgMax local{__int_as_float(0x7fc00000), LLONG_MAX};
    for (std::int64_t i = tid; i < vocab; i += sampling_threads) local = ArgMaxOp{}(local, ArgMax{x_at(i), i});
    const ArgMax top = ArgMaxReduce(temp.argmax).Reduce(local, ArgMaxOp{});
    if (tid == 0) {
      const float first = x_at(0);
      st.best = first != first ? 0 : top.index;
      st.max = x_at(st.best);
    }
    __syncthreads();
    const float max = st.max;
    auto mass_at = [&](float x) { return fixed_mass(shifted_exp(x, max), shift); };

    // 2. Total mass.
    std::uint64_t partial = 0;
    for (std::int64_t i = tid; i < vocab; i += sampling_threads) partial += mass_at(x_at(i));
    const std::uint64_t total = SumReduce(temp.sum).Sum(partial);
    if (tid == 0) {
      st.total = total;
      set_kept(st, KeptSet{0, ~std::uint64_t{0}, total});
    }
    __syncthreads();

    // One radix pass: histogram of keys >= key_floor sharing st.prefix above `pass`. The loop
    // runs the same trip count on every thread (warp-uniform), so that lanes falling into the
    // same bin add their count and mass once per warp: the first pass bins by sign and exponent,
    // a handful of hot bins that per-lane shared atomics would serialize on.
    auto histogram = [&](int pass, std::uint32_t key_floor) {
      for (int b = tid; b < radix_bins; b += sampling_threads) counts[b] = 0, masses[b] = 0;
      __syncthreads();
      const std::uint32_t prefix = st.prefix;
      const int lane = tid % warp_size;
      for (std::int64_t base = 0; base < vocab; base += sampling_threads) {
        const std::int64_t i = base + tid;
        int bin = -1;
        std::uint64_t m = 0;
        if (i < vocab) {
          const float x = x_at(i);
          const std::uint32_t key = order_key(x);
          if (key >= key_floor && in_radix_prefix(key, prefix, pass)) {
            bin = radix_bin(key, pass);
            m = mass_at(x);
          }
        }
        unsigned pending = __ballot_sync(0xffffffffu, bin >= 0);
        while (pending != 0) {  // one round per distinct bin in this warp
          const int leader = __ffs(pending) - 1;
          const int leader_bin = __shfl_sync(0xffffffffu, bin, leader);
          const bool mine = bin == leader_bin;
          const unsigned group = __ballot_sync(0xffffffffu, mine);
          const std::uint64_t group_mass = warp_sum(mine ? m : 0);
          if (lane == leader) {
            atomicAdd(&counts[leader_bin], static_cast<unsigned>(__popc(group)));
            atomicAdd(reinterpret_cast<unsigned long long*>(&masses[leader_bin]),
                      static_cast<unsigned long long>(group_mass));
          }
          pending &= ~group;
        }
      }
      __syncthreads();
    };

    // 3. Top-k: the k-th largest key; its ties stay.
    if (use_top_k) {
      if (tid == 0) {
        st.prefix = 0;
        st.remaining = static_cast<std::uint64_t>(config.top_k);
        st.above = 0;
      }
      __syncthreads();
      for (int pass = 0; pass < radix_passes; ++pass) {
        histogram(pass, 0);
        if (tid == 0) {
          const int bin = choose_bin_by_count(counts, masses, st.remaining, st.above);
          st.prefix |= static_cast<std::uint32_t>(bin) << (32 - radix_bits * (pass + 1));
          if (pass == radix_passes - 1) set_kept(st, KeptSet{st.prefix, ~std::uint64_t{0}, st.above + masses[bin]});
        }
        __syncthreads();
      }
    }

    // 4. Top-p over the survivors: the boundary key by cumulative mass, then its kept ties.
    if (use_top_p) {
      const std::uint32_t key_floor = st.kept_key;
      const double target = static_cast<double>(config.top_p) * static_cast<double>(st.kept_mass);
      if (tid == 0) {
        st.prefix = 0;
        st.above = 0;
      }
      __syncthreads();
      for (int pass = 0; pass < radix_passes; ++pass) {
        histogram(pass, key_floor);
        if (tid == 0) {
          const int bin = choose_bin_by_mass(counts, masses, target, st.above);
          st.prefix |= static_cast<std::uint32_t>(bin) << (32 - radix_bits * (pass + 1));
          if (pass == radix_passes - 1) {
            const std::uint64_t each = masses[bin] / counts[bin];
            const std::uint64_t ties = tie_inclusion(st.above, each, counts[bin], target);
            set_kept(st, KeptSet{st.prefix, ties, st.above + ties * each});
          }
        }
        __syncthreads();
      }
    }

    const std::uint64_t seed = seeds != nullptr ? seeds[row] : 0;
    const std::uint64_t stream = streams != nullptr ? streams[row] : 0;
    if (!config.greedy()) {
      // 5. Inverse CDF over the kept tokens, in index order.
      const KeptSet kept{st.kept_key, st.kept_ties, st.kept_mass};
      const double target = counter_uniform(seed, stream, step) * static_cast<double>(kept.mass);
      if (tid == 0) st.found = false;
      __syncthreads();
      std::uint64_t mass_base = 0, tie_base = 0, last_plus_one = 0;
      constexpr std::int64_t tile = std::int64_t{sampling_threads} * sampling_items;
      for (std::int64_t tile_start = 0; tile_start < vocab; tile_start += tile) {
        const std::int64_t first = tile_start + std::int64_t{tid} * sampling_items;
        float x[sampling_items];
        std::uint64_t ties_here = 0;
#pragma unroll
        for (int k = 0; k < sampling_items; ++k) {
          x[k] = first + k < vocab ? x_at(first + k) : __int_as_float(0xff800000);
          if (first + k < vocab && order_key(x[k]) == kept.key) ++ties_here;
        }
        std::uint64_t ties_before = 0, ties_in_tile = 0;
        Scan(temp.scan).ExclusiveSum(ties_here, ties_before, ties_in_tile);
        __syncthreads();
        std::uint64_t rank = tie_base + ties_before, mass_here = 0;
        std::uint64_t m[sampling_items];
#pragma unroll
        for (int k = 0; k < sampling_items; ++k) {
          m[k] = 0;
          if (first + k >= vocab) continue;
          const std::uint32_t key = order_key(x[k]);
          const bool keep = key > kept.key || (key == kept.key && rank++ < kept.ties);
          if (keep) m[k] = mass_at(x[k]);
          if (m[k] != 0) last_plus_one = static_cast<std::uint64_t>(first + k) + 1;
          mass_here += m[k];
        }
        std::uint64_t mass_before = 0, mass_in_tile = 0;
        Scan(temp.scan).ExclusiveSum(mass_here, mass_before, mass_in_tile);
        std::uint64_t cumulative = mass_base + mass_before;
        if (!(static_cast<double>(cumulative) > target)) {
          // Only the thread whose range holds the first crossing finds one here.
#pragma unroll
          for (int k = 0; k < sampling_items; ++k) {
            if (m[k] == 0) continue;
            cumulative += m[k];
            if (static_cast<double>(cumulative) > target) {
              st.token = first + k;
              st.found = true;
              break;
            }
          }
        }
        __syncthreads();
        if (st.found) break;
        mass_base += mass_in_tile;
        tie_base += ties_in_tile;
      }
      if (!st.found) {
        // Rounding left the scan short of u: the last kept token with mass, as the reference.
        const std::uint64_t last = SumReduce(temp.sum).Reduce(last_plus_one, MaxOp{});
        if (tid == 0) st.token = last != 0 ? static_cast<std::int64_t>(last - 1) : st.best;
      }
    } else if (tid == 0) {
      st.token = st.best;
    }
    __syncthreads();
    if (tid == 0) {
      const std::int64_t token = st.token;
      tokens[row] = token;
      if (log_probs != nullptr) {
        const double log_normalizer =
            static_cast<double>(st.max) + log(ldexp(static_cast<double>(st.total), -shift));
        log_probs[row] = static_cast<float>(static_cast<double>(x_at(token)) - log_normalizer);
      }
    }
    __syncthreads();  // st and temp are reused by the next row
  }
}

}  // namespace detail

/// Samples one token per row of `logits` (device, rows shape.stride elements apart) with
/// u = counter_uniform(seeds[row], streams[row] (0 when null), step); writes tokens[row] and,
/// when log_probs is not null, log softmax(x)[token] over the whole vocabulary (the reference's
/// log-prob). `seeds` may be null for greedy decoding. verl's rollout draws sample j of prompt b
/// at step t with seed derive_seed(seed, b) (or the prompt's own seed), stream j, step t.
template <class Scalar>
void sample_tokens(const Scalar* logits, const LogitsShape& shape, const SamplingConfig& config,
                   const std::uint64_t* seeds, const std::uint64_t* streams, std::uint64_t step, std::int64_t* tokens,
                   float* log_probs, cudaStream_t stream = nullptr) {
  static_assert(detail::DeviceLogitScalar<Scalar>, "LOGITS_MUST_BE_FLOAT_OR_BFLOAT16");
  detail::check_sampling_args(logits, shape, config, seeds, tokens);
  if (shape.rows == 0) return;
  const int blocks = static_cast<int>(std::min<std::int64_t>(shape.rows, INT_MAX));
  detail::sample_tokens_kernel<Scalar><<<blocks, detail::sampling_threads, 0, stream>>>(
      logits, shape, config, seeds, streams, step, tokens, log_probs);
  VERL_CUDA_CHECK_LAUNCH();
}

}  // namespace verl::kernels
