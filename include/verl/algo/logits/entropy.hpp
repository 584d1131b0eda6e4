// Entropy of softmax(logits) per row (verl's entropy_from_logits and its chunked variant), the sum
// of squared probabilities (calculate_sum_pi_squared_from_logits), and their vector-Jacobian
// products, all on the fused kernel of logprob_entropy.hpp.
#pragma once

#include <span>

#include "verl/algo/logits/logprob_entropy.hpp"
#include "verl/core/error.hpp"
#include "verl/core/tensor.hpp"

namespace verl::algo {

/// H_i = logsumexp(x_i) - sum_j softmax(x_i)_j x_ij for each row of (N, V) logits (x = logits / T).
template <class Derived>
VectorF entropy_from_logits(const Eigen::MatrixBase<Derived>& logits, const LogitsKernelOptions& options = {}) {
  return fused_logprob_entropy(logits, {}, options).entropy;
}

/// verl's variant that bounds peak memory by processing `chunk_size` rows at a time (in float32);
/// the fused kernel streams rows anyway, so the numbers are those of entropy_from_logits.
template <class Derived>
VectorF entropy_from_logits_with_chunking(const Eigen::MatrixBase<Derived>& logits, Index chunk_size = 2048,
                                          const LogitsKernelOptions& options = {}) {
  VERL_CHECK_ARG(chunk_size > 0, "chunk_size: expected > 0, got {}", chunk_size);
  return entropy_from_logits(logits, options);
}

/// d(sum_i cotangent_i * H_i) / d logits = -cotangent_i * p_ij * (log p_ij + H_i) (divided by the
/// temperature).
template <class Derived>
RowMatrix<typename Derived::Scalar> entropy_from_logits_backward(const Eigen::MatrixBase<Derived>& logits,
                                                                 const ConstVectorRefF& cotangent,
                                                                 const LogitsKernelOptions& options = {}) {
  verl::detail::require_length("cotangent", cotangent.size(), logits.rows());
  const LogprobEntropy forward = fused_logprob_entropy(logits, {}, options);
  const std::span<const float> cot(cotangent.data(), static_cast<std::size_t>(cotangent.size()));
  return fused_logprob_entropy_backward(logits, {}, forward, {.entropy = cot}, options);
}

/// sum_j softmax(x_i)_j^2 = exp(logsumexp(2x) - 2 logsumexp(x)) per row (used by the optimal
/// token baseline).
template <class Derived>
VectorF calculate_sum_pi_squared_from_logits(const Eigen::MatrixBase<Derived>& logits,
                                             const LogitsKernelOptions& options = {}) {
  return fused_logprob_entropy(logits, {}, options).sum_pi_squared;
}

/// d(sum_i cotangent_i * sum_j p_ij^2) / d logits = 2 cotangent_i p_ij (p_ij - sum_k p_ik^2).
template <class Derived>
RowMatrix<typename Derived::Scalar> calculate_sum_pi_squared_from_logits_backward(
    const Eigen::MatrixBase<Derived>& logits, const ConstVectorRefF& cotangent, const LogitsKernelOptions& options = {}) {
  verl::detail::require_length("cotangent", cotangent.size(), logits.rows());
  const LogprobEntropy forward = fused_logprob_entropy(logits, {}, options);
  const std::span<const float> cot(cotangent.data(), static_cast<std::size_t>(cotangent.size()));
  return fused_logprob_entropy_backward(logits, {}, forward, {.sum_pi_squared = cot}, options);
}

}  // namespace verl::algo
