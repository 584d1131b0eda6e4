// Host side of the optimal-token-baseline kernels (optimal_token_baseline.cuh): the parameters,
// the token and group arithmetic shared with the kernels (float32 step by step as
// verl::algo::OptimalTokenBaseline / MultiTurnOptimalTokenBaseline, golden-exact against verl),
// the argument checks, the CPU reference, and a sequential host walk of the kernels' own
// algorithm (`detail::optimal_token_baseline_sequential`) that g++-only tests compare to verl::algo.
//
// The kernels' algorithm, which the sequential walk replays on one host thread:
//   1. per row, in tiles of otb_tile tokens split into chunks of otb_items_per_thread (one chunk per
//      thread): the returns G (reverse masked cumsum, tiles from the row's end, thread 0 owning the
//      last tokens) and the cumulative path variance W (forward cumsum); both accumulate in double
//      and round each prefix to float32, as torch's CPU cumsum. A thread walks its chunk
//      sequentially from the double sum of the chunks before it, so only the association of those
//      chunk sums differs from the CPU's one running sum: identical whenever the double sums are
//      exact (float terms spanning < ~29 bits of exponent, e.g. outcome rewards), otherwise within
//      one float32 ulp of each prefix. Multi-turn compacts each row's valid tokens: the k-th valid
//      token's G * W, W and position.
//   2. groups as runs of (id, row) pairs, sorted stably or contiguous as given (GroupLayout), each
//      summarised in batch order (members, lengths, handle_zero_tail's unique longest row).
//   3. per group and position t (valid index k for multi-turn), numerator and denominator summed in
//      double over the group's rows in batch order, exactly the CPU's order: the baseline
//      float(num) / (float(den) + eps) is bit-identical given identical G and W.
//   4. advantages: (G - b) * m (single-turn), G - b at valid tokens and 0 elsewhere (multi-turn),
//      without the baseline on the tail of a group's unique longest row under handle_zero_tail.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

#include "verl/algo/advantages/optimal_token_baseline.hpp"
#include "verl/core/error.hpp"
#include "verl/kernels/advantages.hpp"  // GroupLayout
#include "verl/kernels/detail/host_device.hpp"
#include "verl/kernels/detail/launch.hpp"

namespace verl::kernels {

/// Both of verl's optimal-token-baseline estimators. The defaults of each form are verl's (and
/// verl::algo's): handle_zero_tail true for both forms (verl 0.9.1); start from single_turn() or
/// multi_turn_form(), or from() the verl::algo estimator.
struct OptimalTokenBaselineParams {
  bool multi_turn = false;        ///< tir_optimal_token_baseline: rows aligned by valid-token index
  bool handle_zero_tail = true;   ///< no baseline on the tail of a group's unique longest response
  float epsilon = 1e-8f;          ///< added to the denominator (verl's Python float, as float32)

