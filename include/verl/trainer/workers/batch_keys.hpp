// The columns of a PPO step's DataProto, by verl's names, and the small conversions the workers and
// the controller share: a row range of the batch as the model's TokenBatch, the response part of a
// model output, and the order of rows that hands each data-parallel rank its share of every
// mini-batch.
//
// Rows are prompt-major (row b * n + j is sample j of prompt b). Tensors: input_ids, attention_mask,
// position_ids (N, P + R); responses, response_mask, rollout_log_probs, old_log_probs, ref_log_prob,
// values, rm_scores, token_level_scores, token_level_rewards, advantages, returns, rollout_is_weights,
// sum_pi_squared, entropys (N, R); reward_baselines (N, 1). Non-tensor columns: uid (the prompt
// group), index (the dataset row of the prompt), reward_output (the reward function's JSON result).
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "verl/config.hpp"
#include "verl/core/error.hpp"
#include "verl/core/tensor.hpp"
#include "verl/data/data_proto.hpp"
#include "verl/model/causal_lm.hpp"
#include "verl/reward/scorer.hpp"

namespace verl::trainer::keys {

inline constexpr std::string_view input_ids = "input_ids";
inline constexpr std::string_view attention_mask = "attention_mask";
inline constexpr std::string_view position_ids = "position_ids";
inline constexpr std::string_view responses = "responses";
inline constexpr std::string_view response_mask = "response_mask";
inline constexpr std::string_view rollout_log_probs = "rollout_log_probs";
inline constexpr std::string_view old_log_probs = "old_log_probs";
inline constexpr std::string_view ref_log_prob = "ref_log_prob";
inline constexpr std::string_view entropys = "entropys";
inline constexpr std::string_view sum_pi_squared = "sum_pi_squared";
inline constexpr std::string_view values = "values";
/// The reward model's token-level scores (N, R): verl's rm_scores (RewardModelWorker).
inline constexpr std::string_view rm_scores = "rm_scores";
inline constexpr std::string_view token_level_scores = "token_level_scores";
inline constexpr std::string_view token_level_rewards = "token_level_rewards";
inline constexpr std::string_view advantages = "advantages";
inline constexpr std::string_view returns = "returns";
inline constexpr std::string_view rollout_is_weights = "rollout_is_weights";
inline constexpr std::string_view reward_baselines = "reward_baselines";
inline constexpr std::string_view uid = "uid";
inline constexpr std::string_view index = "index";
/// The weight versions (global steps) a row was generated with, oldest and newest (verl v1's tags).
inline constexpr std::string_view min_global_steps = "min_global_steps";
inline constexpr std::string_view max_global_steps = "max_global_steps";
inline constexpr std::string_view reward_output = "reward_output";
/// Per-prompt sampling seeds of a generation request (uint64 bits in an int64 column).
inline constexpr std::string_view seed = "seed";

}  // namespace verl::trainer::keys

