// RMSNorm's per-row arithmetic for float rows with the CPU's widest vector instructions picked at
// run time: built for the baseline ISA, Eigen's expressions ran two double lanes at a time and
// RMSNorm was ~5% of a small model's training step. Sums of squares and the backward projection
// are accumulated in double, as the generic path does. A tail shorter than a vector goes through
// the same lanes (zero-padded, contributing zeros), so a row's result does not depend on how the
// rows are laid out.
#pragma once

#include <algorithm>
#include <cmath>

#include "verl/cpu/vector_math.hpp"
#include "verl/core/tensor.hpp"

namespace verl::cpu {

namespace rms_norm_detail {

namespace simd = cpu::simd;

/// Runs lanes(offset, valid) over [0, n) in packs of W; the tail pack gets valid < W.
template <int W, class Lanes>
VERL_FORCE_INLINE void over_packs(Index n, Lanes&& lanes) {
  Index i = 0;
  for (; i + W <= n; i += W) lanes(i, W);
  if (i < n) lanes(i, n - i);
}

#if VERL_HAS_VECTOR_EXTENSIONS
/// Loads `valid` floats (the rest zero) through a stack copy when the pack is partial.
template <int W>
VERL_FORCE_INLINE simd::FloatPack<W> load_partial(const float* p, Index valid) {
  if (valid == W) return simd::load<W>(p);
  alignas(64) float buffer[W] = {};
  std::copy(p, p + valid, buffer);
  return simd::load<W>(buffer);
}

template <int W>
VERL_FORCE_INLINE void store_partial(float* p, simd::FloatPack<W> v, Index valid) {
  if (valid == W) return simd::store<W>(p, v);
  alignas(64) float buffer[W];
  simd::store<W>(buffer, v);
  std::copy(buffer, buffer + valid, p);
}

#endif

/// sum_i a[i] * b[i], products and sum in double (a = b gives the sum of squares).
template <int W>
VERL_FORCE_INLINE double dot_double(const float* a, const float* b, Index n) {
#if VERL_HAS_VECTOR_EXTENSIONS
  if constexpr (W >= 8) {
    using D = typename simd::HalfDoublePack<W>::Type;
    D low{}, high{};
    over_packs<W>(n, [&](Index i, Index valid) {
      simd::FloatPack<W / 2> a_low, a_high, b_low, b_high;
      simd::split_halves<W>(load_partial<W>(a + i, valid), a_low, a_high);
      simd::split_halves<W>(load_partial<W>(b + i, valid), b_low, b_high);
      low += __builtin_convertvector(a_low, D) * __builtin_convertvector(b_low, D);
      high += __builtin_convertvector(a_high, D) * __builtin_convertvector(b_high, D);
    });
    const D sum = low + high;
    double total = 0;
    for (int l = 0; l < W / 2; ++l) total += sum[l];
    return total;
  } else
#endif
  {
    double total = 0;
    for (Index i = 0; i < n; ++i) total += static_cast<double>(a[i]) * static_cast<double>(b[i]);
    return total;
  }
}

/// y = w * (x * r).
template <int W>
VERL_FORCE_INLINE void scale_row(const float* x, const float* w, float r, float* y, Index n) {
#if VERL_HAS_VECTOR_EXTENSIONS
  if constexpr (W >= 8) {
    const auto vr = simd::broadcast<W>(r);
    over_packs<W>(n, [&](Index i, Index valid) {
      store_partial<W>(y + i, load_partial<W>(w + i, valid) * (load_partial<W>(x + i, valid) * vr), valid);
    });
  } else
#endif
  {
    for (Index i = 0; i < n; ++i) y[i] = w[i] * (x[i] * r);
  }
}

/// Forward of one row: y = w * (x * r) with r = 1 / sqrt(mean(x^2) + eps); returns r.
template <int W>
VERL_FORCE_INLINE float forward_row(const float* x, const float* w, double eps, float* y, Index n) {
  const double mean_square = dot_double<W>(x, x, n) / static_cast<double>(n);
  const auto r = static_cast<float>(1.0 / std::sqrt(mean_square + eps));
  scale_row<W>(x, w, r, y, n);
  return r;
}

/// Backward of one row: dw += (dy * x) * r (when dw), dx (+)= r g - c x with g = w * dy and
/// c = r^3 (g . x) / n.
template <int W>
VERL_FORCE_INLINE void backward_row(const float* x, const float* w, float r, const float* dy, float* dw, float* dx,
                                    bool accumulate, Index n) {
  double projection_sum = 0;
#if VERL_HAS_VECTOR_EXTENSIONS
  if constexpr (W >= 8) {
    using D = typename simd::HalfDoublePack<W>::Type;
    D low{}, high{};
    const auto vr = simd::broadcast<W>(r);
    over_packs<W>(n, [&](Index i, Index valid) {
      const auto xv = load_partial<W>(x + i, valid), dyv = load_partial<W>(dy + i, valid);
      if (dw != nullptr) store_partial<W>(dw + i, load_partial<W>(dw + i, valid) + dyv * xv * vr, valid);
      const auto g = load_partial<W>(w + i, valid) * dyv;
      simd::FloatPack<W / 2> g_low, g_high, x_low, x_high;
      simd::split_halves<W>(g, g_low, g_high);
      simd::split_halves<W>(xv, x_low, x_high);
      low += __builtin_convertvector(g_low, D) * __builtin_convertvector(x_low, D);
      high += __builtin_convertvector(g_high, D) * __builtin_convertvector(x_high, D);
    });
    const D sum = low + high;
    for (int l = 0; l < W / 2; ++l) projection_sum += sum[l];
    const float coefficient = r * r * r * static_cast<float>(projection_sum) / static_cast<float>(n);
    const auto vc = simd::broadcast<W>(coefficient);
    over_packs<W>(n, [&](Index i, Index valid) {
      const auto xv = load_partial<W>(x + i, valid);
      const auto g = load_partial<W>(w + i, valid) * load_partial<W>(dy + i, valid);
      auto d = vr * g - vc * xv;
      if (accumulate) d = load_partial<W>(dx + i, valid) + d;
      store_partial<W>(dx + i, d, valid);
    });
  } else
#endif
  {
    for (Index i = 0; i < n; ++i) {
      if (dw != nullptr) dw[i] += dy[i] * x[i] * r;
      projection_sum += static_cast<double>(w[i] * dy[i]) * static_cast<double>(x[i]);
    }
    const float coefficient = r * r * r * static_cast<float>(projection_sum) / static_cast<float>(n);
    for (Index i = 0; i < n; ++i) {
      const float d = r * (w[i] * dy[i]) - coefficient * x[i];
      dx[i] = accumulate ? dx[i] + d : d;
    }
  }
}

/// One row kernel set per instruction set.
struct Kernels {
  float (*forward)(const float*, const float*, double, float*, Index);
  void (*scale)(const float*, const float*, float, float*, Index);
  void (*backward)(const float*, const float*, float, const float*, float*, float*, bool, Index);
};

inline float forward_baseline(const float* x, const float* w, double eps, float* y, Index n) {
  return forward_row<1>(x, w, eps, y, n);
}
inline void scale_baseline(const float* x, const float* w, float r, float* y, Index n) { scale_row<1>(x, w, r, y, n); }
inline void backward_baseline(const float* x, const float* w, float r, const float* dy, float* dw, float* dx,
                              bool accumulate, Index n) {
  backward_row<1>(x, w, r, dy, dw, dx, accumulate, n);
}
#if VERL_HAS_X86_DISPATCH
VERL_TARGET_AVX2 inline float forward_avx2(const float* x, const float* w, double eps, float* y, Index n) {
  return forward_row<8>(x, w, eps, y, n);
}
VERL_TARGET_AVX2 inline void scale_avx2(const float* x, const float* w, float r, float* y, Index n) {
  scale_row<8>(x, w, r, y, n);
}
VERL_TARGET_AVX2 inline void backward_avx2(const float* x, const float* w, float r, const float* dy, float* dw,
                                           float* dx, bool accumulate, Index n) {
  backward_row<8>(x, w, r, dy, dw, dx, accumulate, n);
}
VERL_TARGET_AVX512 inline float forward_avx512(const float* x, const float* w, double eps, float* y, Index n) {
  return forward_row<16>(x, w, eps, y, n);
}
VERL_TARGET_AVX512 inline void scale_avx512(const float* x, const float* w, float r, float* y, Index n) {
  scale_row<16>(x, w, r, y, n);
}
VERL_TARGET_AVX512 inline void backward_avx512(const float* x, const float* w, float r, const float* dy, float* dw,
                                               float* dx, bool accumulate, Index n) {
  backward_row<16>(x, w, r, dy, dw, dx, accumulate, n);
}
#endif

/// The widest kernels this CPU runs, picked once.
inline const Kernels& kernels() {
  static const Kernels picked = [] {
#if VERL_HAS_X86_DISPATCH
    const auto level = cpu::simd::best_level();
    if (level == cpu::SimdLevel::avx512) return Kernels{&forward_avx512, &scale_avx512, &backward_avx512};
    if (level == cpu::SimdLevel::avx2) return Kernels{&forward_avx2, &scale_avx2, &backward_avx2};
#endif
    return Kernels{&forward_baseline, &scale_baseline, &backward_baseline};
  }();
  return picked;
}

}  // namespace rms_norm_detail

}  // namespace verl::cpu
