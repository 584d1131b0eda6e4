// LoRA adapters on disk, in PEFT's layout, so that `PeftModel.from_pretrained(base, folder)` loads
// what verl-cpp trained (and the reverse):
//   adapter_model.safetensors  lora_A / lora_B of each adapted module, named
//                              base_model.model.model.layers.N.self_attn.q_proj.lora_A.weight
//   adapter_config.json        peft_type LORA, task_type CAUSAL_LM, r, lora_alpha, target_modules,
//                              exclude_modules, base_model_name_or_path, ...
// and the merged model (W + alpha / r * B A) as an ordinary Hugging Face folder.
//
// Loading refuses the PEFT options this implementation does not compute (DoRA, rsLoRA, biases,
// per-module rank or alpha patterns, modules_to_save, fan_in_fan_out), naming the field.
#pragma once

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "verl/core/error.hpp"
#include "verl/core/file_io.hpp"
#include "verl/model/checkpoint.hpp"
#include "verl/model/safetensors.hpp"
#include "verl/model/transformer/lora.hpp"

namespace verl::model {

/// The module names an adapter covers, as PEFT lists them in adapter_config.json's target_modules
/// (short names, sorted; exclusions of single paths stay in exclude_modules).
template <class Base>
std::vector<std::string> lora_target_names(const LoraModel<Base>& model) {
  std::set<std::string> names;
  for (const auto& adapter : model.adapters().adapters()) names.emplace(name_of(adapter.module));
  return {names.begin(), names.end()};
}

/// adapter_config.json of a model's adapter.
template <class Base>
nlohmann::ordered_json lora_adapter_config(const LoraModel<Base>& model, const std::string& base_model_name_or_path) {
  const LoraOptions& options = model.options();
  nlohmann::ordered_json config;
  config["peft_type"] = "LORA";
  config["task_type"] = "CAUSAL_LM";
  config["base_model_name_or_path"] = base_model_name_or_path;
  config["r"] = options.rank;
  config["lora_alpha"] = options.alpha;
  config["lora_dropout"] = 0.0;
  config["target_modules"] = lora_target_names(model);
  config["exclude_modules"] = options.exclude_modules.empty() ? nlohmann::ordered_json(nullptr)
                                                              : nlohmann::ordered_json(options.exclude_modules);
  config["bias"] = "none";
  config["fan_in_fan_out"] = false;
  config["use_rslora"] = false;
  config["use_dora"] = false;
  config["modules_to_save"] = nullptr;
  config["init_lora_weights"] = true;
  config["inference_mode"] = true;
  config["layers_to_transform"] = nullptr;
  config["layers_pattern"] = nullptr;
  config["rank_pattern"] = nlohmann::ordered_json::object();
  config["alpha_pattern"] = nlohmann::ordered_json::object();
  config["revision"] = nullptr;
  return config;
}

/// Writes adapter_model.safetensors and adapter_config.json into `folder`.
template <class Base>
void save_lora_adapter(const LoraModel<Base>& model, const std::filesystem::path& folder,
                       const std::string& base_model_name_or_path, DType dtype = DType::F32) {
  SafetensorsWriter writer = detail::parameters_writer(model, dtype);
  std::filesystem::create_directories(folder);
  writer.write(folder / "adapter_model.safetensors");
  io::write_file_atomically(folder / "adapter_config.json",
                            lora_adapter_config(model, base_model_name_or_path).dump(2) + "\n");
}

/// The merged model (adapters folded into the base weights) as a Hugging Face folder.
template <class Scalar>
void save_lora_merged(const LoraModel<BasicTransformer<Scalar>>& model, const std::filesystem::path& folder,
                      const SaveOptions& options = {}) {
  save_transformer(model.merged(), folder, options);
}

/// LoRA options from a PEFT adapter_config.json; `origin` names the file in errors.
inline LoraOptions lora_options_from_adapter_config(const nlohmann::json& config, const std::string& origin) {
  auto fail = [&](std::string_view field, std::string_view expected, const nlohmann::json& got) {
    ::verl::detail::throw_invalid_argument("{}: field '{}': expected {}, got {}", origin, field, expected, got.dump());
  };
  auto field = [&](const char* name) { return config.contains(name) ? config.at(name) : nlohmann::json(nullptr); };
  if (field("peft_type") != "LORA") fail("peft_type", "\"LORA\"", field("peft_type"));
  const auto rank = field("r");
  if (!rank.is_number_integer() || rank.get<std::int64_t>() <= 0) fail("r", "an integer > 0", rank);
  const auto alpha = field("lora_alpha");
  if (!alpha.is_number() || !(alpha.get<double>() > 0) || !std::isfinite(alpha.get<double>()))
    fail("lora_alpha", "a finite number > 0", alpha);
  for (const char* flag : {"use_dora", "use_rslora", "fan_in_fan_out"}) {
    if (!field(flag).is_null() && field(flag) != false) fail(flag, "false (not implemented here)", field(flag));
  }
  if (!field("bias").is_null() && field("bias") != "none") fail("bias", "\"none\" (not implemented here)", field("bias"));
  for (const char* pattern : {"rank_pattern", "alpha_pattern"}) {
    if (!field(pattern).is_null() && !field(pattern).empty()) fail(pattern, "{} (not implemented here)", field(pattern));
  }
  for (const char* none : {"modules_to_save", "layers_to_transform"}) {
    if (!field(none).is_null()) fail(none, "null (not implemented here)", field(none));
  }
  LoraOptions options;
  options.rank = rank.get<std::int64_t>();
  options.alpha = alpha.get<double>();
  auto names = [&](const char* name) {
    const auto value = field(name);
    std::vector<std::string> out;
    if (value.is_string()) {
      out.push_back(value.get<std::string>());
    } else if (value.is_array()) {
      for (const auto& item : value) {
        if (!item.is_string()) fail(name, "a list of module names", value);
        out.push_back(item.get<std::string>());
      }
    } else if (!value.is_null()) {
      fail(name, "a module name or a list of them", value);
    }
    return out;
  };
  options.target_modules = names("target_modules");
  if (options.target_modules.empty()) fail("target_modules", "'all-linear' or a list of module names", field("target_modules"));
  options.exclude_modules = names("exclude_modules");
  return options;
}

/// A base model with the adapter of a PEFT folder (adapter_config.json + adapter_model.safetensors).
template <class Scalar>
LoraModel<BasicTransformer<Scalar>> load_lora_adapter(BasicTransformer<Scalar> base, const std::filesystem::path& folder) {
  const auto config_path = folder / "adapter_config.json";
  VERL_CHECK_ARG(std::filesystem::is_regular_file(config_path),
                 "LoRA adapter: expected a PEFT adapter folder with adapter_config.json, got '{}'", folder.string());
  const nlohmann::json config = nlohmann::json::parse(io::read_text_file(config_path), nullptr, false);
  VERL_CHECK_ARG(!config.is_discarded() && config.is_object(), "{}: expected a JSON object", config_path.string());
  LoraModel<BasicTransformer<Scalar>> model(std::move(base), lora_options_from_adapter_config(config, config_path.string()),
                                            config_path.string() + ": ");
  const SafetensorsFile file(folder / "adapter_model.safetensors");
  StateDict dict;
  for (const auto& name : file.names()) {
    const TensorView tensor = file.tensor(name);
    VERL_CHECK_ARG(is_floating(tensor.dtype), "tensor '{}' in '{}': expected a floating dtype, got {}", name,
                   file.path().string(), dtype_name(tensor.dtype));
    dict[name] = StateTensor{{tensor.shape.begin(), tensor.shape.end()}, tensor.to_f32()};
  }
  model.load_state_dict(dict);
  return model;
}

}  // namespace verl::model