namespace verl::trainer {

/// A float32 tensor column of `batch` (an error naming the column when it is missing).
inline const MatrixF& float_column(const data::DataProto& batch, std::string_view name) {
  return batch.tensor<float>(name);
}

/// An int64 tensor column of `batch`.
inline const MatrixI64& int_column(const data::DataProto& batch, std::string_view name) {
  return batch.tensor<std::int64_t>(name);
}

/// Rows [begin, end) of the batch's sequences as the model's token batch.
inline model::TokenBatch token_batch(const data::DataProto& batch, Index begin, Index end) {
  return model::TokenBatch::padded(int_column(batch, keys::input_ids).middleRows(begin, end - begin),
                                   float_column(batch, keys::attention_mask).middleRows(begin, end - begin),
                                   int_column(batch, keys::position_ids).middleRows(begin, end - begin));
}

/// The response part of a (rows, P + R) model output: column P - 1 + t predicts response token t.
inline MatrixF response_block(const MatrixF& full, Index response_width) {
  return full.rightCols(response_width + 1).leftCols(response_width);
}

/// Mini-batch boundaries over `rows` rows: chunks of `size` rows (torch's split: the last may be
/// shorter).
inline std::vector<std::pair<Index, Index>> mini_batch_bounds(Index rows, Index size) {
  VERL_CHECK_ARG(size > 0, "mini-batch size: expected a positive number of rows, got {}", size);
  std::vector<std::pair<Index, Index>> out;
  for (Index b = 0; b < rows; b += size) out.emplace_back(b, std::min(rows, b + size));
  return out;
}

/// The order of rows that makes data-parallel rank r's contiguous chunk (DP_COMPUTE_PROTO's split)
/// hold, one after another, its share of every mini-batch of `mini_batch_rows` rows: mini-batch m
/// is a contiguous run of the batch, split evenly over the `dp` ranks, so a worker's local
/// mini-batch m and the other ranks' together form exactly that run. Each mini-batch's rows must
/// split evenly over the ranks.
inline std::vector<Index> mini_batch_major_order(Index rows, Index mini_batch_rows, Index dp, std::string_view key) {
  VERL_CHECK_ARG(dp > 0, "data-parallel size: expected >= 1, got {}", dp);
  const auto bounds = mini_batch_bounds(rows, mini_batch_rows);
  for (const auto& [begin, end] : bounds) {
    VERL_CHECK_ARG((end - begin) % dp == 0, "{}: a mini-batch of {} rows does not split over {} data-parallel ranks", key,
                   end - begin, dp);
  }
  std::vector<Index> order;
  order.reserve(static_cast<std::size_t>(rows));
  for (Index rank = 0; rank < dp; ++rank) {
    for (const auto& [begin, end] : bounds) {
      const Index share = (end - begin) / dp;
      for (Index r = begin + rank * share; r < begin + (rank + 1) * share; ++r) order.push_back(r);
    }
  }
  return order;
}

/// A worker's local mini-batches: the share of each of the batch's mini-batches (see
/// mini_batch_major_order) for a local chunk of `local_rows` rows out of `local_rows * dp`.
inline std::vector<std::pair<Index, Index>> local_mini_batch_bounds(Index local_rows, Index mini_batch_rows, Index dp) {
  std::vector<std::pair<Index, Index>> out;
  Index begin = 0;
  for (const auto& [b, e] : mini_batch_bounds(local_rows * dp, mini_batch_rows)) {
    const Index share = (e - b) / dp;
    out.emplace_back(begin, begin + share);
    begin += share;
  }
  return out;
}

/// A PPO update's batch sizes, as the actor's or the critic's section of the config gives them.
struct PpoUpdateSizes {
  std::int64_t epochs = 1;
  Index mini_batch_rows = 0;  ///< ppo_mini_batch_size prompts x rollout.n responses, over all ranks
  std::optional<std::int64_t> micro_batch_size_per_gpu;
  std::optional<std::int64_t> micro_batch_size;  ///< over all ranks
};

/// The rows of one micro-batch of a PPO update on a rank holding `share` rows of a mini-batch:
/// ppo_micro_batch_size_per_gpu, else ppo_micro_batch_size over the `dp` ranks, else the share.
inline Index ppo_micro_batch_rows(const PpoUpdateSizes& sizes, Index dp, Index share) {
  return sizes.micro_batch_size_per_gpu.value_or(
      sizes.micro_batch_size ? std::max<std::int64_t>(1, *sizes.micro_batch_size / dp) : share);
}

/// The [begin, end) rows of every micro-batch of every optimizer step that a PPO update takes on
/// a rank of `rows` rows: ppo_epochs x the rank's share of each mini-batch over the `dp` ranks,
/// in order. A pipeline's stages that do not compute the loss run the same micro-batches
/// alongside the one that does.
inline std::vector<std::vector<std::pair<Index, Index>>> ppo_update_micro_batches(Index rows, const PpoUpdateSizes& sizes,
                                                                                  Index dp) {
  std::vector<std::vector<std::pair<Index, Index>>> steps;
  for (std::int64_t epoch = 0; epoch < sizes.epochs; ++epoch) {
    for (const auto& [lo, hi] : local_mini_batch_bounds(rows, sizes.mini_batch_rows, dp)) {
      const Index micro = ppo_micro_batch_rows(sizes, dp, hi - lo);
      auto& step = steps.emplace_back();
      for (Index b = lo; b < hi; b += micro) step.emplace_back(b, std::min(hi, b + micro));
    }
  }
  return steps;
}

/// The reward function's result as a JSON value (a non-tensor column crosses the wire as JSON).
inline nlohmann::json to_json(const reward::RewardOutput& out) {
  nlohmann::json j = {{"score", out.score}};
  if (out.acc) j["acc"] = *out.acc;
  if (out.pred) j["pred"] = *out.pred;
  if (!out.components.empty()) j["components"] = out.components;
  return j;
}

inline reward::RewardOutput reward_output_from_json(const nlohmann::json& j) {
  reward::RewardOutput out;
  out.score = j.at("score").get<double>();
  if (j.contains("acc")) out.acc = j["acc"].get<bool>();
  if (j.contains("pred")) out.pred = j["pred"].get<std::string>();
  if (j.contains("components"))
    for (const auto& [name, value] : j["components"].items()) out.components.emplace(name, value.get<double>());
  return out;
}

}  // namespace verl::trainer
