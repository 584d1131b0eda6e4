// Optimal token baseline (OTB): verl's "optimal_token_baseline" and its multi-turn form
// "tir_optimal_token_baseline". Each position t of a prompt group gets its own baseline
// b_t = E[G_t W_t] / E[W_t], G the reward-to-go and W_t = sum_{j<=t} w_j a cumulative
// path-variance proxy with w_j = 1 - 2 pi_j + sum_v pi_v^2 (times rho_j^2 under rollout IS).
#pragma once

#include <algorithm>
#include <cmath>
#include <string_view>
#include <vector>

#include "verl/algo/advantages/estimator.hpp"
#include "verl/algo/advantages/detail/prompt_groups.hpp"
#include "verl/algo/advantages/detail/row_ops.hpp"

namespace verl::algo {
namespace detail {

/// The per-token series both OTB forms start from: the returns G (reward-to-go of r * m, written to
/// `returns`) and the cumulative path variance W = cumsum((1 - 2 exp(old_log_probs) +
/// sum_pi_squared) [* rho^2] * m). Like torch's CPU cumsum, both accumulate in double and round
/// each prefix to float32.
struct PathVariance {
  MatrixF cumulative;
  std::vector<Index> lengths;  ///< valid tokens per row
};

inline PathVariance path_variance_and_returns(const AdvantageBatch& batch, MatrixF& returns) {
  const Index rows = batch.batch_size(), cols = batch.response_length();
  prepare_output(returns, rows, cols);
  PathVariance s{MatrixF(rows, cols), std::vector<Index>(static_cast<std::size_t>(rows))};
  cpu::advise_huge_pages(s.cumulative.data(), static_cast<std::size_t>(s.cumulative.size()) * sizeof(float));
  const ConstMatrixRefF& old_log_probs = batch.old_log_probs.value();  // present: validated by the caller
  const ConstMatrixRefF& sum_pi_squared = batch.sum_pi_squared.value();
  for (Index i = 0; i < rows; ++i) {
    const float* m = row_of(batch.response_mask, i);
    require_binary_mask_row("response_mask", m, cols, i);
    reverse_cumsum_masked(row_of(batch.token_level_rewards, i), m, row_of(returns, i), cols);
    const float* log_prob = row_of(old_log_probs, i);
    const float* sum_sq = row_of(sum_pi_squared, i);
    const float* is_weight = batch.rollout_is_weights ? row_of(*batch.rollout_is_weights, i) : nullptr;
    float* w_cum = row_of(s.cumulative, i);
    double running = 0;
    for (Index t = 0; t < cols; ++t) {
      float w = (1.0f - 2.0f * std::exp(log_prob[t])) + sum_sq[t];
      if (is_weight != nullptr) w = w * (is_weight[t] * is_weight[t]);
      running += static_cast<double>(w * m[t]);
      w_cum[t] = static_cast<float>(running);
    }
    s.lengths[static_cast<std::size_t>(i)] = row_count(m, cols);
  }
  return s;
}

/// handle_zero_tail: the row that is strictly the longest of its group gets no baseline from the
/// second-longest length on. Returns that row and the start of its tail, or {-1, 0}.
inline std::pair<Index, Index> unique_longest_tail(std::span<const Index> rows, const std::vector<Index>& lengths) {
  Index longest = -1, max_length = -1, second_length = -1;
  for (const Index row : rows) {
    const Index length = lengths[static_cast<std::size_t>(row)];
    if (length > max_length) {
      second_length = max_length;
      max_length = length;
      longest = row;
    } else if (length > second_length) {
      second_length = length;  // includes a tie with the maximum: then no row is uniquely longest
    }
  }
  if (rows.size() < 2 || second_length >= max_length) return {-1, 0};
  return {longest, second_length};
}

}  // namespace detail

/// verl's compute_optimal_token_baseline_advantage. Positions are aligned by their index t in the
/// row. Per group of N > 1 rows (fully masked rows included): b_t = sum(G W m) / (sum(W m) + eps);
/// a group of one has b = 0. advantages = (G - b) * m, returns = G.
struct OptimalTokenBaseline {
  static constexpr std::string_view name = "optimal_token_baseline";
  static constexpr AdvantageInputs needs{.group_index = true, .old_log_probs = true};
  static OptimalTokenBaseline from_config(const AdvantageConfig& config) { return {.handle_zero_tail = config.handle_zero_tail.value_or(true), .epsilon = config.otb_epsilon()}; }

  bool handle_zero_tail = true;  ///< no baseline on the tail of a group's unique longest response (0.9.1's default)
  double epsilon = 1e-8;          ///< added to the denominator

