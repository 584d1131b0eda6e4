// The values each configuration key accepts: every floating-point setting must be finite, and the
// keys below must lie in their range. One table for the PPO and SFT trainers' keys, applied to the
// resolved configuration before anything runs; README.md ("Configuration: value ranges") lists the
// same table, and a test holds the two together.
#pragma once

#include <fmt/format.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace verl::trainer::detail {

/// An interval of accepted values, and verl's "unset" value where a key has one (accepted too).
struct ValueRange {
  double low = -INFINITY;
  double high = INFINITY;
  bool low_open = false;   ///< low itself is refused
  bool high_open = false;  ///< high itself is refused
  std::optional<double> unset{};
  std::string_view wording;  ///< what the error says is expected

  [[nodiscard]] bool accepts(double value) const {
    if (unset && value == *unset) return true;
    const bool above = low_open ? value > low : value >= low;
    const bool below = high_open ? value < high : value <= high;
    return above && below;
  }
};

inline constexpr ValueRange positive_count{.low = 1, .wording = "a positive integer"};
inline constexpr ValueRange non_negative{.low = 0, .wording = "a value >= 0"};
inline constexpr ValueRange positive{.low = 0, .low_open = true, .wording = "a value > 0"};
inline constexpr ValueRange unit_interval{.low = 0, .high = 1, .wording = "a value in [0, 1]"};

/// A key pattern and its range. A pattern starting with "*." matches a key that ends with the rest
/// after a dot, or is the rest (`*.optim.lr`: the actor's, the critic's and the SFT trainer's
/// learning rate); any other pattern is a key.
struct ValueRule {
  std::string_view pattern;
  ValueRange range;
};

