// CUDA log-prob / entropy of softmax(logits / T), forward and backward, one block per row.
//
// Forward: one pass over the row. Each thread keeps an online-softmax state over the elements it
// reads (16-byte vectors: 4 floats or 8 bf16): the running max m, sum e, sum e*(x - m) and
// sum e^2 with e = exp(x - m); the states are merged across the warp (shuffles) and the block
// (shared memory), rebasing each onto the common max. The row's max and log-normalizer are saved
// for the backward pass, which reads the logits once more and writes
//   g_j = p_j (k0 - g_H log p_j + 2 g_Q p_j) / T (+ g_lp / T at the label),
//   k0 = -g_lp - g_H H - 2 g_Q sum p^2,
// exactly the CPU reference's formula and floors (algo/logprob_entropy.hpp), in the logits' dtype.
//
// Numerics: float accumulation per thread (a few hundred terms each), exp via ex2.approx; the
// CPU reference accumulates in double, so results agree to ~1e-6 relative (tests state bounds).
// Labels outside [0, V) give a NaN log-prob (a kernel cannot throw; the CPU reference does).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cfloat>
#include <climits>
#include <cstdint>
#include <span>
#include <type_traits>

#include "verl/kernels/detail/cuda_check.cuh"
#include "verl/kernels/detail/launch.hpp"
#include "verl/kernels/detail/vector_load.cuh"
#include "verl/kernels/logprob_entropy.hpp"

namespace verl::kernels {
namespace detail {

inline constexpr float log2_e = 1.4426950408889634f;

/// exp(x) as one MUFU instruction (2 ulp on [-87, 0], flushes below FLT_MIN to 0 like the CPU
/// reference's floor; -inf -> 0, NaN -> NaN).
__device__ __forceinline__ float fast_exp(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x * log2_e));
  return y;
}

/// Online-softmax state over a set of elements: e = exp(x - max).
struct SoftmaxState {
  float max;      ///< -inf while empty (or all -inf)
  float sum;      ///< sum e (NaN once a NaN was seen)
  float shifted;  ///< sum e * max(x - max, floor)
  float squares;  ///< sum e^2
};

__device__ __forceinline__ SoftmaxState empty_state() { return {-__int_as_float(0x7f800000), 0.0f, 0.0f, 0.0f}; }

/// `s` re-expressed on a max `m` >= s.max: e' = e a, (x - m) = (x - s.max) + (s.max - m).
__device__ __forceinline__ SoftmaxState rebased(const SoftmaxState& s, float m) {
  if (s.max == m) return s;
  if (s.sum == 0.0f) return {m, 0.0f, 0.0f, 0.0f};  // nothing but -inf so far
  if (s.sum != s.sum) return {m, s.sum, s.shifted, s.squares};  // NaN stays NaN
  const float shift = s.max - m;
  const float a = expf(shift);  // rare (once per new max): the accurate exp
  return {m, s.sum * a, a * fmaf(shift, s.sum, s.shifted), s.squares * a * a};
}

__device__ __forceinline__ SoftmaxState merge(const SoftmaxState& a, const SoftmaxState& b) {
  const float m = fmaxf(a.max, b.max);
  const SoftmaxState x = rebased(a, m), y = rebased(b, m);
  return {m, x.sum + y.sum, x.shifted + y.shifted, x.squares + y.squares};
}

/// Adds element x (already divided by T) to a state whose max is >= x.
__device__ __forceinline__ void accumulate(SoftmaxState& s, float x) {
  const float d = x - s.max;
  const float e = fast_exp(d);
  // 0 * (-inf) would be NaN: a -inf logit contributes e = 0 times the floor.
  const float clamped = fmaxf(d, logits_shift_floor);
  s.sum += e;
  s.shifted = fmaf(e, clamped, s.shifted);
  s.squares = fmaf(e, e, s.squares);
}

template <bool Scaled>
__device__ __forceinline__ float scale_logit(float v, float temperature) {
  if constexpr (Scaled) {
    return __fdiv_rn(v, temperature);  // the IEEE division of the reference (verl divides in place)
  } else {
    return v;
  }
}

