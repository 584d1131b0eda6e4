// SwiGLU's element-wise part, silu(gate) * up, and its gradient, for float activations with the
// CPU's widest vector instructions picked at run time: built for the baseline ISA (SSE2), the
// Eigen expressions ran 4 lanes at a time and were a tenth of a small model's training step.
//
// sigmoid(g) = 1 / (1 + exp(-g)) with exp(-g) from simd::exp_bounded (within about an ulp of
// std::exp) on -g clamped to [-87, 87]: beyond, sigmoid is 1 or within 2e-38 of 0 either way.
// NaN stays NaN.
#pragma once

#include <algorithm>
#include <cmath>

#include "verl/algo/detail/vector_math.hpp"
#include "verl/core/tensor.hpp"

namespace verl::model::detail {

namespace swiglu_detail {

namespace simd = algo::detail::simd;

inline constexpr float exp_argument_bound = 87.0f;

/// exp(-g), the argument clamped as std::clamp does (NaN passes through).
template <int W>
VERL_FORCE_INLINE simd::FloatPack<W> exp_negated(simd::FloatPack<W> g) {
  using F = simd::FloatPack<W>;
  const F lo = simd::broadcast<W>(-exp_argument_bound), hi = simd::broadcast<W>(exp_argument_bound);
  F x = F{} - g;
  x = simd::pick<W>(x < lo, lo, x);
  x = simd::pick<W>(hi < x, hi, x);
  return simd::exp_bounded<W>(x);
}

inline float exp_negated_scalar(float g) { return std::exp(std::clamp(-g, -exp_argument_bound, exp_argument_bound)); }

template <int W>
VERL_FORCE_INLINE void forward(const float* __restrict gate, const float* __restrict up, float* __restrict out,
                               Index n) {
  Index i = 0;
#if VERL_HAS_VECTOR_EXTENSIONS
  if constexpr (W > 1) {
    using F = simd::FloatPack<W>;
    const F one = simd::broadcast<W>(1.0f);
    for (; i + W <= n; i += W) {
      const F g = simd::load<W>(gate + i);
      simd::store<W>(out + i, g / (one + exp_negated<W>(g)) * simd::load<W>(up + i));
    }
  }
#endif
  for (; i < n; ++i) out[i] = gate[i] / (1.0f + exp_negated_scalar(gate[i])) * up[i];
}

/// d_up = d_act * g * s, d_gate = d_act * u * s * (1 + g * (1 - s)) with s = sigmoid(g).
template <int W>
VERL_FORCE_INLINE void backward(const float* __restrict d_act, const float* __restrict gate, const float* __restrict up,
                                float* __restrict d_gate, float* __restrict d_up, Index n) {
  Index i = 0;
#if VERL_HAS_VECTOR_EXTENSIONS
  if constexpr (W > 1) {
    using F = simd::FloatPack<W>;
    const F one = simd::broadcast<W>(1.0f);
    for (; i + W <= n; i += W) {
      const F g = simd::load<W>(gate + i), da = simd::load<W>(d_act + i);
      const F s = one / (one + exp_negated<W>(g));
      simd::store<W>(d_up + i, da * g * s);
      simd::store<W>(d_gate + i, da * simd::load<W>(up + i) * s * (one + g * (one - s)));
    }
  }
#endif
  for (; i < n; ++i) {
    const float g = gate[i], s = 1.0f / (1.0f + exp_negated_scalar(g));
    d_up[i] = d_act[i] * g * s;
    d_gate[i] = d_act[i] * up[i] * s * (1.0f + g * (1.0f - s));
  }
}

inline void forward_baseline(const float* gate, const float* up, float* out, Index n) {
  forward<simd::baseline_width>(gate, up, out, n);
}
inline void backward_baseline(const float* d_act, const float* gate, const float* up, float* d_gate, float* d_up,
                              Index n) {
  backward<simd::baseline_width>(d_act, gate, up, d_gate, d_up, n);
}
#if VERL_HAS_X86_DISPATCH
VERL_TARGET_AVX2 inline void forward_avx2(const float* gate, const float* up, float* out, Index n) {
  forward<8>(gate, up, out, n);
}
VERL_TARGET_AVX2 inline void backward_avx2(const float* d_act, const float* gate, const float* up, float* d_gate,
                                           float* d_up, Index n) {
  backward<8>(d_act, gate, up, d_gate, d_up, n);
}
VERL_TARGET_AVX512 inline void forward_avx512(const float* gate, const float* up, float* out, Index n) {
  forward<16>(gate, up, out, n);
}
VERL_TARGET_AVX512 inline void backward_avx512(const float* d_act, const float* gate, const float* up, float* d_gate,
                                               float* d_up, Index n) {
  backward<16>(d_act, gate, up, d_gate, d_up, n);
}
#endif

}  // namespace swiglu_detail

/// out[i] = silu(gate[i]) * up[i] over n contiguous floats.
inline void swiglu_forward(const float* gate, const float* up, float* out, Index n) {
  using Kernel = void (*)(const float*, const float*, float*, Index);
  static const Kernel kernel = [] {
#if VERL_HAS_X86_DISPATCH
    const auto level = algo::detail::simd::best_level();
    if (level == algo::SimdLevel::avx512) return Kernel{&swiglu_detail::forward_avx512};
    if (level == algo::SimdLevel::avx2) return Kernel{&swiglu_detail::forward_avx2};
#endif
    return Kernel{&swiglu_detail::forward_baseline};
  }();
  kernel(gate, up, out, n);
}

/// The gradients of silu(gate) * up from d_act, over n contiguous floats.
inline void swiglu_backward(const float* d_act, const float* gate, const float* up, float* d_gate, float* d_up,
                            Index n) {
  using Kernel = void (*)(const float*, const float*, const float*, float*, float*, Index);
  static const Kernel kernel = [] {
#if VERL_HAS_X86_DISPATCH
    const auto level = algo::detail::simd::best_level();
    if (level == algo::SimdLevel::avx512) return Kernel{&swiglu_detail::backward_avx512};
    if (level == algo::SimdLevel::avx2) return Kernel{&swiglu_detail::backward_avx2};
#endif
    return Kernel{&swiglu_detail::backward_baseline};
  }();
  kernel(d_act, gate, up, d_gate, d_up, n);
}

}  // namespace verl::model::detail
