// Policy losses (verl's POLICY_LOSS_REGISTRY): the batch a loss reads, the result it returns, how
// it aggregates its per-token losses, and the PolicyLoss concept every loss type satisfies.
//
// A policy loss turns (old_log_prob, log_prob, advantages, response_mask[, rollout_is_weights])
// into pg_loss (float32, as verl returns it), verl's metrics under verl's key names, and
// d pg_loss / d log_prob exactly as torch autograd computes it through verl's code (detached
// terms stay detached; ties at kinks follow torch's conventions).
#pragma once

#include <concepts>
#include <optional>
#include <string_view>

#include "verl/algo/detail/rows.hpp"
#include "verl/algo/loss_aggregation.hpp"
#include "verl/config.hpp"
#include "verl/core/error.hpp"
#include "verl/core/metrics.hpp"
#include "verl/core/tensor.hpp"

namespace verl::algo {

/// Views of one micro-batch, all (B, T) row-major float32 like verl's tensors. The views do not
/// own their data: the matrices they refer to must outlive the call.
struct PolicyLossBatch {
  ConstMatrixRefF old_log_prob;   ///< log-probs of the behaviour policy (the rollout policy for reinforce and bypass_mode)
  ConstMatrixRefF log_prob;       ///< log-probs of the current policy: the differentiated input
  ConstMatrixRefF advantages;
  ConstMatrixRefF response_mask;  ///< 0/1
  std::optional<ConstMatrixRefF> rollout_is_weights = std::nullopt;  ///< multiplies the per-token loss (constant)
};

/// What every policy loss returns.
struct PolicyLossResult {
  float pg_loss = 0;
  MatrixF grad_log_prob;  ///< d pg_loss / d log_prob, (B, T)
  Metrics metrics;        ///< verl's metric dict ("actor/pg_clipfrac", "rollout_corr/...", ...)
};

/// verl's agg_loss arguments for one call: the configured loss_agg_mode and
/// config.global_batch_info.
struct AggregationContext {
  LossAggMode loss_agg_mode = LossAggMode::token_mean;
  GlobalBatchInfo global_batch_info{};
};

/// How a loss reduces its per-token losses: with the configured mode (most losses), with a mode
/// it forces whatever is configured (gspo, sapo), or with its own reduction (geo_mean's mean of
/// per-sequence losses over all rows).
struct AggregationRule {
  enum class Kind : unsigned char { configured, forced, own_reduction };
  Kind kind = Kind::configured;
  LossAggMode forced_mode = LossAggMode::token_mean;

  static constexpr AggregationRule follows_config() { return {}; }
  static constexpr AggregationRule forces(LossAggMode mode) { return {Kind::forced, mode}; }
  static constexpr AggregationRule own_reduction() { return {Kind::own_reduction, LossAggMode::token_mean}; }

