// Added tokens of a tokenizer.json ("added_tokens"): special tokens such as <|im_start|> and
// user-added tokens, which are cut out of the text before pre-tokenization.
//
// Matching follows tokenizers' AddedVocabulary: the leftmost-longest occurrence wins; tokens
// with normalized=false are matched on the raw text first, the others on the normalized
// remainder; single_word, lstrip and rstrip refine a match exactly as there.
#pragma once

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "verl/core/error.hpp"
#include "verl/tokenizer/bpe_model.hpp"
#include "verl/tokenizer/detail/pcre2_regex.hpp"
#include "verl/tokenizer/detail/unicode.hpp"

namespace verl::tokenizer {

/// One entry of tokenizer.json's "added_tokens".
struct AddedToken {
  std::int32_t id = 0;
  std::string content;
  bool single_word = false;  ///< only match when not inside a word
  bool lstrip = false;       ///< swallow the white space on its left
  bool rstrip = false;       ///< swallow the white space on its right
  bool normalized = true;    ///< match against normalized text (false: raw text)
  bool special = false;      ///< skipped by decode(skip_special_tokens=true)
};

/// A piece of input after the added tokens are cut out: either text or one added token's id.
struct TextSegment {
  std::string_view text;
  std::int32_t added_token_id = -1;  ///< -1 for plain text
  [[nodiscard]] bool is_added_token() const { return added_token_id >= 0; }
};

namespace detail {

/// Rust regex `\w` (Unicode word character), for single_word tokens.
inline bool is_word_character(char32_t cp) {
  if (cp < 0x80) return (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || cp == '_';
  static const Pcre2Regex word("^[\\p{L}\\p{M}\\p{Nd}\\p{Nl}\\p{Pc}\\x{200C}\\x{200D}]$");
  std::string text;
  append_utf8(text, cp);
  bool matched = false;
  word.for_each_match(text, [&](std::size_t, std::size_t) { matched = true; });
  return matched;
}

/// Leftmost-longest multi-pattern matching over bytes with a byte trie: at each position the
/// walk follows the text as far as the trie goes and keeps the last complete pattern, so a
/// position costs about one lookup however many added tokens there are.
class AddedTokenMatcher {
 public:
  static constexpr std::size_t no_pattern = static_cast<std::size_t>(-1);

  AddedTokenMatcher() { nodes_.push_back(Node{}); }

  void add(std::string_view pattern, std::size_t token_index) {
    if (pattern.empty()) return;
    std::uint32_t node = 0;
    for (const char c : pattern) {
      const auto key = edge_key(node, static_cast<unsigned char>(c));
      const auto found = edges_.find(key);
      if (found != edges_.end()) {
        node = found->second;
      } else {
        const auto child = static_cast<std::uint32_t>(nodes_.size());
        nodes_.push_back(Node{});
        edges_.emplace(key, child);
        node = child;
      }
    }
    if (nodes_[node].pattern == no_pattern) nodes_[node].pattern = token_index;
    first_bytes_[static_cast<unsigned char>(pattern[0])] = true;
  }
  [[nodiscard]] bool empty() const { return nodes_.size() == 1; }

  /// Calls on_match(begin, end, token_index) for successive non-overlapping leftmost-longest matches.
  template <class OnMatch>
  void for_each_match(std::string_view text, OnMatch&& on_match) const {
    std::size_t pos = 0;
    while (pos < text.size()) {
      if (!first_bytes_[static_cast<unsigned char>(text[pos])]) {
        ++pos;
        continue;
      }
      std::uint32_t node = 0;
      std::size_t best_end = 0;
      std::size_t best_pattern = no_pattern;
      for (std::size_t at = pos; at < text.size(); ++at) {
        const auto found = edges_.find(edge_key(node, static_cast<unsigned char>(text[at])));
        if (found == edges_.end()) break;
        node = found->second;
        if (nodes_[node].pattern != no_pattern) {
          best_pattern = nodes_[node].pattern;
          best_end = at + 1;
        }
      }
      if (best_pattern == no_pattern) {
        ++pos;
        continue;
      }
      on_match(pos, best_end, best_pattern);
      pos = best_end;
    }
  }

 private:
  struct Node {
    std::size_t pattern = no_pattern;  ///< index of the token ending here
  };
  static std::uint64_t edge_key(std::uint32_t node, unsigned char byte) {
    return (static_cast<std::uint64_t>(node) << 8) | byte;
  }

  std::vector<Node> nodes_;
  std::unordered_map<std::uint64_t, std::uint32_t> edges_;
  std::array<bool, 256> first_bytes_{};
};

}  // namespace detail

class AddedVocabulary {
 public:
  AddedVocabulary() = default;

