// tokenizer.json's "pre_tokenizer": how text is cut into words before BPE.
//
// Supported: ByteLevel (GPT-2: optional prefix space, the GPT-2 regex, the byte -> character
// map), Split (a regex or literal with tokenizers' five delimiter behaviours and `invert`; the
// Qwen2 and Llama-3 patterns) and Sequence. Each step maps every current piece to new pieces and
// drops empty ones, like tokenizers' PreTokenizedString.
#pragma once

#include <nlohmann/json.hpp>

#include <algorithm>
#include <deque>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "verl/core/error.hpp"
#include "verl/model/tokenizer/detail/byte_level.hpp"
#include "verl/model/tokenizer/detail/pcre2_regex.hpp"

namespace verl::model {

/// GPT-2's word pattern, which ByteLevel(use_regex=true) applies.
inline constexpr std::string_view gpt2_pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
/// The Split patterns of Qwen2 and Llama-3 (they differ in how digits group: 1 vs up to 3).
inline constexpr std::string_view qwen2_pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
inline constexpr std::string_view llama3_pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

/// What Split does with the pattern's matches (tokenizers' SplitDelimiterBehavior).
enum class SplitBehavior { removed, isolated, merged_with_previous, merged_with_next, contiguous };

inline SplitBehavior parse_split_behavior(std::string_view name) {
  if (name == "Removed") return SplitBehavior::removed;
  if (name == "Isolated") return SplitBehavior::isolated;
  if (name == "MergedWithPrevious") return SplitBehavior::merged_with_previous;
  if (name == "MergedWithNext") return SplitBehavior::merged_with_next;
  if (name == "Contiguous") return SplitBehavior::contiguous;
  ::verl::detail::throw_invalid_argument(
      "tokenizer.json Split.behavior: expected one of Removed, Isolated, MergedWithPrevious, MergedWithNext, "
      "Contiguous, got '{}'",
      name);
}

namespace detail {

struct Span {
  std::size_t begin;
  std::size_t end;
  bool is_match;
};

/// tokenizers' NormalizedString::split: turn match/non-match spans into the pieces to keep.
template <class Emit>
void apply_split_behavior(std::string_view piece, const std::vector<Span>& spans, SplitBehavior behavior,
                          Emit&& emit) {
  if (behavior == SplitBehavior::isolated) {  // the common case, without a copy of the spans
    for (const auto& span : spans) {
      if (span.end > span.begin) emit(piece.substr(span.begin, span.end - span.begin));
    }
    return;
  }
  std::vector<std::pair<std::size_t, std::size_t>> kept;
  kept.reserve(spans.size());
  switch (behavior) {
    case SplitBehavior::isolated:
      for (const auto& span : spans) kept.emplace_back(span.begin, span.end);
      break;
    case SplitBehavior::removed:
      for (const auto& span : spans) {
        if (!span.is_match) kept.emplace_back(span.begin, span.end);
      }
      break;
    case SplitBehavior::contiguous: {
      bool previous_match = false;
      for (const auto& span : spans) {
        if (span.is_match == previous_match && !kept.empty()) {
          kept.back().second = span.end;
        } else {
          kept.emplace_back(span.begin, span.end);
        }
        previous_match = span.is_match;
      }
      break;
    }
    case SplitBehavior::merged_with_previous: {
      bool previous_match = false;
      for (const auto& span : spans) {
        if (span.is_match && !previous_match && !kept.empty()) {
          kept.back().second = span.end;
        } else {
          kept.emplace_back(span.begin, span.end);
        }
        previous_match = span.is_match;
      }
      break;
    }
    case SplitBehavior::merged_with_next: {
      bool previous_match = false;
      for (auto span = spans.rbegin(); span != spans.rend(); ++span) {
        if (span->is_match && !previous_match && !kept.empty()) {
          kept.back().first = span->begin;
        } else {
          kept.emplace_back(span->begin, span->end);
        }
        previous_match = span->is_match;
      }
      std::reverse(kept.begin(), kept.end());
      break;
    }
  }
  for (const auto& [begin, end] : kept) {
    if (end > begin) emit(piece.substr(begin, end - begin));
  }
}

}  // namespace detail

/// Split: cut on a regex (Oniguruma syntax, as in tokenizer.json) or a literal string.
struct SplitStep {
  detail::Pcre2Regex regex;  ///< unset for a literal pattern
  std::string literal;
  SplitBehavior behavior = SplitBehavior::isolated;
  bool invert = false;

  /// Calls emit(word) for each resulting piece (a view into `piece`).
  template <class Emit>
  void run(std::string_view piece, Emit&& emit) const {
    thread_local std::vector<detail::Span> spans;
    spans.clear();
    std::size_t previous = 0;
    auto on_match = [&](std::size_t begin, std::size_t end) {
      if (previous != begin) spans.push_back({previous, begin, false});
      spans.push_back({begin, end, true});
      previous = end;
    };
    if (regex.valid()) {
      regex.for_each_match(piece, on_match);
    } else if (!literal.empty()) {
      for (std::size_t at = piece.find(literal); at != std::string_view::npos; at = piece.find(literal, at + literal.size())) {
        on_match(at, at + literal.size());
      }
    }
    if (previous != piece.size()) spans.push_back({previous, piece.size(), false});
    if (invert) {
      for (auto& span : spans) span.is_match = !span.is_match;
    }
    detail::apply_split_behavior(piece, spans, behavior, emit);
  }
};

/// ByteLevel: optional prefix space, optional GPT-2 split, then bytes -> byte characters.
struct ByteLevelStep {
  bool add_prefix_space = false;
  bool use_regex = true;
  detail::Pcre2Regex gpt2_regex;  ///< compiled when use_regex

