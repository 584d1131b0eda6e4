// A Hugging Face `config.json` for the Llama / Mistral / Qwen2 / Qwen3 decoder family, parsed into
// a struct.
//
// The shape-defining keys (hidden_size, intermediate_size, num_hidden_layers,
// num_attention_heads, vocab_size) are required; every other key falls back to the default of the
// architecture's transformers config class (LlamaConfig / MistralConfig / Qwen2Config / Qwen3Config), so a config that loads
// in transformers loads here with the same values. A missing or ill-typed key is a
// verl::InvalidArgument naming the file and the key.
#pragma once

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "verl/core/error.hpp"
#include "verl/core/file_io.hpp"

namespace verl::model {

/// The decoder families the reference model implements.
/// Qwen3 is Qwen2 with per-head RMSNorms on the queries and keys (before the rotary embedding) and
/// Llama's attention_bias switch instead of Qwen2's fixed q/k/v biases. Mistral is Llama without
/// biases whose every layer attends through a sliding window (unless sliding_window is null).
enum class ModelFamily { llama, qwen2, qwen3, mistral };

constexpr std::string_view to_string(ModelFamily family) {
  switch (family) {
    case ModelFamily::llama: return "llama";
    case ModelFamily::qwen2: return "qwen2";
    case ModelFamily::qwen3: return "qwen3";
    case ModelFamily::mistral: return "mistral";
  }
  return "unknown";
}

/// `rope_scaling` (Llama-3.1 "llama3", "linear", "dynamic", "yarn", ...); which fields matter
/// depends on the type, absent ones keep transformers' defaults.
struct RopeScaling {
  std::string rope_type;  ///< "rope_type" (or the legacy "type")
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  std::optional<std::int64_t> original_max_position_embeddings;
  // YaRN only (absent: derived as transformers derives them).
  std::optional<double> attention_factor;  ///< scale of cos and sin
  std::optional<double> beta_fast, beta_slow;  ///< rotation counts bounding the ramp (32, 1)
  std::optional<double> mscale, mscale_all_dim;  ///< DeepSeek-style attention_factor terms
  bool truncate = true;  ///< round the ramp's bounds outwards
  friend bool operator==(const RopeScaling&, const RopeScaling&) = default;
};

struct HfModelConfig {
  ModelFamily family = ModelFamily::llama;
  std::string model_type;                  ///< "llama", "mistral", "qwen2" or "qwen3"
  std::vector<std::string> architectures;  ///< e.g. {"Qwen2ForCausalLM"}
  std::int64_t hidden_size = 0;
  std::int64_t intermediate_size = 0;
  std::int64_t num_hidden_layers = 0;
  std::int64_t num_attention_heads = 0;
  std::int64_t num_key_value_heads = 0;  ///< defaults to num_attention_heads (no GQA)
  std::int64_t head_dim = 0;             ///< defaults to hidden_size / num_attention_heads
  std::int64_t vocab_size = 0;
  std::int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  std::optional<RopeScaling> rope_scaling;
  std::string hidden_act = "silu";
  bool tie_word_embeddings = false;
  bool qkv_bias = false;    ///< q/k/v projections have biases (always for Qwen2; attention_bias for Llama)
  bool o_proj_bias = false; ///< o_proj has a bias (Llama's attention_bias; never for Qwen2)
  bool mlp_bias = false;    ///< Llama's mlp_bias
  bool qk_norm = false;     ///< per-head RMSNorm of q and k before RoPE (Qwen3's q_norm / k_norm)
  bool use_sliding_window = false;  ///< Qwen2 / Qwen3: some layer attends through a sliding window
  std::int64_t sliding_window = 0;  ///< with use_sliding_window: the keys a query sees (itself included)
  std::vector<bool> sliding_layers; ///< with use_sliding_window: which layers slide (one per layer)
  std::vector<std::int64_t> bos_token_ids;  ///< bos_token_id: int, list or null
  std::vector<std::int64_t> eos_token_ids;  ///< eos_token_id: int, list or null
  std::optional<std::int64_t> pad_token_id;
  std::optional<std::string> torch_dtype;  ///< "torch_dtype" (or "dtype" in newer files)

  [[nodiscard]] std::optional<std::int64_t> bos_token_id() const {
    return bos_token_ids.empty() ? std::nullopt : std::optional(bos_token_ids.front());
  }
  [[nodiscard]] std::int64_t num_key_value_groups() const { return num_attention_heads / num_key_value_heads; }
  /// The keys a query of `layer` may see, itself included (0: every earlier key).
  [[nodiscard]] std::int64_t attention_window(std::int64_t layer) const {
    return use_sliding_window && sliding_layers.at(static_cast<std::size_t>(layer)) ? sliding_window : 0;
  }

