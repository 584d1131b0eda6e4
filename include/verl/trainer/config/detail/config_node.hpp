// The untyped configuration tree that YAML files, verl's defaults and command-line overrides are
// merged into before it is checked and bound to PPOConfig: mappings, lists and scalars, each
// remembering where it came from ("ppo.yaml:12:5", "override 'a.b=1'") for error messages.
// Scalars keep their text; their type is decided by the field they are bound to (a quoted
// scalar is always a string).
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "verl/core/error.hpp"

namespace verl::trainer::detail {

struct ConfigNode {
  enum class Kind { null, scalar, list, map };

  Kind kind = Kind::null;
  std::string text;    ///< scalar text
  bool quoted = false; ///< a quoted scalar is a string whatever its text
  std::vector<ConfigNode> items;                            ///< list elements
  std::vector<std::pair<std::string, ConfigNode>> entries;  ///< mapping, in insertion order
  std::string origin;  ///< where the value came from

  static ConfigNode null(std::string origin) { return {Kind::null, {}, false, {}, {}, std::move(origin)}; }
  static ConfigNode scalar(std::string text, bool quoted, std::string origin) {
    return {Kind::scalar, std::move(text), quoted, {}, {}, std::move(origin)};
  }
  static ConfigNode list(std::vector<ConfigNode> items, std::string origin) {
    return {Kind::list, {}, false, std::move(items), {}, std::move(origin)};
  }
  static ConfigNode map(std::string origin) { return {Kind::map, {}, false, {}, {}, std::move(origin)}; }

  [[nodiscard]] bool is_null() const { return kind == Kind::null; }
  [[nodiscard]] bool is_map() const { return kind == Kind::map; }
  /// OmegaConf's mandatory-value marker.
  [[nodiscard]] bool is_missing() const { return kind == Kind::scalar && text == "?\?\?"; }

  [[nodiscard]] const ConfigNode* find(std::string_view key) const {
    for (const auto& [k, v] : entries)
      if (k == key) return &v;
    return nullptr;
  }
  [[nodiscard]] ConfigNode* find(std::string_view key) {
    return const_cast<ConfigNode*>(static_cast<const ConfigNode&>(*this).find(key));
  }
  /// The entry `key` of a mapping, created (null) if absent.
  ConfigNode& child(std::string_view key, const std::string& origin) {
    if (ConfigNode* found = find(key)) return *found;
    entries.emplace_back(std::string(key), ConfigNode::null(origin));
    return entries.back().second;
  }

