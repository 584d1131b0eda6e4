// Host side of policy_loss.cuh: the per-token and per-row math of verl's policy losses that the
// fused kernel runs, shared by the kernel and the host, with torch's conventions at ties (clamp
// passes the gradient at its bounds, maximum/minimum split it) as verl::algo computes them.
//
// A kernel loss is a small parameter struct (KernelPolicyLoss): `token` gives one token's loss
// term, metric terms and d loss / d log_prob; sequence-level losses (gspo, geo_mean) first sum
// per-row terms (`add_row_terms`, `finish_row`). The row walkers below are written once for a
// strided slice of a row, so the CUDA kernel (one warp per row, lane stride 32) and the
// sequential host run (`detail::policy_loss_sequential`, stride 1) execute the same code.
// clip_cov and kl_cov first choose tokens across the whole batch (kSelection: a seeded draw or a
// top-k by covariance); the token pass then reads each token's `selected` flag.
// CPU references: verl::algo::VanillaPPO, GPGLoss, ReinforceLoss, CISPO, SAPO, GSPO, GeoMean,
// ClipCov, KLCov.
#pragma once

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <cstring>
#include <vector>

#include "verl/algo/policy_losses.hpp"
#include "verl/config.hpp"
#include "verl/core/error.hpp"
#include "verl/kernels/detail/host_device.hpp"
#include "verl/kernels/detail/launch.hpp"
#include "verl/kernels/detail/mt19937_64.hpp"
#include "verl/kernels/masked_reductions.hpp"

namespace verl::kernels {

/// Device pointers of one policy-loss call. old_log_prob may be null for a loss that does not
/// read it (gpg).
struct PolicyLossInputs {
  const float* old_log_prob = nullptr;  ///< (B, T); rollout log-probs for reinforce
  const float* log_prob = nullptr;      ///< (B, T): the differentiated input
  const float* advantages = nullptr;    ///< (B, T), or (B) when advantages_per_row
  bool advantages_per_row = false;
  const float* response_mask = nullptr;       ///< (B, T) 0/1
  const float* rollout_is_weights = nullptr;  ///< (B, T) or nullptr
  std::int64_t rows = 0, cols = 0;
  /// (B, T) 0/1: the tokens a batch-level choice picked (clip_cov, kl_cov). policy_loss fills it
  /// in from its own selection pass; leave it null.
  const std::uint8_t* token_selection = nullptr;
};

/// pg_loss and verl's metrics (actor/pg_clipfrac, actor/ppo_kl, actor/pg_clipfrac_lower); a loss
/// without a metric in verl reports 0 for it (gpg reports none, reinforce only ppo_kl).
struct PolicyLossState {
  float pg_loss;
  float pg_clipfrac;
  float ppo_kl;
  float pg_clipfrac_lower;
};

/// One token's inputs (is_weight 1 without rollout IS weights).
struct PolicyTokenInput {
  float log_prob;
  float old_log_prob;
  float advantage;
  float mask;
  float is_weight;
  bool selected = false;  ///< picked by the loss's batch-level choice (clip_cov, kl_cov)
};

/// One token's contribution: its term in the row sum, its ppo_kl term, the clip indicators, and
/// d loss / d log_prob including the aggregation's row weight.
struct PpoToken {
  float loss_term;
  float kl_term;
  bool clipped;
  bool clipped_lower;
  float grad;  ///< d pg_loss / d log_prob
};

/// Sums over a row taken before its token pass (sequence-level losses), in double as verl::algo's
/// row lanes.
struct PolicyRowSums {
  double terms[3];
};

/// What a row's statistics may depend on besides its sums.
struct PolicyRowContext {
  std::int64_t length;  ///< valid tokens in the row
  std::int64_t rows;    ///< rows in the batch
};

/// Row state of the losses without a row pass.
struct TokenwiseRow {};

/// A policy loss the fused kernel can run. kOwnReduction: pg_loss is the mean over rows of
/// Row::loss (geo_mean) instead of an aggregation of token terms.
template <class L>
concept KernelPolicyLoss =
    std::copyable<L> &&
    requires(const L& loss, const typename L::Row& row, const PolicyTokenInput& token) {
      { L::kRowPass } -> std::convertible_to<bool>;
      { L::kOwnReduction } -> std::convertible_to<bool>;
      { L::kReadsOldLogProb } -> std::convertible_to<bool>;
      { L::kForcesSeqMeanTokenMean } -> std::convertible_to<bool>;
      { loss.token(row, token, 1.0f, true) } -> std::same_as<PpoToken>;
    } &&
    (!L::kRowPass || requires(const L& loss, const PolicyTokenInput& token, PolicyRowSums& sums,
                              PolicyRowContext context) {
      loss.add_row_terms(sums, token);
      { loss.finish_row(sums, context) } -> std::same_as<typename L::Row>;
    });

namespace detail {
#if defined(__CUDA_ARCH__)
VERL_KERNELS_HD float ppo_exp(float x) { return expf(x); }
VERL_KERNELS_HD float ppo_log(float x) { return logf(x); }
VERL_KERNELS_HD bool ppo_isnan(float x) { return isnan(x); }
#else
VERL_KERNELS_HD float ppo_exp(float x) { return std::exp(x); }
VERL_KERNELS_HD float ppo_log(float x) { return std::log(x); }
VERL_KERNELS_HD bool ppo_isnan(float x) { return std::isnan(x); }
#endif
inline constexpr float kLogRatioBound = 20.0f;  ///< verl's clamp of log-ratios before exp

VERL_KERNELS_HD float ppo_clamp(float x, float lo, float hi) {
  const float above = x < lo ? lo : x;
  return above > hi ? hi : above;
}
VERL_KERNELS_HD float ppo_clamp_passes(float x, float lo, float hi) { return (x >= lo && x <= hi) ? 1.0f : 0.0f; }
VERL_KERNELS_HD float ppo_maximum(float a, float b) { return (a < b || ppo_isnan(b)) ? b : a; }
VERL_KERNELS_HD float ppo_minimum(float a, float b) { return (b < a || ppo_isnan(b)) ? b : a; }
VERL_KERNELS_HD float ppo_maximum_share(float a, float b) { return a < b ? 0.0f : (a == b ? 0.5f : 1.0f); }
VERL_KERNELS_HD float ppo_minimum_share(float a, float b) { return a > b ? 0.0f : (a == b ? 0.5f : 1.0f); }
VERL_KERNELS_HD float ppo_sign(float x) { return x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : 0.0f); }
/// The term agg_loss adds to a row sum: where(mask, L, 0) under token-mean, L * mask otherwise.
VERL_KERNELS_HD float ppo_row_term(float loss, float mask, bool select_valid) {
  return (mask != 0.0f || !select_valid) ? loss * mask : 0.0f;
}
/// ppo_kl's term with the +-20 clamp (vanilla, cispo, sapo).
VERL_KERNELS_HD float clamped_kl_term(float log_ratio, float mask) {
  return mask != 0.0f ? -ppo_clamp(log_ratio, -kLogRatioBound, kLogRatioBound) * mask : 0.0f;
}
/// ppo_kl's term without a clamp (reinforce, gspo, geo_mean).
VERL_KERNELS_HD float kl_term(float log_ratio, float mask) { return mask != 0.0f ? -log_ratio * mask : 0.0f; }

/// PPO's clipped surrogate max(-A r, -A clamp(r, low, high)) and its share of d / d r.
struct PpoSurrogate {
  float unclipped, clipped, loss, ratio_share;
};
VERL_KERNELS_HD PpoSurrogate ppo_surrogate(float neg_advantage, float ratio, float low, float high) {
  PpoSurrogate s;
  s.unclipped = neg_advantage * ratio;
  s.clipped = neg_advantage * ppo_clamp(ratio, low, high);
  s.loss = ppo_maximum(s.unclipped, s.clipped);
  s.ratio_share = ppo_maximum_share(s.unclipped, s.clipped) +
                  ppo_maximum_share(s.clipped, s.unclipped) * ppo_clamp_passes(ratio, low, high);
  return s;
}

/// The clip range verl builds in Python (double) and torch rounds to float32.
struct RatioRange {
  float low, high;
  static RatioRange from(double clip_ratio_low, double clip_ratio_high) {
    return {static_cast<float>(1.0 - clip_ratio_low), static_cast<float>(1.0 + clip_ratio_high)};
  }
};
}  // namespace detail

