// The tokenizer's parts: NFC and Split against the tokenizers package, the Oniguruma -> PCRE2
// translation, UTF-8 handling, and the errors for unsupported or broken tokenizer.json files.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "verl/model/tokenizer/detail/nfc.hpp"
#include "verl/model/tokenizer/detail/pcre2_regex.hpp"
#include "verl/model/tokenizer/detail/unicode.hpp"
#include "verl/model/tokenizer/hf_tokenizer.hpp"
#include "verl/model/tokenizer/pre_tokenizer.hpp"

using namespace verl;
using namespace verl::model;
namespace fs = std::filesystem;
namespace mdetail = verl::model::detail;

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

nlohmann::json read_json(const fs::path& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

template <class Exception, class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Exception& error) {
    return error.what();
  }
  ADD_FAILURE() << "expected an exception";
  return {};
}

bool contains(const std::string& text, std::string_view part) { return text.find(part) != std::string::npos; }

std::vector<std::string> matches(const mdetail::Pcre2Regex& regex, std::string_view text) {
  std::vector<std::string> out;
  regex.for_each_match(text, [&](std::size_t begin, std::size_t end) { out.emplace_back(text.substr(begin, end - begin)); });
  return out;
}

}  // namespace

TEST(TokenizerNfc, MatchesTheTokenizersPackage) {
  const auto rows = read_jsonl(data_dir / "nfc.golden.jsonl");
  ASSERT_GT(rows.size(), 2000u);
  std::size_t failures = 0;
  for (const auto& row : rows) {
    const auto text = row["text"].get<std::string>();
    const auto expected = row["nfc"].get<std::string>();
    const auto got = mdetail::nfc(text);
    if (got != expected && ++failures <= 10) {
      ADD_FAILURE() << "NFC of " << nlohmann::json(text).dump() << ": got " << nlohmann::json(got).dump()
                    << ", expected " << nlohmann::json(expected).dump();
    }
  }
  EXPECT_EQ(failures, 0u);
  EXPECT_EQ(mdetail::nfc("plain ascii"), "plain ascii");
  EXPECT_EQ(mdetail::nfc(""), "");
}

TEST(TokenizerSplit, EveryBehaviourMatchesTheTokenizersPackage) {
  const auto rows = read_jsonl(data_dir / "split.golden.jsonl");
  ASSERT_GT(rows.size(), 1000u);
  std::size_t failures = 0;
  for (const auto& row : rows) {
    const nlohmann::json config = {{"type", "Split"},
                                   {"pattern", row["pattern"]},
                                   {"behavior", row["behavior"].get<std::string>() == "merged_with_previous" ? "MergedWithPrevious"
                                                : row["behavior"].get<std::string>() == "merged_with_next"   ? "MergedWithNext"
                                                : row["behavior"].get<std::string>() == "removed"            ? "Removed"
                                                : row["behavior"].get<std::string>() == "contiguous"         ? "Contiguous"
                                                                                                             : "Isolated"},
                                   {"invert", row["invert"]}};
    const auto pre_tokenizer = PreTokenizer::from_json(config);
    const auto got = pre_tokenizer.words(row["text"].get<std::string>());
    const auto expected = row["pieces"].get<std::vector<std::string>>();
    if (got != expected && ++failures <= 10) {
      ADD_FAILURE() << config.dump() << " on " << row["text"].dump() << ": got " << nlohmann::json(got).dump()
                    << ", expected " << nlohmann::json(expected).dump();
    }
  }
  EXPECT_EQ(failures, 0u);
}

TEST(TokenizerRegex, OnigurumaEscapesAreTranslated) {
  using verl::model::detail::oniguruma_to_pcre2;
  // \s is Unicode White_Space, as in Oniguruma (U+0085 included, U+200B not).
  const auto space = mdetail::Pcre2Regex::from_oniguruma(R"(\s+)");
  EXPECT_EQ(matches(space, "a\xC2\x85" "b"), std::vector<std::string>{"\xC2\x85"});
  EXPECT_TRUE(matches(space, "a\xE2\x80\x8B" "b").empty());
  const auto not_space = mdetail::Pcre2Regex::from_oniguruma(R"([^\s\p{L}]+)");
  EXPECT_EQ(matches(not_space, "ab 12 \xC2\x85!"), (std::vector<std::string>{"12", "!"}));
  // Ruby's \h is a hex digit.
  EXPECT_EQ(matches(mdetail::Pcre2Regex::from_oniguruma(R"(\h+)"), "xyz 0fA9 g"), std::vector<std::string>{"0fA9"});
  // A ']' first in a class is literal; escapes stay escapes.
  EXPECT_EQ(oniguruma_to_pcre2(R"([]\s])"), std::string("[]") + std::string(mdetail::white_space_items) + "]");
  EXPECT_EQ(oniguruma_to_pcre2(R"(\\s)"), R"(\\s)");
  EXPECT_THROW((void)oniguruma_to_pcre2(R"([^\S])"), NotImplemented);
  // Case-insensitive contractions also match the long s, like Oniguruma.
  const auto qwen = mdetail::Pcre2Regex::from_oniguruma(qwen2_pattern);
  EXPECT_EQ(matches(qwen, "it'\xC5\xBF"), (std::vector<std::string>{"it", "'\xC5\xBF"}));
  EXPECT_EQ(matches(mdetail::Pcre2Regex::from_oniguruma(llama3_pattern), "1234567"),
            (std::vector<std::string>{"123", "456", "7"}));
  const auto message = error_of<InvalidArgument>([] { (void)mdetail::Pcre2Regex::from_oniguruma("(unclosed"); });
  EXPECT_TRUE(contains(message, "(unclosed")) << message;
}

