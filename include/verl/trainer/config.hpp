// verl's configuration for verl-cpp: the PPO trainer's key tree with verl's names and defaults,
// loaded from dotted overrides (`algorithm.adv_estimator=grpo actor_rollout_ref.rollout.n=8
// trainer.logger=['console','file']`) and, with config_yaml.hpp, from a YAML file, into the
// typed PPOConfig (config/ppo_config.hpp).
//
// Every key is checked against verl's own key list (config/detail/verl_keys.hpp, generated from
// verl 0.9.1's ppo_trainer.yaml and ppo_megatron_trainer.yaml by tools/scripts/gen_verl_keys.py):
//   - keys verl-cpp supports are bound to PPOConfig, with type errors naming the key, the
//     expected type and where the value came from;
//   - keys naming Python machinery (_target_, fsdp_config, profiler, Ray, engine tuning, ...)
//     have no meaning here and are accepted and ignored;
//   - keys naming machinery that would change the results (strategy=megatron,
//     fsdp_config.model_dtype, ...) accept only the values verl-cpp implements;
//   - any other verl key is accepted only at verl's default value, and otherwise rejected as
//     "not supported by verl-cpp yet" (so verl's full YAML loads, and nothing is silently
//     ignored);
//   - verl 0.9.1's legacy reward keys (reward_model.enable, reward_model.reward_manager,
//     custom_reward_function.*, sandbox_fusion.*, ...) are carried into reward.* first, as verl's
//     migrate_legacy_reward_impl does;
//   - keys verl does not have are errors that suggest the nearest valid key.
// OmegaConf interpolations (${a.b}, ${.x}, ${oc.select:a.b,default}) resolve as in verl, so that
// e.g. critic.ppo_mini_batch_size follows the actor's unless set.
#pragma once

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "verl/algo/advantages/registry.hpp"
#include "verl/model/hf_config.hpp"
#include "verl/algo/kl/registry.hpp"
#include "verl/algo/loss_aggregation.hpp"
#include "verl/algo/policy_losses/registry.hpp"
#include "verl/core/error.hpp"
#include "verl/cpu/decode_precision.hpp"
#include "verl/trainer/config/detail/config_node.hpp"
#include "verl/trainer/config/detail/value_ranges.hpp"
#include "verl/trainer/config/detail/edit_distance.hpp"
#include "verl/trainer/config/detail/field_conversion.hpp"
#include "verl/trainer/config/detail/interpolation.hpp"
#include "verl/trainer/config/detail/override_parser.hpp"
#include "verl/trainer/config/detail/verl_keys.hpp"
#include "verl/trainer/config/ppo_config.hpp"
#include "verl/trainer/ppo_trainer_algorithm.hpp"
#include "verl/trainer/logging/tracking.hpp"
#include "verl/optim/schedules.hpp"

namespace verl::trainer {

/// A configuration that cannot be used: every problem found, one per line in what().
class ConfigError : public InvalidArgument {
 public:
  explicit ConfigError(std::vector<std::string> problems)
      : InvalidArgument(join(problems)), problems_(std::move(problems)) {}
  [[nodiscard]] const std::vector<std::string>& problems() const { return problems_; }

