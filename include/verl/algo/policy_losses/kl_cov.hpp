// verl's "kl_cov" policy loss (KL-Cov, from "The Entropy Mechanism of Reinforcement Learning for
// Reasoning Language Models"): the unclipped policy-gradient surrogate plus a |log-ratio| penalty
// on the tokens with the largest advantage/log-prob covariance.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <utility>
#include <string_view>
#include <vector>

#include "verl/algo/policy_losses/config.hpp"
#include "verl/algo/policy_losses/policy_loss.hpp"
#include "verl/algo/policy_losses/common.hpp"

namespace verl::algo {

namespace detail {

/// (A - mean(A)) * (log_prob - mean(log_prob)): the covariance kl_cov ranks tokens by.
VERL_FORCE_INLINE float covariance(float advantage, float log_prob, float advantage_mean, float log_prob_mean) {
  return (advantage - advantage_mean) * (log_prob - log_prob_mean);
}

/// The flat indices of the k largest keys, chosen as torch's CPU topk chooses them: it runs
/// std::partial_sort when k * 64 <= n and std::nth_element otherwise, over (value, position)
/// pairs in order with NaN ranked largest. Running the same algorithms reproduces its choice among
/// equal keys at the boundary (the set, not the order). Returned sorted by flat index.
inline std::vector<Index> torch_topk_indices(std::vector<std::pair<float, Index>>& keyed, std::size_t k) {
  const auto ranks_above = [](const std::pair<float, Index>& x, const std::pair<float, Index>& y) {
    return (std::isnan(x.first) && !std::isnan(y.first)) || x.first > y.first;
  };
  const auto end_of_top = keyed.begin() + static_cast<std::ptrdiff_t>(k);
  if (k * 64 <= keyed.size()) {
    std::partial_sort(keyed.begin(), end_of_top, keyed.end(), ranks_above);
  } else {
    std::nth_element(keyed.begin(), end_of_top - 1, keyed.end(), ranks_above);
  }
  std::vector<Index> chosen;
  chosen.reserve(k);
  for (auto it = keyed.begin(); it != end_of_top; ++it) chosen.push_back(it->second);
  std::sort(chosen.begin(), chosen.end());
  return chosen;
}

/// One row of KL-Cov: loss terms, |log-ratio| terms (ppo_kl) and gradient, from the ratios and
/// the 0/1 selection of penalised tokens.
inline void kl_cov_row(const float* __restrict log_prob, const float* __restrict old_log_prob,
                       const float* __restrict advantages, const float* __restrict mask,
                       const float* __restrict weights, const float* __restrict ratio,
                       const float* __restrict selected, float* __restrict loss_terms, float* __restrict kl_terms,
                       float* __restrict grad, Index cols, float coef, float row_weight, bool select_valid) {
  for (Index j = 0; j < cols; ++j) {
    const float m = mask[j], log_ratio = log_prob[j] - old_log_prob[j];
    const bool valid = m != 0.0f, penalised = selected[j] != 0.0f;
    const float surrogate = -advantages[j] * ratio[j];
    const float abs_log_ratio = std::abs(log_ratio);
    const float loss = select(penalised, surrogate + coef * abs_log_ratio, surrogate);
    loss_terms[j] = row_sum_term(loss * weights[j], m, select_valid);
    kl_terms[j] = select(valid, abs_log_ratio * m, 0.0f);
    const float upstream = select(valid, row_weight, 0.0f) * weights[j];
    // d|x|/dx = sign(x), 0 at 0; the surrogate's gradient goes through exp's r.
    grad[j] = upstream * -advantages[j] * ratio[j] + upstream * select(penalised, coef * sign_of(log_ratio), 0.0f);
  }
}

}  // namespace detail

/// loss = -A * r, plus ppo_kl_coef * |log_prob - old| on the top max(1, int(N_valid *
/// kl_cov_ratio)) valid tokens by cov = (A - mean(A)) * (log_prob - mean(log_prob)) (plain means
/// over the valid tokens), with r = exp(log_prob - old) unclamped. The selection is detached and
/// made as torch.topk makes it (also among equal covariances at the boundary). Gradient:
/// (-A * r + coef * sign(log_prob - old) * [selected]) * w * W. Metric: actor/ppo_kl =
/// masked_mean(|log_prob - old|).
struct KLCov {
  static constexpr std::string_view name = "kl_cov";
  static constexpr AggregationRule aggregation = AggregationRule::follows_config();
  /// This loss with verl's knobs from `config` (a null policy_loss.* value takes verl's default).
  static KLCov from_config(const PolicyLossConfig& config) {
    return {.kl_cov_ratio = config.policy_loss.kl_cov_ratio.value_or(0.0002),
            .ppo_kl_coef = config.policy_loss.ppo_kl_coef.value_or(1.0)};
  }

