// verl's clipped value-function loss (compute_value_loss in core_algos.py, from TRL):
//   vclip = clip_by_value(vpreds, values - c, values + c) = max(min(vpreds, values + c), values - c)
//   vf_loss = 0.5 * agg_loss(max((vpreds - R)^2, (vclip - R)^2), mask, mode)
//   vf_clipfrac = masked_mean((vclip - R)^2 > (vpreds - R)^2, mask)
// with its gradient with respect to vpreds, computed in one fused pass.
#pragma once

#include <string_view>
#include <type_traits>
#include <vector>

#include "verl/cpu/huge_pages.hpp"
#include "verl/algo/detail/parallel_rows.hpp"
#include "verl/algo/loss_aggregation.hpp"
#include "verl/config.hpp"
#include "verl/core/error.hpp"
#include "verl/core/metrics.hpp"
#include "verl/core/tensor.hpp"

namespace verl::algo {

/// The loss, its metrics and d vf_loss / d vpreds.
template <class Scalar>
struct ValueLoss {
  Scalar vf_loss = 0;
  Scalar vf_clipfrac = 0;      ///< fraction of valid tokens where the clipped term is strictly larger
  RowMatrix<Scalar> grad_vpreds;
  Metrics metrics;             ///< critic/vf_loss, critic/vf_clipfrac, critic/vpred_mean (verl's critic keys)
};

namespace detail {

/// torch's gradient share for one argument of maximum(mine, other): 1 if it wins, half at a
/// tie, 0 if it loses. Arithmetic rather than a branch, so the token loop vectorizes.
template <class T>
VERL_FORCE_INLINE T winner_share(T mine, T other) {
  return static_cast<T>(mine > other) + T(0.5) * static_cast<T>(mine == other);
}

/// One token of the value loss: both squared errors and d max(unclipped, clipped) / d vpred,
/// following torch's autograd through min, max and the final max (so vpreds == values +- c
/// gives 0.75 of the unclipped gradient, as in verl).
template <class T>
struct ValueLossToken {
  T unclipped;  ///< (vpred - R)^2
  T clipped;    ///< (vclip - R)^2
  T derivative;

