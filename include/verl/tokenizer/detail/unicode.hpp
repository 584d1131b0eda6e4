// UTF-8 and the few Unicode predicates the tokenizers need that PCRE2 does not answer directly.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "verl/core/utf8.hpp"

namespace verl::tokenizer::detail {

/// Decodes the code point at `pos` of valid UTF-8 and advances `pos` past it.
inline char32_t next_code_point(std::string_view text, std::size_t& pos) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[pos + k]); };
  const unsigned char lead = byte(0);
  char32_t cp;
  if (lead < 0x80) {
    cp = lead;
    pos += 1;
  } else if (lead < 0xE0) {
    cp = (static_cast<char32_t>(lead & 0x1F) << 6) | (byte(1) & 0x3F);
    pos += 2;
  } else if (lead < 0xF0) {
    cp = (static_cast<char32_t>(lead & 0x0F) << 12) | (static_cast<char32_t>(byte(1) & 0x3F) << 6) | (byte(2) & 0x3F);
    pos += 3;
  } else {
    cp = (static_cast<char32_t>(lead & 0x07) << 18) | (static_cast<char32_t>(byte(1) & 0x3F) << 12) |
         (static_cast<char32_t>(byte(2) & 0x3F) << 6) | (byte(3) & 0x3F);
    pos += 4;
  }
  return cp;
}

/// Byte length of the UTF-8 sequence starting with `lead` (valid UTF-8 assumed).
constexpr std::size_t utf8_length(unsigned char lead) {
  return lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
}

/// The code point before `pos` of valid UTF-8 (pos > 0), and its start in `start`.
inline char32_t previous_code_point(std::string_view text, std::size_t pos, std::size_t& start) {
  start = pos - 1;
  while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
  std::size_t at = start;
  return next_code_point(text, at);
}

using ::verl::append_utf8;

/// For the lead byte of a multi-byte sequence: its length and the valid range of the second
/// byte (which excludes overlong forms, surrogates and code points past U+10FFFF). Length 0 for
/// a byte that cannot start a sequence.
struct Utf8Lead {
  std::size_t length;
  unsigned char second_min;
  unsigned char second_max;
};
constexpr Utf8Lead utf8_lead(unsigned char lead) {
  if (lead >= 0xC2 && lead <= 0xDF) return {2, 0x80, 0xBF};
  if (lead == 0xE0) return {3, 0xA0, 0xBF};
  if ((lead >= 0xE1 && lead <= 0xEC) || lead == 0xEE || lead == 0xEF) return {3, 0x80, 0xBF};
  if (lead == 0xED) return {3, 0x80, 0x9F};
  if (lead == 0xF0) return {4, 0x90, 0xBF};
  if (lead >= 0xF1 && lead <= 0xF3) return {4, 0x80, 0xBF};
  if (lead == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};
}

/// Length of the valid UTF-8 sequence at `pos`, or, when it is invalid, the length of its
/// maximal valid prefix as a negative number (at least one byte).
inline std::ptrdiff_t utf8_sequence_at(std::string_view bytes, std::size_t pos) {
  const auto lead = static_cast<unsigned char>(bytes[pos]);
  if (lead < 0x80) return 1;
  const Utf8Lead info = utf8_lead(lead);
  if (info.length == 0) return -1;
  std::size_t end = pos + 1;
  if (end >= bytes.size()) return -1;
  const auto second = static_cast<unsigned char>(bytes[end]);
  if (second < info.second_min || second > info.second_max) return -1;
  ++end;
  for (std::size_t k = 2; k < info.length; ++k, ++end) {
    if (end >= bytes.size() || (static_cast<unsigned char>(bytes[end]) & 0xC0) != 0x80) {
      return -static_cast<std::ptrdiff_t>(end - pos);
    }
  }
  return static_cast<std::ptrdiff_t>(info.length);
}

/// Offset of the first byte that is not valid UTF-8, or nullopt when all of it is valid.
inline std::optional<std::size_t> find_invalid_utf8(std::string_view bytes) {
  std::size_t pos = 0;
  while (pos < bytes.size()) {
    if (static_cast<unsigned char>(bytes[pos]) < 0x80) {
      ++pos;
      continue;
    }
    const auto length = utf8_sequence_at(bytes, pos);
    if (length < 0) return pos;
    pos += static_cast<std::size_t>(length);
  }
  return std::nullopt;
}

/// Whether `text` is valid UTF-8 holding exactly one code point (a Rust `char` in tokenizer.json).
inline bool is_single_code_point(std::string_view text) {
  return !text.empty() && !find_invalid_utf8(text) && utf8_length(static_cast<unsigned char>(text[0])) == text.size();
}

/// Bytes to text, replacing each maximal invalid subsequence by U+FFFD: what Rust's
/// String::from_utf8_lossy (the tokenizers decoders) and Python's errors="replace" produce.
inline std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  std::size_t pos = 0;
  while (pos < bytes.size()) {
    const auto length = utf8_sequence_at(bytes, pos);
    if (length > 0) {
      out.append(bytes.substr(pos, static_cast<std::size_t>(length)));
      pos += static_cast<std::size_t>(length);
    } else {
      out.append("\xEF\xBF\xBD");
      pos += static_cast<std::size_t>(-length);
    }
  }
  return out;
}

/// Unicode White_Space: what Oniguruma's and Rust regex's `\s` match.
constexpr bool is_white_space(char32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
         cp == 0x3000;
}

/// Python's str.isspace (what Jinja's `trim` strips): White_Space plus the information
/// separators U+001C..U+001F.
constexpr bool is_python_space(char32_t cp) { return is_white_space(cp) || (cp >= 0x1C && cp <= 0x1F); }

/// Python's str.strip() on valid UTF-8.
inline std::string_view python_strip(std::string_view text) {
  std::size_t begin = 0;
  while (begin < text.size()) {
    std::size_t next = begin;
    if (!is_python_space(next_code_point(text, next))) break;
    begin = next;
  }
  std::size_t end = text.size();
  while (end > begin) {
    std::size_t start = 0;
    if (!is_python_space(previous_code_point(text, end, start))) break;
    end = start;
  }
  return text.substr(begin, end - begin);
}

}  // namespace verl::tokenizer::detail
