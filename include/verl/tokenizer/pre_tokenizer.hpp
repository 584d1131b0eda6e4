// tokenizer.json's "pre_tokenizer": how text is cut into words before BPE.
//
// Supported: ByteLevel (GPT-2: optional prefix space, the GPT-2 regex, the byte -> character
// map), Split (a regex or literal with tokenizers' five delimiter behaviours and `invert`; the
// Qwen2 and Llama-3 patterns), Metaspace (SentencePiece style: spaces -> "▁", a "▁" prepended
// by prepend_scheme, optional split before each "▁"; Mistral, newer Llama-2 conversions) and
// Sequence. Each step maps every current piece to new pieces and drops empty ones, like
// tokenizers' PreTokenizedString.
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
#include "verl/tokenizer/byte_level.hpp"
#include "verl/tokenizer/detail/pcre2_regex.hpp"
#include "verl/tokenizer/detail/unicode.hpp"

namespace verl::tokenizer {

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
    const auto& tables = byte_level_tables();
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

/// Metaspace's prepend_scheme: when a "▁" goes in front of a piece that does not start with one.
enum class PrependScheme { always, first, never };

/// The options Metaspace shares between its pre-tokenizer and decoder forms.
struct MetaspaceOptions {
  std::string replacement = "\u2581";  ///< one character, UTF-8
  PrependScheme prepend_scheme = PrependScheme::always;
  bool split = true;

  /// Reads the fields as tokenizers does: prepend_scheme defaults to "always"; a legacy
  /// add_prefix_space=false must come with prepend_scheme "never"; split defaults to true.
  static MetaspaceOptions from_json(const nlohmann::json& json, std::string_view where) {
    MetaspaceOptions options;
    const auto replacement = json.find("replacement");
    VERL_CHECK_ARG(replacement != json.end() && replacement->is_string(),
                   "tokenizer.json {} Metaspace.replacement: expected a one-character string", where);
    options.replacement = replacement->get<std::string>();
    VERL_CHECK_ARG(detail::is_single_code_point(options.replacement),
                   "tokenizer.json {} Metaspace.replacement: expected one character, got \"{}\"", where,
                   options.replacement);
    if (const auto scheme = json.find("prepend_scheme"); scheme != json.end() && !scheme->is_null()) {
      const std::string name = scheme->is_string() ? scheme->get<std::string>() : scheme->dump();
      if (name == "always") {
        options.prepend_scheme = PrependScheme::always;
      } else if (name == "first") {
        options.prepend_scheme = PrependScheme::first;
      } else if (name == "never") {
        options.prepend_scheme = PrependScheme::never;
      } else {
        ::verl::detail::throw_invalid_argument(
            "tokenizer.json {} Metaspace.prepend_scheme: expected \"first\", \"always\" or \"never\", got {}", where,
            scheme->dump());
      }
    }
    if (const auto add = json.find("add_prefix_space"); add != json.end() && !add->is_null()) {
      VERL_CHECK_ARG(add->is_boolean(), "tokenizer.json {} Metaspace.add_prefix_space: expected a boolean", where);
      VERL_CHECK_ARG(add->get<bool>() || options.prepend_scheme == PrependScheme::never,
                     "tokenizer.json {} Metaspace: add_prefix_space false does not match prepend_scheme (expected "
                     "\"never\")",
                     where);
    }
    if (const auto split = json.find("split"); split != json.end() && !split->is_null()) {
      VERL_CHECK_ARG(split->is_boolean(), "tokenizer.json {} Metaspace.split: expected a boolean", where);
      options.split = split->get<bool>();
    }
    return options;
  }
};

/// Metaspace: every ' ' becomes the replacement ("▁"), one is prepended as prepend_scheme says
/// ("first": only to the piece at the very start of the input, not to text after an added
/// token), then, with split, the piece is cut before each replacement character.
struct MetaspaceStep {
  MetaspaceOptions options;