// ---- the losses ------------------------------------------------------------------------------------

/// verl's "vanilla" PPO loss: asymmetric clip, dual clip, the +-20 log-ratio clamp.
struct VanillaPPOParams {
  using Row = TokenwiseRow;
  static constexpr bool kRowPass = false, kOwnReduction = false, kReadsOldLogProb = true,
                        kForcesSeqMeanTokenMean = false;
  float ratio_low = 0.8f;   ///< float(1 - clip_ratio_low)
  float ratio_high = 1.2f;  ///< float(1 + clip_ratio_high)
  float dual_clip = 3.0f;   ///< clip_ratio_c

  static VanillaPPOParams from(double clip_ratio_low, double clip_ratio_high, double clip_ratio_c) {
    VERL_CHECK_ARG(clip_ratio_c > 1.0,
                   "clip_ratio_c: expected a value > 1.0 (the dual-clip lower bound of the ratio), got {}", clip_ratio_c);
    const auto range = detail::RatioRange::from(clip_ratio_low, clip_ratio_high);
    return {range.low, range.high, static_cast<float>(clip_ratio_c)};
  }
  static VanillaPPOParams from(const algo::VanillaPPO& loss) {
    return from(loss.clip_ratio_low, loss.clip_ratio_high, loss.clip_ratio_c);
  }

  VERL_KERNELS_HD PpoToken token(const Row&, const PolicyTokenInput& in, float row_weight, bool select_valid) const {
    const float log_ratio = in.log_prob - in.old_log_prob;
    const float ratio = detail::ppo_exp(detail::ppo_clamp(log_ratio, -detail::kLogRatioBound, detail::kLogRatioBound));
    const float neg_advantage = -in.advantage;
    const bool valid = in.mask != 0.0f, negative = in.advantage < 0.0f;
    const detail::PpoSurrogate s = detail::ppo_surrogate(neg_advantage, ratio, ratio_low, ratio_high);
    const float dual = neg_advantage * dual_clip;
    const float loss = negative ? detail::ppo_minimum(dual, s.loss) : s.loss;
    const float dual_share = negative ? detail::ppo_minimum_share(s.loss, dual) : 1.0f;
    PpoToken t;
    t.loss_term = detail::ppo_row_term(loss * in.is_weight, in.mask, select_valid);
    t.kl_term = detail::clamped_kl_term(log_ratio, in.mask);
    t.clipped = valid && s.clipped > s.unclipped;
    t.clipped_lower = valid && negative && s.loss > dual;
    // Autograd's chain, in its order: W * w, the where/min/max shares, * (-A), * r (exp), the clamp.
    const float upstream = (valid ? row_weight : 0.0f) * in.is_weight;
    t.grad = upstream * (s.ratio_share * dual_share) * neg_advantage * ratio *
             detail::ppo_clamp_passes(log_ratio, -detail::kLogRatioBound, detail::kLogRatioBound);
    return t;
  }
};

