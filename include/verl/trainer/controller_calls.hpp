// The pieces every controller program shares (PPOController, and the Safe-RLHF, ReMax and PPO
// examples): what a generate_sequences call sends and how its answer becomes batch rows, the
// columns each forward pass and update reads, the rule reward of each row, and the metrics an
// update returns. A controller program is then its step: the calls and the algorithm between them.
//
//   auto params = rollout_sampling_params(config, tokenizer);
//   data::DataProto batch = generate_sequences<Actor>(actor, train, indices, params, seed, 0, tokenizer.pad_token_id);
//   auto old = actor.template call<&Actor::compute_log_prob>(sequence_columns(batch));
//   ...
//   absorb_update_metrics(actor.template call<&Actor::update_actor>(
//       update_batch(batch, columns, mini_batch_rows, actor.dp_size(), "actor_rollout_ref.actor.ppo_mini_batch_size")).get(), metrics);
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "verl/algo/kl/controller.hpp"
#include "verl/algo/kl/rewards.hpp"
#include "verl/algo/loss_aggregation.hpp"
#include "verl/config.hpp"
#include "verl/core/error.hpp"
#include "verl/core/metrics.hpp"
#include "verl/data/data_proto.hpp"
#include "verl/data/dataloader.hpp"
#include "verl/data/rl_dataset.hpp"
#include "verl/parallel/seqlen_balancing.hpp"
#include "verl/reward/reward_score.hpp"
#include "verl/rollout/sampling.hpp"
#include "verl/trainer/components_from_config.hpp"
#include "verl/trainer/checkpoint.hpp"
#include "verl/trainer/config/ppo_config.hpp"
#include "verl/trainer/metrics.hpp"
#include "verl/trainer/ppo_trainer_algorithm.hpp"
#include "verl/trainer/ppo_trainer_roles.hpp"
#include "verl/trainer/workers/batch_keys.hpp"
#include "verl/trainer/workers/role_state.hpp"

