// Python `str` semantics that verl's reward scorers rely on, over UTF-8 std::string_view:
// str.isspace / re's `\s`, str.isdigit, str.strip(), str.replace, str.split(sep), s[k:] slices
// by code point, and what `str(int(x)) == x` accepts.
//
// Character classes are CPython 3.11's (Unicode 14.0).
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "verl/reward/detail/utf8.hpp"

namespace verl::reward::detail {

struct CodePointRange {
  char32_t first;
  char32_t last;
};

/// Code points for which Python's str.isspace() is true; re's `\s` on str patterns is the same
/// set (both use _PyUnicode_IsWhitespace: bidi class WS, B or S, or category Zs).
inline constexpr std::array<CodePointRange, 10> python_whitespace{{
    {0x09, 0x0D}, {0x1C, 0x20}, {0x85, 0x85}, {0xA0, 0xA0}, {0x1680, 0x1680},
    {0x2000, 0x200A}, {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000},
}};

/// Code points for which Python's str.isdigit() is true: Numeric_Type Decimal or Digit, so
/// superscripts (U+00B2), circled digits (U+2460) and every script's decimal digits count.
inline constexpr std::array<CodePointRange, 81> python_digits{{
    {0x30, 0x39}, {0xB2, 0xB3}, {0xB9, 0xB9}, {0x660, 0x669}, {0x6F0, 0x6F9}, {0x7C0, 0x7C9},
    {0x966, 0x96F}, {0x9E6, 0x9EF}, {0xA66, 0xA6F}, {0xAE6, 0xAEF}, {0xB66, 0xB6F}, {0xBE6, 0xBEF},
    {0xC66, 0xC6F}, {0xCE6, 0xCEF}, {0xD66, 0xD6F}, {0xDE6, 0xDEF}, {0xE50, 0xE59}, {0xED0, 0xED9},
    {0xF20, 0xF29}, {0x1040, 0x1049}, {0x1090, 0x1099}, {0x1369, 0x1371}, {0x17E0, 0x17E9},
    {0x1810, 0x1819}, {0x1946, 0x194F}, {0x19D0, 0x19DA}, {0x1A80, 0x1A89}, {0x1A90, 0x1A99},
    {0x1B50, 0x1B59}, {0x1BB0, 0x1BB9}, {0x1C40, 0x1C49}, {0x1C50, 0x1C59}, {0x2070, 0x2070},
    {0x2074, 0x2079}, {0x2080, 0x2089}, {0x2460, 0x2468}, {0x2474, 0x247C}, {0x2488, 0x2490},
    {0x24EA, 0x24EA}, {0x24F5, 0x24FD}, {0x24FF, 0x24FF}, {0x2776, 0x277E}, {0x2780, 0x2788},
    {0x278A, 0x2792}, {0xA620, 0xA629}, {0xA8D0, 0xA8D9}, {0xA900, 0xA909}, {0xA9D0, 0xA9D9},
    {0xA9F0, 0xA9F9}, {0xAA50, 0xAA59}, {0xABF0, 0xABF9}, {0xFF10, 0xFF19}, {0x104A0, 0x104A9},
    {0x10A40, 0x10A43}, {0x10D30, 0x10D39}, {0x10E60, 0x10E68}, {0x11052, 0x1105A}, {0x11066, 0x1106F},
    {0x110F0, 0x110F9}, {0x11136, 0x1113F}, {0x111D0, 0x111D9}, {0x112F0, 0x112F9}, {0x11450, 0x11459},
    {0x114D0, 0x114D9}, {0x11650, 0x11659}, {0x116C0, 0x116C9}, {0x11730, 0x11739}, {0x118E0, 0x118E9},
    {0x11950, 0x11959}, {0x11C50, 0x11C59}, {0x11D50, 0x11D59}, {0x11DA0, 0x11DA9}, {0x16A60, 0x16A69},
    {0x16AC0, 0x16AC9}, {0x16B50, 0x16B59}, {0x1D7CE, 0x1D7FF}, {0x1E140, 0x1E149}, {0x1E2F0, 0x1E2F9},
    {0x1E950, 0x1E959}, {0x1F100, 0x1F10A}, {0x1FBF0, 0x1FBF9},
}};

template <std::size_t N>
constexpr bool in_ranges(const std::array<CodePointRange, N>& ranges, char32_t cp) {
  const auto it = std::upper_bound(ranges.begin(), ranges.end(), cp,
                                   [](char32_t c, const CodePointRange& r) { return c < r.first; });
  return it != ranges.begin() && cp <= std::prev(it)->last;
}

/// Python's ch.isspace() for one code point, and re's `\s`.
constexpr bool is_python_space(char32_t cp) {
  if (cp < 0x80) return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20);
  return in_ranges(python_whitespace, cp);
}

/// Python's ch.isdigit() for one code point.
constexpr bool is_python_digit(char32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  return in_ranges(python_digits, cp);
}

/// Python's s.isdigit(): at least one code point, all of them digits.
constexpr bool str_isdigit(std::string_view s) {
  if (s.empty()) return false;
  for (std::size_t pos = 0; pos < s.size();) {
    const auto [cp, len] = utf8::decode(s, pos);
    if (!is_python_digit(cp)) return false;
    pos += len;
  }
  return true;
}

/// Byte offset just past the run of Python whitespace starting at `pos`.
constexpr std::size_t skip_python_space(std::string_view s, std::size_t pos) {
  while (pos < s.size()) {
    const auto [cp, len] = utf8::decode(s, pos);
    if (!is_python_space(cp)) break;
    pos += len;
  }
  return pos;
}

