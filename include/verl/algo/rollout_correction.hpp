// Rollout correction (verl/trainer/ppo/rollout_corr_helper.py): truncated importance-sampling
// (IS) weights, divergence-based rejection sampling (RS) and off-policy diagnostics between the
// policy being trained and the rollout policy that generated the batch.
//
// Everything here is detached in verl (computed under no_grad): the results are constants for
// the losses that use them. Metric values are float32 results as verl's .item() returns them;
// their keys are verl's, without the "rollout_corr/" prefix except in
// compute_rollout_correction_and_rejection_mask, which adds it as verl does.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "verl/algo/loss_aggregation.hpp"
#include "verl/algo/policy_losses/elementwise.hpp"
#include "verl/core/error.hpp"
#include "verl/core/metrics.hpp"
#include "verl/core/tensor.hpp"
#include "verl/core/enum_names.hpp"

namespace verl::algo {

// ---- settings ---------------------------------------------------------------------------------

/// verl's rollout_is: one IS weight per token, or one per sequence (the product of its token
/// ratios) broadcast over its tokens.
enum class ImportanceSamplingLevel { token, sequence };

inline constexpr EnumNames importance_sampling_level_names{
    std::pair{ImportanceSamplingLevel::token, std::string_view("token")},
    std::pair{ImportanceSamplingLevel::sequence, std::string_view("sequence")}};

constexpr std::string_view to_string(ImportanceSamplingLevel level) {
  return importance_sampling_level_names.name(level);
}

inline ImportanceSamplingLevel parse_importance_sampling_level(std::string_view name) {
  return importance_sampling_level_names.parse(name, "rollout_is", " (or null)");
}

/// Where a rejection statistic lives: per token, or per sequence as the sum, mean or max of its
/// valid tokens' values.
enum class RejectionLevel { token, seq_sum, seq_mean, seq_max };
/// The divergence estimator on the ±20-clamped log-ratio x = log(pi_train / pi_rollout):
/// k1 = -x, k2 = x^2 / 2, k3 = exp(x) - 1 - x.
enum class DivergenceEstimator { k1, k2, k3 };

/// One rejection option ("seq_mean_k3"): a token (or its whole sequence) is kept when its
/// statistic is within bounds. k1 options bound the ratio on both sides (compared in log space:
/// log(lower) <= k1 <= log(upper)); k2/k3 options bound the divergence from above.
struct RejectionCriterion {
  RejectionLevel level = RejectionLevel::token;
  DivergenceEstimator estimator = DivergenceEstimator::k1;
  double lower = 0;  ///< k1 only: lower bound on the ratio
  double upper = 0;  ///< k1: upper bound on the ratio; k2/k3: upper bound on the divergence

