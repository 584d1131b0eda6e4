// HfTokenizer against golden data from the `tokenizers` package
// (tools/scripts/make_tokenizer_golden.py): identical ids and strings on >= 1,000 strings per
// pre-tokenization style.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "verl/model/tokenizer/hf_tokenizer.hpp"

using namespace verl;
using namespace verl::model;
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

INSTANTIATE_TEST_SUITE_P(Styles, GoldenTokenizer, ::testing::Values("gpt2", "gpt2_prefix", "qwen2", "llama3"));
