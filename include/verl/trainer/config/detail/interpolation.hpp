// OmegaConf interpolations, as verl's configuration uses them: ${a.b.c} (absolute), ${.x} and
// ${..x} (relative to the node's mapping and its parent), ${oc.select:path,default} (the default
// when the path is absent) and ${oc.env:VAR,default}. A value that is one interpolation takes
// the referenced value with its type; interpolations inside text are spliced into the string.
// Cycles are errors naming the chain.
#pragma once

#include <fmt/format.h>

#include <cstdlib>
#include <optional>
#include <utility>
#include <vector>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "verl/core/error.hpp"
#include "verl/trainer/config/detail/config_node.hpp"
#include "verl/trainer/config/detail/override_parser.hpp"

namespace verl::trainer::detail {

class InterpolationResolver {
 public:
  explicit InterpolationResolver(ConfigNode& root) : root_(root) {}

  /// Resolves every interpolation in the tree, in place. A value that cannot be resolved is
  /// reported in `problems` and its path in `failed` (it keeps its text); the rest resolve.
  void resolve_all(std::vector<std::string>& problems, std::set<std::string>& failed) {
    problems_ = &problems;
    failed_ = &failed;
    resolve_subtree(root_, "");
    problems_ = nullptr;
    failed_ = nullptr;
  }

  /// Resolves every interpolation, throwing at the first that cannot be resolved.
  void resolve_all() { resolve_subtree(root_, ""); }

 private:
  static bool has_interpolation(const ConfigNode& node) {
    return node.kind == ConfigNode::Kind::scalar && node.text.find("${") != std::string::npos;
  }

  void resolve_subtree(ConfigNode& node, const std::string& path) {
    if (node.kind == ConfigNode::Kind::map) {
      for (auto& [key, value] : node.entries) resolve_subtree(value, join_path(path, key));
    } else if (node.kind == ConfigNode::Kind::list) {
      for (std::size_t i = 0; i < node.items.size(); ++i) {
        if (node.items[i].kind == ConfigNode::Kind::scalar) {
          resolve_node(node.items[i], fmt::format("{}[{}]", path, i), parent_of(path));
        } else {
          resolve_subtree(node.items[i], fmt::format("{}[{}]", path, i));
        }
      }
    } else {
      resolve_leaf(node, path);
    }
  }

  void resolve_leaf(ConfigNode& node, const std::string& path) {
    if (problems_ == nullptr) {
      resolve_node(node, path, parent_of(path));
      return;
    }
    try {
      resolve_node(node, path, parent_of(path));
    } catch (const InvalidArgument& error) {
      in_progress_.clear();
      problems_->push_back(error.what());
      failed_->insert(path);
    }
  }

  static std::string parent_of(const std::string& path) {
    const std::size_t dot = path.rfind('.');
    return dot == std::string::npos ? std::string() : path.substr(0, dot);
  }

  /// Resolves `node` (at `path`, inside the mapping at `scope`).
  void resolve_node(ConfigNode& node, const std::string& path, const std::string& scope) {
    if (!has_interpolation(node)) return;
    if (!in_progress_.insert(path).second) {
      ::verl::detail::throw_invalid_argument("{}: interpolation cycle through '{}' ({})", path, node.text, node.origin);
    }
    const std::string text = node.text;
    const std::string origin = node.origin;
    // One interpolation spanning the whole value keeps the referenced value's type.
    if (text.starts_with("${") && matching_brace(text, 0) == text.size() - 1) {
      ConfigNode value = evaluate(text.substr(2, text.size() - 3), path, scope, origin);
      value.origin = fmt::format("{} (via {})", value.origin, text);
      node = std::move(value);
    } else {
      std::string out;
      for (std::size_t i = 0; i < text.size();) {
        if (text.compare(i, 2, "${") == 0) {
          const std::size_t end = matching_brace(text, i);
          if (end == std::string::npos) {
            ::verl::detail::throw_invalid_argument("{}: unterminated interpolation in '{}' ({})", path, text, origin);
          }
          const ConfigNode value = evaluate(text.substr(i + 2, end - i - 2), path, scope, origin);
          VERL_CHECK_ARG(value.kind != ConfigNode::Kind::list && value.kind != ConfigNode::Kind::map,
                         "{}: cannot splice {} into the string '{}' ({})", path, value.kind_name(), text, origin);
          out += value.is_null() ? "None" : value.text;
          i = end + 1;
        } else {
          out += text[i++];
        }
      }
      node = ConfigNode::scalar(std::move(out), /*quoted=*/true, origin);
    }
    in_progress_.erase(path);
  }