  T loss() const { return unclipped > clipped ? unclipped : clipped; }  // torch.max
  bool clip_wins() const { return clipped > unclipped; }                // torch.gt, for vf_clipfrac
};

template <class T>
VERL_FORCE_INLINE ValueLossToken<T> value_loss_token(T vpred, T ret, T value, T clip_range) {
  const T upper = value + clip_range;
  const T lower = value - clip_range;
  const T below_upper = vpred < upper ? vpred : upper;        // torch.min(vpreds, values + c)
  const T vclip = below_upper > lower ? below_upper : lower;  // torch.max(., values - c)
  const T unclipped_error = vpred - ret;
  const T clipped_error = vclip - ret;
  const T unclipped = unclipped_error * unclipped_error;
  const T clipped = clipped_error * clipped_error;
  // d vclip / d vpred through both halves of clip_by_value (min's share goes to vpred when it
  // is the smaller argument).
  const T d_vclip = winner_share(upper, vpred) * winner_share(below_upper, lower);
  const T derivative = winner_share(unclipped, clipped) * (T(2) * unclipped_error) +
                       winner_share(clipped, unclipped) * (T(2) * clipped_error) * d_vclip;
  return {unclipped, clipped, derivative};
}

/// The element-wise part of one row: loss terms (where(mask, L, 0) under token-mean, L * mask
/// under the seq-mean modes, so inf * 0 = NaN as in verl), the gradient (`token_weight` = 0.5 W
/// at valid tokens, exactly 0 elsewhere) and the number of valid tokens where the clipped term
/// won. No reductions in floating point, so the loop vectorizes.
template <bool kSelectValid, class T, class M>
Index value_loss_row(const T* vpred, const T* ret, const T* value, const M* mask, Index cols, T clip_range,
                     T token_weight, T* terms, T* grad) {
  Index clipped = 0;
  for (Index j = 0; j < cols; ++j) {
    const auto token = value_loss_token(vpred[j], ret[j], value[j], clip_range);
    const bool valid = mask[j] != M(0);
    terms[j] = kSelectValid ? keep_if(valid, token.loss()) : token.loss() * static_cast<T>(mask[j]);
    clipped += valid & token.clip_wins();
    grad[j] = keep_if(valid, token_weight * token.derivative);
  }
  return clipped;
}

}  // namespace detail

/// verl's compute_value_loss. `response_mask` is 0/1; `cliprange_value` is rounded to the
/// inputs' precision before it is added to `values`, as torch does. The optional GlobalBatchInfo
/// is passed to the aggregation (verl's critic uses the defaults).
template <class VD, class RD, class OD, class MD>
ValueLoss<typename VD::Scalar> compute_value_loss(const Eigen::MatrixBase<VD>& vpreds,
                                                  const Eigen::MatrixBase<RD>& returns,
                                                  const Eigen::MatrixBase<OD>& values,
                                                  const Eigen::MatrixBase<MD>& response_mask, double cliprange_value,
                                                  LossAggMode loss_agg_mode = LossAggMode::token_mean,
                                                  const GlobalBatchInfo& info = {}) {
  using Scalar = typename VD::Scalar;
  VERL_STATIC_ASSERT(std::is_floating_point_v<Scalar>, VALUE_LOSS_NEEDS_FLOATING_POINT_VALUES);
  VERL_STATIC_ASSERT((std::is_same_v<Scalar, typename RD::Scalar> && std::is_same_v<Scalar, typename OD::Scalar>),
                     VALUE_LOSS_INPUTS_MUST_SHARE_ONE_SCALAR_TYPE);
  const Shape2 shape = shape_of(vpreds);
  verl::detail::require_same_shape("returns", shape_of(returns), "vpreds", shape);
  verl::detail::require_same_shape("values", shape_of(values), "vpreds", shape);
  verl::detail::require_same_shape("response_mask", shape_of(response_mask), "vpreds", shape);

  const auto counts = detail::count_mask("response_mask", response_mask);
  const auto aggregation = detail::make_aggregation<Scalar>(loss_agg_mode, counts, info);
  const bool select_valid = detail::selects_valid_tokens(loss_agg_mode);
  const auto vp = detail::row_major_view(vpreds);
  const auto ret = detail::row_major_view(returns);
  const auto old = detail::row_major_view(values);
  const auto mask = detail::row_major_view(response_mask);
  using M = typename MD::Scalar;
  const Scalar clip_range = static_cast<Scalar>(cliprange_value);
  const Scalar half = Scalar(0.5);

  ValueLoss<Scalar> out;
  out.grad_vpreds.resize(shape.rows, shape.cols);
  cpu::advise_huge_pages(out.grad_vpreds.data(), static_cast<std::size_t>(out.grad_vpreds.size()) * sizeof(Scalar));
  // Rows split over threads; each row's partial results are kept and combined in row order
  // below, so the loss and metrics do not depend on the thread count.
  std::vector<double> row_sums(static_cast<std::size_t>(shape.rows));
  std::vector<double> row_vpred_sums(static_cast<std::size_t>(shape.rows));
  std::vector<Index> row_clipped(static_cast<std::size_t>(shape.rows));
  detail::parallel_rows(shape.rows, shape.cols, [&](Index begin, Index end) {
    // Per-row loss terms: filled by the element-wise loop (which vectorizes), then summed in double.
    std::vector<Scalar> row_terms(static_cast<std::size_t>(shape.cols));
    for (Index i = begin; i < end; ++i) {
      const Scalar* v = vp.data() + i * vp.outerStride();
      const Scalar* r = ret.data() + i * ret.outerStride();
      const Scalar* o = old.data() + i * old.outerStride();
      const M* m = mask.data() + i * mask.outerStride();
      Scalar* g = out.grad_vpreds.data() + i * shape.cols;
      Scalar* terms = row_terms.data();
      // 0.5 * W: the gradient reaching a valid token's loss term.
      const Scalar token_weight = half * aggregation.gradient_weight(counts.row_lengths[i]);
      const auto row = static_cast<std::size_t>(i);
      row_clipped[row] =
          select_valid ? detail::value_loss_row<true>(v, r, o, m, shape.cols, clip_range, token_weight, terms, g)
                       : detail::value_loss_row<false>(v, r, o, m, shape.cols, clip_range, token_weight, terms, g);
      row_sums[row] = detail::lane_sum(shape.cols, [&](Index j) { return terms[j]; });
      row_vpred_sums[row] =
          detail::lane_sum(shape.cols, [&](Index j) { return detail::keep_if(m[j] != M(0), v[j]); });
    }
  });
  double weighted_total = 0;  // sum_i row_weight_i * (masked row sum i)
  double vpred_total = 0;
  Index clipped_tokens = 0;
  for (Index i = 0; i < shape.rows; ++i) {
    const auto row = static_cast<std::size_t>(i);
    const Index length = counts.row_lengths[i];
    clipped_tokens += row_clipped[row];
    vpred_total += row_vpred_sums[row];
    if (!aggregation.drops(length)) weighted_total += row_sums[row] * static_cast<double>(aggregation.row_weight(length));
  }
  out.vf_loss = static_cast<Scalar>(0.5 * weighted_total * static_cast<double>(aggregation.scale));
  // verl_F.masked_mean: sum / (mask.sum() + 1e-8), in the inputs' precision.
  const Scalar token_count = static_cast<Scalar>(counts.tokens) + static_cast<Scalar>(1e-8);
  out.vf_clipfrac = static_cast<Scalar>(clipped_tokens) / token_count;
  out.metrics["critic/vf_loss"] = static_cast<double>(out.vf_loss);
  out.metrics["critic/vf_clipfrac"] = static_cast<double>(out.vf_clipfrac);
  out.metrics["critic/vpred_mean"] = static_cast<double>(static_cast<Scalar>(vpred_total) / token_count);
  return out;
}

/// Runtime mode by verl's name ("token-mean", ...).
template <class VD, class RD, class OD, class MD>
ValueLoss<typename VD::Scalar> compute_value_loss(const Eigen::MatrixBase<VD>& vpreds,
                                                  const Eigen::MatrixBase<RD>& returns,
                                                  const Eigen::MatrixBase<OD>& values,
                                                  const Eigen::MatrixBase<MD>& response_mask, double cliprange_value,
                                                  std::string_view loss_agg_mode, const GlobalBatchInfo& info = {}) {
  return compute_value_loss(vpreds, returns, values, response_mask, cliprange_value,
                            parse_loss_agg_mode(loss_agg_mode), info);
}

}  // namespace verl::algo