  /// The agg_loss mode really used when `configured` is asked for; nullopt for an own reduction.
  constexpr std::optional<LossAggMode> effective_mode(LossAggMode configured) const {
    switch (kind) {
      case Kind::configured: return configured;
      case Kind::forced: return forced_mode;
      case Kind::own_reduction: return std::nullopt;
    }
    return std::nullopt;
  }
  /// Whether asking for `requested` is honoured as asked (verl silently overrides it otherwise).
  constexpr bool honours(LossAggMode requested) const {
    return kind == Kind::configured || (kind == Kind::forced && forced_mode == requested);
  }
};

/// A policy loss is a small value type: its runtime knobs are members, `name` is verl's registry
/// name (loss_mode), `aggregation` says how it reduces, and `compute` runs it on a batch.
template <class L>
concept PolicyLoss = std::copy_constructible<L> &&
                     requires(const L& loss, const PolicyLossBatch& batch, const AggregationContext& aggregation) {
                       { L::name } -> std::convertible_to<std::string_view>;
                       { L::aggregation } -> std::convertible_to<AggregationRule>;
                       { loss.compute(batch, aggregation) } -> std::same_as<PolicyLossResult>;
                     };

/// Runs `loss` on `batch` with verl's agg_loss arguments (the loss may override the mode; see
/// its `aggregation`).
template <class Loss>
PolicyLossResult compute_policy_loss(const Loss& loss, const PolicyLossBatch& batch,
                                     const AggregationContext& aggregation = {}) {
  VERL_STATIC_ASSERT(PolicyLoss<Loss>, THE_LOSS_TYPE_DOES_NOT_SATISFY_THE_POLICY_LOSS_CONCEPT);
  if constexpr (PolicyLoss<Loss>) {
    return loss.compute(batch, aggregation);
  } else {
    return {};
  }
}

/// Compile-time aggregation: compute_policy_loss<SeqMeanTokenMean>(GSPO{...}, batch). A mode the
/// loss would silently override (gspo/sapo force seq-mean-token-mean, geo_mean reduces on its
/// own) is a compile error rather than a surprise.
template <LossAggregation Mode, class Loss>
PolicyLossResult compute_policy_loss(const Loss& loss, const PolicyLossBatch& batch,
                                     const GlobalBatchInfo& global_batch_info = {}) {
  VERL_STATIC_ASSERT(PolicyLoss<Loss>, THE_LOSS_TYPE_DOES_NOT_SATISFY_THE_POLICY_LOSS_CONCEPT);
  if constexpr (PolicyLoss<Loss>) {
    VERL_STATIC_ASSERT(AggregationRule(Loss::aggregation).honours(Mode::mode),
                       THE_POLICY_LOSS_OVERRIDES_THE_REQUESTED_AGGREGATION_MODE);
    return loss.compute(batch, AggregationContext{Mode::mode, global_batch_info});
  } else {
    return {};
  }
}

namespace detail {

/// Checks shapes (every input has log_prob's shape) and the 0/1 mask; returns the mask counts the
/// aggregation needs (one pass over the mask).
inline MaskCounts validate_policy_loss_batch(const PolicyLossBatch& batch) {
  const Shape2 shape = shape_of(batch.log_prob);
  verl::detail::require_same_shape("old_log_prob", shape_of(batch.old_log_prob), "log_prob", shape);
  verl::detail::require_same_shape("advantages", shape_of(batch.advantages), "log_prob", shape);
  verl::detail::require_same_shape("response_mask", shape_of(batch.response_mask), "log_prob", shape);
  if (batch.rollout_is_weights)
    verl::detail::require_same_shape("rollout_is_weights", shape_of(*batch.rollout_is_weights), "log_prob", shape);
  return count_mask("response_mask", batch.response_mask);
}

/// verl's agg_loss fused into a loss's own pass over the batch: the pass feeds each row's masked
/// sum in and reads W (d loss / d loss_mat) per row. Same arithmetic as agg_loss and
/// agg_loss_weights, so the three cannot disagree.
class FusedAggregation {
 public:
  FusedAggregation(const MaskCounts& counts, LossAggMode mode, const GlobalBatchInfo& info)
      : counts_(&counts),
        aggregation_(make_aggregation<float>(mode, counts, info)),
        select_valid_(selects_valid_tokens(mode)) {}

  /// W at a valid token of `row` (0 for rows the mode drops).
  float gradient_weight(Index row) const { return aggregation_.gradient_weight(counts_->row_lengths[row]); }
  /// A token's term in its row sum: where(mask, L, 0) under token-mean, L * m otherwise (where a
  /// non-finite L on padding gives NaN, as in verl).
  double row_term(float loss, float mask) const {
    const double product = static_cast<double>(loss) * static_cast<double>(mask);
    return select_valid_ ? (mask != 0.0f ? product : 0.0) : product;
  }
  void add_row(Index row, double row_sum) {
    const Index length = counts_->row_lengths[row];
    if (!aggregation_.drops(length)) total_ += row_sum * static_cast<double>(aggregation_.row_weight(length));
  }
  float loss() const { return static_cast<float>(total_ * static_cast<double>(aggregation_.scale)); }
  /// Whether the mode sums where(mask, L, 0) (token-mean) rather than L * m.
  bool selects_valid() const { return select_valid_; }

 private:
  const MaskCounts* counts_;
  Aggregation<float> aggregation_;
  bool select_valid_;
  double total_ = 0;
};

}  // namespace detail
}  // namespace verl::algo