 private:
  static std::string join(const std::vector<std::string>& problems) {
    if (problems.size() == 1) return problems.front();
    std::string out = fmt::format("invalid configuration ({} problems):", problems.size());
    for (const auto& p : problems) out += "\n  - " + p;
    return out;
  }
  std::vector<std::string> problems_;
};

namespace detail {

/// verl keys that name Python, Ray or inference-engine machinery: accepted, without effect.
/// `*` matches one path segment, `**` any number of them.
inline constexpr std::string_view ignored_key_patterns[] = {
    "**._target_",  // Python classes
    "**.fsdp_config.**",
    "**.fsdp.**",  // critic.fsdp (0.9.1's name for the critic's engine settings)
    "**.profiler.**",
    "global_profiler.**",
    "ray_kwargs.**",
    "trainer.ray_wait_register_center_timeout",
    "trainer.use_v1",  // the worker implementation; trainer.v1.trainer_mode is checked
    "trainer.esi_redundant_time",
    "**.use_torch_compile",  // kernels and memory savers that do not change the numbers
    "**.entropy_from_logits_with_chunking",
    "**.entropy_from_logits_chunk_size",
    "**.entropy_checkpointing",
    "**.use_remove_padding",
    "**.use_fused_kernels",
    "**.fused_kernel_options.**",
    "**.use_liger",
    "**.enable_activation_offload",
    "**.enable_gradient_checkpointing",
    "**.tiled_mlp.**",
    "**.use_shm",
    "**.trust_remote_code",
    "**.rollout_n",  // derived from actor_rollout_ref.rollout.n
    // Token budgets of dynamic micro-batches (use_dynamic_bsz): with global batch numbers the
    // update does not depend on how a mini-batch is cut, so they change speed, not results.
    "**.ppo_max_token_len_per_gpu",
    "**.log_prob_max_token_len_per_gpu",
    "**.forward_max_token_len_per_gpu",
    "actor_rollout_ref.actor.calculate_entropy",  // actor/entropy is always logged; the loss term follows entropy_coeff
    "actor_rollout_ref.actor.freeze_vision_tower",
    "data.dataloader_num_workers",  // Python data loading
    "data.filter_overlong_prompts_workers",
    "data.return_raw_input_ids",
    "data.return_raw_chat",
    "data.return_full_prompt",
    "data.return_multi_modal_inputs",
    "data.image_key",
    "data.video_key",
    "data.audio_key",
    "data.image_patch_size",
    "actor_rollout_ref.rollout.mode",  // vLLM / SGLang engine settings
    "actor_rollout_ref.rollout.gpu_memory_utilization",
    "actor_rollout_ref.rollout.enforce_eager",
    "actor_rollout_ref.rollout.cudagraph_capture_sizes",
    "actor_rollout_ref.rollout.free_cache_engine",
    "actor_rollout_ref.rollout.max_num_batched_tokens",
    "actor_rollout_ref.rollout.max_num_seqs",
    "actor_rollout_ref.rollout.enable_chunked_prefill",
    "actor_rollout_ref.rollout.enable_prefix_caching",
    "actor_rollout_ref.rollout.logprobs_mode",
    "actor_rollout_ref.rollout.scheduling_policy",
    "actor_rollout_ref.rollout.load_format",
    "actor_rollout_ref.rollout.disable_log_stats",
    "actor_rollout_ref.rollout.multi_stage_wake_up",
    "actor_rollout_ref.rollout.skip_tokenizer_init",
    "actor_rollout_ref.rollout.layered_summon",
    "actor_rollout_ref.rollout.engine_kwargs.**",
    "actor_rollout_ref.rollout.agent.**",
    "actor_rollout_ref.rollout.checkpoint_engine.**",
    "actor_rollout_ref.rollout.trace.**",
    "actor_rollout_ref.rollout.prometheus.**",
    "reward.num_workers",  // Python reward workers
    "reward.reward_model.rollout.**",  // the serving engine of verl's reward model (verl-cpp scores with its own forward)
};

/// Machinery keys whose values change the results: only the values verl-cpp implements are
/// accepted (besides verl's default text, e.g. the ref's `${actor_rollout_ref.actor.strategy}`).
struct KeyChoices {
  std::string_view pattern;
  std::initializer_list<std::string_view> accepted;
  std::string_view why;
};
inline const KeyChoices machinery_key_choices[] = {
    {"**.strategy", {"fsdp", "fsdp2"}, "verl-cpp trains with its own data-parallel engine (FSDP's results)"},
    {"**.fsdp_config.model_dtype", {"fp32", "float32"}, "verl-cpp keeps float32 weights"},
    {"**.fsdp_config.ulysses_sequence_parallel_size", {"1"},
     "the new engine's copy of the key; the fsdp worker reads actor_rollout_ref.actor.ulysses_sequence_parallel_size"},
    {"**.fsdp.model_dtype", {"fp32", "float32"}, "verl-cpp keeps float32 weights"},
    {"**.fsdp.ulysses_sequence_parallel_size", {"1"},
     "the new engine's copy of the key; the critic worker reads critic.ulysses_sequence_parallel_size"},
};

inline bool pattern_matches(std::span<const std::string> pattern, std::span<const std::string> path) {
  if (pattern.empty()) return path.empty();
  if (pattern.front() == "**") {
    for (std::size_t skip = 0; skip <= path.size(); ++skip)
      if (pattern_matches(pattern.subspan(1), path.subspan(skip))) return true;
    return false;
  }
  if (path.empty()) return false;
  return (pattern.front() == "*" || pattern.front() == path.front()) && pattern_matches(pattern.subspan(1), path.subspan(1));
}

inline bool is_ignored_key(std::string_view path) {
  const auto parts = split_path(path);
  for (const auto pattern : ignored_key_patterns)
    if (pattern_matches(split_path(pattern), parts)) return true;
  return false;
}

inline const KeyChoices* machinery_choices_of(std::string_view path) {
  const auto parts = split_path(path);
  for (const auto& choices : machinery_key_choices)
    if (pattern_matches(split_path(choices.pattern), parts)) return &choices;
  return nullptr;
}

/// verl-cpp's own defaults where they differ from verl's yaml (see ppo_config.hpp).
inline constexpr std::array<std::pair<std::string_view, std::string_view>, 4> verl_cpp_default_changes = {{
    {"trainer.logger", "['console']"},
    {"trainer.n_gpus_per_node", "1"},
    {"trainer.device", "'cpu'"},
    {"actor_rollout_ref.rollout.dtype", "'float32'"},
}};

/// verl 0.9.1's migrate_legacy_reward_impl: a legacy key set to anything but null is carried
/// into its reward.* place (the whole custom_reward_function / sandbox_fusion section when any
/// of its keys is set), and the legacy keys are then back at their null defaults, so that every
/// later check and error names the reward.* key that acts.
inline void migrate_legacy_reward_keys(ConfigNode& tree) {
  auto is_set = [](const ConfigNode* node) { return node != nullptr && !node->is_null(); };
  auto move = [&](std::string_view from, std::string_view to) {
    ConfigNode* node = find_path(tree, from);
    if (!is_set(node)) return;
    ConfigNode value = *node;
    *node = ConfigNode::null(node->origin);
    set_path(tree, to, std::move(value));
  };
  auto move_section = [&](std::string_view from, std::string_view to) {
    ConfigNode* node = find_path(tree, from);
    if (node == nullptr || !node->is_map()) return;
    if (std::none_of(node->entries.begin(), node->entries.end(), [&](const auto& entry) { return is_set(&entry.second); }))
      return;
    for (auto& [key, value] : node->entries) {
      set_path(tree, join_path(std::string(to), key), value);
      value = ConfigNode::null(value.origin);
    }
  };
  move("reward_model.num_workers", "reward.num_workers");
  move("reward_model.reward_manager", "reward.reward_manager.name");
  if (is_set(find_path(tree, "reward_model.reward_loop_source"))) {
    move("reward_model.reward_loop_source", "reward.reward_manager.source");
    move("reward_model.reward_loop_module_path", "reward.reward_manager.module.path");
    move("reward_model.reward_loop_class_name", "reward.reward_manager.module.name");
  }
  move_section("custom_reward_function", "reward.custom_reward_function");
  for (const std::string_view key : {"enable", "enable_resource_pool", "n_gpus_per_node", "nnodes"})
    move(fmt::format("reward_model.{}", key), fmt::format("reward.reward_model.{}", key));
  move("reward_model.model.path", "reward.reward_model.model_path");
  if (ConfigNode* rollout = find_path(tree, "reward_model.rollout"); rollout != nullptr && rollout->is_map()) {
    for (auto& [key, value] : rollout->entries) {
      if (!is_set(&value)) continue;
      set_path(tree, "reward.reward_model.rollout." + key, value);
      value = ConfigNode::null(value.origin);
    }
  }
  move_section("sandbox_fusion", "reward.sandbox_fusion");
}

/// Lookup tables over the key lists, built once.
struct KeyTables {
  std::map<std::string, std::string, std::less<>> verl_defaults;  ///< verl key -> default text
  std::set<std::string, std::less<>> supported;                   ///< keys bound to PPOConfig
  std::set<std::string, std::less<>> sections;                    ///< every proper prefix of a key
  std::vector<std::string> all_keys;                              ///< for suggestions: supported first

  static const KeyTables& get() {
    static const KeyTables tables = [] {
      KeyTables t;
      for (const auto& key : verl_config_keys) t.verl_defaults.emplace(key.path, key.default_value);
      const PPOConfig defaults;
      visit_fields(defaults, [&](std::string_view path, const auto&) { t.supported.emplace(path); });
      for (const auto& key : t.supported) t.all_keys.push_back(key);
      for (const auto& [key, value] : t.verl_defaults)
        if (!t.supported.contains(key)) t.all_keys.push_back(key);
      for (const auto& key : t.all_keys) {
        for (std::size_t dot = key.find('.'); dot != std::string::npos; dot = key.find('.', dot + 1))
          t.sections.insert(key.substr(0, dot));
      }
      return t;
    }();
    return tables;
  }
};

/// verl's default tree with verl-cpp's changes and the defaults of verl-cpp's extension keys.
inline ConfigNode default_tree() {
  ConfigNode root = ConfigNode::map("defaults");
  for (const auto& key : verl_config_keys) set_path(root, key.path, parse_value(key.default_value, "verl's default"));
  for (const auto& [key, value] : verl_cpp_default_changes) set_path(root, key, parse_value(value, "verl-cpp's default"));
  const PPOConfig defaults;
  visit_fields(defaults, [&](std::string_view path, const auto& field) {
    if (find_path(root, path) == nullptr) set_path(root, path, parse_value(write(field), "verl-cpp's default"));
  });
  return root;
}

class KeyChecker {
 public:
  explicit KeyChecker(std::vector<std::string>& problems) : problems_(problems), tables_(KeyTables::get()) {}

  /// A value that differs from verl's default only in its spelling through an interpolation
  /// (`1` where verl writes `${oc.select:actor...,1}`): decided once both are resolved.
  struct Deferred {
    std::string path;
    std::string default_text;
  };
  [[nodiscard]] const std::vector<Deferred>& deferred() const { return deferred_; }

  /// Settles the deferred comparisons: `unresolved` is the tree before interpolation,
  /// `resolved` after. verl's default is resolved where the user's value stands.
  void settle(const ConfigNode& unresolved, const ConfigNode& resolved) {
    for (const auto& [path, default_text] : deferred_) {
      ConfigNode with_default = unresolved;
      set_path(with_default, path, parse_value(default_text, "verl's default"));
      std::vector<std::string> ignored;
      std::set<std::string> failed;
      InterpolationResolver(with_default).resolve_all(ignored, failed);
      const ConfigNode* expected = find_path(with_default, path);
      const ConfigNode* actual = find_path(resolved, path);
      if (expected == nullptr || actual == nullptr || failed.contains(path) || canonical(*expected) != canonical(*actual)) {
        refuse_non_default(actual != nullptr ? *actual : *find_path(unresolved, path), path, default_text);
      }
    }
  }

