// tokenizer.json's "normalizer": null, NFC (Qwen2), Prepend and Replace with a literal pattern
// (the SentencePiece-style Llama-2 files: Sequence[Prepend("▁"), Replace(" " -> "▁")]), or a
// Sequence of those. Other normalizers (lowercasing, NFKC, Replace with a regex, precompiled
// sentencepiece charsmaps) throw verl::NotImplemented when loaded, so a tokenizer is never silently
// run with different text than Hugging Face would see.
//
// As in tokenizers, the normalizer runs on each piece of text between added tokens separately,
// so Prepend("▁") marks the start of every such piece, not only of the whole text.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "verl/core/error.hpp"
#include "verl/tokenizer/detail/nfc.hpp"

namespace verl::tokenizer {

namespace detail {

/// Every non-overlapping occurrence of `pattern` (non-empty), left to right, replaced by `content`.
inline std::string replace_all(std::string_view text, std::string_view pattern, std::string_view content) {
  std::string out;
  out.reserve(text.size());
  std::size_t start = 0;
  for (std::size_t at = text.find(pattern); at != std::string_view::npos; at = text.find(pattern, start)) {
    out.append(text.substr(start, at - start)).append(content);
    start = at + pattern.size();
  }
  out.append(text.substr(start));
  return out;
}

/// A Replace normalizer's or decoder's pattern and content. Only {"String": ...} patterns are
/// supported; `where` names the component in errors.
inline std::pair<std::string, std::string> parse_replace(const nlohmann::json& json, std::string_view where) {
  const auto pattern = json.find("pattern");
  VERL_CHECK_ARG(pattern != json.end() && pattern->is_object() && pattern->size() == 1,
                 "tokenizer.json {} Replace.pattern: expected {{\"String\": ...}} or {{\"Regex\": ...}}, got {}", where,
                 pattern == json.end() ? std::string("nothing") : pattern->dump());
  if (pattern->contains("Regex")) {
    ::verl::detail::throw_not_implemented(
        "tokenizer.json {} Replace.pattern: Regex patterns are not supported (only String), got {}", where,
        pattern->dump());
  }
  VERL_CHECK_ARG(pattern->contains("String") && (*pattern)["String"].is_string(),
                 "tokenizer.json {} Replace.pattern: expected {{\"String\": ...}}, got {}", where, pattern->dump());
  const auto content = json.find("content");
  VERL_CHECK_ARG(content != json.end() && content->is_string(), "tokenizer.json {} Replace.content: expected a string",
                 where);
  std::string literal = (*pattern)["String"].get<std::string>();
  if (literal.empty()) {
    ::verl::detail::throw_not_implemented("tokenizer.json {} Replace.pattern: an empty String pattern is not supported",
                                          where);
  }
  return {std::move(literal), content->get<std::string>()};
}

}  // namespace detail

class Normalizer {
 public:
  enum class Kind { nfc, prepend, replace };
  struct Step {
    Kind kind = Kind::nfc;
    std::string pattern;  ///< replace: the literal to find
    std::string content;  ///< prepend: the prefix; replace: the replacement
  };

  Normalizer() = default;

  static Normalizer from_json(const nlohmann::json& json) {
    Normalizer normalizer;
    normalizer.append(json);
    return normalizer;
  }

  /// No normalization at all (the text goes to pre-tokenization untouched).
  [[nodiscard]] bool is_identity() const { return steps_.empty(); }
  [[nodiscard]] const std::vector<Step>& steps() const { return steps_; }

  [[nodiscard]] std::string apply(std::string_view text) const {
    std::string out(text);
    for (const Step& step : steps_) {
      switch (step.kind) {
        case Kind::nfc: out = detail::nfc(out); break;
        // tokenizers' Prepend leaves empty text empty.
        case Kind::prepend:
          if (!out.empty()) out.insert(0, step.content);
          break;
        case Kind::replace: out = detail::replace_all(out, step.pattern, step.content); break;
      }
    }
    return out;
  }

 private:
  void append(const nlohmann::json& json) {
    if (json.is_null()) return;
    VERL_CHECK_ARG(json.is_object() && json.contains("type") && json["type"].is_string(),
                   "tokenizer.json normalizer: expected null or an object with a 'type', got {}", json.dump());
    const auto& type = json["type"].get_ref<const std::string&>();
    if (type == "NFC") {
      steps_.push_back(Step{Kind::nfc, {}, {}});
    } else if (type == "Prepend") {
      VERL_CHECK_ARG(json.contains("prepend") && json["prepend"].is_string(),
                     "tokenizer.json normalizer Prepend.prepend: expected a string, got {}", json.dump());
      steps_.push_back(Step{Kind::prepend, {}, json["prepend"].get<std::string>()});
    } else if (type == "Replace") {
      auto [pattern, content] = detail::parse_replace(json, "normalizer");
      steps_.push_back(Step{Kind::replace, std::move(pattern), std::move(content)});
    } else if (type == "Sequence") {
      VERL_CHECK_ARG(json.contains("normalizers") && json["normalizers"].is_array(),
                     "tokenizer.json normalizer Sequence: expected a 'normalizers' list");
      for (const auto& inner : json["normalizers"]) append(inner);
    } else {
      ::verl::detail::throw_not_implemented(
          "tokenizer.json normalizer: type '{}' is not supported (supported: null, NFC, Prepend, Replace, Sequence)",
          type);
    }
  }

  std::vector<Step> steps_;
};

}  // namespace verl::tokenizer