namespace verl::trainer {

/// The rollout's settings for training generations (actor_rollout_ref.rollout.*, at most
/// data.max_response_length tokens), stopping at the tokenizer's end ids unless rollout.ignore_eos.
inline rollout::SamplingParams rollout_sampling_params(const PPOConfig& config, const TokenizerHooks& tokenizer) {
  const auto& r = config.actor_rollout_ref.rollout;
  rollout::SamplingParams params;
  params.temperature = r.do_sample ? static_cast<float>(r.temperature) : 0.0f;
  params.top_k = r.top_k;
  params.top_p = static_cast<float>(r.top_p);
  params.n = r.n;
  params.max_response_length = config.data.max_response_length;
  if (!r.ignore_eos) params.eos_token_ids = tokenizer.eos_token_ids;
  params.pad_token_id = tokenizer.pad_token_id;
  return params;
}

/// The seed base of generation round `round` (1, 2, ... : dynamic sampling may take several) of
/// training step `global_step`; prompt k of the round draws from derive_seed(base, k), so the
/// samples depend on neither the number of ranks nor the order of the calls.
inline std::uint64_t generation_round_seed(const DataConfig& data, std::int64_t global_step, std::int64_t round) {
  return rollout::derive_seed(rollout::derive_seed(data_seed(data), static_cast<std::uint64_t>(global_step)),
                              static_cast<std::uint64_t>(round));
}

/// A generate_sequences request (DP_COMPUTE_PROTO over `dp` ranks) for dataset[indices]: the
/// prompts left-padded, a seed per prompt, the sampling settings in meta_info. A count that does
/// not divide over the ranks is padded with copies of the last prompt, whose responses
/// generated_rows drops.
struct GenerationRequest {
  data::DataProto prompts;
  std::vector<std::int64_t> samples;  ///< the dataset index of each requested prompt
  Index n = 1;                        ///< responses per prompt
};

/// Prompt k of `indices` draws from derive_seed(seed_base, first + k).
inline GenerationRequest generation_request(const data::RLHFDataset& dataset, std::span<const std::int64_t> indices,
                                            const rollout::SamplingParams& params, std::uint64_t seed_base,
                                            std::int64_t first, Index dp, model::TokenId pad_token_id) {
  VERL_CHECK_ARG(!indices.empty(), "generate_sequences: no prompts to generate for");
  VERL_CHECK_ARG(dp >= 1, "generate_sequences: expected >= 1 data-parallel ranks, got {}", dp);
  const auto prompts = static_cast<Index>(indices.size());
  const Index padded = (prompts + dp - 1) / dp * dp;
  std::vector<std::vector<model::TokenId>> prompt_ids;
  std::vector<std::int64_t> seeds;
  for (Index b = 0; b < padded; ++b) {
    const Index source = std::min(b, prompts - 1);
    prompt_ids.push_back(dataset[indices[static_cast<std::size_t>(source)]].prompt_ids);
    seeds.push_back(static_cast<std::int64_t>(rollout::derive_seed(seed_base, static_cast<std::uint64_t>(first + source))));
  }
  const rollout::PromptBatch all = rollout::PromptBatch::left_padded(prompt_ids, pad_token_id);
  GenerationRequest request;
  request.prompts.set(std::string(keys::input_ids), all.input_ids);
  request.prompts.set(std::string(keys::attention_mask), all.attention_mask);
  request.prompts.set_non_tensor(std::string(keys::seed), std::move(seeds));
  request.prompts.meta_info()["sampling_params"] = sampling_params_to_json(params);
  request.samples.assign(indices.begin(), indices.end());
  request.n = params.n;
  return request;
}

/// generate_sequences' answer to `request` as batch rows: the padding prompts' responses dropped,
/// verl's `index` column (each row's dataset sample) set. Rows are prompt-major (n per prompt).
inline data::DataProto generated_rows(data::DataProto out, const GenerationRequest& request) {
  const auto rows = static_cast<Index>(request.samples.size()) * request.n;
  VERL_CHECK_ARG(out.size() >= rows, "generate_sequences: expected at least {} rows back, got {}", rows, out.size());
  if (out.size() != rows) out = out.slice(0, rows);
  std::vector<std::int64_t> sample;
  sample.reserve(static_cast<std::size_t>(rows));
  for (Index r = 0; r < rows; ++r) sample.push_back(request.samples[static_cast<std::size_t>(r / request.n)]);
  out.set_non_tensor(std::string(keys::index), std::move(sample));
  return out;
}

/// Generates for dataset[indices] on the actor group (Worker::generate_sequences, each rank its
/// contiguous share of the prompts) and returns the rows (generated_rows).
template <class Worker, class Group>
data::DataProto generate_sequences(Group& actor, const data::RLHFDataset& dataset, std::span<const std::int64_t> indices,
                                   const rollout::SamplingParams& params, std::uint64_t seed_base, std::int64_t first,
                                   model::TokenId pad_token_id) {
  const GenerationRequest request =
      generation_request(dataset, indices, params, seed_base, first, actor.dp_size(), pad_token_id);
  return generated_rows(actor.template call<&Worker::generate_sequences>(request.prompts).get(), request);
}

/// The in-process view of verl's DataProto-to-rows balancing (RayPPOTrainer._balance_batch):
/// reorders the rows so that each of the `world_size` contiguous shares has about the same total
/// sequence length. Returns the global_seqlen/* metrics.
inline Metrics balance_batch(data::DataProto& batch, int world_size, std::string_view prefix = "global_seqlen") {
  VERL_CHECK_ARG(world_size >= 1, "world_size: expected >= 1, got {}", world_size);
  VERL_CHECK_ARG(batch.size() % world_size == 0, "balance_batch: {} rows do not split over {} ranks", batch.size(), world_size);
  const MatrixF& attention = float_column(batch, keys::attention_mask);
  std::vector<std::int64_t> seqlens(static_cast<std::size_t>(batch.size()));
  for (Index r = 0; r < batch.size(); ++r)
    seqlens[static_cast<std::size_t>(r)] = static_cast<std::int64_t>(std::llround(attention.row(r).sum()));
  const parallel::Partitions partitions = parallel::get_seqlen_balanced_partitions(seqlens, world_size, /*equal_size=*/true);
  std::vector<Index> order;
  order.reserve(seqlens.size());
  for (const auto& part : partitions)
    for (const int r : part) order.push_back(r);
  batch.reorder(order);
  return parallel::log_seqlen_unbalance(seqlens, partitions, prefix);
}

/// The example controller programs (ReMax, PPO, Safe-RLHF) run verl's step without what only
/// PPOController (verl_train) builds: dynamic sampling, DAPO's overlong penalty, the rollout's own
/// log-probs, a reward model as the reward, a rollout pool of its own, validation, checkpoints. Those keys are refused here,
/// by name, rather than ignored.
inline void require_plain_ppo_step(const PPOConfig& config, const PPOAlgorithm& algorithm, std::string_view program) {
  const auto refuse = [&](bool set, std::string_view key, std::string_view value) {
    VERL_CHECK_ARG(!set, "{}: {} is not built into the {} example program (verl_train runs it); expected {}", key, program,
                   program, value);
  };
  refuse(algorithm.filter_groups.has_value(), "algorithm.filter_groups.enable", "False");
  refuse(algorithm.overlong_penalty.has_value(), "reward_model.overlong_buffer.enable", "False");
  refuse(config.actor_rollout_ref.rollout.calculate_log_probs, "actor_rollout_ref.rollout.calculate_log_probs", "False");
  refuse(config.reward.reward_model.enable, "reward.reward_model.enable", "False");
  refuse(!config.actor_rollout_ref.hybrid_engine, "actor_rollout_ref.hybrid_engine", "True");
  refuse(!config.data.val_files.empty(), "data.val_files", "no validation files");
  refuse(config.trainer.save_freq > 0, "trainer.save_freq", "a value <= 0");
  refuse(config.trainer.resume_mode == ResumeMode::resume_path, "trainer.resume_mode", "auto or disable");
}

/// The columns a forward pass (log-probs, values, reward-model scores) reads.
inline data::DataProto sequence_columns(const data::DataProto& batch) {
  return batch.select(std::vector<std::string>{std::string(keys::input_ids), std::string(keys::attention_mask),
                                               std::string(keys::position_ids), std::string(keys::response_mask)},
                      std::vector<std::string>{}, std::vector<std::string>{});
}

/// `batch`'s `columns` (those it has) in the order that hands each of `dp` ranks its share of
/// every mini-batch of `mini_batch_rows` rows (mini_batch_major_order); `key` names the
/// mini-batch size in errors.
inline data::DataProto update_batch(const data::DataProto& batch, std::vector<std::string> columns, Index mini_batch_rows,
                                    Index dp, std::string_view key) {
  std::erase_if(columns, [&](const std::string& c) { return !batch.has_tensor(c); });
  data::DataProto out = batch.select(columns, std::vector<std::string>{}, std::vector<std::string>{});
  out.reorder(mini_batch_major_order(batch.size(), mini_batch_rows, dp, key));
  return out;
}

/// Row `row`'s response as text (its valid tokens, decoded as the reward function reads them).
inline std::string response_text(const data::DataProto& batch, Index row, const TokenizerHooks& tokenizer) {
  const auto length = static_cast<Index>(float_column(batch, keys::response_mask).row(row).sum());
  const auto response = int_column(batch, keys::responses).row(row);
  std::vector<model::TokenId> ids(response.data(), response.data() + length);
  return tokenizer.decode(ids);
}

/// The rule reward of every row: reward_fn(data_source, response, ground truth, extra_info) of
/// the row's dataset sample (the batch's `index` column), as verl's naive reward manager calls
/// compute_score.
template <class Reward>
std::vector<reward::RewardOutput> rule_reward_outputs(Reward& reward_fn, const data::RLHFDataset& dataset,
                                                      const data::DataProto& batch, const TokenizerHooks& tokenizer) {
  const auto& samples = batch.non_tensor<std::int64_t>(keys::index);
  std::vector<reward::RewardOutput> out;
  out.reserve(samples.size());
  for (Index r = 0; r < batch.size(); ++r) {
    const data::RLHFSample& sample = dataset[samples[static_cast<std::size_t>(r)]];
    reward::ExtraInfo info;
    if (sample.row.extra_info.is_object()) {
      for (const auto& [key, value] : sample.row.extra_info.items())
        info[key] = value.is_string() ? value.template get<std::string>() : value.dump();
    }
    out.push_back(reward::call_reward_function(reward_fn, sample.row.data_source, response_text(batch, r, tokenizer),
                                               sample.row.ground_truth_text(), info));
  }
  return out;
}

/// Each row's sequence-level reward placed at its last response token (verl's token_level_scores).
inline MatrixF scores_at_last_token(std::span<const double> scores, const MatrixF& response_mask) {
  VERL_CHECK_ARG(static_cast<Index>(scores.size()) == response_mask.rows(),
                 "scores_at_last_token: {} scores for {} rows", scores.size(), response_mask.rows());
  MatrixF out = MatrixF::Zero(response_mask.rows(), response_mask.cols());
  for (Index r = 0; r < response_mask.rows(); ++r) {
    const auto length = static_cast<Index>(response_mask.row(r).sum());
    if (length > 0) out(r, length - 1) = static_cast<float>(scores[static_cast<std::size_t>(r)]);
  }
  return out;
}

/// The training prompts of a controller program: the dataset and verl's data loader over it
/// (data.train_batch_size, data.shuffle, data.seed), and the number of steps the run takes
/// (trainer.total_training_steps, else total_epochs over the loader).
class PromptStream {
 public:
  PromptStream(const PPOConfig& config, data::RLHFDataset train)
      : train_(std::move(train)),
        loader_(train_.size(), train_loader_options(config.data)),
        total_steps_(total_training_steps(config, loader_.num_batches(), static_cast<std::int64_t>(train_.size()))) {}

