// Internals shared by the policy losses: float32 element-wise operations with torch's values and
// autograd conventions at ties, verl's masked mean finished in float32, the PPO clipped surrogate,
// the clip-ratio bounds, and the row machinery of the fused kernels.
//
// Kernel structure. Each loss walks the batch row by row: a scalar pass computes the row's exp()
// values into scratch (std::exp, so ratios are correctly rounded as far as libm is), then a
// branch-free token kernel computes the loss terms, metric terms and the gradient, and fixed
// double lanes sum the terms. Token kernels take __restrict row pointers and use the bit-mask
// selects of elementwise.hpp.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "verl/algo/policy_losses/policy_loss.hpp"
#include "verl/algo/policy_losses/elementwise.hpp"

namespace verl::algo::detail {

inline constexpr float kLogRatioBound = 20.0f;  ///< verl's ±20 clamp of log-ratios before exp

// ---- reductions ------------------------------------------------------------------------------------

/// verl_F.masked_mean finished the way torch does it: a float32 sum divided by
/// float32(count) + 1e-8 (0 for an empty mask).
inline float masked_mean_of(double masked_sum, double count) {
  return static_cast<float>(masked_sum) / (static_cast<float>(count) + 1e-8f);
}

/// `term` as agg_loss adds it to its row sum: where(mask, L, 0) under token-mean (select_valid),
/// L * m otherwise (a non-finite L on padding then gives NaN, as in verl).
VERL_FORCE_INLINE float row_sum_term(float loss, float mask, bool select_valid) {
  return select((mask != 0.0f) | !select_valid, loss * mask, 0.0f);
}

/// Scratch rows reused for every row of one call (no per-element allocation).
struct RowScratch {
  std::vector<float> ratio, second, loss_terms, metric_terms, ones;
  explicit RowScratch(Index cols)
      : ratio(static_cast<std::size_t>(cols)),
        second(static_cast<std::size_t>(cols)),
        loss_terms(static_cast<std::size_t>(cols)),
        metric_terms(static_cast<std::size_t>(cols)),
        ones(static_cast<std::size_t>(cols), 1.0f) {}
};

/// exp(clamp(log_prob - old, -bound, bound)) for one row (bound = +inf: no clamp).
inline void row_ratio(const float* __restrict log_prob, const float* __restrict old_log_prob, float* __restrict ratio,
                      Index cols, float bound) {
  for (Index j = 0; j < cols; ++j) ratio[j] = std::exp(clamp_value(log_prob[j] - old_log_prob[j], -bound, bound));
}

/// -(log_prob - old) on valid tokens, 0 elsewhere, for one row: the terms of verl's ppo_kl
/// (masked_mean(-negative_approx_kl) without the ±20 clamp).
inline void negative_log_ratio_terms(const float* __restrict log_prob, const float* __restrict old_log_prob,
                                     const float* __restrict mask, float* __restrict terms, Index cols) {
  for (Index j = 0; j < cols; ++j) terms[j] = select(mask[j] != 0.0f, -(log_prob[j] - old_log_prob[j]) * mask[j], 0.0f);
}

/// select(valid, value, 0) rows of advantages and log-probs, for the means over valid tokens.
inline void valid_values(const float* __restrict advantages, const float* __restrict log_prob,
                         const float* __restrict mask, float* __restrict valid_advantages,
                         float* __restrict valid_log_prob, Index cols) {
  for (Index j = 0; j < cols; ++j) {
    const bool valid = mask[j] > 0.0f;
    valid_advantages[j] = select(valid, advantages[j], 0.0f);
    valid_log_prob[j] = select(valid, log_prob[j], 0.0f);
  }
}

// ---- PPO pieces --------------------------------------------------------------------------------------

/// PPO's clip range on the ratio. verl computes 1 - clip_ratio_low in Python (double) and
/// torch rounds the bound to float32; branch decisions depend on that rounding.
struct RatioClipRange {
  float low;
  float high;
  static RatioClipRange from_clip_ratios(double clip_ratio_low, double clip_ratio_high) {
    return {static_cast<float>(1.0 - clip_ratio_low), static_cast<float>(1.0 + clip_ratio_high)};
  }
};

/// max(-A * r, -A * clamp(r, low, high)) and its derivative with respect to r, with torch's
/// conventions: clamp passes the gradient at its bounds, maximum splits it at a tie.
struct ClippedSurrogate {
  float unclipped;    ///< pg_losses1 = -A * r
  float clipped;      ///< pg_losses2 = -A * clamp(r, low, high)
  float loss;         ///< max of the two
  float ratio_share;  ///< d loss / d r = -A * ratio_share