  void check(const ConfigNode& node, const std::string& path) {
    if (path.empty()) {
      for (const auto& [key, value] : node.entries) check(value, key);
      return;
    }
    // A mapping is walked into unless the key is a leaf (a free-form dict such as override_config).
    if (node.is_map() && !node.entries.empty() && !tables_.verl_defaults.contains(path) && !tables_.supported.contains(path)) {
      if (tables_.sections.contains(path)) {
        for (const auto& [key, value] : node.entries) check(value, join_path(path, key));
        return;
      }
    }
    check_leaf(node, path);
  }

 private:
  void check_leaf(const ConfigNode& node, const std::string& path) {
    if (tables_.supported.contains(path)) return;
    const auto found = tables_.verl_defaults.find(path);
    if (const KeyChoices* choices = machinery_choices_of(path); choices != nullptr && found != tables_.verl_defaults.end()) {
      const bool is_default = canonical(node) == canonical(parse_value(found->second, "verl's default"));
      const std::string text = node.kind == ConfigNode::Kind::scalar ? node.text : to_text(node);
      if (!is_default && std::find(choices->accepted.begin(), choices->accepted.end(), text) == choices->accepted.end()) {
        problems_.push_back(fmt::format("{}: not supported by verl-cpp yet ({}; accepted: {}; got {}; {})", path, choices->why,
                                        fmt::join(choices->accepted, ", "), to_text(node), user_origin(node)));
      }
      return;
    }
    if (is_ignored_key(path)) return;
    if (found != tables_.verl_defaults.end()) {
      const ConfigNode verl_default = parse_value(found->second, "verl's default");
      // A free-form mapping's "nothing" is spelt null in one file and {} in another.
      const auto nothing = [](const ConfigNode& n) { return n.is_null() || (n.is_map() && n.entries.empty()); };
      if (canonical(node) != canonical(verl_default) && !(nothing(node) && nothing(verl_default))) {
        const auto interpolated = [](const ConfigNode& n) { return to_text(n).find("${") != std::string::npos; };
        if (interpolated(node) || interpolated(verl_default)) {
          deferred_.push_back({path, std::string(found->second)});
        } else {
          refuse_non_default(node, path, found->second);
        }
      }
      return;
    }
    if (tables_.sections.contains(path)) {
      problems_.push_back(fmt::format("{}: expected a mapping (a section of the configuration), got {} ({})", path,
                                      to_text(node), node.origin));
      return;
    }
    // Inside a verl key that holds a free-form mapping (e.g. override_config.x)?
    for (std::string prefix = path; prefix.find('.') != std::string::npos;) {
      prefix = prefix.substr(0, prefix.rfind('.'));
      if (tables_.verl_defaults.contains(prefix)) {
        if (!is_ignored_key(prefix)) {
          problems_.push_back(fmt::format("{}: not supported by verl-cpp yet (inside {}; {})", path, prefix, node.origin));
        }
        return;
      }
    }
    if (path == "defaults" || path == "hydra" || path.starts_with("hydra.")) {
      problems_.push_back(fmt::format(
          "{}: Hydra's composition is not supported; give a flattened configuration (as verl's print_cfg writes it) or "
          "overrides ({})",
          path, node.origin));
      return;
    }
    problems_.push_back(fmt::format("{}: unknown key ({}); did you mean {}?", path, node.origin,
                                    nearest(path, tables_.all_keys)));
  }

  void refuse_non_default(const ConfigNode& node, const std::string& path, std::string_view default_text) {
    problems_.push_back(fmt::format("{}: not supported by verl-cpp yet (only verl's default {} is accepted, got {}; {})",
                                    path, default_text, to_text(node), user_origin(node)));
  }

  /// Where the user's part of a value came from (a mapping merged over verl's default keeps
  /// the default's origin; its entries know better).
  static std::string user_origin(const ConfigNode& node) {
    if (!node.origin.starts_with("verl")) return node.origin;
    for (const auto& [key, value] : node.entries) {
      if (auto origin = user_origin(value); !origin.starts_with("verl")) return origin;
    }
    for (const auto& item : node.items) {
      if (auto origin = user_origin(item); !origin.starts_with("verl")) return origin;
    }
    return node.origin;
  }

