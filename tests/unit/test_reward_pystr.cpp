// Python string semantics under the reward scorers: UTF-8 code points (with surrogateescape for
// ill-formed bytes), Unicode whitespace and digits, strip/split/replace, slices and int reprs.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>

#include "verl/reward/detail/pystr.hpp"
#include "verl/reward/detail/utf8.hpp"

namespace utf8 = verl::reward::detail::utf8;
using namespace verl::reward::detail;

TEST(RewardUtf8, DecodesEveryEncodingLength) {
  const std::string s = "a\u00e9\u20ac\U0001F642";
  EXPECT_EQ(utf8::decode(s, 0).code_point, U'a');
  EXPECT_EQ(utf8::decode(s, 1).code_point, U'\u00e9');
  EXPECT_EQ(utf8::decode(s, 1).length, 2);
  EXPECT_EQ(utf8::decode(s, 3).code_point, U'\u20ac');
  EXPECT_EQ(utf8::decode(s, 3).length, 3);
  EXPECT_EQ(utf8::decode(s, 6).code_point, U'\U0001F642');
  EXPECT_EQ(utf8::decode(s, 6).length, 4);
  EXPECT_EQ(utf8::length(s), 4u);
}

TEST(RewardUtf8, IllFormedBytesAreOneCodePointEach) {
  // Python: b"\xc3(\xe2\x82\xed\xa0\x80\xf0\x9f".decode("utf-8", "surrogateescape") has 9 characters.
  const std::string s = "\xc3(\xe2\x82\xed\xa0\x80\xf0\x9f";
  EXPECT_EQ(utf8::length(s), 9u);
  EXPECT_EQ(utf8::decode(s, 0).code_point, char32_t{0xDCC3});
  EXPECT_EQ(utf8::decode(s, 0).length, 1);
  // Overlong encodings and surrogates are ill-formed.
  EXPECT_EQ(utf8::decode("\xc0\xaf", 0).length, 1);
  EXPECT_EQ(utf8::decode("\xe0\x80\xaf", 0).length, 1);
  EXPECT_EQ(utf8::decode("\xed\xa0\x80", 0).length, 1);
  EXPECT_EQ(utf8::decode("\xf4\x90\x80\x80", 0).length, 1);
  std::string round_trip;
  for (std::size_t pos = 0; pos < s.size(); pos += utf8::length_at(s, pos)) utf8::append(round_trip, utf8::decode(s, pos).code_point);
  EXPECT_EQ(round_trip, s);
}

TEST(RewardUtf8, TailOffsetCountsCodePointsFromTheEnd) {
  std::string s;
  for (int i = 0; i < 500; ++i) s += i % 3 == 0 ? "\u00fc" : (i % 3 == 1 ? "x" : "\U0001F642");
  const std::string_view tail = last_code_points(s, 300);
  EXPECT_EQ(utf8::length(tail), 300u);
  EXPECT_TRUE(s.ends_with(tail));
  EXPECT_EQ(last_code_points("abc", 300), "abc");
  // Continuation bytes near the cut are never split from their lead byte.
  const std::string mixed = std::string(1000, '\x80') + "\u00e9\u00e9";
  EXPECT_EQ(last_code_points(mixed, 3), "\x80\u00e9\u00e9");
}

TEST(RewardUtf8, TailOffsetAgreesWithForwardDecodingOnAnyBytes) {
  // Lead, continuation, ASCII and never-valid bytes mixed at random: reading the tail backwards
  // must find the same code point boundaries as decoding from the start.
  constexpr unsigned char alphabet[] = {0x41, 0x80, 0x82, 0x9F, 0xA0, 0xAC, 0xBF, 0xC3, 0xE2, 0xED, 0xF0, 0xF4, 0xFF};
  std::uint32_t state = 12345;
  for (int trial = 0; trial < 2000; ++trial) {
    std::string s;
    const int size = trial % 40;
    for (int i = 0; i < size; ++i) {
      state = state * 1664525u + 1013904223u;
      s.push_back(static_cast<char>(alphabet[(state >> 24) % sizeof(alphabet)]));
    }
    const std::size_t total = utf8::length(s);
    for (std::size_t n = 1; n <= total + 1; ++n) {
      const std::size_t expected = n >= total ? 0 : utf8::advance(s, 0, total - n);
      ASSERT_EQ(utf8::tail_offset(s, n), expected) << "trial " << trial << " n " << n;
    }
  }
}

