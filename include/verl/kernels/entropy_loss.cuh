// verl's compute_entropy_loss on the GPU: agg_loss of each token's entropy over the vocabulary and
// d entropy_loss / d logits (CPU reference: verl::algo::compute_entropy_loss). Composed from the
// fused logits kernels and the aggregation: the forward pass reads the logits once (online
// softmax, no labels), agg_loss gives the loss and each token's weight W, and the backward pass
// reads the logits once more with W as the entropy cotangent (masked tokens get an exact zero).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "verl/kernels/detail/device_utils.cuh"
#include "verl/kernels/logprob_entropy.cuh"
#include "verl/kernels/masked_reductions.cuh"

namespace verl::kernels {

/// `logits`: (B*T) rows of `shape.vocab` (verl's (B, T, V) with the first two dimensions folded,
/// row b*T + t), float or bfloat16; `response_mask`: (B, T) 0/1 with B*T = shape.rows. The loss
/// lands in state->loss (with the aggregation and counts); with grad_logits != nullptr also
/// d loss / d logits in the logits' dtype (rows grad_stride apart, 0 = vocab; may alias `logits`).
/// `temperature` divides the logits first, as verl's actor does. Two-phase like cub.
template <class Scalar>
void entropy_loss(void* temp, std::size_t& temp_bytes, const Scalar* logits, const LogitsShape& shape,
                  const float* response_mask, std::int64_t batch, std::int64_t response_length, LossAggMode mode,
                  const GlobalBatchInfo& info, AggLossState* state, Scalar* grad_logits = nullptr,
                  std::int64_t grad_stride = 0, float temperature = 1.0f, cudaStream_t stream = nullptr) {
  if (grad_stride == 0) grad_stride = shape.vocab;
  static_assert(detail::DeviceLogitScalar<Scalar>, "LOGITS_MUST_BE_FLOAT_OR_BFLOAT16");
  check_batch_shape(batch, response_length);
  VERL_CHECK_ARG(shape.rows == batch * response_length,
                 "logits: expected B*T = {} rows for a ({}, {}) response_mask, got {}", batch * response_length, batch,
                 response_length, shape.rows);
  const auto n = static_cast<std::size_t>(shape.rows);
  std::size_t agg_bytes = 0;
  agg_loss(nullptr, agg_bytes, nullptr, nullptr, batch, response_length, mode, info, nullptr);
  detail::TempCarver carve(temp);
  auto* entropy = carve.take<float>(n);
  auto* row_max = carve.take<float>(n);
  auto* log_normalizer = carve.take<float>(n);
  auto* weights = carve.take<float>(n);
  auto* agg_temp = carve.take<unsigned char>(agg_bytes);
  if (carve.answer_size_query(temp_bytes)) return;
  VERL_CHECK_ARG(state != nullptr, "state: expected a device AggLossState, got null");
  LogprobEntropyOutputs forward;
  forward.entropy = entropy;
  forward.row_max = row_max;
  forward.log_normalizer = log_normalizer;
  logprob_entropy_forward(logits, shape, nullptr, temperature, forward, stream);
  agg_loss(agg_temp, agg_bytes, entropy, response_mask, batch, response_length, mode, info, state,
           grad_logits != nullptr ? weights : nullptr, stream);
  if (grad_logits == nullptr) return;
  LogprobEntropySaved saved;
  saved.row_max = row_max;
  saved.log_normalizer = log_normalizer;
  saved.entropy = entropy;
  LogprobEntropyCotangentPointers cotangents;
  cotangents.entropy = weights;
  logprob_entropy_backward(logits, shape, nullptr, temperature, saved, cotangents, grad_logits, grad_stride, stream);
}

}  // namespace verl::kernels
