// Hugging Face checkpoints of the reference transformer: a folder with config.json and
// model.safetensors (or shards with model.safetensors.index.json), loaded into a Transformer,
// TransformerCritic or TransformerRewardModel and saved back in the same layout.
//
// Loading is strict: every parameter the config implies must be present with its shape and a
// floating dtype (F32, BF16, F16, F64; converted to the model's scalar), and a tensor the model
// has no place for is an error, so that a checkpoint that does not match its config fails
// loudly, naming the tensor and the file. Tolerated extras: rotary `inv_freq` buffers of old
// checkpoints, `lm_head.weight` of a model with tied embeddings (transformers ties it to the
// embedding) and, for a critic made from a policy checkpoint, the policy's `lm_head.weight`.
#pragma once

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <filesystem>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "verl/core/error.hpp"
#include "verl/core/finite.hpp"
#include "verl/model/hf_config.hpp"
#include "verl/model/safetensors.hpp"
#include "verl/model/transformer/critic.hpp"
#include "verl/model/transformer/reward_model.hpp"
#include "verl/model/transformer/transformer.hpp"

namespace verl::model {

namespace detail {

inline bool is_ignorable_buffer(std::string_view name) { return name.ends_with(".rotary_emb.inv_freq"); }

/// Copies every parameter of `model` from `checkpoint`; `tolerated` names extras to skip.
template <class Model>
void load_parameters(Model& model, const SafetensorsCheckpoint& checkpoint, const std::set<std::string>& tolerated,
                     const std::filesystem::path& origin) {
  std::set<std::string, std::less<>> loaded;
  model.for_each_parameter([&](const auto& p) {
    VERL_CHECK_ARG(checkpoint.contains(p.name), "checkpoint '{}': missing tensor '{}' (expected shape {})",
                   origin.string(), p.name, shape_string(p.shape));
    const TensorView tensor = checkpoint.tensor(p.name);
    VERL_CHECK_ARG(is_floating(tensor.dtype),
                   "tensor '{}' in '{}': expected a floating dtype (F32, BF16, F16, F64), got {}", p.name,
                   checkpoint.file_of(p.name).string(), dtype_name(tensor.dtype));
    tensor.require_shape(p.shape);
    using Scalar = std::remove_cvref_t<decltype(p.value[0])>;
    if constexpr (std::same_as<Scalar, float>) {
      tensor.copy_to_f32(p.value);
    } else {
      std::vector<float> values(p.value.size());
      tensor.copy_to_f32(values);
      std::ranges::transform(values, p.value.begin(), [](float v) { return static_cast<Scalar>(v); });
    }
    if (const auto bad = first_non_finite(std::span<const Scalar>(p.value.data(), p.value.size())))
      ::verl::detail::throw_invalid_argument("tensor '{}' in '{}': expected finite weights, got {} at index {}", p.name,
                                             checkpoint.file_of(p.name).string(), p.value[*bad], *bad);
    loaded.emplace(p.name);
  });
  for (const auto& name : checkpoint.names()) {
    if (loaded.contains(name) || tolerated.contains(name) || is_ignorable_buffer(name)) continue;
    const TensorView tensor = checkpoint.tensor(name);
    ::verl::detail::throw_invalid_argument(
        "checkpoint '{}': unexpected tensor '{}' (shape {}, in '{}'): the config ({}, {} layers) has no such "
        "parameter",
        origin.string(), name, shape_string(tensor.shape), checkpoint.file_of(name).string(),
        model.config().model_type, model.config().num_hidden_layers);
  }
}

/// A critic seen without its value head (to load a policy checkpoint's body into it).
template <class Critic>
struct CriticBodyView {
  Critic& critic;
  [[nodiscard]] const HfModelConfig& config() const { return critic.config(); }
  template <class Fn>
  void for_each_parameter(Fn&& fn) {
    critic.for_each_parameter([&](const auto& p) {
      if (!p.name.starts_with("score.")) fn(p);
    });
  }
};

/// Reads `folder`/config.json with messages naming the folder.
inline HfModelConfig read_model_config(const std::filesystem::path& folder) {
  VERL_CHECK_ARG(std::filesystem::is_directory(folder), "model: expected a Hugging Face model folder, got '{}' ({})",
                 folder.string(), std::filesystem::exists(folder) ? "not a folder" : "does not exist");
  return HfModelConfig::from_file(folder / "config.json");
}

struct KeepConfigJson {
  void operator()(nlohmann::json&) const {}
};

/// The architectures a reward-model folder may name (transformers' classes of the families the
/// reference transformer implements).
inline constexpr std::array<std::string_view, 4> reward_model_architectures = {
    "LlamaForSequenceClassification", "Qwen2ForSequenceClassification", "Qwen3ForSequenceClassification",
    "MistralForSequenceClassification"};

/// Reads a reward model's config.json: a *ForSequenceClassification of a supported family with
/// one label. transformers stores the label count as id2label (num_labels is derived from it; an
/// explicit num_labels key is honoured too); with neither, verl's forced num_labels = 1 applies and
/// the shape of score.weight decides.
inline HfModelConfig read_reward_model_config(const std::filesystem::path& folder) {
  VERL_CHECK_ARG(std::filesystem::is_directory(folder),
                 "reward model: expected a Hugging Face model folder, got '{}' ({})", folder.string(),
                 std::filesystem::exists(folder) ? "not a folder" : "does not exist");
  const auto file = folder / "config.json";
  const std::string source = file.string();
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(io::read_text_file(file));
  } catch (const nlohmann::json::exception& error) {
    ::verl::detail::throw_invalid_argument("{}: not valid JSON ({})", source, error.what());
  }
  VERL_CHECK_ARG(json.is_object(), "{}: expected a JSON object, got {}", source, json.type_name());
  const ConfigReader reader(json, source);
  const std::vector<std::string> architectures = reader.string_list("architectures");
  const auto supported = std::ranges::find_first_of(architectures, reward_model_architectures);
  VERL_CHECK_ARG(architectures.size() == 1 && supported != architectures.end(),
                 "{}: key 'architectures': expected one of [{}] (a reward model is a sequence classifier), got "
                 "[{}]",
                 source, fmt::join(reward_model_architectures, ", "), fmt::join(architectures, ", "));
  if (reader.has("num_labels")) {
    const std::int64_t labels = reader.int_or("num_labels", 0);
    VERL_CHECK_ARG(labels == 1, "{}: key 'num_labels': expected 1 (a reward model has one score), got {}", source,
                   labels);
  }
  if (const nlohmann::json* id2label = reader.object_or_null("id2label")) {
    VERL_CHECK_ARG(id2label->size() == 1, "{}: key 'id2label': expected one label (a reward model has one score), "
                   "got {} ({})", source, id2label->size(), id2label->dump());
  }
  HfModelConfig config = HfModelConfig::from_json(json, source);
  const std::string expected = sequence_classification_architecture(config.family);
  VERL_CHECK_ARG(*supported == expected, "{}: key 'architectures': expected [{}] for model_type '{}', got [{}]",
                 source, expected, config.model_type, *supported);
  return config;
}

/// A safetensors writer holding every parameter `model` visits, in `dtype` (torch's "pt" format).
template <class Model>
SafetensorsWriter parameters_writer(const Model& model, DType dtype) {
  VERL_CHECK_ARG(is_floating(dtype), "dtype: expected F32, BF16, F16 or F64, got {}", dtype_name(dtype));
  SafetensorsWriter writer;
  writer.set_metadata("format", "pt");
  model.for_each_parameter([&](const auto& p) {
    std::vector<float> values(p.value.begin(), p.value.end());
    writer.add_f32(std::string(p.name), std::vector<std::int64_t>(p.shape.begin(), p.shape.end()), values, dtype);
  });
  return writer;
}

template <class Model, class EditConfig = KeepConfigJson>
void save_model(const Model& model, const std::filesystem::path& folder, DType dtype, std::uint64_t max_shard_bytes,
                const EditConfig& edit_config = {}) {
  SafetensorsWriter writer = parameters_writer(model, dtype);
  std::filesystem::create_directories(folder);
  // Remove stale weights of another layout (single file vs shards) so the folder is unambiguous.
  for (const auto& entry : std::filesystem::directory_iterator(folder)) {
    const auto name = entry.path().filename().string();
    if (name == "model.safetensors.index.json" || (name.starts_with("model") && name.ends_with(".safetensors"))) {
      std::filesystem::remove(entry.path());
    }
  }
  writer.write_sharded(folder, max_shard_bytes);
  HfModelConfig config = model.config();
  config.torch_dtype = dtype == DType::BF16 ? "bfloat16" : dtype == DType::F16 ? "float16"
                                           : dtype == DType::F64 ? "float64"
                                                                 : "float32";
  nlohmann::json json = config.to_json();
  edit_config(json);
  io::write_file_atomically(folder / "config.json", json.dump(2) + "\n");
}

}  // namespace detail