  /// Parses a config object; `source` names it in error messages.
  static HfModelConfig from_json(const nlohmann::json& json, std::string_view source = "config.json");
  /// Reads `path` (a config.json, or a model folder containing one).
  static HfModelConfig from_file(const std::filesystem::path& path);
  /// The config as transformers writes it (round-trips through from_json).
  [[nodiscard]] nlohmann::json to_json() const;

  friend bool operator==(const HfModelConfig&, const HfModelConfig&) = default;
};

namespace detail {

/// Typed access to config keys with messages that name the file and the key.
class ConfigReader {
 public:
  ConfigReader(const nlohmann::json& json, std::string_view source) : json_(json), source_(source) {}

  /// Present and not null.
  [[nodiscard]] bool has(std::string_view key) const {
    const auto found = json_.find(key);
    return found != json_.end() && !found->is_null();
  }
  /// Present, possibly null (an explicit null overrides a default).
  [[nodiscard]] bool present(std::string_view key) const { return json_.find(key) != json_.end(); }

  [[nodiscard]] std::int64_t required_int(std::string_view key) const {
    VERL_CHECK_ARG(has(key), "{}: missing required key '{}'", source_, key);
    return as_int(key, json_.at(std::string(key)));
  }
  [[nodiscard]] std::int64_t int_or(std::string_view key, std::int64_t fallback) const {
    return has(key) ? as_int(key, json_.at(std::string(key))) : fallback;
  }
  [[nodiscard]] double number_or(std::string_view key, double fallback) const {
    if (!has(key)) return fallback;
    const auto& value = json_.at(std::string(key));
    VERL_CHECK_ARG(value.is_number(), "{}: key '{}': expected a number, got {} ({})", source_, key, value.type_name(),
                   value.dump());
    return value.get<double>();
  }
  [[nodiscard]] bool bool_or(std::string_view key, bool fallback) const {
    if (!has(key)) return fallback;
    const auto& value = json_.at(std::string(key));
    VERL_CHECK_ARG(value.is_boolean(), "{}: key '{}': expected true or false, got {} ({})", source_, key,
                   value.type_name(), value.dump());
    return value.get<bool>();
  }
  [[nodiscard]] std::optional<std::string> optional_string(std::string_view key) const {
    if (!has(key)) return std::nullopt;
    const auto& value = json_.at(std::string(key));
    VERL_CHECK_ARG(value.is_string(), "{}: key '{}': expected a string, got {} ({})", source_, key, value.type_name(),
                   value.dump());
    return value.get<std::string>();
  }
  /// An int, a list of ints, or null/absent (empty).
  [[nodiscard]] std::vector<std::int64_t> int_or_list(std::string_view key) const {
    if (!has(key)) return {};
    const auto& value = json_.at(std::string(key));
    if (value.is_array()) {
      std::vector<std::int64_t> out;
      for (const auto& item : value) out.push_back(as_int(key, item));
      return out;
    }
    return {as_int(key, value)};
  }
  [[nodiscard]] std::vector<std::string> string_list(std::string_view key) const {
    if (!has(key)) return {};
    const auto& value = json_.at(std::string(key));
    VERL_CHECK_ARG(value.is_array(), "{}: key '{}': expected a list of strings, got {}", source_, key, value.dump());
    std::vector<std::string> out;
    for (const auto& item : value) {
      VERL_CHECK_ARG(item.is_string(), "{}: key '{}': expected a list of strings, got {}", source_, key, value.dump());
      out.push_back(item.get<std::string>());
    }
    return out;
  }
  [[nodiscard]] const nlohmann::json* object_or_null(std::string_view key) const {
    if (!has(key)) return nullptr;
    const auto& value = json_.at(std::string(key));
    VERL_CHECK_ARG(value.is_object(), "{}: key '{}': expected an object or null, got {}", source_, key, value.dump());
    return &value;
  }

 private:
  [[nodiscard]] std::int64_t as_int(std::string_view key, const nlohmann::json& value) const {
    VERL_CHECK_ARG(value.is_number_integer(), "{}: key '{}': expected an integer, got {} ({})", source_, key,
                   value.type_name(), value.dump());
    return value.get<std::int64_t>();
  }

