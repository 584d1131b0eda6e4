// Host side of value_loss.cuh: the per-token math of verl's clipped value loss (compute_value_loss)
// and the row walker, shared by the kernel (one warp per row) and a sequential host run, with
// torch's gradient shares at the clip bounds and at ties of the two squared errors, as
// verl::algo::compute_value_loss computes them (its CPU reference).
#pragma once

#include <cstdint>

#include "verl/algo/value_loss.hpp"
#include "verl/core/error.hpp"
#include "verl/kernels/detail/host_device.hpp"
#include "verl/kernels/detail/launch.hpp"
#include "verl/kernels/masked_reductions.hpp"

namespace verl::kernels {

/// Device pointers of one value-loss call, each (B, T).
struct ValueLossInputs {
  const float* vpreds = nullptr;  ///< the critic's predictions: the differentiated input
  const float* returns = nullptr;
  const float* values = nullptr;         ///< the rollout-time values the clip is centred on
  const float* response_mask = nullptr;  ///< 0/1
  std::int64_t rows = 0, cols = 0;
};

/// vf_loss and verl's critic metrics (critic/vf_loss, critic/vf_clipfrac, critic/vpred_mean).
struct ValueLossState {
  float vf_loss;
  float vf_clipfrac;
  float vpred_mean;
};

/// One token: its term in the row sum, its vpred_mean term, whether the clipped error won, and
/// d vf_loss / d vpred.
struct ValueLossTerm {
  float loss_term;
  float vpred_term;
  bool clipped;
  float grad;
};

namespace detail {

/// torch's share of max(mine, other)'s gradient for `mine`: 1, 0, or half at a tie.
VERL_KERNELS_HD float winner_share(float mine, float other) {
  return (mine > other ? 1.0f : 0.0f) + 0.5f * (mine == other ? 1.0f : 0.0f);
}

/// `token_weight` is 0.5 * W, the aggregation's weight of the token's row.
VERL_KERNELS_HD ValueLossTerm value_loss_token(float vpred, float ret, float value, float mask, float clip_range,
                                               float token_weight, bool select_valid) {
  const float upper = value + clip_range;
  const float lower = value - clip_range;
  const float below_upper = vpred < upper ? vpred : upper;        // torch.min(vpreds, values + c)
  const float vclip = below_upper > lower ? below_upper : lower;  // torch.max(., values - c)
  const float unclipped_error = vpred - ret;
  const float clipped_error = vclip - ret;
  const float unclipped = unclipped_error * unclipped_error;
  const float clipped = clipped_error * clipped_error;
  const float d_vclip = winner_share(upper, vpred) * winner_share(below_upper, lower);
  // Products rounded before the sum (no FMA), as the CPU reference.
  const float derivative = add_rn(winner_share(unclipped, clipped) * (2.0f * unclipped_error),
                                  winner_share(clipped, unclipped) * (2.0f * clipped_error) * d_vclip);
  const float loss = unclipped > clipped ? unclipped : clipped;  // torch.max
  const bool valid = mask != 0.0f;
  ValueLossTerm t;
  t.loss_term = select_valid ? (valid ? loss : 0.0f) : loss * mask;
  t.vpred_term = valid ? vpred : 0.0f;
  t.clipped = valid && clipped > unclipped;
  t.grad = valid ? token_weight * derivative : 0.0f;
  return t;
}

/// Per-row sums of the value loss: loss terms, vpred terms, clipped-token count.
struct ValueRow {
  double loss_sum;
  double vpred_sum;
  long long clipped;
};

/// Tokens first, first + step, ... of `row`: writes their gradients, returns their sums.
VERL_KERNELS_HD ValueRow value_loss_token_pass(const ValueLossInputs& in, std::int64_t row, float clip_range,
                                               float token_weight, bool select_valid, float* grad,
                                               std::int64_t first, std::int64_t step) {
  ValueRow sums{0, 0, 0};
  for (std::int64_t t = first; t < in.cols; t += step) {
    const std::int64_t i = row * in.cols + t;
    const ValueLossTerm tok = value_loss_token(in.vpreds[i], in.returns[i], in.values[i], in.response_mask[i],
                                               clip_range, token_weight, select_valid);
    grad[i] = tok.grad;
    sums.loss_sum += static_cast<double>(tok.loss_term);
    sums.vpred_sum += static_cast<double>(tok.vpred_term);
    sums.clipped += tok.clipped;
  }
  return sums;
}

/// The loss and metrics from the batch totals (loss_sum already row-weighted).
VERL_KERNELS_HD ValueLossState finish_value_loss(const ValueRow& total, const Aggregation& a, double tokens) {
  return ValueLossState{static_cast<float>(0.5 * total.loss_sum * static_cast<double>(a.scale)),
                        masked_mean_of(static_cast<double>(total.clipped), tokens),
                        masked_mean_of(total.vpred_sum, tokens)};
}

inline void check_value_loss_inputs(const ValueLossInputs& in) {
  check_batch_shape(in.rows, in.cols);
  if (in.rows * in.cols == 0) return;
  VERL_CHECK_ARG(in.vpreds != nullptr, "vpreds: expected a ({}, {}) device array, got null", in.rows, in.cols);
  VERL_CHECK_ARG(in.returns != nullptr, "returns: expected a ({}, {}) device array, got null", in.rows, in.cols);
  VERL_CHECK_ARG(in.values != nullptr, "values: expected a ({}, {}) device array, got null", in.rows, in.cols);
  VERL_CHECK_ARG(in.response_mask != nullptr, "response_mask: expected a ({}, {}) device array, got null", in.rows,
                 in.cols);
}

/// The kernel's algorithm on one host thread, rows in order (checked against verl::algo by the host
/// tests; the kernel differs only in the order of its double sums). `grad` is (B, T).
inline ValueLossState value_loss_sequential(const ValueLossInputs& in, double cliprange_value, LossAggMode mode,
                                            const GlobalBatchInfo& info, float* grad) {
  check_value_loss_inputs(in);
  const HostMaskCounts counts(in.response_mask, in.rows, in.cols);
  const Aggregation a = counts.aggregation(mode, info, in.cols);
  ValueRow total{0, 0, 0};
  for (std::int64_t r = 0; r < in.rows; ++r) {
    const std::int64_t length = counts.lengths[static_cast<std::size_t>(r)];
    const ValueRow row = value_loss_token_pass(in, r, static_cast<float>(cliprange_value),
                                               0.5f * a.gradient_weight(length), a.selects_valid(), grad, 0, 1);
    if (!a.drops(length)) total.loss_sum += row.loss_sum * static_cast<double>(a.row_weight(length));
    total.vpred_sum += row.vpred_sum;
    total.clipped += row.clipped;
  }
  return finish_value_loss(total, a, static_cast<double>(counts.tokens));
}

}  // namespace detail

}  // namespace verl::kernels