  [[nodiscard]] std::string_view kind_name() const {
    switch (kind) {
      case Kind::null: return "null";
      case Kind::scalar: return "a scalar";
      case Kind::list: return "a list";
      case Kind::map: return "a mapping";
    }
    return "?";
  }
};

/// "a.b.c" -> {"a", "b", "c"}.
inline std::vector<std::string> split_path(std::string_view path) {
  std::vector<std::string> parts;
  std::size_t begin = 0;
  while (true) {
    const std::size_t dot = path.find('.', begin);
    parts.emplace_back(path.substr(begin, dot == std::string_view::npos ? std::string_view::npos : dot - begin));
    if (dot == std::string_view::npos) break;
    begin = dot + 1;
  }
  return parts;
}

inline std::string join_path(std::string_view prefix, std::string_view key) {
  return prefix.empty() ? std::string(key) : fmt::format("{}.{}", prefix, key);
}

/// The node at a dotted path, or null.
inline const ConfigNode* find_path(const ConfigNode& root, std::string_view path) {
  const ConfigNode* node = &root;
  for (const auto& part : split_path(path)) {
    if (!node->is_map()) return nullptr;
    node = node->find(part);
    if (node == nullptr) return nullptr;
  }
  return node;
}

inline ConfigNode* find_path(ConfigNode& root, std::string_view path) {
  return const_cast<ConfigNode*>(find_path(static_cast<const ConfigNode&>(root), path));
}

/// Sets the node at a dotted path, creating mappings on the way. A value on the way that is
/// not a mapping is an error naming the path (as Hydra refuses "a.b=1" when a is a number).
inline void set_path(ConfigNode& root, std::string_view path, ConfigNode value) {
  const auto parts = split_path(path);
  ConfigNode* node = &root;
  std::string walked;
  for (std::size_t i = 0; i + 1 < parts.size(); ++i) {
    walked = join_path(walked, parts[i]);
    ConfigNode& next = node->child(parts[i], value.origin);
    if (next.is_null()) next = ConfigNode::map(value.origin);
    VERL_CHECK_ARG(next.is_map(), "{}: cannot set '{}' inside {} ({}; from {})", walked, path, next.kind_name(),
                   next.origin, value.origin);
    node = &next;
  }
  node->child(parts.back(), value.origin) = std::move(value);
}

/// Deep merge (OmegaConf.merge): mappings merge key by key, anything else replaces.
inline void merge_into(ConfigNode& target, const ConfigNode& source) {
  if (target.is_map() && source.is_map()) {
    for (const auto& [key, value] : source.entries) {
      ConfigNode* existing = target.find(key);
      if (existing == nullptr) {
        target.entries.emplace_back(key, value);
      } else {
        merge_into(*existing, value);
      }
    }
    return;
  }
  target = source;
}

inline std::optional<bool> parse_bool(std::string_view text) {
  std::string lower(text);
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (lower == "true" || lower == "yes" || lower == "on") return true;
  if (lower == "false" || lower == "no" || lower == "off") return false;
  return std::nullopt;
}

inline std::optional<std::int64_t> parse_int(std::string_view text) {
  if (!text.empty() && text.front() == '+') text.remove_prefix(1);
  std::string digits;
  for (const char c : text)
    if (c != '_') digits += c;  // YAML allows 1_000
  std::int64_t value = 0;
  const auto [ptr, error] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (digits.empty() || error != std::errc() || ptr != digits.data() + digits.size()) return std::nullopt;
  return value;
}

inline std::optional<double> parse_double(std::string_view text) {
  std::string lower(text);
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (lower == ".inf" || lower == "inf" || lower == "+.inf" || lower == "+inf") return HUGE_VAL;
  if (lower == "-.inf" || lower == "-inf") return -HUGE_VAL;
  if (lower == ".nan" || lower == "nan") return std::nan("");
  if (!lower.empty() && lower.front() == '+') lower.erase(0, 1);
  double value = 0.0;
  const auto [ptr, error] = std::from_chars(lower.data(), lower.data() + lower.size(), value);
  if (lower.empty() || error != std::errc() || ptr != lower.data() + lower.size()) return std::nullopt;
  return value;
}

/// A type-aware spelling of a value, so that equal values compare equal however they were
/// written (1e-06 and 1.0e-06, True and true).
inline std::string canonical(const ConfigNode& node) {
  switch (node.kind) {
    case ConfigNode::Kind::null: return "null";
    case ConfigNode::Kind::scalar: {
      if (node.quoted) return "s:" + node.text;
      if (node.text == "null" || node.text == "~" || node.text == "None") return "null";
      if (const auto b = parse_bool(node.text)) return *b ? "b:true" : "b:false";
      if (const auto i = parse_int(node.text)) return fmt::format("n:{}", static_cast<double>(*i));
      if (const auto d = parse_double(node.text)) return fmt::format("n:{}", *d);
      return "s:" + node.text;
    }
    case ConfigNode::Kind::list: {
      std::string out = "[";
      for (const auto& item : node.items) out += canonical(item) + ",";
      return out + "]";
    }
    case ConfigNode::Kind::map: {
      std::vector<std::string> parts;
      for (const auto& [key, value] : node.entries) parts.push_back(key + "=" + canonical(value));
      std::sort(parts.begin(), parts.end());
      std::string out = "{";
      for (const auto& p : parts) out += p + ",";
      return out + "}";
    }
  }
  return "?";
}

/// The value written back in the override grammar (for messages and dumps).
inline std::string to_text(const ConfigNode& node) {
  switch (node.kind) {
    case ConfigNode::Kind::null: return "null";
    case ConfigNode::Kind::scalar: return node.quoted ? fmt::format("'{}'", node.text) : node.text;
    case ConfigNode::Kind::list: {
      std::string out = "[";
      for (std::size_t i = 0; i < node.items.size(); ++i) out += (i ? ", " : "") + to_text(node.items[i]);
      return out + "]";
    }
    case ConfigNode::Kind::map: {
      std::string out = "{";
      for (std::size_t i = 0; i < node.entries.size(); ++i)
        out += (i ? ", " : "") + node.entries[i].first + ": " + to_text(node.entries[i].second);
      return out + "}";
    }
  }
  return "?";
}

}  // namespace verl::trainer::detail
