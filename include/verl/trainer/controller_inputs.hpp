// What a controller program reads besides the models: the tokenizer's hooks (decoding responses
// for the reward, the ids that end and pad a response) and the datasets, rendered with the prompt
// format verl would use. verl_train and the example controller programs start from these.
//
//   const tokenizer::PretrainedTokenizer tokenizer = load_policy_tokenizer(detail::tokenizer_source(config));
//   ControllerInputs in = controller_inputs(config, tokenizer);   // in.hooks, in.train, in.val
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "verl/core/error.hpp"
#include "verl/core/paths.hpp"
#include "verl/data/prompt_formatter.hpp"
#include "verl/data/rl_dataset.hpp"
#include "verl/tokenizer/pretrained.hpp"
#include "verl/trainer/components_from_config.hpp"
#include "verl/trainer/config/ppo_config.hpp"
#include "verl/trainer/policy_source.hpp"
#include "verl/trainer/ppo_trainer_roles.hpp"
#include "verl/trainer/prompt_chat_template.hpp"

namespace verl::trainer {

/// How the dataset's prompts are rendered: the chat template verl picks (prompt_chat_template),
/// else the messages' contents joined by newlines.
struct PromptFormatter {
  std::optional<tokenizer::AnyChatTemplate> chat;
  [[nodiscard]] std::string render(std::span<const tokenizer::ChatMessage> messages, bool add_generation_prompt) const {
    if (chat) return chat->render(messages, add_generation_prompt);
    return data::ContentOnlyFormatter{"\n"}.render(messages, add_generation_prompt);
  }
};

inline PromptFormatter prompt_formatter(const PPOConfig& config, const tokenizer::PretrainedTokenizer& tokenizer) {
  return PromptFormatter{prompt_chat_template(config, tokenizer)};
}

struct ControllerInputs {
  TokenizerHooks hooks;
  data::RLHFDataset train, val;
};

/// The hooks and the datasets, given the actor model's vocabulary size, end ids and pad id (its
/// config.json's). `tokenizer` must outlive the hooks (they decode with it).
inline ControllerInputs controller_inputs(const PPOConfig& config, const tokenizer::PretrainedTokenizer& tokenizer,
                                          const PromptFormatter& formatter, std::int64_t model_vocab,
                                          std::span<const std::int64_t> model_eos, std::optional<std::int64_t> model_pad) {
  const auto& special = tokenizer.tokenizer.special_ids();
  const std::filesystem::path model_path = io::expand_user(config.actor_rollout_ref.model.path);
  const std::filesystem::path tokenizer_path = config.actor_rollout_ref.model.tokenizer_path
                                                   ? io::expand_user(*config.actor_rollout_ref.model.tokenizer_path)
                                                   : model_path;
  // A tokenizer with more ids than the model has embeddings (another model's tokenizer) would
  // index past the embedding table; a model padded past the tokenizer (Qwen's 151936) is fine.
  VERL_CHECK_ARG(static_cast<std::int64_t>(tokenizer.tokenizer.vocab_size()) <= model_vocab,
                 "actor_rollout_ref.model.tokenizer_path: the tokenizer in '{}' has {} ids, more than the {} embeddings "
                 "(vocab_size) of the model in '{}'; they do not belong together",
                 tokenizer_path.string(), tokenizer.tokenizer.vocab_size(), model_vocab, model_path.string());
  ControllerInputs in;
  const auto vocab = static_cast<model::TokenId>(tokenizer.tokenizer.vocab_size());
  in.hooks.decode = [&tokenizer, vocab](std::span<const model::TokenId> ids) {
    // Model vocabularies are often padded past the tokenizer's; those ids have no text.
    std::vector<model::TokenId> known;
    for (const auto id : ids)
      if (id >= 0 && id < vocab) known.push_back(id);
    return tokenizer.tokenizer.decode(known, true);
  };
  for (const auto id : model_eos) in.hooks.eos_token_ids.push_back(static_cast<model::TokenId>(id));
  if (special.eos) in.hooks.eos_token_ids.push_back(*special.eos);
  in.hooks.pad_token_id = special.pad.value_or(model_pad ? static_cast<model::TokenId>(*model_pad) : special.eos.value_or(0));
  std::vector<std::filesystem::path> train_files, val_files;
  for (const auto& f : config.data.train_files) train_files.push_back(io::expand_user(f));
  for (const auto& f : config.data.val_files) val_files.push_back(io::expand_user(f));
  in.train = data::RLHFDataset::load(train_files, tokenizer.tokenizer, formatter, dataset_options(config.data));
  if (!val_files.empty()) {
    in.val = data::RLHFDataset::load(val_files, tokenizer.tokenizer, formatter, dataset_options(config.data, true));
  }
  return in;
}

/// As above, reading the model's sizes and ids from actor_rollout_ref.model.path (config.json or
/// the GGUF header; no weights are loaded) and rendering with prompt_formatter.
inline ControllerInputs controller_inputs(const PPOConfig& config, const tokenizer::PretrainedTokenizer& tokenizer) {
  const model::HfModelConfig model =
      load_policy_config(io::expand_user(config.actor_rollout_ref.model.path), "actor_rollout_ref.model.path");
  const std::vector<std::int64_t> eos(model.eos_token_ids.begin(), model.eos_token_ids.end());
  std::optional<std::int64_t> pad;
  if (model.pad_token_id) pad = *model.pad_token_id;
  return controller_inputs(config, tokenizer, prompt_formatter(config, tokenizer), model.vocab_size, eos, pad);
}

}  // namespace verl::trainer