/// Adds `count` elements (already scaled) held in registers: one rebase per group.
template <int N>
__device__ __forceinline__ void accumulate_group(SoftmaxState& s, const float (&x)[N]) {
  float group_max = x[0];
#pragma unroll
  for (int i = 1; i < N; ++i) group_max = fmaxf(group_max, x[i]);
  if (group_max > s.max) s = rebased(s, group_max);
  if (s.max == -__int_as_float(0x7f800000)) {
    // All -inf so far: they add exactly 0; only a NaN must poison the row.
#pragma unroll
    for (int i = 0; i < N; ++i)
      if (x[i] != x[i]) s.sum = x[i];
    return;
  }
#pragma unroll
  for (int i = 0; i < N; ++i) accumulate(s, x[i]);
}

__device__ __forceinline__ SoftmaxState shuffle_down(const SoftmaxState& s, int offset) {
  return {__shfl_down_sync(0xffffffffu, s.max, offset), __shfl_down_sync(0xffffffffu, s.sum, offset),
          __shfl_down_sync(0xffffffffu, s.shifted, offset), __shfl_down_sync(0xffffffffu, s.squares, offset)};
}

/// The block's merged state, valid in thread 0 (blockDim.x a multiple of 32, <= 1024).
__device__ __forceinline__ SoftmaxState block_merge(SoftmaxState s) {
  __shared__ SoftmaxState warp_states[max_block_threads / warp_size];
  for (int offset = warp_size / 2; offset > 0; offset /= 2) s = merge(s, shuffle_down(s, offset));
  const int warp = threadIdx.x / warp_size, lane = threadIdx.x % warp_size;
  if (lane == 0) warp_states[warp] = s;
  __syncthreads();
  if (warp == 0) {
    const int warps = blockDim.x / warp_size;
    s = lane < warps ? warp_states[lane] : empty_state();
    for (int offset = warp_size / 2; offset > 0; offset /= 2) s = merge(s, shuffle_down(s, offset));
  }
  __syncthreads();  // warp_states may be reused by the next row
  return s;
}

/// Vectors each thread loads before it computes (independent 16-byte loads in flight).
inline constexpr int logits_unroll = 4;

template <class Scalar, bool Scaled>
__global__ void __launch_bounds__(logits_max_threads, 3)  // <= 42 registers: 3 rows per SM in flight
    logprob_entropy_forward_kernel(const Scalar* __restrict__ logits, LogitsShape shape,
                                   const std::int64_t* __restrict__ labels, float temperature,
                                   LogprobEntropyOutputs out) {
  constexpr int size = elements_per_vector<Scalar>();
  for (std::int64_t row = blockIdx.x; row < shape.rows; row += gridDim.x) {
    const Scalar* source = logits + row * shape.stride;
    const RowSplit split = split_row(source, shape.vocab);
    SoftmaxState s = empty_state();
    if (threadIdx.x < split.head) {
      const float x[1] = {scale_logit<Scaled>(load_as_float(source + threadIdx.x), temperature)};
      accumulate_group(s, x);
    }
    const Scalar* body = source + split.head;
    std::int64_t v = threadIdx.x;
    const std::int64_t step = blockDim.x;
    for (; v + (logits_unroll - 1) * step < split.vectors; v += logits_unroll * step) {
      FloatVector<Scalar> loaded[logits_unroll];
#pragma unroll
      for (int u = 0; u < logits_unroll; ++u) loaded[u] = load_vector(body + (v + u * step) * size);
#pragma unroll
      for (int u = 0; u < logits_unroll; ++u) {
        float x[size];
#pragma unroll
        for (int i = 0; i < size; ++i) x[i] = scale_logit<Scaled>(loaded[u].v[i], temperature);
        accumulate_group(s, x);
      }
    }
    for (; v < split.vectors; v += step) {
      const FloatVector<Scalar> loaded = load_vector(body + v * size);
      float x[size];
#pragma unroll
      for (int i = 0; i < size; ++i) x[i] = scale_logit<Scaled>(loaded.v[i], temperature);
      accumulate_group(s, x);
    }
    for (std::int64_t j = split.tail_begin + threadIdx.x; j < shape.vocab; j += step) {
      const float x[1] = {scale_logit<Scaled>(load_as_float(source + j), temperature)};
      accumulate_group(s, x);
    }
    s = block_merge(s);
    if (threadIdx.x == 0) {
      const float log_sum = logf(s.sum);
      out.row_max[row] = s.max;
      out.log_normalizer[row] = log_sum;
      out.entropy[row] = log_sum - s.shifted / s.sum;
      if (out.sum_pi_squared != nullptr) out.sum_pi_squared[row] = s.squares / (s.sum * s.sum);
      if (labels != nullptr) {
        const std::int64_t label = labels[row];
        float log_prob = __int_as_float(0x7fc00000);  // NaN: label outside [0, V)
        if (label >= 0 && label < shape.vocab) {
          const float x_label = scale_logit<Scaled>(load_as_float(source + label), temperature);
          log_prob = (x_label - s.max) - log_sum;
        }
        out.log_probs[row] = log_prob;
      }
    }
  }
}