  bool clip_active() const { return clipped > unclipped; }  ///< verl's pg_clipfrac indicator
};

VERL_FORCE_INLINE ClippedSurrogate clipped_surrogate(float neg_advantage, float ratio, RatioClipRange range) {
  ClippedSurrogate s;
  s.unclipped = neg_advantage * ratio;
  s.clipped = neg_advantage * clamp_value(ratio, range.low, range.high);
  s.loss = maximum_value(s.unclipped, s.clipped);
  s.ratio_share = maximum_share(s.unclipped, s.clipped) +
                  maximum_share(s.clipped, s.unclipped) * clamp_passes(ratio, range.low, range.high);
  return s;
}

/// Running masked sums for one metric outside the token kernels (numerator in double).
struct MaskedMean {
  double sum = 0;
  void add(float value, float mask) {
    if (mask != 0.0f) sum += static_cast<double>(value) * static_cast<double>(mask);
  }
  float mean(double count) const { return masked_mean_of(sum, count); }
};

/// The sums, in double row by row, of the advantages and of the log-probs over the valid tokens:
/// what centres clip_cov's and kl_cov's covariance. Uses scratch's loss and metric rows.
struct ValidSums {
  double advantages = 0;
  double log_probs = 0;
};
inline ValidSums valid_advantage_and_log_prob_sums(const PolicyLossBatch& batch, RowScratch& scratch) {
  ValidSums sums;
  const Index cols = batch.log_prob.cols();
  for (Index i = 0; i < batch.log_prob.rows(); ++i) {
    valid_values(row_of(batch.advantages, i), row_of(batch.log_prob, i), row_of(batch.response_mask, i),
                 scratch.loss_terms.data(), scratch.metric_terms.data(), cols);
    sums.advantages += sum_row_terms(scratch.loss_terms.data(), cols);
    sums.log_probs += sum_row_terms(scratch.metric_terms.data(), cols);
  }
  return sums;
}

/// One fused pass of a policy loss over its batch: the batch checked and counted, the aggregation
/// in `mode`, the result with its (B, T) gradient, per-row scratch, and the running sums of the
/// metrics. A loss fills scratch.loss_terms (and metric_terms) for each row, adds the row, and
/// finishes with verl's metrics.
struct LossPass {
  const PolicyLossBatch& batch;
  const MaskCounts counts;
  FusedAggregation reduction;
  const Index rows, cols;
  PolicyLossResult result;
  RowScratch scratch;
  double kl_sum = 0;         ///< ppo_kl terms of the rows added so far
  std::int64_t clipped = 0;  ///< clipped tokens so far

  LossPass(const PolicyLossBatch& batch_in, LossAggMode mode, const GlobalBatchInfo& info)
      : batch(batch_in),
        counts(validate_policy_loss_batch(batch_in)),
        reduction(counts, mode, info),
        rows(batch_in.log_prob.rows()),
        cols(batch_in.log_prob.cols()),
        result{0.0f, MatrixF(rows, cols), {}},
        scratch(cols) {}
  LossPass(const LossPass&) = delete;  // the aggregation points at `counts`
  LossPass& operator=(const LossPass&) = delete;

  /// Row i's rollout importance weights (ones without them).
  [[nodiscard]] const float* is_weights(Index i) const {
    return batch.rollout_is_weights ? row_of(*batch.rollout_is_weights, i) : scratch.ones.data();
  }
  [[nodiscard]] float* grad_row(Index i) { return row_of(result.grad_log_prob, i); }

  /// Adds row i's loss terms (scratch.loss_terms).
  void add_loss_terms(Index i) { reduction.add_row(i, sum_row_terms(scratch.loss_terms.data(), cols)); }
  /// Adds row i's loss terms and its ppo_kl terms (scratch.metric_terms).
  void add_loss_and_kl_terms(Index i) {
    add_loss_terms(i);
    kl_sum += sum_row_terms(scratch.metric_terms.data(), cols);
  }

  /// The aggregated loss, without metrics.
  PolicyLossResult finish() {
    result.pg_loss = reduction.loss();
    return std::move(result);
  }
  /// The loss with actor/ppo_kl.
  PolicyLossResult finish_with_kl() {
    result.metrics["actor/ppo_kl"] = masked_mean_of(kl_sum, static_cast<double>(counts.tokens));
    return finish();
  }
  /// The loss with the metrics of a loss clipped on one side: actor/pg_clipfrac (of `clipped`),
  /// actor/ppo_kl, and actor/pg_clipfrac_lower = 0.
  PolicyLossResult finish_with_clip_metrics() {
    result.metrics["actor/pg_clipfrac"] = masked_mean_of(static_cast<double>(clipped), static_cast<double>(counts.tokens));
    result.metrics["actor/pg_clipfrac_lower"] = 0.0;
    return finish_with_kl();
  }
};

}  // namespace verl::algo::detail