  /// The next batch's dataset indices (a new epoch starts when one ends).
  std::vector<std::int64_t> next() {
    auto batch = loader_.next();
    if (!batch) batch = loader_.next();  // the epoch ended: the loader stands at the next one
    VERL_CHECK_ARG(batch.has_value(), "data.train_batch_size: no batch from the {} training prompts (batch size {})",
                   loader_.dataset_size(), loader_.options().batch_size);
    return *batch;
  }
  [[nodiscard]] const data::RLHFDataset& dataset() const { return train_; }
  [[nodiscard]] std::int64_t total_steps() const { return total_steps_; }
  [[nodiscard]] std::int64_t epoch() const { return loader_.epoch(); }

 private:
  data::RLHFDataset train_;
  data::DataLoader loader_;
  std::int64_t total_steps_;
};

/// verl's compute_data_metrics (critic/score, critic/rewards, critic/advantages, critic/returns,
/// critic/values with a critic, response and prompt lengths) from the batch's columns.
inline Metrics data_metrics_of(const data::DataProto& batch) {
  return compute_data_metrics(DataMetricsInputs{
      .token_level_scores = float_column(batch, keys::token_level_scores),
      .token_level_rewards = float_column(batch, keys::token_level_rewards),
      .advantages = float_column(batch, keys::advantages),
      .returns = float_column(batch, keys::returns),
      .attention_mask = float_column(batch, keys::attention_mask),
      .response_mask = float_column(batch, keys::response_mask),
      .values = batch.has_tensor(keys::values) ? std::optional<ConstMatrixRefF>(float_column(batch, keys::values))
                                               : std::nullopt});
}

/// The actor's update batch (update_actor): the sequence columns, the advantages, the rollout
/// correction's weights when present, the old log-probs when `send_old_log_probs` (off-policy
/// updates; on-policy, the update's own forward gives them), the reference's with a KL loss;
/// ordered for `dp` ranks by mini-batch. meta_info["entropy_metric"]: the update reports
/// actor/entropy itself.
inline data::DataProto actor_update_batch(const data::DataProto& batch, const PPOConfig& config, const PPOAlgorithm& algorithm,
                                          Index dp, bool send_old_log_probs, bool entropy_metric) {
  std::vector<std::string> columns{std::string(keys::input_ids), std::string(keys::attention_mask),
                                   std::string(keys::position_ids), std::string(keys::response_mask),
                                   std::string(keys::advantages), std::string(keys::rollout_is_weights)};
  if (send_old_log_probs) columns.emplace_back(keys::old_log_probs);
  if (algorithm.kl_loss) columns.emplace_back(keys::ref_log_prob);
  data::DataProto out =
      update_batch(batch, std::move(columns), config.actor_rollout_ref.actor.ppo_mini_batch_size * config.actor_rollout_ref.rollout.n,
                   dp, "actor_rollout_ref.actor.ppo_mini_batch_size");
  out.meta_info()["entropy_metric"] = entropy_metric;
  return out;
}

/// The critic's update batch (update_critic): the sequence columns, returns and old values,
/// ordered for `dp` ranks by critic.ppo_mini_batch_size.
inline data::DataProto critic_update_batch(const data::DataProto& batch, const PPOConfig& config, Index dp) {
  return update_batch(batch,
                      {std::string(keys::input_ids), std::string(keys::attention_mask), std::string(keys::position_ids),
                       std::string(keys::response_mask), std::string(keys::returns), std::string(keys::values)},
                      config.critic.ppo_mini_batch_size * config.actor_rollout_ref.rollout.n, dp, "critic.ppo_mini_batch_size");
}

/// compute_log_prob's answer into the batch: old_log_probs (and sum_pi_squared when computed);
/// the entropy becomes the actor/entropy metric (aggregated with actor.loss_agg_mode).
inline void add_old_log_probs(data::DataProto& batch, data::DataProto answer, const PPOAlgorithm& algorithm, Metrics& metrics) {
  metrics["actor/entropy"] = algo::agg_loss(float_column(answer, keys::entropys), float_column(batch, keys::response_mask),
                                            algorithm.loss_agg_mode);
  (void)answer.pop({std::string(keys::entropys)});
  batch.union_with(answer);
}

/// verl's token_level_rewards: the scores, less beta * KL(old || ref) per token with
/// algorithm.use_kl_in_reward (apply_kl_penalty; the KL controller moves beta).
inline MatrixF token_level_rewards(const data::DataProto& batch, const PPOAlgorithm& algorithm, algo::AnyKLController& kl_ctrl,
                                   Metrics& metrics) {
  if (!algorithm.use_kl_in_reward) return float_column(batch, keys::token_level_scores);
  auto kl = algo::apply_kl_penalty(float_column(batch, keys::token_level_scores), float_column(batch, keys::old_log_probs),
                                   float_column(batch, keys::ref_log_prob), float_column(batch, keys::response_mask), kl_ctrl,
                                   algorithm.kl_penalty);
  for (const auto& [k, v] : kl.metrics) metrics[k] = v;
  return std::move(kl.token_level_rewards);
}

/// verl's token_level_scores from the rule reward: each row's score at its last response token.
template <class Reward>
MatrixF rule_token_level_scores(Reward& reward_fn, const data::RLHFDataset& dataset, const data::DataProto& rows,
                                const TokenizerHooks& tokenizer) {
  std::vector<double> scores;
  for (const reward::RewardOutput& out : rule_reward_outputs(reward_fn, dataset, rows, tokenizer)) scores.push_back(out.score);
  return scores_at_last_token(scores, float_column(rows, keys::response_mask));
}

/// How many optimizer updates an update call ran, and how many of them were skipped for a
/// non-finite gradient norm.
struct UpdateCounts {
  std::int64_t updates = 0;
  std::int64_t nonfinite = 0;
};

/// An update call's metrics (meta_info["metrics"]: every rank of the group reports the same,
/// reduced over the group, so the first rank's are taken) into `metrics`. With a `role` prefix,
/// each name's own prefix is replaced by it ("critic/vf_loss" -> "cost_critic/vf_loss").
inline UpdateCounts absorb_update_metrics(const data::DataProto& result, Metrics& metrics, std::string_view role = {}) {
  const nlohmann::json& info = result.meta_info();
  if (info.contains("metrics")) {
    for (const auto& [name, values] : info["metrics"].items()) {
      std::string key = name;
      if (!role.empty()) {
        const auto slash = name.find('/');
        key = std::string(role) + name.substr(slash == std::string::npos ? 0 : slash + 1);
      }
      metrics[key] = values.is_array() ? values.front().template get<double>() : values.template get<double>();
    }
  }
  return {.updates = info.value("updates", std::int64_t{0}), .nonfinite = info.value("nonfinite_updates", std::int64_t{0})};
}

}  // namespace verl::trainer