/// Per-row constants of the backward pass (the CPU reference's BackwardRow).
struct BackwardConstants {
  float max, log_normalizer, floor, k0, grad_entropy, twice_grad_sum_pi_squared;
};

/// p (k0 - g_H log p + 2 g_Q p) for one x, with log p = (x - max) - log_normalizer.
__device__ __forceinline__ float backward_element(float x, const BackwardConstants& c) {
  const float log_p = (x - c.max) - c.log_normalizer;
  const float clamped = log_p != log_p ? log_p : fmaxf(c.floor, log_p);  // keep NaN
  const float p = log_p < c.floor ? 0.0f : fast_exp(clamped);
  return p * (c.k0 - c.grad_entropy * clamped + c.twice_grad_sum_pi_squared * p);
}

template <class Scalar, bool Scaled>
__global__ void __launch_bounds__(logits_max_threads, 2)  // <= 64 registers: 2 rows per SM in flight
    logprob_entropy_backward_kernel(const Scalar* logits, LogitsShape shape, const std::int64_t* __restrict__ labels,
                                    float temperature, LogprobEntropySaved saved,
                                    LogprobEntropyCotangentPointers cotangents, Scalar* grad,
                                    std::int64_t grad_stride) {
  // `grad` may alias `logits` (in place): each element is read by the thread that writes it,
  // before it writes it, so neither pointer is __restrict__ and the loads are plain (not __ldg).
  constexpr int size = elements_per_vector<Scalar>();
  const float inv_temperature = Scaled ? 1.0f / temperature : 1.0f;
  for (std::int64_t row = blockIdx.x; row < shape.rows; row += gridDim.x) {
    const Scalar* source = logits + row * shape.stride;
    Scalar* target = grad + row * grad_stride;
    const float g_lp = cotangents.log_probs != nullptr ? cotangents.log_probs[row] : 0.0f;
    const float g_h = cotangents.entropy != nullptr ? cotangents.entropy[row] : 0.0f;
    const float g_q = cotangents.sum_pi_squared != nullptr ? cotangents.sum_pi_squared[row] : 0.0f;
    const bool zero = g_lp == 0.0f && g_h == 0.0f && g_q == 0.0f;
    const std::int64_t label = cotangents.log_probs != nullptr ? labels[row] : -1;
    BackwardConstants c{};
    float label_extra = 0.0f;
    if (!zero) {
      const float entropy = g_h != 0.0f ? saved.entropy[row] : 0.0f;
      const float squares = g_q != 0.0f ? saved.sum_pi_squared[row] : 0.0f;
      c.max = saved.row_max[row];
      c.log_normalizer = saved.log_normalizer[row];
      c.k0 = (-g_lp - g_h * entropy - 2.0f * g_q * squares) * inv_temperature;
      c.grad_entropy = g_h * inv_temperature;
      c.twice_grad_sum_pi_squared = 2.0f * g_q * inv_temperature;
      // Where p times the largest factor is below FLT_MIN the gradient is 0 (as in the reference).
      const float factor_bound =
          fabsf(c.k0) - logits_shift_floor * fabsf(c.grad_entropy) + fabsf(c.twice_grad_sum_pi_squared);
      c.floor = fminf(fmaxf(logf(FLT_MIN / factor_bound) + 1.0f, logits_shift_floor), 0.0f);
      label_extra = g_lp * inv_temperature;
    }
    if (zero) {
      // All cotangents zero: exactly 0 (even for NaN logits), without reading the row.
      for (std::int64_t j = threadIdx.x; j < shape.vocab; j += blockDim.x) target[j] = float_to<Scalar>(0.0f);
      continue;
    }
    auto gradient_at = [&](float raw, std::int64_t j) {
      const float g = backward_element(scale_logit<Scaled>(raw, temperature), c);
      return j == label ? g + label_extra : g;
    };
    const RowSplit split = split_row(source, shape.vocab);
    const std::int64_t step = blockDim.x;
    // Vectors only where the gradient row has the logits row's alignment (same 16-byte phase).
    const bool same_phase = reinterpret_cast<std::uintptr_t>(source) % 16 ==
                            reinterpret_cast<std::uintptr_t>(target) % 16;
    if (!same_phase) {
      for (std::int64_t j = threadIdx.x; j < shape.vocab; j += step) {
        const float raw = plain_load_as_float(source + j);
        target[j] = float_to<Scalar>(gradient_at(raw, j));
      }
      continue;
    }
    if (threadIdx.x < split.head) {
      const std::int64_t j = threadIdx.x;
      const float raw = plain_load_as_float(source + j);
      target[j] = float_to<Scalar>(gradient_at(raw, j));
    }
    auto write_vector = [&](std::int64_t first, const uint4& raw) {
      FloatVector<Scalar> x = bits_to_vector<Scalar>(raw);
#pragma unroll
      for (int i = 0; i < size; ++i) x.v[i] = gradient_at(x.v[i], first + i);
      store_vector(target + first, x);
    };
    std::int64_t v = threadIdx.x;
    for (; v + (logits_unroll - 1) * step < split.vectors; v += logits_unroll * step) {
      // All loads before any store (program order is kept: the pointers may alias), so several
      // 16-byte reads are in flight per thread. Plain loads: `grad` may be the logits.
      uint4 raw[logits_unroll];
#pragma unroll
      for (int u = 0; u < logits_unroll; ++u)
        raw[u] = *reinterpret_cast<const uint4*>(source + split.head + (v + u * step) * size);
#pragma unroll
      for (int u = 0; u < logits_unroll; ++u) write_vector(split.head + (v + u * step) * size, raw[u]);
    }
    for (; v < split.vectors; v += step) {
      const std::int64_t first = split.head + v * size;
      write_vector(first, *reinterpret_cast<const uint4*>(source + first));
    }
    for (std::int64_t j = split.tail_begin + threadIdx.x; j < shape.vocab; j += step) {
      const float raw = plain_load_as_float(source + j);
      target[j] = float_to<Scalar>(gradient_at(raw, j));
    }
  }
}

