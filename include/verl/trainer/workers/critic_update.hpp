// verl's update_critic (dp_critic.update_critic) on a data-parallel rank's rows, shared by the
// critic workers (data parallel, and Megatron's tensor-parallel one, which differ only in how they
// reduce over their data-parallel group and take the optimizer step), as actor_update.hpp is
// shared by the actor workers.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "verl/algo/loss_aggregation.hpp"
#include "verl/algo/value_loss.hpp"
#include "verl/core/metrics.hpp"
#include "verl/data/data_proto.hpp"
#include "verl/model/value_model.hpp"
#include "verl/optim/adamw.hpp"
#include "verl/optim/lr_scheduler.hpp"
#include "verl/trainer/config.hpp"
#include "verl/trainer/metrics.hpp"
#include "verl/trainer/workers/batch_keys.hpp"
#include "verl/trainer/workers/role_state.hpp"

namespace verl::trainer {

/// What update_critic_rows leaves for its caller's update_result: the step's metrics, the
/// optimizer steps taken and those skipped for a non-finite gradient norm.
struct CriticUpdate {
  Metrics metrics;
  std::int64_t updates = 0;
  std::int64_t nonfinite = 0;
};

/// The critic's update sizes (critic.ppo_*, the mini-batch in prompts x rollout.n).
inline PpoUpdateSizes critic_update_sizes(const PPOConfig& config) {
  const auto& cfg = config.critic;
  return {.epochs = cfg.ppo_epochs,
          .mini_batch_rows = cfg.ppo_mini_batch_size * config.actor_rollout_ref.rollout.n,
          .micro_batch_size_per_gpu = cfg.ppo_micro_batch_size_per_gpu,
          .micro_batch_size = cfg.ppo_micro_batch_size};
}

/// The micro-batches of every optimizer step update_critic_rows takes on a rank of `rows` rows
/// (see ppo_update_micro_batches).
inline std::vector<std::vector<std::pair<Index, Index>>> critic_update_micro_batches(Index rows, const PPOConfig& config,
                                                                                     Index dp) {
  return ppo_update_micro_batches(rows, critic_update_sizes(config), dp);
}

/// critic.ppo_epochs over this rank's share of each mini-batch of critic.ppo_mini_batch_size
/// prompts x rollout.n (rows ordered by mini_batch_major_order), micro-batches whose gradients
/// accumulate, the clipped value loss aggregated over the whole mini-batch (GlobalBatchInfo: its
/// token and row counts over the `dp` ranks, `dp_sum(x)` summing over them), then
/// `optimizer_step(grad_clip, updates, nonfinite)` (averaging, clipping and AdamW; returns the
/// norm) and `reduce_over_dp(metrics)`.
template <class Critic, class DpSum, class OptimizerStep, class ReduceOverDp>
CriticUpdate update_critic_rows(Critic& critic, const data::DataProto& batch, const PPOConfig& config, optim::AdamW& optimizer,
                                optim::LrScheduler<>& scheduler, Index dp, DpSum&& dp_sum, OptimizerStep&& optimizer_step,
                                ReduceOverDp&& reduce_over_dp) {
  const auto& cfg = config.critic;
  const MatrixF& response_mask = float_column(batch, keys::response_mask);
  const MatrixF& returns = float_column(batch, keys::returns);
  const MatrixF& values = float_column(batch, keys::values);
  const Index width = response_mask.cols(), prompt_width = int_column(batch, keys::input_ids).cols() - width;
  const algo::LossAggMode mode = algo::parse_loss_agg_mode(cfg.loss_agg_mode);
  scheduler.apply(optimizer);
  CriticUpdate result;
  result.metrics["critic/lr"] = scheduler.get_last_lr();
  MetricsAccumulator acc;
  // The same sizes as critic_update_micro_batches, which a pipeline's other stages follow.
  const PpoUpdateSizes sizes = critic_update_sizes(config);
  for (std::int64_t epoch = 0; epoch < sizes.epochs; ++epoch) {
    for (const auto& [lo, hi] : local_mini_batch_bounds(batch.size(), sizes.mini_batch_rows, dp)) {
      const algo::GlobalBatchInfo info{.dp_size = static_cast<double>(dp),
                                       .batch_num_tokens = dp_sum(response_mask.middleRows(lo, hi - lo).sum()),
                                       .global_batch_size = static_cast<double>((hi - lo) * dp),
                                       .loss_scale_factor = std::nullopt};
      const Index share = hi - lo;
      const Index micro = ppo_micro_batch_rows(sizes, dp, share);
      critic.zero_grad();
      Metrics mini;
      double vf_loss = 0;
      const double micro_count = std::ceil(static_cast<double>(share) / static_cast<double>(micro));
      for (Index b = lo; b < hi; b += micro) {
        const Index e = std::min(hi, b + micro), rows = e - b;
        const auto out = critic.forward(token_batch(batch, b, e), model::ValueForwardOptions{.keep_activations = true});
        const MatrixF vpreds = response_block(out.values, width);
        const auto loss = algo::compute_value_loss(vpreds, returns.middleRows(b, rows), values.middleRows(b, rows),
                                                   response_mask.middleRows(b, rows), cfg.cliprange_value, mode, info);
        vf_loss += loss.vf_loss;
        // Cotangents in the model's (rows, P + R) layout: response token c's value sits at P - 1 + c
        // (verl's values[:, -R - 1:-1]).
        std::vector<float> d_values(static_cast<std::size_t>(rows * (prompt_width + width)), 0.0f);
        for (Index r = 0; r < rows; ++r)
          for (Index c = 0; c < width; ++c)
            d_values[static_cast<std::size_t>(r * (prompt_width + width) + prompt_width - 1 + c)] = loss.grad_vpreds(r, c);
        critic.backward(model::ValueCotangents<float>{.values = d_values});
        for (const auto& [k, v] : loss.metrics) mini[k] += v / micro_count;
      }
      const float norm = optimizer_step(cfg.grad_clip, result.updates, result.nonfinite);
      // With GlobalBatchInfo each micro-batch's loss is its share of the mini-batch loss.
      mini["critic/vf_loss"] = vf_loss;
      reduce_over_dp(mini);
      mini["critic/grad_norm"] = norm;
      acc.append(mini);
    }
  }
  scheduler.step();
  for (const auto& [k, v] : acc.reduce()) result.metrics[k] = v;
  return result;
}

}  // namespace verl::trainer
