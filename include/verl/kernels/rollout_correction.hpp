// Host side of rollout_correction.cuh: verl's rollout correction (truncated IS weights, rejection
// sampling, off-policy metrics; CPU reference verl::algo::compute_rollout_correction_and_rejection_mask)
// and the bypass_mode policy loss built on it (CPU reference verl::algo::BypassMode).
//
// The work splits into row passes on the device and a finish on the host:
//   1. per row (`correction_row`): the row's token sums of every metric, its three off-policy
//      log-prob sums, the rejection decision of every option, and the corrected mask
//      m * keep. Sequence-level IS needs the row's log-ratio sum before its weights, so its
//      weight terms take a second walk over the row.
//   2. host (`finish_correction_rows`): the rows' statistics, combined in row order with
//      verl::algo's own formulas (its helpers are called where it has them), give every metric
//      except two that need a second token pass, and the batch mean of the clamped weights.
//   3. per row (`importance_row`, IS only): the effective-sample-size terms around that mean, the
//      truncated weights min(w, threshold) and their sums; the host then finishes ESS and the
//      batch-normalisation divisor, and a last element-wise pass divides the weights by it.
//
// Row order and summation order. A row is walked by a team of kTeamLanes (8) lanes: the token at
// column j belongs to lane j % 8 for the row's whole 8-token chunks, and the trailing cols % 8
// tokens form a tail summed in column order; the lanes are then added 0..7 and the tail last.
// This is exactly verl::algo's sum_row_terms (lane_sum over kSumLanes = 8 lanes), so every double
// that verl::algo takes from sum_row_terms is bit-identical here; the off-policy row sums that
// verl::algo adds in plain column order are added in column order (the team's terms are
// broadcast to every lane, which adds them one by one). On the device a team is 8 threads of a
// warp (4 rows per warp); on the host (`detail::rollout_correction_sequential`) one thread plays
// the 8 lanes. Rows are combined on the host in row order, as verl::algo does.
//
// What cannot be bit-identical: verl::algo accumulates kl, k3_kl and chi2_token's token sums, and
// the token-level batch-normalisation sum, in one running double over the whole batch, which no
// parallel order reproduces: here each row is summed on its own and the rows are added in order
// (the float32 results differ only when the double sums straddle a float32 rounding boundary,
// at most 1 ulp). The device's exp is taken in double and rounded once (almost always the
// correctly rounded float), glibc's expf is within 0.502 ulp: a rare 1-ulp difference in a weight
// or a k3 term. Maxima and minima
// over equal values may differ in the sign of a zero.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "verl/algo/policy_losses/bypass_mode.hpp"
#include "verl/algo/rollout_correction.hpp"
#include "verl/core/error.hpp"
#include "verl/core/metrics.hpp"
#include "verl/kernels/detail/host_device.hpp"
#include "verl/kernels/detail/launch.hpp"
#include "verl/kernels/policy_loss.hpp"

namespace verl::kernels {

/// verl's 11 rollout_rs options: a configuration has each at most once.
inline constexpr int kMaxRejectionCriteria = static_cast<int>(algo::rejection_option_names.size());
inline constexpr int kDivergenceEstimators = 3;  ///< k1, k2, k3

/// One rejection option with its bounds as verl compares them: in float32 (torch rounds verl's
/// Python numbers), k1's in log space; the double bounds feed the metrics.
struct RejectionCriterionParams {
  algo::RejectionLevel level = algo::RejectionLevel::token;
  algo::DivergenceEstimator estimator = algo::DivergenceEstimator::k1;
  bool two_sided = true;    ///< k1: bounded on both sides
  float lower = 0;          ///< k1: log(lower ratio bound); 0 otherwise
  float upper = 0;          ///< k1: log(upper ratio bound); the divergence bound otherwise
  float clamp_low = 0;      ///< the metrics' std clamps the statistic to [clamp_low, upper]
  double lower_bound = 0;   ///< `lower` in double
  double upper_bound = 0;   ///< `upper` in double

  VERL_KERNELS_HD bool per_token() const { return level == algo::RejectionLevel::token; }
  VERL_KERNELS_HD int estimator_index() const { return static_cast<int>(estimator); }
  /// Whether a token (or a sequence) with statistic v stays.
  VERL_KERNELS_HD bool keeps(float v) const { return two_sided ? (v >= lower && v <= upper) : v <= upper; }
  /// verl's option name, e.g. "seq_mean_k3".
  std::string name() const { return algo::RejectionCriterion{level, estimator, 0, 0}.name(); }
};

/// verl::algo::RolloutCorrection flattened for a kernel argument.
struct RolloutCorrectionParams {
  bool importance_sampling = false;  ///< rollout_is set
  bool sequence_level = false;       ///< rollout_is == "sequence"
  bool batch_normalize = false;
  double threshold = 2.0;            ///< rollout_is_threshold
  float weight_lower = 0.5f;         ///< IcePop's lower bound, else float(1 / threshold) (the fractions')
  float weight_upper = 2.0f;         ///< float(threshold)
  bool icepop = false;               ///< weights outside [weight_lower, weight_upper] are zeroed, not truncated
  int criteria_count = 0;
  RejectionCriterionParams criteria[kMaxRejectionCriteria] = {};
  /// The token option of each estimator (index into criteria), or -1.
  int token_criterion[kDivergenceEstimators] = {-1, -1, -1};
  /// Whether any option reads the estimator's statistic.
  bool reads_estimator[kDivergenceEstimators] = {false, false, false};

