// verl's compute_entropy_loss (core_algos.py): agg_loss of the per-token entropy of the logits,
// and its gradient with respect to the logits, both on the fused logits kernel.
#pragma once

#include <Eigen/Core>

#include "verl/algo/logits/logprob_entropy.hpp"
#include "verl/algo/loss_aggregation.hpp"
#include "verl/core/error.hpp"
#include "verl/core/tensor.hpp"

namespace verl::algo {

/// The entropy loss and d(entropy_loss)/d(logits), (B*T, V) like the logits.
struct EntropyLoss {
  float entropy_loss = 0;
  MatrixF grad_logits;
};

namespace detail {

template <class LogitsDerived, class MaskDerived>
void require_entropy_loss_shapes(const Eigen::MatrixBase<LogitsDerived>& logits,
                                 const Eigen::MatrixBase<MaskDerived>& response_mask) {
  VERL_CHECK_ARG(logits.rows() == response_mask.rows() * response_mask.cols(),
                 "logits: expected B*T = {} rows for a ({}, {}) response_mask (logits (B, T, V) folded to "
                 "(B*T, V)), got {}",
                 response_mask.rows() * response_mask.cols(), response_mask.rows(), response_mask.cols(),
                 logits.rows());
  verl::detail::require_binary_mask("response_mask", response_mask);
}

}  // namespace detail

/// agg_loss(entropy_from_logits(logits), response_mask, mode) without the gradient. `logits` are
/// (B*T, V): verl's (B, T, V) with the first two dimensions folded, row b*T + t.
template <class LogitsDerived, class MaskDerived>
float compute_entropy_loss_value(const Eigen::MatrixBase<LogitsDerived>& logits,
                                 const Eigen::MatrixBase<MaskDerived>& response_mask,
                                 LossAggMode mode = LossAggMode::token_mean, const GlobalBatchInfo& info = {},
                                 const LogitsKernelOptions& options = {}) {
  detail::require_entropy_loss_shapes(logits, response_mask);
  const VectorF entropy = fused_logprob_entropy(logits, {}, options).entropy;
  const Eigen::Map<const MatrixF> token_entropy(entropy.data(), response_mask.rows(), response_mask.cols());
  return agg_loss(token_entropy, response_mask, mode, info);
}

/// The entropy loss and its gradient: the cotangent of each token's entropy is agg_loss's weight
/// W (0 on masked tokens, whose logits get an exact zero gradient without any exp).
template <class LogitsDerived, class MaskDerived>
  requires(!LossAggregation<LogitsDerived>)  // leaves compute_entropy_loss<TokenMean>(...) to the overload below
EntropyLoss compute_entropy_loss(const Eigen::MatrixBase<LogitsDerived>& logits,
                                 const Eigen::MatrixBase<MaskDerived>& response_mask,
                                 LossAggMode mode = LossAggMode::token_mean, const GlobalBatchInfo& info = {},
                                 const LogitsKernelOptions& options = {}) {
  detail::require_entropy_loss_shapes(logits, response_mask);
  const LogprobEntropy forward = fused_logprob_entropy(logits, {}, options);
  const Eigen::Map<const MatrixF> token_entropy(forward.entropy.data(), response_mask.rows(), response_mask.cols());
  EntropyLoss result;
  result.entropy_loss = agg_loss(token_entropy, response_mask, mode, info);
  const MatrixF weights = agg_loss_weights(response_mask, mode, info);  // row-major (B, T) = B*T cotangents
  const std::span<const float> cotangent(weights.data(), static_cast<std::size_t>(weights.size()));
  result.grad_logits.resize(logits.rows(), logits.cols());
  fused_logprob_entropy_backward_into<LogitsDerived, float>(logits, {}, forward, {.entropy = cotangent},
                                                            result.grad_logits, options);
  return result;
}

/// Compile-time aggregation mode: compute_entropy_loss<TokenMean>(logits, mask).
template <LossAggregation Mode, class LogitsDerived, class MaskDerived>
EntropyLoss compute_entropy_loss(const Eigen::MatrixBase<LogitsDerived>& logits,
                                 const Eigen::MatrixBase<MaskDerived>& response_mask, const GlobalBatchInfo& info = {},
                                 const LogitsKernelOptions& options = {}) {
  return compute_entropy_loss(logits, response_mask, Mode::mode, info, options);
}

}  // namespace verl::algo