/// The token math of VanillaPPOParams as a function (`row_weight`: the aggregation's weight W).
VERL_KERNELS_HD PpoToken vanilla_ppo_token(const VanillaPPOParams& p, float log_prob, float old_log_prob,
                                           float advantage, float mask, float is_weight, float row_weight,
                                           bool select_valid) {
  return p.token(TokenwiseRow{}, PolicyTokenInput{log_prob, old_log_prob, advantage, mask, is_weight}, row_weight,
                 select_valid);
}

namespace detail {
/// (-A * log_prob) * w and its gradient -A * w * W: gpg and reinforce.
VERL_KERNELS_HD void policy_gradient_token(PpoToken& t, const PolicyTokenInput& in, float row_weight,
                                           bool select_valid) {
  t.loss_term = ppo_row_term((-in.advantage * in.log_prob) * in.is_weight, in.mask, select_valid);
  t.grad = (in.mask != 0.0f ? row_weight : 0.0f) * in.is_weight * -in.advantage;
}
}  // namespace detail

/// verl's "gpg": loss = -log_prob * A (times the IS weights); no metrics, old_log_prob unread.
struct GPGParams {
  using Row = TokenwiseRow;
  static constexpr bool kRowPass = false, kOwnReduction = false, kReadsOldLogProb = false,
                        kForcesSeqMeanTokenMean = false;
  static GPGParams from(const algo::GPGLoss&) { return {}; }

  VERL_KERNELS_HD PpoToken token(const Row&, const PolicyTokenInput& in, float row_weight, bool select_valid) const {
    PpoToken t{0.0f, 0.0f, false, false, 0.0f};
    detail::policy_gradient_token(t, in, row_weight, select_valid);
    return t;
  }
};

/// verl's compute_policy_loss_reinforce: the gpg loss, with old_log_prob the rollout's log-probs
/// feeding ppo_kl = masked_mean(rollout_log_prob - log_prob).
struct ReinforceParams {
  using Row = TokenwiseRow;
  static constexpr bool kRowPass = false, kOwnReduction = false, kReadsOldLogProb = true,
                        kForcesSeqMeanTokenMean = false;
  static ReinforceParams from(const algo::ReinforceLoss&) { return {}; }

  VERL_KERNELS_HD PpoToken token(const Row&, const PolicyTokenInput& in, float row_weight, bool select_valid) const {
    PpoToken t{0.0f, detail::kl_term(in.log_prob - in.old_log_prob, in.mask), false, false, 0.0f};
    detail::policy_gradient_token(t, in, row_weight, select_valid);
    return t;
  }
};

/// verl's "cispo": -sg(clamp(r, low, high)) * A * log_prob; pg_clipfrac counts r != clamp(r).
struct CISPOParams {
  using Row = TokenwiseRow;
  static constexpr bool kRowPass = false, kOwnReduction = false, kReadsOldLogProb = true,
                        kForcesSeqMeanTokenMean = false;
  float ratio_low = 0.8f, ratio_high = 1.2f;
  static CISPOParams from(const algo::CISPO& loss) {
    const auto range = detail::RatioRange::from(loss.clip_ratio_low, loss.clip_ratio_high);
    return {range.low, range.high};
  }

  VERL_KERNELS_HD PpoToken token(const Row&, const PolicyTokenInput& in, float row_weight, bool select_valid) const {
    const float log_ratio = in.log_prob - in.old_log_prob;
    const float ratio = detail::ppo_exp(detail::ppo_clamp(log_ratio, -detail::kLogRatioBound, detail::kLogRatioBound));
    const float clipped_ratio = detail::ppo_clamp(ratio, ratio_low, ratio_high);
    const float coefficient = -clipped_ratio * in.advantage;  // the detached factor of log_prob
    const bool valid = in.mask != 0.0f;
    PpoToken t;
    t.loss_term = detail::ppo_row_term((coefficient * in.log_prob) * in.is_weight, in.mask, select_valid);
    t.kl_term = detail::clamped_kl_term(log_ratio, in.mask);
    t.clipped = valid && ratio != clipped_ratio;
    t.clipped_lower = false;
    t.grad = (valid ? row_weight : 0.0f) * in.is_weight * coefficient;
    return t;
  }
};

/// verl's "sapo": -A * sigmoid(tau (r - 1)) * 4 / tau, tau = tau_pos where A > 0, else tau_neg;
/// always aggregated with seq-mean-token-mean; both clipfracs 0.
struct SAPOParams {
  using Row = TokenwiseRow;
  static constexpr bool kRowPass = false, kOwnReduction = false, kReadsOldLogProb = true,
                        kForcesSeqMeanTokenMean = true;
  float tau_positive = 1.0f, tau_negative = 1.05f;
  static SAPOParams from(const algo::SAPO& loss) {
    return {static_cast<float>(loss.tau_pos), static_cast<float>(loss.tau_neg)};
  }

