// The first index of a row's largest value, vectorized with the CPU's widest instruction set at
// run time: greedy sampling takes it over a whole vocabulary (49k-152k logits) for every row of
// every decode step, where a scalar scan with a branch per element cost more than the row's
// exponentials.
#pragma once

#include <cmath>
#include <limits>

#include "verl/core/tensor.hpp"
#include "verl/cpu/vector_math.hpp"

namespace verl::cpu {

namespace argmax_detail {

namespace simd = cpu::simd;

/// The scalar scan's answer: the first i with x[i] > every earlier candidate, starting from x[0];
/// NaN never wins (a NaN x[0] stays, as nothing compares greater than it).
template <int W>
VERL_FORCE_INLINE Index first_argmax(const float* x, Index n) {
  if (n <= 0 || std::isnan(x[0])) return 0;
  // The largest non-NaN value (simd::max skips NaN candidates)...
  auto lanes = simd::broadcast<W>(x[0]);
  Index i = 0;
  for (; i + W <= n; i += W) lanes = simd::max<W>(lanes, simd::load<W>(x + i));
  float largest = simd::reduce_max<W>(lanes);
  for (; i < n; ++i) {
    if (x[i] > largest) largest = x[i];
  }
  // ...then its first position: a block is scanned only when its largest lane equals it (NaN
  // lanes count as -inf there, and never equal it in the scan).
  const auto no_nan_floor = simd::broadcast<W>(-std::numeric_limits<float>::infinity());
  for (i = 0; i + W <= n; i += W) {
    if (simd::reduce_max<W>(simd::max<W>(no_nan_floor, simd::load<W>(x + i))) != largest) continue;
    for (Index j = i; j < i + W; ++j) {
      if (x[j] == largest) return j;
    }
  }
  for (; i < n; ++i) {
    if (x[i] == largest) return i;
  }
  return 0;
}

inline Index first_argmax_baseline(const float* x, Index n) { return first_argmax<simd::baseline_width>(x, n); }
#if VERL_HAS_X86_DISPATCH
VERL_TARGET_AVX2 inline Index first_argmax_avx2(const float* x, Index n) { return first_argmax<8>(x, n); }
VERL_TARGET_AVX512 inline Index first_argmax_avx512(const float* x, Index n) { return first_argmax<16>(x, n); }
#endif

}  // namespace argmax_detail

/// The first index of the largest value of x[0, n) (NaN never wins unless x[0] is NaN: the
/// answer of `best = 0; for i: if (x[i] > x[best]) best = i`); 0 for an empty row.
inline Index first_argmax(const float* x, Index n) {
#if VERL_HAS_X86_DISPATCH
  using cpu::SimdLevel;
  static const auto kernel = [] {
    const SimdLevel level = cpu::simd::best_level();
    return level == SimdLevel::avx512 ? &argmax_detail::first_argmax_avx512
           : level == SimdLevel::avx2 ? &argmax_detail::first_argmax_avx2
                                      : &argmax_detail::first_argmax_baseline;
  }();
  return kernel(x, n);
#else
  return argmax_detail::first_argmax_baseline(x, n);
#endif
}

}  // namespace verl::cpu
