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

#include "verl/algo/policy_loss.hpp"
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

  double clip_ratio_low = 0.2;
  double clip_ratio_high = 0.2;
  double clip_cov_ratio = 0.0002;
  double clip_cov_lb = 1.0;
  double clip_cov_ub = 5.0;
  std::uint64_t seed = 0;

  PolicyLossResult compute(const PolicyLossBatch& batch, const AggregationContext& context) const {
    using namespace detail;
    VERL_CHECK_ARG(clip_cov_ratio > 0, "clip_cov_ratio: expected a value > 0, got {}", clip_cov_ratio);
    const MaskCounts counts = validate_policy_loss_batch(batch);
    FusedAggregation aggregation(counts, context.loss_agg_mode, context.global_batch_info);
    const auto range = RatioClipRange::from_clip_ratios(clip_ratio_low, clip_ratio_high);
    const auto lower = static_cast<float>(clip_cov_lb), upper = static_cast<float>(clip_cov_ub);
    const Index rows = batch.log_prob.rows(), cols = batch.log_prob.cols();
    const double valid = static_cast<double>(counts.tokens);

    // Pass 1: the masked means that centre the covariance (detached in verl).
    MaskedMean advantage_sum, log_prob_sum;
    for (Index i = 0; i < rows; ++i) {
      const float* lp = row_of(batch.log_prob, i);
      const float* adv = row_of(batch.advantages, i);
      const float* mask = row_of(batch.response_mask, i);
      for (Index j = 0; j < cols; ++j) {
        advantage_sum.add(adv[j], mask[j]);
        log_prob_sum.add(lp[j], mask[j]);
      }
    }
    const float advantage_mean = advantage_sum.mean(valid), log_prob_mean = log_prob_sum.mean(valid);

    // Pass 2: the loss as if no token were zeroed, and the candidates for zeroing.
    PolicyLossResult result{0.0f, MatrixF(rows, cols), {}};
    std::vector<double> row_sums(static_cast<std::size_t>(rows), 0.0);
    std::vector<Index> candidates;
    MaskedMean kl;
    for (Index i = 0; i < rows; ++i) {
      const float* old = row_of(batch.old_log_prob, i);
      const float* lp = row_of(batch.log_prob, i);
      const float* adv = row_of(batch.advantages, i);
      const float* mask = row_of(batch.response_mask, i);
      const float* is_weight = batch.rollout_is_weights ? row_of(*batch.rollout_is_weights, i) : nullptr;
      float* grad = row_of(result.grad_log_prob, i);
      const float row_weight = aggregation.gradient_weight(i);
      double row_sum = 0;
      for (Index j = 0; j < cols; ++j) {
        const float m = mask[j];
        const float log_ratio = lp[j] - old[j];
        const float ratio = std::exp(log_ratio);
        const float neg_advantage = -adv[j];
        const ClippedSurrogate surrogate = clipped_surrogate(neg_advantage, ratio, range);
        const float weight = is_weight ? is_weight[j] : 1.0f;
        row_sum += aggregation.row_term(surrogate.loss * weight, m);
        kl.add(-log_ratio, m);
        const float upstream = (m != 0.0f ? row_weight : 0.0f) * weight;
        grad[j] = upstream * surrogate.ratio_share * neg_advantage * ratio;
        if (m > 0.0f && !surrogate.clip_active()) {
          const float cov = (adv[j] - advantage_mean) * (lp[j] - log_prob_mean);
          if (cov < upper && cov > lower) candidates.push_back(i * cols + j);
        }
      }
      row_sums[static_cast<std::size_t>(i)] = row_sum;
    }

    // Zero the chosen tokens: corr = 0 multiplies their loss and their gradient.
    const auto budget = std::max<std::int64_t>(static_cast<std::int64_t>(clip_cov_ratio * valid), 1);
    const std::size_t chosen = std::min(candidates.size(), static_cast<std::size_t>(budget));
    if (chosen < candidates.size()) choose_front(candidates, chosen, seed);
    for (std::size_t k = 0; k < chosen; ++k) {
      const Index i = candidates[k] / cols, j = candidates[k] % cols;
      const float neg_advantage = -batch.advantages(i, j);
      const float ratio = std::exp(batch.log_prob(i, j) - batch.old_log_prob(i, j));
      const float weight = batch.rollout_is_weights ? (*batch.rollout_is_weights)(i, j) : 1.0f;
      const float loss = clipped_surrogate(neg_advantage, ratio, range).loss * weight;
      row_sums[static_cast<std::size_t>(i)] -= aggregation.row_term(loss, batch.response_mask(i, j));
      result.grad_log_prob(i, j) = 0.0f;
    }
    for (Index i = 0; i < rows; ++i) aggregation.add_row(i, row_sums[static_cast<std::size_t>(i)]);

    result.pg_loss = aggregation.loss();
    result.metrics["actor/pg_clipfrac"] = masked_mean_of(static_cast<double>(chosen), valid);
    result.metrics["actor/ppo_kl"] = kl.mean(valid);
    return result;
  }
};

}  // namespace verl::algo