  VERL_KERNELS_HD PpoToken token(const Row&, const PolicyTokenInput& in, float row_weight, bool select_valid) const {
    const float log_ratio = in.log_prob - in.old_log_prob;
    const float ratio = detail::ppo_exp(detail::ppo_clamp(log_ratio, -detail::kLogRatioBound, detail::kLogRatioBound));
    const bool positive = in.advantage > 0.0f;
    const float tau = positive ? tau_positive : tau_negative;
    const float gate_scale = 4.0f / tau;  // float32, as verl's tensor arithmetic
    const float gate_exponent = detail::ppo_exp(-(tau * (ratio - 1.0f)));
    const float sigmoid = 1.0f / (1.0f + gate_exponent);
    const float loss = -(sigmoid * gate_scale) * in.advantage;
    PpoToken t;
    t.loss_term = detail::ppo_row_term(loss * in.is_weight, in.mask, select_valid);
    t.kl_term = detail::clamped_kl_term(log_ratio, in.mask);
    t.clipped = t.clipped_lower = false;
    // d loss / d r = -A (4 / tau) g (1 - g) tau; then exp's r and the clamp's mask.
    const float upstream = (in.mask != 0.0f ? row_weight : 0.0f) * in.is_weight;
    t.grad = upstream * -in.advantage * gate_scale * (sigmoid * (1.0f - sigmoid)) * tau * ratio *
             detail::ppo_clamp_passes(log_ratio, -detail::kLogRatioBound, detail::kLogRatioBound);
    return t;
  }
};

/// verl's "gspo": PPO's clip on the sequence ratio exp(min(mean_t(log_prob - old), 10)) over the
/// row's valid tokens; aggregated with loss_agg_mode (verl 0.9.1); pg_clipfrac_lower 0.
struct GSPOParams {
  struct Row {
    float ratio;       ///< the sequence ratio s_i
    float cap_passes;  ///< 1 where the cap at 10 passes the gradient
  };
  static constexpr bool kRowPass = true, kOwnReduction = false, kReadsOldLogProb = true,
                        kForcesSeqMeanTokenMean = false;
  static constexpr float kMaxLogRatio = 10.0f;
  float ratio_low = 0.8f, ratio_high = 1.2f;
  static GSPOParams from(const algo::GSPO& loss) {
    const auto range = detail::RatioRange::from(loss.clip_ratio_low, loss.clip_ratio_high);
    return {range.low, range.high};
  }

  VERL_KERNELS_HD void add_row_terms(PolicyRowSums& sums, const PolicyTokenInput& in) const {
    sums.terms[0] += static_cast<double>((in.log_prob - in.old_log_prob) * in.mask);
  }
  VERL_KERNELS_HD Row finish_row(const PolicyRowSums& sums, PolicyRowContext context) const {
    const float length = static_cast<float>(context.length > 1 ? context.length : 1);
    const float log_ratio = static_cast<float>(sums.terms[0]) / length;
    const float capped = kMaxLogRatio < log_ratio ? kMaxLogRatio : log_ratio;  // NaN stays NaN, as std::min
    return {detail::ppo_exp(capped), log_ratio <= kMaxLogRatio ? 1.0f : 0.0f};
  }
  VERL_KERNELS_HD PpoToken token(const Row& row, const PolicyTokenInput& in, float row_weight,
                                 bool select_valid) const {
    const float neg_advantage = -in.advantage;
    const bool valid = in.mask != 0.0f;
    const detail::PpoSurrogate s = detail::ppo_surrogate(neg_advantage, row.ratio, ratio_low, ratio_high);
    PpoToken t;
    t.loss_term = detail::ppo_row_term(s.loss * in.is_weight, in.mask, select_valid);
    t.kl_term = detail::kl_term(in.log_prob - in.old_log_prob, in.mask);
    t.clipped = valid && s.clipped > s.unclipped;
    t.clipped_lower = false;
    const float upstream = (valid ? row_weight : 0.0f) * in.is_weight;
    t.grad = upstream * s.ratio_share * neg_advantage * row.ratio * row.cap_passes;
    return t;
  }
};

/// verl's "geo_mean": per row, ratio_i = exp(sum_t(s * min(s nk, s clamp(nk, -low, high)) m) /
/// (len + 1e-8)) with s = sign(A), adv_i = sum_t(A m) / (len + 1e-8), IS weights as a per-row
/// geometric mean; pg_loss = mean over all rows of -adv_i ratio_i w_i (loss_agg_mode ignored).
/// pg_clipfrac counts clamped log-ratios with A > 0, pg_clipfrac_lower with A < 0.
struct GeoMeanParams {
  struct Row {
    double loss;     ///< -adv_i * ratio_i * w_i
    float gradient;  ///< d pg_loss / d(the row's token log-ratio sum)
  };
  static constexpr bool kRowPass = true, kOwnReduction = true, kReadsOldLogProb = true,
                        kForcesSeqMeanTokenMean = false;
  float log_ratio_low = -0.2f, log_ratio_high = 0.2f;
  static GeoMeanParams from(const algo::GeoMean& loss) {
    return {static_cast<float>(-loss.clip_ratio_low), static_cast<float>(loss.clip_ratio_high)};
  }

