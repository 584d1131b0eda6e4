// The logits hot path: one fused pass over each row of (N, V) logits yields the log-probability
// of the row's label, the entropy and the sum of squared probabilities (online softmax: running
// max, running sum of exp, of exp*x and of exp^2), reading the logits once; one more pass gives
// d(logits) from the cotangents of all three. verl computes the same quantities with separate
// PyTorch ops (log_softmax / logsumexp, gather, softmax*x); this is what its actor needs per
// micro-batch, and the layout CUDA kernels mirror (one row per block, same saved statistics).
//
// Logits may be float or Eigen::bfloat16 (computed in float). Rows are split over threads, each
// row is computed by exactly one thread with a fixed order of operations, so results do not
// depend on the thread count.
#pragma once

#include <Eigen/Core>

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <limits>
#include <span>
#include <thread>
#include <type_traits>
#include <vector>

#include "verl/algo/detail/parallel_rows.hpp"
#include "verl/algo/detail/simd.hpp"
#include "verl/config.hpp"
#include "verl/core/error.hpp"
#include "verl/core/tensor.hpp"
#include "verl/core/threads.hpp"

namespace verl::algo {

/// Element types the logits kernels read (and write gradients in).
template <class T>
concept LogitScalar = std::same_as<T, float> || std::same_as<T, Eigen::bfloat16>;

/// Run-time knobs of the logits kernels.
struct LogitsKernelOptions {
  /// The kernels see x = logits / temperature (rounded to float, as verl's actor divides the
  /// float32 logits in place), and gradients are with respect to the raw logits.
  float temperature = 1.0f;
  /// 0 means verl::default_thread_count() (VERL_NUM_THREADS, else the CPUs this process may run
  /// on). Small inputs use fewer threads.
  unsigned num_threads = 0;
  SimdLevel simd = SimdLevel::automatic;
};

/// Per-row results of the fused forward pass, each of length N. `row_max` and `log_normalizer`
/// are what the backward pass needs: log p_j = (x_j - row_max) - log_normalizer.
struct LogprobEntropy {
  VectorF log_probs;       ///< log softmax(x)[label]; empty when no labels were given
  VectorF entropy;         ///< -sum_j p_j log p_j
  VectorF sum_pi_squared;  ///< sum_j p_j^2
  VectorF row_max;         ///< max_j x_j
  VectorF log_normalizer;  ///< log sum_j exp(x_j - row_max)

