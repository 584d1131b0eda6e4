// Supervised fine-tuning, as verl's fsdp_sft_trainer does it: a prompt (chat-templated user turn)
// and its response (+ EOS) per row; cross-entropy on the response tokens only; AdamW with
// warmup + cosine schedule, gradient clipping, micro-batch gradient accumulation; checkpoints
// through the same CheckpointManager as the PPO trainer; metrics train/loss, train/lr,
// train/grad_norm and val/loss through Tracking.
//
// One deliberate difference: verl divides each micro-batch's summed loss by that micro-batch's
// token count and then by the number of micro-batches, which makes the gradient depend on how
// the batch is split. Here every token is divided by the token count of the whole batch, so the
// loss is the mean over the batch's response tokens whatever micro_batch_size_per_gpu is.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <iostream>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "verl/core/error.hpp"
#include "verl/core/metrics.hpp"
#include "verl/data/dataloader.hpp"
#include "verl/data/jsonl.hpp"
#include "verl/data/parquet.hpp"
#include "verl/model/causal_lm.hpp"
#include "verl/tokenizer/pretrained.hpp"
#include "verl/trainer/checkpoint.hpp"
#include "verl/trainer/logging/tracking.hpp"
#include "verl/optim/adamw.hpp"
#include "verl/optim/lr_scheduler.hpp"
#include "verl/optim/optimizer_step.hpp"
#include "verl/optim/schedules.hpp"
#include "verl/trainer/sft_trainer_config.hpp"