  std::vector<std::string>& problems_;
  const KeyTables& tables_;
  std::vector<Deferred> deferred_;
};

inline std::string suggestion(std::string_view name, std::span<const std::string_view> choices) {
  return fmt::format("expected one of {}, got '{}'; did you mean {}?", fmt::join(choices, ", "), name,
                     nearest(name, choices));
}

/// Checks the names and ranges verl checks (or would fail on later).
inline void validate(const PPOConfig& c, std::vector<std::string>& problems) {
  auto require = [&](bool ok, std::string message) {
    if (!ok) problems.push_back(std::move(message));
  };
  // Every number: finite, and in its key's range (config/detail/value_ranges.hpp).
  visit_fields(c, [&](std::string_view key, const auto& field) { check_value(key, field, problems); });
  require(!c.data.train_files.empty(), "data.train_files: expected at least one file, got an empty list");

  const auto& actor = c.actor_rollout_ref.actor;
  for (const auto& [prefix, optim] : {std::pair<std::string_view, const OptimConfig*>{"actor_rollout_ref.actor.optim", &actor.optim},
                                      {"critic.optim", &c.critic.optim}}) {
    require(optim->optimizer == "AdamW", fmt::format("{}.optimizer: expected AdamW (the optimizer verl-cpp has), got '{}'",
                                                     prefix, optim->optimizer));
    require(optim->betas.size() == 2,
            fmt::format("{}.betas: expected two values [beta1, beta2], got {}", prefix, optim->betas.size()));
    const std::string_view type = optim->warmup_style ? std::string_view(*optim->warmup_style) : optim->lr_scheduler_type;
    const std::string_view key = optim->warmup_style ? "warmup_style" : "lr_scheduler_type";
    if (std::find(optim::lr_scheduler_type_names.begin(), optim::lr_scheduler_type_names.end(), type) ==
        optim::lr_scheduler_type_names.end()) {
      problems.push_back(fmt::format("{}.{}: {}", prefix, key, suggestion(type, optim::lr_scheduler_type_names)));
    }
  }

  // FSDP's sharding group (the worker checks that it divides the group's world size).
  for (const auto& [key, fsdp_size] : {std::pair<std::string_view, std::int64_t>{"actor_rollout_ref.actor.fsdp_config.fsdp_size",
                                                                                 actor.fsdp_config.fsdp_size},
                                       {"actor_rollout_ref.ref.fsdp_config.fsdp_size", c.actor_rollout_ref.ref.fsdp_config.fsdp_size},
                                       {"critic.fsdp.fsdp_size", c.critic.fsdp.fsdp_size}}) {
    require(fsdp_size == -1 || fsdp_size >= 1,
            fmt::format("{}: expected -1 (every rank of the worker group) or a positive number of ranks, got {}", key, fsdp_size));
  }

  // A role's training engine (`role`: actor_rollout_ref.actor, critic): fsdp / fsdp2 (data
  // parallel) or megatron (tensor parallel, with the role's megatron section, whose parallel
  // sizes act only then). True when the role trains with megatron.
  const auto megatron_engine = [&](std::string_view role, const std::string& strategy, const MegatronSection& m) {
    static constexpr std::array<std::string_view, 3> strategies = {"fsdp", "fsdp2", "megatron"};
    if (std::find(strategies.begin(), strategies.end(), strategy) == strategies.end()) {
      problems.push_back(fmt::format("{}.strategy: {}", role, suggestion(strategy, strategies)));
    }
    if (strategy != "megatron") {
      require(m.tensor_model_parallel_size == 1 && m.pipeline_model_parallel_size == 1 && m.context_parallel_size == 1,
              fmt::format("{}.megatron: tensor/pipeline/context_parallel_size act only with {}.strategy=megatron, got "
                          "tp={} pp={} cp={} with strategy={}",
                          role, role, m.tensor_model_parallel_size, m.pipeline_model_parallel_size,
                          m.context_parallel_size, strategy));
      return false;
    }
    require(m.tensor_model_parallel_size >= 1, fmt::format("{}.megatron.tensor_model_parallel_size: expected a value >= 1, got {}",
                                                           role, m.tensor_model_parallel_size));
    return true;
  };

  // The actor's training engine: fsdp (data parallel) or megatron (tensor parallel, the
  // Megatron worker). What the Megatron worker does not build is refused by its key.
  {
    const auto& m = actor.megatron;
    const std::string_view k = "actor_rollout_ref.actor.megatron";
    const std::int64_t tg = c.actor_rollout_ref.rollout.tensor_model_parallel_size;
    const std::string_view rollout_tp = "actor_rollout_ref.rollout.tensor_model_parallel_size";
    if (!megatron_engine("actor_rollout_ref.actor", actor.strategy, m)) {
      require(tg == 1 || tg == 2,
              fmt::format("{}: acts only with actor_rollout_ref.actor.strategy=megatron (TP-sharded generation); with "
                          "strategy={} every rank generates with the whole model: expected 1 (or verl's default 2, which "
                          "then does not act), got {}",
                          rollout_tp, actor.strategy, tg));
    } else {
      require(tg >= 1 && m.tensor_model_parallel_size % tg == 0,
              fmt::format("{}: expected a divisor of {}.tensor_model_parallel_size = {} (the 3D-HybridEngine makes each "
                          "generation TP shard by all-gathering tp / tg training shards), got {}",
                          rollout_tp, k, m.tensor_model_parallel_size, tg));
      // Pipeline parallelism (1F1B over the stages) with a dense generation copy (pg = 1, tg = 1).
      require(m.pipeline_model_parallel_size >= 1,
              fmt::format("{}.pipeline_model_parallel_size: expected a value >= 1, got {}", k, m.pipeline_model_parallel_size));
      require(m.pipeline_model_parallel_size == 1 || tg == 1,
              fmt::format("{}: expected 1 with {}.pipeline_model_parallel_size = {} > 1 (the generation gathers every "
                          "stage's layers into a dense copy; TP-sharded generation from a pipeline is not built), got {}",
                          rollout_tp, k, m.pipeline_model_parallel_size, tg));
      require(m.context_parallel_size == 1,
              fmt::format("{}.context_parallel_size: not supported by verl-cpp yet (context parallelism), expected 1, got {}",
                          k, m.context_parallel_size));
      // verl's Megatron workers read megatron.context_parallel_size, not the fsdp worker's Ulysses key.
      require(actor.ulysses_sequence_parallel_size == 1,
              fmt::format("actor_rollout_ref.actor.ulysses_sequence_parallel_size: acts only with "
                          "actor_rollout_ref.actor.strategy=fsdp or fsdp2 (the Megatron worker does not split sequences), "
                          "expected 1 with strategy=megatron, got {}",
                          actor.ulysses_sequence_parallel_size));
      // sequence_parallel (verl's default True) acts with tp > 1 (Megatron's sequence parallelism in
      // the actor and its reference, pipeline stages exchanging their token slices; Megatron turns
      // it off at tp = 1 itself).
      // use_distributed_optimizer acts (Megatron's distributed optimizer, ZeRO-1 over the DP
      // ranks, in the Megatron worker; a no-op at dp = 1). The ref's copy of the key is read only
      // with its strategy=megatron, which is refused by name (the ref is a TP copy in this worker).
      require(c.actor_rollout_ref.model.lora_rank == 0,
              fmt::format("actor_rollout_ref.model.lora_rank: not supported by verl-cpp yet with "
                          "actor_rollout_ref.actor.strategy=megatron (LoRA on tensor-parallel shards), expected 0, got {}",
                          c.actor_rollout_ref.model.lora_rank));
    }
  }

  // The critic's training engine: fsdp (the data-parallel CriticWorker) or megatron (tensor
  // parallel, MegatronCriticWorker, with critic.megatron's layout; the worker checks that tp
  // divides the critic's ranks and fits its model's heads). What it does not build is refused by key.
  {
    const auto& critic = c.critic;
    const auto& m = critic.megatron;
    const std::string_view k = "critic.megatron";
    if (megatron_engine("critic", critic.strategy, m)) {
      require(m.pipeline_model_parallel_size >= 1,
              fmt::format("{}.pipeline_model_parallel_size: expected a value >= 1, got {}", k, m.pipeline_model_parallel_size));
      require(m.context_parallel_size == 1,
              fmt::format("{}.context_parallel_size: not supported by verl-cpp yet (context parallelism), expected 1, got {}",
                          k, m.context_parallel_size));
      // verl's Megatron critic reads critic.megatron, not the fsdp worker's Ulysses and FSDP keys.
      require(critic.ulysses_sequence_parallel_size == 1,
              fmt::format("critic.ulysses_sequence_parallel_size: acts only with critic.strategy=fsdp or fsdp2 (the "
                          "Megatron critic does not split sequences with Ulysses), expected 1 with strategy=megatron, got {}",
                          critic.ulysses_sequence_parallel_size));
      require(critic.fsdp.fsdp_size == -1 || critic.fsdp.fsdp_size == 1,
              fmt::format("critic.fsdp.fsdp_size: acts only with critic.strategy=fsdp or fsdp2 (the Megatron critic shards "
                          "with critic.megatron), expected -1 or 1 with strategy=megatron, got {}",
                          critic.fsdp.fsdp_size));
      // sequence_parallel (verl's default True) acts at tp > 1 and use_distributed_optimizer at
      // dp > 1, as the actor's.
    }
  }

  const auto& algorithm = c.algorithm;
  const auto estimators = algo::advantage_estimator_names();
  if (std::find(estimators.begin(), estimators.end(), algorithm.adv_estimator) == estimators.end()) {
    problems.push_back("algorithm.adv_estimator: " + suggestion(algorithm.adv_estimator, estimators));
  }
  if (algorithm.adv_estimator == algo::GDPO::name) {
    // verl asserts on both at the first advantage computation; refused before any work here.
    const auto& keys = algorithm.gdpo_reward_keys;
    require(keys && !keys->empty(),
            "algorithm.gdpo_reward_keys: expected the names of the reward function's scores to normalise with "
            "adv_estimator=gdpo (e.g. +algorithm.gdpo_reward_keys=[score,acc]), got " +
                (keys ? std::string("[]") : std::string("null")));
    if (keys && algorithm.gdpo_reward_weights)
      require(algorithm.gdpo_reward_weights->size() == keys->size(),
              fmt::format("algorithm.gdpo_reward_weights: expected one weight per key of algorithm.gdpo_reward_keys "
                          "({}), got {}",
                          keys->size(), algorithm.gdpo_reward_weights->size()));
  } else {
    for (const auto& [key, set] : {std::pair<std::string_view, bool>{"algorithm.gdpo_reward_keys", algorithm.gdpo_reward_keys.has_value()},
                                   {"algorithm.gdpo_reward_weights", algorithm.gdpo_reward_weights.has_value()}})
      require(!set, fmt::format("{}: only adv_estimator=gdpo reads it; expected null with adv_estimator={}", key,
                                algorithm.adv_estimator));
  }
  const auto losses = algo::policy_loss_names();
  if (std::find(losses.begin(), losses.end(), actor.policy_loss.loss_mode) == losses.end()) {
    problems.push_back("actor_rollout_ref.actor.policy_loss.loss_mode: " + suggestion(actor.policy_loss.loss_mode, losses));
  }
  if (actor.policy_loss.loss_mode == algo::DRO::name && !actor.policy_loss.dro_beta)
    problems.push_back("actor_rollout_ref.actor.policy_loss.dro_beta: expected a positive value with loss_mode dro, got null");
  for (const auto& [key, name] : {std::pair<std::string_view, const std::string*>{"algorithm.kl_penalty", &algorithm.kl_penalty},
                                  {"actor_rollout_ref.actor.kl_loss_type", &actor.kl_loss_type}}) {
    try {
      (void)algo::make_kl_estimator(*name);
    } catch (const NotImplemented& error) {
      problems.push_back(fmt::format("{}: {}", key, error.what()));
    } catch (const InvalidArgument&) {
      problems.push_back(fmt::format("{}: {}", key, suggestion(*name, algo::kl_penalty_names)));
    }
  }
  static constexpr auto agg_modes = names_of(algo::LossAggregations{});
  for (const auto& [key, mode] : {std::pair<std::string_view, const std::string*>{"actor_rollout_ref.actor.loss_agg_mode", &actor.loss_agg_mode},
                                  {"critic.loss_agg_mode", &c.critic.loss_agg_mode}}) {
    try {
      (void)algo::parse_loss_agg_mode(*mode);
    } catch (const InvalidArgument&) {
      problems.push_back(fmt::format("{}: {}", key, suggestion(*mode, agg_modes)));
    }
  }
  static constexpr std::array<std::string_view, 2> kl_ctrl_types = {"fixed", "adaptive"};
  if (algorithm.kl_ctrl.type != "fixed" && algorithm.kl_ctrl.type != "adaptive") {
    problems.push_back("algorithm.kl_ctrl.type: " + suggestion(algorithm.kl_ctrl.type, kl_ctrl_types));
  }
  require(algorithm.kl_ctrl.type != "adaptive" || algorithm.kl_ctrl.horizon > 0,
          fmt::format("algorithm.kl_ctrl.horizon: expected a value > 0 for the adaptive controller, got {}",
                      algorithm.kl_ctrl.horizon));
  for (const auto& backend : c.trainer.logger) {
    try {
      check_logger_name(backend);
    } catch (const InvalidArgument& error) {
      problems.push_back(error.what());
    }
  }
  if (c.reward.reward_model.enable) {
    require(c.reward.reward_model.model_path.has_value(),
            "reward.reward_model.model_path: expected the reward model's folder (a *ForSequenceClassification model) "
            "with reward.reward_model.enable=True, got null");
  }
  if (c.reward.reward_model.enable_resource_pool) {
    require(c.reward.reward_model.nnodes >= 1 && c.reward.reward_model.n_gpus_per_node >= 1,
            fmt::format("reward.reward_model.nnodes / n_gpus_per_node: expected >= 1 each for the reward model's own "
                        "pool (enable_resource_pool=True), got {} / {}",
                        c.reward.reward_model.nnodes, c.reward.reward_model.n_gpus_per_node));
  }
  static constexpr std::array<std::string_view, 2> reward_managers = {"naive", "dapo"};
  if (std::find(reward_managers.begin(), reward_managers.end(), c.reward.reward_manager.name) == reward_managers.end()) {
    problems.push_back("reward.reward_manager.name: " + suggestion(c.reward.reward_manager.name, reward_managers) +
                       " (verl's other reward managers are not supported by verl-cpp yet)");
  }
  // An empty folder would put checkpoints (and resume from whatever is) in the working directory.
  require(!c.trainer.default_local_dir.empty(),
          "trainer.default_local_dir: expected a folder for checkpoints (verl: checkpoints/<project>/<experiment>), got ''");
  require(c.trainer.resume_mode != ResumeMode::resume_path || c.trainer.resume_from_path.has_value(),
          "trainer.resume_from_path: expected a checkpoint folder with trainer.resume_mode=resume_path, got null");
  // Where the trainer runs: one process per data-parallel rank, started by mpirun, on CPUs.
  require(c.trainer.device == "cpu",
          fmt::format("trainer.device: not supported by verl-cpp yet (the trainer runs on cpu; the CUDA kernels are "
                      "not a trainer yet), got '{}'",
                      c.trainer.device));
  // One MPI rank stands for one device: the pools' sizes (trainer.nnodes x n_gpus_per_node, the
  // critic's own pool) must add up to the job's ranks, which the placement checks when it starts.
  require(c.trainer.nnodes >= 1, fmt::format("trainer.nnodes: expected a number of nodes >= 1, got {}", c.trainer.nnodes));
  require(c.trainer.n_gpus_per_node >= 1,
          fmt::format("trainer.n_gpus_per_node: expected a number of devices (MPI ranks) per node >= 1, got {}",
                      c.trainer.n_gpus_per_node));
  {
    const auto& arr = c.actor_rollout_ref;
    if (arr.hybrid_engine) {
      require(arr.rollout.nnodes == 0,
              fmt::format("actor_rollout_ref.rollout.nnodes: a rollout pool of its own needs actor_rollout_ref.hybrid_engine="
                          "False; with the hybrid engine the rollout shares the actor's ranks (expected 0, got {})",
                          arr.rollout.nnodes));
    } else {
      const std::int64_t gpus = arr.rollout.n_gpus_per_node;
      require(arr.rollout.nnodes >= 1 && gpus >= 1,
              fmt::format("actor_rollout_ref.rollout.nnodes / n_gpus_per_node: expected >= 1 each for the rollout's own "
                          "pool (actor_rollout_ref.hybrid_engine=False), got {} / {}",
                          arr.rollout.nnodes, gpus));
      require(arr.actor.strategy != "megatron" && arr.model.lora_rank == 0,
              fmt::format("actor_rollout_ref.hybrid_engine: False (a rollout pool of its own) is built for the dense "
                          "data-parallel actor; expected True with actor.strategy={} and model.lora_rank={}",
                          arr.actor.strategy, arr.model.lora_rank));
    }
  }
  // trainer.v1: verl's default sync mode, or separate_async (a rollout pool of its own generates
  // while the trainer updates; the sampler's off-policy bound applies there and is a no-op in sync).
  {
    const auto& v1 = c.trainer.v1;
    static constexpr std::array<std::string_view, 2> modes = {"sync", "separate_async"};
    if (v1.trainer_mode == "colocate_async") {
      problems.push_back(
          "trainer.v1.trainer_mode: colocate_async is not supported by verl-cpp yet (partial rollouts on the trainer's "
          "own ranks); expected sync or separate_async");
    } else if (std::find(modes.begin(), modes.end(), v1.trainer_mode) == modes.end()) {
      problems.push_back("trainer.v1.trainer_mode: " + suggestion(v1.trainer_mode, modes));
    }
    static constexpr std::array<std::string_view, 2> strategies = {"drop", "wait"};
    if (std::find(strategies.begin(), strategies.end(), v1.sampler.max_off_policy_strategy) == strategies.end()) {
      problems.push_back("trainer.v1.sampler.max_off_policy_strategy: " + suggestion(v1.sampler.max_off_policy_strategy, strategies));
    }
    if (v1.trainer_mode == "separate_async") {
      const auto& arr = c.actor_rollout_ref;
      const auto& sa = v1.separate_async;
      require(!arr.hybrid_engine,
              "trainer.v1.trainer_mode: separate_async generates on a rollout pool of its own: expected "
              "actor_rollout_ref.hybrid_engine=False (with actor_rollout_ref.rollout.nnodes / n_gpus_per_node), got True");
      require(c.data.train_batch_size == sa.parameter_sync_step * arr.actor.ppo_mini_batch_size,
              fmt::format("data.train_batch_size: separate_async trains one PPO mini-batch per update as it arrives, so "
                          "expected trainer.v1.separate_async.parameter_sync_step x actor_rollout_ref.actor.ppo_mini_batch_size "
                          "= {} x {} = {}, got {}",
                          sa.parameter_sync_step, arr.actor.ppo_mini_batch_size,
                          sa.parameter_sync_step * arr.actor.ppo_mini_batch_size, c.data.train_batch_size));
      // With wait nothing is dropped, so every batch sent ahead is trained num_warmup_batches
      // steps after it was sent: beyond the bound no sample could ever be trained.
      require(v1.sampler.max_off_policy_strategy != "wait" || sa.num_warmup_batches + 1 <= v1.sampler.max_off_policy_threshold,
              fmt::format("trainer.v1.sampler.max_off_policy_threshold: with max_off_policy_strategy=wait every batch is "
                          "trained trainer.v1.separate_async.num_warmup_batches + 1 = {} steps after it is sent; expected a "
                          "threshold >= {}, got {}",
                          sa.num_warmup_batches + 1, sa.num_warmup_batches + 1, v1.sampler.max_off_policy_threshold));
      require(!c.algorithm.filter_groups.enable,
              "algorithm.filter_groups.enable: dynamic sampling with trainer.v1.trainer_mode=separate_async is not "
              "supported by verl-cpp yet; expected False, got True");
      require(c.algorithm.adv_estimator != "remax",
              "algorithm.adv_estimator: remax (a greedy baseline generation per prompt) with "
              "trainer.v1.trainer_mode=separate_async is not supported by verl-cpp yet; expected another estimator, got 'remax'");
    }
  }
  require(c.critic.nnodes >= 0 && c.critic.n_gpus_per_node >= 0 && (c.critic.nnodes == 0) == (c.critic.n_gpus_per_node == 0),
          fmt::format("critic.nnodes / critic.n_gpus_per_node: expected both 0 (the critic shares the actor's ranks) or "
                      "both >= 1 (a pool of its own), got {} / {}",
                      c.critic.nnodes, c.critic.n_gpus_per_node));
  require(!c.actor_rollout_ref.rollout.name.has_value(),
          fmt::format("actor_rollout_ref.rollout.name: not supported by verl-cpp yet (verl-cpp generates with its own "
                      "KV-cache rollout; leave it unset, ?\?\?), got '{}'",
                      c.actor_rollout_ref.rollout.name.value_or("")));
  try {
    (void)cpu::parse_decode_precision(c.actor_rollout_ref.rollout.dtype, "actor_rollout_ref.rollout.dtype");
  } catch (const InvalidArgument& error) {
    problems.push_back(error.what());
  }
  // Checkpoints always hold the model, the optimizer and the extra state (step, data position,
  // random streams); verl's other choices (no optimizer, an HF copy) are refused, not ignored.
  for (const auto& [role, checkpoint] :
       {std::pair<std::string_view, const CheckpointContentsConfig*>{"actor_rollout_ref.actor", &actor.checkpoint},
        {"critic", &c.critic.checkpoint}}) {
    for (const auto& [key, contents] : {std::pair<std::string_view, const std::vector<std::string>*>{"save_contents", &checkpoint->save_contents},
                                        {"load_contents", &checkpoint->load_contents}}) {
      std::vector<std::string> sorted = *contents;
      std::sort(sorted.begin(), sorted.end());
      require(sorted == std::vector<std::string>{"extra", "model", "optimizer"},
              fmt::format("{}.checkpoint.{}: not supported by verl-cpp yet (checkpoints hold exactly model, optimizer "
                          "and extra), got [{}]",
                          role, key, fmt::join(*contents, ", ")));
    }
  }
  require(!c.reward_model.overlong_buffer.enable || c.reward.reward_manager.name == "dapo",
          fmt::format("reward_model.overlong_buffer.enable: the overlong buffer is the DAPO reward manager's (as in verl); "
                      "expected reward.reward_manager.name=dapo, got '{}'",
                      c.reward.reward_manager.name));
  // The rollout generates with data.max_prompt_length / data.max_response_length (verl's
  // rollout.prompt_length / response_length follow them by default).
  for (const auto& [key, rollout_value, data_key, data_value] :
       {std::tuple<std::string_view, std::int64_t, std::string_view, std::int64_t>{
            "actor_rollout_ref.rollout.prompt_length", c.actor_rollout_ref.rollout.prompt_length, "data.max_prompt_length",
            c.data.max_prompt_length},
        {"actor_rollout_ref.rollout.response_length", c.actor_rollout_ref.rollout.response_length,
         "data.max_response_length", c.data.max_response_length}}) {
    require(rollout_value == data_value,
            fmt::format("{}: not supported by verl-cpp yet at a value other than {} ({}), got {}", key, data_key, data_value,
                        rollout_value));
  }
  try {
    (void)rollout_log_prob_use(c);  // algorithm.rollout_correction: names, thresholds, and what they need
  } catch (const InvalidArgument& error) {
    problems.push_back(error.what());
  }
  if (algorithm.filter_groups.enable) {
    static constexpr std::array<std::string_view, 4> metrics = {"acc", "score", "seq_reward", "seq_final_reward"};
    const std::string& metric = algorithm.filter_groups.metric;
    if (std::find(metrics.begin(), metrics.end(), metric) == metrics.end()) {
      problems.push_back("algorithm.filter_groups.metric: " + suggestion(metric, metrics));
    }
    require(metric != "seq_final_reward" || !algorithm.use_kl_in_reward,
            "algorithm.filter_groups.metric: seq_final_reward with algorithm.use_kl_in_reward=True is not supported by "
            "verl-cpp yet (groups are filtered before the KL penalty is applied)");
  }
}

}  // namespace detail

/// The keys PPOConfig binds, in visiting order.
inline std::vector<std::string> supported_config_keys() {
  std::vector<std::string> keys;
  const PPOConfig defaults;
  visit_fields(defaults, [&](std::string_view path, const auto&) { keys.emplace_back(path); });
  return keys;
}

/// Whether `path` is a key of verl's PPO trainer configuration.
inline bool is_verl_config_key(std::string_view path) { return detail::KeyTables::get().verl_defaults.contains(path); }

/// The untyped tree of verl's defaults (as adjusted by verl-cpp); merge files and overrides into
/// it, then build_ppo_config().
inline detail::ConfigNode default_config_tree() { return detail::default_tree(); }

/// Applies `key=value` overrides to a tree, in order (later ones win).
inline void apply_overrides(detail::ConfigNode& tree, std::span<const std::string> overrides) {
  for (const auto& text : overrides) {
    auto [key, value] = detail::parse_override(text);
    detail::set_path(tree, key, std::move(value));
  }
}

/// Checks every key, resolves interpolations, binds the supported keys and validates; throws
/// ConfigError listing every problem. With `resolved`, the whole tree as it will run (every key,
/// the legacy reward keys migrated, interpolations resolved) is left there.
inline PPOConfig build_ppo_config(detail::ConfigNode tree, detail::ConfigNode* resolved = nullptr) {
  std::vector<std::string> problems;
  detail::migrate_legacy_reward_keys(tree);
  detail::KeyChecker checker(problems);
  checker.check(tree, "");
  if (!problems.empty()) throw ConfigError(std::move(problems));
  const detail::ConfigNode before_interpolation = checker.deferred().empty() ? detail::ConfigNode{} : tree;
  std::set<std::string> unresolved;
  detail::InterpolationResolver(tree).resolve_all(problems, unresolved);
  if (!checker.deferred().empty()) {
    checker.settle(before_interpolation, tree);
    if (!problems.empty()) throw ConfigError(std::move(problems));
  }
  if (resolved != nullptr) *resolved = tree;
  PPOConfig config;
  visit_fields(config, [&](std::string_view path, auto& field) {
    const detail::ConfigNode* node = detail::find_path(tree, path);
    if (node == nullptr || unresolved.contains(std::string(path))) return;
    if (const std::string error = detail::read(*node, field); !error.empty()) {
      problems.push_back(fmt::format("{}: {} ({})", path, error, node->origin));
    }
  });
  if (!problems.empty()) throw ConfigError(std::move(problems));
  // verl's deprecated warmup_style overrides lr_scheduler_type.
  for (OptimConfig* optim : {&config.actor_rollout_ref.actor.optim, &config.critic.optim}) {
    if (optim->warmup_style) optim->lr_scheduler_type = *optim->warmup_style;
  }
  detail::validate(config, problems);
  if (!problems.empty()) throw ConfigError(std::move(problems));
  return config;
}

namespace detail {

/// verl's defaults, then `layer(tree)` (a YAML file, overrides), then the typed configuration;
/// every error in between is a ConfigError.
template <class Layer>
PPOConfig load_ppo_config_layered(Layer&& layer, ConfigNode* resolved = nullptr) {
  ConfigNode tree;
  try {
    tree = default_tree();
    layer(tree);
  } catch (const ConfigError&) {
    throw;
  } catch (const InvalidArgument& error) {
    throw ConfigError({error.what()});
  }
  return build_ppo_config(std::move(tree), resolved);
}

/// YAML 1.1 reads these bare keys as booleans (verl's files quote 'n').
inline bool needs_quoted_key(std::string_view key) {
  static constexpr std::array<std::string_view, 22> words = {"y", "Y", "n", "N", "yes", "Yes", "YES", "no", "No", "NO",
                                                             "on", "On", "ON", "off", "Off", "OFF", "true", "True",
                                                             "TRUE", "false", "False", "FALSE"};
  return std::find(words.begin(), words.end(), key) != words.end() || key.empty() ||
         key.find_first_of(":#{}[],&*!|>'\"%@`") != std::string_view::npos;
}

inline std::string yaml_scalar(const ConfigNode& node) {
  if (node.is_null()) return "null";
  if (node.kind == ConfigNode::Kind::scalar) {
    if (!node.quoted && !node.text.empty()) return node.text;
    std::string out = "'";
    for (const char ch : node.text) out += ch == '\'' ? std::string("''") : std::string(1, ch);
    return out + "'";
  }
  if (node.kind == ConfigNode::Kind::list && node.items.empty()) return "[]";
  return "{}";
}

inline void write_yaml(const ConfigNode& node, int indent, std::string& out) {
  const std::string pad(static_cast<std::size_t>(indent), ' ');
  if (node.is_map()) {
    for (const auto& [key, value] : node.entries) {
      out += pad + (needs_quoted_key(key) ? "'" + key + "'" : key) + ":";
      if ((value.is_map() && !value.entries.empty()) || (value.kind == ConfigNode::Kind::list && !value.items.empty())) {
        out += "\n";
        write_yaml(value, indent + 2, out);
      } else {
        out += " " + yaml_scalar(value) + "\n";
      }
    }
  } else if (node.kind == ConfigNode::Kind::list) {
    for (const auto& item : node.items) {
      if ((item.is_map() && !item.entries.empty()) || (item.kind == ConfigNode::Kind::list && !item.items.empty())) {
        out += pad + "-\n";
        write_yaml(item, indent + 2, out);
      } else {
        out += pad + "- " + yaml_scalar(item) + "\n";
      }
    }
  }
}

}  // namespace detail

/// A configuration tree as a block YAML document (loadable again with --config).
inline std::string to_yaml(const detail::ConfigNode& tree) {
  std::string out;
  detail::write_yaml(tree, 0, out);
  return out;
}

/// verl's defaults with `overrides` applied.
inline PPOConfig load_ppo_config(std::span<const std::string> overrides, detail::ConfigNode* resolved = nullptr) {
  return detail::load_ppo_config_layered([&](detail::ConfigNode& tree) { apply_overrides(tree, overrides); }, resolved);
}

inline PPOConfig load_ppo_config(std::initializer_list<std::string> overrides = {}) {
  return load_ppo_config(std::span<const std::string>(overrides.begin(), overrides.size()));
}

/// A command line as verl's main_ppo takes it: an optional YAML file (Hydra's --config-path and
/// --config-name, or --config FILE) and key=value overrides.
struct ConfigArguments {
  std::optional<std::filesystem::path> config_file;
  std::vector<std::string> overrides;
  bool help = false;  ///< -h / --help was given
  /// Hydra's `--cfg job`: print the resolved configuration as YAML and exit (`--resolve`, which
  /// Hydra needs for resolving, is accepted; the printout is always resolved).
  bool print_config = false;
  /// `--plan FILE`: the placement `verl_plan --emit-keys FILE` chose, as key=value lines; they come
  /// before the command line's overrides, which win.
  std::optional<std::filesystem::path> plan_file;
};

/// The key=value lines of a plan file (`verl_plan --emit-keys`): blank lines and lines starting
/// with '#' are skipped; anything else without '=' is an error naming the file and line.
inline std::vector<std::string> read_plan_overrides(const std::filesystem::path& file) {
  VERL_CHECK_ARG(std::filesystem::is_regular_file(file), "--plan: expected a file of key=value lines (verl_plan --emit-keys), got "
                 "'{}' ({})", file.string(), std::filesystem::exists(file) ? "not a regular file" : "does not exist");
  std::ifstream in(file);
  VERL_CHECK_ARG(in.good(), "--plan: cannot read '{}'", file.string());
  std::vector<std::string> out;
  std::string line;
  for (std::size_t number = 1; std::getline(in, line); ++number) {
    const auto first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos || line[first] == '#') continue;
    const auto last = line.find_last_not_of(" \t\r");
    std::string entry = line.substr(first, last - first + 1);
    const auto equals = entry.find('=');
    VERL_CHECK_ARG(equals != std::string::npos && equals > 0,
                   "--plan: {}:{}: expected a key=value line (verl_plan --emit-keys writes them), got '{}'", file.string(),
                   number, entry);
    out.push_back(std::move(entry));
  }
  return out;
}

