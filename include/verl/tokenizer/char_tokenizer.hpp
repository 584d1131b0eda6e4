// A character-level tokenizer for small built-in tasks (arithmetic, copying, sorting): one token
// per character of a fixed alphabet plus the special tokens pad, bos and eos. Satisfies the same
// Tokenizer concept as the Hugging Face tokenizer, so tiny models and tasks run end to end
// without a tokenizer.json.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "verl/core/error.hpp"
#include "verl/tokenizer/concept.hpp"
#include "verl/tokenizer/detail/unicode.hpp"

namespace verl::tokenizer {

class CharTokenizer {
 public:
  static constexpr std::string_view name = "char";
  static constexpr TokenId pad_id = 0;
  static constexpr TokenId bos_id = 1;
  static constexpr TokenId eos_id = 2;
  static constexpr TokenId first_char_id = 3;
  /// How decode(skip_special_tokens=false) spells the special tokens.
  static constexpr std::array<std::string_view, 3> special_spellings = {"<pad>", "<bos>", "<eos>"};

  /// `alphabet` is UTF-8; character k gets id first_char_id + k. Duplicates are an error.
  explicit CharTokenizer(std::string_view alphabet) {
    if (const auto invalid = detail::find_invalid_utf8(alphabet)) {
      ::verl::detail::throw_invalid_argument("alphabet: expected valid UTF-8, got an invalid byte at offset {}",
                                             *invalid);
    }
    VERL_CHECK_ARG(!alphabet.empty(), "alphabet: expected at least one character, got an empty string");
    ascii_ids_.fill(-1);
    for (std::size_t pos = 0; pos < alphabet.size();) {
      const std::size_t begin = pos;
      const char32_t cp = detail::next_code_point(alphabet, pos);
      VERL_CHECK_ARG(!char_to_id(cp).has_value(), "alphabet: character '{}' appears twice (at byte {})",
                     alphabet.substr(begin, pos - begin), begin);
      const TokenId id = first_char_id + static_cast<TokenId>(spellings_.size());
      if (cp < 128) {
        ascii_ids_[cp] = id;
      } else {
        other_ids_.emplace(cp, id);
      }
      spellings_.emplace_back(alphabet.substr(begin, pos - begin));
    }
  }

  /// Digits, arithmetic operators, '=' and space: enough for GSM8K-style toy arithmetic.
  static CharTokenizer arithmetic() { return CharTokenizer("0123456789+-*/=()., "); }
  /// Printable ASCII (space to '~') plus newline.
  static CharTokenizer printable_ascii() {
    std::string alphabet = "\n";
    for (char c = ' '; c <= '~'; ++c) alphabet += c;
    return CharTokenizer(alphabet);
  }

  /// One id per character; with add_special_tokens, bos first (a prompt: eos is for the model to
  /// produce). A character outside the alphabet is an error naming it and its offset.
  [[nodiscard]] std::vector<TokenId> encode(std::string_view text, bool add_special_tokens = true) const {
    if (const auto invalid = detail::find_invalid_utf8(text)) {
      ::verl::detail::throw_invalid_argument("text: expected valid UTF-8, got an invalid byte at offset {}", *invalid);
    }
    std::vector<TokenId> ids;
    ids.reserve(text.size() + 1);
    if (add_special_tokens) ids.push_back(bos_id);
    for (std::size_t pos = 0; pos < text.size();) {
      const std::size_t begin = pos;
      const char32_t cp = detail::next_code_point(text, pos);
      const auto id = char_to_id(cp);
      VERL_CHECK_ARG(id.has_value(), "text: character '{}' (U+{:04X}) at byte {} is not in the tokenizer's alphabet",
                     text.substr(begin, pos - begin), static_cast<std::uint32_t>(cp), begin);
      ids.push_back(*id);
    }
    return ids;
  }

  /// The characters of `ids`; pad/bos/eos are dropped with skip_special_tokens, else spelled
  /// <pad>, <bos>, <eos>. An id outside [0, vocab_size) is an error.
  [[nodiscard]] std::string decode(std::span<const TokenId> ids, bool skip_special_tokens = true) const {
    std::string text;
    text.reserve(ids.size());
    for (std::size_t i = 0; i < ids.size(); ++i) {
      const TokenId id = ids[i];
      VERL_CHECK_ARG(id >= 0 && static_cast<std::size_t>(id) < vocab_size(),
                     "ids[{}]: expected a token id in [0, {}), got {}", i, vocab_size(), id);
      if (id < first_char_id) {
        if (!skip_special_tokens) text += special_spellings[static_cast<std::size_t>(id)];
        continue;
      }
      text += spellings_[static_cast<std::size_t>(id - first_char_id)];
    }
    return text;
  }

  [[nodiscard]] std::size_t vocab_size() const { return static_cast<std::size_t>(first_char_id) + spellings_.size(); }
  [[nodiscard]] SpecialTokenIds special_ids() const { return {bos_id, eos_id, pad_id}; }

  [[nodiscard]] std::optional<TokenId> char_to_id(char32_t cp) const {
    if (cp < 128) return ascii_ids_[cp] >= 0 ? std::optional(ascii_ids_[cp]) : std::nullopt;
    const auto found = other_ids_.find(cp);
    return found == other_ids_.end() ? std::nullopt : std::optional(found->second);
  }

 private:
  std::array<TokenId, 128> ascii_ids_{};
  std::unordered_map<char32_t, TokenId> other_ids_;
  std::vector<std::string> spellings_;  ///< UTF-8 of each alphabet character, by id - first_char_id
};

static_assert(Tokenizer<CharTokenizer>);

}  // namespace verl::tokenizer