  static constexpr OptimalTokenBaselineParams single_turn() { return {false, true, 1e-8f}; }
  static constexpr OptimalTokenBaselineParams multi_turn_form() { return {true, true, 1e-8f}; }
  static OptimalTokenBaselineParams from(const algo::OptimalTokenBaseline& e) {
    return {false, e.handle_zero_tail, static_cast<float>(e.epsilon)};
  }
  static OptimalTokenBaselineParams from(const algo::MultiTurnOptimalTokenBaseline& e) {
    return {true, e.handle_zero_tail, static_cast<float>(e.epsilon)};
  }
};

/// The CPU reference: verl::algo's estimator of the same form and knobs. `batch` must carry
/// old_log_probs and sum_pi_squared (rollout_is_weights optional).
inline algo::AdvantageResult reference_optimal_token_baseline(const OptimalTokenBaselineParams& p,
                                                              const algo::AdvantageBatch& batch) {
  if (p.multi_turn)
    return algo::MultiTurnOptimalTokenBaseline{.handle_zero_tail = p.handle_zero_tail,
                                               .epsilon = static_cast<double>(p.epsilon)}
        .compute(batch);
  return algo::OptimalTokenBaseline{.handle_zero_tail = p.handle_zero_tail, .epsilon = static_cast<double>(p.epsilon)}
      .compute(batch);
}

namespace detail {

// ---- launch shape of the per-row pass ----------------------------------------------------------

inline constexpr int otb_block_threads = 256;
inline constexpr int otb_items_per_thread = 8;
inline constexpr int otb_tile = otb_block_threads * otb_items_per_thread;

/// Sentinel of OtbGroupSummary::baseline_end: every position takes the baseline.
inline constexpr std::int32_t otb_no_tail = INT32_MAX;

/// Tokens [lo, hi) of a tile that one thread owns.
struct TokenSpan {
  int lo, hi;
};
/// Forward scans: thread k owns the k-th chunk from the tile's start.
VERL_KERNELS_HD TokenSpan forward_chunk(int width, int thread) {
  const int lo = thread * otb_items_per_thread < width ? thread * otb_items_per_thread : width;
  return {lo, lo + otb_items_per_thread < width ? lo + otb_items_per_thread : width};
}
/// Reverse scans: thread k owns the k-th chunk from the tile's end (thread 0 the last tokens).
VERL_KERNELS_HD TokenSpan reverse_chunk(int width, int thread) {
  const int hi = width - thread * otb_items_per_thread > 0 ? width - thread * otb_items_per_thread : 0;
  return {hi - otb_items_per_thread > 0 ? hi - otb_items_per_thread : 0, hi};
}

// ---- token arithmetic (verl::algo's float32 steps, never contracted into an FMA) ---------------

/// exp of a float32 log-probability. The CPU reference uses glibc's expf (within ~0.5 ulp, not
/// always correctly rounded); the device's expf is up to 2 ulp off, so the kernels take exp in
/// double and round it once: correctly rounded, the same float as glibc's except on ~1e-4 of inputs.
#if defined(__CUDA_ARCH__)
VERL_KERNELS_HD float otb_exp(float x) { return static_cast<float>(exp(static_cast<double>(x))); }
#else
VERL_KERNELS_HD float otb_exp(float x) { return std::exp(x); }
#endif

/// The reverse cumsum's term r * m.
VERL_KERNELS_HD float reward_term(float reward, float mask) { return mul_rn(reward, mask); }

/// The path variance's term w * m, w = (1 - 2 exp(log_prob) + sum_pi_squared) [* rho^2].
VERL_KERNELS_HD float path_variance_term(float log_prob, float sum_pi_squared, const float* is_weight, float mask) {
  float w = add_rn(add_rn(1.0f, -mul_rn(2.0f, otb_exp(log_prob))), sum_pi_squared);
  if (is_weight != nullptr) w = mul_rn(w, mul_rn(*is_weight, *is_weight));
  return mul_rn(w, mask);
}

/// Single-turn group sums: (G W) m and W m (multi-turn compacts G W and W without the mask).
VERL_KERNELS_HD float numerator_term(float ret, float w, float mask) { return mul_rn(mul_rn(ret, w), mask); }
VERL_KERNELS_HD float denominator_term(float w, float mask) { return mul_rn(w, mask); }

/// b = float(sum G W) / (float(sum W) + eps).
VERL_KERNELS_HD float otb_baseline(double numerator, double denominator, float epsilon) {
  return div_rn(static_cast<float>(numerator), add_rn(static_cast<float>(denominator), epsilon));
}

/// Single-turn: (G - b) * m where the baseline applies, G * m on a zero tail.
VERL_KERNELS_HD float single_turn_advantage(float ret, float baseline, float mask, bool with_baseline) {
  return with_baseline ? mul_rn(add_rn(ret, -baseline), mask) : mul_rn(ret, mask);
}
/// Multi-turn, at a valid token: G - b, or G - 0 on a zero tail.
VERL_KERNELS_HD float multi_turn_advantage(float ret, float baseline, bool with_baseline) {
  return add_rn(ret, -(with_baseline ? baseline : 0.0f));
}

// ---- group bookkeeping -------------------------------------------------------------------------

/// One group seen row by row in batch order: its members (every row single-turn, the non-empty
/// ones multi-turn) and verl::algo's unique_longest_tail over them.
struct OtbGroupSummary {
  std::int64_t members = 0;
  std::int32_t max_length = -1;
  std::int32_t second_length = -1;  ///< longest among the other members; a tie with max_length included
  std::int64_t longest_row = -1;

