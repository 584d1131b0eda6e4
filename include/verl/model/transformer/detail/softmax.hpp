// exp over a row of attention scores, vectorized with the CPU's widest instruction set at run time
// (the softmax of attention is the transformer's largest non-GEMM cost). Arguments are clamped to
// [ln FLT_MIN, 0]: every caller exponentiates a value minus an upper bound of it (the row max, or
// the log-sum-exp), and anything below is flushed to exactly 0 (< 2e-38).
#pragma once

#include <algorithm>
#include <cmath>
#include <concepts>

#include "verl/algo/detail/vector_math.hpp"
#include "verl/core/tensor.hpp"

namespace verl::model::detail {

namespace softmax_detail {

namespace simd = algo::detail::simd;

/// x[i] = exp(min(scale * x[i] - shift, 0)) for i < n; returns the sum of the results.
template <int W>
VERL_FORCE_INLINE double exp_shifted(float* x, Index n, float scale, float shift) {
  using F = simd::FloatPack<W>;
  const F vscale = simd::broadcast<W>(scale), vshift = simd::broadcast<W>(shift);
  const F zero = simd::broadcast<W>(0.0f), floor = simd::broadcast<W>(simd::exp_min_normal_arg);
  F sum = zero;
  Index i = 0;
  for (; i + W <= n; i += W) {
    F d = simd::load<W>(x + i) * vscale - vshift;
    d = simd::select_less<W>(zero, d, zero, d);  // min(d, 0)
    const F e = simd::select_less<W>(d, floor, zero, simd::exp_nonpositive<W>(simd::max_keep_nan<W>(floor, d)));
    simd::store<W>(x + i, e);
    sum += e;
  }
  double total = W == 1 ? static_cast<double>(simd::lane<W>(sum, 0)) : simd::reduce_sum<W>(sum);
  for (; i < n; ++i) {
    const float d = std::min(x[i] * scale - shift, 0.0f);
    x[i] = d < simd::exp_min_normal_arg ? 0.0f : std::exp(d);
    total += x[i];
  }
  return total;
}

inline double exp_shifted_baseline(float* x, Index n, float scale, float shift) {
  return exp_shifted<simd::baseline_width>(x, n, scale, shift);
}
#if VERL_HAS_X86_DISPATCH
VERL_TARGET_AVX2 inline double exp_shifted_avx2(float* x, Index n, float scale, float shift) {
  return exp_shifted<8>(x, n, scale, shift);
}
VERL_TARGET_AVX512 inline double exp_shifted_avx512(float* x, Index n, float scale, float shift) {
  return exp_shifted<16>(x, n, scale, shift);
}
#endif

}  // namespace softmax_detail

/// x[i] = exp(min(scale * x[i] - shift, 0)); returns their sum.
template <class S>
double exp_shifted_row(S* x, Index n, S scale, S shift) {
  if constexpr (std::same_as<S, float>) {
#if VERL_HAS_X86_DISPATCH
    using algo::SimdLevel;
    static const auto kernel = [] {
      const SimdLevel level = algo::detail::simd::best_level();
      return level == SimdLevel::avx512 ? &softmax_detail::exp_shifted_avx512
             : level == SimdLevel::avx2 ? &softmax_detail::exp_shifted_avx2
                                        : &softmax_detail::exp_shifted_baseline;
    }();
    return kernel(x, n, scale, shift);
#else
    return softmax_detail::exp_shifted_baseline(x, n, scale, shift);
#endif
  } else {
    double total = 0;
    for (Index i = 0; i < n; ++i) {
      x[i] = std::exp(std::min(scale * x[i] - shift, S(0)));
      total += static_cast<double>(x[i]);
    }
    return total;
  }
}

}  // namespace verl::model::detail
