// UTF-8 code points over std::string_view, so that lengths, indices and slices mean what they
// mean on a Python `str` (verl clips solutions to their last 300 *characters*).
//
// Ill-formed input follows Python's `surrogateescape` model: a byte that does not begin a
// well-formed sequence is one code point on its own (U+DC80 + byte). Every byte string thus has a
// defined length and slicing never splits a well-formed character; on valid UTF-8 the result is
// exactly Python's. (One difference remains on ill-formed input: an edit that removes the text
// between two stray bytes can join them into a well-formed sequence, where Python keeps two
// escaped characters.)
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "verl/core/utf8.hpp"

namespace verl::reward::detail::utf8 {

/// One decoded code point and the number of bytes it occupies.
struct Decoded {
  char32_t code_point;
  std::uint8_t length;
};

/// Code points U+DC80..U+DCFF stand for single undecodable bytes (Python's surrogateescape).
inline constexpr char32_t escaped_byte_base = 0xDC00;

constexpr bool is_continuation(unsigned char byte) { return (byte & 0xC0) == 0x80; }

/// Decodes the code point starting at byte `pos` (< s.size()). Well-formedness is Unicode's
/// Table 3-7 (no overlongs, no surrogates, nothing above U+10FFFF), as CPython's decoder checks.
constexpr Decoded decode(std::string_view s, std::size_t pos) {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char lead = byte(pos);
  if (lead < 0x80) return {lead, 1};
  const std::size_t left = s.size() - pos;
  const auto in = [](unsigned char b, unsigned char lo, unsigned char hi) { return b >= lo && b <= hi; };
  const Decoded escaped{escaped_byte_base + lead, 1};
  if (in(lead, 0xC2, 0xDF)) {
    if (left < 2 || !is_continuation(byte(pos + 1))) return escaped;
    return {static_cast<char32_t>(((lead & 0x1F) << 6) | (byte(pos + 1) & 0x3F)), 2};
  }
  if (in(lead, 0xE0, 0xEF)) {
    if (left < 3) return escaped;
    const unsigned char b1 = byte(pos + 1);
    const unsigned char lo = lead == 0xE0 ? 0xA0 : 0x80;
    const unsigned char hi = lead == 0xED ? 0x9F : 0xBF;
    if (!in(b1, lo, hi) || !is_continuation(byte(pos + 2))) return escaped;
    return {static_cast<char32_t>(((lead & 0x0F) << 12) | ((b1 & 0x3F) << 6) | (byte(pos + 2) & 0x3F)), 3};
  }
  if (in(lead, 0xF0, 0xF4)) {
    if (left < 4) return escaped;
    const unsigned char b1 = byte(pos + 1);
    const unsigned char lo = lead == 0xF0 ? 0x90 : 0x80;
    const unsigned char hi = lead == 0xF4 ? 0x8F : 0xBF;
    if (!in(b1, lo, hi) || !is_continuation(byte(pos + 2)) || !is_continuation(byte(pos + 3))) return escaped;
    return {static_cast<char32_t>(((lead & 0x07) << 18) | ((b1 & 0x3F) << 12) | ((byte(pos + 2) & 0x3F) << 6) |
                                  (byte(pos + 3) & 0x3F)),
            4};
  }
  return escaped;
}

/// Byte length of the code point starting at `pos` (< s.size()).
constexpr std::size_t length_at(std::string_view s, std::size_t pos) {
  return static_cast<unsigned char>(s[pos]) < 0x80 ? 1 : decode(s, pos).length;
}

/// Byte offset reached after stepping over `n` code points from `pos` (s.size() if fewer remain).
constexpr std::size_t advance(std::string_view s, std::size_t pos, std::size_t n) {
  while (n > 0 && pos < s.size()) {
    pos += length_at(s, pos);
    --n;
  }
  return pos < s.size() ? pos : s.size();
}

/// Number of code points in `s` (Python's len()).
constexpr std::size_t length(std::string_view s) {
  std::size_t count = 0;
  for (std::size_t pos = 0; pos < s.size(); pos += length_at(s, pos)) ++count;
  return count;
}

/// True when `s` has at most `n` code points; stops early instead of counting all of `s`.
constexpr bool length_at_most(std::string_view s, std::size_t n) {
  if (s.size() <= n) return true;  // a code point takes at least one byte
  return advance(s, 0, n) == s.size();
}

/// Start of the code point that ends at byte `end` (> 0, a code point boundary). Its lead byte
/// can only be the nearest non-continuation byte at most 3 bytes back, and only if the sequence
/// it starts ends exactly at `end`; otherwise the last byte is a stray byte of its own.
constexpr std::size_t previous_boundary(std::string_view s, std::size_t end) {
  if (!is_continuation(static_cast<unsigned char>(s[end - 1]))) return end - 1;
  std::size_t lead = end - 1;
  while (lead > 0 && end - lead < 4 && is_continuation(static_cast<unsigned char>(s[lead]))) --lead;
  if (!is_continuation(static_cast<unsigned char>(s[lead])) && decode(s, lead).length == end - lead) return lead;
  return end - 1;
}

/// Byte offset where the last `n` code points of `s` begin (Python's s[-n:]); reads only them.
constexpr std::size_t tail_offset(std::string_view s, std::size_t n) {
  if (s.size() <= n) return 0;  // a code point takes at least one byte
  std::size_t pos = s.size();
  for (; n > 0 && pos > 0; --n) pos = previous_boundary(s, pos);
  return pos;
}

/// Appends the UTF-8 encoding of `code_point`; an escaped byte (U+DC80..U+DCFF) is written back
/// as the raw byte it stands for.
inline void append(std::string& out, char32_t code_point) {
  if (code_point >= escaped_byte_base + 0x80 && code_point <= escaped_byte_base + 0xFF) {
    out.push_back(static_cast<char>(code_point - escaped_byte_base));
  } else {
    append_utf8(out, code_point);
  }
}

}  // namespace verl::reward::detail::utf8
