// Trajectories: one PPO step's batch with verl's batch keys as members (rows are prompt-major:
// row b * n + j is sample j of prompt b), and the row selection and concatenation that dynamic
// sampling needs.
#pragma once

#include <cmath>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "verl/config.hpp"
#include "verl/core/error.hpp"
#include "verl/core/metrics.hpp"
#include "verl/core/tensor.hpp"
#include "verl/parallel/seqlen_balancing.hpp"
#include "verl/reward/scorer.hpp"

namespace verl::trainer {

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
  MatrixF token_level_scores, token_level_rewards, old_log_probs, ref_log_probs, values, advantages, returns;

  [[nodiscard]] Index rows() const { return responses.rows(); }

  /// The generation and reward fields of `rows`, in that order (later fields are recomputed).
  [[nodiscard]] Trajectories select(std::span<const Index> rows) const {
    Trajectories out;
    auto pick = [&](const auto& m) {
      std::remove_cvref_t<decltype(m)> picked(static_cast<Index>(rows.size()), m.cols());
      for (std::size_t i = 0; i < rows.size(); ++i) picked.row(static_cast<Index>(i)) = m.row(rows[i]);
      return picked;
    };
    out.responses = pick(responses);
    out.response_mask = pick(response_mask);
    out.input_ids = pick(input_ids);
    out.attention_mask = pick(attention_mask);
    out.position_ids = pick(position_ids);
    out.token_level_scores = pick(token_level_scores);
    if (reward_baselines.size() > 0) {
      out.reward_baselines.resize(static_cast<Index>(rows.size()));
      for (std::size_t i = 0; i < rows.size(); ++i) out.reward_baselines[static_cast<Index>(i)] = reward_baselines[rows[i]];
    }
    for (const Index r : rows) {
      const auto at = static_cast<std::size_t>(r);
      out.uid.push_back(uid[at]);
      out.sample.push_back(sample[at]);
      out.reward_outputs.push_back(reward_outputs[at]);
    }
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
    auto pick = [&](const auto& m) {
      if (m.rows() == 0) return m;  // not computed yet
      std::remove_cvref_t<decltype(m)> picked(m.rows(), m.cols());
      for (std::size_t i = 0; i < order.size(); ++i) picked.row(static_cast<Index>(i)) = m.row(order[i]);
      return picked;
    };
    auto pick_values = [&](const auto& v) {
      std::remove_cvref_t<decltype(v)> picked;
      if (v.empty()) return picked;
      for (const Index r : order) picked.push_back(v[static_cast<std::size_t>(r)]);
      return picked;
    };
    Trajectories out;
    out.responses = pick(responses);
    out.response_mask = pick(response_mask);
    out.input_ids = pick(input_ids);
    out.attention_mask = pick(attention_mask);
    out.position_ids = pick(position_ids);
    out.uid = pick_values(uid);
    out.sample = pick_values(sample);
    out.reward_outputs = pick_values(reward_outputs);
    if (reward_baselines.size() > 0) {
      out.reward_baselines.resize(reward_baselines.size());
      for (std::size_t i = 0; i < order.size(); ++i) out.reward_baselines[static_cast<Index>(i)] = reward_baselines[order[i]];
    }
    out.token_level_scores = pick(token_level_scores);
    out.token_level_rewards = pick(token_level_rewards);
    out.old_log_probs = pick(old_log_probs);
    out.ref_log_probs = pick(ref_log_probs);
    out.values = pick(values);
    out.advantages = pick(advantages);
    out.returns = pick(returns);
    return out;
  }

  /// Appends the generation and reward fields of `other` (prompt widths may differ: the narrower
  /// batch is left-padded).
  void append(const Trajectories& other) {
    if (rows() == 0) {
      *this = other;
      return;
    }
    VERL_CHECK_ARG(other.responses.cols() == responses.cols(), "append: expected responses of width {}, got {}",
                   responses.cols(), other.responses.cols());
    const Index width = std::max(input_ids.cols(), other.input_ids.cols());
    auto widen = [&](const auto& m, auto fill) {
      std::remove_cvref_t<decltype(m)> out(m.rows(), width);
      out.leftCols(width - m.cols()).setConstant(fill);
      out.rightCols(m.cols()) = m;
      return out;
    };
    auto stack = [](const auto& a, const auto& b) {
      std::remove_cvref_t<decltype(a)> out(a.rows() + b.rows(), a.cols());
      out.topRows(a.rows()) = a;
      out.bottomRows(b.rows()) = b;
      return out;
    };
    const std::int64_t pad = 0;  // under attention_mask 0: never seen by a model
    input_ids = stack(widen(input_ids, pad), widen(other.input_ids, pad));
    attention_mask = stack(widen(attention_mask, 0.0f), widen(other.attention_mask, 0.0f));
    position_ids = stack(widen(position_ids, std::int64_t{0}), widen(other.position_ids, std::int64_t{0}));
    responses = stack(responses, other.responses);
    response_mask = stack(response_mask, other.response_mask);
    token_level_scores = stack(token_level_scores, other.token_level_scores);
    if (reward_baselines.size() > 0 || other.reward_baselines.size() > 0) {
      VectorF joined(reward_baselines.size() + other.reward_baselines.size());
      joined << reward_baselines, other.reward_baselines;
      reward_baselines = std::move(joined);
    }
    uid.insert(uid.end(), other.uid.begin(), other.uid.end());
    sample.insert(sample.end(), other.sample.begin(), other.sample.end());
    reward_outputs.insert(reward_outputs.end(), other.reward_outputs.begin(), other.reward_outputs.end());
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
