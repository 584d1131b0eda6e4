// verl's "clip_cov" policy loss (Clip-Cov, from "The Entropy Mechanism of Reinforcement Learning
// for Reasoning Language Models"): PPO's clipped surrogate, with the loss of a random few
// high-covariance tokens zeroed.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string_view>
#include <utility>
#include <vector>

#include "verl/algo/policy_losses/config.hpp"
#include "verl/algo/policy_losses/policy_loss.hpp"
#include "verl/algo/policy_losses/common.hpp"

namespace verl::algo {

namespace detail {

/// Uniform integer in [0, n) from a 64-bit Mersenne Twister by rejection (no modulo bias). Unlike
/// std::uniform_int_distribution its output is specified, so a seed selects the same tokens with
/// every standard library.
inline std::uint64_t uniform_below(std::mt19937_64& engine, std::uint64_t n) {
  const std::uint64_t max = std::numeric_limits<std::uint64_t>::max();
  const std::uint64_t limit = max - max % n;  // accept [0, limit): a whole number of copies of [0, n)
  std::uint64_t draw = engine();
  while (draw >= limit) draw = engine();
  return draw % n;
}

/// Moves `count` uniformly chosen elements of `items` to its front (a partial Fisher-Yates
/// shuffle), like taking the first `count` entries of a random permutation.
template <class T>
void choose_front(std::vector<T>& items, std::size_t count, std::uint64_t seed) {
  std::mt19937_64 engine(seed);
  for (std::size_t k = 0; k < count && k + 1 < items.size(); ++k) {
    const auto pick = k + static_cast<std::size_t>(uniform_below(engine, items.size() - k));
    std::swap(items[k], items[pick]);
  }
}

/// One row of Clip-Cov as if no token were zeroed: loss terms, -log-ratio terms (ppo_kl), gradient,
/// and a 0/1 flag for the tokens that may be zeroed (valid, unclipped, lb < cov < ub).
inline void clip_cov_row(const float* __restrict log_prob, const float* __restrict old_log_prob,
                         const float* __restrict advantages, const float* __restrict mask,
                         const float* __restrict weights, const float* __restrict ratio,
                         float* __restrict loss_terms, float* __restrict kl_terms, float* __restrict candidate,
                         float* __restrict grad, Index cols, RatioClipRange range, float advantage_mean,
                         float log_prob_mean, float cov_lower, float cov_upper, float row_weight, bool select_valid) {
  for (Index j = 0; j < cols; ++j) {
    const float m = mask[j], r = ratio[j], neg_advantage = -advantages[j];
    const bool valid = m != 0.0f;
    const ClippedSurrogate surrogate = clipped_surrogate(neg_advantage, r, range);
    loss_terms[j] = row_sum_term(surrogate.loss * weights[j], m, select_valid);
    kl_terms[j] = select(valid, -(log_prob[j] - old_log_prob[j]) * m, 0.0f);
    const float cov = (advantages[j] - advantage_mean) * (log_prob[j] - log_prob_mean);
    candidate[j] = indicator((m > 0.0f) & !surrogate.clip_active() & (cov < cov_upper) & (cov > cov_lower));
    const float upstream = select(valid, row_weight, 0.0f) * weights[j];
    grad[j] = upstream * surrogate.ratio_share * neg_advantage * r;
  }
}

}  // namespace detail

/// PPO's max(-A r, -A clamp(r)) with r = exp(log_prob - old) (no ±20 clamp, no dual clip). Among
/// valid, unclipped tokens with clip_cov_lb < cov < clip_cov_ub, where
/// cov = (A - masked_mean(A)) * (log_prob - masked_mean(log_prob)), max(int(clip_cov_ratio *
/// N_valid), 1) are chosen at random and their loss (and gradient) is zeroed. cov only selects
/// tokens; it carries no gradient. verl draws with torch.randperm; we draw with a seeded
/// std::mt19937_64 (`seed`), so the choice is deterministic for given inputs but is not torch's.
/// Metrics: actor/pg_clipfrac (fraction zeroed), actor/ppo_kl.
struct ClipCov {
  static constexpr std::string_view name = "clip_cov";
  static constexpr AggregationRule aggregation = AggregationRule::follows_config();
  /// This loss with verl's knobs from `config` (a null policy_loss.* value takes verl's default).
  static ClipCov from_config(const PolicyLossConfig& config) {
    const PolicyLossOptions& options = config.policy_loss;
    return {.clip_ratio_low = config.resolved_clip_ratio_low(),
            .clip_ratio_high = config.resolved_clip_ratio_high(),
            .clip_cov_ratio = options.clip_cov_ratio.value_or(0.0002),
            .clip_cov_lb = options.clip_cov_lb.value_or(1.0),
            .clip_cov_ub = options.clip_cov_ub.value_or(5.0),
            .seed = config.clip_cov_seed};
  }