  const nlohmann::json& json_;
  std::string_view source_;
};

inline ModelFamily family_of(const ConfigReader& reader, std::string_view source,
                             const std::vector<std::string>& architectures) {
  if (const auto model_type = reader.optional_string("model_type")) {
    if (*model_type == "llama") return ModelFamily::llama;
    if (*model_type == "qwen2") return ModelFamily::qwen2;
    if (*model_type == "qwen3") return ModelFamily::qwen3;
    if (*model_type == "mistral") return ModelFamily::mistral;
    ::verl::detail::throw_invalid_argument("{}: model_type: expected one of llama, mistral, qwen2, qwen3, got '{}'",
                                           source, *model_type);
  }
  // Older files without model_type: the architecture class name tells the family ("Qwen2For...",
  // not "Qwen2MoeFor..." or "Qwen2VLFor...", which are other architectures).
  for (const auto& name : architectures) {
    if (name.starts_with("LlamaFor")) return ModelFamily::llama;
    if (name.starts_with("Qwen2For")) return ModelFamily::qwen2;
    if (name.starts_with("Qwen3For")) return ModelFamily::qwen3;
    if (name.starts_with("MistralFor")) return ModelFamily::mistral;
  }
  ::verl::detail::throw_invalid_argument(
      "{}: expected model_type llama, mistral, qwen2 or qwen3 (or a LlamaFor*/MistralFor*/Qwen2For*/Qwen3For* "
      "architecture), got neither (architectures: [{}])",
      source, fmt::join(architectures, ", "));
}

/// Which layers use_sliding_window = true makes slide, as Qwen2Config / Qwen3Config decide:
/// sliding_window null turns it off (empty result); a layer slides when layer_types says
/// "sliding_attention" or, without layer_types, from layer max_window_layers on (default 28).
inline std::vector<bool> sliding_layers_of(const ConfigReader& reader, std::int64_t num_layers, std::string_view source) {
  if (reader.present("sliding_window") && !reader.has("sliding_window")) return {};
  std::vector<bool> layers(static_cast<std::size_t>(num_layers), false);
  if (reader.has("layer_types")) {
    const auto types = reader.string_list("layer_types");
    VERL_CHECK_ARG(static_cast<std::int64_t>(types.size()) == num_layers,
                   "{}: key 'layer_types': expected one entry per layer ({}), got {}", source, num_layers, types.size());
    for (std::size_t l = 0; l < types.size(); ++l) layers[l] = types[l] == "sliding_attention";
  } else {
    const std::int64_t first = reader.int_or("max_window_layers", 28);
    for (std::int64_t l = std::max<std::int64_t>(first, 0); l < num_layers; ++l) layers[static_cast<std::size_t>(l)] = true;
  }
  if (std::find(layers.begin(), layers.end(), true) == layers.end()) return {};
  return layers;
}

}  // namespace detail

inline HfModelConfig HfModelConfig::from_json(const nlohmann::json& json, std::string_view source) {
  VERL_CHECK_ARG(json.is_object(), "{}: expected a JSON object, got {}", source, json.type_name());
  const detail::ConfigReader reader(json, source);
  HfModelConfig config;
  config.architectures = reader.string_list("architectures");
  config.family = detail::family_of(reader, source, config.architectures);
  config.model_type = std::string(to_string(config.family));
  const bool llama = config.family == ModelFamily::llama, mistral = config.family == ModelFamily::mistral;

  config.hidden_size = reader.required_int("hidden_size");
  config.intermediate_size = reader.required_int("intermediate_size");
  config.num_hidden_layers = reader.required_int("num_hidden_layers");
  config.num_attention_heads = reader.required_int("num_attention_heads");
  config.vocab_size = reader.required_int("vocab_size");
  for (const auto& [key, value] :
       {std::pair{"hidden_size", config.hidden_size}, std::pair{"intermediate_size", config.intermediate_size},
        std::pair{"num_hidden_layers", config.num_hidden_layers},
        std::pair{"num_attention_heads", config.num_attention_heads}, std::pair{"vocab_size", config.vocab_size}}) {
    VERL_CHECK_ARG(value > 0, "{}: key '{}': expected a positive integer, got {}", source, key, value);
  }
  // MistralConfig's default is 8 key/value heads; an explicit null means one per query head.
  config.num_key_value_heads = mistral && !reader.present("num_key_value_heads")
                                   ? 8
                                   : reader.int_or("num_key_value_heads", config.num_attention_heads);
  VERL_CHECK_ARG(config.num_key_value_heads > 0 && config.num_attention_heads % config.num_key_value_heads == 0,
                 "{}: key 'num_key_value_heads': expected a positive divisor of num_attention_heads ({}), got {}",
                 source, config.num_attention_heads, config.num_key_value_heads);
  if (reader.has("head_dim")) {
    config.head_dim = reader.int_or("head_dim", 0);
    VERL_CHECK_ARG(config.head_dim > 0, "{}: key 'head_dim': expected a positive integer, got {}", source,
                   config.head_dim);
  } else {
    VERL_CHECK_ARG(config.hidden_size % config.num_attention_heads == 0,
                   "{}: key 'hidden_size': expected a multiple of num_attention_heads ({}) when head_dim is absent, "
                   "got {}",
                   source, config.num_attention_heads, config.hidden_size);
    config.head_dim = config.hidden_size / config.num_attention_heads;
  }
  config.max_position_embeddings = reader.int_or("max_position_embeddings", llama ? 2048 : mistral ? 131072 : 32768);
  VERL_CHECK_ARG(config.max_position_embeddings > 0,
                 "{}: key 'max_position_embeddings': expected a positive integer, got {}", source,
                 config.max_position_embeddings);
  config.rms_norm_eps = reader.number_or("rms_norm_eps", 1e-6);
  VERL_CHECK_ARG(config.rms_norm_eps > 0, "{}: key 'rms_norm_eps': expected > 0, got {}", source, config.rms_norm_eps);

  // Newer transformers nest the rope settings in "rope_parameters".
  const nlohmann::json* rope_parameters = reader.object_or_null("rope_parameters");
  const nlohmann::json* rope_scaling = reader.object_or_null("rope_scaling");
  config.rope_theta = reader.number_or("rope_theta", 10000.0);
  if (rope_parameters != nullptr) {
    const detail::ConfigReader rope(*rope_parameters, source);
    config.rope_theta = rope.number_or("rope_theta", config.rope_theta);
    if (!rope_scaling && rope.optional_string("rope_type").value_or("default") != "default") {
      rope_scaling = rope_parameters;
    }
  }
  VERL_CHECK_ARG(config.rope_theta > 0, "{}: key 'rope_theta': expected > 0, got {}", source, config.rope_theta);
  if (rope_scaling != nullptr) {
    const detail::ConfigReader rope(*rope_scaling, source);
    RopeScaling scaling;
    scaling.rope_type = rope.optional_string("rope_type").value_or(rope.optional_string("type").value_or(""));
    VERL_CHECK_ARG(!scaling.rope_type.empty(), "{}: key 'rope_scaling': expected a 'rope_type' (or 'type'), got {}",
                   source, rope_scaling->dump());
    scaling.factor = rope.number_or("factor", 1.0);
    scaling.low_freq_factor = rope.number_or("low_freq_factor", 1.0);
    scaling.high_freq_factor = rope.number_or("high_freq_factor", 4.0);
    if (rope.has("original_max_position_embeddings")) {
      scaling.original_max_position_embeddings = rope.int_or("original_max_position_embeddings", 0);
    }
    for (auto [key, field] : {std::pair{"attention_factor", &scaling.attention_factor},
                              std::pair{"beta_fast", &scaling.beta_fast}, std::pair{"beta_slow", &scaling.beta_slow},
                              std::pair{"mscale", &scaling.mscale}, std::pair{"mscale_all_dim", &scaling.mscale_all_dim}}) {
      if (rope.has(key)) *field = rope.number_or(key, 0.0);
    }
    scaling.truncate = rope.bool_or("truncate", true);
    if (scaling.rope_type != "default") config.rope_scaling = scaling;
  }

  config.hidden_act = reader.optional_string("hidden_act").value_or("silu");
  config.tie_word_embeddings = reader.bool_or("tie_word_embeddings", false);
  if (llama) {
    config.qkv_bias = config.o_proj_bias = reader.bool_or("attention_bias", false);
    config.mlp_bias = reader.bool_or("mlp_bias", false);
  } else if (mistral) {
    // No biases; sliding_window (default 4096, null for none) applies to every layer.
    if (!reader.present("sliding_window") || reader.has("sliding_window")) {
      config.use_sliding_window = true;
      config.sliding_layers.assign(static_cast<std::size_t>(config.num_hidden_layers), true);
    }
  } else if (config.family == ModelFamily::qwen2) {
    // Qwen2's attention always has q/k/v biases and a bias-free o_proj.
    config.qkv_bias = true;
    config.o_proj_bias = false;
    config.use_sliding_window = reader.bool_or("use_sliding_window", false);
  } else {
    // Qwen3: attention_bias covers q, k, v and o; the MLP has none.
    config.qkv_bias = config.o_proj_bias = reader.bool_or("attention_bias", false);
    config.qk_norm = true;
    config.use_sliding_window = reader.bool_or("use_sliding_window", false);
  }
  if (config.use_sliding_window && !mistral) {
    config.sliding_layers = detail::sliding_layers_of(reader, config.num_hidden_layers, source);
    config.use_sliding_window = !config.sliding_layers.empty();
  }
  if (config.use_sliding_window) {
    config.sliding_window = reader.int_or("sliding_window", 4096);
    VERL_CHECK_ARG(config.sliding_window > 0, "{}: key 'sliding_window': expected a positive integer, got {}", source,
                   config.sliding_window);
  }
  config.bos_token_ids = reader.present("bos_token_id") ? reader.int_or_list("bos_token_id")
                                                    : (llama || mistral ? std::vector<std::int64_t>{1} : std::vector<std::int64_t>{});
  config.eos_token_ids = reader.present("eos_token_id") ? reader.int_or_list("eos_token_id")
                                                    : (llama || mistral ? std::vector<std::int64_t>{2} : std::vector<std::int64_t>{});
  if (reader.has("pad_token_id")) config.pad_token_id = reader.int_or("pad_token_id", 0);
  config.torch_dtype = reader.optional_string("torch_dtype");
  if (!config.torch_dtype) config.torch_dtype = reader.optional_string("dtype");
  return config;
}

inline HfModelConfig HfModelConfig::from_file(const std::filesystem::path& path) {
  const auto file = std::filesystem::is_directory(path) ? path / "config.json" : path;
  const std::string text = io::read_text_file(file);
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& error) {
    ::verl::detail::throw_invalid_argument("{}: not valid JSON ({})", file.string(), error.what());
  }
  return from_json(json, file.string());
}

