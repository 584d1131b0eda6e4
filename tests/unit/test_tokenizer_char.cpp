#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "verl/tokenizer/char_tokenizer.hpp"
#include "verl/tokenizer/hf_tokenizer.hpp"

using namespace verl;
using namespace verl::tokenizer;

namespace {

/// Code written against the concept works with either tokenizer.
template <Tokenizer T>
std::string round_trip(const T& tokenizer, std::string_view text) {
  return tokenizer.decode(tokenizer.encode(text, true), true);
}

std::string error_of(auto&& f) {
  try {
    f();
  } catch (const InvalidArgument& error) {
    return error.what();
  }
  ADD_FAILURE() << "expected verl::InvalidArgument";
  return {};
}

}  // namespace

TEST(CharTokenizer, SatisfiesTheTokenizerConcept) {
  static_assert(Tokenizer<CharTokenizer>);
  static_assert(Tokenizer<HfTokenizer>);
  static_assert(!Tokenizer<int>);
  EXPECT_EQ(CharTokenizer::name, "char");
  EXPECT_EQ(round_trip(CharTokenizer::arithmetic(), "12+30=42"), "12+30=42");
}

TEST(CharTokenizer, EncodesOneIdPerCharacterAfterTheSpecialTokens) {
  const CharTokenizer tokenizer("ab c");
  EXPECT_EQ(tokenizer.vocab_size(), 7u);
  EXPECT_EQ(tokenizer.special_ids(), (SpecialTokenIds{CharTokenizer::bos_id, CharTokenizer::eos_id, CharTokenizer::pad_id}));
  EXPECT_EQ(tokenizer.encode("ab c", false), (std::vector<TokenId>{3, 4, 5, 6}));
  EXPECT_EQ(tokenizer.encode("cab", true), (std::vector<TokenId>{1, 6, 3, 4}));
  EXPECT_TRUE(tokenizer.encode("", false).empty());
  const std::vector<TokenId> ids = {1, 3, 4, 2, 0, 0};
  EXPECT_EQ(tokenizer.decode(ids, true), "ab");
  EXPECT_EQ(tokenizer.decode(ids, false), "<bos>ab<eos><pad><pad>");
}

TEST(CharTokenizer, HandlesUtf8Alphabets) {
  const CharTokenizer tokenizer("αβγ→ ");
  const auto ids = tokenizer.encode("γ → α", false);
  EXPECT_EQ(ids, (std::vector<TokenId>{5, 7, 6, 7, 3}));
  EXPECT_EQ(tokenizer.decode(ids), "γ → α");
  EXPECT_EQ(tokenizer.char_to_id(U'β'), TokenId{4});
  EXPECT_FALSE(tokenizer.char_to_id(U'a').has_value());
  const auto printable = CharTokenizer::printable_ascii();
  EXPECT_EQ(printable.vocab_size(), 3u + 96u);
  EXPECT_EQ(round_trip(printable, "Hello, World!\n~"), "Hello, World!\n~");
}

TEST(CharTokenizer, ErrorsNameTheOffendingInput) {
  const auto tokenizer = CharTokenizer::arithmetic();
  auto message = error_of([&] { (void)tokenizer.encode("1+x=2"); });
  EXPECT_NE(message.find("'x'"), std::string::npos) << message;
  EXPECT_NE(message.find("U+0078"), std::string::npos) << message;
  EXPECT_NE(message.find("byte 2"), std::string::npos) << message;
  const std::vector<TokenId> ids = {3, 99};
  message = error_of([&] { (void)tokenizer.decode(ids); });
  EXPECT_NE(message.find("ids[1]"), std::string::npos) << message;
  EXPECT_NE(message.find("99"), std::string::npos) << message;
  message = error_of([] { CharTokenizer duplicate("abca"); });
  EXPECT_NE(message.find("'a' appears twice"), std::string::npos) << message;
  EXPECT_THROW(CharTokenizer(""), InvalidArgument);
  EXPECT_THROW(CharTokenizer("a\xFF"), InvalidArgument);
  EXPECT_THROW((void)tokenizer.encode("1\xC3"), InvalidArgument);
}
