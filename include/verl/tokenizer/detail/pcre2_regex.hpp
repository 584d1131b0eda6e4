// Unicode regular expressions through PCRE2 (link verl::pcre2), with the match semantics of the
// Oniguruma engine that Hugging Face tokenizers use for Split and ByteLevel patterns.
//
// Patterns in tokenizer.json are Oniguruma syntax. For the constructs tokenizer patterns use the
// two engines agree, except for a few escapes that we rewrite before compiling:
//   \s \S   Oniguruma: Unicode White_Space (includes U+0085); PCRE2's set differs by version
//   \h \H   Oniguruma (Ruby syntax): hexadecimal digit; PCRE2: horizontal space
//   \w \W   Oniguruma: letters, marks, numbers, connector punctuation; PCRE2 10.42: no marks
#pragma once

#ifndef PCRE2_CODE_UNIT_WIDTH
#define PCRE2_CODE_UNIT_WIDTH 8
#endif
#include <pcre2.h>

#include <fmt/format.h>

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "verl/core/error.hpp"
#include "verl/tokenizer/detail/unicode.hpp"

namespace verl::tokenizer::detail {

inline constexpr std::string_view white_space_items =
    "\\t-\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}";
inline constexpr std::string_view word_items = "\\p{L}\\p{M}\\p{N}\\p{Pc}";
inline constexpr std::string_view hex_items = "0-9a-fA-F";

/// Rewrites an Oniguruma pattern into PCRE2 syntax with the same meaning (see the file comment).
inline std::string oniguruma_to_pcre2(std::string_view pattern) {
  std::string out;
  out.reserve(pattern.size() + 64);
  bool in_class = false;
  bool class_just_opened = false;  // a ']' right after '[' or '[^' is a literal
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char e = pattern[++i];
      class_just_opened = false;
      std::string_view items;
      bool negated = false;
      switch (e) {
        case 's': items = white_space_items; break;
        case 'S': items = white_space_items, negated = true; break;
        case 'w': items = word_items; break;
        case 'W': items = word_items, negated = true; break;
        case 'h': items = hex_items; break;
        case 'H': items = hex_items, negated = true; break;
        default:
          out += '\\';
          out += e;
          continue;
      }
      if (in_class) {
        if (negated) {
          ::verl::detail::throw_not_implemented(
              "pattern: a negated class escape \\{} inside [...] is not supported, in '{}'", e, pattern);
        }
        out += items;
      } else {
        out += negated ? "[^" : "[";
        out += items;
        out += ']';
      }
      continue;
    }
    if (in_class) {
      if (c == ']' && !class_just_opened) {
        in_class = false;
      } else if (c == '[' && !(i + 1 < pattern.size() && pattern[i + 1] == ':')) {
        ::verl::detail::throw_not_implemented("pattern: nested character classes are not supported, in '{}'", pattern);
      }
      class_just_opened = class_just_opened && c == '^' && out.back() == '[';
      out += c;
      continue;
    }
    if (c == '[') {
      in_class = true;
      class_just_opened = true;
    }
    out += c;
  }
  return out;
}

/// A compiled PCRE2 pattern (UTF-8, Unicode properties, JIT when available). Copies share the
/// compiled code; matching is thread-safe.
class Pcre2Regex {
 public:
  Pcre2Regex() = default;

  /// Compiles a pattern in PCRE2 syntax.
  explicit Pcre2Regex(std::string_view pcre2_pattern, std::string_view shown_as = {}) {
    int error_code = 0;
    PCRE2_SIZE error_offset = 0;
    pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pcre2_pattern.data()), pcre2_pattern.size(),
                                     PCRE2_UTF | PCRE2_UCP, &error_code, &error_offset, nullptr);
    if (code == nullptr) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(error_code, message, sizeof(message));
      ::verl::detail::throw_invalid_argument("pattern: cannot compile '{}': {} at offset {}",
                                             shown_as.empty() ? pcre2_pattern : shown_as,
                                             reinterpret_cast<const char*>(message), error_offset);
    }
    // JIT is an optimization only; the interpreter gives the same matches.
    (void)pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
    code_ = std::shared_ptr<pcre2_code>(code, pcre2_code_free);
  }

  /// Compiles a pattern written for Oniguruma (as in tokenizer.json).
  static Pcre2Regex from_oniguruma(std::string_view pattern) {
    return Pcre2Regex(oniguruma_to_pcre2(pattern), pattern);
  }

  [[nodiscard]] bool valid() const { return code_ != nullptr; }

  /// Calls on_match(begin, end) for successive non-overlapping matches in valid UTF-8, iterating
  /// like Oniguruma's find_iter: an empty match is reported once, the search then resumes one
  /// character later, and an empty match right where the previous match ended is skipped.
  template <class OnMatch>
  void for_each_match(std::string_view subject, OnMatch&& on_match) const {
    Scratch& scratch = scratch_for_this_thread();
    const auto* text = reinterpret_cast<PCRE2_SPTR>(subject.data());
    std::size_t search_from = 0;
    std::size_t previous_end = static_cast<std::size_t>(-1);
    while (search_from <= subject.size()) {
      const int rc = pcre2_match(code_.get(), text, subject.size(), search_from, PCRE2_NO_UTF_CHECK,
                                 scratch.match_data, scratch.context);
      if (rc == PCRE2_ERROR_NOMATCH) return;
      if (rc < 0) {
        PCRE2_UCHAR message[256];
        pcre2_get_error_message(rc, message, sizeof(message));
        ::verl::detail::throw_invalid_argument("text: regular expression matching failed: {}",
                                               reinterpret_cast<const char*>(message));
      }
      const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(scratch.match_data);
      const std::size_t begin = ovector[0];
      const std::size_t end = ovector[1];
      if (begin == end && end == previous_end) {
        search_from = end < subject.size() ? end + utf8_length(static_cast<unsigned char>(subject[end])) : end + 1;
        continue;
      }
      on_match(begin, end);
      search_from = end;
      previous_end = end;
    }
  }

 private:
  /// Per-thread match state: the match data and a JIT stack large enough for long inputs.
  struct Scratch {
    pcre2_match_data* match_data = pcre2_match_data_create(1, nullptr);
    pcre2_match_context* context = pcre2_match_context_create(nullptr);
    pcre2_jit_stack* jit_stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
    Scratch() {
      if (jit_stack != nullptr) pcre2_jit_stack_assign(context, nullptr, jit_stack);
    }
    ~Scratch() {
      pcre2_match_data_free(match_data);
      pcre2_match_context_free(context);
      if (jit_stack != nullptr) pcre2_jit_stack_free(jit_stack);
    }
    Scratch(const Scratch&) = delete;
    Scratch& operator=(const Scratch&) = delete;
  };

  static Scratch& scratch_for_this_thread() {
    thread_local Scratch scratch;
    return scratch;
  }

  std::shared_ptr<pcre2_code> code_;
};

}  // namespace verl::tokenizer::detail
