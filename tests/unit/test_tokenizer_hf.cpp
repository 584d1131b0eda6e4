// HfTokenizer against golden data from the `tokenizers` package
// (tools/scripts/make_tokenizer_golden.py): identical ids and strings on >= 1,000 strings per
// style: byte-level (gpt2, gpt2_prefix, qwen2, llama3) and SentencePiece-style with byte fallback
// (llama2: legacy Prepend/Replace normalizer; mistral: Metaspace "first"; metaspace_unk: Metaspace
// "always" with split, missing byte tokens, the Metaspace decoder).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "verl/tokenizer/hf_tokenizer.hpp"

using namespace verl;
using namespace verl::tokenizer;
namespace fs = std::filesystem;

namespace {

const fs::path data_dir = fs::path(VERL_GOLDEN_DIR) / ".." / "tokenizer";

std::vector<nlohmann::json> read_jsonl(const fs::path& path) {
  std::ifstream in(path);
  std::vector<nlohmann::json> rows;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) rows.push_back(nlohmann::json::parse(line));
  }
  return rows;
}

std::string escaped(const std::string& text) { return nlohmann::json(text).dump(); }

class GoldenTokenizer : public ::testing::TestWithParam<std::string> {};

}  // namespace

TEST_P(GoldenTokenizer, EncodeAndDecodeMatchTheTokenizersPackage) {
  const std::string name = GetParam();
  const auto tokenizer = HfTokenizer::from_file(data_dir / (name + ".tokenizer.json"));
  const auto rows = read_jsonl(data_dir / (name + ".golden.jsonl"));
  std::size_t strings = 0, decodes = 0, failures = 0;
  for (const auto& row : rows) {
    if (row.contains("text")) {
      ++strings;
      const auto text = row["text"].get<std::string>();
      const auto expected = row["ids"].get<std::vector<TokenId>>();
      const auto expected_plain = row.contains("ids_plain") ? row["ids_plain"].get<std::vector<TokenId>>() : expected;
      const auto ids = tokenizer.encode(text, true);
      const auto ids_plain = tokenizer.encode(text, false);
      const auto decoded = row.contains("decoded") ? row["decoded"].get<std::string>() : text;
      const auto decoded_skip = row.contains("decoded_skip") ? row["decoded_skip"].get<std::string>() : decoded;
      const bool ok = ids == expected && ids_plain == expected_plain &&
                      tokenizer.decode(expected_plain, false) == decoded &&
                      tokenizer.decode(expected_plain, true) == decoded_skip;
      if (!ok && ++failures <= 10) {
        ADD_FAILURE() << name << ": text " << escaped(text) << "\n  ids      " << nlohmann::json(ids).dump()
                      << "\n  expected " << nlohmann::json(expected).dump() << "\n  decoded  "
                      << escaped(tokenizer.decode(expected_plain, false)) << " expected " << escaped(decoded)
                      << "\n  skip     " << escaped(tokenizer.decode(expected_plain, true)) << " expected "
                      << escaped(decoded_skip);
      }
    } else {
      ++decodes;
      const auto ids = row["decode_ids"].get<std::vector<TokenId>>();
      const bool ok = tokenizer.decode(ids, false) == row["decoded"].get<std::string>() &&
                      tokenizer.decode(ids, true) == row["decoded_skip"].get<std::string>();
      if (!ok && ++failures <= 10) {
        ADD_FAILURE() << name << ": decode " << nlohmann::json(ids).dump() << "\n  got      "
                      << escaped(tokenizer.decode(ids, false)) << "\n  expected " << row["decoded"].dump();
      }
    }
  }
  EXPECT_GE(strings, 1000u);
  EXPECT_GE(decodes, 100u);
  EXPECT_EQ(failures, 0u) << name << ": " << failures << " of " << rows.size() << " golden rows differ";
}

INSTANTIATE_TEST_SUITE_P(Styles, GoldenTokenizer,
                         ::testing::Values("gpt2", "gpt2_prefix", "qwen2", "llama3", "llama2", "mistral", "metaspace_unk"));

namespace {

/// Random valid UTF-8 from a mix of ASCII, Latin, CJK, emoji and white space.
std::string random_text(std::mt19937& gen, std::size_t length) {
  static const char32_t pool[] = {U'a', U'Z', U' ', U'\t', U'\n', U'\r', U'0', U'9', U'\'', U's', U'.', U'!', U'<', U'|',
                                  U'>', U'é', U'ß', U'中', U'文', U'😀', U'\u00a0', U'\u3000', U'\u0301', U'ـ', U'א',
                                  U'\u0085', U'\u200d', U'\U0010FFFF'};
  std::string text;
  std::uniform_int_distribution<std::size_t> pick(0, std::size(pool) - 1);
  for (std::size_t i = 0; i < length; ++i) verl::tokenizer::detail::append_utf8(text, pool[pick(gen)]);
  return text;
}

}  // namespace

