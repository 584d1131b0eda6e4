// Host side of the CUDA log-prob / entropy kernels (logprob_entropy.cuh): the device-pointer
// argument bundles, their argument checks, the launch shape, and the CPU reference the kernels
// are validated against (verl::algo::fused_logprob_entropy and its backward, whose formulas,
// floors and saved statistics the kernels reproduce). g++-compilable: no CUDA types here.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <span>

#include "verl/algo/logits/logprob_entropy.hpp"
#include "verl/core/error.hpp"
#include "verl/kernels/detail/launch.hpp"

namespace verl::kernels {

/// Device outputs of the forward pass, each of length `rows` (float32).
struct LogprobEntropyOutputs {
  float* log_probs = nullptr;       ///< log softmax(x)[label]; may be null when no labels are given
  float* entropy = nullptr;         ///< -sum_j p_j log p_j (required)
  float* sum_pi_squared = nullptr;  ///< sum_j p_j^2 (optional: null skips it)
  float* row_max = nullptr;         ///< max_j x_j, saved for the backward pass (required)
  float* log_normalizer = nullptr;  ///< log sum_j exp(x_j - row_max), saved for the backward pass (required)
};

/// What the backward pass reads from the forward pass (device, each of length `rows`).
struct LogprobEntropySaved {
  const float* row_max = nullptr;
  const float* log_normalizer = nullptr;
  const float* entropy = nullptr;         ///< needed when an entropy cotangent is given
  const float* sum_pi_squared = nullptr;  ///< needed when a sum_pi_squared cotangent is given
};

/// Cotangents of the three per-row outputs (device, each null = zero, or of length `rows`).
struct LogprobEntropyCotangentPointers {
  const float* log_probs = nullptr;
  const float* entropy = nullptr;
  const float* sum_pi_squared = nullptr;
};

/// Rows of `vocab` logits, `stride` elements apart.
struct LogitsShape {
  std::int64_t rows = 0;
  std::int64_t vocab = 0;
  std::int64_t stride = 0;
};

namespace detail {

/// Largest block the logits kernels launch (they are compiled for it: __launch_bounds__).
inline constexpr int logits_max_threads = 512;
/// Where exp(x - max) is flushed to zero: the CPU reference's floor, so both flush the same terms.
inline constexpr float logits_shift_floor = algo::detail::logits_shift_floor;

/// Threads per block (one block per row) for rows of `vocab` elements of `element_bytes`.
inline constexpr int logits_block_threads(std::int64_t vocab, int element_bytes) {
  return row_block_threads(vocab, element_bytes, logits_max_threads);
}

inline void check_logits_shape(const LogitsShape& shape) {
  VERL_CHECK_ARG(shape.rows >= 0, "rows: expected >= 0, got {}", shape.rows);
  VERL_CHECK_ARG(shape.vocab > 0, "vocab: expected at least one column (vocab size V), got {}", shape.vocab);
  VERL_CHECK_ARG(shape.stride >= shape.vocab, "stride: expected >= vocab ({}), got {}", shape.vocab, shape.stride);
}

inline void check_temperature(float temperature) {
  VERL_CHECK_ARG(std::isfinite(temperature) && temperature > 0, "temperature: expected a finite value > 0, got {}",
                 temperature);
}

inline void check_forward_args(const void* logits, const LogitsShape& shape, const std::int64_t* labels,
                               float temperature, const LogprobEntropyOutputs& out) {
  check_logits_shape(shape);
  check_temperature(temperature);
  if (shape.rows == 0) return;
  VERL_CHECK_ARG(logits != nullptr, "logits: expected a device pointer, got null");
  VERL_CHECK_ARG(out.entropy != nullptr, "out.entropy: expected a device pointer, got null");
  VERL_CHECK_ARG(out.row_max != nullptr, "out.row_max: expected a device pointer, got null");
  VERL_CHECK_ARG(out.log_normalizer != nullptr, "out.log_normalizer: expected a device pointer, got null");
  VERL_CHECK_ARG(labels == nullptr || out.log_probs != nullptr,
                 "out.log_probs: expected a device pointer when labels are given, got null");
}

inline void check_backward_args(const void* logits, const LogitsShape& shape, const std::int64_t* labels,
                                float temperature, const LogprobEntropySaved& saved,
                                const LogprobEntropyCotangentPointers& cotangents, const void* grad,
                                std::int64_t grad_stride) {
  check_logits_shape(shape);
  check_temperature(temperature);
  VERL_CHECK_ARG(grad_stride >= shape.vocab, "grad_stride: expected >= vocab ({}), got {}", shape.vocab, grad_stride);
  if (shape.rows == 0) return;
  VERL_CHECK_ARG(logits != nullptr, "logits: expected a device pointer, got null");
  VERL_CHECK_ARG(grad != nullptr, "grad: expected a device pointer, got null");
  VERL_CHECK_ARG(saved.row_max != nullptr && saved.log_normalizer != nullptr,
                 "saved.row_max, saved.log_normalizer: expected device pointers from the forward pass, got null");
  VERL_CHECK_ARG(cotangents.log_probs == nullptr || labels != nullptr,
                 "labels: expected the forward pass's labels when a log-prob cotangent is given, got null");
  VERL_CHECK_ARG(cotangents.entropy == nullptr || saved.entropy != nullptr,
                 "saved.entropy: expected a device pointer when an entropy cotangent is given, got null");
  VERL_CHECK_ARG(cotangents.sum_pi_squared == nullptr || saved.sum_pi_squared != nullptr,
                 "saved.sum_pi_squared: expected a device pointer when a sum_pi_squared cotangent is given, got null");
}

}  // namespace detail

/// The CPU reference of the forward kernel (single-threaded: the reference of a test is not
/// what is being timed, and one thread makes it independent of the machine).
template <class Derived>
algo::LogprobEntropy logprob_entropy_reference(const Eigen::MatrixBase<Derived>& logits,
                                               std::span<const std::int64_t> labels, float temperature) {
  algo::LogitsKernelOptions options;
  options.temperature = temperature;
  options.num_threads = 1;
  return algo::fused_logprob_entropy(logits, labels, options);
}

/// The CPU reference of the backward kernel: d(loss)/d(logits) in the logits' element type.
template <class Derived>
RowMatrix<typename Derived::Scalar> logprob_entropy_backward_reference(const Eigen::MatrixBase<Derived>& logits,
                                                                       std::span<const std::int64_t> labels,
                                                                       const algo::LogprobEntropy& forward,
                                                                       const algo::LogprobEntropyCotangents& cotangents,
                                                                       float temperature) {
  algo::LogitsKernelOptions options;
  options.temperature = temperature;
  options.num_threads = 1;
  return algo::fused_logprob_entropy_backward(logits, labels, forward, cotangents, options);
}

}  // namespace verl::kernels