  static RolloutCorrectionParams from(const algo::RolloutCorrection& settings) {
    RolloutCorrectionParams p;
    if (settings.rollout_is) {
      VERL_CHECK_ARG(settings.rollout_is_threshold > 0, "rollout_is_threshold: expected a positive value, got {}",
                     settings.rollout_is_threshold);
      p.importance_sampling = true;
      p.sequence_level = *settings.rollout_is == algo::ImportanceSamplingLevel::sequence;
      p.threshold = settings.rollout_is_threshold;
      p.weight_upper = static_cast<float>(settings.rollout_is_threshold);
      p.icepop = settings.rollout_is_threshold_lower.has_value();
      p.weight_lower = static_cast<float>(p.icepop ? *settings.rollout_is_threshold_lower : 1.0 / settings.rollout_is_threshold);
    }
    p.batch_normalize = settings.rollout_is_batch_normalize;
    VERL_CHECK_ARG(settings.rollout_rs.size() <= static_cast<std::size_t>(kMaxRejectionCriteria),
                   "rollout_rs: expected at most {} options, got {}", kMaxRejectionCriteria,
                   settings.rollout_rs.size());
    for (const algo::RejectionCriterion& c : settings.rollout_rs) {
      const std::string name = c.name();
      for (int k = 0; k < p.criteria_count; ++k)
        VERL_CHECK_ARG(p.criteria[k].name() != name, "rollout_rs: expected each option once, got '{}' twice", name);
      RejectionCriterionParams& out = p.criteria[p.criteria_count];
      out.level = c.level;
      out.estimator = c.estimator;
      out.two_sided = c.two_sided();
      // As verl::algo: k1 compares -log-ratio with log(bounds), computed in double.
      out.upper_bound = out.two_sided ? std::log(c.upper) : c.upper;
      out.lower_bound = out.two_sided ? std::log(c.lower) : 0.0;
      out.upper = static_cast<float>(out.upper_bound);
      out.lower = static_cast<float>(out.lower_bound);
      out.clamp_low = out.two_sided ? out.lower : 0.0f;
      p.reads_estimator[out.estimator_index()] = true;
      if (out.per_token()) p.token_criterion[out.estimator_index()] = p.criteria_count;
      ++p.criteria_count;
    }
    return p;
  }
};

/// verl::algo::BypassMode's knobs: the loss run on the corrected batch and the correction.
struct BypassModeParams {
  algo::BypassLossType loss_type = algo::BypassLossType::ppo_clip;
  VanillaPPOParams ppo_clip{};  ///< read for loss_type ppo_clip
  RolloutCorrectionParams correction{};

  static BypassModeParams from(const algo::BypassMode& loss) {
    BypassModeParams p;
    p.loss_type = loss.loss_type;
    // The clip knobs are validated only where they are used, as verl::algo does.
    if (loss.loss_type == algo::BypassLossType::ppo_clip) p.ppo_clip = VanillaPPOParams::from(loss.ppo_clip);
    p.correction = RolloutCorrectionParams::from(loss.rollout_correction);
    return p;
  }
};

/// The kernel parameters of verl::algo::BypassMode (run by bypass_mode_policy_loss, not by
/// policy_loss: it is a correction pass followed by one of two KernelPolicyLoss kernels).
inline BypassModeParams kernel_policy_loss(const algo::BypassMode& loss) { return BypassModeParams::from(loss); }

/// The (B, T) row-major inputs of a correction: the training policy's log-probs, the rollout
/// policy's, and the 0/1 mask (device pointers for the kernels, host pointers for the host walk).
struct RolloutCorrectionBatch {
  const float* log_prob = nullptr;
  const float* rollout_log_prob = nullptr;
  const float* response_mask = nullptr;
  std::int64_t rows = 0, cols = 0;
};

/// What bypass_mode returns besides its gradient: pg_loss and the loss's metrics, and the merged
/// metrics verl reports (the loss's "actor/..." ones and every "rollout_corr/..." one).
struct BypassModeResult {
  PolicyLossState state;
  Metrics metrics;
};

namespace detail {

/// Lanes of a row walk: verl::algo's kSumLanes, whose order the walk reproduces.
inline constexpr int kTeamLanes = 8;
static_assert(kTeamLanes == algo::detail::kSumLanes, "the row walk must use verl::algo's summation lanes");

// ---- element-wise math (float32, verl::algo's steps) -------------------------------------------

/// exp of a float32; on the device in double, rounded once (nearly always correctly rounded,
/// where CUDA's expf is up to 2 ulp off; glibc's expf, which verl::algo calls, is within 0.502 ulp).
#if defined(__CUDA_ARCH__)
VERL_KERNELS_HD float correction_exp(float x) { return static_cast<float>(exp(static_cast<double>(x))); }
#else
VERL_KERNELS_HD float correction_exp(float x) { return std::exp(x); }
#endif

VERL_KERNELS_HD float clamp_log_ratio(float x) { return ppo_clamp(x, -kLogRatioBound, kLogRatioBound); }
/// std::max(acc, v) and std::min(acc, v): a NaN v never replaces acc.
VERL_KERNELS_HD float larger_of(float acc, float v) { return acc < v ? v : acc; }
VERL_KERNELS_HD float smaller_of(float acc, float v) { return v < acc ? v : acc; }
/// verl::algo's masked_mean_f: float(sum) / (float(count) + 1e-8), IEEE division on the device.
VERL_KERNELS_HD float correction_mean(double sum, double count) {
  return div_rn(static_cast<float>(sum), add_rn(static_cast<float>(count), 1e-8f));
}
/// The divergence statistic of a clamped log-ratio xc (rho = exp(xc)): k1 = -xc,
/// k2 = xc^2 / 2, k3 = exp(xc) - 1 - xc.
VERL_KERNELS_HD float divergence_of(int estimator, float xc, float rho) {
  if (estimator == 0) return -xc;
  if (estimator == 1) return mul_rn(0.5f, mul_rn(xc, xc));
  return (rho - 1.0f) - xc;
}
/// A sequence weight: exp of the row's clamped log-ratio sum.
VERL_KERNELS_HD float sequence_weight_of(double log_ratio_sum) {
  return correction_exp(clamp_log_ratio(static_cast<float>(log_ratio_sum)));
}
/// valid ? term * m : 0, the terms verl::algo sums.
VERL_KERNELS_HD float valid_term(bool valid, float term, float mask) { return valid ? mul_rn(term, mask) : 0.0f; }

// ---- per-token terms and per-row sums ------------------------------------------------------------

/// One token's contributions to a row walk: terms summed over the lanes (sum_row_terms), terms
/// summed in column order, 0/1 tallies, and values whose row maximum and minimum are kept
/// (valid tokens only).
template <int L, int O, int C, int E>
struct TokenTerms {
  static constexpr int kLane = L, kOrdered = O, kTally = C, kExtreme = E;
  float lane[L > 0 ? L : 1];
  float ordered[O > 0 ? O : 1];
  std::int32_t tally[C > 0 ? C : 1];
  float extreme[E > 0 ? E : 1];
  bool valid;