namespace verl::trainer {

// ---- data ---------------------------------------------------------------------------------------

/// One tokenized SFT row: prompt tokens then response tokens; the loss covers the predictions of
/// tokens [prompt_length, input_ids.size()).
struct SFTExample {
  std::vector<model::TokenId> input_ids;
  std::int64_t prompt_length = 0;
  [[nodiscard]] std::int64_t response_tokens() const {
    return static_cast<std::int64_t>(input_ids.size()) - prompt_length;
  }
};

/// Tokenizes one (prompt, response) pair as verl's SFTDataset: the prompt as a chat user turn
/// with the generation prompt, the response followed by the EOS token; sequences longer than
/// max_length are an error ("error"), or lose their start ("left") or end ("right").
inline SFTExample tokenize_sft_pair(const tokenizer::PretrainedTokenizer& tokenizer, std::string_view prompt,
                                    std::string_view response, std::int64_t max_length, std::string_view truncation,
                                    std::string_view where = "row") {
  SFTExample example;
  const tokenizer::ChatMessage message{"user", std::string(prompt)};
  example.input_ids = tokenizer.chat_template ? tokenizer.encode_chat(std::span(&message, 1))
                                              : tokenizer.tokenizer.encode(prompt, false);
  example.prompt_length = static_cast<std::int64_t>(example.input_ids.size());
  const auto response_ids = tokenizer.tokenizer.encode(response, false);
  example.input_ids.insert(example.input_ids.end(), response_ids.begin(), response_ids.end());
  const auto eos = tokenizer.tokenizer.special_ids().eos;
  VERL_CHECK_ARG(eos.has_value(), "tokenizer: expected an eos_token (tokenizer_config.json) to end SFT responses");
  example.input_ids.push_back(*eos);
  const auto length = static_cast<std::int64_t>(example.input_ids.size());
  if (length > max_length) {
    if (truncation == "left") {
      const std::int64_t cut = length - max_length;
      example.input_ids.erase(example.input_ids.begin(), example.input_ids.begin() + cut);
      example.prompt_length = std::max<std::int64_t>(0, example.prompt_length - cut);
    } else if (truncation == "right") {
      example.input_ids.resize(static_cast<std::size_t>(max_length));
      example.prompt_length = std::min(example.prompt_length, max_length);
    } else {
      ::verl::detail::throw_invalid_argument(
          "{}: {} tokens, more than data.max_length={} (set data.truncation to left or right to cut it)", where,
          length, max_length);
    }
  }
  return example;
}

namespace detail {

/// The text of an SFT column: row[key], then [k] for each of `dict_keys` (verl's
/// prompt_dict_keys / response_dict_keys), which must end at a string.
inline std::string sft_text(const nlohmann::json& row, const std::string& key,
                            const std::optional<std::vector<std::string>>& dict_keys, std::string_view key_name,
                            std::string_view dict_keys_name, const data::SourceLocation& where) {
  const auto found = row.find(key);
  VERL_CHECK_ARG(found != row.end(), "{}: no column '{}' ({})", where.to_string(), key, key_name);
  const nlohmann::json* value = &*found;
  std::string path = key;
  for (const auto& k : dict_keys ? *dict_keys : std::span<const std::string>{}) {
    const auto nested = value->is_object() ? value->find(k) : value->end();
    VERL_CHECK_ARG(nested != value->end(), "{}: expected '{}' to be an object with a key '{}' ({}), got {}",
                   where.to_string(), path, k, dict_keys_name, value->type_name());
    value = &*nested;
    path += "." + k;
  }
  VERL_CHECK_ARG(value->is_string(), "{}: expected '{}' to be a string ({}{}), got {}", where.to_string(), path,
                 key_name, dict_keys ? fmt::format(" and {}", dict_keys_name) : std::string(), value->type_name());
  return value->get<std::string>();
}

}  // namespace detail

/// The rows of SFT files (verl's .parquet through Apache Arrow when this build has it, or JSON
/// Lines), tokenized.
inline std::vector<SFTExample> load_sft_examples(std::span<const std::string> files,
                                                 const tokenizer::PretrainedTokenizer& tokenizer,
                                                 const SFTConfig::Data& data) {
  std::vector<SFTExample> examples;
  for (const auto& file : files) {
    data::for_each_dataset_row(file, [&](nlohmann::json&& row, const data::SourceLocation& where) {
      const std::string prompt =
          detail::sft_text(row, data.prompt_key, data.prompt_dict_keys, "data.prompt_key", "data.prompt_dict_keys", where);
      const std::string response = detail::sft_text(row, data.response_key, data.response_dict_keys,
                                                    "data.response_key", "data.response_dict_keys", where);
      examples.push_back(
          tokenize_sft_pair(tokenizer, prompt, response, data.max_length, data.truncation, where.to_string()));
    });
  }
  return examples;
}

// ---- the loss -----------------------------------------------------------------------------------

/// Total response tokens of `examples` (the loss's denominator).
inline std::int64_t count_response_tokens(std::span<const SFTExample> examples,
                                          std::span<const std::int64_t> indices) {
  std::int64_t total = 0;
  for (const auto i : indices) total += examples[static_cast<std::size_t>(i)].response_tokens();
  return total;
}

/// One micro-batch: forward (packed sequences), loss contribution sum(-log p(response token)) /
/// denominator, and, when `backward`, the gradient of that contribution accumulated into the
/// model's parameter gradients. Returns the contribution.
template <model::CausalLM Model>
double sft_micro_batch(Model& policy, std::span<const SFTExample> examples, std::span<const std::int64_t> indices,
                       double denominator, bool backward) {
  using Scalar = typename Model::scalar_type;
  std::vector<model::TokenId> tokens;
  std::vector<std::int64_t> cu_seqlens = {0};
  std::vector<Scalar> weights;  // d loss / d log p per slot: -1/denominator on response predictions
  for (const auto i : indices) {
    const SFTExample& example = examples[static_cast<std::size_t>(i)];
    const auto length = static_cast<std::int64_t>(example.input_ids.size());
    tokens.insert(tokens.end(), example.input_ids.begin(), example.input_ids.end());
    cu_seqlens.push_back(static_cast<std::int64_t>(tokens.size()));
    for (std::int64_t t = 0; t < length; ++t) {
      // Slot t predicts token t + 1: a loss term when that token belongs to the response.
      const bool response = t + 1 < length && t + 1 >= example.prompt_length;
      weights.push_back(response ? static_cast<Scalar>(-1.0 / denominator) : Scalar(0));
    }
  }
  const auto batch = model::TokenBatch::packed(tokens, cu_seqlens);
  const MatrixI64 targets = model::next_token_targets(batch);
  const auto out = policy.forward(
      batch, {.targets = std::span<const std::int64_t>(targets.data(), static_cast<std::size_t>(targets.size())),
              .keep_activations = backward});
  double loss = 0.0;
  for (std::size_t s = 0; s < weights.size(); ++s) {
    loss += static_cast<double>(weights[s]) * static_cast<double>(out.log_probs.data()[s]);
  }
  if (backward) policy.backward({.log_probs = std::span<const Scalar>(weights)});
  return loss;
}

/// The mean cross-entropy over the response tokens of `indices`, computed in micro-batches of
/// `micro_batch_size` examples; with `backward`, its gradient is accumulated into the model's
/// gradients (call zero_grad() first). The result does not depend on micro_batch_size.
template <model::CausalLM Model>
double sft_loss(Model& policy, std::span<const SFTExample> examples, std::span<const std::int64_t> indices,
                std::int64_t micro_batch_size, bool backward) {
  VERL_CHECK_ARG(micro_batch_size > 0, "data.micro_batch_size_per_gpu: expected a positive size, got {}",
                 micro_batch_size);
  const std::int64_t tokens = count_response_tokens(examples, indices);
  VERL_CHECK_ARG(tokens > 0, "batch: expected response tokens to train on, got none in {} examples", indices.size());
  double loss = 0.0;
  for (std::size_t begin = 0; begin < indices.size(); begin += static_cast<std::size_t>(micro_batch_size)) {
    const std::size_t count = std::min(indices.size() - begin, static_cast<std::size_t>(micro_batch_size));
    loss += sft_micro_batch(policy, examples, indices.subspan(begin, count), static_cast<double>(tokens), backward);
  }
  return loss;
}

// ---- the trainer --------------------------------------------------------------------------------

/// Total optimizer steps: trainer.total_training_steps if set, else batches per epoch times
/// trainer.total_epochs (the loader drops a last partial batch, as verl's does).
inline std::int64_t sft_total_steps(const SFTConfig& config, std::int64_t train_size) {
  const std::int64_t per_epoch = train_size / config.data.train_batch_size;
  VERL_CHECK_ARG(per_epoch > 0, "data.train_batch_size: expected at most the {} training examples, got {}", train_size,
                 config.data.train_batch_size);
  if (config.trainer.total_training_steps && *config.trainer.total_training_steps > 0)
    return *config.trainer.total_training_steps;
  return per_epoch * config.trainer.total_epochs;
}

template <model::CausalLM Model>
class SFTTrainer {
  VERL_STATIC_ASSERT((std::same_as<typename Model::scalar_type, float>), THE_SFT_TRAINER_OPTIMIZES_FLOAT_MODELS);

