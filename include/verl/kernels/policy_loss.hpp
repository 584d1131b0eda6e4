// Host side of policy_loss.cuh: the per-token math of verl's vanilla PPO loss (asymmetric clip,
// dual clip, the +-20 log-ratio clamp) shared by the kernel and the host, with torch's conventions
// at ties (clamp passes the gradient at its bounds, maximum/minimum split it), as
// verl::algo::detail::dual_clip_ppo_row computes it. CPU reference: verl::algo::VanillaPPO.
#pragma once

#include <cmath>

#include "verl/algo/policy_losses.hpp"
#include "verl/core/error.hpp"
#include "verl/kernels/detail/cuda_b_hd.hpp"
#include "verl/kernels/masked_reductions.hpp"

namespace verl::kernels {

struct VanillaPPOParams {
  float ratio_low = 0.8f;   ///< float(1 - clip_ratio_low)
  float ratio_high = 1.2f;  ///< float(1 + clip_ratio_high)
  float dual_clip = 3.0f;   ///< clip_ratio_c

  static VanillaPPOParams from(double clip_ratio_low, double clip_ratio_high, double clip_ratio_c) {
    VERL_CHECK_ARG(clip_ratio_c > 1.0,
                   "clip_ratio_c: expected a value > 1.0 (the dual-clip lower bound of the ratio), got {}", clip_ratio_c);
    return {static_cast<float>(1.0 - clip_ratio_low), static_cast<float>(1.0 + clip_ratio_high),
            static_cast<float>(clip_ratio_c)};
  }
};

/// One token's contribution: its term in the row sum, its -log-ratio term (ppo_kl), the clip
/// indicators, and d loss / d log_prob before the aggregation's row weight.
struct PpoToken {
  float loss_term;
  float kl_term;
  bool clipped;
  bool clipped_lower;
  float grad;  ///< d pg_loss / d log_prob
};

namespace detail {
#if defined(__CUDA_ARCH__)
VERL_KERNELS_HD float ppo_exp(float x) { return expf(x); }
VERL_KERNELS_HD bool ppo_isnan(float x) { return isnan(x); }
#else
VERL_KERNELS_HD float ppo_exp(float x) { return std::exp(x); }
VERL_KERNELS_HD bool ppo_isnan(float x) { return std::isnan(x); }
#endif
VERL_KERNELS_HD float ppo_clamp(float x, float lo, float hi) {
  const float above = x < lo ? lo : x;
  return above > hi ? hi : above;
}
VERL_KERNELS_HD float ppo_clamp_passes(float x, float lo, float hi) { return (x >= lo && x <= hi) ? 1.0f : 0.0f; }
VERL_KERNELS_HD float ppo_maximum(float a, float b) { return (a < b || ppo_isnan(b)) ? b : a; }
VERL_KERNELS_HD float ppo_minimum(float a, float b) { return (b < a || ppo_isnan(b)) ? b : a; }
VERL_KERNELS_HD float ppo_maximum_share(float a, float b) { return a < b ? 0.0f : (a == b ? 0.5f : 1.0f); }
VERL_KERNELS_HD float ppo_minimum_share(float a, float b) { return a > b ? 0.0f : (a == b ? 0.5f : 1.0f); }
}  // namespace detail

/// `row_weight` is the aggregation's gradient weight of the token's row.
VERL_KERNELS_HD PpoToken vanilla_ppo_token(const VanillaPPOParams& p, float log_prob, float old_log_prob,
                                           float advantage, float mask, float is_weight, float row_weight,
                                           bool select_valid) {
  constexpr float kBound = 20.0f;
  const float log_ratio = log_prob - old_log_prob;
  const float ratio = detail::ppo_exp(detail::ppo_clamp(log_ratio, -kBound, kBound));
  const float neg_advantage = -advantage;
  const bool valid = mask != 0.0f, negative = advantage < 0.0f;
  const float unclipped = neg_advantage * ratio;
  const float clipped = neg_advantage * detail::ppo_clamp(ratio, p.ratio_low, p.ratio_high);
  const float surrogate = detail::ppo_maximum(unclipped, clipped);
  const float ratio_share = detail::ppo_maximum_share(unclipped, clipped) +
                            detail::ppo_maximum_share(clipped, unclipped) *
                                detail::ppo_clamp_passes(ratio, p.ratio_low, p.ratio_high);
  const float dual = neg_advantage * p.dual_clip;
  const float loss = negative ? detail::ppo_minimum(dual, surrogate) : surrogate;
  const float dual_share = negative ? detail::ppo_minimum_share(surrogate, dual) : 1.0f;
  PpoToken t;
  const float weighted = loss * is_weight;
  t.loss_term = (valid || !select_valid) ? weighted * mask : 0.0f;
  t.kl_term = valid ? -detail::ppo_clamp(log_ratio, -kBound, kBound) * mask : 0.0f;
  t.clipped = valid && clipped > unclipped;
  t.clipped_lower = valid && negative && surrogate > dual;
  // Autograd's chain, in its order: W * w, the where/min/max shares, * (-A), * r (exp), the clamp.
  const float upstream = (valid ? row_weight : 0.0f) * is_weight;
  t.grad = upstream * (ratio_share * dual_share) * neg_advantage * ratio *
           detail::ppo_clamp_passes(log_ratio, -kBound, kBound);
  return t;
}

}  // namespace verl::kernels
