// SwiGLU's element-wise part, silu(gate) * up, and its gradient, for float activations with the
// CPU's widest vector instructions picked at run time: built for the baseline ISA (SSE2), the
// Eigen expressions ran 4 lanes at a time and were a tenth of a small model's training step.
//
// sigmoid(g) = 1 / (1 + exp(-g)) with exp(-g) from simd::exp_bounded (within about an ulp of
// std::exp) on -g clamped to [-87, 87]: beyond, sigmoid is 1 or within 2e-38 of 0 either way.
// NaN stays NaN. A tail shorter than a vector goes through the same lanes (zero-padded), so an
// element's result does not depend on its position: data-parallel ranks, which hold other
// numbers of rows, compute exactly what one process does.
#pragma once

#include <algorithm>
#include <cmath>

#include "verl/cpu/vector_math.hpp"
#include "verl/core/tensor.hpp"

namespace verl::cpu {

namespace swiglu_detail {

namespace simd = cpu::simd;

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
    auto lanes = [&](const float* g_in, const float* u_in, float* o) {
      const F g = simd::load<W>(g_in);
      simd::store<W>(o, g / (one + exp_negated<W>(g)) * simd::load<W>(u_in));
    };
    for (; i + W <= n; i += W) lanes(gate + i, up + i, out + i);
    if (i < n) {  // the tail through the same lanes, so no element's value depends on where it sits
      alignas(64) float g[W] = {}, u[W] = {}, o[W];
      std::copy(gate + i, gate + n, g);
      std::copy(up + i, up + n, u);
      lanes(g, u, o);
      std::copy(o, o + (n - i), out + i);
      return;
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
    auto lanes = [&](const float* da_in, const float* g_in, const float* u_in, float* dg, float* du) {
      const F g = simd::load<W>(g_in), da = simd::load<W>(da_in);
      const F s = one / (one + exp_negated<W>(g));
      simd::store<W>(du, da * g * s);
      simd::store<W>(dg, da * simd::load<W>(u_in) * s * (one + g * (one - s)));
    };
    for (; i + W <= n; i += W) lanes(d_act + i, gate + i, up + i, d_gate + i, d_up + i);
    if (i < n) {  // the tail through the same lanes (see forward)
      alignas(64) float da[W] = {}, g[W] = {}, u[W] = {}, dg[W], du[W];
      std::copy(d_act + i, d_act + n, da);
      std::copy(gate + i, gate + n, g);
      std::copy(up + i, up + n, u);
      lanes(da, g, u, dg, du);
      std::copy(dg, dg + (n - i), d_gate + i);
      std::copy(du, du + (n - i), d_up + i);
      return;
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
    const auto level = cpu::simd::best_level();
    if (level == cpu::SimdLevel::avx512) return Kernel{&swiglu_detail::forward_avx512};
    if (level == cpu::SimdLevel::avx2) return Kernel{&swiglu_detail::forward_avx2};
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
    const auto level = cpu::simd::best_level();
    if (level == cpu::SimdLevel::avx512) return Kernel{&swiglu_detail::backward_avx512};
    if (level == cpu::SimdLevel::avx2) return Kernel{&swiglu_detail::backward_avx2};
#endif
    return Kernel{&swiglu_detail::backward_baseline};
  }();
  kernel(d_act, gate, up, d_gate, d_up, n);
}

}  // namespace verl::cpu