 public:
  /// Called with a checkpoint folder after it is written (e.g. to add a Hugging Face copy).
  using SaveHook = std::function<void(const std::filesystem::path&)>;

  SFTTrainer(Model& policy, SFTConfig config, std::vector<SFTExample> train, std::vector<SFTExample> val = {})
      : policy_(&policy),
        config_(std::move(config)),
        train_(std::move(train)),
        val_(std::move(val)),
        total_steps_(sft_total_steps(config_, static_cast<std::int64_t>(train_.size()))),
        optimizer_(optim::AdamWConfig{.lr = config_.optim.lr,
                                      .beta1 = config_.optim.betas[0],
                                      .beta2 = config_.optim.betas[1],
                                      .weight_decay = config_.optim.weight_decay}),
        scheduler_(config_.optim.lr, make_schedule(config_, total_steps_)),
        loader_(static_cast<std::int64_t>(train_.size()),
                data::DataLoaderOptions{.batch_size = config_.data.train_batch_size,
                                        .shuffle = true,
                                        .seed = static_cast<std::uint64_t>(config_.trainer.seed),
                                        .drop_last = true}) {
    policy_->zero_grad();  // gradient buffers exist from here on
  }

  [[nodiscard]] std::int64_t global_step() const { return global_step_; }
  [[nodiscard]] std::int64_t total_steps() const { return total_steps_; }
  [[nodiscard]] const SFTConfig& config() const { return config_; }
  void set_save_hook(SaveHook hook) { save_hook_ = std::move(hook); }

  /// One optimizer step on the examples `indices`; returns verl's step metrics.
  Metrics train_step(std::span<const std::int64_t> indices) {
    scheduler_.apply(optimizer_);
    const double lr = scheduler_.get_last_lr();
    policy_->zero_grad();
    const double loss = sft_loss(*policy_, train_, indices, config_.data.micro_batch_size_per_gpu, true);
    const auto parameters = parameter_refs();
    const auto result = optim::clip_and_step(optimizer_, parameters, config_.optim.clip_grad);
    scheduler_.step();
    ++global_step_;
    // A skipped update (non-finite norm: a NaN or inf loss, gradient or weight) is counted and
    // said; too many in a row end the run before a broken model is saved.
    if (!result.stepped) {
      std::cerr << fmt::format("warning: step {}: the gradient norm is not finite ({}); the update was skipped\n",
                               global_step_, result.grad_norm);
    }
    consecutive_nonfinite_steps_ = result.stepped ? 0 : consecutive_nonfinite_steps_ + 1;
    VERL_CHECK_ARG(consecutive_nonfinite_steps_ < config_.trainer.max_consecutive_nonfinite_steps,
                   "trainer.max_consecutive_nonfinite_steps: {} steps in a row (the last: step {}) had a non-finite "
                   "gradient norm; stopping instead of training on them (limit {})",
                   consecutive_nonfinite_steps_, global_step_, config_.trainer.max_consecutive_nonfinite_steps);
    return {{"train/loss", loss},
            {"train/lr", lr},
            {"train/grad_norm", result.grad_norm},
            {"training/nonfinite_updates_skipped", result.stepped ? 0.0 : 1.0}};
  }

  /// Mean cross-entropy over every response token of the validation set.
  double validate() {
    VERL_CHECK_ARG(!val_.empty(), "data.val_files: expected validation examples to compute val/loss, got none");
    std::vector<std::int64_t> all(val_.size());
    for (std::size_t i = 0; i < all.size(); ++i) all[i] = static_cast<std::int64_t>(i);
    return sft_loss(*policy_, val_, all, config_.data.micro_batch_size_per_gpu, false);
  }