TEST(HfTokenizerProperties, ByteLevelRoundTripsArbitraryText) {
  // Without a normalizer, decode(encode(text)) is the text itself.
  for (const char* style : {"gpt2", "llama3"}) {
    const auto tokenizer = HfTokenizer::from_file(data_dir / (std::string(style) + ".tokenizer.json"));
    std::mt19937 gen(3);
    for (int trial = 0; trial < 300; ++trial) {
      const auto text = random_text(gen, gen() % 64);
      ASSERT_EQ(tokenizer.decode(tokenizer.encode(text, false), false), text) << style << " " << escaped(text);
    }
  }
}

TEST(HfTokenizerProperties, SentencePieceRoundTripsAndDecodesAnyIds) {
  // Legacy Llama-2: the normalizer's "▁"s (one per space, one in front) become exactly the spaces
  // again, byte fallback covers every character, and Strip drops the one in front.
  const auto llama2 = HfTokenizer::from_file(data_dir / "llama2.tokenizer.json");
  std::mt19937 gen(11);
  for (int trial = 0; trial < 300; ++trial) {
    const auto text = random_text(gen, gen() % 64);
    if (text.find("<s>") != std::string::npos || text.find("</s>") != std::string::npos) continue;
    ASSERT_EQ(llama2.decode(llama2.encode(text, false), false), text) << escaped(text);
  }
  // Any ids decode to valid UTF-8, broken byte-token runs included.
  for (const char* style : {"llama2", "mistral", "metaspace_unk"}) {
    const auto tokenizer = HfTokenizer::from_file(data_dir / (std::string(style) + ".tokenizer.json"));
    for (int trial = 0; trial < 500; ++trial) {
      std::vector<TokenId> ids(gen() % 10);
      for (auto& id : ids) id = static_cast<TokenId>(gen() % (trial % 2 ? 260 : tokenizer.vocab_size()));
      for (const bool skip : {false, true}) {
        const auto text = tokenizer.decode(ids, skip);
        ASSERT_FALSE(verl::tokenizer::detail::find_invalid_utf8(text).has_value()) << style << " " << nlohmann::json(ids).dump();
      }
    }
  }
}

TEST(HfTokenizerProperties, ArbitraryBytesAreEncodedOrRejectedNeverCrash) {
  const auto tokenizer = HfTokenizer::from_file(data_dir / "qwen2.tokenizer.json");
  std::mt19937 gen(5);
  std::size_t rejected = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    std::string bytes(gen() % 24, '\0');
    for (auto& byte : bytes) byte = static_cast<char>(gen() % 256);
    try {
      const auto ids = tokenizer.encode(bytes);
      for (const auto id : ids) ASSERT_LT(static_cast<std::size_t>(id), tokenizer.vocab_size());
    } catch (const InvalidArgument&) {
      ++rejected;
    }
    // Any id sequence decodes (invalid UTF-8 becomes U+FFFD).
    std::vector<TokenId> ids(gen() % 8);
    for (auto& id : ids) id = static_cast<TokenId>(gen() % tokenizer.vocab_size());
    const auto text = tokenizer.decode(ids, false);
    ASSERT_FALSE(verl::tokenizer::detail::find_invalid_utf8(text).has_value());
  }
  EXPECT_GT(rejected, 0u);
}

TEST(HfTokenizerProperties, ConcurrentEncodingGivesTheSameIds) {
  const auto tokenizer = HfTokenizer::from_file(data_dir / "llama3.tokenizer.json");
  std::mt19937 gen(9);
  std::vector<std::string> texts;
  for (int i = 0; i < 200; ++i) texts.push_back(random_text(gen, 40));
  std::vector<std::vector<TokenId>> expected;
  // Expected ids from an independent instance, so the shared one starts with a cold cache.
  const auto reference = HfTokenizer::from_file(data_dir / "llama3.tokenizer.json");
  for (const auto& text : texts) expected.push_back(reference.encode(text));
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int repeat = 0; repeat < 5; ++repeat) {
        for (std::size_t i = 0; i < texts.size(); ++i) {
          if (tokenizer.encode(texts[i]) != expected[i]) ++mismatches;
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(mismatches.load(), 0);
}