  VERL_KERNELS_HD float token_log_ratio(float log_ratio, float sign) const {
    return sign * detail::ppo_minimum(sign * log_ratio, sign * detail::ppo_clamp(log_ratio, log_ratio_low, log_ratio_high));
  }
  VERL_KERNELS_HD void add_row_terms(PolicyRowSums& sums, const PolicyTokenInput& in) const {
    const float log_ratio = in.log_prob - in.old_log_prob;
    sums.terms[0] += static_cast<double>(token_log_ratio(log_ratio, detail::ppo_sign(in.advantage)) * in.mask);
    sums.terms[1] += static_cast<double>(in.advantage * in.mask);
    // Without IS weights this is log(1 + 1e-10) = log(1) = 0 in float32: the geometric mean is 1.
    sums.terms[2] += static_cast<double>(detail::ppo_log(in.is_weight + 1e-10f) * in.mask);
  }
  VERL_KERNELS_HD Row finish_row(const PolicyRowSums& sums, PolicyRowContext context) const {
    const float length = static_cast<float>(context.length) + 1e-8f;
    const float ratio = detail::ppo_exp(static_cast<float>(sums.terms[0]) / length);
    const float advantage = static_cast<float>(sums.terms[1]) / length;
    const float weight = detail::ppo_exp(static_cast<float>(sums.terms[2]) / length);
    const float mean_weight = 1.0f / static_cast<float>(context.rows);  // torch.mean's backward
    return {static_cast<double>((-advantage * ratio) * weight), mean_weight * weight * -advantage * ratio / length};
  }
  VERL_KERNELS_HD PpoToken token(const Row& row, const PolicyTokenInput& in, float, bool) const {
    const float log_ratio = in.log_prob - in.old_log_prob;
    const float s = detail::ppo_sign(in.advantage);
    const float clamped = detail::ppo_clamp(log_ratio, log_ratio_low, log_ratio_high);
    const float unclamped_term = s * log_ratio, clamped_term = s * clamped;
    const float share = detail::ppo_minimum_share(unclamped_term, clamped_term) * s +
                        detail::ppo_minimum_share(clamped_term, unclamped_term) * s *
                            detail::ppo_clamp_passes(log_ratio, log_ratio_low, log_ratio_high);
    const bool valid = in.mask != 0.0f, clipped = log_ratio != clamped;
    PpoToken t;
    t.loss_term = 0.0f;  // the row's loss is Row::loss
    t.kl_term = detail::kl_term(log_ratio, in.mask);
    t.clipped = valid && clipped && in.advantage > 0.0f;
    t.clipped_lower = valid && clipped && in.advantage < 0.0f;
    t.grad = row.gradient * in.mask * s * share;
    return t;
  }
};

// ---- losses with a batch-level token choice (clip_cov, kl_cov) -------------------------------------

/// How a loss picks tokens across the whole batch before its token pass. Both choices rank valid
/// tokens by the detached cov = (A - mean(A)) * (log_prob - mean(log_prob)), means over the valid
/// tokens.
enum class TokenSelection {
  none,
  random_in_covariance_band,  ///< clip_cov: a seeded random few of the unclipped tokens with lb < cov < ub
  top_covariance,             ///< kl_cov: the k largest cov
};

/// The batch means that centre cov.
struct CovarianceCentres {
  float advantage;
  float log_prob;
};

namespace detail {
#if defined(__CUDA_ARCH__)
VERL_KERNELS_HD float ppo_abs(float x) { return fabsf(x); }
#else
VERL_KERNELS_HD float ppo_abs(float x) { return std::fabs(x); }
#endif

VERL_KERNELS_HD float token_covariance(const PolicyTokenInput& in, CovarianceCentres c) {
  return (in.advantage - c.advantage) * (in.log_prob - c.log_prob);
}

/// An unsigned key whose order is kl_cov's ranking of cov: NaN above everything (as torch.topk
/// ranks it), -0 equal to +0, and a masked token (0) below every valid one.
VERL_KERNELS_HD std::uint64_t covariance_rank_key(float cov, bool valid) {
  if (!valid) return 0;
  std::uint32_t bits = 0xFFFFFFFFu;
  if (!ppo_isnan(cov)) {
    const float canonical = cov == 0.0f ? 0.0f : cov;
#if defined(__CUDA_ARCH__)
    bits = __float_as_uint(canonical);
#else
    std::memcpy(&bits, &canonical, sizeof bits);
#endif
    bits = (bits & 0x80000000u) != 0 ? ~bits : bits | 0x80000000u;  // sign-magnitude to an ordered integer
  }
  return (std::uint64_t{1} << 32) | bits;
}
}  // namespace detail

/// verl's "clip_cov": PPO's clipped surrogate on r = exp(log_prob - old) (no +-20 clamp, no dual
/// clip) with the loss and gradient of max(int(clip_cov_ratio * N_valid), 1) tokens zeroed, drawn
/// at random among the valid, unclipped tokens with clip_cov_lb < cov < clip_cov_ub (centres:
/// masked_mean). The draw is verl::algo::ClipCov's (std::mt19937_64 from `seed`, a partial
/// Fisher-Yates over the candidates in batch order), so the kernel zeroes the tokens the CPU does.
/// pg_clipfrac is the fraction zeroed; ppo_kl has no clamp; pg_clipfrac_lower is 0.
struct ClipCovParams {
  using Row = TokenwiseRow;
  static constexpr bool kRowPass = false, kOwnReduction = false, kReadsOldLogProb = true,
                        kForcesSeqMeanTokenMean = false;
  static constexpr TokenSelection kSelection = TokenSelection::random_in_covariance_band;
  float ratio_low = 0.8f, ratio_high = 1.2f;
  double clip_cov_ratio = 0.0002;
  float cov_lower = 1.0f, cov_upper = 5.0f;
  std::uint64_t seed = 0;

  static ClipCovParams from(const algo::ClipCov& loss) {
    VERL_CHECK_ARG(loss.clip_cov_ratio > 0 && std::isfinite(loss.clip_cov_ratio),
                   "clip_cov_ratio: expected a finite value > 0, got {}", loss.clip_cov_ratio);
    const auto range = detail::RatioRange::from(loss.clip_ratio_low, loss.clip_ratio_high);
    return {range.low, range.high, loss.clip_cov_ratio, static_cast<float>(loss.clip_cov_lb),
            static_cast<float>(loss.clip_cov_ub), loss.seed};
  }