  double kl_cov_ratio = 0.0002;
  double ppo_kl_coef = 1.0;

  PolicyLossResult compute(const PolicyLossBatch& batch, const AggregationContext& context) const {
    using namespace detail;
    VERL_CHECK_ARG(kl_cov_ratio > 0, "kl_cov_ratio: expected a value > 0, got {}", kl_cov_ratio);
    const MaskCounts counts = validate_policy_loss_batch(batch);
    FusedAggregation reduction(counts, context.loss_agg_mode, context.global_batch_info);
    const float coef = static_cast<float>(ppo_kl_coef);
    const Index rows = batch.log_prob.rows(), cols = batch.log_prob.cols();
    const std::int64_t valid = counts.tokens;
    RowScratch scratch(cols);

    // The top-k selection over the valid tokens (skipped without any, as verl's k == 0 check).
    std::vector<Index> chosen;
    if (valid > 0) {
      const auto k = static_cast<std::size_t>(
          std::max<std::int64_t>(1, static_cast<std::int64_t>(static_cast<double>(valid) * kl_cov_ratio)));
      VERL_CHECK_ARG(k <= static_cast<std::size_t>(valid),
                     "kl_cov_ratio: selects {} tokens but the batch has only {} valid tokens (got ratio {})", k, valid,
                     kl_cov_ratio);
      const ValidSums sums = valid_advantage_and_log_prob_sums(batch, scratch);
      // torch's mean of a float32 vector: float32 sum / n.
      const float advantage_mean = static_cast<float>(sums.advantages) / static_cast<float>(valid);
      const float log_prob_mean = static_cast<float>(sums.log_probs) / static_cast<float>(valid);
      std::vector<std::pair<float, Index>> keyed;
      keyed.reserve(static_cast<std::size_t>(valid));
      for (Index i = 0; i < rows; ++i) {
        const float* lp = row_of(batch.log_prob, i);
        const float* adv = row_of(batch.advantages, i);
        const float* mask = row_of(batch.response_mask, i);
        for (Index j = 0; j < cols; ++j)
          if (mask[j] > 0.0f) keyed.emplace_back(covariance(adv[j], lp[j], advantage_mean, log_prob_mean), i * cols + j);
      }
      chosen = torch_topk_indices(keyed, k);
    }

    PolicyLossResult result{0.0f, MatrixF(rows, cols), {}};
    double kl_sum = 0;
    float* selected = scratch.second.data();
    auto next_chosen = chosen.begin();
    for (Index i = 0; i < rows; ++i) {
      const float* lp = row_of(batch.log_prob, i);
      const float* old = row_of(batch.old_log_prob, i);
      const float* adv = row_of(batch.advantages, i);
      const float* mask = row_of(batch.response_mask, i);
      const float* weights = batch.rollout_is_weights ? row_of(*batch.rollout_is_weights, i) : scratch.ones.data();
      std::fill(scratch.second.begin(), scratch.second.end(), 0.0f);
      for (; next_chosen != chosen.end() && *next_chosen < (i + 1) * cols; ++next_chosen)
        selected[*next_chosen - i * cols] = 1.0f;
      row_ratio(lp, old, scratch.ratio.data(), cols, std::numeric_limits<float>::infinity());
      kl_cov_row(lp, old, adv, mask, weights, scratch.ratio.data(), selected, scratch.loss_terms.data(),
                 scratch.metric_terms.data(), row_of(result.grad_log_prob, i), cols, coef,
                 reduction.gradient_weight(i), reduction.selects_valid());
      reduction.add_row(i, sum_row_terms(scratch.loss_terms.data(), cols));
      kl_sum += sum_row_terms(scratch.metric_terms.data(), cols);
    }
    result.pg_loss = reduction.loss();
    result.metrics["actor/ppo_kl"] = masked_mean_of(kl_sum, static_cast<double>(valid));
    return result;
  }
};

}  // namespace verl::algo
