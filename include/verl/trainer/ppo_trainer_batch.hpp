// Trajectories: one PPO step's batch with verl's batch keys as members (rows are prompt-major:
// row b * n + j is sample j of prompt b), and the row selection and concatenation that dynamic
// sampling needs.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "verl/config.hpp"
#include "verl/core/error.hpp"
#include "verl/core/tensor.hpp"
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

}  // namespace verl::trainer
