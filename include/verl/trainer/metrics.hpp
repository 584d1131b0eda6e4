// The trainer's metrics with verl's names and semantics (verl/trainer/ppo/metric_utils.py and
// verl/utils/metric): compute_data_metrics (critic/score, rewards, advantages, returns, values,
// vf_explained_var, response_length, prompt_length), compute_timing_metrics (timing_s/*,
// timing_per_token_ms/*), compute_throughout_metrics (perf/*, verl's spelling), and
// reduce_metrics for lists gathered over micro-batches.
//
// Statistics that verl takes of float32 tensors are accumulated in double and rounded to float32
// (torch's .item() of a float32 result), so they agree with verl to float32 precision.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "verl/core/error.hpp"
#include "verl/core/metrics.hpp"
#include "verl/core/tensor.hpp"
#include "verl/data/data_proto.hpp"
#include "verl/trainer/timer.hpp"

namespace verl::trainer {

/// The tensors compute_data_metrics reads (verl's batch keys). Masks are 0/1.
struct DataMetricsInputs {
  ConstMatrixRefF token_level_scores;   ///< (B, R)
  ConstMatrixRefF token_level_rewards;  ///< (B, R)
  ConstMatrixRefF advantages;           ///< (B, R)
  ConstMatrixRefF returns;              ///< (B, R)
  ConstMatrixRefF attention_mask;       ///< (B, P + R): prompt then response positions
  ConstMatrixRefF response_mask;        ///< (B, R)
  std::optional<ConstMatrixRefF> values = std::nullopt;  ///< (B, R); with a critic
  /// Multi-turn counts, when the batch has them (verl's "__num_turns__" and "tool_call_counts").
  std::span<const std::int64_t> num_turns = {};
  std::span<const std::int64_t> tool_call_counts = {};
};

namespace detail {

struct Summary {
  double mean = std::numeric_limits<double>::quiet_NaN();
  double max = std::numeric_limits<double>::quiet_NaN();
  double min = std::numeric_limits<double>::quiet_NaN();
};

inline double as_float32(double value) { return static_cast<double>(static_cast<float>(value)); }

/// mean/max/min of float32 values, as torch reports them (.item() of float32 tensors).
inline Summary summarize(std::span<const float> values, std::string_view what) {
  VERL_CHECK_ARG(!values.empty(), "{}: expected at least one value for max/min, got none", what);
  double sum = 0.0;
  float largest = values[0], smallest = values[0];
  for (const float v : values) {
    sum += v;
    largest = std::max(largest, v);
    smallest = std::min(smallest, v);
  }
  return {as_float32(sum / static_cast<double>(values.size())), largest, smallest};
}

/// Values of `m` where `mask` is set, row by row (torch.masked_select).
inline std::vector<float> masked_values(const ConstMatrixRefF& m, const ConstMatrixRefF& mask) {
  std::vector<float> out;
  for (Index i = 0; i < m.rows(); ++i)
    for (Index j = 0; j < m.cols(); ++j)
      if (mask(i, j) != 0.0f) out.push_back(m(i, j));
  return out;
}

/// torch.var (unbiased) of float32 values, rounded to float32.
inline float unbiased_variance(std::span<const float> values) {
  if (values.size() < 2) return std::numeric_limits<float>::quiet_NaN();
  double mean = 0.0;
  for (const float v : values) mean += v;
  mean /= static_cast<double>(values.size());
  double squares = 0.0;
  for (const float v : values) squares += (v - mean) * (v - mean);
  return static_cast<float>(squares / static_cast<double>(values.size() - 1));
}

inline void add_summary(Metrics& metrics, std::string_view prefix, const Summary& s) {
  metrics[std::string(prefix) + "/mean"] = s.mean;
  metrics[std::string(prefix) + "/max"] = s.max;
  metrics[std::string(prefix) + "/min"] = s.min;
}

inline void add_count_summary(Metrics& metrics, std::string_view prefix, std::span<const std::int64_t> counts) {
  if (counts.empty()) return;
  const auto [smallest, largest] = std::minmax_element(counts.begin(), counts.end());
  double sum = 0.0;
  for (const auto c : counts) sum += static_cast<double>(c);
  metrics[std::string(prefix) + "/min"] = static_cast<double>(*smallest);
  metrics[std::string(prefix) + "/max"] = static_cast<double>(*largest);
  metrics[std::string(prefix) + "/mean"] = sum / static_cast<double>(counts.size());  // numpy: float64
}

inline MatrixF float_tensor(const data::DataProto& batch, std::string_view name) {
  const auto found = batch.tensors().find(name);
  VERL_CHECK_ARG(found != batch.tensors().end(), "batch['{}']: no such tensor (tensors: {})", name,
                 data::detail::joined_keys(batch.tensors()));
  if (const auto* f = std::get_if<MatrixF>(&found->second)) return *f;
  return std::get<MatrixI64>(found->second).cast<float>();
}

inline std::span<const std::int64_t> optional_counts(const data::DataProto& batch, std::string_view name) {
  if (!batch.has_non_tensor(name)) return {};
  return batch.non_tensor<std::int64_t>(name);
}

}  // namespace detail

/// Prompt and response lengths per sample, from the attention mask's prompt and response parts
/// (verl's _compute_response_info).
struct ResponseInfo {
  std::vector<float> prompt_length;
  std::vector<float> response_length;
  Index max_prompt_length = 0;
  Index max_response_length = 0;
};

inline ResponseInfo compute_response_info(const ConstMatrixRefF& attention_mask, Index response_width) {
  VERL_CHECK_ARG(response_width >= 0 && response_width <= attention_mask.cols(),
                 "responses: expected a width in [0, {}] (the attention mask's), got {}", attention_mask.cols(),
                 response_width);
  ResponseInfo info;
  info.max_response_length = response_width;
  info.max_prompt_length = attention_mask.cols() - response_width;
  for (Index i = 0; i < attention_mask.rows(); ++i) {
    info.prompt_length.push_back(attention_mask.row(i).head(info.max_prompt_length).sum());
    info.response_length.push_back(attention_mask.row(i).tail(response_width).sum());
  }
  return info;
}

/// verl's compute_data_metrics. Aborted samples (empty responses) are left out of the score and
/// reward statistics and of response_length_non_aborted/*; a batch of only aborted samples is an
/// error, as in verl.
inline Metrics compute_data_metrics(const DataMetricsInputs& in) {
  const Index batch = in.token_level_scores.rows();
  const Index width = in.token_level_scores.cols();
  const Shape2 shape{batch, width};
  ::verl::detail::require_same_shape("token_level_rewards", shape_of(in.token_level_rewards), "token_level_scores", shape);
  ::verl::detail::require_same_shape("advantages", shape_of(in.advantages), "token_level_scores", shape);
  ::verl::detail::require_same_shape("returns", shape_of(in.returns), "token_level_scores", shape);
  ::verl::detail::require_same_shape("response_mask", shape_of(in.response_mask), "token_level_scores", shape);
  if (in.values) ::verl::detail::require_same_shape("values", shape_of(*in.values), "token_level_scores", shape);
  VERL_CHECK_ARG(in.attention_mask.rows() == batch && in.attention_mask.cols() >= width,
                 "attention_mask: expected shape ({}, prompt_length + {}), got ({}, {})", batch, width,
                 in.attention_mask.rows(), in.attention_mask.cols());
  ::verl::detail::require_binary_mask("attention_mask", in.attention_mask);
  ::verl::detail::require_binary_mask("response_mask", in.response_mask);
  VERL_CHECK_ARG(batch > 0, "token_level_scores: expected a non-empty batch, got 0 samples");

  const ResponseInfo info = compute_response_info(in.attention_mask, width);
  std::vector<float> scores, rewards, non_aborted_lengths;
  std::size_t aborted = 0;
  for (Index i = 0; i < batch; ++i) {
    if (info.response_length[static_cast<std::size_t>(i)] == 0.0f) {
      ++aborted;
      continue;
    }
    scores.push_back(static_cast<float>(in.token_level_scores.row(i).cast<double>().sum()));
    rewards.push_back(static_cast<float>(in.token_level_rewards.row(i).cast<double>().sum()));
    non_aborted_lengths.push_back(info.response_length[static_cast<std::size_t>(i)]);
  }
  VERL_CHECK_ARG(aborted < static_cast<std::size_t>(batch),
                 "batch: all {} samples are aborted (empty responses); verl refuses such a batch", batch);

  Metrics metrics;
  detail::add_summary(metrics, "critic/score", detail::summarize(scores, "critic/score"));
  detail::add_summary(metrics, "critic/rewards", detail::summarize(rewards, "critic/rewards"));
  const auto valid_advantages = detail::masked_values(in.advantages, in.response_mask);
  const auto valid_returns = detail::masked_values(in.returns, in.response_mask);
  detail::add_summary(metrics, "critic/advantages", detail::summarize(valid_advantages, "critic/advantages"));
  detail::add_summary(metrics, "critic/returns", detail::summarize(valid_returns, "critic/returns"));
  if (in.values) {
    const auto valid_values = detail::masked_values(*in.values, in.response_mask);
    detail::add_summary(metrics, "critic/values", detail::summarize(valid_values, "critic/values"));
    std::vector<float> difference(valid_returns.size());
    for (std::size_t k = 0; k < difference.size(); ++k) difference[k] = valid_returns[k] - valid_values[k];
    const float difference_variance = detail::unbiased_variance(difference);
    const float return_variance = detail::unbiased_variance(valid_returns);
    metrics["critic/vf_explained_var"] = 1.0f - difference_variance / (return_variance + 1e-5f);
  }

  const auto max_response = static_cast<float>(info.max_response_length);
  const auto max_prompt = static_cast<float>(info.max_prompt_length);
  auto clip_ratio = [](std::span<const float> lengths, float limit) {
    std::size_t hits = 0;
    for (const float l : lengths) hits += l == limit;
    return detail::as_float32(static_cast<double>(hits) / static_cast<double>(lengths.size()));
  };
  detail::add_summary(metrics, "response_length", detail::summarize(info.response_length, "response_length"));
  metrics["response_length/clip_ratio"] = clip_ratio(info.response_length, max_response);
  detail::add_summary(metrics, "response_length_non_aborted",
                      detail::summarize(non_aborted_lengths, "response_length_non_aborted"));
  metrics["response_length_non_aborted/clip_ratio"] = clip_ratio(non_aborted_lengths, max_response);
  metrics["response/aborted_ratio"] = detail::as_float32(static_cast<double>(aborted) / static_cast<double>(batch));
  detail::add_summary(metrics, "prompt_length", detail::summarize(info.prompt_length, "prompt_length"));
  metrics["prompt_length/clip_ratio"] = clip_ratio(info.prompt_length, max_prompt);

  detail::add_count_summary(metrics, "num_turns", in.num_turns);
  detail::add_count_summary(metrics, "tool_call_counts", in.tool_call_counts);
  return metrics;
}

/// compute_data_metrics on a DataProto with verl's keys: token_level_scores,
/// token_level_rewards, advantages, returns, responses (for the response width),
/// attention_mask, response_mask and, with a critic, values (int64 masks are accepted).
inline Metrics compute_data_metrics(const data::DataProto& batch, bool use_critic = true) {
  const MatrixF scores = detail::float_tensor(batch, "token_level_scores");
  const MatrixF rewards = detail::float_tensor(batch, "token_level_rewards");
  const MatrixF advantages = detail::float_tensor(batch, "advantages");
  const MatrixF returns = detail::float_tensor(batch, "returns");
  const MatrixF attention_mask = detail::float_tensor(batch, "attention_mask");
  const MatrixF response_mask = detail::float_tensor(batch, "response_mask");
  VERL_CHECK_ARG(batch.has_tensor("responses"), "batch['responses']: no such tensor (tensors: {})",
                 data::detail::joined_keys(batch.tensors()));
  const Index response_width = data::detail::cols_of(batch.tensors().find("responses")->second);
  VERL_CHECK_ARG(response_width == scores.cols(), "responses: expected width {} (token_level_scores'), got {}",
                 scores.cols(), response_width);
  std::optional<MatrixF> values;
  if (use_critic) values = detail::float_tensor(batch, "values");
  DataMetricsInputs in{scores, rewards, advantages, returns, attention_mask, response_mask};
  if (values) in.values.emplace(*values);
  in.num_turns = detail::optional_counts(batch, "__num_turns__");
  in.tool_call_counts = detail::optional_counts(batch, "tool_call_counts");
  return compute_data_metrics(in);
}

/// Token counts of a batch: prompt tokens and response tokens (from the attention mask).
struct TokenCounts {
  double prompt = 0.0;
  double response = 0.0;
  [[nodiscard]] double overall() const { return prompt + response; }
};

inline TokenCounts count_tokens(const ConstMatrixRefF& attention_mask, Index response_width) {
  const ResponseInfo info = compute_response_info(attention_mask, response_width);
  TokenCounts counts;
  for (const float l : info.prompt_length) counts.prompt += l;
  for (const float l : info.response_length) counts.response += l;
  return counts;
}

/// verl's compute_timing_metrics: timing_s/<name> for every timed phase, and
/// timing_per_token_ms/<name> for gen (per response token) and ref, values, adv, update_critic,
/// update_actor (per prompt + response token).
inline Metrics compute_timing_metrics(const TokenCounts& tokens, const TimingRaw& timing_raw) {
  Metrics metrics;
  for (const auto& [name, seconds] : timing_raw) metrics["timing_s/" + name] = seconds;
  static constexpr std::string_view per_overall_token[] = {"ref", "values", "adv", "update_critic", "update_actor"};
  auto per_token = [&](std::string_view name, double count) {
    const auto found = timing_raw.find(name);
    if (found == timing_raw.end()) return;
    VERL_CHECK_ARG(count > 0.0, "batch: timing_per_token_ms/{} needs at least one token, got 0", name);
    metrics["timing_per_token_ms/" + std::string(name)] = found->second * 1000.0 / count;
  };
  per_token("gen", tokens.response);
  for (const auto name : per_overall_token) per_token(name, tokens.overall());
  return metrics;
}

inline Metrics compute_timing_metrics(const data::DataProto& batch, const TimingRaw& timing_raw) {
  const MatrixF attention_mask = detail::float_tensor(batch, "attention_mask");
  VERL_CHECK_ARG(batch.has_tensor("responses"), "batch['responses']: no such tensor (tensors: {})",
                 data::detail::joined_keys(batch.tensors()));
  return compute_timing_metrics(
      count_tokens(attention_mask, data::detail::cols_of(batch.tensors().find("responses")->second)), timing_raw);
}

/// verl's compute_throughout_metrics: perf/total_num_tokens, perf/time_per_step (timing_raw's
/// "step") and perf/throughput (tokens per second per device).
inline Metrics compute_throughout_metrics(double total_num_tokens, const TimingRaw& timing_raw, std::int64_t n_gpus) {
  const auto step = timing_raw.find("step");
  VERL_CHECK_ARG(step != timing_raw.end(), "timing_raw: expected a 'step' entry (the step's duration), got none");
  VERL_CHECK_ARG(n_gpus > 0, "n_gpus: expected a positive device count, got {}", n_gpus);
  return {{"perf/total_num_tokens", total_num_tokens},
          {"perf/time_per_step", step->second},
          {"perf/throughput", total_num_tokens / (step->second * static_cast<double>(n_gpus))}};
}

/// The DataProto form: total tokens are the sum of meta_info["global_token_num"] (per-sample
/// token counts, as verl's trainer records them).
inline Metrics compute_throughout_metrics(const data::DataProto& batch, const TimingRaw& timing_raw,
                                          std::int64_t n_gpus) {
  const auto& meta = batch.meta_info();
  VERL_CHECK_ARG(meta.contains("global_token_num") && meta["global_token_num"].is_array(),
                 "meta_info['global_token_num']: expected the list of per-sample token counts");
  double total = 0.0;
  for (const auto& count : meta["global_token_num"]) total += count.get<double>();
  return compute_throughout_metrics(total, timing_raw, n_gpus);
}

/// verl's calculate_debug_metrics (rollout.calculate_log_probs=True): how far the rollout's
/// probabilities of the sampled tokens are from the actor's. With p = exp(old_log_probs) and
/// q = exp(rollout_log_probs) over the valid tokens:
///   training/rollout_probs_diff_{max,mean,std} of |p - q| (std unbiased, as torch.std),
///   training/rollout_actor_probs_pearson_corr = corrcoef(p, q),
///   training/rollout_probs_diff_valid = 1 (0, with NaN statistics, when no token is valid).
inline Metrics compute_rollout_probs_diff_metrics(const ConstMatrixRefF& old_log_probs,
                                                  const ConstMatrixRefF& rollout_log_probs,
                                                  const ConstMatrixRefF& response_mask) {
  ::verl::detail::require_same_shape("rollout_log_probs", shape_of(rollout_log_probs), "old_log_probs", shape_of(old_log_probs));
  ::verl::detail::require_same_shape("response_mask", shape_of(response_mask), "old_log_probs", shape_of(old_log_probs));
  constexpr double nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<float> actor, rollout, diff;
  for (Index i = 0; i < old_log_probs.rows(); ++i) {
    for (Index j = 0; j < old_log_probs.cols(); ++j) {
      if (response_mask(i, j) == 0.0f) continue;
      actor.push_back(std::exp(old_log_probs(i, j)));
      rollout.push_back(std::exp(rollout_log_probs(i, j)));
      diff.push_back(std::abs(actor.back() - rollout.back()));
    }
  }
  Metrics out;
  if (diff.empty()) {
    out["training/rollout_probs_diff_valid"] = 0;
    for (const char* key : {"training/rollout_probs_diff_max", "training/rollout_probs_diff_mean",
                            "training/rollout_probs_diff_std", "training/rollout_actor_probs_pearson_corr"})
      out[key] = nan;
    return out;
  }
  const detail::Summary s = detail::summarize(diff, "rollout_probs_diff");
  out["training/rollout_probs_diff_valid"] = 1;
  out["training/rollout_probs_diff_max"] = s.max;
  out["training/rollout_probs_diff_mean"] = s.mean;
  const float variance = detail::unbiased_variance(diff);
  out["training/rollout_probs_diff_std"] = std::isnan(variance) ? nan : detail::as_float32(std::sqrt(static_cast<double>(variance)));
  // torch.corrcoef: covariance over the product of standard deviations (NaN for a constant side).
  const double n = static_cast<double>(diff.size());
  double mean_p = 0, mean_q = 0;
  for (std::size_t k = 0; k < diff.size(); ++k) {
    mean_p += actor[k];
    mean_q += rollout[k];
  }
  mean_p /= n;
  mean_q /= n;
  double cov = 0, var_p = 0, var_q = 0;
  for (std::size_t k = 0; k < diff.size(); ++k) {
    const double dp = actor[k] - mean_p, dq = rollout[k] - mean_q;
    cov += dp * dq;
    var_p += dp * dp;
    var_q += dq * dq;
  }
  const double corr = cov / std::sqrt(var_p * var_q);
  out["training/rollout_actor_probs_pearson_corr"] = std::isfinite(corr) ? detail::as_float32(std::clamp(corr, -1.0, 1.0)) : nan;
  return out;
}

/// Lists of values per metric name, gathered over micro-batches, ranks or steps.
using MetricLists = std::map<std::string, std::vector<double>, std::less<>>;

/// verl's reduce_metrics: the max of a list whose name contains "max", the min where it
/// contains "min", the mean otherwise.
inline Metrics reduce_metrics(const MetricLists& lists) {
  Metrics out;
  for (const auto& [name, values] : lists) {
    VERL_CHECK_ARG(!values.empty(), "metrics['{}']: expected at least one value to reduce, got none", name);
    if (name.find("max") != std::string::npos) {
      out[name] = *std::max_element(values.begin(), values.end());
    } else if (name.find("min") != std::string::npos) {
      out[name] = *std::min_element(values.begin(), values.end());
    } else {
      double sum = 0.0;
      for (const double v : values) sum += v;
      out[name] = sum / static_cast<double>(values.size());
    }
  }
  return out;
}

/// Collects metrics from several micro-batches (verl's append_to_dict) and reduces them.
class MetricsAccumulator {
 public:
  void append(const Metrics& metrics) {
    for (const auto& [name, value] : metrics) lists_[name].push_back(value);
  }
  void append(std::string_view name, double value) { lists_[std::string(name)].push_back(value); }
  [[nodiscard]] const MetricLists& lists() const { return lists_; }
  [[nodiscard]] Metrics reduce() const { return reduce_metrics(lists_); }
  void clear() { lists_.clear(); }

 private:
  MetricLists lists_;
};

}  // namespace verl::trainer