  VERL_KERNELS_HD CovarianceCentres centres(double advantage_sum, double log_prob_sum, std::int64_t valid) const {
    const auto count = static_cast<double>(valid);
    return {masked_mean_of(advantage_sum, count), masked_mean_of(log_prob_sum, count)};
  }
  /// Whether the token may be zeroed.
  VERL_KERNELS_HD bool candidate(const PolicyTokenInput& in, CovarianceCentres c) const {
    const float ratio = detail::ppo_exp(in.log_prob - in.old_log_prob);
    const detail::PpoSurrogate s = detail::ppo_surrogate(-in.advantage, ratio, ratio_low, ratio_high);
    const float cov = detail::token_covariance(in, c);
    return in.mask > 0.0f && !(s.clipped > s.unclipped) && cov < cov_upper && cov > cov_lower;
  }
  /// How many candidates are zeroed (all of them when there are fewer). Capped at `valid` before
  /// the cast (there are never more candidates than valid tokens), so a large ratio cannot overflow.
  VERL_KERNELS_HD std::int64_t budget(std::int64_t valid) const {
    const double wanted = clip_cov_ratio * static_cast<double>(valid);
    const auto count = wanted >= static_cast<double>(valid) ? valid : static_cast<std::int64_t>(wanted);
    return count > 1 ? count : 1;
  }

  VERL_KERNELS_HD PpoToken token(const Row&, const PolicyTokenInput& in, float row_weight, bool select_valid) const {
    const float log_ratio = in.log_prob - in.old_log_prob;
    const float ratio = detail::ppo_exp(log_ratio);
    const float neg_advantage = -in.advantage;
    const bool valid = in.mask != 0.0f;
    const detail::PpoSurrogate s = detail::ppo_surrogate(neg_advantage, ratio, ratio_low, ratio_high);
    const float keep = in.selected ? 0.0f : 1.0f;  // verl's corr
    PpoToken t;
    t.loss_term = detail::ppo_row_term((s.loss * keep) * in.is_weight, in.mask, select_valid);
    t.kl_term = detail::kl_term(log_ratio, in.mask);
    t.clipped = valid && in.selected;
    t.clipped_lower = false;
    const float upstream = (valid ? row_weight : 0.0f) * in.is_weight;
    t.grad = in.selected ? 0.0f : upstream * s.ratio_share * neg_advantage * ratio;
    return t;
  }
};

/// verl's "kl_cov": -A r with r = exp(log_prob - old) unclamped, plus ppo_kl_coef * |log_prob - old|
/// on the top max(1, int(N_valid * kl_cov_ratio)) valid tokens by cov (centres: torch's mean of
/// the valid values). Among equal cov at the boundary the kernel takes the earliest in batch order
/// (torch's CPU topk may take others; verl::algo::KLCov reproduces torch). ppo_kl = mean |log-ratio|;
/// both clipfracs 0 (verl reports neither).
struct KLCovParams {
  using Row = TokenwiseRow;
  static constexpr bool kRowPass = false, kOwnReduction = false, kReadsOldLogProb = true,
                        kForcesSeqMeanTokenMean = false;
  static constexpr TokenSelection kSelection = TokenSelection::top_covariance;
  double kl_cov_ratio = 0.0002;
  float coef = 1.0f;  ///< ppo_kl_coef

  /// A ratio above 1 is refused outright: verl raises whenever it selects more tokens than there
  /// are, which the host cannot tell before the kernel has counted them.
  static KLCovParams from(const algo::KLCov& loss) {
    VERL_CHECK_ARG(loss.kl_cov_ratio > 0 && loss.kl_cov_ratio <= 1, "kl_cov_ratio: expected a value in (0, 1], got {}",
                   loss.kl_cov_ratio);
    return {loss.kl_cov_ratio, static_cast<float>(loss.ppo_kl_coef)};
  }

  VERL_KERNELS_HD CovarianceCentres centres(double advantage_sum, double log_prob_sum, std::int64_t valid) const {
    const auto count = static_cast<float>(valid);
    return {static_cast<float>(advantage_sum) / count, static_cast<float>(log_prob_sum) / count};
  }
  /// How many tokens are penalised (none without a valid token).
  VERL_KERNELS_HD std::int64_t selected_count(std::int64_t valid) const {
    if (valid <= 0) return 0;
    const auto count = static_cast<std::int64_t>(static_cast<double>(valid) * kl_cov_ratio);
    return count > 1 ? count : 1;
  }

  VERL_KERNELS_HD PpoToken token(const Row&, const PolicyTokenInput& in, float row_weight, bool select_valid) const {
    using detail::add_rn;
    using detail::mul_rn;
    const float log_ratio = in.log_prob - in.old_log_prob;
    const float ratio = detail::ppo_exp(log_ratio);
    const bool valid = in.mask != 0.0f;
    const float surrogate = -in.advantage * ratio;
    const float abs_log_ratio = detail::ppo_abs(log_ratio);
    const float loss = in.selected ? add_rn(surrogate, mul_rn(coef, abs_log_ratio)) : surrogate;
    PpoToken t;
    t.loss_term = detail::ppo_row_term(loss * in.is_weight, in.mask, select_valid);
    t.kl_term = valid ? abs_log_ratio * in.mask : 0.0f;
    t.clipped = t.clipped_lower = false;
    const float upstream = (valid ? row_weight : 0.0f) * in.is_weight;
    // d|x|/dx = sign(x) (0 at 0); the surrogate's part goes through exp's r.
    const float penalty_slope = in.selected ? mul_rn(coef, detail::ppo_sign(log_ratio)) : 0.0f;
    t.grad = add_rn(mul_rn(mul_rn(upstream, -in.advantage), ratio), mul_rn(upstream, penalty_slope));
    return t;
  }
};

