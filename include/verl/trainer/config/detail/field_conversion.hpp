// Typed reading and writing of configuration values: a ConfigNode into a PPOConfig field (with
// an error that names the expected type when it does not fit), and a field back to text in the
// override grammar.
#pragma once

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "verl/core/error.hpp"
#include "verl/data/truncation.hpp"
#include "verl/trainer/checkpoint.hpp"
#include "verl/trainer/config/detail/config_node.hpp"

namespace verl::trainer::detail {

/// "got 'eight'", "got null", "got a list".
inline std::string describe(const ConfigNode& node) {
  switch (node.kind) {
    case ConfigNode::Kind::null: return "got null";
    case ConfigNode::Kind::scalar: return fmt::format("got '{}'", node.text);
    default: return fmt::format("got {}", node.kind_name());
  }
}

/// Each read() returns an empty string on success, else what was expected and what was found.
inline std::string read(const ConfigNode& node, bool& out) {
  if (node.kind == ConfigNode::Kind::scalar) {
    if (const auto value = parse_bool(node.text)) {
      out = *value;
      return {};
    }
  }
  return "expected a boolean (true or false), " + describe(node);
}

inline std::string read(const ConfigNode& node, std::int64_t& out) {
  if (node.kind == ConfigNode::Kind::scalar) {
    if (const auto value = parse_int(node.text)) {
      out = *value;
      return {};
    }
  }
  return "expected an integer, " + describe(node);
}

inline std::string read(const ConfigNode& node, double& out) {
  if (node.kind == ConfigNode::Kind::scalar) {
    if (const auto i = parse_int(node.text)) {
      out = static_cast<double>(*i);
      return {};
    }
    if (const auto d = parse_double(node.text)) {
      out = *d;
      return {};
    }
  }
  return "expected a number, " + describe(node);
}

inline std::string read(const ConfigNode& node, std::string& out) {
  if (node.is_missing()) return "mandatory value missing (?\?\?)";
  if (node.kind == ConfigNode::Kind::scalar) {
    out = node.text;
    return {};
  }
  return "expected a string, " + describe(node);
}

inline std::string read(const ConfigNode& node, data::Truncation& out) {
  std::string name;
  if (auto error = read(node, name); !error.empty()) return error;
  for (std::size_t i = 0; i < data::truncation_names.size(); ++i) {
    if (data::truncation_names[i] == name) {
      out = static_cast<data::Truncation>(i);
      return {};
    }
  }
  return fmt::format("expected one of {}, {}", fmt::join(data::truncation_names, ", "), describe(node));
}

inline std::string read(const ConfigNode& node, ResumeMode& out) {
  std::string name;
  if (auto error = read(node, name); !error.empty()) return error;
  for (std::size_t i = 0; i < resume_mode_names.size(); ++i) {
    if (resume_mode_names[i] == name) {
      out = static_cast<ResumeMode>(i);
      return {};
    }
  }
  return fmt::format("expected one of {}, {}", fmt::join(resume_mode_names, ", "), describe(node));
}

/// Lists; a single scalar is read as a one-element list (verl accepts `train_files=a.parquet`).
template <class T>
std::string read(const ConfigNode& node, std::vector<T>& out) {
  std::vector<T> values;
  if (node.kind == ConfigNode::Kind::scalar) {
    T value{};
    if (auto error = read(node, value); !error.empty()) return "expected a list, " + describe(node);
    values.push_back(std::move(value));
  } else if (node.kind == ConfigNode::Kind::list) {
    for (std::size_t i = 0; i < node.items.size(); ++i) {
      T value{};
      if (auto error = read(node.items[i], value); !error.empty()) return fmt::format("element {}: {}", i, error);
      values.push_back(std::move(value));
    }
  } else {
    return "expected a list, " + describe(node);
  }
  out = std::move(values);
  return {};
}

/// null (and, for OmegaConf's mandatory marker, ???) is nullopt.
template <class T>
std::string read(const ConfigNode& node, std::optional<T>& out) {
  if (node.is_null() || node.is_missing()) {
    out.reset();
    return {};
  }
  T value{};
  if (auto error = read(node, value); !error.empty()) return error + " or null";
  out = std::move(value);
  return {};
}

/// A free-form value (say data.apply_chat_template_kwargs): unquoted scalars are typed as the
/// typed fields read them (booleans, integers, numbers), anything else is a string.
inline std::string read(const ConfigNode& node, nlohmann::ordered_json& out) {
  switch (node.kind) {
    case ConfigNode::Kind::null: out = nullptr; return {};
    case ConfigNode::Kind::scalar: {
      const std::string& text = node.text;
      if (node.quoted) {
        out = text;
      } else if (const auto flag = parse_bool(text)) {
        out = *flag;
      } else if (const auto integer = parse_int(text)) {
        out = *integer;
      } else if (const auto number = parse_double(text)) {
        out = *number;
      } else {
        out = text;
      }
      return {};
    }
    case ConfigNode::Kind::list: {
      out = nlohmann::ordered_json::array();
      for (std::size_t i = 0; i < node.items.size(); ++i) {
        nlohmann::ordered_json item;
        if (auto error = read(node.items[i], item); !error.empty()) return fmt::format("element {}: {}", i, error);
        out.push_back(std::move(item));
      }
      return {};
    }
    case ConfigNode::Kind::map: {
      out = nlohmann::ordered_json::object();
      for (const auto& [key, value] : node.entries) {
        nlohmann::ordered_json item;
        if (auto error = read(value, item); !error.empty()) return fmt::format("key {}: {}", key, error);
        out[key] = std::move(item);
      }
      return {};
    }
  }
  return "expected a value, " + describe(node);
}

// ---- writing values back in the override grammar ----------------------------------------------

inline std::string quote(std::string_view text) {
  std::string out = "'";
  for (const char c : text) {
    if (c == '\'' || c == '\\') out += '\\';
    out += c;
  }
  return out + "'";
}

inline std::string write(bool value) { return value ? "true" : "false"; }
inline std::string write(std::int64_t value) { return std::to_string(value); }
inline std::string write(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  std::string text = fmt::format("{}", value);
  if (text.find_first_of(".eEn") == std::string::npos) text += ".0";
  return text;
}
inline std::string write(const std::string& value) { return quote(value); }
inline std::string write(data::Truncation value) { return quote(data::to_string(value)); }
inline std::string write(ResumeMode value) { return quote(to_string(value)); }
template <class T>
std::string write(const std::vector<T>& values) {
  std::string out = "[";
  for (std::size_t i = 0; i < values.size(); ++i) out += (i ? ", " : "") + write(values[i]);
  return out + "]";
}
template <class T>
std::string write(const std::optional<T>& value) {
  return value ? write(*value) : std::string("null");
}
inline std::string write(const nlohmann::ordered_json& value) {
  if (value.is_null()) return "null";
  if (value.is_boolean()) return write(value.get<bool>());
  if (value.is_number_integer()) return write(value.get<std::int64_t>());
  if (value.is_number()) return write(value.get<double>());
  if (value.is_string()) return quote(value.get_ref<const std::string&>());
  std::string out = value.is_array() ? "[" : "{";
  bool first = true;
  for (auto item = value.begin(); item != value.end(); ++item, first = false) {
    if (!first) out += ", ";
    if (value.is_object()) out += item.key() + ": ";
    out += write(*item);
  }
  return out + (value.is_array() ? "]" : "}");
}

}  // namespace verl::trainer::detail