  VERL_KERNELS_HD void add(std::int64_t row, std::int32_t length, bool multi_turn) {
    if (multi_turn && length == 0) return;  // fully masked rows are left out of a multi-turn group
    ++members;
    if (length > max_length) {
      second_length = max_length;
      max_length = length;
      longest_row = row;
    } else if (length > second_length) {
      second_length = length;
    }
  }
  /// A group of one gets no baseline (b = 0).
  VERL_KERNELS_HD bool has_baseline() const { return members > 1; }
  /// Positions (single-turn) or valid indices (multi-turn) a baseline is needed for.
  VERL_KERNELS_HD std::int64_t span(bool multi_turn, std::int64_t cols) const {
    return multi_turn ? (max_length > 0 ? max_length : 0) : cols;
  }
  /// Where `row`'s baseline stops: the second-longest length for the strictly longest row under
  /// handle_zero_tail, otb_no_tail otherwise.
  VERL_KERNELS_HD std::int32_t baseline_end(std::int64_t row, bool handle_zero_tail) const {
    const bool tail = handle_zero_tail && members >= 2 && second_length < max_length && row == longest_row;
    return tail ? second_length : otb_no_tail;
  }
};

// ---- argument checks ---------------------------------------------------------------------------

inline void check_otb_shape(std::int64_t rows, std::int64_t cols) {
  check_batch_shape(rows, cols);
  VERL_CHECK_ARG(cols <= INT32_MAX, "cols: expected < 2^31 (32-bit token positions), got {}", cols);
}

inline void check_otb_arguments(std::int64_t rows, std::int64_t cols, const std::int64_t* ids,
                                const float* token_level_rewards, const float* response_mask,
                                const float* old_log_probs, const float* sum_pi_squared, const float* advantages,
                                const float* returns) {
  check_otb_shape(rows, cols);
  if (rows == 0) return;
  VERL_CHECK_ARG(ids != nullptr, "ids: expected {} group ids, got null", rows);
  if (cols == 0) return;
  const auto require = [&](const void* p, const char* name) {
    VERL_CHECK_ARG(p != nullptr, "{}: expected a ({}, {}) array, got null", name, rows, cols);
  };
  require(token_level_rewards, "token_level_rewards");
  require(response_mask, "response_mask");
  require(old_log_probs, "old_log_probs");
  require(sum_pi_squared, "sum_pi_squared");
  require(advantages, "advantages");
  require(returns, "returns");
}

/// The five (B, T) inputs, row-major; rollout_is_weights may be null.
struct OtbInputs {
  const float* token_level_rewards;
  const float* response_mask;
  const float* old_log_probs;
  const float* sum_pi_squared;
  const float* rollout_is_weights;
};

// ---- the kernels' algorithm on one host thread ---------------------------------------------------

/// Pass 1 for one row, tile by tile and chunk by chunk as the kernel (chunk sums combined here in
/// thread order; the kernel's block scan combines them in a tree). Writes the returns, and W
/// (single-turn) or the compacted G W, W and positions (multi-turn); returns the valid length.
inline std::int32_t row_series_sequential(const OtbInputs& in, std::int64_t row, std::int64_t cols, bool multi_turn,
                                          float* returns, float* w_cum, float* compact_product, float* compact_w,
                                          std::int32_t* compact_position) {
  const std::int64_t base = row * cols;
  std::vector<float> term(otb_tile);
  double carry = 0;
  for (std::int64_t tile_end = cols; tile_end > 0; tile_end -= otb_tile) {
    const std::int64_t tile_begin = std::max<std::int64_t>(tile_end - otb_tile, 0);
    const int width = static_cast<int>(tile_end - tile_begin);
    for (int j = 0; j < width; ++j)
      term[j] = reward_term(in.token_level_rewards[base + tile_begin + j], in.response_mask[base + tile_begin + j]);
    double prefix = carry;
    for (int thread = 0; thread < otb_block_threads; ++thread) {
      const TokenSpan s = reverse_chunk(width, thread);
      double running = prefix, own = 0;
      for (int j = s.hi - 1; j >= s.lo; --j) {
        own += static_cast<double>(term[j]);
        running += static_cast<double>(term[j]);
        returns[base + tile_begin + j] = static_cast<float>(running);
      }
      prefix += own;
    }
    carry = prefix;
  }
  double w_carry = 0;
  std::int32_t count = 0;
  for (std::int64_t tile_begin = 0; tile_begin < cols; tile_begin += otb_tile) {
    const int width = static_cast<int>(std::min<std::int64_t>(otb_tile, cols - tile_begin));
    for (int j = 0; j < width; ++j) {
      const std::int64_t i = base + tile_begin + j;
      term[j] = path_variance_term(in.old_log_probs[i], in.sum_pi_squared[i],
                                   in.rollout_is_weights != nullptr ? in.rollout_is_weights + i : nullptr,
                                   in.response_mask[i]);
    }
    double prefix = w_carry;
    for (int thread = 0; thread < otb_block_threads; ++thread) {
      const TokenSpan s = forward_chunk(width, thread);
      double running = prefix, own = 0;
      for (int j = s.lo; j < s.hi; ++j) {
        const std::int64_t i = base + tile_begin + j;
        own += static_cast<double>(term[j]);
        running += static_cast<double>(term[j]);
        const auto w = static_cast<float>(running);
        if (!multi_turn) {
          w_cum[i] = w;
        } else if (in.response_mask[i] != 0.0f) {
          compact_product[base + count] = mul_rn(returns[i], w);
          compact_w[base + count] = w;
          compact_position[base + count] = static_cast<std::int32_t>(tile_begin + j);
          ++count;
        }
      }
      prefix += own;
    }
    w_carry = prefix;
  }
  if (!multi_turn)
    for (std::int64_t t = 0; t < cols; ++t) count += in.response_mask[base + t] != 0.0f;
  return count;
}

/// The whole estimator on host arrays, as optimal_token_baseline_advantages runs it on the device.
/// With GroupLayout::contiguous each maximal run of equal ids is one group.
inline void optimal_token_baseline_sequential(const OptimalTokenBaselineParams& params, GroupLayout layout,
                                              const float* token_level_rewards, const float* response_mask,
                                              const std::int64_t* ids, const float* old_log_probs,
                                              const float* sum_pi_squared, const float* rollout_is_weights,
                                              std::int64_t rows, std::int64_t cols, float* advantages,
                                              float* returns) {
  check_otb_arguments(rows, cols, ids, token_level_rewards, response_mask, old_log_probs, sum_pi_squared, advantages,
                      returns);
  if (rows == 0 || cols == 0) return;
  const bool multi = params.multi_turn;
  const OtbInputs in{token_level_rewards, response_mask, old_log_probs, sum_pi_squared, rollout_is_weights};
  const auto cells = static_cast<std::size_t>(rows * cols);
  std::vector<float> w_cum(multi ? 0 : cells), compact_product(multi ? cells : 0), compact_w(multi ? cells : 0);
  std::vector<std::int32_t> compact_position(multi ? cells : 0), lengths(static_cast<std::size_t>(rows));
  for (std::int64_t row = 0; row < rows; ++row)
    lengths[static_cast<std::size_t>(row)] =
        row_series_sequential(in, row, cols, multi, returns, w_cum.data(), compact_product.data(), compact_w.data(),
                              compact_position.data());

  // Runs: (id, row) pairs sorted stably (batch order inside a group), or the ids as they are.
  std::vector<std::int64_t> order(static_cast<std::size_t>(rows));
  std::iota(order.begin(), order.end(), std::int64_t{0});
  if (layout == GroupLayout::any)
    std::stable_sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) { return ids[a] < ids[b]; });
  std::vector<double> numerator(static_cast<std::size_t>(cols)), denominator(static_cast<std::size_t>(cols));
  std::vector<float> baseline(static_cast<std::size_t>(cols));
  for (std::int64_t start = 0, end = 0; start < rows; start = end) {
    end = start + 1;
    while (end < rows && ids[order[end]] == ids[order[start]]) ++end;
    OtbGroupSummary group;
    for (std::int64_t p = start; p < end; ++p) group.add(order[p], lengths[static_cast<std::size_t>(order[p])], multi);
    const std::int64_t span = group.span(multi, cols);
    std::fill(numerator.begin(), numerator.end(), 0.0);
    std::fill(denominator.begin(), denominator.end(), 0.0);
    for (std::int64_t p = start; p < end && group.has_baseline(); ++p) {
      const std::int64_t base = order[p] * cols;
      const std::int32_t length = lengths[static_cast<std::size_t>(order[p])];
      for (std::int64_t t = 0; t < span; ++t) {
        const auto ti = static_cast<std::size_t>(t);
        if (multi) {
          if (t >= length) break;
          numerator[ti] += static_cast<double>(compact_product[base + t]);
          denominator[ti] += static_cast<double>(compact_w[base + t]);
        } else {
          const float m = response_mask[base + t];
          numerator[ti] += static_cast<double>(numerator_term(returns[base + t], w_cum[base + t], m));
          denominator[ti] += static_cast<double>(denominator_term(w_cum[base + t], m));
        }
      }
    }
    for (std::int64_t t = 0; t < span; ++t) {
      const auto ti = static_cast<std::size_t>(t);
      baseline[ti] = group.has_baseline() ? otb_baseline(numerator[ti], denominator[ti], params.epsilon) : 0.0f;
    }
    for (std::int64_t p = start; p < end; ++p) {
      const std::int64_t row = order[p], base = row * cols;
      const std::int32_t baseline_end = group.baseline_end(row, params.handle_zero_tail);
      if (multi) {
        std::fill(advantages + base, advantages + base + cols, 0.0f);
        for (std::int32_t k = 0; k < lengths[static_cast<std::size_t>(row)]; ++k) {
          const std::int64_t t = compact_position[base + k];
          advantages[base + t] = multi_turn_advantage(returns[base + t], baseline[k], k < baseline_end);
        }
      } else {
        for (std::int64_t t = 0; t < cols; ++t)
          advantages[base + t] = single_turn_advantage(returns[base + t], baseline[static_cast<std::size_t>(t)],
                                                       response_mask[base + t], t < baseline_end);
      }
    }
  }
}

}  // namespace detail
}  // namespace verl::kernels