  /// logsumexp(x) per row.
  VectorF logsumexp() const { return row_max + log_normalizer; }
};

/// Cotangents of the three per-row outputs (each empty = zero, or of length N).
struct LogprobEntropyCotangents {
  std::span<const float> log_probs = {};
  std::span<const float> entropy = {};
  std::span<const float> sum_pi_squared = {};
};

namespace detail {

/// Float partial sums per accumulator lane before they are added into the row's double totals:
/// few enough that float rounding stays ~1e-7 relative.
inline constexpr Index logits_terms_per_lane = 64;
/// Below this many elements per thread, extra threads cost more than they save.
inline constexpr Index logits_min_elements_per_thread = Index{1} << 16;
/// Shifted logits (x - max, log p) are clamped here before the exp: exp() stays a normal float,
/// and 0 * (x - max) stays finite for -inf logits (a vocabulary masked with -inf gets exactly zero
/// probability). Below it the probability is flushed to exactly 0 (it is < 2e-38).
inline constexpr float logits_shift_floor = simd::exp_min_normal_arg;
/// Below this shift e^2 is subnormal: those terms of sum e^2 are dropped (each < FLT_MIN next to
/// the max's term 1) instead of paying for subnormal arithmetic.
inline constexpr float logits_square_floor = -43.6f;

template <class Scalar>
VERL_FORCE_INLINE float to_float(Scalar v) {
  if constexpr (std::same_as<Scalar, float>) {
    return v;
  } else {
    return static_cast<float>(v);
  }
}

template <class Scalar>
VERL_FORCE_INLINE Scalar from_float(float v) {
  if constexpr (std::same_as<Scalar, float>) {
    return v;
  } else {
    return Scalar(v);
  }
}

/// x = logit / temperature, exactly as the forward pass computes it.
template <bool Scaled, class Scalar>
VERL_FORCE_INLINE float scaled_logit(Scalar v, float temperature) {
  if constexpr (Scaled) {
    return to_float(v) / temperature;
  } else {
    (void)temperature;
    return to_float(v);
  }
}

/// W logits as floats, divided by the temperature (the same IEEE division as scaled_logit).
template <int W, bool Scaled, class Scalar>
VERL_FORCE_INLINE simd::FloatPack<W> load_logits(const Scalar* source, simd::FloatPack<W> temperature) {
  simd::FloatPack<W> x;
  if constexpr (std::same_as<Scalar, float>) {
    x = simd::load<W>(source);
  } else {
    x = simd::load_bfloat16<W>(source);
  }
  if constexpr (Scaled) x = x / temperature;
  return x;
}

template <int W, class OutScalar>
VERL_FORCE_INLINE void store_gradient(OutScalar* target, simd::FloatPack<W> g) {
  if constexpr (std::same_as<OutScalar, float>) {
    simd::store<W>(target, g);
  } else {
    simd::store_bfloat16<W>(target, g);
  }
}

template <class Scalar>
struct ForwardJob {
  const Scalar* logits;
  Index stride;  ///< elements between rows
  Index vocab;
  const std::int64_t* labels;  ///< null: no log-probs
  float temperature;
  float* log_probs;
  float* entropy;
  float* sum_pi_squared;
  float* row_max;
  float* log_normalizer;
};

template <class Scalar, class OutScalar>
struct BackwardJob {
  const Scalar* logits;
  Index stride;
  Index vocab;
  const std::int64_t* labels;
  float temperature;
  const float* row_max;
  const float* log_normalizer;
  const float* entropy;
  const float* sum_pi_squared;
  const float* grad_log_probs;  ///< each may be null (zero cotangent)
  const float* grad_entropy;
  const float* grad_sum_pi_squared;
  OutScalar* grad;
  Index grad_stride;
};

/// Independent exp chains in flight per iteration of the hot loops.
inline constexpr int logits_unroll = 2;

/// Total of per-unroll accumulators (packs, or doubles on the scalar path).
template <int W, class Accumulator>
VERL_FORCE_INLINE double sum_accumulators(const Accumulator (&partial)[logits_unroll]) {
  if constexpr (W == 1) {
    double total = 0;
    for (const double p : partial) total += p;
    return total;
  } else {
    Accumulator folded = partial[0];
    for (int u = 1; u < logits_unroll; ++u) folded += partial[u];
    return simd::reduce_sum<W>(folded);
  }
}

/// Forward over rows [begin, end) with packs of W lanes.
template <int W, bool Scaled, class Scalar>
VERL_FORCE_INLINE void forward_rows(const ForwardJob<Scalar>& job, Index begin, Index end) {
  using F = simd::FloatPack<W>;
  // Lanes spread each sum over many accumulators; the scalar path has none, so it sums in double.
  using Accumulator = std::conditional_t<W == 1, double, F>;
  constexpr int unroll = logits_unroll;
  constexpr Index step = unroll * W;
  // A chunk is read from memory once and then re-read from L1 (at most 8 KiB of floats).
  constexpr Index chunk = W == 1 ? 2048 : logits_terms_per_lane * step;
  constexpr float neg_inf = -std::numeric_limits<float>::infinity();
  // The chunk as float, padded with -inf to a whole number of steps (padding adds exactly 0).
  alignas(64) float buffer[chunk + step];
  const F vtemp = simd::broadcast<W>(job.temperature);

  for (Index row = begin; row < end; ++row) {
    const Scalar* source = job.logits + row * job.stride;
    float max = neg_inf;
    double sum_exp = 0, sum_exp_shift = 0, sum_exp_sq = 0;  // sum e, sum e*(x-max), sum e^2
    for (Index start = 0; start < job.vocab; start += chunk) {
      const Index count = std::min(chunk, job.vocab - start);
      // Pass 1: x = logits / T as float into the buffer, and the chunk's max.
      F chunk_max = simd::broadcast<W>(neg_inf);
      Index j = 0;
      for (; j + W <= count; j += W) {
        const F x = load_logits<W, Scaled>(source + start + j, vtemp);
        simd::store<W>(buffer + j, x);
        chunk_max = simd::max<W>(chunk_max, x);
      }
      for (Index k = j; k < count; ++k) buffer[k] = scaled_logit<Scaled>(source[start + k], job.temperature);
      const Index padded = (count + step - 1) / step * step;
      for (Index k = count; k < padded; ++k) buffer[k] = neg_inf;
      for (Index k = j; k < padded; k += W) chunk_max = simd::max<W>(chunk_max, simd::load<W>(buffer + k));
      const float chunk_top = simd::reduce_max<W>(chunk_max);
      if (chunk_top > max) {
        if (sum_exp > 0) {
          // Re-base the running sums on the new max: e' = e*s, (x - m') = (x - m) + (m - m').
          const double shift = static_cast<double>(max) - static_cast<double>(chunk_top);
          const double s = std::exp(shift);
          sum_exp_shift = s * (sum_exp_shift + shift * sum_exp);
          sum_exp *= s;
          sum_exp_sq *= s * s;
        }
        max = chunk_top;
      }
      if (max == neg_inf) {
        // Everything so far is -inf (adds exactly 0) or NaN (must poison the row).
        for (Index k = 0; k < count; ++k)
          if (buffer[k] != buffer[k]) sum_exp = std::numeric_limits<double>::quiet_NaN();
        continue;
      }
      // Pass 2: e = exp(x - max) and the three sums, from L1.
      const F vmax = simd::broadcast<W>(max);
      const F floor = simd::broadcast<W>(logits_shift_floor);
      const F square_floor = simd::broadcast<W>(logits_square_floor);
      const F zero = simd::broadcast<W>(0.0f);
      Accumulator sums[unroll] = {}, shifted[unroll] = {}, squares[unroll] = {};
      // While the exps run, pull the next chunk in so that pass 1 does not stall on memory.
      const char* next_chunk = reinterpret_cast<const char*>(source + start + count);
      for (Index k = 0; k < padded; k += step) {
        for (int u = 0; u < unroll; ++u) simd::prefetch(next_chunk + (k + u * W) * static_cast<Index>(sizeof(Scalar)));
        for (int u = 0; u < unroll; ++u) {
          const F d = simd::load<W>(buffer + k + u * W) - vmax;
          const F clamped = simd::max_keep_nan<W>(floor, d);
          const F e = simd::select_less<W>(d, floor, zero, simd::exp_nonpositive<W>(clamped));
          const F e_for_square = simd::select_less<W>(d, square_floor, zero, e);
          sums[u] += e;
          shifted[u] += e * clamped;
          squares[u] += e_for_square * e_for_square;
        }
      }
      sum_exp += detail::sum_accumulators<W>(sums);
      sum_exp_shift += detail::sum_accumulators<W>(shifted);
      sum_exp_sq += detail::sum_accumulators<W>(squares);
    }
    const double log_sum = std::log(sum_exp);
    job.row_max[row] = max;
    job.log_normalizer[row] = static_cast<float>(log_sum);
    job.entropy[row] = static_cast<float>(log_sum - sum_exp_shift / sum_exp);
    job.sum_pi_squared[row] = static_cast<float>(sum_exp_sq / (sum_exp * sum_exp));
    if (job.labels != nullptr) {
      const float x_label = scaled_logit<Scaled>(source[job.labels[row]], job.temperature);
      job.log_probs[row] = static_cast<float>(static_cast<double>(x_label - max) - log_sum);
    }
  }
}

/// Per-row constants of the backward pass, as packs; the factors already include the 1/T of
/// x = logits / T.
template <int W>
struct BackwardRow {
  simd::FloatPack<W> max, log_normalizer, floor, k0, grad_entropy, twice_grad_sum_pi_squared;
};

/// d(loss)/d(logits) for one pack of x (before the label's + g_lp / T):
/// p (k0 - g_H log p + 2 g_Q p) / T with log p = (x - max) - log_normalizer.
template <int W>
VERL_FORCE_INLINE simd::FloatPack<W> backward_pack(simd::FloatPack<W> x, const BackwardRow<W>& c) {
  using F = simd::FloatPack<W>;
  const F log_p = (x - c.max) - c.log_normalizer;
  const F clamped = simd::max_keep_nan<W>(c.floor, log_p);
  const F p = simd::select_less<W>(log_p, c.floor, simd::broadcast<W>(0.0f), simd::exp_nonpositive<W>(clamped));
  return p * (c.k0 - c.grad_entropy * clamped + c.twice_grad_sum_pi_squared * p);
}

/// Backward over rows [begin, end): with log p_j = (x_j - max) - log_normalizer and
///   d logp_label / dx_j = [j = label] - p_j
///   d H / dx_j          = -p_j (log p_j + H)
///   d sum p^2 / dx_j    = 2 p_j (p_j - sum p^2)
/// the gradient is g_j = p_j (k0 - g_H log p_j + 2 g_Q p_j) (+ g_lp at the label), divided by
/// the temperature, with k0 = -g_lp - g_H H - 2 g_Q sum p^2. Each element is read before it is
/// written, so `grad` may alias the logits.
template <int W, bool Scaled, class Scalar, class OutScalar>
VERL_FORCE_INLINE void backward_rows(const BackwardJob<Scalar, OutScalar>& job, Index begin, Index end) {
  using F = simd::FloatPack<W>;
  const F vtemp = simd::broadcast<W>(job.temperature);
  const float inv_temperature = Scaled ? 1.0f / job.temperature : 1.0f;
  alignas(64) float in[W];
  alignas(64) float out[W];
  for (Index row = begin; row < end; ++row) {
    const Scalar* source = job.logits + row * job.stride;
    OutScalar* target = job.grad + row * job.grad_stride;
    const float g_lp = job.grad_log_probs != nullptr ? job.grad_log_probs[row] : 0.0f;
    const float g_h = job.grad_entropy != nullptr ? job.grad_entropy[row] : 0.0f;
    const float g_q = job.grad_sum_pi_squared != nullptr ? job.grad_sum_pi_squared[row] : 0.0f;
    if (g_lp == 0.0f && g_h == 0.0f && g_q == 0.0f) {
      std::fill(target, target + job.vocab, from_float<OutScalar>(0.0f));
      continue;
    }
    const Index label = job.labels != nullptr ? job.labels[row] : -1;
    const float x_label = label >= 0 ? scaled_logit<Scaled>(source[label], job.temperature) : 0.0f;
    const float max = job.row_max[row];
    const float k0 = (-g_lp - g_h * job.entropy[row] - 2.0f * g_q * job.sum_pi_squared[row]) * inv_temperature;
    const float gh = g_h * inv_temperature, gq2 = 2.0f * g_q * inv_temperature;
    // Where p times the largest possible factor is below FLT_MIN the gradient is flushed to 0
    // rather than computed as a subnormal (which costs a microcode assist per element on x86).
    const float factor_bound = std::abs(k0) - logits_shift_floor * std::abs(gh) + std::abs(gq2);
    const float floor = std::clamp(std::log(std::numeric_limits<float>::min() / factor_bound) + 1.0f,
                                   logits_shift_floor, 0.0f);
    const BackwardRow<W> c{simd::broadcast<W>(max),
                           simd::broadcast<W>(job.log_normalizer[row]),
                           simd::broadcast<W>(floor),
                           simd::broadcast<W>(k0),
                           simd::broadcast<W>(gh),
                           simd::broadcast<W>(gq2)};
    Index j = 0;
    for (; j + W <= job.vocab; j += W)
      store_gradient<W>(target + j, backward_pack<W>(load_logits<W, Scaled>(source + j, vtemp), c));
    if (j < job.vocab) {  // tail through the same pack code, padded
      const Index rest = job.vocab - j;
      for (Index k = 0; k < W; ++k) in[k] = k < rest ? scaled_logit<Scaled>(source[j + k], job.temperature) : max;
      simd::store<W>(out, backward_pack<W>(simd::load<W>(in), c));
      for (Index k = 0; k < rest; ++k) target[j + k] = from_float<OutScalar>(out[k]);
    }
    if (label >= 0) {
      // The label's element gets + g_lp / T; recomputed from the saved x_label (grad may alias).
      simd::store<W>(out, backward_pack<W>(simd::broadcast<W>(x_label), c) + simd::broadcast<W>(g_lp * inv_temperature));
      target[label] = from_float<OutScalar>(out[0]);
    }
  }
}

// One entry point per instruction set; the always-inline kernels above are compiled inside each.
template <bool Scaled, class Scalar>
void forward_rows_baseline(const ForwardJob<Scalar>& job, Index begin, Index end) {
  forward_rows<simd::baseline_width, Scaled>(job, begin, end);
}
template <bool Scaled, class Scalar>
void forward_rows_scalar(const ForwardJob<Scalar>& job, Index begin, Index end) {
  forward_rows<1, Scaled>(job, begin, end);
}
template <bool Scaled, class Scalar, class OutScalar>
void backward_rows_baseline(const BackwardJob<Scalar, OutScalar>& job, Index begin, Index end) {
  backward_rows<simd::baseline_width, Scaled>(job, begin, end);
}
template <bool Scaled, class Scalar, class OutScalar>
void backward_rows_scalar(const BackwardJob<Scalar, OutScalar>& job, Index begin, Index end) {
  backward_rows<1, Scaled>(job, begin, end);
}
#if VERL_HAS_X86_DISPATCH
template <bool Scaled, class Scalar>
VERL_TARGET_AVX2 void forward_rows_avx2(const ForwardJob<Scalar>& job, Index begin, Index end) {
  forward_rows<8, Scaled>(job, begin, end);
}
template <bool Scaled, class Scalar>
VERL_TARGET_AVX512 void forward_rows_avx512(const ForwardJob<Scalar>& job, Index begin, Index end) {
  forward_rows<16, Scaled>(job, begin, end);
}
template <bool Scaled, class Scalar, class OutScalar>
VERL_TARGET_AVX2 void backward_rows_avx2(const BackwardJob<Scalar, OutScalar>& job, Index begin, Index end) {
  backward_rows<8, Scaled>(job, begin, end);
}
template <bool Scaled, class Scalar, class OutScalar>
VERL_TARGET_AVX512 void backward_rows_avx512(const BackwardJob<Scalar, OutScalar>& job, Index begin, Index end) {
  backward_rows<16, Scaled>(job, begin, end);
}
#endif

/// Threads to use for `rows` rows of `cols` elements.
inline unsigned logits_thread_count(unsigned requested, Index rows, Index cols) {
  Index threads = requested != 0 ? requested : static_cast<Index>(default_thread_count());
  const Index by_work = std::max<Index>(1, rows * cols / logits_min_elements_per_thread);
  threads = std::min({threads, by_work, std::max<Index>(rows, 1)});
  return static_cast<unsigned>(threads);
}

inline void require_labels(std::span<const std::int64_t> labels, Index rows, Index vocab) {
  VERL_CHECK_ARG(static_cast<Index>(labels.size()) == rows, "labels: expected length {} (rows of logits), got {}",
                 rows, labels.size());
  for (std::size_t i = 0; i < labels.size(); ++i) {
    VERL_CHECK_ARG(labels[i] >= 0 && labels[i] < vocab, "labels: expected values in [0, {}) (vocab size V), got {} at {}",
                   vocab, labels[i], i);
  }
}

inline void require_kernel_options(const LogitsKernelOptions& options) {
  VERL_CHECK_ARG(std::isfinite(options.temperature) && options.temperature > 0,
                 "temperature: expected a finite value > 0, got {}", options.temperature);
}

inline void require_cotangent(std::string_view argument, std::span<const float> cotangent, Index rows) {
  VERL_CHECK_ARG(cotangent.empty() || static_cast<Index>(cotangent.size()) == rows,
                 "{}: expected length {} (rows of logits) or empty, got {}", argument, rows, cotangent.size());
}

template <class Scalar>
void run_forward(const ForwardJob<Scalar>& job, Index rows, const LogitsKernelOptions& options) {
  const SimdLevel level = simd::resolve_level(options.simd);
  const bool scaled = options.temperature != 1.0f;
  const unsigned threads = logits_thread_count(options.num_threads, rows, job.vocab);
  using Kernel = void (*)(const ForwardJob<Scalar>&, Index, Index);
  Kernel kernel = scaled ? &forward_rows_baseline<true, Scalar> : &forward_rows_baseline<false, Scalar>;
  if (level == SimdLevel::scalar) kernel = scaled ? &forward_rows_scalar<true, Scalar> : &forward_rows_scalar<false, Scalar>;
#if VERL_HAS_X86_DISPATCH
  if (level == SimdLevel::avx2) kernel = scaled ? &forward_rows_avx2<true, Scalar> : &forward_rows_avx2<false, Scalar>;
  if (level == SimdLevel::avx512)
    kernel = scaled ? &forward_rows_avx512<true, Scalar> : &forward_rows_avx512<false, Scalar>;
#endif
  parallel_row_blocks(rows, threads, [&](Index b, Index e) { kernel(job, b, e); });
}

template <class Scalar, class OutScalar>
void run_backward(const BackwardJob<Scalar, OutScalar>& job, Index rows, const LogitsKernelOptions& options) {
  const SimdLevel level = simd::resolve_level(options.simd);
  const bool scaled = options.temperature != 1.0f;
  const unsigned threads = logits_thread_count(options.num_threads, rows, job.vocab);
  using Kernel = void (*)(const BackwardJob<Scalar, OutScalar>&, Index, Index);
  Kernel kernel = scaled ? &backward_rows_baseline<true, Scalar, OutScalar> : &backward_rows_baseline<false, Scalar, OutScalar>;
  if (level == SimdLevel::scalar)
    kernel = scaled ? &backward_rows_scalar<true, Scalar, OutScalar> : &backward_rows_scalar<false, Scalar, OutScalar>;
#if VERL_HAS_X86_DISPATCH
  if (level == SimdLevel::avx2)
    kernel = scaled ? &backward_rows_avx2<true, Scalar, OutScalar> : &backward_rows_avx2<false, Scalar, OutScalar>;
  if (level == SimdLevel::avx512)
    kernel = scaled ? &backward_rows_avx512<true, Scalar, OutScalar> : &backward_rows_avx512<false, Scalar, OutScalar>;
#endif
  parallel_row_blocks(rows, threads, [&](Index b, Index e) { kernel(job, b, e); });
}

}  // namespace detail

/// Fused forward: per row of `logits` (N, V), the log-probability of `labels[i]` (pass an empty
/// span to skip it), the entropy and the sum of squared probabilities of softmax(logits / T).
/// Reads each logit once. Labels must lie in [0, V).
template <class Derived>
LogprobEntropy fused_logprob_entropy(const Eigen::MatrixBase<Derived>& logits, std::span<const std::int64_t> labels,
                                     const LogitsKernelOptions& options = {}) {
  using Scalar = typename Derived::Scalar;
  VERL_STATIC_ASSERT(LogitScalar<Scalar>, LOGITS_MUST_BE_FLOAT_OR_BFLOAT16);
  const ConstMatrixRef<Scalar> x(logits.derived());  // no copy for row-major contiguous rows
  const Index rows = x.rows(), vocab = x.cols();
  VERL_CHECK_ARG(vocab > 0, "logits: expected at least one column (vocab size V), got shape ({}, {})", rows, vocab);
  detail::require_kernel_options(options);
  const bool with_labels = !labels.empty();
  if (with_labels) detail::require_labels(labels, rows, vocab);
  LogprobEntropy result;
  result.log_probs.resize(with_labels ? rows : 0);
  result.entropy.resize(rows);
  result.sum_pi_squared.resize(rows);
  result.row_max.resize(rows);
  result.log_normalizer.resize(rows);
  const detail::ForwardJob<Scalar> job{x.data(),
                                       x.outerStride(),
                                       vocab,
                                       with_labels ? labels.data() : nullptr,
                                       options.temperature,
                                       result.log_probs.data(),
                                       result.entropy.data(),
                                       result.sum_pi_squared.data(),
                                       result.row_max.data(),
                                       result.log_normalizer.data()};
  detail::run_forward(job, rows, options);
  return result;
}

/// Fused backward into `grad_logits` (N, V), which may be the logits themselves (in-place, as
/// flash-attn's cross-entropy does). `forward` is the result of fused_logprob_entropy on the same
/// logits and options; `labels` must be those of the forward pass when a log-prob cotangent is
/// given.
template <class Derived, class OutScalar>
void fused_logprob_entropy_backward_into(const Eigen::MatrixBase<Derived>& logits, std::span<const std::int64_t> labels,
                                         const LogprobEntropy& forward, const LogprobEntropyCotangents& cotangents,
                                         Eigen::Ref<RowMatrix<OutScalar>> grad_logits,
                                         const LogitsKernelOptions& options = {}) {
  using Scalar = typename Derived::Scalar;
  VERL_STATIC_ASSERT(LogitScalar<Scalar>, LOGITS_MUST_BE_FLOAT_OR_BFLOAT16);
  VERL_STATIC_ASSERT(LogitScalar<OutScalar>, GRADIENT_MUST_BE_FLOAT_OR_BFLOAT16);
  const ConstMatrixRef<Scalar> x(logits.derived());
  const Index rows = x.rows(), vocab = x.cols();
  VERL_CHECK_ARG(vocab > 0, "logits: expected at least one column (vocab size V), got shape ({}, {})", rows, vocab);
  detail::require_kernel_options(options);
  verl::detail::require_same_shape("grad_logits", shape_of(grad_logits), "logits", {rows, vocab});
  detail::require_cotangent("cotangents.log_probs", cotangents.log_probs, rows);
  detail::require_cotangent("cotangents.entropy", cotangents.entropy, rows);
  detail::require_cotangent("cotangents.sum_pi_squared", cotangents.sum_pi_squared, rows);
  verl::detail::require_length("forward.row_max", forward.row_max.size(), rows);
  verl::detail::require_length("forward.log_normalizer", forward.log_normalizer.size(), rows);
  verl::detail::require_length("forward.entropy", forward.entropy.size(), rows);
  verl::detail::require_length("forward.sum_pi_squared", forward.sum_pi_squared.size(), rows);
  const bool with_labels = !cotangents.log_probs.empty();
  if (with_labels) detail::require_labels(labels, rows, vocab);
  const detail::BackwardJob<Scalar, OutScalar> job{x.data(),
                                                   x.outerStride(),
                                                   vocab,
                                                   with_labels ? labels.data() : nullptr,
                                                   options.temperature,
                                                   forward.row_max.data(),
                                                   forward.log_normalizer.data(),
                                                   forward.entropy.data(),
                                                   forward.sum_pi_squared.data(),
                                                   with_labels ? cotangents.log_probs.data() : nullptr,
                                                   cotangents.entropy.empty() ? nullptr : cotangents.entropy.data(),
                                                   cotangents.sum_pi_squared.empty() ? nullptr
                                                                                     : cotangents.sum_pi_squared.data(),
                                                   grad_logits.data(),
                                                   grad_logits.outerStride()};
  detail::run_backward(job, rows, options);
}

/// Fused backward returning d(loss)/d(logits), in the logits' element type.
template <class Derived>
RowMatrix<typename Derived::Scalar> fused_logprob_entropy_backward(const Eigen::MatrixBase<Derived>& logits,
                                                                   std::span<const std::int64_t> labels,
                                                                   const LogprobEntropy& forward,
                                                                   const LogprobEntropyCotangents& cotangents,
                                                                   const LogitsKernelOptions& options = {}) {
  RowMatrix<typename Derived::Scalar> grad(logits.rows(), logits.cols());
  fused_logprob_entropy_backward_into<Derived, typename Derived::Scalar>(logits, labels, forward, cotangents, grad,
                                                                         options);
  return grad;
}

/// An Eigen vector as a cotangent span.
inline std::span<const float> as_span(const VectorF& v) { return {v.data(), static_cast<std::size_t>(v.size())}; }

}  // namespace verl::algo