  VERL_KERNELS_HD static TokenTerms none() {
    TokenTerms t;
    for (float& v : t.lane) v = 0.0f;
    for (float& v : t.ordered) v = 0.0f;
    for (std::int32_t& v : t.tally) v = 0;
    for (float& v : t.extreme) v = 0.0f;
    t.valid = false;
    return t;
  }
};

/// A row's (or one lane's) sums of TokenTerms.
template <class Terms>
struct RowSums {
  double lane[Terms::kLane > 0 ? Terms::kLane : 1];
  double ordered[Terms::kOrdered > 0 ? Terms::kOrdered : 1];
  std::int32_t tally[Terms::kTally > 0 ? Terms::kTally : 1];
  float max[Terms::kExtreme > 0 ? Terms::kExtreme : 1];
  float min[Terms::kExtreme > 0 ? Terms::kExtreme : 1];

  VERL_KERNELS_HD static RowSums empty() {
    RowSums s;
    for (double& v : s.lane) v = 0.0;
    for (double& v : s.ordered) v = 0.0;
    for (std::int32_t& v : s.tally) v = 0;
    for (float& v : s.max) v = -std::numeric_limits<float>::infinity();
    for (float& v : s.min) v = std::numeric_limits<float>::infinity();
    return s;
  }
  /// Tallies and extremes, whose combination does not depend on order.
  VERL_KERNELS_HD void add_unordered(const Terms& t) {
    for (int q = 0; q < Terms::kTally; ++q) tally[q] += t.tally[q];
    if (t.valid)
      for (int q = 0; q < Terms::kExtreme; ++q) {
        max[q] = larger_of(max[q], t.extreme[q]);
        min[q] = smaller_of(min[q], t.extreme[q]);
      }
  }
  VERL_KERNELS_HD void add_lane_terms(const Terms& t) {
    for (int q = 0; q < Terms::kLane; ++q) lane[q] += static_cast<double>(t.lane[q]);
  }
};

/// The host's team: one thread plays the 8 lanes, in lane order.
struct SequentialTeam {
  static constexpr int kLanesPerThread = kTeamLanes;
  VERL_KERNELS_HD int lane(int i) const { return i; }
  VERL_KERNELS_HD std::int64_t first_token() const { return 0; }
  VERL_KERNELS_HD std::int64_t token_step() const { return 1; }
  template <class Terms>
  VERL_KERNELS_HD float ordered_term(const Terms* terms, int lane, int q) const {
    return terms[lane].ordered[q];
  }
  template <class Terms>
  VERL_KERNELS_HD float lane_term(const Terms* terms, int lane, int q) const {
    return terms[lane].lane[q];
  }
  /// lane_sum's combination: lanes 0..7 from 0, then the tail.
  template <class Terms>
  VERL_KERNELS_HD RowSums<Terms> combine(const RowSums<Terms>* lanes, const double* ordered, const double* tail) const {
    RowSums<Terms> row = RowSums<Terms>::empty();
    for (int q = 0; q < Terms::kLane; ++q) {
      double total = 0;
      for (int k = 0; k < kTeamLanes; ++k) total += lanes[k].lane[q];
      row.lane[q] = total + tail[q];
    }
    for (int q = 0; q < Terms::kOrdered; ++q) row.ordered[q] = ordered[q];
    for (int k = 0; k < kTeamLanes; ++k) {
      for (int q = 0; q < Terms::kTally; ++q) row.tally[q] += lanes[k].tally[q];
      for (int q = 0; q < Terms::kExtreme; ++q) {
        row.max[q] = larger_of(row.max[q], lanes[k].max[q]);
        row.min[q] = smaller_of(row.min[q], lanes[k].min[q]);
      }
    }
    return row;
  }
};

/// Walks one row of `cols` tokens with a team of kTeamLanes lanes (see the file comment):
/// `token(j)` gives column j's terms. Every thread of a device team returns the same sums.
template <class Terms, class Team, class Token>
VERL_KERNELS_HD RowSums<Terms> walk_row(const Team& team, std::int64_t cols, const Token& token) {
  RowSums<Terms> lanes[Team::kLanesPerThread];
  for (auto& s : lanes) s = RowSums<Terms>::empty();
  double ordered[Terms::kOrdered > 0 ? Terms::kOrdered : 1] = {};
  double tail[Terms::kLane > 0 ? Terms::kLane : 1] = {};
  for (std::int64_t base = 0; base < cols; base += kTeamLanes) {
    // Uniform over a team: every lane takes part in the broadcasts below.
    const int active = cols - base < kTeamLanes ? static_cast<int>(cols - base) : kTeamLanes;
    Terms terms[Team::kLanesPerThread];
    for (int i = 0; i < Team::kLanesPerThread; ++i) {
      const int k = team.lane(i);
      terms[i] = k < active ? token(base + k) : Terms::none();
      lanes[i].add_unordered(terms[i]);
      if (active == kTeamLanes) lanes[i].add_lane_terms(terms[i]);
    }
    for (int k = 0; k < active; ++k) {
      for (int q = 0; q < Terms::kOrdered; ++q) ordered[q] += static_cast<double>(team.ordered_term(terms, k, q));
      if (active < kTeamLanes)  // the row's tail, in column order
        for (int q = 0; q < Terms::kLane; ++q) tail[q] += static_cast<double>(team.lane_term(terms, k, q));
    }
  }
  return team.combine(lanes, ordered, tail);
}

// ---- pass 1: the correction's row walk --------------------------------------------------------------

/// Slots of pass 1's terms (estimator e = 0, 1, 2 for k1, k2, k3).
struct CorrectionSlot {
  // lane sums
  static constexpr int weight = 0, weight_clamped = 1, weight_squared = 2;  ///< IS: w m, clamp(w) m, clamp(w)^2 m
  static constexpr int kl = 3, k3 = 4, rho_squared = 5;                     ///< off-policy
  static constexpr int stat = 6;        ///< + e: the statistic * m
  static constexpr int rs_clamped = 9;  ///< + e: the token option's clamped statistic * m
  static constexpr int rs_squared = 12;
  static constexpr int weight_raw = 15;  ///< IS: the raw weight w m (the sequences' fractions)
  static constexpr int lanes = 16;
  // column-order sums
  static constexpr int training = 0, rollout = 1, log_ratio = 2, ordered = 3;
  // tallies
  static constexpr int length = 0, non_binary = 1, weight_high = 2, weight_low = 3;
  static constexpr int rs_high = 4, rs_low = 7, rs_rejected = 10;  ///< + e: the token option's counts
  static constexpr int token_rejected = 13;                        ///< valid tokens a token option drops
  static constexpr int weight_outside = 14;                        ///< raw weights outside the bounds (IcePop)
  static constexpr int tallies = 15;
  // extremes
  static constexpr int weight_extreme = 0, stat_extreme = 1;  ///< + e
  static constexpr int extremes = 4;
};

using CorrectionTerms =
    TokenTerms<CorrectionSlot::lanes, CorrectionSlot::ordered, CorrectionSlot::tallies, CorrectionSlot::extremes>;
using CorrectionSums = RowSums<CorrectionTerms>;

/// The weight verl applies for a raw weight w: TIS truncates at the upper bound (NaN stays, as
/// torch.clamp(max=)), IcePop keeps w inside [lower, upper] and zeroes it elsewhere.
VERL_KERNELS_HD float applied_weight(const RolloutCorrectionParams& p, float w) {
  if (p.icepop) return (w >= p.weight_lower && w <= p.weight_upper) ? w : 0.0f;
  return smaller_of(w, p.weight_upper);
}

/// The IS metric terms of one token's raw weight w (= base weight * m), in pass 1's slots: the
/// applied weight a (its sum, clamp(a, 0, upper) and its square, its extremes) and the raw weight
/// (its sum and its counts beyond the bounds), as verl 0.9.1's compute_is_metrics.
template <class Terms>
VERL_KERNELS_HD void add_weight_terms(Terms& t, const RolloutCorrectionParams& p, float w, float m, bool valid) {
  const float a = applied_weight(p, w);
  const float clamped = ppo_clamp(a, 0.0f, p.weight_upper);
  t.lane[CorrectionSlot::weight] = valid_term(valid, a, m);
  t.lane[CorrectionSlot::weight_clamped] = valid_term(valid, clamped, m);
  t.lane[CorrectionSlot::weight_squared] = valid_term(valid, mul_rn(clamped, clamped), m);
  t.lane[CorrectionSlot::weight_raw] = valid_term(valid, w, m);
  t.tally[CorrectionSlot::weight_high] = valid && w > p.weight_upper;
  t.tally[CorrectionSlot::weight_low] = valid && w < p.weight_lower;
  t.tally[CorrectionSlot::weight_outside] = valid && (w < p.weight_lower || w > p.weight_upper);
  t.extreme[CorrectionSlot::weight_extreme] = a;
}

/// Pass 1's token: off-policy terms, token-level IS terms, every estimator's statistic and the
/// token options' decisions; writes m * keep to the corrected mask (when given).
struct CorrectionToken {
  const RolloutCorrectionParams* params;
  const float* log_prob;  ///< the row's
  const float* rollout_log_prob;
  const float* mask;
  float* corrected_mask;  ///< the row's, or null