  double clip_ratio_low = 0.2;
  double clip_ratio_high = 0.2;
  double clip_cov_ratio = 0.0002;
  double clip_cov_lb = 1.0;
  double clip_cov_ub = 5.0;
  std::uint64_t seed = 0;

  PolicyLossResult compute(const PolicyLossBatch& batch, const AggregationContext& context) const {
    using namespace detail;
    // verl's int(clip_cov_ratio * N) raises for an infinite ratio; NaN fails the comparison.
    VERL_CHECK_ARG(clip_cov_ratio > 0 && std::isfinite(clip_cov_ratio),
                   "clip_cov_ratio: expected a finite value > 0, got {}", clip_cov_ratio);
    const MaskCounts counts = validate_policy_loss_batch(batch);
    FusedAggregation reduction(counts, context.loss_agg_mode, context.global_batch_info);
    const auto range = RatioClipRange::from_clip_ratios(clip_ratio_low, clip_ratio_high);
    const auto lower = static_cast<float>(clip_cov_lb), upper = static_cast<float>(clip_cov_ub);
    const Index rows = batch.log_prob.rows(), cols = batch.log_prob.cols();
    const double valid = static_cast<double>(counts.tokens);

    // Pass 1: the masked means that centre the covariance (detached in verl).
    RowScratch scratch(cols);
    const ValidSums sums = valid_advantage_and_log_prob_sums(batch, scratch);
    const float advantage_mean = masked_mean_of(sums.advantages, valid);
    const float log_prob_mean = masked_mean_of(sums.log_probs, valid);

    // Pass 2: the loss as if no token were zeroed, and the candidates for zeroing.
    PolicyLossResult result{0.0f, MatrixF(rows, cols), {}};
    std::vector<double> row_sums(static_cast<std::size_t>(rows), 0.0);
    std::vector<Index> candidates;
    double kl_sum = 0;
    for (Index i = 0; i < rows; ++i) {
      const float* lp = row_of(batch.log_prob, i);
      const float* old = row_of(batch.old_log_prob, i);
      const float* weights = batch.rollout_is_weights ? row_of(*batch.rollout_is_weights, i) : scratch.ones.data();
      row_ratio(lp, old, scratch.ratio.data(), cols, std::numeric_limits<float>::infinity());
      clip_cov_row(lp, old, row_of(batch.advantages, i), row_of(batch.response_mask, i), weights,
                   scratch.ratio.data(), scratch.loss_terms.data(), scratch.metric_terms.data(), scratch.second.data(),
                   row_of(result.grad_log_prob, i), cols, range, advantage_mean, log_prob_mean, lower, upper,
                   reduction.gradient_weight(i), reduction.selects_valid());
      row_sums[static_cast<std::size_t>(i)] = sum_row_terms(scratch.loss_terms.data(), cols);
      kl_sum += sum_row_terms(scratch.metric_terms.data(), cols);
      for (Index j = 0; j < cols; ++j)
        if (scratch.second[static_cast<std::size_t>(j)] != 0.0f) candidates.push_back(i * cols + j);
    }

    // Zero the chosen tokens: corr = 0 multiplies their loss and their gradient.
    // Capped at the valid count before the cast (a larger budget picks every candidate anyway),
    // so an absurd ratio cannot overflow the integer conversion.
    const auto budget = std::max<std::int64_t>(static_cast<std::int64_t>(std::min(clip_cov_ratio * valid, valid)), 1);
    const std::size_t chosen = std::min(candidates.size(), static_cast<std::size_t>(budget));
    if (chosen < candidates.size()) choose_front(candidates, chosen, seed);
    for (std::size_t k = 0; k < chosen; ++k) {
      const Index i = candidates[k] / cols, j = candidates[k] % cols;
      const float neg_advantage = -batch.advantages(i, j);
      const float ratio = std::exp(batch.log_prob(i, j) - batch.old_log_prob(i, j));
      const float weight = batch.rollout_is_weights ? (*batch.rollout_is_weights)(i, j) : 1.0f;
      const float loss = clipped_surrogate(neg_advantage, ratio, range).loss * weight;
      row_sums[static_cast<std::size_t>(i)] -= reduction.row_term(loss, batch.response_mask(i, j));
      result.grad_log_prob(i, j) = 0.0f;
    }
    for (Index i = 0; i < rows; ++i) reduction.add_row(i, row_sums[static_cast<std::size_t>(i)]);

    result.pg_loss = reduction.loss();
    result.metrics["actor/pg_clipfrac"] = masked_mean_of(static_cast<double>(chosen), valid);
    result.metrics["actor/ppo_kl"] = masked_mean_of(kl_sum, valid);
    return result;
  }
};

}  // namespace verl::algo