inline constexpr std::array value_rules{
    // optimizers (actor_rollout_ref.actor.optim, critic.optim)
    ValueRule{"*.optim.lr", {.low = 0, .wording = "a learning rate >= 0"}},
    ValueRule{"*.optim.weight_decay", non_negative},
    ValueRule{"*.optim.betas", {.low = 0, .high = 1, .high_open = true, .wording = "values in [0, 1)"}},
    ValueRule{"*.optim.lr_warmup_steps_ratio", unit_interval},
    ValueRule{"*.optim.warmup_steps_ratio", unit_interval},
    ValueRule{"*.optim.min_lr_ratio", unit_interval},
    ValueRule{"*.optim.clip_grad", positive},
    ValueRule{"*.optim.num_cycles", non_negative},
    ValueRule{"*.optim.total_training_steps", {.low = 1, .unset = -1, .wording = "a positive integer (or -1, unset)"}},
    ValueRule{"*.optim.lr_warmup_steps", {.low = 0, .unset = -1, .wording = "an integer >= 0 (or -1, unset)"}},
    // the actor's loss
    ValueRule{"actor_rollout_ref.actor.clip_ratio", positive},
    ValueRule{"actor_rollout_ref.actor.clip_ratio_low", positive},
    ValueRule{"actor_rollout_ref.actor.clip_ratio_high", positive},
    ValueRule{"actor_rollout_ref.actor.clip_ratio_c", {.low = 1, .low_open = true, .wording = "a value > 1"}},
    ValueRule{"actor_rollout_ref.actor.tau_pos", positive},
    ValueRule{"actor_rollout_ref.actor.tau_neg", positive},
    ValueRule{"actor_rollout_ref.actor.loss_scale_factor", positive},
    ValueRule{"actor_rollout_ref.actor.entropy_coeff", non_negative},
    ValueRule{"actor_rollout_ref.actor.kl_loss_coef", non_negative},
    ValueRule{"actor_rollout_ref.actor.policy_loss.clip_cov_ratio", positive},
    ValueRule{"actor_rollout_ref.actor.policy_loss.kl_cov_ratio", positive},
    ValueRule{"actor_rollout_ref.actor.policy_loss.ppo_kl_coef", non_negative},
    ValueRule{"actor_rollout_ref.actor.policy_loss.dro_beta", positive},
    ValueRule{"*.grad_clip", positive},
    ValueRule{"critic.cliprange_value", positive},
    // batch sizes, epochs, token budgets, parallel sizes
    ValueRule{"*.ppo_mini_batch_size", positive_count},
    ValueRule{"*.ppo_micro_batch_size", positive_count},
    ValueRule{"*.ppo_micro_batch_size_per_gpu", positive_count},
    ValueRule{"*.ppo_max_token_len_per_gpu", positive_count},
    ValueRule{"*.ppo_epochs", positive_count},
    ValueRule{"*.log_prob_micro_batch_size", positive_count},
    ValueRule{"*.log_prob_micro_batch_size_per_gpu", positive_count},
    ValueRule{"*.log_prob_max_token_len_per_gpu", positive_count},
    ValueRule{"*.forward_micro_batch_size", positive_count},
    ValueRule{"*.forward_micro_batch_size_per_gpu", positive_count},
    ValueRule{"*.forward_max_token_len_per_gpu", positive_count},
    ValueRule{"*.ulysses_sequence_parallel_size", positive_count},
    ValueRule{"*.tensor_model_parallel_size", positive_count},
    ValueRule{"*.data_parallel_size", positive_count},
    ValueRule{"*.pipeline_model_parallel_size", positive_count},
    ValueRule{"*.expert_parallel_size", positive_count},
    // sampling (actor_rollout_ref.rollout and its val_kwargs)
    ValueRule{"*.temperature", {.low = 0, .wording = "a value >= 0 (0: greedy)"}},
    ValueRule{"*.top_p", {.low = 0, .high = 1, .low_open = true, .wording = "a value in (0, 1]"}},
    ValueRule{"*.top_k", {.low = 1, .unset = -1, .wording = "-1 (off) or an integer >= 1"}},
    ValueRule{"*.n", positive_count},
    ValueRule{"actor_rollout_ref.rollout.prompt_length", positive_count},
    ValueRule{"actor_rollout_ref.rollout.response_length", positive_count},
    // the algorithm
    ValueRule{"algorithm.gamma", unit_interval},
    ValueRule{"algorithm.lam", unit_interval},
    ValueRule{"algorithm.kl_ctrl.kl_coef", non_negative},
    ValueRule{"algorithm.kl_ctrl.horizon", positive},
    ValueRule{"algorithm.kl_ctrl.target_kl", non_negative},
    ValueRule{"algorithm.filter_groups.max_num_gen_batches", {.low = 0, .wording = "an integer >= 0 (0: unlimited)"}},
    ValueRule{"algorithm.safe_rlhf.lambda_init", positive},
    ValueRule{"algorithm.safe_rlhf.lambda_lr", non_negative},
    ValueRule{"algorithm.safe_rlhf.lambda_max", positive},
    ValueRule{"algorithm.safe_rlhf.lambda_update_delay_steps", {.low = 0, .wording = "a step count >= 0"}},
    ValueRule{"algorithm.safe_rlhf.episode_cost_window_size", positive_count},
    ValueRule{"algorithm.safe_rlhf.clip_range_score", positive},
    ValueRule{"reward_model.overlong_buffer.len", {.low = 0, .wording = "a length >= 0"}},
    ValueRule{"reward_model.overlong_buffer.penalty_factor", non_negative},
    // data
    ValueRule{"data.train_batch_size", positive_count},
    ValueRule{"data.val_batch_size", positive_count},
    ValueRule{"data.gen_batch_size", positive_count},
    ValueRule{"data.max_prompt_length", positive_count},
    ValueRule{"data.max_response_length", positive_count},
    ValueRule{"data.micro_batch_size_per_gpu", positive_count},
    ValueRule{"data.train_max_samples", {.low = 1, .unset = -1, .wording = "a positive integer (or -1, all)"}},
    ValueRule{"data.val_max_samples", {.low = 1, .unset = -1, .wording = "a positive integer (or -1, all)"}},
    // the trainer
    ValueRule{"trainer.total_epochs", positive_count},
    ValueRule{"trainer.total_training_steps", positive_count},
    ValueRule{"trainer.nnodes", positive_count},
    ValueRule{"trainer.v1.separate_async.parameter_sync_step", positive_count},
    ValueRule{"trainer.v1.separate_async.num_warmup_batches", {.low = 0, .wording = "a batch count >= 0"}},
    ValueRule{"trainer.v1.sampler.max_off_policy_threshold", positive_count},
    ValueRule{"trainer.n_gpus_per_node", positive_count},
    ValueRule{"trainer.save_freq", {.low = -1, .wording = "-1 or 0 (never) or a positive step count"}},
    ValueRule{"trainer.test_freq", {.low = -1, .wording = "-1 or 0 (never) or a positive step count"}},
    ValueRule{"trainer.critic_warmup", {.low = 0, .wording = "a step count >= 0"}},
    ValueRule{"trainer.log_val_generations", {.low = 0, .wording = "a count >= 0"}},
    ValueRule{"trainer.max_actor_ckpt_to_keep", positive_count},
    ValueRule{"trainer.max_critic_ckpt_to_keep", positive_count},
    ValueRule{"trainer.max_ckpt_to_keep", positive_count},
    ValueRule{"trainer.max_consecutive_nonfinite_steps", positive_count},
    // LoRA (actor_rollout_ref.model.*, verl_sft's model.*)
    ValueRule{"*.lora_rank", {.low = 0, .wording = "an integer >= 0 (0: no LoRA)"}},
    ValueRule{"*.lora_alpha", positive},
    ValueRule{"actor_rollout_ref.nccl_timeout", {.low = 1, .wording = "a number of seconds >= 1"}},
};