  /// Index of the '}' closing the "${" at `begin`, or npos.
  static std::size_t matching_brace(const std::string& text, std::size_t begin) {
    int depth = 0;
    for (std::size_t i = begin; i < text.size(); ++i) {
      if (text[i] == '{') ++depth;
      if (text[i] == '}' && --depth == 0) return i;
    }
    return std::string::npos;
  }

  /// Splits "a,b" at the top-level comma (not inside ${...}).
  static std::pair<std::string, std::optional<std::string>> split_arguments(const std::string& text) {
    int depth = 0;
    for (std::size_t i = 0; i < text.size(); ++i) {
      if (text[i] == '{') ++depth;
      if (text[i] == '}') --depth;
      if (text[i] == ',' && depth == 0) return {trim(text.substr(0, i)), trim(text.substr(i + 1))};
    }
    return {trim(text), std::nullopt};
  }

  static std::string trim(std::string text) {
    const auto begin = text.find_first_not_of(" \t");
    const auto end = text.find_last_not_of(" \t");
    return begin == std::string::npos ? std::string() : text.substr(begin, end - begin + 1);
  }

  /// The absolute path a reference names from `scope` (".x" is relative to the scope mapping,
  /// each further leading dot goes one mapping up).
  static std::string absolute(const std::string& reference, const std::string& scope) {
    if (!reference.starts_with('.')) return reference;
    std::size_t dots = 0;
    while (dots < reference.size() && reference[dots] == '.') ++dots;
    std::string base = scope;
    for (std::size_t up = 1; up < dots; ++up) base = parent_of(base);
    return join_path(base, reference.substr(dots));
  }

  ConfigNode evaluate(const std::string& expression, const std::string& path, const std::string& scope,
                      const std::string& origin) {
    if (expression.starts_with("oc.select:")) {
      const auto [reference, fallback] = split_arguments(expression.substr(10));
      if (ConfigNode* target = lookup(absolute(reference, scope))) return *target;
      if (!fallback) return ConfigNode::null(origin);
      ConfigNode value = parse_value(*fallback, origin);
      if (has_interpolation(value)) resolve_node(value, path + "<default>", scope);
      return value;
    }
    if (expression.starts_with("oc.env:")) {
      const auto [name, fallback] = split_arguments(expression.substr(7));
      if (const char* value = std::getenv(name.c_str())) return ConfigNode::scalar(value, true, "environment " + name);
      VERL_CHECK_ARG(fallback.has_value(), "{}: environment variable {} is not set and ${{oc.env}} has no default ({})",
                     path, name, origin);
      return parse_value(*fallback, origin);
    }
    VERL_CHECK_ARG(expression.find(':') == std::string::npos,
                   "{}: unsupported resolver in '${{{}}}' (verl-cpp resolves oc.select and oc.env) ({})", path,
                   expression, origin);
    const std::string target_path = absolute(expression, scope);
    ConfigNode* target = lookup(target_path);
    VERL_CHECK_ARG(target != nullptr, "{}: interpolation '${{{}}}' refers to '{}', which is not a key ({})", path,
                   expression, target_path, origin);
    return *target;
  }

  /// The node at `path`, resolved first if it is itself an interpolation.
  ConfigNode* lookup(const std::string& path) {
    ConfigNode* node = const_cast<ConfigNode*>(find_path(root_, path));
    if (node == nullptr) return nullptr;
    if (node->kind == ConfigNode::Kind::map || node->kind == ConfigNode::Kind::list) {
      resolve_subtree(*node, path);
    } else {
      resolve_node(*node, path, parent_of(path));
    }
    return node;
  }

  ConfigNode& root_;
  std::set<std::string> in_progress_;
  std::vector<std::string>* problems_ = nullptr;
  std::set<std::string>* failed_ = nullptr;
};

}  // namespace verl::trainer::detail