TEST(RewardUtf8, SliceFromFollowsPythonSliceRules) {
  const std::string s = "\u00e9a\u00e9b";  // 4 code points
  EXPECT_EQ(slice_from(s, 0), s);
  EXPECT_EQ(slice_from(s, 1), "a\u00e9b");
  EXPECT_EQ(slice_from(s, 4), "");
  EXPECT_EQ(slice_from(s, 99), "");
  EXPECT_EQ(slice_from(s, -1), "b");
  EXPECT_EQ(slice_from(s, -2), "\u00e9b");
  EXPECT_EQ(slice_from(s, -4), s);
  EXPECT_EQ(slice_from(s, -5), s);
  EXPECT_EQ(slice_from(s, std::numeric_limits<std::int64_t>::min()), s);
}

TEST(RewardPyStr, WhitespaceIsPythonsIsspace) {
  for (char32_t cp : {U' ', U'\t', U'\n', U'\r', U'\v', U'\f', char32_t{0x1C}, char32_t{0x1F}, char32_t{0x85},
                      char32_t{0xA0}, char32_t{0x1680}, char32_t{0x2000}, char32_t{0x200A}, char32_t{0x2028},
                      char32_t{0x2029}, char32_t{0x202F}, char32_t{0x205F}, char32_t{0x3000}})
    EXPECT_TRUE(is_python_space(cp)) << static_cast<std::uint32_t>(cp);
  for (char32_t cp : {U'a', U'0', char32_t{0x200B}, char32_t{0xFEFF}, char32_t{0x180E}, char32_t{0xDC80}})
    EXPECT_FALSE(is_python_space(cp)) << static_cast<std::uint32_t>(cp);
}

TEST(RewardPyStr, DigitsArePythonsIsdigit) {
  EXPECT_TRUE(str_isdigit("0123456789"));
  EXPECT_TRUE(str_isdigit("\u00b2"));          // superscript two
  EXPECT_TRUE(str_isdigit("\u0663"));          // Arabic-Indic three
  EXPECT_TRUE(str_isdigit("\u2460"));          // circled one
  EXPECT_TRUE(str_isdigit("\U0001D7CE"));      // mathematical bold zero
  EXPECT_FALSE(str_isdigit(""));
  EXPECT_FALSE(str_isdigit("\u00bd"));         // vulgar fraction: numeric, not a digit
  EXPECT_FALSE(str_isdigit("\u2160"));         // Roman numeral one
  EXPECT_FALSE(str_isdigit("1,000"));
  EXPECT_FALSE(str_isdigit("-1"));
}

TEST(RewardPyStr, StripRemovesUnicodeWhitespaceOnly) {
  EXPECT_EQ(strip("  \u00a0x y\u3000\n"), "x y");
  EXPECT_EQ(strip("\u2028"), "");
  EXPECT_EQ(strip("\u200bx\u200b"), "\u200bx\u200b");
  EXPECT_EQ(strip(""), "");
}

TEST(RewardPyStr, ReplaceAndSplitMatchPython) {
  std::string s = "\\\\\\";
  replace_all(s, "\\\\", "\\");  // "\\\\\\".replace("\\\\", "\\") == "\\\\"
  EXPECT_EQ(s, "\\\\");
  s = "aaaa";
  replace_all(s, "aa", "b");
  EXPECT_EQ(s, "bb");
  s = "x";
  replace_all(s, "y", "zz");
  EXPECT_EQ(s, "x");
  const auto parts = split("a==b=", "=");
  ASSERT_EQ(parts.size(), 4u);
  EXPECT_EQ(parts[0], "a");
  EXPECT_EQ(parts[1], "");
  EXPECT_EQ(parts[3], "");
  EXPECT_EQ(count("\\text{ a\\text{ b", "\\text{ "), 2u);
}

TEST(RewardPyStr, IntReprIsWhatStrIntGivesBack) {
  for (const char* ok : {"0", "7", "-7", "1234567890123456789012345678901234567890"}) EXPECT_TRUE(is_python_int_repr(ok)) << ok;
  for (const char* no : {"", "-", "-0", "007", "+1", " 1", "1 ", "1_000", "\u0663", "1.0", "0x1"})
    EXPECT_FALSE(is_python_int_repr(no)) << no;
  EXPECT_TRUE(is_python_int_repr(std::string(python_int_max_str_digits, '9')));
  EXPECT_FALSE(is_python_int_repr(std::string(python_int_max_str_digits + 1, '9')));  // int() raises
}
