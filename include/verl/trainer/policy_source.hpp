// Where the trainers' policy comes from: a Hugging Face folder or a GGUF file (llama.cpp's format,
// dequantized to float32), and verl's LoRA keys (lora_rank, lora_alpha, target_modules,
// exclude_modules, lora_adapter_path) turned into model::LoraOptions. verl_train and verl_sft
// read these through here, so that both accept the same sources with the same messages.
//
// A model trained from a GGUF file is saved as an ordinary Hugging Face folder (config.json,
// model.safetensors) with the tokenizer files the GGUF file carries (tokenizer.json,
// tokenizer_config.json with its chat template); a LoRA run saves the merged model there and the
// PEFT adapter beside it.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "verl/core/error.hpp"
#include "verl/core/file_io.hpp"
#include "verl/model/checkpoint.hpp"
#include "verl/model/gguf_model.hpp"
#include "verl/model/lora_checkpoint.hpp"
#include "verl/model/transformer/lora.hpp"
#include "verl/tokenizer/pretrained.hpp"
#include "verl/trainer/config/ppo_config.hpp"

namespace verl::trainer {

/// The LoRA keys of a model section, wherever they live (actor_rollout_ref.model, verl_sft's model).
struct LoraKeys {
  std::int64_t lora_rank = 0;
  double lora_alpha = 16;
  std::vector<std::string> target_modules = {"all-linear"};
  std::vector<std::string> exclude_modules = {};
  std::optional<std::string> lora_adapter_path;
};

inline LoraKeys lora_keys(const ModelSection& model) {
  return {model.lora_rank, model.lora_alpha, model.target_modules, model.exclude_modules.value_or(std::vector<std::string>{}),
          model.lora_adapter_path};
}

/// The LoRA options the keys ask for, or nullopt (lora_rank = 0 and no adapter path); `key_prefix`
/// ("actor_rollout_ref.model.") makes errors name the full key.
inline std::optional<model::LoraOptions> lora_options(const LoraKeys& keys, std::string_view key_prefix) {
  VERL_CHECK_ARG(keys.lora_rank >= 0, "{}lora_rank: expected an integer >= 0 (0: no LoRA), got {}", key_prefix,
                 keys.lora_rank);
  if (keys.lora_rank == 0) {
    VERL_CHECK_ARG(!keys.lora_adapter_path, "{}lora_adapter_path: expected null when {}lora_rank is 0 (no LoRA), got '{}'",
                   key_prefix, key_prefix, keys.lora_adapter_path.value_or(""));
    return std::nullopt;
  }
  model::LoraOptions options{.rank = keys.lora_rank,
                             .alpha = keys.lora_alpha,
                             .target_modules = keys.target_modules,
                             .exclude_modules = keys.exclude_modules};
  model::validate_lora_options(options, key_prefix);
  return options;
}

/// A policy from a Hugging Face folder or a GGUF file; `key` names the setting in errors.
template <class Scalar = float>
model::BasicTransformer<Scalar> load_policy(const std::filesystem::path& path, std::string_view key) {
  if (std::filesystem::is_regular_file(path) && model::is_gguf_file(path)) return model::load_gguf_transformer<Scalar>(path);
  VERL_CHECK_ARG(std::filesystem::is_directory(path),
                 "{}: expected a Hugging Face model folder or a GGUF file, got '{}' ({})", key, path.string(),
                 std::filesystem::exists(path) ? "neither" : "does not exist");
  return model::load_transformer<Scalar>(path);
}

/// The policy's architecture (sizes, special ids) without its weights: config.json of a folder, or
/// a GGUF file's metadata.
inline model::HfModelConfig load_policy_config(const std::filesystem::path& path, std::string_view key) {
  if (std::filesystem::is_regular_file(path) && model::is_gguf_file(path)) return model::gguf_model_config(model::GgufFile(path));
  VERL_CHECK_ARG(std::filesystem::is_directory(path),
                 "{}: expected a Hugging Face model folder or a GGUF file, got '{}' ({})", key, path.string(),
                 std::filesystem::exists(path) ? "neither" : "does not exist");
  return model::HfModelConfig::from_file(path / "config.json");
}

/// A critic from a Hugging Face folder (load_critic: its value head, or a fresh one on a policy's
/// body) or from a GGUF file (the policy's body, a fresh value head).
template <class Scalar = float>
model::BasicTransformerCritic<Scalar> load_critic_model(const std::filesystem::path& path, std::string_view key,
                                                        const model::WeightInit& head_init = {}) {
  if (std::filesystem::is_regular_file(path) && model::is_gguf_file(path)) {
    const auto policy = model::load_gguf_transformer<Scalar>(path);
    model::BasicTransformerCritic<Scalar> critic(policy.config());
    critic.init_value_head(head_init);
    const model::StateDict body = policy.state_dict();
    critic.for_each_parameter([&](const auto& p) {
      if (p.name.starts_with("score.")) return;
      const auto& values = body.at(std::string(p.name)).values;
      std::ranges::transform(values, p.value.begin(), [](float v) { return static_cast<Scalar>(v); });
    });
    return critic;
  }
  VERL_CHECK_ARG(std::filesystem::is_directory(path),
                 "{}: expected a Hugging Face model folder or a GGUF file for the critic, got '{}' ({})", key,
                 path.string(), std::filesystem::exists(path) ? "neither" : "does not exist");
  return model::load_critic<Scalar>(path, head_init);
}

/// The tokenizer of a Hugging Face folder, or the one a GGUF file carries.
inline tokenizer::PretrainedTokenizer load_policy_tokenizer(const std::filesystem::path& path) {
  if (std::filesystem::is_regular_file(path) && model::is_gguf_file(path)) {
    return model::load_gguf_tokenizer(model::GgufFile(path));
  }
  return tokenizer::load_pretrained_tokenizer(path);
}

/// The LoRA model of `options` on `base`: fresh adapters, or those of `keys.lora_adapter_path`.
template <class Scalar>
model::LoraModel<model::BasicTransformer<Scalar>> make_lora_policy(model::BasicTransformer<Scalar> base,
                                                                    const model::LoraOptions& options, const LoraKeys& keys,
                                                                    std::string_view key_prefix) {
  if (!keys.lora_adapter_path) return {std::move(base), options, key_prefix};
  auto loaded = model::load_lora_adapter(std::move(base), *keys.lora_adapter_path);
  VERL_CHECK_ARG(loaded.options().rank == options.rank,
                 "{}lora_adapter_path: the adapter in '{}' has rank {}, but {}lora_rank is {}", key_prefix,
                 *keys.lora_adapter_path, loaded.options().rank, key_prefix, options.rank);
  return loaded;
}

/// Copies the tokenizer files of `tokenizer_source` (a folder, or a GGUF file's tokenizer written
/// out) into a saved Hugging Face folder.
inline void save_tokenizer_files(const std::filesystem::path& tokenizer_source, const std::filesystem::path& folder) {
  namespace fs = std::filesystem;
  if (fs::is_regular_file(tokenizer_source) && model::is_gguf_file(tokenizer_source)) {
    const auto files = model::gguf_tokenizer_files(model::GgufFile(tokenizer_source));
    io::write_file_atomically(folder / "tokenizer.json", files.tokenizer.dump(2) + "\n");
    io::write_file_atomically(folder / "tokenizer_config.json", files.tokenizer_config.dump(2) + "\n");
    return;
  }
  for (const char* name : {"tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "special_tokens_map.json",
                           "generation_config.json"}) {
    const fs::path from = tokenizer_source / name;
    if (fs::exists(from)) fs::copy_file(from, folder / name, fs::copy_options::overwrite_existing);
  }
}

/// Saves a trained policy as a Hugging Face folder; a LoRA policy also writes its PEFT adapter to
/// `adapter_folder` (the merged weights go to `folder`). Returns what was written, for the log.
template <class Scalar>
std::string save_policy(const model::BasicTransformer<Scalar>& policy, const std::filesystem::path& folder,
                        const std::filesystem::path& /*adapter_folder*/, const std::string& /*base_model_path*/) {
  model::save_transformer(policy, folder);
  return folder.string();
}
template <class Scalar>
std::string save_policy(const model::LoraModel<model::BasicTransformer<Scalar>>& policy,
                        const std::filesystem::path& folder, const std::filesystem::path& adapter_folder,
                        const std::string& base_model_path) {
  model::save_lora_merged(policy, folder);
  model::save_lora_adapter(policy, adapter_folder, base_model_path);
  return folder.string() + " (merged) and the LoRA adapter to " + adapter_folder.string();
}

}  // namespace verl::trainer