  bool two_sided() const { return estimator == DivergenceEstimator::k1; }
  bool per_token() const { return level == RejectionLevel::token; }
  /// verl's option name, e.g. "token_k1", "seq_max_k3".
  std::string name() const {
    static constexpr std::array<std::string_view, 4> levels = {"token", "seq_sum", "seq_mean", "seq_max"};
    return fmt::format("{}_k{}", levels[static_cast<std::size_t>(level)], static_cast<int>(estimator) + 1);
  }
};

/// verl's supported rollout_rs options (seq_max has no k1).
inline constexpr std::array<std::string_view, 11> rejection_option_names = {
    "token_k1",    "token_k2",    "token_k3",    "seq_sum_k1", "seq_sum_k2", "seq_sum_k3",
    "seq_mean_k1", "seq_mean_k2", "seq_mean_k3", "seq_max_k2", "seq_max_k3"};

/// verl's rollout_rs_threshold: one number, or a string with one entry per option.
using RejectionThresholdSpec = std::variant<double, std::string>;

namespace detail {

inline std::string_view trim(std::string_view s) {
  const auto first = s.find_first_not_of(" \t\n\r\f\v");
  if (first == std::string_view::npos) return {};
  const auto last = s.find_last_not_of(" \t\n\r\f\v");
  return s.substr(first, last - first + 1);
}

inline std::vector<std::string_view> split_nonempty(std::string_view s, char separator) {
  std::vector<std::string_view> parts;
  std::size_t start = 0;
  while (start <= s.size()) {
    const auto end = std::min(s.find(separator, start), s.size());
    const auto part = trim(s.substr(start, end - start));
    if (!part.empty()) parts.push_back(part);
    start = end + 1;
  }
  return parts;
}

/// A number as Python's float() reads it (surrounding whitespace allowed).
inline double parse_threshold_number(std::string_view text, std::string_view option) {
  const std::string s(trim(text));
  char* end = nullptr;
  const double value = s.empty() ? 0.0 : std::strtod(s.c_str(), &end);
  VERL_CHECK_ARG(!s.empty() && end == s.c_str() + s.size(),
                 "rollout_rs_threshold: expected a number for option '{}', got '{}'", option, text);
  return value;
}

inline RejectionCriterion parse_rejection_option(std::string_view option) {
  RejectionCriterion c;
  const auto underscore = option.rfind("_k");
  const bool known = std::find(rejection_option_names.begin(), rejection_option_names.end(), option) !=
                     rejection_option_names.end();
  if (!known || underscore == std::string_view::npos)
    verl::detail::throw_invalid_argument("rollout_rs: expected options among {}, got '{}'",
                           fmt::join(rejection_option_names, ", "), option);
  const auto level = option.substr(0, underscore);
  c.level = level == "token"      ? RejectionLevel::token
            : level == "seq_sum"  ? RejectionLevel::seq_sum
            : level == "seq_mean" ? RejectionLevel::seq_mean
                                  : RejectionLevel::seq_max;
  c.estimator = static_cast<DivergenceEstimator>(option.back() - '1');
  return c;
}

}  // namespace detail

/// Parses verl's rollout_rs ("token_k1,seq_mean_k3": comma separated, duplicates dropped) and
/// rollout_rs_threshold (one entry shared by all options, or one per option). A k1 entry is
/// "lower_upper" on the ratio, or a lone upper u meaning [1/u, u]; k2/k3 entries are one upper
/// bound. Every bound must be positive.
inline std::vector<RejectionCriterion> parse_rejection_criteria(std::string_view rollout_rs,
                                                                const RejectionThresholdSpec& rollout_rs_threshold) {
  std::vector<RejectionCriterion> criteria;
  std::vector<std::string> seen;
  for (const auto option : detail::split_nonempty(rollout_rs, ',')) {
    auto criterion = detail::parse_rejection_option(option);
    if (std::find(seen.begin(), seen.end(), option) != seen.end()) continue;
    seen.emplace_back(option);
    criteria.push_back(criterion);
  }
  VERL_CHECK_ARG(!criteria.empty(), "rollout_rs: expected at least one option among {}, got '{}'",
                 fmt::join(rejection_option_names, ", "), rollout_rs);

  std::vector<std::string> entries;
  if (const double* number = std::get_if<double>(&rollout_rs_threshold)) {
    entries.push_back(fmt::format("{}", *number));  // shortest round-trip text, like Python's str()
  } else {
    for (const auto part : detail::split_nonempty(std::get<std::string>(rollout_rs_threshold), ','))
      entries.emplace_back(part);
  }
  VERL_CHECK_ARG(!entries.empty(), "rollout_rs_threshold: expected at least one threshold, got none");
  VERL_CHECK_ARG(entries.size() == 1 || entries.size() == criteria.size(),
                 "rollout_rs_threshold: expected 1 threshold or {} (one per rollout_rs option), got {}",
                 criteria.size(), entries.size());

  for (std::size_t k = 0; k < criteria.size(); ++k) {
    auto& c = criteria[k];
    const std::string_view entry = entries.size() == 1 ? entries[0] : entries[k];
    const std::string option = c.name();
    if (c.two_sided()) {
      const auto underscore = entry.find('_');
      if (underscore != std::string_view::npos) {
        c.lower = detail::parse_threshold_number(entry.substr(0, underscore), option);
        c.upper = detail::parse_threshold_number(entry.substr(underscore + 1), option);
      } else {
        c.upper = detail::parse_threshold_number(entry, option);
        c.lower = 1.0 / c.upper;
      }
      VERL_CHECK_ARG(c.lower > 0 && c.upper > 0,
                     "rollout_rs_threshold: expected positive bounds for option '{}', got '{}'", option, entry);
      VERL_CHECK_ARG(c.lower <= c.upper, "rollout_rs_threshold: expected lower <= upper for option '{}', got '{}'",
                     option, entry);
    } else {
      VERL_CHECK_ARG(entry.find('_') == std::string_view::npos,
                     "rollout_rs_threshold: expected a single upper bound (no '_') for option '{}', got '{}'", option,
                     entry);
      c.upper = detail::parse_threshold_number(entry, option);
      VERL_CHECK_ARG(c.upper > 0, "rollout_rs_threshold: expected a positive bound for option '{}', got '{}'",
                     option, entry);
    }
  }
  return criteria;
}

/// verl's rollout_is_threshold: a number (TIS: truncate at it), or a string holding one number
/// (the same) or "lower_upper" (IcePop: zero the weights outside [lower, upper]).
using ImportanceThresholdSpec = std::variant<double, std::string>;

/// The bounds of a rollout_is_threshold: the upper one, and IcePop's lower one.
struct ImportanceThreshold {
  double upper = 2.0;
  std::optional<double> lower{};  ///< set: IcePop
};

/// verl 0.9.1's _parse_rollout_is_threshold: surrounding spaces stripped, "lower_upper" split at
/// the first '_'; bounds must be positive and lower <= upper.
inline ImportanceThreshold parse_importance_threshold(const ImportanceThresholdSpec& spec) {
  ImportanceThreshold threshold;
  if (const double* number = std::get_if<double>(&spec)) {
    threshold.upper = *number;
  } else {
    const std::string& text = std::get<std::string>(spec);
    const std::string_view trimmed = detail::trim(text);
    VERL_CHECK_ARG(!trimmed.empty(), "rollout_is_threshold: expected a number or \"lower_upper\", got an empty string");
    const auto number_of = [&](std::string_view part) {
      const std::string s(part);
      char* end = nullptr;
      const double value = s.empty() ? 0.0 : std::strtod(s.c_str(), &end);
      VERL_CHECK_ARG(!s.empty() && end == s.c_str() + s.size(),
                     "rollout_is_threshold: expected a number or \"lower_upper\", got '{}'", text);
      return value;
    };
    if (const auto cut = trimmed.find('_'); cut != std::string_view::npos) {
      threshold.lower = number_of(detail::trim(trimmed.substr(0, cut)));
      threshold.upper = number_of(detail::trim(trimmed.substr(cut + 1)));
    } else {
      threshold.upper = number_of(trimmed);
    }
  }
  VERL_CHECK_ARG(threshold.upper > 0 && std::isfinite(threshold.upper),
                 "rollout_is_threshold: expected a finite positive upper bound, got {}", threshold.upper);
  if (threshold.lower) {
    VERL_CHECK_ARG(*threshold.lower > 0 && std::isfinite(*threshold.lower),
                   "rollout_is_threshold: expected a finite positive lower bound, got {}", *threshold.lower);
    VERL_CHECK_ARG(*threshold.lower <= threshold.upper,
                   "rollout_is_threshold: expected lower <= upper, got lower {} and upper {}", *threshold.lower,
                   threshold.upper);
  }
  return threshold;
}

/// Typed rollout-correction settings.
struct RolloutCorrection {
  std::optional<ImportanceSamplingLevel> rollout_is;  ///< nullopt: no IS weights
  double rollout_is_threshold = 2.0;                  ///< TIS truncation / IcePop upper bound (> 0)
  std::optional<double> rollout_is_threshold_lower{}; ///< IcePop's lower bound (set: IcePop)
  bool rollout_is_batch_normalize = false;            ///< rescale the weights to mean 1
  std::vector<RejectionCriterion> rollout_rs;         ///< empty: no rejection sampling
};

/// verl's RolloutCorrectionConfig under its own keys and defaults (strings as in YAML).
struct RolloutCorrectionConfig {
  std::optional<std::string> rollout_is = std::string("sequence");
  std::optional<ImportanceThresholdSpec> rollout_is_threshold = ImportanceThresholdSpec(2.0);  ///< null disables IS weights too
  bool rollout_is_batch_normalize = false;
  std::optional<std::string> rollout_rs;
  std::optional<RejectionThresholdSpec> rollout_rs_threshold;
  std::string loss_type = "ppo_clip";  ///< read by bypass_mode: "ppo_clip" or "reinforce"
};

inline RolloutCorrection make_rollout_correction(const RolloutCorrectionConfig& config) {
  RolloutCorrection settings;
  if (config.rollout_is && config.rollout_is_threshold) {
    settings.rollout_is = parse_importance_sampling_level(*config.rollout_is);
    const ImportanceThreshold threshold = parse_importance_threshold(*config.rollout_is_threshold);
    settings.rollout_is_threshold = threshold.upper;
    settings.rollout_is_threshold_lower = threshold.lower;
  }
  settings.rollout_is_batch_normalize = config.rollout_is_batch_normalize;
  if (config.rollout_rs) {
    VERL_CHECK_ARG(config.rollout_rs_threshold.has_value(),
                   "rollout_rs_threshold: expected a threshold when rollout_rs is '{}', got null", *config.rollout_rs);
    settings.rollout_rs = parse_rejection_criteria(*config.rollout_rs, *config.rollout_rs_threshold);
  }
  return settings;
}

// ---- internals ----------------------------------------------------------------------------------

namespace detail {

inline constexpr float kRolloutSafetyBound = 20.0f;  ///< verl's SAFETY_BOUND on log-ratios before exp

inline const float* view_row(const ConstMatrixRefF& m, Index row) { return m.data() + row * m.outerStride(); }

/// float32 results of torch reductions, accumulated in double.
inline float mean_of(double sum, double count) { return static_cast<float>(sum) / static_cast<float>(count); }
inline float masked_mean_f(double masked_sum, double count) {
  return static_cast<float>(masked_sum) / (static_cast<float>(count) + 1e-8f);
}

/// Token-level IS weights' metrics (rollout_is="token"): the shares of valid tokens above and
/// below the thresholds, and the extreme weights.
inline void token_weight_metrics(Metrics& metrics, std::int64_t high, std::int64_t low, float max, float min,
                                 double valid) {
  metrics["rollout_is_ratio_fraction_high"] = masked_mean_f(static_cast<double>(high), valid);
  metrics["rollout_is_ratio_fraction_low"] = masked_mean_f(static_cast<double>(low), valid);
  metrics["rollout_is_max"] = max;
  metrics["rollout_is_min"] = min;
}

/// Statistics of a float32 vector the way torch reports them (.mean(), .std() unbiased, .max()).
struct VectorStats {
  float mean = 0, std = 0, max = 0, min = 0;
};
inline VectorStats vector_stats(std::span<const float> values) {
  VectorStats s;
  if (values.empty()) return s;
  double sum = 0;
  s.max = -std::numeric_limits<float>::infinity();
  s.min = std::numeric_limits<float>::infinity();
  for (float v : values) {
    sum += v;
    s.max = std::max(s.max, v);
    s.min = std::min(s.min, v);
  }
  const auto n = static_cast<double>(values.size());
  s.mean = mean_of(sum, n);
  if (values.size() > 1) {
    const double mean = sum / n;
    double squares = 0;
    for (float v : values) squares += (v - mean) * (v - mean);
    s.std = static_cast<float>(std::sqrt(squares / (n - 1)));
  }
  return s;
}

/// sqrt(max(E[x^2] - E[x]^2, 0)) over the masked values, evaluated in double: in float32 the
/// difference cancels catastrophically for a small spread, so the double result (verl's value up
/// to that float32 noise) is the faithful one.
inline float masked_std(double sum, double squares, double count) {
  const double denominator = static_cast<float>(count) + 1e-8f;  // masked_mean's, as torch rounds it
  const double mean = sum / denominator;
  const double variance = squares / denominator - mean * mean;
  return static_cast<float>(std::sqrt(std::max(variance, 0.0)));
}

inline float fraction(std::int64_t hits, std::int64_t total) {
  return static_cast<float>(hits) / static_cast<float>(total);
}

/// Row-wise masked sums and valid counts of a per-token value (verl's masked_sum(axis=-1)).
template <class TokenValue>
std::vector<double> masked_row_sums(const ConstMatrixRefF& mask, TokenValue&& value) {
  std::vector<double> sums(static_cast<std::size_t>(mask.rows()), 0.0);
  for (Index i = 0; i < mask.rows(); ++i) {
    const float* m = view_row(mask, i);
    double sum = 0;
    for (Index j = 0; j < mask.cols(); ++j)
      if (m[j] != 0.0f) sum += static_cast<double>(value(i, j) * m[j]);
    sums[static_cast<std::size_t>(i)] = sum;
  }
  return sums;
}

inline void require_valid_token(const MaskCounts& counts) {
  VERL_CHECK_ARG(counts.tokens > 0, "response_mask: expected at least one valid token (1), got none in a ({}, {}) mask",
                 counts.row_lengths.size(), counts.cols);
}

inline float divergence(DivergenceEstimator estimator, float log_ratio) {
  const float x = std::min(std::max(log_ratio, -kRolloutSafetyBound), kRolloutSafetyBound);
  switch (estimator) {
    case DivergenceEstimator::k1: return -x;
    case DivergenceEstimator::k2: return 0.5f * (x * x);
    case DivergenceEstimator::k3: return (std::exp(x) - 1.0f) - x;
  }
  return 0.0f;
}

struct WeightRowCounts {
  std::int32_t high = 0, low = 0, outside = 0;
};

/// One row of IS-weight metric terms (valid tokens only): the applied weight a * m, the raw weight
/// w * m, clamp(a, 0, upper) * m and its square; and the raw weights above `upper`, below `lower`,
/// and outside [lower, upper].
inline WeightRowCounts importance_weight_terms(const float* __restrict applied, const float* __restrict raw,
                                               const float* __restrict mask, float* __restrict applied_terms,
                                               float* __restrict raw_terms, float* __restrict clamped_terms,
                                               float* __restrict squared_terms, Index cols, float lower,
                                               float upper) {
  std::int32_t high = 0, low = 0, outside = 0;
  for (Index j = 0; j < cols; ++j) {
    const float a = applied[j], w = raw[j], m = mask[j];
    const bool valid = m != 0.0f;
    const float clamped = clamp_value(a, 0.0f, upper);
    applied_terms[j] = select(valid, a * m, 0.0f);
    raw_terms[j] = select(valid, w * m, 0.0f);
    clamped_terms[j] = select(valid, clamped * m, 0.0f);
    squared_terms[j] = select(valid, (clamped * clamped) * m, 0.0f);
    high += valid & (w > upper);
    low += valid & (w < lower);
    outside += valid & ((w < lower) | (w > upper));
  }
  return {high, low, outside};
}

/// (clamp(a, 0, upper) / (mean + 1e-8))^2 * m on valid tokens: the ESS terms of the applied weights.
inline void normalized_square_terms(const float* __restrict applied, const float* __restrict mask,
                                    float* __restrict terms, Index cols, float upper, float shifted_mean) {
  for (Index j = 0; j < cols; ++j) {
    const float normalized = clamp_value(applied[j], 0.0f, upper) / shifted_mean;
    terms[j] = select(mask[j] != 0.0f, (normalized * normalized) * mask[j], 0.0f);
  }
}

/// The token sums of verl's compute_rs_metrics for one option (the statistic a token is judged by:
/// its own, or its sequence's broadcast over the row).
struct RejectionTokenSums {
  double sum = 0, clamped_sum = 0, clamped_squares = 0;
  std::int64_t high = 0, low = 0;
  float max = -std::numeric_limits<float>::infinity();
  float min = std::numeric_limits<float>::infinity();

