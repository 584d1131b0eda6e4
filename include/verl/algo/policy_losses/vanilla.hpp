// verl's "vanilla" policy loss: PPO's clipped surrogate with an asymmetric clip range and the
// dual clip for negative advantages (compute_policy_loss_vanilla).
#pragma once

#include <cmath>
#include <cstdint>
#include <string_view>
#include <vector>

#include "verl/algo/detail/parallel_rows.hpp"
#include "verl/algo/detail/simd.hpp"

#include "verl/algo/policy_losses/config.hpp"
#include "verl/algo/policy_losses/policy_loss.hpp"
#include "verl/algo/policy_losses/common.hpp"

namespace verl::algo {

namespace detail {

/// The dual-clip PPO pass shared by vanilla, the deprecated compute_policy_loss and bypass_mode's
/// ppo_clip: loss, gradient and the three metrics, in one pass over the batch.
struct DualClipPPOOutput {
  float pg_loss = 0;
  MatrixF grad_log_prob;
  float pg_clipfrac = 0;
  float ppo_kl = 0;
  float pg_clipfrac_lower = 0;
};

struct DualClipCounts {
  std::int64_t clipped = 0;        ///< pg_losses2 > pg_losses1
  std::int64_t clipped_lower = 0;  ///< the dual clip is active (A < 0)
};

/// One row of the dual-clip PPO loss: loss terms (for the row sum), -log-ratio terms (ppo_kl) and
/// the gradient, from the row's ratios; returns the clip-indicator counts.
inline DualClipCounts dual_clip_ppo_row(const float* __restrict log_prob, const float* __restrict old_log_prob,
                                        const float* __restrict advantages, const float* __restrict mask,
                                        const float* __restrict weights, const float* __restrict ratio,
                                        float* __restrict loss_terms, float* __restrict kl_terms,
                                        float* __restrict grad, Index cols, RatioClipRange range, float dual_clip,
                                        float row_weight, bool select_valid) {
  std::int32_t clipped = 0, clipped_lower = 0;
  for (Index j = 0; j < cols; ++j) {
    const float m = mask[j], r = ratio[j], advantage = advantages[j], neg_advantage = -advantage;
    const float log_ratio = log_prob[j] - old_log_prob[j];
    const bool valid = m != 0.0f, negative = advantage < 0.0f;
    const ClippedSurrogate surrogate = clipped_surrogate(neg_advantage, r, range);
    const float dual = neg_advantage * dual_clip;  // pg_losses3
    // where(A < 0, min(pg3, clip_pg_losses1), clip_pg_losses1)
    const float loss = select(negative, minimum_value(dual, surrogate.loss), surrogate.loss);
    const float dual_share = select(negative, minimum_share(surrogate.loss, dual), 1.0f);
    loss_terms[j] = row_sum_term(loss * weights[j], m, select_valid);
    kl_terms[j] = select(valid, -clamp_value(log_ratio, -kLogRatioBound, kLogRatioBound) * m, 0.0f);
    clipped += valid & surrogate.clip_active();
    clipped_lower += valid & negative & (surrogate.loss > dual);
    // Autograd's chain, in its order: W * w, the where/min/max shares, * (-A), * r (exp), and the
    // ±20 clamp's mask.
    const float upstream = select(valid, row_weight, 0.0f) * weights[j];
    grad[j] = upstream * (surrogate.ratio_share * dual_share) * neg_advantage * r *
              clamp_passes(log_ratio, -kLogRatioBound, kLogRatioBound);
  }
  return {clipped, clipped_lower};
}

/// Per-row partial results of the dual-clip pass, combined in row order afterwards (so the
/// result does not depend on how rows were split over threads).
struct DualClipRowSums {
  double loss = 0;
  double kl = 0;
  DualClipCounts counts;
};

/// The scalar row: std::exp ratios into scratch, then dual_clip_ppo_row. Used without vector
/// extensions and for the tails of the vector rows.
inline DualClipRowSums dual_clip_ppo_row_scalar(const float* lp, const float* old, const float* advantages,
                                                const float* mask, const float* weights, float* grad, Index cols,
                                                RatioClipRange range, float dual_clip, float row_weight,
                                                bool select_valid, RowScratch& scratch) {
  row_ratio(lp, old, scratch.ratio.data(), cols, kLogRatioBound);
  DualClipRowSums sums;
  sums.counts = dual_clip_ppo_row(lp, old, advantages, mask, weights != nullptr ? weights : scratch.ones.data(),
                                  scratch.ratio.data(), scratch.loss_terms.data(), scratch.metric_terms.data(), grad,
                                  cols, range, dual_clip, row_weight, select_valid);
  sums.loss = sum_row_terms(scratch.loss_terms.data(), cols);
  sums.kl = sum_row_terms(scratch.metric_terms.data(), cols);
  return sums;
}

#if VERL_HAS_VECTOR_EXTENSIONS
/// dual_clip_ppo_row on W lanes at a time, with the ratios' exp computed in the same pass
/// (simd::exp_bounded). Lanes whose ratio lands within 8 ulp of a threshold its branches compare
/// against (1 - clip_low, 1 + clip_high, clip_ratio_c) are recomputed with std::exp, so every clip
/// decision is the one of the scalar kernel; elsewhere the ratio may differ from std::exp by an
/// ulp, far inside the loss tolerances. Element-wise arithmetic is the scalar kernel's, in its
/// order; the double row sums are accumulated per lane.
template <int W, bool kWeights>
VERL_FORCE_INLINE DualClipRowSums dual_clip_ppo_row_simd(const float* __restrict lp, const float* __restrict old,
                                                        const float* __restrict advantages,
                                                        const float* __restrict mask, const float* __restrict weights,
                                                        float* __restrict grad, Index cols, RatioClipRange range,
                                                        float dual_clip, float row_weight, bool select_valid,
                                                        RowScratch& scratch) {
  using F = simd::FloatPack<W>;
  using I = simd::IntPack<W>;
  using D = typename simd::HalfDoublePack<W>::Type;
  constexpr float kNear = 1.0f / (1 << 20);  // 8 ulp of a float near 1
  const F zero{}, one = F{} + 1.0f, half = F{} + 0.5f, lo = F{} + range.low, hi = F{} + range.high;
  const F bound = F{} + kLogRatioBound, neg_bound = F{} - kLogRatioBound, dual_factor = F{} + dual_clip;
  const I keep_all = I{} - static_cast<int>(!select_valid);  // all ones when every L * m counts
  D loss_low{}, loss_high{}, kl_low{}, kl_high{};
  I clipped{}, clipped_lower{};
  Index j = 0;
  for (; j + W <= cols; j += W) {
    const F l = simd::load<W>(lp + j), o = simd::load<W>(old + j), a = simd::load<W>(advantages + j);
    const F m = simd::load<W>(mask + j);
    const F log_ratio = l - o;
    F c = simd::pick<W>(log_ratio < neg_bound, neg_bound, log_ratio);  // clamp_value: NaN stays NaN
    c = simd::pick<W>(c > bound, bound, c);
    F r = simd::exp_bounded<W>(c);
    const I near_low = simd::near<W>(r, range.low, kNear), near_high = simd::near<W>(r, range.high, kNear);
    const I near_dual = simd::near<W>(r, dual_clip, kNear);
    if (simd::any<W>(simd::either<W>(simd::either<W>(near_low, near_high), near_dual))) [[unlikely]] {
      for (int k = 0; k < W; ++k) r[k] = std::exp(c[k]);
    }
    const F neg_a = -a;
    F clamped_r = simd::pick<W>(r < lo, lo, r);
    clamped_r = simd::pick<W>(clamped_r > hi, hi, clamped_r);
    const F unclipped = neg_a * r, clipped_loss = neg_a * clamped_r;
    // maximum_value(unclipped, clipped) and the shares of torch.maximum / torch.minimum.
    const I clipped_wins = unclipped < clipped_loss, clipped_nan = clipped_loss != clipped_loss;
    const F surrogate = simd::pick<W>(simd::either<W>(clipped_wins, clipped_nan), clipped_loss, unclipped);
    const F share_unclipped = simd::pick<W>(unclipped < clipped_loss, zero, simd::pick<W>(unclipped == clipped_loss, half, one));
    const F share_clipped = simd::pick<W>(clipped_loss < unclipped, zero, simd::pick<W>(clipped_loss == unclipped, half, one));
    const I above_low = r >= lo, below_high = r <= hi;
    const F passes = simd::keep<W>(simd::both<W>(above_low, below_high), one);
    const F ratio_share = share_unclipped + share_clipped * passes;
    const F dual = neg_a * dual_factor;
    const I negative = a < zero;
    const I surrogate_less = surrogate < dual, surrogate_nan = surrogate != surrogate;
    // minimum_value(dual, surrogate)
    const F dual_min = simd::pick<W>(simd::either<W>(surrogate_less, surrogate_nan), surrogate, dual);
    const F loss = simd::pick<W>(negative, dual_min, surrogate);
    const F dual_share = simd::pick<W>(negative, simd::pick<W>(surrogate > dual, zero, simd::pick<W>(surrogate == dual, half, one)), one);
    const I valid = m != zero;
    F weighted = loss;
    if constexpr (kWeights) weighted = loss * simd::load<W>(weights + j);
    const F loss_term = simd::keep<W>(simd::either<W>(valid, keep_all), weighted * m);
    const F kl_term = simd::keep<W>(valid, -c * m);
    simd::accumulate_double<W>(loss_term, loss_low, loss_high);
    simd::accumulate_double<W>(kl_term, kl_low, kl_high);
    const I clip_active = clipped_loss > unclipped, dual_active = surrogate > dual;
    clipped -= simd::both<W>(valid, clip_active);
    clipped_lower -= simd::both<W>(simd::both<W>(valid, negative), dual_active);
    F upstream = simd::keep<W>(valid, F{} + row_weight);
    if constexpr (kWeights) upstream = upstream * simd::load<W>(weights + j);
    const I above_neg_bound = log_ratio >= neg_bound, below_bound = log_ratio <= bound;
    const F clamp_pass = simd::keep<W>(simd::both<W>(above_neg_bound, below_bound), one);
    simd::store<W>(grad + j, upstream * (ratio_share * dual_share) * neg_a * r * clamp_pass);
  }
  DualClipRowSums sums;
  for (int k = 0; k < W / 2; ++k) {
    sums.loss += loss_low[k] + loss_high[k];
    sums.kl += kl_low[k] + kl_high[k];
  }
  for (int k = 0; k < W; ++k) {
    sums.counts.clipped += clipped[k];
    sums.counts.clipped_lower += clipped_lower[k];
  }
  if (j < cols) {
    const DualClipRowSums tail =
        dual_clip_ppo_row_scalar(lp + j, old + j, advantages + j, mask + j, kWeights ? weights + j : nullptr, grad + j,
                                 cols - j, range, dual_clip, row_weight, select_valid, scratch);
    sums.loss += tail.loss;
    sums.kl += tail.kl;
    sums.counts.clipped += tail.counts.clipped;
    sums.counts.clipped_lower += tail.counts.clipped_lower;
  }
  return sums;
}
#endif

/// What one block of rows needs: the batch, the aggregation's per-row gradient weights and the
/// clip constants.
struct DualClipJob {
  const PolicyLossBatch* batch;
  const FusedAggregation* reduction;
  RatioClipRange range;
  float dual_clip;
  MatrixF* grad;
  DualClipRowSums* rows;  ///< one per row
};

template <int W, bool kWeights>
VERL_FORCE_INLINE void dual_clip_ppo_rows(const DualClipJob& job, Index begin, Index end) {
  const PolicyLossBatch& b = *job.batch;
  const Index cols = b.log_prob.cols();
  RowScratch scratch(W > 1 ? Index{W} : cols);
  for (Index i = begin; i < end; ++i) {
    const float* weights = kWeights ? row_of(*b.rollout_is_weights, i) : nullptr;
    const float* lp = row_of(b.log_prob, i);
    const float* old = row_of(b.old_log_prob, i);
    const float* adv = row_of(b.advantages, i);
    const float* mask = row_of(b.response_mask, i);
    float* grad = row_of(*job.grad, i);
    const float row_weight = job.reduction->gradient_weight(i);
    const bool select_valid = job.reduction->selects_valid();
#if VERL_HAS_VECTOR_EXTENSIONS
    if constexpr (W > 1) {
      job.rows[i] = dual_clip_ppo_row_simd<W, kWeights>(lp, old, adv, mask, weights, grad, cols, job.range,
                                                        job.dual_clip, row_weight, select_valid, scratch);
      continue;
    }
#endif
    job.rows[i] = dual_clip_ppo_row_scalar(lp, old, adv, mask, weights, grad, cols, job.range, job.dual_clip,
                                           row_weight, select_valid, scratch);
  }
}

template <bool kWeights>
void dual_clip_ppo_rows_scalar(const DualClipJob& job, Index begin, Index end) {
  dual_clip_ppo_rows<1, kWeights>(job, begin, end);
}
#if VERL_HAS_VECTOR_EXTENSIONS
template <bool kWeights>
void dual_clip_ppo_rows_baseline(const DualClipJob& job, Index begin, Index end) {
  dual_clip_ppo_rows<simd::baseline_width, kWeights>(job, begin, end);
}
#endif
#if VERL_HAS_X86_DISPATCH
template <bool kWeights>
VERL_TARGET_AVX2 void dual_clip_ppo_rows_avx2(const DualClipJob& job, Index begin, Index end) {
  dual_clip_ppo_rows<8, kWeights>(job, begin, end);
}
template <bool kWeights>
VERL_TARGET_AVX512 void dual_clip_ppo_rows_avx512(const DualClipJob& job, Index begin, Index end) {
  dual_clip_ppo_rows<16, kWeights>(job, begin, end);
}
#endif

inline DualClipPPOOutput dual_clip_ppo(const PolicyLossBatch& batch, const AggregationContext& context,
                                       double clip_ratio_low, double clip_ratio_high, double clip_ratio_c) {
  VERL_CHECK_ARG(clip_ratio_c > 1.0,
                 "clip_ratio_c: expected a value > 1.0 (the dual-clip lower bound of the ratio), got {}",
                 clip_ratio_c);
  const MaskCounts counts = validate_policy_loss_batch(batch);
  FusedAggregation reduction(counts, context.loss_agg_mode, context.global_batch_info);
  const Index rows = batch.log_prob.rows(), cols = batch.log_prob.cols();

  DualClipPPOOutput out;
  out.grad_log_prob.resize(rows, cols);
  std::vector<DualClipRowSums> row_sums(static_cast<std::size_t>(rows));
  const DualClipJob job{&batch,
                        &reduction,
                        RatioClipRange::from_clip_ratios(clip_ratio_low, clip_ratio_high),
                        static_cast<float>(clip_ratio_c),
                        &out.grad_log_prob,
                        row_sums.data()};
  const bool weighted = batch.rollout_is_weights.has_value();
  using Kernel = void (*)(const DualClipJob&, Index, Index);
  Kernel kernel = weighted ? &dual_clip_ppo_rows_scalar<true> : &dual_clip_ppo_rows_scalar<false>;
#if VERL_HAS_VECTOR_EXTENSIONS
  kernel = weighted ? &dual_clip_ppo_rows_baseline<true> : &dual_clip_ppo_rows_baseline<false>;
#endif
#if VERL_HAS_X86_DISPATCH
  const SimdLevel level = simd::best_level();
  if (level == SimdLevel::avx2) kernel = weighted ? &dual_clip_ppo_rows_avx2<true> : &dual_clip_ppo_rows_avx2<false>;
  if (level == SimdLevel::avx512)
    kernel = weighted ? &dual_clip_ppo_rows_avx512<true> : &dual_clip_ppo_rows_avx512<false>;
#endif
  parallel_rows(rows, cols, [&](Index b, Index e) { kernel(job, b, e); });

  double kl_sum = 0;
  DualClipCounts total;
  for (Index i = 0; i < rows; ++i) {
    const DualClipRowSums& row = row_sums[static_cast<std::size_t>(i)];
    reduction.add_row(i, row.loss);
    kl_sum += row.kl;
    total.clipped += row.counts.clipped;
    total.clipped_lower += row.counts.clipped_lower;
  }
  const double valid = static_cast<double>(counts.tokens);
  out.pg_loss = reduction.loss();
  out.pg_clipfrac = masked_mean_of(static_cast<double>(total.clipped), valid);
  out.ppo_kl = masked_mean_of(kl_sum, valid);
  out.pg_clipfrac_lower = masked_mean_of(static_cast<double>(total.clipped_lower), valid);
  return out;
}

}  // namespace detail

/// PPO clipped surrogate with asymmetric clip [1 - clip_ratio_low, 1 + clip_ratio_high] and the
/// dual clip: for A < 0 the loss is capped at -A * clip_ratio_c. The log-ratio is clamped to
/// ±20 before exp. Metrics: actor/pg_clipfrac, actor/ppo_kl, actor/pg_clipfrac_lower.
struct VanillaPPO {
  static constexpr std::string_view name = "vanilla";
  static constexpr AggregationRule aggregation = AggregationRule::follows_config();
  static VanillaPPO from_config(const PolicyLossConfig& config) { return {.clip_ratio_low = config.resolved_clip_ratio_low(), .clip_ratio_high = config.resolved_clip_ratio_high(), .clip_ratio_c = config.clip_ratio_c}; }

  double clip_ratio_low = 0.2;
  double clip_ratio_high = 0.2;
  double clip_ratio_c = 3.0;  ///< must be > 1

  PolicyLossResult compute(const PolicyLossBatch& batch, const AggregationContext& context) const {
    auto out = detail::dual_clip_ppo(batch, context, clip_ratio_low, clip_ratio_high, clip_ratio_c);
    PolicyLossResult result{out.pg_loss, std::move(out.grad_log_prob), {}};
    result.metrics["actor/pg_clipfrac"] = out.pg_clipfrac;
    result.metrics["actor/ppo_kl"] = out.ppo_kl;
    result.metrics["actor/pg_clipfrac_lower"] = out.pg_clipfrac_lower;
    return result;
  }
};

}  // namespace verl::algo