template <class Scalar>
int logits_grid(std::int64_t rows) {
  return static_cast<int>(std::min<std::int64_t>(rows, INT_MAX));
}

}  // namespace detail

/// Forward: per row of `logits` (shape.rows x shape.vocab, rows shape.stride elements apart,
/// device memory), the log-prob of labels[row] (labels may be null: no log-probs), the entropy,
/// optionally sum p^2, and the row max / log-normalizer the backward pass needs.
template <class Scalar>
void logprob_entropy_forward(const Scalar* logits, const LogitsShape& shape, const std::int64_t* labels,
                             float temperature, const LogprobEntropyOutputs& out, cudaStream_t stream = nullptr) {
  static_assert(detail::DeviceLogitScalar<Scalar>, "LOGITS_MUST_BE_FLOAT_OR_BFLOAT16");
  detail::check_forward_args(logits, shape, labels, temperature, out);
  if (shape.rows == 0) return;
  const int threads = detail::logits_block_threads(shape.vocab, sizeof(Scalar));
  const int blocks = detail::logits_grid<Scalar>(shape.rows);
  if (temperature != 1.0f) {
    detail::logprob_entropy_forward_kernel<Scalar, true>
        <<<blocks, threads, 0, stream>>>(logits, shape, labels, temperature, out);
  } else {
    detail::logprob_entropy_forward_kernel<Scalar, false>
        <<<blocks, threads, 0, stream>>>(logits, shape, labels, temperature, out);
  }
  VERL_CUDA_CHECK_LAUNCH();
}