  /// Reads "added_tokens" (a list of objects with id, content and the matching flags).
  /// `normalize` maps a token's content to its normalized spelling (for normalized tokens).
  template <class Normalize>
  static AddedVocabulary from_json(const nlohmann::json& list, Normalize&& normalize) {
    AddedVocabulary vocabulary;
    if (list.is_null()) return vocabulary;
    VERL_CHECK_ARG(list.is_array(), "tokenizer.json added_tokens: expected a list, got {}", list.type_name());
    for (const auto& item : list) {
      VERL_CHECK_ARG(item.is_object() && item.contains("id") && item["id"].is_number_integer() &&
                         item.contains("content") && item["content"].is_string(),
                     "tokenizer.json added_tokens: expected objects with an integer 'id' and a string 'content', "
                     "got {}",
                     item.dump());
      AddedToken token;
      token.id = item["id"].get<std::int32_t>();
      VERL_CHECK_ARG(token.id >= 0, "tokenizer.json added_tokens: id of '{}' must be >= 0, got {}",
                     item["content"].get<std::string>(), token.id);
      token.content = item["content"].get<std::string>();
      token.single_word = item.value("single_word", false);
      token.lstrip = item.value("lstrip", false);
      token.rstrip = item.value("rstrip", false);
      token.special = item.value("special", false);
      token.normalized = item.value("normalized", !token.special);
      vocabulary.add(std::move(token), normalize);
    }
    return vocabulary;
  }

  [[nodiscard]] bool empty() const { return tokens_.empty(); }
  [[nodiscard]] const std::vector<AddedToken>& tokens() const { return tokens_; }
  /// Largest id + 1 (0 when empty).
  [[nodiscard]] std::size_t id_space() const { return id_space_; }

  [[nodiscard]] const AddedToken* find(std::int64_t id) const {
    const auto found = by_id_.find(id);
    return found == by_id_.end() ? nullptr : &tokens_[found->second];
  }
  [[nodiscard]] std::optional<std::int32_t> token_to_id(std::string_view content) const {
    const auto found = by_content_.find(content);
    return found == by_content_.end() ? std::nullopt : std::optional(tokens_[found->second].id);
  }
  /// Whether a token string is a special token's content (decode skips it by content, like
  /// tokenizers does).
  [[nodiscard]] bool is_special_content(std::string_view content) const {
    return special_contents_.contains(content);
  }
  /// The spelling a token decodes from: its normalized form for normalized tokens.
  [[nodiscard]] const std::string& decode_form(const AddedToken& token) const {
    const auto found = normalized_forms_.find(token.id);
    return found == normalized_forms_.end() ? token.content : found->second;
  }

  /// Cuts the added tokens out of `text`: raw-text tokens (normalized=false) when
  /// `normalized_pass` is false, normalized tokens on already-normalized text otherwise.
  void split(std::string_view text, bool normalized_pass, std::vector<TextSegment>& out) const {
    const auto& matcher = normalized_pass ? normalized_matcher_ : raw_matcher_;
    if (text.empty()) return;
    if (matcher.empty()) {
      out.push_back(TextSegment{text, -1});
      return;
    }
    std::size_t start_offset = 0;
    matcher.for_each_match(text, [&](std::size_t start, std::size_t stop, std::size_t index) {
      const AddedToken& token = tokens_[index];
      if (token.single_word) {
        std::size_t unused = 0;
        const bool space_before = start == 0 || !detail::is_word_character(detail::previous_code_point(text, start, unused));
        std::size_t after = stop;
        const bool space_after = stop == text.size() || !detail::is_word_character(detail::next_code_point(text, after));
        if (!space_before || !space_after) return;
      }
      if (token.lstrip) {
        std::size_t new_start = start;
        while (new_start > 0) {
          std::size_t previous = 0;
          if (!detail::is_white_space(detail::previous_code_point(text, new_start, previous))) break;
          new_start = previous;
        }
        // White space an earlier match already took stays with it.
        start = std::max(new_start, start_offset);
      }
      if (token.rstrip) {
        while (stop < text.size()) {
          std::size_t next = stop;
          if (!detail::is_white_space(detail::next_code_point(text, next))) break;
          stop = next;
        }
      }
      if (start_offset < start) out.push_back(TextSegment{text.substr(start_offset, start - start_offset), -1});
      out.push_back(TextSegment{text.substr(start, stop - start), token.id});
      start_offset = stop;
    });
    if (start_offset < text.size()) out.push_back(TextSegment{text.substr(start_offset), -1});
  }

 private:
  template <class Normalize>
  void add(AddedToken token, Normalize&& normalize) {
    if (token.content.empty()) return;
    VERL_CHECK_ARG(!by_id_.contains(token.id), "tokenizer.json added_tokens: id {} appears twice", token.id);
    const std::size_t index = tokens_.size();
    if (token.normalized) {
      std::string normalized = normalize(token.content);
      normalized_matcher_.add(normalized, index);
      if (normalized != token.content) normalized_forms_.emplace(token.id, std::move(normalized));
    } else {
      raw_matcher_.add(token.content, index);
    }
    if (token.special) special_contents_.insert(token.content);
    by_id_.emplace(token.id, index);
    by_content_.emplace(token.content, index);
    id_space_ = std::max(id_space_, static_cast<std::size_t>(token.id) + 1);
    tokens_.push_back(std::move(token));
  }

  std::vector<AddedToken> tokens_;
  std::unordered_map<std::int64_t, std::size_t> by_id_;
  std::unordered_map<std::int32_t, std::string> normalized_forms_;
  std::unordered_set<std::string, detail::StringHash, std::equal_to<>> special_contents_;
  std::unordered_map<std::string, std::size_t, detail::StringHash, std::equal_to<>> by_content_;
  detail::AddedTokenMatcher raw_matcher_;
  detail::AddedTokenMatcher normalized_matcher_;
  std::size_t id_space_ = 0;
};

}  // namespace verl::tokenizer