/// Parses `args` (without the program name). --config-name without an extension means
/// <name>.yaml, as Hydra resolves it; anything that is neither an option nor key=value is an
/// error naming it.
inline ConfigArguments parse_config_arguments(std::span<const std::string_view> args) {
  ConfigArguments out;
  std::optional<std::string> config_path, config_name;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string_view arg = args[i];
    auto option_value = [&](std::string_view option) -> std::optional<std::string> {
      if (arg == option) {
        VERL_CHECK_ARG(i + 1 < args.size(), "{}: expected a value after it", option);
        return std::string(args[++i]);
      }
      if (arg.starts_with(option) && arg.size() > option.size() && arg[option.size()] == '=') {
        return std::string(arg.substr(option.size() + 1));
      }
      return std::nullopt;
    };
    if (arg == "-h" || arg == "--help") {
      out.help = true;
    } else if (arg == "--resolve") {
      // Hydra resolves the --cfg printout only with it; verl-cpp always does.
    } else if (auto value = option_value("--cfg")) {
      VERL_CHECK_ARG(*value == "job",
                     "--cfg: expected 'job' (print the resolved configuration and exit); Hydra's '{}' has no meaning "
                     "for verl-cpp",
                     *value);
      out.print_config = true;
    } else if (auto value = option_value("--config-path")) {
      config_path = *value;
    } else if (auto value = option_value("--config-name")) {
      config_name = *value;
    } else if (auto value = option_value("--config")) {
      out.config_file = *value;
    } else if (auto value = option_value("-c")) {
      out.config_file = *value;
    } else if (auto value = option_value("--plan")) {
      VERL_CHECK_ARG(!out.plan_file, "--plan: given twice ('{}' and '{}'); give one plan file", out.plan_file->string(), *value);
      out.plan_file = *value;
    } else if (!arg.starts_with('-') && arg.find('=') != std::string_view::npos) {
      out.overrides.emplace_back(arg);
    } else {
      ::verl::detail::throw_invalid_argument(
          "argument '{}': expected key=value overrides (e.g. algorithm.adv_estimator=grpo), --config FILE, or "
          "--config-path DIR --config-name NAME",
          arg);
    }
  }
  if (config_name) {
    VERL_CHECK_ARG(!out.config_file, "--config-name: give either --config or --config-path/--config-name, not both");
    std::filesystem::path file = *config_name;
    if (!file.has_extension()) file += ".yaml";
    out.config_file = config_path ? std::filesystem::path(*config_path) / file : file;
  } else {
    VERL_CHECK_ARG(!config_path, "--config-path: expected --config-name too (the YAML file's name in that folder)");
  }
  if (out.plan_file) {
    std::vector<std::string> overrides = read_plan_overrides(*out.plan_file);
    overrides.insert(overrides.end(), out.overrides.begin(), out.overrides.end());
    out.overrides = std::move(overrides);
  }
  return out;
}