/// Backward: d(loss)/d(logits) into `grad` (rows grad_stride elements apart, the logits' dtype;
/// may be `logits` itself), from the forward pass's saved statistics and the cotangents.
/// `labels` must be the forward pass's when a log-prob cotangent is given.
template <class Scalar>
void logprob_entropy_backward(const Scalar* logits, const LogitsShape& shape, const std::int64_t* labels,
                              float temperature, const LogprobEntropySaved& saved,
                              const LogprobEntropyCotangentPointers& cotangents, Scalar* grad,
                              std::int64_t grad_stride, cudaStream_t stream = nullptr) {
  static_assert(detail::DeviceLogitScalar<Scalar>, "LOGITS_MUST_BE_FLOAT_OR_BFLOAT16");
  detail::check_backward_args(logits, shape, labels, temperature, saved, cotangents, grad, grad_stride);
  if (shape.rows == 0) return;
  const int threads = detail::logits_block_threads(shape.vocab, sizeof(Scalar));
  const int blocks = detail::logits_grid<Scalar>(shape.rows);
  if (temperature != 1.0f) {
    detail::logprob_entropy_backward_kernel<Scalar, true>
        <<<blocks, threads, 0, stream>>>(logits, shape, labels, temperature, saved, cotangents, grad, grad_stride);
  } else {
    detail::logprob_entropy_backward_kernel<Scalar, false>
        <<<blocks, threads, 0, stream>>>(logits, shape, labels, temperature, saved, cotangents, grad, grad_stride);
  }
  VERL_CUDA_CHECK_LAUNCH();
}

}  // namespace verl::kernels

namespace verl::kernels {
namespace detail {

/// The device element type of a host logits type (same bits).
template <class Host>
using DeviceScalarOf = std::conditional_t<std::is_same_v<Host, float>, float, __nv_bfloat16>;

/// Host logits and labels copied to the device, with the forward pass's per-row outputs.
template <class Host>
struct DeviceLogprobEntropy {
  LogitsShape shape;
  DeviceBuffer<DeviceScalarOf<Host>> logits;
  DeviceBuffer<std::int64_t> labels;
  DeviceBuffer<float> log_probs, entropy, sum_pi_squared, row_max, log_normalizer;

  DeviceLogprobEntropy(const ConstMatrixRef<Host>& x, std::span<const std::int64_t> host_labels)
      : shape{x.rows(), x.cols(), x.cols()},
        logits(static_cast<std::size_t>(x.size())),
        labels(host_labels.size()),
        log_probs(host_labels.empty() ? 0 : static_cast<std::size_t>(x.rows())),
        entropy(static_cast<std::size_t>(x.rows())),
        sum_pi_squared(static_cast<std::size_t>(x.rows())),
        row_max(static_cast<std::size_t>(x.rows())),
        log_normalizer(static_cast<std::size_t>(x.rows())) {
    // Rows of a ConstMatrixRef may be strided: copy them packed.
    if (shape.rows > 0)
      VERL_CUDA_CHECK(cudaMemcpy2D(logits.data(), shape.vocab * sizeof(Host), x.data(), x.outerStride() * sizeof(Host),
                                   shape.vocab * sizeof(Host), shape.rows, cudaMemcpyHostToDevice));
    labels.upload(host_labels.data());
  }

