// verl's logprobs_from_logits family (verl/utils/torch_functional.py): the log-probability of
// each row's label under softmax(logits), and its vector-Jacobian product. verl has three
// implementations of the same quantity (flash-attn's cross-entropy, v2's per-row logsumexp, naive
// log_softmax + gather); all three are served by the fused kernel of logprob_entropy.hpp.
#pragma once

#include <cstdint>
#include <span>

#include "verl/algo/logits/logprob_entropy.hpp"
#include "verl/core/tensor.hpp"

namespace verl::algo {

/// log_softmax(logits / T)[labels[i]] for each row of (N, V) logits; labels in [0, V).
/// Fold (B, T, V) logits to (B*T, V) and (B, T) labels to B*T values in row-major order.
template <class Derived>
VectorF logprobs_from_logits(const Eigen::MatrixBase<Derived>& logits, std::span<const std::int64_t> labels,
                             const LogitsKernelOptions& options = {}) {
  VERL_CHECK_ARG(!labels.empty() || logits.rows() == 0, "labels: expected length {} (rows of logits), got 0",
                 logits.rows());
  return fused_logprob_entropy(logits, labels, options).log_probs;
}

/// verl's memory-saving variant (logsumexp one row at a time): the same numbers.
template <class Derived>
VectorF logprobs_from_logits_v2(const Eigen::MatrixBase<Derived>& logits, std::span<const std::int64_t> labels,
                                const LogitsKernelOptions& options = {}) {
  return logprobs_from_logits(logits, labels, options);
}

/// verl's log_softmax + gather variant: the same numbers.
template <class Derived>
VectorF logprobs_from_logits_naive(const Eigen::MatrixBase<Derived>& logits, std::span<const std::int64_t> labels,
                                   const LogitsKernelOptions& options = {}) {
  return logprobs_from_logits(logits, labels, options);
}

/// d(sum_i cotangent_i * logprobs_i) / d logits = cotangent_i * (onehot(label_i) - softmax_i)
/// (divided by the temperature). Runs the forward statistics and the backward pass; use
/// fused_logprob_entropy_backward directly to reuse a forward result.
template <class Derived>
RowMatrix<typename Derived::Scalar> logprobs_from_logits_backward(const Eigen::MatrixBase<Derived>& logits,
                                                                  std::span<const std::int64_t> labels,
                                                                  const ConstVectorRefF& cotangent,
                                                                  const LogitsKernelOptions& options = {}) {
  verl::detail::require_length("cotangent", cotangent.size(), logits.rows());
  const LogprobEntropy forward = fused_logprob_entropy(logits, labels, options);
  const std::span<const float> cot(cotangent.data(), static_cast<std::size_t>(cotangent.size()));
  return fused_logprob_entropy_backward(logits, labels, forward, {.log_probs = cot}, options);
}

}  // namespace verl::algo