  VERL_KERNELS_HD CorrectionTerms operator()(std::int64_t j) const {
    using S = CorrectionSlot;
    const RolloutCorrectionParams& p = *params;
    const float lp = log_prob[j], ro = rollout_log_prob[j], m = mask[j];
    const bool valid = m != 0.0f;
    CorrectionTerms t = CorrectionTerms::none();
    t.valid = valid;
    t.tally[S::length] = valid;
    t.tally[S::non_binary] = !(m == 0.0f || m == 1.0f);

    // Off-policy: k3 takes the unclamped ratio, chi2 the clamped one (one exp unless clamped).
    const float x = lp - ro;
    const float xc = clamp_log_ratio(x);
    const float rho = correction_exp(xc);
    const float ratio = xc == x ? rho : correction_exp(x);
    t.ordered[S::training] = valid_term(valid, lp, m);
    t.ordered[S::rollout] = valid_term(valid, ro, m);
    t.ordered[S::log_ratio] = valid_term(valid, x, m);
    t.lane[S::kl] = valid_term(valid, ro - lp, m);
    t.lane[S::k3] = valid_term(valid, (ratio - x) - 1.0f, m);
    t.lane[S::rho_squared] = valid_term(valid, mul_rn(rho, rho), m);

    if (p.importance_sampling && !p.sequence_level) add_weight_terms(t, p, mul_rn(rho, m), m, valid);

    float keep = 1.0f;
    for (int e = 0; e < kDivergenceEstimators; ++e) {
      if (!p.reads_estimator[e]) continue;
      const float v = divergence_of(e, xc, rho);
      t.lane[S::stat + e] = valid_term(valid, v, m);
      t.extreme[S::stat_extreme + e] = v;
      const int option = p.token_criterion[e];
      if (option < 0) continue;
      const RejectionCriterionParams& c = p.criteria[option];
      const bool kept = c.keeps(v);
      keep = mul_rn(keep, kept ? 1.0f : 0.0f);
      const float clamped = ppo_clamp(v, c.clamp_low, c.upper);
      t.lane[S::rs_clamped + e] = valid_term(valid, clamped, m);
      t.lane[S::rs_squared + e] = valid_term(valid, mul_rn(clamped, clamped), m);
      t.tally[S::rs_high + e] = valid && v > c.upper;
      t.tally[S::rs_low + e] = valid && v < c.lower;
      t.tally[S::rs_rejected + e] = valid && !kept;
    }
    t.tally[S::token_rejected] = valid && !(keep > 0.5f);
    if (corrected_mask != nullptr) corrected_mask[j] = mul_rn(m, keep);
    return t;
  }
};

/// Sequence-level IS: the weight terms of a row whose valid tokens all weigh `weight`.
struct SequenceWeightToken {
  using Terms = TokenTerms<4, 0, 3, 1>;
  const RolloutCorrectionParams* params;
  const float* mask;  ///< the row's
  float weight;

