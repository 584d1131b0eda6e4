// verl's "kl_cov" policy loss (KL-Cov, from "The Entropy Mechanism of Reinforcement Learning for
// Reasoning Language Models"): the unclipped policy-gradient surrogate plus a |log-ratio| penalty
// on the tokens with the largest advantage/log-prob covariance.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string_view>
#include <vector>

#include "verl/algo/policy_loss.hpp"
#include "verl/algo/policy_losses/common.hpp"

namespace verl::algo {

namespace detail {

/// Which of the valid tokens torch.topk(cov, k) picks, as a threshold: every token with
/// cov > value, then the first `ties_taken` tokens (in row-major order) with cov == value.
/// NaN ranks above everything, as in torch.topk.
struct TopKThreshold {
  float value = std::numeric_limits<float>::infinity();
  std::int64_t ties_taken = 0;
};

inline float topk_key(float x) { return std::isnan(x) ? std::numeric_limits<float>::infinity() : x; }

inline TopKThreshold topk_threshold(std::vector<float> keys, std::size_t k) {
  TopKThreshold t;
  if (k == 0 || keys.empty()) return t;
  const auto kth = keys.begin() + static_cast<std::ptrdiff_t>(k - 1);
  std::nth_element(keys.begin(), kth, keys.end(), std::greater<float>());
  t.value = *kth;
  const auto above = std::count_if(keys.begin(), keys.end(), [&](float x) { return x > t.value; });
  t.ties_taken = static_cast<std::int64_t>(k) - above;
  return t;
}

}  // namespace detail

/// loss = -A * r, plus ppo_kl_coef * |log_prob - old| on the top max(1, int(N_valid *
/// kl_cov_ratio)) valid tokens by cov = (A - mean(A)) * (log_prob - mean(log_prob)) (plain means
/// over the valid tokens), with r = exp(log_prob - old) unclamped. The selection is detached;
/// among equal covariances the earlier token (row-major) wins. Gradient:
/// (-A * r + coef * sign(log_prob - old) * [selected]) * w * W. Metric: actor/ppo_kl =
/// masked_mean(|log_prob - old|).
struct KLCov {
  static constexpr std::string_view name = "kl_cov";
  static constexpr AggregationRule aggregation = AggregationRule::follows_config();

  double kl_cov_ratio = 0.0002;
  double ppo_kl_coef = 1.0;

  PolicyLossResult compute(const PolicyLossBatch& batch, const AggregationContext& context) const {
    using namespace detail;
    VERL_CHECK_ARG(kl_cov_ratio > 0, "kl_cov_ratio: expected a value > 0, got {}", kl_cov_ratio);
    const MaskCounts counts = validate_policy_loss_batch(batch);
    FusedAggregation aggregation(counts, context.loss_agg_mode, context.global_batch_info);
    const float coef = static_cast<float>(ppo_kl_coef);
    const Index rows = batch.log_prob.rows(), cols = batch.log_prob.cols();
    const std::int64_t valid = counts.tokens;

    // The top-k selection over the valid tokens (skipped without any, as verl's k == 0 check).
    std::size_t k = 0;
    float advantage_mean = 0, log_prob_mean = 0;
    TopKThreshold threshold;
    if (valid > 0) {
      k = static_cast<std::size_t>(
          std::max<std::int64_t>(1, static_cast<std::int64_t>(static_cast<double>(valid) * kl_cov_ratio)));
      VERL_CHECK_ARG(k <= static_cast<std::size_t>(valid),
                     "kl_cov_ratio: selects {} tokens but the batch has only {} valid tokens (got ratio {})", k, valid,
                     kl_cov_ratio);
      double advantage_sum = 0, log_prob_sum = 0;
      for (Index i = 0; i < rows; ++i) {
        const float* lp = row_of(batch.log_prob, i);
        const float* adv = row_of(batch.advantages, i);
        const float* mask = row_of(batch.response_mask, i);
        for (Index j = 0; j < cols; ++j)
          if (mask[j] > 0.0f) {
            advantage_sum += adv[j];
            log_prob_sum += lp[j];
          }
      }
      // torch's mean of a float32 vector: float32 sum / n.
      advantage_mean = static_cast<float>(advantage_sum) / static_cast<float>(valid);
      log_prob_mean = static_cast<float>(log_prob_sum) / static_cast<float>(valid);
      std::vector<float> keys;
      keys.reserve(static_cast<std::size_t>(valid));
      for (Index i = 0; i < rows; ++i) {
        const float* lp = row_of(batch.log_prob, i);
        const float* adv = row_of(batch.advantages, i);
        const float* mask = row_of(batch.response_mask, i);
        for (Index j = 0; j < cols; ++j)
          if (mask[j] > 0.0f) keys.push_back(topk_key((adv[j] - advantage_mean) * (lp[j] - log_prob_mean)));
      }
      threshold = topk_threshold(std::move(keys), k);
    }

    PolicyLossResult result{0.0f, MatrixF(rows, cols), {}};
    MaskedMean abs_kl;
    std::int64_t ties_left = threshold.ties_taken;
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
        bool selected = false;
        if (k > 0 && m > 0.0f) {
          const float key = topk_key((adv[j] - advantage_mean) * (lp[j] - log_prob_mean));
          selected = key > threshold.value || (key == threshold.value && ties_left > 0);
          if (key == threshold.value && selected) --ties_left;
        }
        const float surrogate = neg_advantage * ratio;
        const float loss = selected ? surrogate + coef * std::abs(log_ratio) : surrogate;
        const float weight = is_weight ? is_weight[j] : 1.0f;
        row_sum += aggregation.row_term(loss * weight, m);
        abs_kl.add(std::abs(log_ratio), m);
        const float upstream = (m != 0.0f ? row_weight : 0.0f) * weight;
        const float penalty_slope = selected ? coef * sign_of(log_ratio) : 0.0f;  // d|x|/dx = sign(x), 0 at 0
        grad[j] = upstream * neg_advantage * ratio + upstream * penalty_slope;
      }
      aggregation.add_row(i, row_sum);
    }
    result.pg_loss = aggregation.loss();
    result.metrics["actor/ppo_kl"] = abs_kl.mean(static_cast<double>(valid));
    return result;
  }
};

}  // namespace verl::algo