  void forward(float temperature) {
    logprob_entropy_forward(logits.data(), shape, labels.size() > 0 ? labels.data() : nullptr, temperature,
                            {log_probs.size() > 0 ? log_probs.data() : nullptr, entropy.data(), sum_pi_squared.data(),
                             row_max.data(), log_normalizer.data()});
  }
};

inline VectorF download_vector(const DeviceBuffer<float>& buffer) {
  VectorF v(static_cast<Index>(buffer.size()));
  buffer.download(v.data());
  return v;
}

}  // namespace detail

/// Convenience (synchronous, allocates): the forward kernel on host logits (N, V), returning what
/// algo::fused_logprob_entropy returns. For conformance runs and tests, not for hot loops. Labels
/// are checked on the host (as the reference does) before the copy.
template <class Derived>
algo::LogprobEntropy logprob_entropy_on_device(const Eigen::MatrixBase<Derived>& logits,
                                               std::span<const std::int64_t> labels, float temperature = 1.0f) {
  using Host = typename Derived::Scalar;
  VERL_STATIC_ASSERT(algo::LogitScalar<Host>, LOGITS_MUST_BE_FLOAT_OR_BFLOAT16);
  const ConstMatrixRef<Host> x(logits.derived());
  VERL_CHECK_ARG(x.cols() > 0, "logits: expected at least one column (vocab size V), got shape ({}, {})", x.rows(),
                 x.cols());
  if (!labels.empty()) algo::detail::require_labels(labels, x.rows(), x.cols());
  detail::DeviceLogprobEntropy<Host> device(x, labels);
  device.forward(temperature);
  VERL_CUDA_CHECK(cudaDeviceSynchronize());
  algo::LogprobEntropy out;
  out.log_probs = detail::download_vector(device.log_probs);
  out.entropy = detail::download_vector(device.entropy);
  out.sum_pi_squared = detail::download_vector(device.sum_pi_squared);
  out.row_max = detail::download_vector(device.row_max);
  out.log_normalizer = detail::download_vector(device.log_normalizer);
  return out;
}

/// Convenience (synchronous, allocates): forward then backward on the device, returning
/// d(loss)/d(logits) in the logits' element type for the given cotangents (each empty = zero).
template <class Derived>
RowMatrix<typename Derived::Scalar> logprob_entropy_backward_on_device(const Eigen::MatrixBase<Derived>& logits,
                                                                       std::span<const std::int64_t> labels,
                                                                       const algo::LogprobEntropyCotangents& cotangents,
                                                                       float temperature = 1.0f) {
  using Host = typename Derived::Scalar;
  VERL_STATIC_ASSERT(algo::LogitScalar<Host>, LOGITS_MUST_BE_FLOAT_OR_BFLOAT16);
  const ConstMatrixRef<Host> x(logits.derived());
  const Index rows = x.rows();
  VERL_CHECK_ARG(x.cols() > 0, "logits: expected at least one column (vocab size V), got shape ({}, {})", rows, x.cols());
  algo::detail::require_cotangent("cotangents.log_probs", cotangents.log_probs, rows);
  algo::detail::require_cotangent("cotangents.entropy", cotangents.entropy, rows);
  algo::detail::require_cotangent("cotangents.sum_pi_squared", cotangents.sum_pi_squared, rows);
  const bool with_labels = !cotangents.log_probs.empty();
  if (with_labels) algo::detail::require_labels(labels, rows, x.cols());
  detail::DeviceLogprobEntropy<Host> device(x, with_labels ? labels : std::span<const std::int64_t>{});
  device.forward(temperature);
  auto upload = [](std::span<const float> host) {
    DeviceBuffer<float> buffer(host.size());
    buffer.upload(host.data());
    return buffer;
  };
  DeviceBuffer<float> g_lp = upload(cotangents.log_probs), g_h = upload(cotangents.entropy),
                      g_q = upload(cotangents.sum_pi_squared);
  RowMatrix<Host> grad(rows, x.cols());
  DeviceBuffer<detail::DeviceScalarOf<Host>> d_grad(static_cast<std::size_t>(grad.size()));
  logprob_entropy_backward(device.logits.data(), device.shape, with_labels ? device.labels.data() : nullptr,
                           temperature,
                           {device.row_max.data(), device.log_normalizer.data(), device.entropy.data(),
                            device.sum_pi_squared.data()},
                           {g_lp.size() > 0 ? g_lp.data() : nullptr, g_h.size() > 0 ? g_h.data() : nullptr,
                            g_q.size() > 0 ? g_q.data() : nullptr},
                           d_grad.data(), device.shape.vocab);
  VERL_CUDA_CHECK(cudaDeviceSynchronize());
  d_grad.download(grad.data());
  return grad;
}

}  // namespace verl::kernels