  VERL_KERNELS_HD Terms operator()(std::int64_t j) const {
    const float m = mask[j];
    const bool valid = m != 0.0f;
    // Pass 1's weight math on a scratch token; correction_row copies the four sums, three tallies
    // and the extreme back into pass 1's slots.
    CorrectionTerms full = CorrectionTerms::none();
    add_weight_terms(full, *params, mul_rn(weight, m), m, valid);
    Terms t = Terms::none();
    t.valid = valid;
    for (int q = 0; q < 3; ++q) t.lane[q] = full.lane[CorrectionSlot::weight + q];
    t.lane[3] = full.lane[CorrectionSlot::weight_raw];
    t.tally[0] = full.tally[CorrectionSlot::weight_high];
    t.tally[1] = full.tally[CorrectionSlot::weight_low];
    t.tally[2] = full.tally[CorrectionSlot::weight_outside];
    t.extreme[0] = full.extreme[CorrectionSlot::weight_extreme];
    return t;
  }
};

/// One row of pass 1 as the host finish reads it.
struct RolloutCorrectionRow {
  CorrectionSums sums;
  std::int32_t rejected;  ///< valid tokens the corrected mask drops (token and sequence options)
};

/// A rejection option's row value: the sequence statistic (sum, mean or max of the valid tokens';
/// 0 for a row without any), or for a token option the mean of its tokens' statistics.
VERL_KERNELS_HD float rejection_row_value(const RejectionCriterionParams& c, const CorrectionSums& s) {
  const int e = c.estimator_index();
  if (c.level == algo::RejectionLevel::seq_max) {
    const float v = s.max[CorrectionSlot::stat_extreme + e];
    return v == -std::numeric_limits<float>::infinity() ? 0.0f : v;
  }
  const double row_sum = s.lane[CorrectionSlot::stat + e];
  if (c.level == algo::RejectionLevel::seq_sum) return static_cast<float>(row_sum);
  return correction_mean(row_sum, static_cast<double>(s.tally[CorrectionSlot::length]));
}

/// Pass 1 on one row: its statistics, and the corrected mask m * keep (when given).
template <class Team>
VERL_KERNELS_HD RolloutCorrectionRow correction_row(const Team& team, const RolloutCorrectionParams& p,
                                                    const RolloutCorrectionBatch& in, std::int64_t row,
                                                    float* corrected_mask) {
  const std::int64_t offset = row * in.cols;
  float* out_mask = corrected_mask != nullptr ? corrected_mask + offset : nullptr;
  RolloutCorrectionRow r;
  r.sums = walk_row<CorrectionTerms>(
      team, in.cols,
      CorrectionToken{&p, in.log_prob + offset, in.rollout_log_prob + offset, in.response_mask + offset, out_mask});
  if (p.importance_sampling && p.sequence_level) {
    const float weight = sequence_weight_of(r.sums.ordered[CorrectionSlot::log_ratio]);
    const auto w = walk_row<SequenceWeightToken::Terms>(team, in.cols,
                                                        SequenceWeightToken{&p, in.response_mask + offset, weight});
    for (int q = 0; q < 3; ++q) r.sums.lane[CorrectionSlot::weight + q] = w.lane[q];
    r.sums.lane[CorrectionSlot::weight_raw] = w.lane[3];
    r.sums.tally[CorrectionSlot::weight_high] = w.tally[0];
    r.sums.tally[CorrectionSlot::weight_low] = w.tally[1];
    r.sums.tally[CorrectionSlot::weight_outside] = w.tally[2];
    r.sums.max[CorrectionSlot::weight_extreme] = w.max[0];
    r.sums.min[CorrectionSlot::weight_extreme] = w.min[0];
  }
  bool sequence_rejected = false;
  for (int k = 0; k < p.criteria_count; ++k)
    if (!p.criteria[k].per_token()) sequence_rejected |= !p.criteria[k].keeps(rejection_row_value(p.criteria[k], r.sums));
  r.rejected = sequence_rejected ? r.sums.tally[CorrectionSlot::length] : r.sums.tally[CorrectionSlot::token_rejected];
  if (sequence_rejected && out_mask != nullptr)
    for (std::int64_t j = team.first_token(); j < in.cols; j += team.token_step())
      out_mask[j] = mul_rn(in.response_mask[offset + j], 0.0f);
  return r;
}

// ---- pass 2: the IS weights around the batch means ---------------------------------------------------

/// Pass 2's token: the ESS term (clamp(a, 0, threshold) / shifted_mean)^2 m and the applied
/// weight a (truncated, or IcePop-filtered; written when asked) with its term.
struct ImportanceToken {
  using Terms = TokenTerms<2, 0, 0, 0>;
  static constexpr int ess_slot = 0, truncated_slot = 1;
  const RolloutCorrectionParams* params;
  const float* log_prob;  ///< the row's
  const float* rollout_log_prob;
  const float* mask;
  float sequence_weight;  ///< the row's weight at sequence level
  float shifted_mean;     ///< masked_mean(clamp(w)) + 1e-8
  float* weights;         ///< the row's, or null

