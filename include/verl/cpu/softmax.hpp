// exp over a row of attention scores, vectorized with the CPU's widest instruction set at run time
// (the softmax of attention is the transformer's largest non-GEMM cost). Arguments are clamped to
// [ln FLT_MIN, 0]: every caller exponentiates a value minus an upper bound of it (the row max, or
// the log-sum-exp), and anything below is flushed to exactly 0 (< 2e-38).
//
// Two sums: attention rows (at most a context length of terms) add the lanes in float, which is
// accurate enough there and costs nothing; the sampler's rows (a whole vocabulary, ~152k terms,
// ~9.5k per float lane) add them in double, because a total ~1e-5 off moves the inverse CDF's
// boundaries by as much and picks a neighbouring token (exp_shifted_row_double_sum).
#pragma once

#include <algorithm>
#include <cmath>
#include <concepts>
#include <type_traits>

#include "verl/cpu/vector_math.hpp"
#include "verl/core/tensor.hpp"

namespace verl::cpu {

namespace softmax_detail {

namespace simd = cpu::simd;

/// The double accumulator of a float pack's lanes: two half-width double packs where the pack is
/// a vector, one double otherwise.
template <int W>
struct DoubleLanes {
  using Type = double;
};
#if VERL_HAS_VECTOR_EXTENSIONS
template <int W>
  requires(W >= 4)
struct DoubleLanes<W> {
  using Type = typename simd::HalfDoublePack<W>::Type;
};
#endif

/// x[0..W) = exp(min(scale * x - shift, 0)), flushed to 0 below exp_min_normal_arg; returns them.
template <int W>
VERL_FORCE_INLINE simd::FloatPack<W> exp_store(float* x, simd::FloatPack<W> scale, simd::FloatPack<W> shift) {
  using F = simd::FloatPack<W>;
  const F zero = simd::broadcast<W>(0.0f), floor = simd::broadcast<W>(simd::exp_min_normal_arg);
  F d = simd::load<W>(x) * scale - shift;
  d = simd::select_less<W>(zero, d, zero, d);  // min(d, 0)
  const F e = simd::select_less<W>(d, floor, zero, simd::exp_nonpositive<W>(simd::max_keep_nan<W>(floor, d)));
  simd::store<W>(x, e);
  return e;
}

/// Adds the lanes of `part` to the double accumulators.
template <int W, class D>
VERL_FORCE_INLINE void add_lanes_double(simd::FloatPack<W> part, D& low, [[maybe_unused]] D& high) {
  if constexpr (std::is_same_v<D, double>) {
    for (int l = 0; l < W; ++l) low += static_cast<double>(simd::lane<W>(part, l));
  } else {
#if VERL_HAS_VECTOR_EXTENSIONS
    simd::accumulate_double<W>(part, low, high);
#endif
  }
}

/// x[i] = exp(min(scale * x[i] - shift, 0)) for i < n; returns the sum of the results.
/// !DoubleSum: added in float lanes (each lane holds n / W terms).
/// DoubleSum: four packs are added pairwise in float (each lane's group sum is within ~1.5 float
/// ulps, the errors independent from group to group) and every group sum is added in double, so
/// the total of a 152k vocabulary is ~1e-10 relative off instead of ~1e-5, at a quarter of the
/// cost of converting every exponential (one conversion per 4 packs keeps the loop on the exp).
template <int W, bool DoubleSum = false>
VERL_FORCE_INLINE double exp_shifted(float* x, Index n, float scale, float shift) {
  using F = simd::FloatPack<W>;
  using D = typename DoubleLanes<W>::Type;
  const F vscale = simd::broadcast<W>(scale), vshift = simd::broadcast<W>(shift);
  Index i = 0;
  double total = 0;
  if constexpr (DoubleSum) {
    D low{}, high{};
    for (; i + 4 * W <= n; i += 4 * W) {
      const F a = exp_store<W>(x + i, vscale, vshift) + exp_store<W>(x + i + W, vscale, vshift);
      const F b = exp_store<W>(x + i + 2 * W, vscale, vshift) + exp_store<W>(x + i + 3 * W, vscale, vshift);
      add_lanes_double<W>(a + b, low, high);
    }
    for (; i + W <= n; i += W) add_lanes_double<W>(exp_store<W>(x + i, vscale, vshift), low, high);
    if constexpr (std::is_same_v<D, double>) {
      total = low;
    } else {
      for (int l = 0; l < W / 2; ++l) total += low[l] + high[l];
    }
  } else {
    F sum = simd::broadcast<W>(0.0f);
    for (; i + W <= n; i += W) sum += exp_store<W>(x + i, vscale, vshift);
    total = W == 1 ? static_cast<double>(simd::lane<W>(sum, 0)) : simd::reduce_sum<W>(sum);
  }
  for (; i < n; ++i) {
    const float d = std::min(x[i] * scale - shift, 0.0f);
    x[i] = d < simd::exp_min_normal_arg ? 0.0f : std::exp(d);
    total += x[i];
  }
  return total;
}

template <bool DoubleSum>
inline double exp_shifted_baseline(float* x, Index n, float scale, float shift) {
  return exp_shifted<simd::baseline_width, DoubleSum>(x, n, scale, shift);
}
#if VERL_HAS_X86_DISPATCH
template <bool DoubleSum>
VERL_TARGET_AVX2 inline double exp_shifted_avx2(float* x, Index n, float scale, float shift) {
  return exp_shifted<8, DoubleSum>(x, n, scale, shift);
}
template <bool DoubleSum>
VERL_TARGET_AVX512 inline double exp_shifted_avx512(float* x, Index n, float scale, float shift) {
  return exp_shifted<16, DoubleSum>(x, n, scale, shift);
}
#endif

/// The widest kernel this CPU runs, picked once per instantiation.
template <bool DoubleSum>
inline double exp_shifted_dispatch(float* x, Index n, float scale, float shift) {
#if VERL_HAS_X86_DISPATCH
  using cpu::SimdLevel;
  static const auto kernel = [] {
    const SimdLevel level = cpu::simd::best_level();
    return level == SimdLevel::avx512 ? &exp_shifted_avx512<DoubleSum>
           : level == SimdLevel::avx2 ? &exp_shifted_avx2<DoubleSum>
                                      : &exp_shifted_baseline<DoubleSum>;
  }();
  return kernel(x, n, scale, shift);
#else
  return exp_shifted_baseline<DoubleSum>(x, n, scale, shift);
#endif
}

}  // namespace softmax_detail

/// x[i] = exp(min(scale * x[i] - shift, 0)); returns their sum.
template <class S>
double exp_shifted_row(S* x, Index n, S scale, S shift) {
  if constexpr (std::same_as<S, float>) {
    return softmax_detail::exp_shifted_dispatch<false>(x, n, scale, shift);
  } else {
    double total = 0;
    for (Index i = 0; i < n; ++i) {
      x[i] = std::exp(std::min(scale * x[i] - shift, S(0)));
      total += static_cast<double>(x[i]);
    }
    return total;
  }
}

/// The same exponentials as exp_shifted_row<float> (bit-identical), their sum accumulated in
/// double (see exp_shifted): what the sampler's inverse CDF over a whole vocabulary needs.
inline double exp_shifted_row_double_sum(float* x, Index n, float scale, float shift) {
  return softmax_detail::exp_shifted_dispatch<true>(x, n, scale, shift);
}

}  // namespace verl::cpu
