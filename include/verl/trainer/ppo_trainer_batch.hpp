// Trajectories: one PPO step's batch with verl's batch keys as members (rows are prompt-major:
// row b * n + j is sample j of prompt b), and the row selection and concatenation that dynamic
// sampling needs.
#pragma once

#include <cmath>
#include <cstdint>
#include <span>
#include <tuple>
#include <string_view>
#include <vector>

#include "verl/config.hpp"
#include "verl/core/error.hpp"
#include "verl/core/metrics.hpp"
#include "verl/core/tensor.hpp"
#include "verl/parallel/seqlen_balancing.hpp"
#include "verl/reward/scorer.hpp"

namespace verl::trainer {

namespace detail {

/// Rows `rows` of a batch field (a matrix's rows, a vector's entries); an empty field (not computed
/// yet) stays empty.
template <class Field>
Field gather_rows(const Field& field, std::span<const Index> rows) {
  Field out;
  if constexpr (requires { field.row(0); }) {
    if (field.rows() == 0) return out;
    out.resize(static_cast<Index>(rows.size()), field.cols());
    for (std::size_t i = 0; i < rows.size(); ++i) out.row(static_cast<Index>(i)) = field.row(rows[i]);
  } else {
    if (field.empty()) return out;
    out.reserve(rows.size());
    for (const Index r : rows) out.push_back(field[static_cast<std::size_t>(r)]);
  }
  return out;
}

/// The rows of `a`, then those of `b`.
template <class Field>
Field stack_rows(const Field& a, const Field& b) {
  if constexpr (requires { a.row(0); }) {
    if (b.rows() == 0) return a;
    if (a.rows() == 0) return b;
    Field out(a.rows() + b.rows(), a.cols());
    out.topRows(a.rows()) = a;
    out.bottomRows(b.rows()) = b;
    return out;
  } else {
    Field out = a;
    out.insert(out.end(), b.begin(), b.end());
    return out;
  }
}

/// `m` widened to `width` columns by zero columns on the left.
template <class M>
M left_pad_columns(const M& m, Index width) {
  M out(m.rows(), width);
  out.leftCols(width - m.cols()).setZero();
  out.rightCols(m.cols()) = m;
  return out;
}

}  // namespace detail

struct Trajectories {
  MatrixI64 responses;     ///< (N, R), pad after the response
  MatrixF response_mask;   ///< (N, R)
  MatrixI64 input_ids;     ///< (N, P + R)
  MatrixF attention_mask;  ///< (N, P + R)
  MatrixI64 position_ids;  ///< (N, P + R)
  std::vector<std::int64_t> uid;     ///< the prompt group of each row (verl's uid)
  std::vector<std::int64_t> sample;  ///< the dataset index of each row's prompt
  std::vector<reward::RewardOutput> reward_outputs;
  VectorF reward_baselines;  ///< ReMax: the greedy response's reward, per row
  MatrixF rollout_log_probs;  ///< (N, R): the rollout's log-prob of each sampled token
  MatrixF token_level_scores, token_level_rewards, old_log_probs, ref_log_probs, values, advantages, returns;
  MatrixF rollout_is_weights;  ///< (N, R) rollout correction's IS weights; empty when not used
  MatrixF sum_pi_squared;      ///< (N, R) sum_j pi_j^2 under the old policy (calculate_sum_pi_squared); or empty

  [[nodiscard]] Index rows() const { return responses.rows(); }

  /// The fields generation and reward produce: what select() and append() carry.
  static constexpr auto generated_fields() {
    return std::make_tuple(&Trajectories::responses, &Trajectories::response_mask, &Trajectories::input_ids,
                           &Trajectories::attention_mask, &Trajectories::position_ids, &Trajectories::uid,
                           &Trajectories::sample, &Trajectories::reward_outputs, &Trajectories::reward_baselines,
                           &Trajectories::rollout_log_probs, &Trajectories::token_level_scores);
  }
  /// The fields the later stages of a step compute from those.
  static constexpr auto computed_fields() {
    return std::make_tuple(&Trajectories::token_level_rewards, &Trajectories::old_log_probs,
                           &Trajectories::ref_log_probs, &Trajectories::values, &Trajectories::advantages,
                           &Trajectories::returns, &Trajectories::rollout_is_weights, &Trajectories::sum_pi_squared);
  }