  VERL_KERNELS_HD Terms operator()(std::int64_t j) const {
    const RolloutCorrectionParams& p = *params;
    const float m = mask[j];
    const bool valid = m != 0.0f;
    const float base =
        p.sequence_level ? sequence_weight : correction_exp(clamp_log_ratio(log_prob[j] - rollout_log_prob[j]));
    const float w = mul_rn(base, m);
    const float truncated = applied_weight(p, w);
    const float normalized = div_rn(ppo_clamp(truncated, 0.0f, p.weight_upper), shifted_mean);
    Terms t = Terms::none();
    t.lane[ess_slot] = valid_term(valid, mul_rn(normalized, normalized), m);
    t.lane[truncated_slot] = valid_term(valid, truncated, m);
    if (weights != nullptr) weights[j] = truncated;
    return t;
  }
};

/// One row of pass 2: the ESS terms' sum and the truncated weights' sum.
struct ImportanceRow {
  double ess_sum;
  double truncated_sum;
};

template <class Team>
VERL_KERNELS_HD ImportanceRow importance_row(const Team& team, const RolloutCorrectionParams& p,
                                             const RolloutCorrectionBatch& in, std::int64_t row,
                                             const RolloutCorrectionRow& pass1, float shifted_mean, float* weights) {
  const std::int64_t offset = row * in.cols;
  const float weight = p.sequence_level ? sequence_weight_of(pass1.sums.ordered[CorrectionSlot::log_ratio]) : 0.0f;
  const auto s = walk_row<ImportanceToken::Terms>(
      team, in.cols,
      ImportanceToken{&p, in.log_prob + offset, in.rollout_log_prob + offset, in.response_mask + offset, weight,
                      shifted_mean, weights != nullptr ? weights + offset : nullptr});
  return {s.lane[ImportanceToken::ess_slot], s.lane[ImportanceToken::truncated_slot]};
}

// ---- host: argument checks and the finish --------------------------------------------------------------

inline void check_correction_batch(const RolloutCorrectionBatch& in) {
  check_batch_shape(in.rows, in.cols);
  VERL_CHECK_ARG(in.cols <= INT32_MAX, "cols: expected < 2^31 (32-bit row tallies), got {}", in.cols);
  if (in.rows * in.cols == 0) return;
  VERL_CHECK_ARG(in.log_prob != nullptr, "log_prob: expected a ({}, {}) array, got null", in.rows, in.cols);
  VERL_CHECK_ARG(in.rollout_log_prob != nullptr, "rollout_log_prob: expected a ({}, {}) array, got null", in.rows,
                 in.cols);
  VERL_CHECK_ARG(in.response_mask != nullptr, "response_mask: expected a ({}, {}) array, got null", in.rows,
                 in.cols);
}

/// The outputs are written while the inputs are still read (the sequence-level passes re-read the
/// mask), so neither may share storage with an input.
inline void check_correction_outputs(const RolloutCorrectionBatch& in, const float* weights,
                                     const float* corrected_mask) {
  for (const float* out : {weights, corrected_mask}) {
    if (out == nullptr) continue;
    const char* name = out == weights ? "rollout_is_weights" : "corrected_mask";
    VERL_CHECK_ARG(out != in.response_mask && out != in.log_prob && out != in.rollout_log_prob,
                   "{}: expected an array of its own, got one of the inputs (in-place is not supported)", name);
  }
  VERL_CHECK_ARG(weights == nullptr || weights != corrected_mask,
                 "corrected_mask: expected an array of its own, got rollout_is_weights");
}

/// What an all-zero mask raises: verl's rollout correction, or bypass_mode's own check before it.
enum class EmptyMaskError { rollout_correction, bypass_mode };

[[noreturn]] inline void throw_empty_mask(EmptyMaskError who, std::int64_t rows, std::int64_t cols) {
  if (who == EmptyMaskError::bypass_mode)
    verl::detail::throw_invalid_argument(
        "response_mask: bypass_mode expected at least one valid token (1), got none in a ({}, {}) mask", rows, cols);
  verl::detail::throw_invalid_argument(
      "response_mask: expected at least one valid token (1), got none in a ({}, {}) mask", rows, cols);
}

/// Pass 1's rows combined: the metrics they give (keys without "rollout_corr/") and what pass 2
/// needs.
struct CorrectionSummary {
  Metrics metrics;
  algo::detail::MaskCounts counts;
  float shifted_mean = 0;  ///< ESS: masked_mean(clamp(a, 0, threshold)) + 1e-8
};

/// The IS metrics (all but ESS and the batch-norm factor): of the applied weights, with the
/// fractions of the raw ones.
inline void finish_importance_metrics(const RolloutCorrectionParams& p, std::span<const RolloutCorrectionRow> rows,
                                      CorrectionSummary& out) {
  using S = CorrectionSlot;
  using namespace algo::detail;
  const double valid = static_cast<double>(out.counts.tokens);
  const float upper = p.weight_upper, lower = p.weight_lower;
  double sum = 0, clamped_sum = 0, clamped_squares = 0;
  std::int64_t high = 0, low = 0, outside = 0;
  float max = -std::numeric_limits<float>::infinity(), min = std::numeric_limits<float>::infinity();
  std::vector<float> row_means(rows.size()), raw_row_means(rows.size()), sequence_log_ratio(rows.size());
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const CorrectionSums& s = rows[i].sums;
    sum += s.lane[S::weight];
    clamped_sum += s.lane[S::weight_clamped];
    clamped_squares += s.lane[S::weight_squared];
    high += s.tally[S::weight_high];
    low += s.tally[S::weight_low];
    outside += s.tally[S::weight_outside];
    max = larger_of(max, s.max[S::weight_extreme]);
    min = smaller_of(min, s.min[S::weight_extreme]);
    row_means[i] = masked_mean_f(s.lane[S::weight], static_cast<double>(s.tally[S::length]));
    raw_row_means[i] = masked_mean_f(s.lane[S::weight_raw], static_cast<double>(s.tally[S::length]));
    sequence_log_ratio[i] = static_cast<float>(s.ordered[S::log_ratio]);
  }
  Metrics& metrics = out.metrics;
  metrics["rollout_is_mean"] = masked_mean_f(sum, valid);
  if (!p.sequence_level) {
    token_weight_metrics(metrics, high, low, max, min, valid);
  } else {
    sequence_weight_metrics(metrics, sequence_log_ratio, upper, lower);
  }
  metrics["rollout_is_std"] = out.counts.tokens > 1 ? masked_std(clamped_sum, clamped_squares, valid) : 0.0f;
  out.shifted_mean = masked_mean_f(clamped_sum, valid) + 1e-8f;
  row_mean_weight_metrics(metrics, row_means, raw_row_means, upper, lower);
  if (p.icepop) metrics["rollout_is_oob_ratio"] = masked_mean_f(static_cast<double>(outside), valid);
}

/// Every rejection option's metrics and the combined mask's, as compute_rollout_rejection_mask.
inline void finish_rejection_metrics(const RolloutCorrectionParams& p, std::span<const RolloutCorrectionRow> rows,
                                     CorrectionSummary& out) {
  using S = CorrectionSlot;
  using namespace algo::detail;
  const double valid = static_cast<double>(out.counts.tokens);
  std::vector<float> row_values(rows.size());
  for (int k = 0; k < p.criteria_count; ++k) {
    const RejectionCriterionParams& c = p.criteria[k];
    const std::string prefix = "rollout_rs_" + c.name();
    const int e = c.estimator_index();
    const bool per_token = c.per_token();
    const float upper_f = c.upper, clamp_low = c.clamp_low;
    RejectionTokenSums sums;
    std::int64_t rejected_tokens = 0, rejected_rows = 0;
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const CorrectionSums& s = rows[i].sums;
      const std::int32_t length = s.tally[S::length];
      const float value = rejection_row_value(c, s);
      row_values[i] = value;
      if (per_token) {
        sums.high += s.tally[S::rs_high + e];
        sums.low += s.tally[S::rs_low + e];
        sums.sum += s.lane[S::stat + e];
        sums.clamped_sum += s.lane[S::rs_clamped + e];
        sums.clamped_squares += s.lane[S::rs_squared + e];
        sums.max = std::max(sums.max, s.max[S::stat_extreme + e]);
        sums.min = std::min(sums.min, s.min[S::stat_extreme + e]);
        const std::int32_t rejected = s.tally[S::rs_rejected + e];
        rejected_tokens += rejected;
        rejected_rows += rejected > 0 ? 1 : 0;
      } else {
        // Every valid token of the row is judged by the row's value.
        sums.add_sequence_row(value, length, clamp_low, upper_f);
        if (!c.keeps(value)) {
          rejected_tokens += length;
          rejected_rows += length > 0 ? 1 : 0;
        }
      }
    }
    algo::detail::finish_rejection_metrics(out.metrics, prefix, per_token, sums, out.counts, row_values,
                                           c.upper_bound, c.lower_bound, c.two_sided);
    out.metrics[prefix + "_masked_fraction"] = masked_mean_f(static_cast<double>(rejected_tokens), valid);
    out.metrics[prefix + "_seq_masked_fraction"] =
        out.counts.nonempty_rows > 0 ? fraction(rejected_rows, out.counts.nonempty_rows) : 0.0f;
  }
  double rejected_tokens = 0;
  std::int64_t rows_with_rejection = 0;
  for (const RolloutCorrectionRow& r : rows) {
    rejected_tokens += static_cast<double>(r.rejected);
    rows_with_rejection += r.rejected > 0 ? 1 : 0;
  }
  out.metrics["rollout_rs_masked_fraction"] = masked_mean_f(rejected_tokens, valid);
  out.metrics["rollout_rs_seq_masked_fraction"] = fraction(rows_with_rejection, static_cast<std::int64_t>(rows.size()));
}

