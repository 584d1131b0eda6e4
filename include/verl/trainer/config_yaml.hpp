// verl's configuration from a YAML file (yaml-cpp; link verl::yaml): the file is merged over
// verl's defaults, then the dotted overrides are applied, as `python -m verl.trainer.main_ppo
// --config-path=... --config-name=... key=value ...` does. The file may be verl's full
// flattened ppo_trainer.yaml or any subset of it. Errors name the file, line and column.
#pragma once

#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <span>
#include <string>
#include <utility>

#include "verl/core/error.hpp"
#include "verl/trainer/config.hpp"

namespace verl::trainer {

namespace detail {

inline std::string yaml_origin(const std::filesystem::path& file, const YAML::Mark& mark) {
  return fmt::format("{}:{}:{}", file.string(), mark.line + 1, mark.column + 1);
}

inline ConfigNode from_yaml(const YAML::Node& node, const std::filesystem::path& file) {
  const std::string origin = yaml_origin(file, node.Mark());
  switch (node.Type()) {
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined: return ConfigNode::null(origin);
    case YAML::NodeType::Scalar: {
      // yaml-cpp tags plain scalars "?" and quoted ones "!": a quoted scalar stays a string.
      const bool quoted = node.Tag() == "!";
      const std::string& text = node.Scalar();
      if (!quoted && (text == "null" || text == "Null" || text == "NULL" || text == "~" || text.empty())) {
        return ConfigNode::null(origin);
      }
      return ConfigNode::scalar(text, quoted, origin);
    }
    case YAML::NodeType::Sequence: {
      std::vector<ConfigNode> items;
      for (const auto& item : node) items.push_back(from_yaml(item, file));
      return ConfigNode::list(std::move(items), origin);
    }
    case YAML::NodeType::Map: {
      ConfigNode map = ConfigNode::map(origin);
      for (const auto& entry : node) {
        VERL_CHECK_ARG(entry.first.IsScalar(), "{}: expected a scalar key, got a {}", yaml_origin(file, entry.first.Mark()),
                       entry.first.IsSequence() ? "list" : "mapping");
        const std::string key = entry.first.Scalar();
        VERL_CHECK_ARG(map.find(key) == nullptr, "{}: key '{}' appears twice", yaml_origin(file, entry.first.Mark()), key);
        map.entries.emplace_back(key, from_yaml(entry.second, file));
      }
      return map;
    }
  }
  return ConfigNode::null(origin);
}

}  // namespace detail

/// The file as an untyped tree (its own keys only).
inline detail::ConfigNode read_config_yaml(const std::filesystem::path& file) {
  VERL_CHECK_ARG(std::filesystem::is_regular_file(file), "config file '{}': not found", file.string());
  std::vector<YAML::Node> documents;
  try {
    documents = YAML::LoadAllFromFile(file.string());
  } catch (const YAML::Exception& error) {
    ::verl::detail::throw_invalid_argument("{}:{}:{}: invalid YAML ({})", file.string(), error.mark.line + 1,
                                           error.mark.column + 1, error.msg);
  }
  // Hydra reads one document; the keys of a second one would otherwise be lost without a word.
  VERL_CHECK_ARG(documents.size() <= 1,
                 "config file '{}': expected one YAML document, got {} (separated by '---'); merge them into one",
                 file.string(), documents.size());
  const YAML::Node root = documents.empty() ? YAML::Node() : documents.front();
  detail::ConfigNode tree = detail::from_yaml(root, file);
  if (tree.is_null()) return detail::ConfigNode::map(file.string());  // an empty file
  VERL_CHECK_ARG(tree.is_map(), "config file '{}': expected a mapping of keys at the top, got {}", file.string(),
                 tree.kind_name());
  return tree;
}

/// verl's defaults, then the YAML file, then the overrides. With `resolved`, the whole tree as it
/// will run is left there (what `verl_train --cfg job` prints).
inline PPOConfig load_ppo_config(const std::filesystem::path& yaml_file, std::span<const std::string> overrides = {},
                                 detail::ConfigNode* resolved = nullptr) {
  return detail::load_ppo_config_layered(
      [&](detail::ConfigNode& tree) {
        detail::merge_into(tree, read_config_yaml(yaml_file));
        apply_overrides(tree, overrides);
      },
      resolved);
}

}  // namespace verl::trainer
