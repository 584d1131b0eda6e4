// verl's update_actor (dp_actor.update_policy) on a data-parallel rank's rows, shared by the actor
// workers (data parallel, and Megatron's tensor-parallel one, which differ only in how they reduce
// over their data-parallel group and take the optimizer step).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "verl/algo/kl/registry.hpp"
#include "verl/algo/loss_aggregation.hpp"
#include "verl/algo/policy_losses/registry.hpp"
#include "verl/core/metrics.hpp"
#include "verl/data/data_proto.hpp"
#include "verl/model/causal_lm.hpp"
#include "verl/optim/adamw.hpp"
#include "verl/optim/lr_scheduler.hpp"
#include "verl/trainer/config.hpp"
#include "verl/trainer/metrics.hpp"
#include "verl/trainer/ppo_trainer_algorithm.hpp"
#include "verl/trainer/workers/batch_keys.hpp"
#include "verl/trainer/workers/role_state.hpp"

namespace verl::trainer {

/// The actor's update sizes (actor_rollout_ref.actor.ppo_*, the mini-batch in prompts x rollout.n).
inline PpoUpdateSizes actor_update_sizes(const PPOConfig& config) {
  const auto& cfg = config.actor_rollout_ref.actor;
  return {.epochs = cfg.ppo_epochs,
          .mini_batch_rows = cfg.ppo_mini_batch_size * config.actor_rollout_ref.rollout.n,
          .micro_batch_size_per_gpu = cfg.ppo_micro_batch_size_per_gpu,
          .micro_batch_size = cfg.ppo_micro_batch_size};
}

/// The micro-batches of every optimizer step update_actor_rows takes on a rank of `rows` rows
/// (see ppo_update_micro_batches).
inline std::vector<std::vector<std::pair<Index, Index>>> update_micro_batches(Index rows, const PPOConfig& config, Index dp) {
  return ppo_update_micro_batches(rows, actor_update_sizes(config), dp);
}

/// ppo_epochs over this rank's share of each mini-batch (rows ordered by mini_batch_major_order),
/// micro-batches whose gradients accumulate, losses aggregated over the whole mini-batch
/// (GlobalBatchInfo: its token and row counts over the `dp` ranks, `dp_sum(x)` summing over them),
/// then `optimizer_step(grad_clip, updates, nonfinite)` (averaging, clipping and AdamW; returns the
/// norm) and `reduce_over_dp(metrics)`. meta_info in: "entropy_metric" (also report actor/entropy
/// from the update's forward). Returns update_result's DataProto.
template <class Policy, class DpSum, class OptimizerStep, class ReduceOverDp>
data::DataProto update_actor_rows(Policy& actor, const data::DataProto& batch, const PPOConfig& config,
                                  const PPOAlgorithm& algorithm, optim::AdamW& optimizer, optim::LrScheduler<>& scheduler,
                                  Index dp, DpSum&& dp_sum, OptimizerStep&& optimizer_step, ReduceOverDp&& reduce_over_dp) {
  const auto& cfg = config.actor_rollout_ref.actor;
  const bool entropy_metric = batch.meta_info().value("entropy_metric", false);
  const Index n = config.actor_rollout_ref.rollout.n;
  const MatrixI64& input_ids = int_column(batch, keys::input_ids);
  const MatrixF& response_mask = float_column(batch, keys::response_mask);
  const MatrixF& advantages = float_column(batch, keys::advantages);
  const Index width = response_mask.cols(), prompt_width = input_ids.cols() - width;
  const float temperature = static_cast<float>(config.actor_rollout_ref.rollout.temperature);
  const Index global_rows = batch.size() * dp;
  scheduler.apply(optimizer);
  Metrics step_metrics;
  step_metrics["actor/lr"] = scheduler.get_last_lr();
  MetricsAccumulator acc;
  const bool entropy_in_loss = algorithm.entropy_coeff != 0;
  // verl's dp_actor on_policy: one mini-batch, one epoch; in bypass mode the stored old
  // log-probs are the rollout's, never the update's own; with meta_info "old_policy_saved"
  // (separate_async) they are the step's pi_old, not the policy updating now.
  const bool old_policy_saved = batch.meta_info().value("old_policy_saved", false);
  const bool on_policy = cfg.ppo_epochs == 1 && global_rows <= cfg.ppo_mini_batch_size * n && !algorithm.rollout.bypass &&
                         !old_policy_saved;
  const bool has_is_weights = batch.has_tensor(keys::rollout_is_weights);
  std::int64_t updates = 0, nonfinite = 0;
  // The same sizes as update_micro_batches, which a pipeline's other stages follow.
  const PpoUpdateSizes sizes = actor_update_sizes(config);
  for (std::int64_t epoch = 0; epoch < sizes.epochs; ++epoch) {
    for (const auto& [lo, hi] : local_mini_batch_bounds(batch.size(), sizes.mini_batch_rows, dp)) {
      const algo::GlobalBatchInfo info{.dp_size = static_cast<double>(dp),
                                       .batch_num_tokens = dp_sum(response_mask.middleRows(lo, hi - lo).sum()),
                                       .global_batch_size = static_cast<double>((hi - lo) * dp),
                                       .loss_scale_factor = cfg.loss_scale_factor};
      const Index share = hi - lo;
      const Index micro = ppo_micro_batch_rows(sizes, dp, share);
      actor.zero_grad();
      Metrics mini;
      double pg_loss = 0, kl_loss = 0, entropy_agg = 0;
      for (Index b = lo; b < hi; b += micro) {
        const Index e = std::min(hi, b + micro), rows = e - b;
        const auto tokens = token_batch(batch, b, e);
        const MatrixI64 targets = model::next_token_targets(tokens);
        const auto out = actor.forward(tokens, {.targets = std::span<const std::int64_t>(targets.data(), static_cast<std::size_t>(targets.size())),
                                                .return_entropy = entropy_in_loss || entropy_metric,
                                                .temperature = temperature,
                                                .keep_activations = true});
        const MatrixF mask = response_mask.middleRows(b, rows);
        const MatrixF log_prob = response_block(out.log_probs, width);
        // verl: on-policy, old_log_prob = log_prob.detach() (the ratio is exactly 1).
        MatrixF stored_old;
        if (!on_policy) stored_old = float_column(batch, keys::old_log_probs).middleRows(b, rows);
        const MatrixF& old = on_policy ? log_prob : stored_old;
        if (entropy_metric) {
          entropy_agg += algo::agg_loss(response_block(out.entropy, width), mask, algorithm.loss_agg_mode, info);
        }
        const MatrixF adv = advantages.middleRows(b, rows);
        algo::PolicyLossBatch loss_batch{.old_log_prob = old, .log_prob = log_prob, .advantages = adv, .response_mask = mask};
        MatrixF is_weights;
        if (has_is_weights) {
          is_weights = float_column(batch, keys::rollout_is_weights).middleRows(b, rows);
          loss_batch.rollout_is_weights.emplace(is_weights);
        }
        algo::PolicyLossResult pg = algo::compute_policy_loss(
            algorithm.policy_loss, loss_batch, {.loss_agg_mode = algorithm.loss_agg_mode, .global_batch_info = info});
        pg_loss += pg.pg_loss;
        MatrixF grad_log_prob = std::move(pg.grad_log_prob);
        MatrixF grad_entropy;
        if (entropy_in_loss) {
          grad_entropy = algo::agg_loss_weights(mask, algorithm.loss_agg_mode, info) * static_cast<float>(-algorithm.entropy_coeff);
        }
        if (algorithm.kl_loss) {
          const MatrixF ref = float_column(batch, keys::ref_log_prob).middleRows(b, rows);
          const MatrixF kld = algo::kl_penalty(log_prob, ref, *algorithm.kl_loss);
          kl_loss += algo::agg_loss(kld, mask, algorithm.loss_agg_mode, info);
          const MatrixF cotangent = algo::agg_loss_weights(mask, algorithm.loss_agg_mode, info) *
                                    static_cast<float>(algorithm.kl_loss_coef);
          grad_log_prob += algo::kl_penalty_backward(log_prob, ref, cotangent, *algorithm.kl_loss).logprob;
        }
        // Cotangents in the model's (rows, P + R) layout.
        std::vector<float> d_log_probs(static_cast<std::size_t>(rows * (prompt_width + width)), 0.0f);
        std::vector<float> d_entropy(entropy_in_loss ? d_log_probs.size() : 0, 0.0f);
        for (Index r = 0; r < rows; ++r) {
          for (Index c = 0; c < width; ++c) {
            const auto at = static_cast<std::size_t>(r * (prompt_width + width) + prompt_width - 1 + c);
            d_log_probs[at] = grad_log_prob(r, c);
            if (entropy_in_loss) d_entropy[at] = grad_entropy(r, c);
          }
        }
        actor.backward({.log_probs = d_log_probs, .entropy = d_entropy});
        for (const auto& [k, v] : pg.metrics) mini[k] += v / std::ceil(static_cast<double>(share) / static_cast<double>(micro));
      }
      const float norm = optimizer_step(cfg.grad_clip, updates, nonfinite);
      // With GlobalBatchInfo each micro-batch's loss is its share of the mini-batch loss: their
      // sum is the mini-batch's loss, whatever the micro-batch size.
      mini["actor/pg_loss"] = pg_loss;
      if (entropy_metric) mini["actor/entropy"] = entropy_agg;
      if (algorithm.kl_loss) {
        mini["actor/kl_loss"] = kl_loss;
        mini["actor/kl_coef"] = algorithm.kl_loss_coef;
      }
      reduce_over_dp(mini);
      mini["actor/grad_norm"] = norm;
      acc.append(mini);
    }
  }
  scheduler.step();
  for (const auto& [k, v] : acc.reduce()) step_metrics[k] = v;
  return update_result(step_metrics, updates, nonfinite);
}

}  // namespace verl::trainer