/// compute_offpolicy_metrics from the rows' sums, with verl::algo's per-row expressions.
inline void finish_offpolicy_metrics(std::span<const RolloutCorrectionRow> rows, CorrectionSummary& out) {
  using S = CorrectionSlot;
  algo::detail::OffpolicySums sums;
  for (const RolloutCorrectionRow& r : rows) {
    const CorrectionSums& s = r.sums;
    sums.kl += s.lane[S::kl];
    sums.k3 += s.lane[S::k3];
    sums.rho_squared += s.lane[S::rho_squared];
    sums.add_row(s.ordered[S::training], s.ordered[S::rollout], s.ordered[S::log_ratio],
                 static_cast<double>(s.tally[S::length]));
  }
  out.metrics.merge(sums.metrics(static_cast<double>(rows.size()), static_cast<double>(out.counts.tokens)));
}

/// Pass 1's rows (downloaded from the device, O(rows) numbers) combined in row order: checks the
/// mask (0/1, at least one valid token; `empty` names the caller's error) and computes every
/// metric but ESS and the batch-norm factor.
inline CorrectionSummary finish_correction_rows(const RolloutCorrectionParams& p,
                                                std::span<const RolloutCorrectionRow> rows, std::int64_t cols,
                                                EmptyMaskError empty) {
  using S = CorrectionSlot;
  CorrectionSummary out;
  out.counts.cols = cols;
  out.counts.row_lengths.resize(static_cast<Index>(rows.size()));
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (rows[i].sums.tally[S::non_binary] > 0)
      verl::detail::throw_invalid_argument("response_mask: expected a 0/1 mask (row {})", i);
    out.counts.row_lengths[static_cast<Index>(i)] = rows[i].sums.tally[S::length];
  }
  out.counts.finish();
  if (out.counts.tokens == 0) throw_empty_mask(empty, static_cast<std::int64_t>(rows.size()), cols);
  if (p.importance_sampling) finish_importance_metrics(p, rows, out);
  if (p.criteria_count > 0) finish_rejection_metrics(p, rows, out);
  finish_offpolicy_metrics(rows, out);
  return out;
}

