// The configuration of verl's SFT trainer (verl/trainer/config/sft_trainer.yaml) for verl-cpp:
// the same dotted keys and defaults, loaded from a YAML file and/or key=value overrides with the
// PPO configuration's parser (override grammar, YAML reader, typed field conversion).
//
// Each key given is checked: keys verl-cpp implements are bound with type errors naming the key;
// verl keys naming Python or FSDP machinery are accepted without effect; verl keys for features
// verl-cpp lacks (LoRA, multi-turn data, custom dataset classes, ...) are accepted only at verl's
// default; anything else is an error suggesting the nearest valid key.
#pragma once

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <array>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "verl/core/error.hpp"
#include "verl/trainer/config.hpp"
#include "verl/trainer/config/detail/config_fields.hpp"
#include "verl/trainer/config/detail/config_node.hpp"
#include "verl/trainer/config/detail/edit_distance.hpp"
#include "verl/trainer/config/detail/field_conversion.hpp"
#include "verl/trainer/config/detail/override_parser.hpp"
#include "verl/trainer/config/detail/value_ranges.hpp"

namespace verl::trainer {

struct SFTConfig {
  struct Data {
    std::vector<std::string> train_files;
    std::vector<std::string> val_files;
    std::string prompt_key = "question";
    std::string response_key = "answer";
    /// verl's nested columns: the prompt is row[prompt_key][k0][k1]... (e.g. prompt_key=extra_info,
    /// prompt_dict_keys=[question] for verl's gsm8k parquet); null: the column itself.
    std::optional<std::vector<std::string>> prompt_dict_keys;
    std::optional<std::vector<std::string>> response_dict_keys;
    std::int64_t max_length = 1024;
    std::string truncation = "error";
    std::int64_t train_batch_size = 256;
    std::int64_t micro_batch_size_per_gpu = 4;
  } data;
  struct Model {
    std::string partial_pretrain;  ///< a Hugging Face folder or a GGUF file
    /// LoRA (verl's model.lora_rank, lora_alpha, target_modules): rank > 0 trains adapters on the
    /// frozen model.
    std::int64_t lora_rank = 0;
    double lora_alpha = 16;
    std::vector<std::string> target_modules = {"all-linear"};
  } model;
  struct Optim {
    double lr = 1e-5;
    std::vector<double> betas = {0.9, 0.95};
    double weight_decay = 0.01;
    double warmup_steps_ratio = 0.1;
    double clip_grad = 1.0;
    std::string lr_scheduler = "cosine";
    double min_lr_ratio = 0.0;
  } optim;
  struct Trainer {
    std::string default_local_dir;  ///< empty: checkpoints/<project_name>/<experiment_name>
    std::string project_name = "gsm8k-sft";
    std::string experiment_name = "test";
    std::int64_t total_epochs = 4;
    std::optional<std::int64_t> total_training_steps;
    std::vector<std::string> logger = {"console"};
    std::int64_t seed = 1;
    std::int64_t save_freq = -1;
    std::int64_t test_freq = -1;
    std::string resume_mode = "auto";
    std::optional<std::string> resume_from_path;
    std::optional<std::int64_t> max_ckpt_to_keep;
    /// verl-cpp: this many steps in a row whose update was skipped for a non-finite gradient norm
    /// end the run with an error (as in verl_train).
    std::int64_t max_consecutive_nonfinite_steps = 3;
  } trainer;
};

// The keys: every section's key fields, in verl's order.
VERL_CONFIG_FIELDS(SFTConfig::Data, train_files, val_files, prompt_key, response_key, prompt_dict_keys, response_dict_keys, max_length, truncation, train_batch_size, micro_batch_size_per_gpu)
VERL_CONFIG_FIELDS(SFTConfig::Model, partial_pretrain, lora_rank, lora_alpha, target_modules)
VERL_CONFIG_FIELDS(SFTConfig::Optim, lr, betas, weight_decay, warmup_steps_ratio, clip_grad, lr_scheduler, min_lr_ratio)
VERL_CONFIG_FIELDS(SFTConfig::Trainer, default_local_dir, project_name, experiment_name, total_epochs, total_training_steps, logger, seed, save_freq, test_freq, resume_mode, resume_from_path, max_ckpt_to_keep, max_consecutive_nonfinite_steps)
VERL_CONFIG_FIELDS(SFTConfig, data, model, optim, trainer)

/// Every supported key with its field.
template <class Config, class Fn>
void visit_sft_fields(Config& c, Fn&& fn) {
  visit_config_fields(c, std::string_view{}, fn);
}

namespace detail {

/// verl SFT keys for Python, FSDP or cluster machinery: accepted, without effect. A trailing
/// ".*" covers a whole subtree.
inline constexpr std::array<std::string_view, 19> ignored_sft_keys = {
    "model.fsdp_config.*",      "model.external_lib",    "model.enable_gradient_checkpointing",
    "model.trust_remote_code",  "model.use_liger",       "model.strategy",
    "model.use_shm",            "data.use_shm",          "data.balance_dp_token",
    "trainer.default_hdfs_dir", "trainer.nnodes",        "trainer.n_gpus_per_node",
    "trainer.device",           "trainer.checkpoint.*",  "ulysses_sequence_parallel_size",
    "use_remove_padding",       "optim.betas.*",         "data.custom_cls.path",
    "trainer.resume_path",
};

/// verl SFT keys for features verl-cpp does not have: accepted only at verl's default.
inline constexpr std::array<std::pair<std::string_view, std::string_view>, 4> sft_keys_at_default = {{
    {"data.multiturn.enable", "false"},
    {"data.multiturn.messages_key", "messages"},
    {"data.chat_template", "null"},
    {"data.custom_cls.name", "null"},
}};

inline bool is_ignored_sft_key(std::string_view path) {
  for (const auto pattern : ignored_sft_keys) {
    if (pattern.ends_with(".*")) {
      const auto prefix = pattern.substr(0, pattern.size() - 1);  // keeps the dot
      if (path.starts_with(prefix)) return true;
    } else if (path == pattern) {
      return true;
    }
  }
  return false;
}

/// The leaves of a tree (a mapping's entries recursively; lists and scalars are leaves).
inline void collect_leaves(const ConfigNode& node, const std::string& path,
                           std::vector<std::pair<std::string, const ConfigNode*>>& out) {
  if (node.is_map() && !node.entries.empty()) {
    for (const auto& [key, value] : node.entries) collect_leaves(value, join_path(path, key), out);
    return;
  }
  if (!path.empty()) out.emplace_back(path, &node);
}

inline std::vector<std::string> sft_key_names() {
  std::vector<std::string> names;
  SFTConfig config;
  visit_sft_fields(config, [&](std::string_view path, auto&) { names.emplace_back(path); });
  for (const auto key : ignored_sft_keys) names.emplace_back(key.ends_with(".*") ? key.substr(0, key.size() - 2) : key);
  for (const auto& [key, value] : sft_keys_at_default) names.emplace_back(key);
  return names;
}

inline void validate_sft(const SFTConfig& c, std::vector<std::string>& problems) {
  auto require = [&](bool ok, std::string message) {
    if (!ok) problems.push_back(std::move(message));
  };
  // Every number: finite, and in its key's range (config/detail/value_ranges.hpp).
  visit_sft_fields(c, [&](std::string_view key, const auto& field) { check_value(key, field, problems); });
  require(!c.data.train_files.empty(), "data.train_files: expected at least one training file (JSON Lines)");
  require(!c.model.partial_pretrain.empty(),
          "model.partial_pretrain: expected the Hugging Face model folder (or GGUF file) to fine-tune");
  require(c.data.max_length > 1, fmt::format("data.max_length: expected a value > 1, got {}", c.data.max_length));
  require(c.data.truncation == "error" || c.data.truncation == "left" || c.data.truncation == "right",
          fmt::format("data.truncation: expected one of error, left, right, got '{}'", c.data.truncation));
  require(c.optim.betas.size() == 2, fmt::format("optim.betas: expected two values, got {}", c.optim.betas.size()));
  require(c.optim.lr_scheduler == "cosine" || c.optim.lr_scheduler == "constant",
          fmt::format("optim.lr_scheduler: expected one of cosine, constant, got '{}'", c.optim.lr_scheduler));
  require(c.trainer.resume_mode == "auto" || c.trainer.resume_mode == "disable" ||
              c.trainer.resume_mode == "resume_path",
          fmt::format("trainer.resume_mode: expected one of auto, disable, resume_path, got '{}'",
                      c.trainer.resume_mode));
  for (const auto& backend : c.trainer.logger) {
    try {
      check_logger_name(backend);
    } catch (const InvalidArgument& error) {
      problems.emplace_back(error.what());
    }
  }
}

}  // namespace detail

/// Checks every key of `tree`, binds the supported ones and validates; throws ConfigError
/// listing every problem.
inline SFTConfig build_sft_config(const detail::ConfigNode& tree) {
  std::vector<std::string> problems;
  std::vector<std::pair<std::string, const detail::ConfigNode*>> leaves;
  detail::collect_leaves(tree, "", leaves);
  SFTConfig config;
  const auto names = detail::sft_key_names();
  for (const auto& [path, node] : leaves) {
    bool bound = false;
    visit_sft_fields(config, [&](std::string_view key, auto& field) {
      if (key != path) return;
      bound = true;
      if (const std::string error = detail::read(*node, field); !error.empty()) {
        problems.push_back(fmt::format("{}: {} ({})", path, error, node->origin));
      }
    });
    if (bound || detail::is_ignored_sft_key(path)) continue;
    bool at_default_key = false;
    for (const auto& [key, default_value] : detail::sft_keys_at_default) {
      if (key != path) continue;
      at_default_key = true;
      if (detail::canonical(*node) != detail::canonical(detail::parse_value(default_value, "verl's default"))) {
        problems.push_back(fmt::format("{}: not supported by verl-cpp yet (only verl's default {} is accepted, got {}; {})",
                                       path, default_value, detail::to_text(*node), node->origin));
      }
    }
    if (at_default_key) continue;
    problems.push_back(fmt::format("unknown key '{}' ({}); did you mean '{}'?", path, node->origin,
                                   detail::nearest(path, names)));
  }
  if (!problems.empty()) throw ConfigError(std::move(problems));
  if (config.trainer.default_local_dir.empty()) {
    config.trainer.default_local_dir =
        fmt::format("checkpoints/{}/{}", config.trainer.project_name, config.trainer.experiment_name);
  }
  detail::validate_sft(config, problems);
  if (!problems.empty()) throw ConfigError(std::move(problems));
  return config;
}

/// A configuration file's tree (read_config_yaml() from config_yaml.hpp, or empty), then
/// key=value overrides (later ones win).
inline SFTConfig load_sft_config(std::span<const std::string> overrides,
                                 const detail::ConfigNode& file_tree = detail::ConfigNode::map("defaults")) {
  detail::ConfigNode tree = detail::ConfigNode::map("defaults");
  try {
    detail::merge_into(tree, file_tree);
    apply_overrides(tree, overrides);
  } catch (const ConfigError&) {
    throw;
  } catch (const InvalidArgument& error) {
    throw ConfigError({error.what()});
  }
  return build_sft_config(tree);
}

}  // namespace verl::trainer