  /// Calls emit(word) for each resulting word (the view is valid during the call only).
  /// `at_text_start`: whether the piece begins at offset 0 of the text being encoded.
  template <class Emit>
  void run(std::string_view piece, bool at_text_start, Emit&& emit) const {
    const std::string_view replacement = options.replacement;
    std::string out;
    out.reserve(piece.size() + 2 * replacement.size());
    const bool prepend = !piece.starts_with(replacement) && !piece.starts_with(' ') &&
                         (options.prepend_scheme == PrependScheme::always ||
                          (options.prepend_scheme == PrependScheme::first && at_text_start));
    if (prepend) out.append(replacement);
    for (const char c : piece) {
      if (c == ' ') {
        out.append(replacement);
      } else {
        out.push_back(c);
      }
    }
    if (!options.split) {
      emit(std::string_view(out));
      return;
    }
    // Split before each replacement character, which starts the next piece (MergedWithNext).
    const std::string_view text = out;
    std::size_t begin = 0;
    for (std::size_t at = text.find(replacement, 1); at != std::string_view::npos;
         at = text.find(replacement, at + replacement.size())) {
      emit(text.substr(begin, at - begin));
      begin = at;
    }
    if (begin < text.size()) emit(text.substr(begin));
  }
};

class PreTokenizer {
 public:
  using Step = std::variant<SplitStep, ByteLevelStep, MetaspaceStep>;

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
  /// during the call only. `at_text_start`: whether `text` begins at offset 0 of the input (false
  /// for text after an added token), which Metaspace's prepend_scheme "first" looks at.
  template <class OnWord>
  void run(std::string_view text, OnWord&& on_word, bool at_text_start = true) const {
    if (text.empty()) return;
    if (steps_.empty()) {
      on_word(text);
      return;
    }
    // Pieces between steps are views: into `text` or into strings a step produced, kept in a
    // deque (stable addresses) until the last step has run. Only the first piece can begin at
    // the start of the input: it does while no step has cut anything off the front.
    std::vector<std::string_view> current{text};
    std::vector<std::string_view> next;
    std::deque<std::string> produced;
    bool first_at_start = at_text_start;
    for (std::size_t k = 0; k < steps_.size(); ++k) {
      const bool last = k + 1 == steps_.size();
      for (std::size_t i = 0; i < current.size(); ++i) {
        const std::string_view piece = current[i];
        const bool piece_at_start = i == 0 && first_at_start;
        std::visit(
            [&](const auto& step) {
              using StepType = std::decay_t<decltype(step)>;
              auto call = [&](auto&& emit) {
                if constexpr (std::is_same_v<StepType, MetaspaceStep>) {
                  step.run(piece, piece_at_start, emit);
                } else {
                  step.run(piece, emit);
                }
              };
              if (last) {
                call(on_word);
              } else if constexpr (std::is_same_v<StepType, SplitStep>) {
                call([&](std::string_view word) { next.push_back(word); });
                // Split's pieces are views into `piece`; the first starts the input unless a prefix was dropped.
                if (piece_at_start) first_at_start = !next.empty() && next.front().data() == piece.data();
              } else {
                // ByteLevel and Metaspace keep all of a piece, so their first word starts where it does.
                call([&](std::string_view word) { next.push_back(produced.emplace_back(word)); });
                if (piece_at_start) first_at_start = !next.empty();
              }
            },
            steps_[k]);
      }
      std::swap(current, next);
      next.clear();
    }
  }

  /// The words of `text` as strings (tests, debugging).
  [[nodiscard]] std::vector<std::string> words(std::string_view text, bool at_text_start = true) const {
    std::vector<std::string> out;
    run(text, [&](std::string_view word) { out.emplace_back(word); }, at_text_start);
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
    } else if (type == "Metaspace") {
      steps_.emplace_back(MetaspaceStep{MetaspaceOptions::from_json(json, "pre_tokenizer")});
    } else {
      ::verl::detail::throw_not_implemented(
          "tokenizer.json pre_tokenizer: type '{}' is not supported (supported: ByteLevel, Split, Metaspace, "
          "Sequence)",
          type);
    }
  }

  std::vector<Step> steps_;
};

}  // namespace verl::tokenizer