inline nlohmann::json HfModelConfig::to_json() const {
  nlohmann::json json = {
      {"architectures", architectures},
      {"model_type", model_type},
      {"hidden_size", hidden_size},
      {"intermediate_size", intermediate_size},
      {"num_hidden_layers", num_hidden_layers},
      {"num_attention_heads", num_attention_heads},
      {"num_key_value_heads", num_key_value_heads},
      {"head_dim", head_dim},
      {"vocab_size", vocab_size},
      {"max_position_embeddings", max_position_embeddings},
      {"rms_norm_eps", rms_norm_eps},
      {"rope_theta", rope_theta},
      {"hidden_act", hidden_act},
      {"tie_word_embeddings", tie_word_embeddings},
  };
  if (family == ModelFamily::llama) {
    json["attention_bias"] = qkv_bias;
    json["mlp_bias"] = mlp_bias;
  } else if (family == ModelFamily::mistral) {
    json["sliding_window"] = use_sliding_window ? nlohmann::json(sliding_window) : nlohmann::json(nullptr);
  } else {
    if (family == ModelFamily::qwen3) json["attention_bias"] = qkv_bias;
    json["use_sliding_window"] = use_sliding_window;
    json["sliding_window"] = use_sliding_window ? nlohmann::json(sliding_window) : nlohmann::json(nullptr);
    if (use_sliding_window) {
      json["layer_types"] = nlohmann::json::array();
      for (const bool slides : sliding_layers) json["layer_types"].push_back(slides ? "sliding_attention" : "full_attention");
    }
  }
  auto ids = [](const std::vector<std::int64_t>& values) -> nlohmann::json {
    if (values.empty()) return nullptr;
    if (values.size() == 1) return values.front();
    return values;
  };
  json["bos_token_id"] = ids(bos_token_ids);
  json["eos_token_id"] = ids(eos_token_ids);
  json["pad_token_id"] = pad_token_id ? nlohmann::json(*pad_token_id) : nlohmann::json(nullptr);
  if (rope_scaling) {
    nlohmann::json scaling = {{"rope_type", rope_scaling->rope_type},
                              {"factor", rope_scaling->factor},
                              {"low_freq_factor", rope_scaling->low_freq_factor},
                              {"high_freq_factor", rope_scaling->high_freq_factor}};
    if (rope_scaling->original_max_position_embeddings) {
      scaling["original_max_position_embeddings"] = *rope_scaling->original_max_position_embeddings;
    }
    for (auto [key, field] :
         {std::pair{"attention_factor", &rope_scaling->attention_factor}, std::pair{"beta_fast", &rope_scaling->beta_fast},
          std::pair{"beta_slow", &rope_scaling->beta_slow}, std::pair{"mscale", &rope_scaling->mscale},
          std::pair{"mscale_all_dim", &rope_scaling->mscale_all_dim}}) {
      if (*field) scaling[key] = **field;
    }
    if (!rope_scaling->truncate) scaling["truncate"] = false;
    json["rope_scaling"] = scaling;
  } else {
    json["rope_scaling"] = nullptr;
  }
  if (torch_dtype) json["torch_dtype"] = *torch_dtype;
  return json;
}

}  // namespace verl::model