/// How save_transformer writes weights.
struct SaveOptions {
  DType dtype = DType::F32;
  /// Shard when the weights exceed this (transformers' default max_shard_size is 5 GB).
  std::uint64_t max_shard_bytes = 5'000'000'000ull;
};

/// A policy model from a Hugging Face folder (config.json + model.safetensors or shards).
template <class Scalar = float>
BasicTransformer<Scalar> load_transformer(const std::filesystem::path& folder, const TransformerOptions& options = {}) {
  BasicTransformer<Scalar> model(detail::read_model_config(folder), options);
  const SafetensorsCheckpoint checkpoint(folder);
  std::set<std::string> tolerated;
  if (model.config().tie_word_embeddings) tolerated.insert("lm_head.weight");
  detail::load_parameters(model, checkpoint, tolerated, folder);
  return model;
}

/// A critic from a Hugging Face folder: a critic checkpoint (with score.weight / score.bias), or
/// a policy checkpoint whose body it takes, drawing the value head from `head_init` (verl
/// initializes its critic from the actor's weights this way).
template <class Scalar = float>
BasicTransformerCritic<Scalar> load_critic(const std::filesystem::path& folder, const WeightInit& head_init = {},
                                           const TransformerOptions& options = {}) {
  BasicTransformerCritic<Scalar> model(detail::read_model_config(folder), options);
  const SafetensorsCheckpoint checkpoint(folder);
  const bool has_head = checkpoint.contains("score.weight") || checkpoint.contains("score.bias");
  if (!has_head) {
    model.init_value_head(head_init);
    detail::CriticBodyView<BasicTransformerCritic<Scalar>> body{model};
    detail::load_parameters(body, checkpoint, {"lm_head.weight"}, folder);
    return model;
  }
  detail::load_parameters(model, checkpoint, {}, folder);
  return model;
}