  /// A sequence option's row: each of its `length` valid tokens has the row's value, so the token
  /// sums take it `length` times at once (clamped to [clamp_low, upper] for the std).
  void add_sequence_row(float value, std::int64_t length, float clamp_low, float upper) {
    const double n = static_cast<double>(length);
    const double clamped = std::min(std::max(value, clamp_low), upper);
    sum += static_cast<double>(value) * n;
    clamped_sum += clamped * n;
    clamped_squares += clamped * clamped * n;
    if (length > 0) {
      max = std::max(max, value);
      min = std::min(min, value);
    }
  }
};

/// The divergence of every token of a row, one loop per estimator (k1 and k2 vectorise; k3 calls
/// exp()).
inline void divergence_row(const float* __restrict log_ratio, float* __restrict stat, Index cols,
                           DivergenceEstimator estimator) {
  switch (estimator) {
    case DivergenceEstimator::k1:
      for (Index j = 0; j < cols; ++j) stat[j] = -clamp_value(log_ratio[j], -kRolloutSafetyBound, kRolloutSafetyBound);
      break;
    case DivergenceEstimator::k2:
      for (Index j = 0; j < cols; ++j) {
        const float x = clamp_value(log_ratio[j], -kRolloutSafetyBound, kRolloutSafetyBound);
        stat[j] = 0.5f * (x * x);
      }
      break;
    case DivergenceEstimator::k3:
      for (Index j = 0; j < cols; ++j) stat[j] = divergence(DivergenceEstimator::k3, log_ratio[j]);
      break;
  }
}

/// A token option on one row: whether each token is kept (multiplied into `keep_all`), the terms
/// of the metric sums, and the counts; returns the number of valid tokens rejected.
inline std::int64_t token_rejection_row(const float* __restrict stat, const float* __restrict mask,
                                        float* __restrict keep_all, float* __restrict stat_terms,
                                        float* __restrict clamped_terms, float* __restrict squared_terms, Index cols,
                                        bool two_sided, float lower, float upper, float clamp_low,
                                        RejectionTokenSums& sums) {
  std::int32_t high = 0, low = 0, rejected = 0;
  for (Index j = 0; j < cols; ++j) {
    const float v = stat[j], m = mask[j];
    const bool valid = m != 0.0f;
    const bool below_upper = v <= upper;
    const bool keep = below_upper & ((v >= lower) | !two_sided);
    keep_all[j] *= indicator(keep);
    const float clamped = clamp_value(v, clamp_low, upper);
    stat_terms[j] = select(valid, v * m, 0.0f);
    clamped_terms[j] = select(valid, clamped * m, 0.0f);
    squared_terms[j] = select(valid, (clamped * clamped) * m, 0.0f);
    high += valid & (v > upper);
    low += valid & (v < lower);
    rejected += valid & !keep;
  }
  sums.high += high;
  sums.low += low;
  return rejected;
}

/// verl's compute_rs_metrics from the token sums and one value per row (the sequence statistic,
/// or for token options the row's masked mean of the token statistic).
inline void finish_rejection_metrics(Metrics& metrics, const std::string& prefix, bool per_token,
                                     const RejectionTokenSums& sums, const MaskCounts& counts,
                                     std::span<const float> row_values, double upper, double lower, bool two_sided) {
  const float upper_f = static_cast<float>(upper), lower_f = static_cast<float>(lower);
  const double valid = static_cast<double>(counts.tokens);
  std::vector<float> valid_rows;
  for (std::size_t i = 0; i < row_values.size(); ++i)
    if (counts.row_lengths[static_cast<Index>(i)] > 0) valid_rows.push_back(row_values[i]);
  const bool sequence_level = !per_token && !valid_rows.empty();
  const auto rows_above = [&](float bound) {
    return std::count_if(valid_rows.begin(), valid_rows.end(), [&](float v) { return v > bound; });
  };
  const auto rows_below = [&](float bound) {
    return std::count_if(valid_rows.begin(), valid_rows.end(), [&](float v) { return v < bound; });
  };
  const auto n_rows = static_cast<std::int64_t>(valid_rows.size());
  const VectorStats rows = vector_stats(valid_rows);

  metrics[prefix + "_mean"] = masked_mean_f(sums.sum, valid);
  metrics[prefix + "_max"] = sequence_level ? rows.max : sums.max;
  metrics[prefix + "_min"] = sequence_level ? rows.min : sums.min;
  if (sequence_level) {
    metrics[prefix + "_fraction_high"] = fraction(rows_above(upper_f), n_rows);
    metrics[prefix + "_fraction_low"] = two_sided ? fraction(rows_below(lower_f), n_rows) : 0.0f;
  } else {
    metrics[prefix + "_fraction_high"] = masked_mean_f(static_cast<double>(sums.high), valid);
    metrics[prefix + "_fraction_low"] = two_sided ? masked_mean_f(static_cast<double>(sums.low), valid) : 0.0f;
  }
  metrics[prefix + "_std"] = counts.tokens > 1 ? masked_std(sums.clamped_sum, sums.clamped_squares, valid) : 0.0f;
  if (!valid_rows.empty()) {
    float max_deviation = 0;
    for (float v : valid_rows) max_deviation = std::max(max_deviation, std::abs(v - 0.0f));
    metrics[prefix + "_seq_mean"] = rows.mean;
    metrics[prefix + "_seq_std"] = rows.std;
    metrics[prefix + "_seq_max"] = rows.max;
    metrics[prefix + "_seq_min"] = rows.min;
    metrics[prefix + "_seq_max_deviation"] = max_deviation;
    metrics[prefix + "_seq_fraction_high"] = fraction(rows_above(upper_f), n_rows);
    if (two_sided) metrics[prefix + "_seq_fraction_low"] = fraction(rows_below(lower_f), n_rows);
  } else {
    for (const char* key : {"_seq_mean", "_seq_std", "_seq_max", "_seq_min", "_seq_max_deviation",
                            "_seq_fraction_high", "_seq_fraction_low"})
      metrics[prefix + key] = 0.0;
  }
}

/// The sequence-level IS metrics over every row's log-ratio sum (fully masked rows: 0), compared
/// in log space.
inline void sequence_weight_metrics(Metrics& metrics, std::span<const float> sequence_log_ratio, float upper,
                                    float lower) {
  const auto rows = static_cast<std::int64_t>(sequence_log_ratio.size());
  const float log_upper = std::log(upper), log_lower = std::log(lower);
  const auto [lo, hi] = std::minmax_element(sequence_log_ratio.begin(), sequence_log_ratio.end());
  metrics["rollout_is_max"] = std::exp(std::min(*hi, kRolloutSafetyBound));
  metrics["rollout_is_min"] = std::exp(*lo);
  metrics["rollout_is_ratio_fraction_high"] =
      fraction(std::count_if(sequence_log_ratio.begin(), sequence_log_ratio.end(), [&](float v) { return v > log_upper; }), rows);
  metrics["rollout_is_ratio_fraction_low"] =
      fraction(std::count_if(sequence_log_ratio.begin(), sequence_log_ratio.end(), [&](float v) { return v < log_lower; }), rows);
}

/// The rollout_is_seq_* metrics of the per-row mean weights (0 for fully masked rows): the
/// statistics of the applied weights' means, the fractions of the raw weights' means (verl 0.9.1).
inline void row_mean_weight_metrics(Metrics& metrics, std::span<const float> row_means,
                                    std::span<const float> raw_row_means, float upper, float lower) {
  const auto rows = static_cast<std::int64_t>(row_means.size());
  const VectorStats s = vector_stats(row_means);
  float max_deviation = 0;
  for (float v : row_means) max_deviation = std::max(max_deviation, std::abs(v - 1.0f));
  metrics["rollout_is_seq_mean"] = s.mean;
  metrics["rollout_is_seq_std"] = s.std;
  metrics["rollout_is_seq_max"] = s.max;
  metrics["rollout_is_seq_min"] = s.min;
  metrics["rollout_is_seq_max_deviation"] = max_deviation;
  metrics["rollout_is_seq_fraction_high"] =
      fraction(std::count_if(raw_row_means.begin(), raw_row_means.end(), [&](float v) { return v > upper; }), rows);
  metrics["rollout_is_seq_fraction_low"] =
      fraction(std::count_if(raw_row_means.begin(), raw_row_means.end(), [&](float v) { return v < lower; }), rows);
}

/// compute_offpolicy_metrics' sums: the token sums (kl, k3, rho_squared: whoever walks the tokens
/// adds them) and the per-row terms of each row's masked means (add_row).
struct OffpolicySums {
  double kl = 0, k3 = 0, rho_squared = 0;
  double training_ppl = 0, training_log_ppl = 0, rollout_ppl = 0, rollout_log_ppl = 0;
  double diff_sum = 0, abs_diff_sum = 0, ppl_ratio = 0, chi2_seq = 0;
  float diff_max = -std::numeric_limits<float>::infinity(), diff_min = std::numeric_limits<float>::infinity();