TEST(TokenizerRegex, EmptyMatchesAdvanceLikeOniguruma) {
  const auto regex = mdetail::Pcre2Regex::from_oniguruma("x*");
  std::vector<std::pair<std::size_t, std::size_t>> spans;
  regex.for_each_match("axxb", [&](std::size_t b, std::size_t e) { spans.emplace_back(b, e); });
  EXPECT_EQ(spans, (std::vector<std::pair<std::size_t, std::size_t>>{{0, 0}, {1, 3}, {4, 4}}));
}

TEST(TokenizerUtf8, LossyDecodingReplacesMaximalInvalidSubparts) {
  using verl::model::detail::utf8_lossy;
  EXPECT_EQ(utf8_lossy("abc"), "abc");
  EXPECT_EQ(utf8_lossy("\xE4\xBD"), "\xEF\xBF\xBD");                      // truncated 3-byte character
  EXPECT_EQ(utf8_lossy("\xE4\xBD" "a"), "\xEF\xBF\xBD" "a");
  EXPECT_EQ(utf8_lossy("\xFF\xFE"), "\xEF\xBF\xBD\xEF\xBF\xBD");           // two invalid bytes
  EXPECT_EQ(utf8_lossy("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // a surrogate
  EXPECT_EQ(utf8_lossy("\xF0\x9F\x98"), "\xEF\xBF\xBD");                   // truncated emoji
  EXPECT_EQ(utf8_lossy("\xC0\xAF"), "\xEF\xBF\xBD\xEF\xBF\xBD");           // overlong
  EXPECT_EQ(mdetail::find_invalid_utf8("ok \xE4\xBD\xA0"), std::nullopt);
  EXPECT_EQ(mdetail::find_invalid_utf8("ok \xE4\xBD"), std::optional<std::size_t>(3));
  EXPECT_EQ(mdetail::python_strip(" \xE3\x80\x80x y\x1F\n"), "x y");
}

TEST(HfTokenizerErrors, InvalidInputIsRejectedWithClearMessages) {
  const auto tokenizer = HfTokenizer::from_file(data_dir / "qwen2.tokenizer.json");
  auto message = error_of<InvalidArgument>([&] { (void)tokenizer.encode("ok \xFF bad"); });
  EXPECT_TRUE(contains(message, "text: expected valid UTF-8")) << message;
  EXPECT_TRUE(contains(message, "offset 3")) << message;
  const std::vector<TokenId> ids = {1, static_cast<TokenId>(tokenizer.vocab_size())};
  message = error_of<InvalidArgument>([&] { (void)tokenizer.decode(ids); });
  EXPECT_TRUE(contains(message, "ids[1]")) << message;
  const std::vector<TokenId> negative = {-1};
  EXPECT_THROW((void)tokenizer.decode(negative), InvalidArgument);
  auto copy = tokenizer;
  message = error_of<InvalidArgument>([&] { copy.set_special_ids({std::nullopt, TokenId{1'000'000}, std::nullopt}); });
  EXPECT_TRUE(contains(message, "special_ids.eos")) << message;
}

TEST(HfTokenizerErrors, UnsupportedComponentsAreNotImplemented) {
  const auto base = read_json(data_dir / "gpt2.tokenizer.json");
  auto with = [&](const char* key, nlohmann::json value) {
    auto json = base;
    json[key] = std::move(value);
    return json;
  };
  auto model_with = [&](const char* key, nlohmann::json value) {
    auto json = base;
    json["model"][key] = std::move(value);
    return json;
  };
  EXPECT_THROW((void)HfTokenizer::from_json(with("normalizer", {{"type", "Lowercase"}})), NotImplemented);
  EXPECT_THROW((void)HfTokenizer::from_json(with("pre_tokenizer", {{"type", "Whitespace"}})), NotImplemented);
  EXPECT_THROW((void)HfTokenizer::from_json(with("decoder", {{"type", "WordPiece"}})), NotImplemented);
  EXPECT_THROW((void)HfTokenizer::from_json(with("post_processor", {{"type", "BertProcessing"}})), NotImplemented);
  EXPECT_THROW((void)HfTokenizer::from_json(model_with("type", "WordPiece")), NotImplemented);
  EXPECT_THROW((void)HfTokenizer::from_json(model_with("byte_fallback", true)), NotImplemented);
  EXPECT_THROW((void)HfTokenizer::from_json(model_with("dropout", 0.1)), NotImplemented);
  EXPECT_THROW((void)HfTokenizer::from_json(model_with("continuing_subword_prefix", "##")), NotImplemented);
  const auto message = error_of<NotImplemented>([&] { (void)HfTokenizer::from_json(with("normalizer", {{"type", "NFKC"}})); });
  EXPECT_TRUE(contains(message, "NFKC")) << message;
}

TEST(HfTokenizerErrors, BrokenFilesAreInvalidArguments) {
  const auto base = read_json(data_dir / "gpt2.tokenizer.json");
  auto json = base;
  json["model"]["merges"].push_back("Ġzzzq qqq");
  auto message = error_of<InvalidArgument>([&] { (void)HfTokenizer::from_json(json); });
  EXPECT_TRUE(contains(message, "merges")) << message;
  json = base;
  json["model"]["merges"][0] = "no_space";
  EXPECT_THROW((void)HfTokenizer::from_json(json), InvalidArgument);
  json = base;
  json["model"]["vocab"]["Ġbad"] = -5;
  EXPECT_THROW((void)HfTokenizer::from_json(json), InvalidArgument);
  json = base;
  json["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "(["}}}, {"behavior", "Isolated"}, {"invert", false}};
  EXPECT_THROW((void)HfTokenizer::from_json(json), InvalidArgument);
  json = base;
  json["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "x"}}}, {"behavior", "Sideways"}, {"invert", false}};
  message = error_of<InvalidArgument>([&] { (void)HfTokenizer::from_json(json); });
  EXPECT_TRUE(contains(message, "Sideways")) << message;
  EXPECT_THROW((void)HfTokenizer::from_json_string("{not json"), InvalidArgument);
  EXPECT_THROW((void)HfTokenizer::from_file(data_dir / "missing.tokenizer.json"), InvalidArgument);
}

TEST(HfTokenizer, LookupsAndSpecialIds) {
  const auto tokenizer = HfTokenizer::from_file(data_dir / "llama3.tokenizer.json");
  const auto bos = tokenizer.token_to_id("<|begin_of_text|>");
  ASSERT_TRUE(bos.has_value());
  EXPECT_EQ(tokenizer.id_to_token(*bos), "<|begin_of_text|>");
  EXPECT_EQ(tokenizer.encode("", true), std::vector<TokenId>{*bos});
  EXPECT_TRUE(tokenizer.encode("", false).empty());
  EXPECT_EQ(tokenizer.token_to_id("Ġ"), TokenId{220});  // byte-level spelling of the space
  EXPECT_FALSE(tokenizer.token_to_id("definitely-not-a-token").has_value());
  EXPECT_EQ(tokenizer.vocab_size(), 1406u);
  EXPECT_EQ(tokenizer.special_ids(), SpecialTokenIds{});
  auto copy = tokenizer;
  copy.set_special_ids({bos, tokenizer.token_to_id("<|eot_id|>"), std::nullopt});
  EXPECT_EQ(copy.special_ids().bos, bos);
  // Copies share the word cache and give the same ids.
  EXPECT_EQ(copy.encode("Hello world, hello again"), tokenizer.encode("Hello world, hello again"));
}

TEST(HfTokenizer, ManyAddedTokensMatchLeftmostLongest) {
  auto json = read_json(data_dir / "gpt2.tokenizer.json");
  std::int32_t next_id = 5000;
  for (int k = 0; k < 3000; ++k) {
    json["added_tokens"].push_back({{"id", next_id++}, {"content", "<|reserved_" + std::to_string(k) + "|>"},
                                    {"special", true}, {"normalized", false}});
  }
  json["added_tokens"].push_back({{"id", next_id++}, {"content", "<|x"}, {"special", false}, {"normalized", false}});
  json["added_tokens"].push_back({{"id", next_id++}, {"content", "<|xy|>"}, {"special", false}, {"normalized", false}});
  const auto tokenizer = HfTokenizer::from_json(json);
  EXPECT_EQ(tokenizer.vocab_size(), static_cast<std::size_t>(next_id));
  const auto ids = tokenizer.encode("a<|reserved_2999|>b<|reserved_12|><|xy|><|xz", false);
  const std::vector<TokenId> expected_specials = {5000 + 2999, 5000 + 12, next_id - 1, next_id - 2};
  std::vector<TokenId> specials;
  for (const auto id : ids) {
    if (id >= 5000) specials.push_back(id);
  }
  EXPECT_EQ(specials, expected_specials);
  EXPECT_EQ(tokenizer.decode(ids, false), "a<|reserved_2999|>b<|reserved_12|><|xy|><|xz");
  EXPECT_EQ(tokenizer.decode(ids, true), "ab<|xy|><|xz");
}

TEST(HfTokenizerErrors, WrongJsonTypesAreInvalidArguments) {
  auto json = read_json(data_dir / "qwen2.tokenizer.json");
  json["added_tokens"][0]["lstrip"] = "yes";
  EXPECT_THROW((void)HfTokenizer::from_json(json), InvalidArgument);
  json = read_json(data_dir / "llama3.tokenizer.json");
  json["post_processor"]["processors"][1].erase("single");
  EXPECT_THROW((void)HfTokenizer::from_json(json), InvalidArgument);
  EXPECT_THROW((void)HfTokenizer::from_json(nlohmann::json::object()), InvalidArgument);
}