  /// Resumes per trainer.resume_mode (auto: the newest checkpoint under default_local_dir, if
  /// any); returns the step resumed from.
  std::optional<std::int64_t> maybe_resume() {
    const CheckpointManager manager(config_.trainer.default_local_dir);
    const auto folder = manager.resume_folder(parse_resume_mode(config_.trainer.resume_mode),
                                              config_.trainer.resume_from_path);
    if (!folder) return std::nullopt;
    load_checkpoint(*folder);
    return global_step_;
  }

  void load_checkpoint(const std::filesystem::path& folder) {
    const LoadedCheckpoint loaded = CheckpointManager::load(folder);
    const LoadedRole& role = loaded.role("model");
    policy_->for_each_parameter([&](const auto& p) { role.tensor(p.name).copy_to(p.value, p.shape); });
    VERL_CHECK_ARG(role.optimizer.has_value(), "checkpoint '{}': no optimizer state to resume from", folder.string());
    optimizer_.load_state(*role.optimizer);
    scheduler_.set_last_epoch(role.extra.at("lr_scheduler_last_epoch").get<std::int64_t>());
    VERL_CHECK_ARG(loaded.data.has_value(), "checkpoint '{}': no data loader position", folder.string());
    loader_.load_state(*loaded.data);
    global_step_ = loaded.global_step;
  }

  std::filesystem::path save_checkpoint() {
    CheckpointManager manager(config_.trainer.default_local_dir,
                              RetentionPolicy{{"model", config_.trainer.max_ckpt_to_keep}});
    CheckpointSnapshot snapshot;
    snapshot.global_step = global_step_;
    RoleSnapshot role;
    policy_->for_each_parameter([&](const auto& p) {
      role.model.push_back(TensorRef{std::string(p.name), std::vector<std::int64_t>(p.shape.begin(), p.shape.end()),
                                     std::span<const float>(p.value.data(), p.value.size())});
    });
    role.optimizer = &optimizer_.state();
    role.extra = {{"lr_scheduler_last_epoch", scheduler_.last_epoch()}};
    snapshot.roles.emplace("model", std::move(role));
    snapshot.data = loader_.state();
    const auto folder = manager.save(snapshot);
    if (save_hook_) save_hook_(folder);
    return folder;
  }

  /// Trains to total_steps, validating every trainer.test_freq steps and at the end (when there
  /// is validation data) and checkpointing every trainer.save_freq steps and at the end.
  /// `stop_after` ends the run early at that step without the final validation and checkpoint
  /// (what a killed run leaves behind).
  void fit(Tracking& tracking, std::optional<std::int64_t> stop_after = std::nullopt) {
    const auto& t = config_.trainer;
    while (global_step_ < total_steps_ && (!stop_after || global_step_ < *stop_after)) {
      auto batch = loader_.next();
      if (!batch) continue;  // an epoch ended; the loader stands at the next one
      Metrics metrics = train_step(*batch);
      const bool last = global_step_ == total_steps_;
      if (!val_.empty() && (last || (t.test_freq > 0 && global_step_ % t.test_freq == 0))) {
        metrics["val/loss"] = validate();
      }
      tracking.log(metrics, global_step_);
      if (last || (t.save_freq > 0 && global_step_ % t.save_freq == 0)) save_checkpoint();
    }
  }

 private:
  static optim::AnyLrSchedule make_schedule(const SFTConfig& config, std::int64_t total_steps) {
    // verl: num_warmup_steps = int(total_steps * warmup_steps_ratio).
    const auto warmup = static_cast<std::int64_t>(static_cast<double>(total_steps) * config.optim.warmup_steps_ratio);
    return optim::make_lr_schedule({.lr_scheduler_type = config.optim.lr_scheduler,
                                    .lr_warmup_steps = warmup,
                                    .total_training_steps = total_steps,
                                    .min_lr_ratio = config.optim.min_lr_ratio});
  }

  std::vector<optim::ParameterRef> parameter_refs() {
    std::vector<optim::ParameterRef> refs;
    policy_->for_each_parameter([&](const auto& p) { refs.push_back({p.value, p.grad, p.name}); });
    return refs;
  }

  Model* policy_;
  SFTConfig config_;
  std::vector<SFTExample> train_, val_;
  std::int64_t total_steps_;
  optim::AdamW optimizer_;
  optim::LrScheduler<> scheduler_;
  data::DataLoader loader_;
  std::int64_t global_step_ = 0;
  std::int64_t consecutive_nonfinite_steps_ = 0;
  SaveHook save_hook_;
};

}  // namespace verl::trainer