  /// One row from its masked sums of log_prob, rollout_log_prob and their difference.
  void add_row(double training_sum, double rollout_sum, double log_ratio_sum, double length) {
    const float training_mean = masked_mean_f(training_sum, length);
    const float rollout_mean = masked_mean_f(rollout_sum, length);
    training_ppl += std::exp(-training_mean);
    training_log_ppl += -training_mean;
    rollout_ppl += std::exp(-rollout_mean);
    rollout_log_ppl += -rollout_mean;
    const float diff = rollout_mean - training_mean;
    diff_sum += diff;
    abs_diff_sum += std::abs(diff);
    diff_max = std::max(diff_max, diff);
    diff_min = std::min(diff_min, diff);
    ppl_ratio += std::exp(diff);
    const float sequence_log_ratio =
        std::min(std::max(static_cast<float>(log_ratio_sum), -kRolloutSafetyBound), kRolloutSafetyBound);
    chi2_seq += std::exp(2.0f * sequence_log_ratio);
  }

  [[nodiscard]] Metrics metrics(double rows, double valid_tokens) const {
    Metrics m;
    m["training_ppl"] = mean_of(training_ppl, rows);
    m["training_log_ppl"] = mean_of(training_log_ppl, rows);
    m["kl"] = masked_mean_f(kl, valid_tokens);
    m["k3_kl"] = masked_mean_f(k3, valid_tokens);
    m["rollout_ppl"] = mean_of(rollout_ppl, rows);
    m["rollout_log_ppl"] = mean_of(rollout_log_ppl, rows);
    m["log_ppl_diff"] = mean_of(diff_sum, rows);
    m["log_ppl_abs_diff"] = mean_of(abs_diff_sum, rows);
    m["log_ppl_diff_max"] = diff_max;
    m["log_ppl_diff_min"] = diff_min;
    m["ppl_ratio"] = mean_of(ppl_ratio, rows);
    // E[.] - 1 cancels in float32 when the policies agree; evaluated in double (see masked_std).
    m["chi2_token"] = static_cast<float>(rho_squared / static_cast<double>(static_cast<float>(valid_tokens) + 1e-8f) - 1.0);
    m["chi2_seq"] = static_cast<float>(chi2_seq / rows - 1.0);
    return m;
  }
};

}  // namespace detail

// ---- importance sampling ----------------------------------------------------------------------------

struct ImportanceWeights {
  MatrixF weights;  ///< applied IS weights (truncated, or IcePop-filtered; optionally normalised), 0 on padding
  Metrics metrics;  ///< rollout_is_*
};

/// verl 0.9.1's compute_rollout_correction_weights. `log_ratio` = log pi_train - log pi_rollout.
/// Raw weights: token level w = exp(clamp(x, ±20)), sequence level w = exp(clamp(sum_t x * m, ±20))
/// on every token of the row, zeroed on padding. Applied weights: TIS truncates at `threshold`;
/// IcePop (`threshold_lower` set) keeps w where lower <= w <= threshold and zeroes it elsewhere.
/// With `batch_normalize` the applied weights are divided by their (token or sequence) mean when
/// it exceeds 1e-8. The metrics describe the applied weights (mean, max/min, std and effective
/// sample size of the weights clamped to [0, threshold], the per-sequence means), while the
/// fractions above and below the bounds count the raw ones (the lower bound: threshold_lower, or
/// 1/threshold for TIS); IcePop adds rollout_is_oob_ratio.
inline ImportanceWeights compute_rollout_correction_weights(const ConstMatrixRefF& log_ratio,
                                                            const ConstMatrixRefF& response_mask,
                                                            ImportanceSamplingLevel level, double threshold = 2.0,
                                                            bool batch_normalize = false,
                                                            std::optional<double> threshold_lower = std::nullopt) {
  using namespace detail;
  VERL_CHECK_ARG(threshold > 0, "rollout_is_threshold: expected a positive value, got {}", threshold);
  if (threshold_lower)
    VERL_CHECK_ARG(*threshold_lower > 0 && *threshold_lower <= threshold,
                   "rollout_is_threshold: expected 0 < lower <= upper, got lower {} and upper {}", *threshold_lower,
                   threshold);
  verl::detail::require_same_shape("response_mask", shape_of(response_mask), "log_ratio", shape_of(log_ratio));
  const MaskCounts counts = count_mask("response_mask", response_mask);
  require_valid_token(counts);
  const Index rows = log_ratio.rows(), cols = log_ratio.cols();
  const bool per_token = level == ImportanceSamplingLevel::token;
  const bool icepop = threshold_lower.has_value();
  const auto clamp_log = [](float x) { return std::min(std::max(x, -kRolloutSafetyBound), kRolloutSafetyBound); };

  // Sequence log-ratios (float32 row sums): the sequence weights and their metrics use them.
  std::vector<float> sequence_log_ratio(static_cast<std::size_t>(rows), 0.0f);
  if (!per_token) {
    const auto sums = masked_row_sums(response_mask, [&](Index i, Index j) { return log_ratio(i, j); });
    for (std::size_t i = 0; i < sums.size(); ++i) sequence_log_ratio[i] = static_cast<float>(sums[i]);
  }
  const auto upper = static_cast<float>(threshold);
  const auto lower = static_cast<float>(icepop ? *threshold_lower : 1.0 / threshold);
  MatrixF raw(rows, cols);
  ImportanceWeights out;
  out.weights.resize(rows, cols);
  for (Index i = 0; i < rows; ++i) {
    const float* x = view_row(log_ratio, i);
    const float* m = view_row(response_mask, i);
    const float sequence_weight = std::exp(clamp_log(sequence_log_ratio[static_cast<std::size_t>(i)]));
    for (Index j = 0; j < cols; ++j) {
      const float w = (per_token ? std::exp(clamp_log(x[j])) : sequence_weight) * m[j];
      raw(i, j) = w;
      // TIS: torch.clamp(max=threshold) keeps a NaN (std::min(NaN, upper) is NaN).
      out.weights(i, j) = icepop ? ((w >= lower && w <= upper) ? w : 0.0f) : std::min(w, upper);
    }
  }

  const double valid = static_cast<double>(counts.tokens);
  double applied_sum = 0, clamped_sum = 0, clamped_squares = 0;
  std::int64_t high = 0, low = 0, outside = 0;
  float max = -std::numeric_limits<float>::infinity(), min = std::numeric_limits<float>::infinity();
  std::vector<float> row_means(static_cast<std::size_t>(rows)), raw_row_means(row_means.size());
  std::vector<float> applied_terms(static_cast<std::size_t>(cols)), raw_terms(applied_terms.size()),
      clamped_terms(applied_terms.size()), squared_terms(applied_terms.size());
  for (Index i = 0; i < rows; ++i) {
    const float* m = view_row(response_mask, i);
    const WeightRowCounts row_counts =
        importance_weight_terms(out.weights.data() + i * cols, raw.data() + i * cols, m, applied_terms.data(),
                                raw_terms.data(), clamped_terms.data(), squared_terms.data(), cols, lower, upper);
    high += row_counts.high;
    low += row_counts.low;
    outside += row_counts.outside;
    for (Index j = 0; j < cols; ++j)
      if (m[j] != 0.0f) {
        max = std::max(max, out.weights(i, j));
        min = std::min(min, out.weights(i, j));
      }
    const double row_applied = sum_row_terms(applied_terms.data(), cols);
    applied_sum += row_applied;
    clamped_sum += sum_row_terms(clamped_terms.data(), cols);
    clamped_squares += sum_row_terms(squared_terms.data(), cols);
    const double length = static_cast<double>(counts.row_lengths[i]);
    row_means[static_cast<std::size_t>(i)] = masked_mean_f(row_applied, length);
    raw_row_means[static_cast<std::size_t>(i)] = masked_mean_f(sum_row_terms(raw_terms.data(), cols), length);
  }
  auto& metrics = out.metrics;
  metrics["rollout_is_mean"] = masked_mean_f(applied_sum, valid);
  if (per_token) {
    token_weight_metrics(metrics, high, low, max, min, valid);
  } else {
    sequence_weight_metrics(metrics, sequence_log_ratio, upper, lower);
  }
  metrics["rollout_is_std"] = counts.tokens > 1 ? masked_std(clamped_sum, clamped_squares, valid) : 0.0f;
  {
    // Effective sample size of the applied weights clamped to [0, threshold].
    const float mean_clamped = masked_mean_f(clamped_sum, valid) + 1e-8f;
    double normalized_squares = 0;
    for (Index i = 0; i < rows; ++i) {
      normalized_square_terms(out.weights.data() + i * cols, view_row(response_mask, i), squared_terms.data(), cols,
                              upper, mean_clamped);
      normalized_squares += sum_row_terms(squared_terms.data(), cols);
    }
    const float mean_square = masked_mean_f(normalized_squares, valid);
    VERL_CHECK_ARG(mean_square != 0.0f,
                   "rollout_is_threshold: every IS weight was zeroed (IcePop bounds [{}, {}]), so the effective "
                   "sample size is 1/0 (verl raises ZeroDivisionError)",
                   lower, upper);
    metrics["rollout_is_eff_sample_size"] = 1.0 / static_cast<double>(mean_square);
  }
  row_mean_weight_metrics(metrics, row_means, raw_row_means, upper, lower);
  if (icepop) metrics["rollout_is_oob_ratio"] = masked_mean_f(static_cast<double>(outside), valid);

  // Optionally normalise the applied weights to mean 1.
  if (batch_normalize) {
    float weights_mean = 0;
    if (per_token) {
      double truncated_sum = 0;
      for (Index i = 0; i < rows; ++i) {
        const float* m = view_row(response_mask, i);
        const float* w = out.weights.data() + i * cols;
        for (Index j = 0; j < cols; ++j)
          if (m[j] != 0.0f) truncated_sum += static_cast<double>(w[j] * m[j]);
      }
      weights_mean = masked_mean_f(truncated_sum, valid);
    } else {
      double sequence_sum = 0;
      for (Index i = 0; i < rows; ++i) {
        if (counts.row_lengths[i] == 0) continue;
        const float* m = view_row(response_mask, i);
        const float* w = out.weights.data() + i * cols;
        double row_sum = 0;
        for (Index j = 0; j < cols; ++j)
          if (m[j] != 0.0f) row_sum += static_cast<double>(w[j] * m[j]);
        sequence_sum += masked_mean_f(row_sum, static_cast<double>(counts.row_lengths[i]));
      }
      weights_mean = static_cast<float>(sequence_sum) /
                     std::max(static_cast<float>(counts.nonempty_rows), 1e-8f);
    }
    if (weights_mean > 1e-8f) {
      for (Index k = 0; k < out.weights.size(); ++k) out.weights.data()[k] /= weights_mean;
      metrics["rollout_is_batch_norm_factor"] = weights_mean;
    } else {
      metrics["rollout_is_batch_norm_factor"] = 1.0;
    }
  }
  return out;
}

// ---- rejection sampling ----------------------------------------------------------------------------

struct RejectionResult {
  MatrixF response_mask;  ///< the input mask with rejected tokens set to 0
  Metrics metrics;        ///< rollout_rs_*
};

/// verl's compute_rollout_rejection_mask: every criterion must pass for a token to stay. Token
/// options reject tokens; sequence options reject every token of a sequence whose statistic
/// (sum, mean or max over its valid tokens; 0 for a fully masked row) is out of bounds.
inline RejectionResult compute_rollout_rejection_mask(const ConstMatrixRefF& log_ratio,
                                                      const ConstMatrixRefF& response_mask,
                                                      std::span<const RejectionCriterion> criteria) {
  using namespace detail;
  VERL_CHECK_ARG(!criteria.empty(), "rollout_rs: expected at least one rejection option, got none");
  verl::detail::require_same_shape("response_mask", shape_of(response_mask), "log_ratio", shape_of(log_ratio));
  const Index rows = log_ratio.rows(), cols = log_ratio.cols();
  RejectionResult out{MatrixF(response_mask), {}};
  if (rows == 0) return out;
  const MaskCounts counts = count_mask("response_mask", response_mask);
  require_valid_token(counts);
  const double valid = static_cast<double>(counts.tokens);

  MatrixF combined = MatrixF::Ones(rows, cols);
  std::vector<float> row_values(static_cast<std::size_t>(rows));
  std::vector<float> stat(static_cast<std::size_t>(cols)), stat_terms(stat.size()), clamped_terms(stat.size()),
      squared_terms(stat.size());
  for (const RejectionCriterion& c : criteria) {
    const std::string prefix = "rollout_rs_" + c.name();
    const bool two_sided = c.two_sided(), per_token = c.per_token();
    // k1 bounds the ratio: compare -x with log(bounds) (in double, rounded to float32 by torch).
    const double upper = two_sided ? std::log(c.upper) : c.upper;
    const double lower = two_sided ? std::log(c.lower) : 0.0;
    const float upper_f = static_cast<float>(upper), lower_f = static_cast<float>(lower);
    const float clamp_low = two_sided ? lower_f : 0.0f;  // the std clamps to [lower or 0, upper]
    const auto keeps = [&](float v) { return two_sided ? (v >= lower_f && v <= upper_f) : v <= upper_f; };

    RejectionTokenSums sums;
    std::int64_t rejected_tokens = 0, rejected_rows = 0;
    for (Index i = 0; i < rows; ++i) {
      const float* m = view_row(response_mask, i);
      const Index length = counts.row_lengths[i];
      divergence_row(view_row(log_ratio, i), stat.data(), cols, c.estimator);
      float value = 0;  // the row's sequence statistic (token options: masked mean of the statistic)
      if (c.level == RejectionLevel::seq_max) {
        value = -std::numeric_limits<float>::infinity();
        for (Index j = 0; j < cols; ++j)
          if (m[j] != 0.0f) value = std::max(value, stat[static_cast<std::size_t>(j)]);
        if (value == -std::numeric_limits<float>::infinity()) value = 0.0f;
      } else if (per_token) {
        const std::int64_t rejected =
            token_rejection_row(stat.data(), m, combined.data() + i * cols, stat_terms.data(), clamped_terms.data(),
                                squared_terms.data(), cols, two_sided, lower_f, upper_f, clamp_low, sums);
        const double row_sum = sum_row_terms(stat_terms.data(), cols);
        sums.sum += row_sum;
        sums.clamped_sum += sum_row_terms(clamped_terms.data(), cols);
        sums.clamped_squares += sum_row_terms(squared_terms.data(), cols);
        for (Index j = 0; j < cols; ++j)
          if (m[j] != 0.0f) {
            sums.max = std::max(sums.max, stat[static_cast<std::size_t>(j)]);
            sums.min = std::min(sums.min, stat[static_cast<std::size_t>(j)]);
          }
        rejected_tokens += rejected;
        rejected_rows += rejected > 0 ? 1 : 0;
        value = masked_mean_f(row_sum, static_cast<double>(length));
      } else {
        for (Index j = 0; j < cols; ++j)
          stat_terms[static_cast<std::size_t>(j)] = m[j] != 0.0f ? stat[static_cast<std::size_t>(j)] * m[j] : 0.0f;
        const double row_sum = sum_row_terms(stat_terms.data(), cols);
        value = c.level == RejectionLevel::seq_sum ? static_cast<float>(row_sum)
                                                   : masked_mean_f(row_sum, static_cast<double>(length));
      }
      row_values[static_cast<std::size_t>(i)] = value;
      if (!per_token) {
        // Every valid token of the row is judged by the row's value.
        sums.add_sequence_row(value, length, clamp_low, upper_f);
        if (!keeps(value)) {
          std::fill_n(combined.data() + i * cols, cols, 0.0f);
          rejected_tokens += length;
          rejected_rows += length > 0 ? 1 : 0;
        }
      }
    }
    finish_rejection_metrics(out.metrics, prefix, per_token, sums, counts, row_values, upper, lower, two_sided);
    out.metrics[prefix + "_masked_fraction"] = masked_mean_f(static_cast<double>(rejected_tokens), valid);
    out.metrics[prefix + "_seq_masked_fraction"] =
        counts.nonempty_rows > 0 ? fraction(rejected_rows, counts.nonempty_rows) : 0.0f;
  }

  double rejected_tokens = 0;
  std::int64_t rows_with_rejection = 0;
  for (Index i = 0; i < rows; ++i) {
    const float* m = view_row(response_mask, i);
    const float* keep = combined.data() + i * cols;
    float* out_mask = out.response_mask.data() + i * cols;
    bool any = false;
    for (Index j = 0; j < cols; ++j) {
      if (m[j] != 0.0f) {
        rejected_tokens += static_cast<double>((1.0f - keep[j]) * m[j]);
        any |= !(keep[j] > 0.5f);
      }
      out_mask[j] = m[j] * keep[j];
    }
    rows_with_rejection += any ? 1 : 0;
  }
  out.metrics["rollout_rs_masked_fraction"] = masked_mean_f(rejected_tokens, valid);
  out.metrics["rollout_rs_seq_masked_fraction"] = fraction(rows_with_rejection, rows);
  return out;
}

// ---- off-policy diagnostics ---------------------------------------------------------------------------

/// verl's compute_offpolicy_metrics between the training policy (`log_prob`) and the rollout
/// policy: perplexities, KL (direct and k3), log-PPL differences, PPL ratio and chi-squared
/// divergences (token and sequence). Per-sequence means run over every row.
inline Metrics compute_offpolicy_metrics(const ConstMatrixRefF& log_prob, const ConstMatrixRefF& rollout_log_prob,
                                         const ConstMatrixRefF& response_mask) {
  using namespace detail;
  verl::detail::require_same_shape("rollout_log_prob", shape_of(rollout_log_prob), "log_prob", shape_of(log_prob));
  verl::detail::require_same_shape("response_mask", shape_of(response_mask), "log_prob", shape_of(log_prob));
  const MaskCounts counts = count_mask("response_mask", response_mask);
  require_valid_token(counts);
  const Index rows = log_prob.rows(), cols = log_prob.cols();
  const double valid = static_cast<double>(counts.tokens);

  OffpolicySums sums;
  for (Index i = 0; i < rows; ++i) {
    const float* lp = view_row(log_prob, i);
    const float* ro = view_row(rollout_log_prob, i);
    const float* m = view_row(response_mask, i);
    double training_sum = 0, rollout_sum = 0, log_ratio_sum = 0;
    for (Index j = 0; j < cols; ++j) {
      if (m[j] == 0.0f) continue;
      const float log_ratio = lp[j] - ro[j];
      training_sum += static_cast<double>(lp[j] * m[j]);
      rollout_sum += static_cast<double>(ro[j] * m[j]);
      log_ratio_sum += static_cast<double>(log_ratio * m[j]);
      sums.kl += static_cast<double>((ro[j] - lp[j]) * m[j]);
      // k3 uses the unclamped ratio, chi2 the ±20-clamped one: one exp unless the clamp is active.
      const float clamped = std::min(std::max(log_ratio, -kRolloutSafetyBound), kRolloutSafetyBound);
      const float rho = std::exp(clamped);
      const float ratio = clamped == log_ratio ? rho : std::exp(log_ratio);
      sums.k3 += static_cast<double>(((ratio - log_ratio) - 1.0f) * m[j]);
      sums.rho_squared += static_cast<double>((rho * rho) * m[j]);
    }
    sums.add_row(training_sum, rollout_sum, log_ratio_sum, static_cast<double>(counts.row_lengths[i]));
  }
  return sums.metrics(static_cast<double>(rows), valid);
}

// ---- the pipeline -------------------------------------------------------------------------------------

struct RolloutCorrectionResult {
  std::optional<MatrixF> rollout_is_weights;  ///< present when IS is enabled
  MatrixF response_mask;                      ///< the mask with rejection applied
  Metrics metrics;                            ///< every metric, under "rollout_corr/" keys
};

/// verl's compute_rollout_correction_and_rejection_mask: IS weights (if enabled), the rejection
/// mask (if enabled) and the off-policy metrics, between `log_prob` (the training policy) and
/// `rollout_log_prob`. An all-zero mask is an error, as in verl.
inline RolloutCorrectionResult compute_rollout_correction_and_rejection_mask(const ConstMatrixRefF& log_prob,
                                                                             const ConstMatrixRefF& rollout_log_prob,
                                                                             const ConstMatrixRefF& response_mask,
                                                                             const RolloutCorrection& settings) {
  verl::detail::require_same_shape("rollout_log_prob", shape_of(rollout_log_prob), "log_prob", shape_of(log_prob));
  verl::detail::require_same_shape("response_mask", shape_of(response_mask), "log_prob", shape_of(log_prob));
  detail::require_valid_token(detail::count_mask("response_mask", response_mask));
  const MatrixF log_ratio = log_prob - rollout_log_prob;

  RolloutCorrectionResult out;
  Metrics metrics;
  if (settings.rollout_is) {
    auto is = compute_rollout_correction_weights(log_ratio, response_mask, *settings.rollout_is,
                                                 settings.rollout_is_threshold, settings.rollout_is_batch_normalize,
                                                 settings.rollout_is_threshold_lower);
    out.rollout_is_weights = std::move(is.weights);
    metrics.merge(is.metrics);
  }
  if (!settings.rollout_rs.empty()) {
    auto rs = compute_rollout_rejection_mask(log_ratio, response_mask, settings.rollout_rs);
    out.response_mask = std::move(rs.response_mask);
    metrics.merge(rs.metrics);
  } else {
    out.response_mask = response_mask;
  }
  metrics.merge(compute_offpolicy_metrics(log_prob, rollout_log_prob, response_mask));
  for (auto& [key, value] : metrics) out.metrics["rollout_corr/" + key] = value;
  return out;
}

}  // namespace verl::algo