  AdvantageResult compute(const AdvantageBatch& batch) const { return detail::compute_fresh(*this, batch); }
  /// As compute(), reusing the storage of `out` (the previous step's result) when it fits.
  void compute_into(const AdvantageBatch& batch, AdvantageResult& out) const {
    detail::validate_advantage_batch<OptimalTokenBaseline>(batch);
    const Index cols = batch.response_length();
    const auto& mask = batch.response_mask;
    const auto series = detail::path_variance_and_returns(batch, out.separate_returns());
    const detail::PromptGroups groups(batch.index);
    detail::prepare_output(out.advantages, batch.batch_size(), cols);
    const MatrixF& w_cum = series.cumulative;
    const float eps = static_cast<float>(epsilon);
    std::vector<double> numerator(static_cast<std::size_t>(cols)), denominator(static_cast<std::size_t>(cols));
    std::vector<float> baseline(static_cast<std::size_t>(cols));
    for (Index g = 0; g < groups.num_groups(); ++g) {
      const auto rows = groups.rows_of(g);
      if (rows.size() == 1) {
        std::fill(baseline.begin(), baseline.end(), 0.0f);
      } else {
        std::fill(numerator.begin(), numerator.end(), 0.0);
        std::fill(denominator.begin(), denominator.end(), 0.0);
        for (const Index row : rows) {
          const float* ret = detail::row_of(out.returns(), row);
          const float* w = w_cum.data() + row * cols;
          const float* m = detail::row_of(mask, row);
          for (Index t = 0; t < cols; ++t) {
            numerator[static_cast<std::size_t>(t)] += static_cast<double>((ret[t] * w[t]) * m[t]);
            denominator[static_cast<std::size_t>(t)] += static_cast<double>(w[t] * m[t]);
          }
        }
        for (Index t = 0; t < cols; ++t) {
          const auto ti = static_cast<std::size_t>(t);
          baseline[ti] = static_cast<float>(numerator[ti]) / (static_cast<float>(denominator[ti]) + eps);
        }
      }
      const auto [tail_row, tail_start] =
          handle_zero_tail ? detail::unique_longest_tail(rows, series.lengths) : std::pair<Index, Index>{-1, 0};
      for (const Index row : rows) {
        const float* ret = detail::row_of(out.returns(), row);
        const float* m = detail::row_of(mask, row);
        float* adv = detail::row_of(out.advantages, row);
        const Index baseline_end = row == tail_row ? std::min(tail_start, cols) : cols;
        for (Index t = 0; t < baseline_end; ++t) adv[t] = (ret[t] - baseline[static_cast<std::size_t>(t)]) * m[t];
        for (Index t = baseline_end; t < cols; ++t) adv[t] = ret[t] * m[t];
      }
    }
  }
};

/// verl's compute_multi_turn_optimal_token_baseline_advantage (tool-integrated reasoning: a row
/// holds several turns with observation tokens masked out). Each row's valid tokens are first
/// compacted, so rows are aligned by valid-token index k rather than by position; fully masked
/// rows are left out of their group. Otherwise as OptimalTokenBaseline. returns = G (uncompacted).
struct MultiTurnOptimalTokenBaseline {
  static constexpr std::string_view name = "tir_optimal_token_baseline";
  static constexpr AdvantageInputs needs{.group_index = true, .old_log_probs = true};
  static MultiTurnOptimalTokenBaseline from_config(const AdvantageConfig& config) { return {.handle_zero_tail = config.handle_zero_tail.value_or(true), .epsilon = config.otb_epsilon()}; }

  bool handle_zero_tail = true;  ///< verl's default here is True
  double epsilon = 1e-8;

  AdvantageResult compute(const AdvantageBatch& batch) const { return detail::compute_fresh(*this, batch); }
  /// As compute(), reusing the storage of `out` (the previous step's result) when it fits.
  void compute_into(const AdvantageBatch& batch, AdvantageResult& out) const {
    detail::validate_advantage_batch<MultiTurnOptimalTokenBaseline>(batch);
    const Index cols = batch.response_length();
    const auto& mask = batch.response_mask;
    const auto series = detail::path_variance_and_returns(batch, out.separate_returns());
    const detail::PromptGroups groups(batch.index);
    detail::prepare_output(out.advantages, batch.batch_size(), cols);
    out.advantages.setZero();  // masked positions and fully masked rows
    const MatrixF& w_cum = series.cumulative;
    const float eps = static_cast<float>(epsilon);
    std::vector<double> numerator, denominator;
    std::vector<float> baseline;
    std::vector<Index> members;
    for (Index g = 0; g < groups.num_groups(); ++g) {
      members.clear();
      Index longest = 0;
      for (const Index row : groups.rows_of(g)) {
        const Index length = series.lengths[static_cast<std::size_t>(row)];
        if (length == 0) continue;
        members.push_back(row);
        longest = std::max(longest, length);
      }
      if (members.empty()) continue;
      const auto span_length = static_cast<std::size_t>(longest);
      baseline.assign(span_length, 0.0f);
      if (members.size() > 1) {
        numerator.assign(span_length, 0.0);
        denominator.assign(span_length, 0.0);
        for (const Index row : members) {
          const float* ret = detail::row_of(out.returns(), row);
          const float* w = w_cum.data() + row * cols;
          const float* m = detail::row_of(mask, row);
          std::size_t k = 0;
          for (Index t = 0; t < cols; ++t) {
            if (m[t] == 0.0f) continue;
            numerator[k] += static_cast<double>(ret[t] * w[t]);
            denominator[k] += static_cast<double>(w[t]);
            ++k;
          }
        }
        for (std::size_t k = 0; k < span_length; ++k)
          baseline[k] = static_cast<float>(numerator[k]) / (static_cast<float>(denominator[k]) + eps);
      }
      const auto [tail_row, tail_start] =
          handle_zero_tail ? detail::unique_longest_tail(members, series.lengths) : std::pair<Index, Index>{-1, 0};
      for (const Index row : members) {
        const float* ret = detail::row_of(out.returns(), row);
        const float* m = detail::row_of(mask, row);
        float* adv = detail::row_of(out.advantages, row);
        Index k = 0;
        for (Index t = 0; t < cols; ++t) {
          if (m[t] == 0.0f) continue;
          const bool in_tail = row == tail_row && k >= tail_start;
          adv[t] = ret[t] - (in_tail ? 0.0f : baseline[static_cast<std::size_t>(k)]);
          ++k;
        }
      }
    }
  }
};

}  // namespace verl::algo