  /// The generation and reward fields of `rows`, in that order (later fields are recomputed).
  [[nodiscard]] Trajectories select(std::span<const Index> rows) const {
    Trajectories out;
    std::apply([&](auto... field) { ((out.*field = detail::gather_rows(this->*field, rows)), ...); },
               generated_fields());
    return out;
  }

  /// Every field of the batch (those not computed yet stay empty) in the row order `order`, a
  /// permutation of the rows: verl's DataProto.reorder, which keeps each row's data together.
  [[nodiscard]] Trajectories reordered(std::span<const Index> order) const {
    VERL_CHECK_ARG(static_cast<Index>(order.size()) == rows(), "order: expected a permutation of the {} rows, got {} indices",
                   rows(), order.size());
    std::vector<char> seen(order.size(), 0);
    for (const Index r : order) {
      VERL_CHECK_ARG(r >= 0 && r < rows() && !seen[static_cast<std::size_t>(r)],
                     "order: expected a permutation of 0..{}, got {} (out of range or repeated)", rows() - 1, r);
      seen[static_cast<std::size_t>(r)] = 1;
    }
    Trajectories out;
    const auto reorder = [&](auto... field) { ((out.*field = detail::gather_rows(this->*field, order)), ...); };
    std::apply(reorder, generated_fields());
    std::apply(reorder, computed_fields());
    return out;
  }

  /// Appends the generation and reward fields of `other` (prompt widths may differ: the narrower
  /// batch is left-padded; the padding is under attention_mask 0, never seen by a model).
  void append(const Trajectories& other) {
    if (rows() == 0) {
      *this = other;
      return;
    }
    VERL_CHECK_ARG(other.responses.cols() == responses.cols(), "append: expected responses of width {}, got {}",
                   responses.cols(), other.responses.cols());
    const Index width = std::max(input_ids.cols(), other.input_ids.cols());
    Trajectories widened = other;
    for (Trajectories* batch : {this, &widened}) {
      batch->input_ids = detail::left_pad_columns(batch->input_ids, width);
      batch->attention_mask = detail::left_pad_columns(batch->attention_mask, width);
      batch->position_ids = detail::left_pad_columns(batch->position_ids, width);
    }
    std::apply([&](auto... field) { ((this->*field = detail::stack_rows(this->*field, widened.*field)), ...); },
               generated_fields());
  }
};

/// verl's RayPPOTrainer._balance_batch: reorders the rows so that each of `world_size`
/// data-parallel ranks' contiguous share (verl's DP dispatch splits the batch into equal
/// consecutive chunks) has about the same total sequence length (attention_mask sum), with
/// Karmarkar-Karp equal-size partitions. Returns verl's global_seqlen/* metrics. With one rank
/// the order is unchanged (the single partition is sorted).
inline Metrics balance_batch(Trajectories& t, int world_size, std::string_view prefix = "global_seqlen") {
  VERL_CHECK_ARG(world_size >= 1, "world_size: expected >= 1, got {}", world_size);
  VERL_CHECK_ARG(t.rows() % world_size == 0, "balance_batch: {} rows do not split over {} ranks", t.rows(), world_size);
  std::vector<std::int64_t> seqlens(static_cast<std::size_t>(t.rows()));
  for (Index r = 0; r < t.rows(); ++r)
    seqlens[static_cast<std::size_t>(r)] = static_cast<std::int64_t>(std::llround(t.attention_mask.row(r).sum()));
  const parallel::Partitions partitions = parallel::get_seqlen_balanced_partitions(seqlens, world_size, /*equal_size=*/true);
  std::vector<Index> order;
  order.reserve(seqlens.size());
  for (const auto& part : partitions)
    for (const int r : part) order.push_back(r);
  t = t.reordered(order);
  return parallel::log_seqlen_unbalance(seqlens, partitions, prefix);
}

}  // namespace verl::trainer