/// Pass 2's rows: ESS, and with batch_normalize the factor; returns the divisor of the truncated
/// weights (0: leave them as they are).
inline float finish_importance_rows(const RolloutCorrectionParams& p, std::span<const ImportanceRow> rows,
                                    CorrectionSummary& summary) {
  using namespace algo::detail;
  const auto& counts = summary.counts;
  const double valid = static_cast<double>(counts.tokens);
  double normalized_squares = 0;
  for (const ImportanceRow& r : rows) normalized_squares += r.ess_sum;
  const float mean_square = masked_mean_f(normalized_squares, valid);
  VERL_CHECK_ARG(mean_square != 0.0f,
                 "rollout_is_threshold: every IS weight was zeroed (IcePop bounds [{}, {}]), so the effective sample "
                 "size is 1/0 (verl raises ZeroDivisionError)",
                 p.weight_lower, p.weight_upper);
  summary.metrics["rollout_is_eff_sample_size"] = 1.0 / static_cast<double>(mean_square);
  if (!p.batch_normalize) return 0.0f;
  float weights_mean = 0;
  if (!p.sequence_level) {
    double truncated_sum = 0;
    for (const ImportanceRow& r : rows) truncated_sum += r.truncated_sum;
    weights_mean = masked_mean_f(truncated_sum, valid);
  } else {
    double sequence_sum = 0;
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const Index length = counts.row_lengths[static_cast<Index>(i)];
      if (length == 0) continue;
      sequence_sum += masked_mean_f(rows[i].truncated_sum, static_cast<double>(length));
    }
    weights_mean = static_cast<float>(sequence_sum) / std::max(static_cast<float>(counts.nonempty_rows), 1e-8f);
  }
  if (weights_mean > 1e-8f) {
    summary.metrics["rollout_is_batch_norm_factor"] = weights_mean;
    return weights_mean;
  }
  summary.metrics["rollout_is_batch_norm_factor"] = 1.0;
  return 0.0f;
}

/// verl's keys: "rollout_corr/" + the correction's own.
inline Metrics prefixed_correction_metrics(const Metrics& metrics) {
  Metrics out;
  for (const auto& [key, value] : metrics) out.emplace("rollout_corr/" + key, value);
  return out;
}

/// The metrics verl reports for bypass_mode's loss: ppo_clip's three, or reinforce's ppo_kl.
inline Metrics bypass_loss_metrics(const PolicyLossState& s, algo::BypassLossType type) {
  Metrics m;
  m["actor/ppo_kl"] = s.ppo_kl;
  if (type == algo::BypassLossType::ppo_clip) {
    m["actor/pg_clipfrac"] = s.pg_clipfrac;
    m["actor/pg_clipfrac_lower"] = s.pg_clipfrac_lower;
  }
  return m;
}

/// The device algorithm on one host thread (host pointers): the same row code, the same finish.
/// Writes the IS weights (when IS is on and `weights` is given) and the corrected mask (when
/// given), both (B, T); returns every metric under its "rollout_corr/" key.
inline Metrics rollout_correction_sequential(const RolloutCorrectionBatch& in, const RolloutCorrectionParams& p,
                                             float* weights, float* corrected_mask,
                                             EmptyMaskError empty = EmptyMaskError::rollout_correction) {
  check_correction_batch(in);
  check_correction_outputs(in, weights, corrected_mask);
  if (in.rows * in.cols == 0) throw_empty_mask(empty, in.rows, in.cols);
  std::vector<RolloutCorrectionRow> rows(static_cast<std::size_t>(in.rows));
  for (std::int64_t r = 0; r < in.rows; ++r)
    rows[static_cast<std::size_t>(r)] = correction_row(SequentialTeam{}, p, in, r, corrected_mask);
  CorrectionSummary summary = finish_correction_rows(p, rows, in.cols, empty);
  if (p.importance_sampling) {
    float* out = weights;
    std::vector<ImportanceRow> is_rows(rows.size());
    for (std::int64_t r = 0; r < in.rows; ++r)
      is_rows[static_cast<std::size_t>(r)] = importance_row(SequentialTeam{}, p, in, r, rows[static_cast<std::size_t>(r)],
                                                            summary.shifted_mean, out);
    const float divisor = finish_importance_rows(p, is_rows, summary);
    if (divisor != 0.0f && out != nullptr)
      for (std::int64_t i = 0; i < in.rows * in.cols; ++i) out[i] = div_rn(out[i], divisor);
  }
  return prefixed_correction_metrics(summary.metrics);
}

/// bypass_mode on one host thread: the correction, then policy_loss_sequential with vanilla PPO
/// on the corrected mask or REINFORCE with the IS weights. `grad` is (B, T).
inline BypassModeResult bypass_mode_sequential(const PolicyLossInputs& in, const BypassModeParams& p,
                                               LossAggMode mode, const GlobalBatchInfo& info, float* grad) {
  check_policy_loss_inputs(in, true);
  const auto n = static_cast<std::size_t>(in.rows * in.cols);
  std::vector<float> weights(n), corrected(n);
  const RolloutCorrectionBatch batch{in.log_prob, in.old_log_prob, in.response_mask, in.rows, in.cols};
  Metrics correction = rollout_correction_sequential(batch, p.correction, weights.data(), corrected.data(),
                                                     EmptyMaskError::bypass_mode);
  PolicyLossInputs run = in;
  run.response_mask = corrected.data();
  run.rollout_is_weights = nullptr;
  BypassModeResult out;
  if (p.loss_type == algo::BypassLossType::reinforce) {
    if (p.correction.importance_sampling) run.rollout_is_weights = weights.data();
    out.state = policy_loss_sequential(run, ReinforceParams{}, mode, info, grad);
  } else {
    out.state = policy_loss_sequential(run, p.ppo_clip, mode, info, grad);
  }
  out.metrics = bypass_loss_metrics(out.state, p.loss_type);
  out.metrics.merge(correction);
  return out;
}

}  // namespace detail

}  // namespace verl::kernels