/// The kernel parameters of a verl::algo policy loss: kernel_policy_loss(algo::CISPO{...}).
inline VanillaPPOParams kernel_policy_loss(const algo::VanillaPPO& loss) { return VanillaPPOParams::from(loss); }
inline GPGParams kernel_policy_loss(const algo::GPGLoss& loss) { return GPGParams::from(loss); }
inline ReinforceParams kernel_policy_loss(const algo::ReinforceLoss& loss) { return ReinforceParams::from(loss); }
inline CISPOParams kernel_policy_loss(const algo::CISPO& loss) { return CISPOParams::from(loss); }
inline SAPOParams kernel_policy_loss(const algo::SAPO& loss) { return SAPOParams::from(loss); }
inline GSPOParams kernel_policy_loss(const algo::GSPO& loss) { return GSPOParams::from(loss); }
inline GeoMeanParams kernel_policy_loss(const algo::GeoMean& loss) { return GeoMeanParams::from(loss); }
inline ClipCovParams kernel_policy_loss(const algo::ClipCov& loss) { return ClipCovParams::from(loss); }
inline KLCovParams kernel_policy_loss(const algo::KLCov& loss) { return KLCovParams::from(loss); }

// ---- the row walkers shared by the kernel and the host -------------------------------------------------

namespace detail {

template <class Loss>
constexpr void check_kernel_policy_loss() {
  VERL_STATIC_ASSERT(KernelPolicyLoss<Loss>,
                     POLICY_LOSS_KERNEL_NEEDS_A_KERNEL_POLICY_LOSS_WITH_ROW_TYPE_FLAGS_AND_TOKEN_MATH);
}

/// Per-row sums of the row walker: loss (row-weighted later), ppo_kl terms, clip counts.
struct PpoRow {
  double loss_sum;
  double kl_sum;
  long long clipped;
  long long clipped_lower;
};

template <class Loss>
VERL_KERNELS_HD PolicyTokenInput policy_token_input(const PolicyLossInputs& in, std::int64_t row, std::int64_t i) {
  PolicyTokenInput t;
  t.log_prob = in.log_prob[i];
  t.old_log_prob = Loss::kReadsOldLogProb ? in.old_log_prob[i] : 0.0f;
  t.advantage = in.advantages_per_row ? in.advantages[row] : in.advantages[i];
  t.mask = in.response_mask[i];
  t.is_weight = in.rollout_is_weights != nullptr ? in.rollout_is_weights[i] : 1.0f;
  t.selected = in.token_selection != nullptr && in.token_selection[i] != 0;
  return t;
}

/// The row pass over tokens first, first + step, ... of `row`.
template <class Loss>
VERL_KERNELS_HD PolicyRowSums policy_row_sums(const Loss& loss, const PolicyLossInputs& in, std::int64_t row,
                                              std::int64_t first, std::int64_t step) {
  PolicyRowSums sums{{0.0, 0.0, 0.0}};
  if constexpr (Loss::kRowPass)
    for (std::int64_t t = first; t < in.cols; t += step)
      loss.add_row_terms(sums, policy_token_input<Loss>(in, row, row * in.cols + t));
  return sums;
}

/// The token pass over tokens first, first + step, ... of `row`: writes their gradients and
/// returns their sums.
template <class Loss>
VERL_KERNELS_HD PpoRow policy_token_pass(const Loss& loss, const PolicyLossInputs& in, const typename Loss::Row& state,
                                         std::int64_t row, float row_weight, bool select_valid, float* grad,
                                         std::int64_t first, std::int64_t step) {
  PpoRow sums{0, 0, 0, 0};
  for (std::int64_t t = first; t < in.cols; t += step) {
    const std::int64_t i = row * in.cols + t;
    const PpoToken tok = loss.token(state, policy_token_input<Loss>(in, row, i), row_weight, select_valid);
    grad[i] = tok.grad;
    sums.loss_sum += static_cast<double>(tok.loss_term);
    sums.kl_sum += static_cast<double>(tok.kl_term);
    sums.clipped += tok.clipped;
    sums.clipped_lower += tok.clipped_lower;
  }
  return sums;
}

/// A row's share of pg_loss before the batch scale.
template <class Loss>
VERL_KERNELS_HD double weighted_row_loss(const PpoRow& row, const Aggregation& a, std::int64_t length) {
  if constexpr (Loss::kOwnReduction) return row.loss_sum;
  return a.drops(length) ? 0.0 : row.loss_sum * static_cast<double>(a.row_weight(length));
}

/// pg_loss and the metrics from the batch totals (loss_sum already row-weighted).
template <class Loss>
VERL_KERNELS_HD PolicyLossState finish_policy_loss(const PpoRow& total, const Aggregation& a, double tokens,
                                                   std::int64_t rows) {
  const float pg_loss = Loss::kOwnReduction ? static_cast<float>(total.loss_sum) / static_cast<float>(rows)
                                            : static_cast<float>(total.loss_sum * static_cast<double>(a.scale));
  return PolicyLossState{pg_loss, masked_mean_of(static_cast<double>(total.clipped), tokens),
                         masked_mean_of(total.kl_sum, tokens),
                         masked_mean_of(static_cast<double>(total.clipped_lower), tokens)};
}

template <class Loss>
LossAggMode effective_mode(LossAggMode mode) {
  return Loss::kForcesSeqMeanTokenMean ? LossAggMode::seq_mean_token_mean : mode;
}

inline void check_policy_loss_inputs(const PolicyLossInputs& in, bool reads_old_log_prob) {
  check_batch_shape(in.rows, in.cols);
  if (in.rows * in.cols == 0) return;
  VERL_CHECK_ARG(in.log_prob != nullptr, "log_prob: expected a ({}, {}) device array, got null", in.rows, in.cols);
  VERL_CHECK_ARG(in.advantages != nullptr, "advantages: expected a device array, got null");
  VERL_CHECK_ARG(in.response_mask != nullptr, "response_mask: expected a ({}, {}) device array, got null", in.rows,
                 in.cols);
  VERL_CHECK_ARG(!reads_old_log_prob || in.old_log_prob != nullptr,
                 "old_log_prob: expected a ({}, {}) device array for this loss, got null", in.rows, in.cols);
}

template <class Loss>
constexpr TokenSelection token_selection_of() {
  if constexpr (requires { Loss::kSelection; }) {
    return Loss::kSelection;
  } else {
    return TokenSelection::none;
  }
}

/// The batch-level choice of the selection pass on one host thread (the kernels make the same
/// choice; only their double sums run in another order): 1 in `selection` (B, T) for each chosen
/// token. `valid`: the mask's valid tokens.
template <class Loss>
void select_tokens_sequential(const Loss& loss, const PolicyLossInputs& in, std::int64_t valid,
                              std::uint8_t* selection) {
  const std::int64_t n = in.rows * in.cols;
  std::fill(selection, selection + n, std::uint8_t{0});
  double advantage_sum = 0, log_prob_sum = 0;
  for (std::int64_t r = 0; r < in.rows; ++r)
    for (std::int64_t t = 0; t < in.cols; ++t) {
      const PolicyTokenInput tok = policy_token_input<Loss>(in, r, r * in.cols + t);
      if (tok.mask > 0.0f) {
        advantage_sum += static_cast<double>(tok.advantage);
        log_prob_sum += static_cast<double>(tok.log_prob);
      }
    }
  const CovarianceCentres centres = loss.centres(advantage_sum, log_prob_sum, valid);
  if constexpr (Loss::kSelection == TokenSelection::random_in_covariance_band) {
    std::vector<std::int64_t> candidates;
    for (std::int64_t r = 0; r < in.rows; ++r)
      for (std::int64_t t = 0; t < in.cols; ++t)
        if (loss.candidate(policy_token_input<Loss>(in, r, r * in.cols + t), centres))
          candidates.push_back(r * in.cols + t);
    const auto size = static_cast<std::int64_t>(candidates.size());
    const std::int64_t chosen = std::min(size, loss.budget(valid));
    if (chosen < size) {
      std::vector<std::uint64_t> engine_state(Mt19937_64::kStateSize);
      choose_front(candidates.data(), size, chosen, loss.seed, engine_state.data());
    }
    for (std::int64_t k = 0; k < chosen; ++k) selection[candidates[static_cast<std::size_t>(k)]] = 1;
  } else if constexpr (Loss::kSelection == TokenSelection::top_covariance) {
    std::vector<std::pair<std::uint64_t, std::int64_t>> keyed;
    for (std::int64_t r = 0; r < in.rows; ++r)
      for (std::int64_t t = 0; t < in.cols; ++t) {
        const PolicyTokenInput tok = policy_token_input<Loss>(in, r, r * in.cols + t);
        if (tok.mask > 0.0f)
          keyed.emplace_back(covariance_rank_key(token_covariance(tok, centres), true), r * in.cols + t);
      }
    const auto count = static_cast<std::size_t>(loss.selected_count(valid));
    // Larger key first, then batch order: the order of the kernel's stable descending radix sort.
    std::sort(keyed.begin(), keyed.end(), [](const auto& a, const auto& b) {
      return a.first != b.first ? a.first > b.first : a.second < b.second;
    });
    for (std::size_t k = 0; k < count && k < keyed.size(); ++k) selection[keyed[k].second] = 1;
  }
}

/// The kernel's algorithm on one host thread, rows in order (the host tests check it against
/// verl::algo; the kernel differs only in the order of its double sums). `grad` is (B, T).
template <class Loss>
PolicyLossState policy_loss_sequential(const PolicyLossInputs& in, const Loss& loss, LossAggMode mode,
                                       const GlobalBatchInfo& info, float* grad) {
  check_kernel_policy_loss<Loss>();
  check_policy_loss_inputs(in, Loss::kReadsOldLogProb);
  const HostMaskCounts counts(in.response_mask, in.rows, in.cols);
  const Aggregation a = counts.aggregation(effective_mode<Loss>(mode), info, in.cols);
  PolicyLossInputs run = in;
  std::vector<std::uint8_t> selection;
  if constexpr (token_selection_of<Loss>() != TokenSelection::none) {
    selection.resize(static_cast<std::size_t>(in.rows * in.cols));
    select_tokens_sequential(loss, in, counts.tokens, selection.data());
    run.token_selection = selection.data();
  }
  PpoRow total{0, 0, 0, 0};
  for (std::int64_t r = 0; r < in.rows; ++r) {
    const std::int64_t length = counts.lengths[static_cast<std::size_t>(r)];
    typename Loss::Row state{};
    if constexpr (Loss::kRowPass) state = loss.finish_row(policy_row_sums(loss, run, r, 0, 1), {length, in.rows});
    PpoRow row = policy_token_pass(loss, run, state, r, a.gradient_weight(length), a.selects_valid(), grad, 0, 1);
    if constexpr (Loss::kOwnReduction) row.loss_sum = state.loss;
    total.loss_sum += weighted_row_loss<Loss>(row, a, length);
    total.kl_sum += row.kl_sum;
    total.clipped += row.clipped;
    total.clipped_lower += row.clipped_lower;
  }
  return finish_policy_loss<Loss>(total, a, static_cast<double>(counts.tokens), in.rows);
}

}  // namespace detail

}  // namespace verl::kernels
