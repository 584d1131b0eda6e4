// verl 0.9.1's "dppo_tv" and "dppo_kl" policy losses: a REINFORCE-style loss weighted by the
// truncated, detached importance ratio, kept only on tokens whose new probability stays in a
// trust region around the old one (a bound on the probability difference, or on the binary KL
// between the two Bernoulli distributions of the token), and "dro" (a log-probability objective
// with a squared log-ratio penalty).
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "verl/algo/policy_losses/common.hpp"
#include "verl/algo/policy_losses/config.hpp"
#include "verl/algo/policy_losses/policy_loss.hpp"
#include "verl/core/error.hpp"

namespace verl::algo {

namespace detail {

/// dppo_tv's trust region: p - q <= high where A > 0, p - q >= -low otherwise (p, q the new and
/// old token probabilities).
struct ProbabilityDifferenceRegion {
  float low, high;
  VERL_FORCE_INLINE bool keeps(float log_prob, float old_log_prob, float advantage) const {
    const float difference = std::exp(log_prob) - std::exp(old_log_prob);
    return advantage > 0.0f ? difference <= high : difference >= -low;
  }
};

/// dppo_kl's trust region on the binary KL of the token's Bernoulli distributions,
///   bkl = q (log q - log p) + (1 - q) log((1 - q + 1e-8) / (1 - p + 1e-8)):
/// bkl <= high or p <= q where A > 0, bkl <= low or p >= q otherwise.
struct BinaryKLRegion {
  float low, high;
  VERL_FORCE_INLINE bool keeps(float log_prob, float old_log_prob, float advantage) const {
    const float p = std::exp(log_prob), q = std::exp(old_log_prob);
    const float bkl = q * (old_log_prob - log_prob) + (1.0f - q) * std::log((1.0f - q + 1e-8f) / (1.0f - p + 1e-8f));
    return advantage > 0.0f ? (bkl <= high || p <= q) : (bkl <= low || p >= q);
  }
};

/// Counts of one DPPO pass: valid tokens outside the trust region, and kept tokens whose ratio
/// was truncated at clip_ratio_c.
struct DppoCounts {
  std::int64_t outside = 0;
  std::int64_t truncated = 0;
};

/// One row of DPPO from the ratios: loss terms -A sg(min(r, c)) log_prob keep (times the IS
/// weight), ppo_kl terms -clamp(lp - old, ±20), gradient.
template <class Region>
void dppo_row(const float* __restrict log_prob, const float* __restrict old_log_prob,
              const float* __restrict advantages, const float* __restrict mask, const float* __restrict weights,
              const float* __restrict ratio, float* __restrict loss_terms, float* __restrict kl_terms,
              float* __restrict grad, Index cols, const Region& region, float clip_ratio_c, float row_weight,
              bool select_valid, DppoCounts& counts) {
  for (Index j = 0; j < cols; ++j) {
    const float m = mask[j], r = ratio[j], a = advantages[j];
    const bool valid = m != 0.0f;
    const bool kept = region.keeps(log_prob[j], old_log_prob[j], a);
    const float truncated_ratio = r < clip_ratio_c ? r : clip_ratio_c;  // torch.clamp(max=c)
    const float coefficient = (-a * truncated_ratio) * (kept ? 1.0f : 0.0f);  // detached factor of log_prob
    loss_terms[j] = row_sum_term((coefficient * log_prob[j]) * weights[j], m, select_valid);
    kl_terms[j] = select(valid, -clamp_value(log_prob[j] - old_log_prob[j], -kLogRatioBound, kLogRatioBound) * m, 0.0f);
    counts.outside += valid & !kept;
    counts.truncated += valid & kept & (r > clip_ratio_c);
    grad[j] = select(valid, row_weight, 0.0f) * weights[j] * coefficient;
  }
}

template <class Region>
PolicyLossResult dppo_loss(const PolicyLossBatch& batch, const AggregationContext& context, const Region& region,
                           double clip_ratio_c) {
  LossPass pass(batch, context.loss_agg_mode, context.global_batch_info);
  RowScratch& scratch = pass.scratch;
  DppoCounts counts;
  for (Index i = 0; i < pass.rows; ++i) {
    const float* lp = row_of(batch.log_prob, i);
    const float* old = row_of(batch.old_log_prob, i);
    row_ratio(lp, old, scratch.ratio.data(), pass.cols, kLogRatioBound);
    dppo_row(lp, old, row_of(batch.advantages, i), row_of(batch.response_mask, i), pass.is_weights(i),
             scratch.ratio.data(), scratch.loss_terms.data(), scratch.metric_terms.data(), pass.grad_row(i),
             pass.cols, region, static_cast<float>(clip_ratio_c), pass.reduction.gradient_weight(i),
             pass.reduction.selects_valid(), counts);
    pass.add_loss_and_kl_terms(i);
  }
  const auto tokens = static_cast<double>(pass.counts.tokens);
  pass.result.metrics["actor/pg_clipfrac"] = masked_mean_of(static_cast<double>(counts.outside), tokens);
  pass.result.metrics["actor/pg_clipfrac_lower"] = masked_mean_of(static_cast<double>(counts.truncated), tokens);
  return pass.finish_with_kl();
}

}  // namespace detail

/// DPPO with a total-variation trust region ("dppo_tv"): with r = exp(clamp(lp - old, ±20)),
///   loss = -A sg(min(r, clip_ratio_c)) log_prob sg(keep),
///   keep = p - q <= clip_ratio_high where A > 0, p - q >= -clip_ratio_low otherwise,
/// aggregated with loss_agg_mode. pg_clipfrac = masked_mean(1 - keep), ppo_kl = masked_mean(-log
/// ratio), pg_clipfrac_lower = masked_mean((r > clip_ratio_c) keep).
struct DPPOTV {
  static constexpr std::string_view name = "dppo_tv";
  static constexpr AggregationRule aggregation = AggregationRule::follows_config();
  static DPPOTV from_config(const PolicyLossConfig& config) {
    return {.clip_ratio_low = config.resolved_clip_ratio_low(), .clip_ratio_high = config.resolved_clip_ratio_high(),
            .clip_ratio_c = config.clip_ratio_c};
  }

