// Hydra-style command-line overrides: `key=value` with verl's dotted key paths (a leading `+` or
// `++`, Hydra's "add" and "force add", is accepted), and values in Hydra's grammar: null, true,
// numbers, 'quoted' or "quoted" strings, [lists], {key: value} mappings, and plain text (which
// may contain ${...} interpolations).
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "verl/core/error.hpp"
#include "verl/trainer/config/detail/config_node.hpp"

namespace verl::trainer::detail {

class ValueParser {
 public:
  ValueParser(std::string_view text, std::string origin) : text_(text), origin_(std::move(origin)) {}

  /// The whole text as one value.
  ConfigNode parse() {
    skip_space();
    ConfigNode value = parse_value(/*in_container=*/false);
    skip_space();
    if (pos_ != text_.size()) fail(fmt::format("unexpected '{}' at position {}", text_.substr(pos_), pos_));
    return value;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    ::verl::detail::throw_invalid_argument("{}: cannot parse the value '{}': {}", origin_, text_, what);
  }

  void skip_space() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }

  ConfigNode parse_value(bool in_container) {
    skip_space();
    if (pos_ < text_.size()) {
      if (text_[pos_] == '[') return parse_list();
      if (text_[pos_] == '{' && (pos_ + 1 >= text_.size() || text_[pos_ + 1] != '{')) return parse_map();
      if (text_[pos_] == '\'' || text_[pos_] == '"') return parse_quoted();
    }
    return parse_plain(in_container);
  }

  ConfigNode parse_quoted() {
    const char quote = text_[pos_++];
    std::string out;
    while (true) {
      if (pos_ >= text_.size()) fail("unterminated quoted string");
      const char c = text_[pos_++];
      if (c == quote) break;
      if (c == '\\' && pos_ < text_.size()) {
        const char e = text_[pos_++];
        out += e == 'n' ? '\n' : e == 't' ? '\t' : e;
        continue;
      }
      out += c;
    }
    return ConfigNode::scalar(std::move(out), /*quoted=*/true, origin_);
  }

  /// Plain text up to the end, or (inside a container) to a top-level ',' ']' '}' or ':';
  /// commas inside ${...} belong to the interpolation.
  ConfigNode parse_plain(bool in_container, bool stop_at_colon = false) {
    const std::size_t begin = pos_;
    int braces = 0;
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      if (c == '$' && pos_ + 1 < text_.size() && text_[pos_ + 1] == '{') {
        braces += 1;
        pos_ += 2;
        continue;
      }
      if (braces > 0) {
        if (c == '{') ++braces;
        if (c == '}') --braces;
        ++pos_;
        continue;
      }
      if (in_container && (c == ',' || c == ']' || c == '}')) break;
      if (stop_at_colon && c == ':') break;
      ++pos_;
    }
    if (braces > 0) fail("unterminated ${...} interpolation");
    std::string value(text_.substr(begin, pos_ - begin));
    while (!value.empty() && std::isspace(static_cast<unsigned char>(value.back()))) value.pop_back();
    if (value == "null" || value == "~" || (value.empty() && in_container)) return ConfigNode::null(origin_);
    return ConfigNode::scalar(std::move(value), /*quoted=*/false, origin_);
  }

  ConfigNode parse_list() {
    ++pos_;  // [
    std::vector<ConfigNode> items;
    skip_space();
    if (pos_ < text_.size() && text_[pos_] == ']') {
      ++pos_;
      return ConfigNode::list(std::move(items), origin_);
    }
    while (true) {
      items.push_back(parse_value(/*in_container=*/true));
      skip_space();
      if (pos_ >= text_.size()) fail("missing ']'");
      if (text_[pos_] == ']') {
        ++pos_;
        break;
      }
      if (text_[pos_] != ',') fail(fmt::format("expected ',' or ']' at position {}", pos_));
      ++pos_;
    }
    return ConfigNode::list(std::move(items), origin_);
  }

  ConfigNode parse_map() {
    ++pos_;  // {
    ConfigNode map = ConfigNode::map(origin_);
    skip_space();
    if (pos_ < text_.size() && text_[pos_] == '}') {
      ++pos_;
      return map;
    }
    while (true) {
      skip_space();
      ConfigNode key = text_[pos_] == '\'' || text_[pos_] == '"' ? parse_quoted() : parse_plain(true, true);
      skip_space();
      if (pos_ >= text_.size() || text_[pos_] != ':') fail(fmt::format("expected ':' after the key '{}'", key.text));
      ++pos_;
      map.entries.emplace_back(key.text, parse_value(/*in_container=*/true));
      skip_space();
      if (pos_ >= text_.size()) fail("missing '}'");
      if (text_[pos_] == '}') {
        ++pos_;
        break;
      }
      if (text_[pos_] != ',') fail(fmt::format("expected ',' or '}}' at position {}", pos_));
      ++pos_;
    }
    return map;
  }

  std::string_view text_;
  std::string origin_;
  std::size_t pos_ = 0;
};

/// Parses a value written in the override grammar.
inline ConfigNode parse_value(std::string_view text, std::string origin) { return ValueParser(text, std::move(origin)).parse(); }

struct Override {
  std::string key;
  ConfigNode value;
};

inline bool is_key_character(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.' || c == '@';
}

/// Parses `key=value` (or `+key=value`, `++key=value`). Deletion (`~key`) is refused: every key
/// of the configuration has a value.
inline Override parse_override(std::string_view text) {
  const std::string origin = fmt::format("override '{}'", text);
  std::string_view rest = text;
  VERL_CHECK_ARG(!rest.starts_with('~'),
                 "{}: deleting a key (Hydra's ~key) is not supported by verl-cpp; set the key to a value instead", origin);
  if (rest.starts_with("++")) {
    rest.remove_prefix(2);
  } else if (rest.starts_with('+')) {
    rest.remove_prefix(1);
  }
  const std::size_t equals = rest.find('=');
  VERL_CHECK_ARG(equals != std::string_view::npos, "{}: expected key=value (e.g. algorithm.adv_estimator=grpo)", origin);
  const std::string_view key = rest.substr(0, equals);
  VERL_CHECK_ARG(!key.empty() && key.front() != '.' && key.back() != '.' && key.find("..") == std::string_view::npos &&
                     std::all_of(key.begin(), key.end(), is_key_character),
                 "{}: '{}' is not a key path (dotted names such as data.train_batch_size)", origin, key);
  return {std::string(key), parse_value(rest.substr(equals + 1), origin)};
}

}  // namespace verl::trainer::detail