/// Whether `key` matches `pattern` (see ValueRule).
constexpr bool key_matches(std::string_view pattern, std::string_view key) {
  if (!pattern.starts_with("*.")) return pattern == key;
  const std::string_view suffix = pattern.substr(1);  // ".optim.lr"
  return key.ends_with(suffix) || key == suffix.substr(1);
}

/// The rule for `key`, or nullptr.
constexpr const ValueRule* rule_for(std::string_view key) {
  for (const ValueRule& rule : value_rules)
    if (key_matches(rule.pattern, key)) return &rule;
  return nullptr;
}

/// Appends to `problems` what is wrong with the value of `key`: not finite (any floating-point
/// setting), or outside its rule's range. Optional values are checked when set; lists value by
/// value.
template <class Field>
void check_value(std::string_view key, const Field& field, std::vector<std::string>& problems) {
  if constexpr (std::is_same_v<Field, double> || std::is_same_v<Field, std::int64_t>) {
    if constexpr (std::is_same_v<Field, double>) {
      if (!std::isfinite(field)) {
        problems.push_back(fmt::format("{}: expected a finite value, got {}", key, field));
        return;
      }
    }
    if (const ValueRule* rule = rule_for(key); rule != nullptr && !rule->range.accepts(static_cast<double>(field)))
      problems.push_back(fmt::format("{}: expected {}, got {}", key, rule->range.wording, field));
  } else if constexpr (std::is_same_v<Field, std::optional<double>> || std::is_same_v<Field, std::optional<std::int64_t>> ||
                       std::is_same_v<Field, std::optional<std::vector<double>>>) {
    if (field) check_value(key, *field, problems);
  } else if constexpr (std::is_same_v<Field, std::vector<double>>) {
    for (const double value : field) {
      const std::size_t before = problems.size();
      check_value(key, value, problems);
      if (problems.size() != before) return;  // one message per key
    }
  }
}

}  // namespace verl::trainer::detail