  /// Calls emit(word) for each resulting word, spelled in byte characters (the view is valid
  /// during the call only).
  template <class Emit>
  void run(std::string_view piece, Emit&& emit) const {
    const auto& tables = detail::byte_level_tables();
    std::string prefixed;
    if (add_prefix_space && !piece.starts_with(' ')) {
      prefixed.reserve(piece.size() + 1);
      prefixed.push_back(' ');
      prefixed.append(piece);
      piece = prefixed;
    }
    std::string mapped;
    auto emit_mapped = [&](std::string_view word) {
      if (word.empty()) return;
      mapped.clear();
      tables.encode(word, mapped);
      emit(std::string_view(mapped));
    };
    if (!use_regex) {
      emit_mapped(piece);
      return;
    }
    std::size_t previous = 0;
    gpt2_regex.for_each_match(piece, [&](std::size_t begin, std::size_t end) {
      if (previous != begin) emit_mapped(piece.substr(previous, begin - previous));
      emit_mapped(piece.substr(begin, end - begin));
      previous = end;
    });
    if (previous != piece.size()) emit_mapped(piece.substr(previous));
  }
};

class PreTokenizer {
 public:
  using Step = std::variant<SplitStep, ByteLevelStep>;

  PreTokenizer() = default;

  static PreTokenizer from_json(const nlohmann::json& json) {
    PreTokenizer pre_tokenizer;
    pre_tokenizer.append(json);
    return pre_tokenizer;
  }

  [[nodiscard]] const std::vector<Step>& steps() const { return steps_; }
  /// Whether the steps end in the byte -> character map (decoding then needs the ByteLevel decoder).
  [[nodiscard]] bool is_byte_level() const {
    return !steps_.empty() && std::holds_alternative<ByteLevelStep>(steps_.back());
  }

  /// Calls on_word(word) for every word of `text` (valid UTF-8), in order. A word view is valid
  /// during the call only.
  template <class OnWord>
  void run(std::string_view text, OnWord&& on_word) const {
    if (text.empty()) return;
    if (steps_.empty()) {
      on_word(text);
      return;
    }
    // Pieces between steps are views: into `text` or into strings a step produced, kept in a
    // deque (stable addresses) until the last step has run.
    std::vector<std::string_view> current{text};
    std::vector<std::string_view> next;
    std::deque<std::string> produced;
    for (std::size_t k = 0; k < steps_.size(); ++k) {
      const bool last = k + 1 == steps_.size();
      for (const std::string_view piece : current) {
        std::visit(
            [&](const auto& step) {
              if (last) {
                step.run(piece, on_word);
              } else if constexpr (std::is_same_v<std::decay_t<decltype(step)>, SplitStep>) {
                step.run(piece, [&](std::string_view word) { next.push_back(word); });
              } else {
                step.run(piece, [&](std::string_view word) { next.push_back(produced.emplace_back(word)); });
              }
            },
            steps_[k]);
      }
      std::swap(current, next);
      next.clear();
    }
  }

  /// The words of `text` as strings (tests, debugging).
  [[nodiscard]] std::vector<std::string> words(std::string_view text) const {
    std::vector<std::string> out;
    run(text, [&](std::string_view word) { out.emplace_back(word); });
    return out;
  }

 private:
  void append(const nlohmann::json& json) {
    if (json.is_null()) return;
    VERL_CHECK_ARG(json.is_object() && json.contains("type") && json["type"].is_string(),
                   "tokenizer.json pre_tokenizer: expected null or an object with a 'type', got {}", json.dump());
    const auto& type = json["type"].get_ref<const std::string&>();
    if (type == "Sequence") {
      VERL_CHECK_ARG(json.contains("pretokenizers") && json["pretokenizers"].is_array(),
                     "tokenizer.json pre_tokenizer Sequence: expected a 'pretokenizers' list");
      for (const auto& inner : json["pretokenizers"]) append(inner);
    } else if (type == "ByteLevel") {
      ByteLevelStep step;
      step.add_prefix_space = json.value("add_prefix_space", true);
      step.use_regex = json.value("use_regex", true);
      if (step.use_regex) step.gpt2_regex = detail::Pcre2Regex::from_oniguruma(gpt2_pattern);
      steps_.emplace_back(std::move(step));
    } else if (type == "Split") {
      SplitStep step;
      const auto pattern = json.find("pattern");
      VERL_CHECK_ARG(pattern != json.end() && pattern->is_object() &&
                         ((pattern->contains("Regex") && (*pattern)["Regex"].is_string()) ||
                          (pattern->contains("String") && (*pattern)["String"].is_string())),
                     "tokenizer.json Split.pattern: expected {{\"Regex\": ...}} or {{\"String\": ...}}, got {}",
                     pattern == json.end() ? std::string("nothing") : pattern->dump());
      if (pattern->contains("Regex")) {
        step.regex = detail::Pcre2Regex::from_oniguruma((*pattern)["Regex"].get_ref<const std::string&>());
      } else {
        step.literal = (*pattern)["String"].get<std::string>();
      }
      VERL_CHECK_ARG(json.contains("behavior") && json["behavior"].is_string(),
                     "tokenizer.json Split.behavior: expected a string");
      step.behavior = parse_split_behavior(json["behavior"].get_ref<const std::string&>());
      step.invert = json.value("invert", false);
      steps_.emplace_back(std::move(step));
    } else {
      ::verl::detail::throw_not_implemented(
          "tokenizer.json pre_tokenizer: type '{}' is not supported (supported: ByteLevel, Split, Sequence)", type);
    }
  }

  std::vector<Step> steps_;
};

}  // namespace verl::model