  double clip_ratio_low = 0.2;   ///< bound on q - p where A <= 0
  double clip_ratio_high = 0.2;  ///< bound on p - q where A > 0
  double clip_ratio_c = 20.0;    ///< the importance ratio's truncation (verl's function default)

  PolicyLossResult compute(const PolicyLossBatch& batch, const AggregationContext& context) const {
    return detail::dppo_loss(batch, context,
                             detail::ProbabilityDifferenceRegion{static_cast<float>(clip_ratio_low),
                                                                 static_cast<float>(clip_ratio_high)},
                             clip_ratio_c);
  }
};

/// DPPO with a binary-KL trust region ("dppo_kl"): as DPPOTV with
///   keep = bkl <= clip_ratio_high or p <= q where A > 0, bkl <= clip_ratio_low or p >= q otherwise,
///   bkl = q (log q - log p) + (1 - q) log((1 - q + 1e-8) / (1 - p + 1e-8)).
struct DPPOKL {
  static constexpr std::string_view name = "dppo_kl";
  static constexpr AggregationRule aggregation = AggregationRule::follows_config();
  static DPPOKL from_config(const PolicyLossConfig& config) {
    return {.clip_ratio_low = config.resolved_clip_ratio_low(), .clip_ratio_high = config.resolved_clip_ratio_high(),
            .clip_ratio_c = config.clip_ratio_c};
  }

  double clip_ratio_low = 0.2;
  double clip_ratio_high = 0.2;
  double clip_ratio_c = 20.0;

  PolicyLossResult compute(const PolicyLossBatch& batch, const AggregationContext& context) const {
    return detail::dppo_loss(
        batch, context, detail::BinaryKLRegion{static_cast<float>(clip_ratio_low), static_cast<float>(clip_ratio_high)},
        clip_ratio_c);
  }
};

/// DRO ("dro"): loss = -(log_prob A - 0.5 beta (lp - old)^2) (times the IS weight), aggregated with
/// loss_agg_mode; the log-ratio is not clamped. Its only metric is ppo_kl = masked_mean(-(lp - old)).
/// beta is actor.policy_loss.dro_beta, which must be set and positive (verl raises otherwise).
struct DRO {
  static constexpr std::string_view name = "dro";
  static constexpr AggregationRule aggregation = AggregationRule::follows_config();
  static DRO from_config(const PolicyLossConfig& config) {
    const std::optional<double> beta = config.policy_loss.dro_beta;
    VERL_CHECK_ARG(beta && *beta > 0.0, "policy_loss.dro_beta: expected a positive value with loss_mode dro, got {}",
                   beta ? std::to_string(*beta) : std::string("null"));
    return {.beta = *beta};
  }

  double beta = 0.1;

  PolicyLossResult compute(const PolicyLossBatch& batch, const AggregationContext& context) const {
    using namespace detail;
    VERL_CHECK_ARG(beta > 0.0, "policy_loss.dro_beta: expected a positive value with loss_mode dro, got {}", beta);
    LossPass pass(batch, context.loss_agg_mode, context.global_batch_info);
    RowScratch& scratch = pass.scratch;
    const auto half_beta = static_cast<float>(0.5 * beta);  // a Python float times the tensor
    for (Index i = 0; i < pass.rows; ++i) {
      const float* lp = row_of(batch.log_prob, i);
      const float* old = row_of(batch.old_log_prob, i);
      const float* advantages = row_of(batch.advantages, i);
      const float* mask = row_of(batch.response_mask, i);
      const float* weights = pass.is_weights(i);
      float* grad = pass.grad_row(i);
      const float row_weight = pass.reduction.gradient_weight(i);
      const bool select_valid = pass.reduction.selects_valid();
      for (Index j = 0; j < pass.cols; ++j) {
        const float m = mask[j], d = lp[j] - old[j];
        const bool valid = m != 0.0f;
        const float loss = -(lp[j] * advantages[j] - half_beta * (d * d));
        scratch.loss_terms[static_cast<std::size_t>(j)] = row_sum_term(loss * weights[j], m, select_valid);
        scratch.metric_terms[static_cast<std::size_t>(j)] = select(valid, -d * m, 0.0f);
        // d loss / d lp = -(A - 0.5 beta * 2 d), as autograd of the square.
        grad[j] = select(valid, row_weight, 0.0f) * weights[j] * -(advantages[j] - half_beta * (2.0f * d));
      }
      pass.add_loss_and_kl_terms(i);
    }
    return pass.finish_with_kl();
  }
};

}  // namespace verl::algo