/// Writes config.json and the weights (model.safetensors, or shards plus an index).
template <class Scalar>
void save_transformer(const BasicTransformer<Scalar>& model, const std::filesystem::path& folder,
                      const SaveOptions& options = {}) {
  detail::save_model(model, folder, options.dtype, options.max_shard_bytes);
}

/// A reward model from a Hugging Face *ForSequenceClassification folder with one label (see
/// detail::read_reward_model_config). Strict as load_transformer: the body's tensors and
/// score.weight (1, hidden_size), nothing else.
template <class Scalar = float>
BasicTransformerRewardModel<Scalar> load_reward_model(const std::filesystem::path& folder,
                                                      const TransformerOptions& options = {}) {
  BasicTransformerRewardModel<Scalar> model(detail::read_reward_model_config(folder), options);
  const SafetensorsCheckpoint checkpoint(folder);
  detail::load_parameters(model, checkpoint, {}, folder);
  return model;
}

/// Writes config.json (with transformers' one-label id2label / label2id, so that transformers
/// reloads it with num_labels = 1) and the weights.
template <class Scalar>
void save_reward_model(const BasicTransformerRewardModel<Scalar>& model, const std::filesystem::path& folder,
                       const SaveOptions& options = {}) {
  detail::save_model(model, folder, options.dtype, options.max_shard_bytes, [](nlohmann::json& json) {
    json["id2label"] = {{"0", "LABEL_0"}};
    json["label2id"] = {{"LABEL_0", 0}};
  });
}

template <class Scalar>
void save_critic(const BasicTransformerCritic<Scalar>& model, const std::filesystem::path& folder,
                 const SaveOptions& options = {}) {
  detail::save_model(model, folder, options.dtype, options.max_shard_bytes);
}

}  // namespace verl::model