/// Python's s.strip() with no argument: removes leading and trailing Unicode whitespace.
constexpr std::string_view strip(std::string_view s) {
  const std::size_t begin = skip_python_space(s, 0);
  std::size_t end = begin;  // just past the last non-space code point
  for (std::size_t pos = begin; pos < s.size();) {
    const auto [cp, len] = utf8::decode(s, pos);
    pos += len;
    if (!is_python_space(cp)) end = pos;
  }
  return s.substr(begin, end - begin);
}

/// The code point starting at byte `pos` (< s.size()), as a view.
constexpr std::string_view code_point_at(std::string_view s, std::size_t pos) {
  return s.substr(pos, utf8::length_at(s, pos));
}

/// Python's s.replace(old, new) in place (`old` non-empty): non-overlapping occurrences, left to
/// right. Allocates nothing when `old` does not occur.
inline void replace_all(std::string& s, std::string_view old_text, std::string_view new_text) {
  std::size_t hit = s.find(old_text);
  if (hit == std::string::npos) return;
  if (old_text.size() == new_text.size()) {
    for (; hit != std::string::npos; hit = s.find(old_text, hit + old_text.size()))
      s.replace(hit, old_text.size(), new_text);
    return;
  }
  std::string out;
  out.reserve(s.size());
  std::size_t done = 0;
  for (; hit != std::string::npos; hit = s.find(old_text, done)) {
    out.append(s, done, hit - done);
    out.append(new_text);
    done = hit + old_text.size();
  }
  out.append(s, done, std::string::npos);
  s = std::move(out);
}

/// Number of non-overlapping occurrences of `needle` (non-empty); s.count(needle).
constexpr std::size_t count(std::string_view s, std::string_view needle) {
  std::size_t n = 0;
  for (std::size_t hit = s.find(needle); hit != std::string_view::npos; hit = s.find(needle, hit + needle.size())) ++n;
  return n;
}

/// Last occurrence of `needle` (non-empty) in `s`, or npos. Scans forward with find(), which
/// skips through memchr, instead of std::string_view::rfind's compare at every position: scorers
/// look for the last \boxed of responses that are thousands of bytes long.
constexpr std::size_t find_last(std::string_view s, std::string_view needle) {
  std::size_t last = std::string_view::npos;
  for (std::size_t hit = s.find(needle); hit != std::string_view::npos; hit = s.find(needle, hit + 1)) last = hit;
  return last;
}

/// string[start..] up to the '}' that closes the braces opened since `start` (verl's counter: a
/// '}' before any '{' drives it negative), or nullopt when they never close.
inline std::optional<std::string> through_closing_brace(std::string_view string, std::size_t start) {
  long open_braces = 0;
  for (std::size_t i = start; i < string.size(); ++i) {
    if (string[i] == '{') ++open_braces;
    if (string[i] == '}' && --open_braces == 0) return std::string(string.substr(start, i + 1 - start));
  }
  return std::nullopt;
}

/// Python's s.split(sep) for a non-empty separator (views into `s`).
inline std::vector<std::string_view> split(std::string_view s, std::string_view sep) {
  std::vector<std::string_view> parts;
  std::size_t begin = 0;
  for (std::size_t hit = s.find(sep); hit != std::string_view::npos; hit = s.find(sep, begin)) {
    parts.push_back(s.substr(begin, hit - begin));
    begin = hit + sep.size();
  }
  parts.push_back(s.substr(begin));
  return parts;
}

/// Python's s[start:] with `start` counted in code points (negative counts from the end).
constexpr std::string_view slice_from(std::string_view s, std::int64_t start) {
  if (start >= 0) return s.substr(utf8::advance(s, 0, static_cast<std::size_t>(start)));
  // -start may not be representable for INT64_MIN; anything beyond the length keeps all of s.
  const std::uint64_t from_end = start == std::numeric_limits<std::int64_t>::min()
                                     ? std::uint64_t{1} << 63
                                     : static_cast<std::uint64_t>(-start);
  if (from_end >= s.size()) return s;  // a code point takes at least one byte
  return s.substr(utf8::tail_offset(s, static_cast<std::size_t>(from_end)));
}

/// Python's s[-n:] for n > 0: the last `n` code points.
constexpr std::string_view last_code_points(std::string_view s, std::size_t n) {
  return s.substr(utf8::tail_offset(s, n));
}

/// CPython's default sys.get_int_max_str_digits(): int() refuses longer decimal strings.
inline constexpr std::size_t python_int_max_str_digits = 4300;

/// True when str(int(x)) == x in Python: int() parses `x` and printing the value gives `x` back.
/// That holds exactly for "0" and for an optional '-' followed by ASCII digits without a leading
/// zero (int() also accepts spaces, '+', '_' and other scripts' digits, but str() never prints
/// them), up to CPython's digit limit.
constexpr bool is_python_int_repr(std::string_view x) {
  if (x == "0") return true;
  const std::string_view digits = x.starts_with('-') ? x.substr(1) : x;
  if (digits.empty() || digits.size() > python_int_max_str_digits || digits.front() == '0') return false;
  return std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; });
}

/// At most `max_code_points` of `s` for an error message, with "..." when cut.
inline std::string excerpt(std::string_view s, std::size_t max_code_points = 120) {
  const std::size_t end = utf8::advance(s, 0, max_code_points);
  return end == s.size() ? std::string(s) : std::string(s.substr(0, end)) + "...";
}

}  // namespace verl::reward::detail