inline ConfigArguments parse_config_arguments(int argc, const char* const* argv) {
  std::vector<std::string_view> args;
  for (int i = 1; i < argc; ++i) args.emplace_back(argv[i]);
  return parse_config_arguments(args);
}

/// Every supported key with its value in the override grammar ("data.train_batch_size", "64").
inline std::vector<std::pair<std::string, std::string>> flatten(const PPOConfig& config) {
  std::vector<std::pair<std::string, std::string>> out;
  visit_fields(config, [&](std::string_view path, const auto& field) { out.emplace_back(path, detail::write(field)); });
  return out;
}

/// The configuration as `key=value` overrides that reproduce it.
inline std::vector<std::string> to_overrides(const PPOConfig& config) {
  std::vector<std::string> out;
  for (const auto& [key, value] : flatten(config)) out.push_back(key + "=" + value);
  return out;
}

/// The configuration as a nested YAML document (supported keys only), loadable again.
inline std::string to_yaml(const PPOConfig& config) {
  std::string out;
  std::vector<std::string> open;  // the sections currently open
  for (const auto& [key, value] : flatten(config)) {
    const auto parts = detail::split_path(key);
    std::size_t common = 0;
    while (common < open.size() && common + 1 < parts.size() && open[common] == parts[common]) ++common;
    open.resize(common);
    for (std::size_t depth = common; depth + 1 < parts.size(); ++depth) {
      out += std::string(2 * depth, ' ') + parts[depth] + ":\n";
      open.push_back(parts[depth]);
    }
    // YAML single quotes escape a quote by doubling it; the override grammar uses backslashes.
    std::string yaml_value = value;
    if (yaml_value.size() >= 2 && yaml_value.front() == '\'' && yaml_value.back() == '\'' ) {
      const detail::ConfigNode parsed = detail::parse_value(value, "dump");
      std::string escaped;
      for (const char ch : parsed.text) escaped += ch == '\'' ? std::string("''") : std::string(1, ch);
      yaml_value = "'" + escaped + "'";
    }
    const std::string leaf = parts.back() == "n" ? "'n'" : parts.back();  // YAML 1.1 reads a bare n as false
    out += std::string(2 * (parts.size() - 1), ' ') + leaf + ": " + yaml_value + "\n";
  }
  return out;
}

namespace detail {
/// Why tensor-parallel size `size` (the key `key`) does not fit `model`, or nothing when it does:
/// it must divide the attention heads and the intermediate size, divide or be a multiple of the
/// KV heads, and not exceed the vocabulary.
inline std::optional<std::string> tensor_parallel_misfit(std::string_view key, std::int64_t size,
                                                         const model::HfModelConfig& model) {
  const std::int64_t heads = model.num_attention_heads, kv = model.num_key_value_heads;
  if (size >= 1 && heads % size == 0 && (kv % size == 0 || size % kv == 0) && model.intermediate_size % size == 0 &&
      model.vocab_size >= size) {
    return std::nullopt;
  }
  return fmt::format(
      "{}: expected a divisor of the model's num_attention_heads = {} and intermediate_size = {}, a divisor or a "
      "multiple of num_key_value_heads = {}, at most vocab_size = {}; got {}",
      key, heads, model.intermediate_size, kv, model.vocab_size, size);
}
}  // namespace detail

/// The actor's training and generation TP sizes against its model (known once config.json is
/// read): each must fit it (detail::tensor_parallel_misfit). Throws verl::InvalidArgument naming
/// each key that does not fit, with the model's numbers. (With strategy=fsdp nothing is split: no check.)
inline void check_tensor_parallel_fits(const PPOConfig& c, const model::HfModelConfig& model) {
  if (c.actor_rollout_ref.actor.strategy != "megatron") return;
  std::vector<std::string> problems;
  for (const auto& [key, size] : {std::pair<std::string_view, std::int64_t>{"actor_rollout_ref.actor.megatron.tensor_model_parallel_size",
                                                                            c.actor_rollout_ref.actor.megatron.tensor_model_parallel_size},
                                  {"actor_rollout_ref.rollout.tensor_model_parallel_size",
                                   c.actor_rollout_ref.rollout.tensor_model_parallel_size}}) {
    if (auto problem = detail::tensor_parallel_misfit(key, size, model)) problems.push_back(std::move(*problem));
  }
  if (!problems.empty()) ::verl::detail::throw_invalid_argument("{}", fmt::join(problems, "\n"));
}

/// The critic's TP size (critic.megatron.tensor_model_parallel_size) against its value model, as
/// check_tensor_parallel_fits (with critic.strategy=fsdp nothing is split: no check).
inline void check_critic_tensor_parallel_fits(const PPOConfig& c, const model::HfModelConfig& model) {
  if (c.critic.strategy != "megatron") return;
  if (auto problem = detail::tensor_parallel_misfit("critic.megatron.tensor_model_parallel_size",
                                                    c.critic.megatron.tensor_model_parallel_size, model)) {
    ::verl::detail::throw_invalid_argument("{} (critic.model.path = '{}')", *problem, c.critic.model.path);
  }
}

}  // namespace verl::trainer
