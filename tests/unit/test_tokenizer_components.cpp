// The tokenizer's parts: NFC and Split against the tokenizers package, the Oniguruma -> PCRE2
// translation, UTF-8 handling, the SentencePiece-style parts (Metaspace, Prepend / Replace,
// byte fallback, the decoders; expected values from tokenizers 0.23.3), and the errors for
// unsupported or broken tokenizer.json files.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "verl/tokenizer/bpe_model.hpp"
#include "verl/tokenizer/decoder.hpp"
#include "verl/tokenizer/detail/nfc.hpp"
#include "verl/tokenizer/detail/pcre2_regex.hpp"
#include "verl/tokenizer/detail/unicode.hpp"
#include "verl/tokenizer/hf_tokenizer.hpp"
#include "verl/tokenizer/normalizer.hpp"
#include "verl/tokenizer/pre_tokenizer.hpp"

using namespace verl;
using namespace verl::tokenizer;
namespace fs = std::filesystem;
namespace mdetail = verl::tokenizer::detail;

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
  using verl::tokenizer::detail::oniguruma_to_pcre2;
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
  using verl::tokenizer::detail::utf8_lossy;
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
  EXPECT_NO_THROW((void)HfTokenizer::from_json(model_with("byte_fallback", true)));
  EXPECT_THROW((void)HfTokenizer::from_json(with("normalizer", {{"type", "Precompiled"}, {"precompiled_charsmap", ""}})),
               NotImplemented);
  EXPECT_THROW((void)HfTokenizer::from_json(with("decoder", {{"type", "BPEDecoder"}, {"suffix", "</w>"}})), NotImplemented);
  // Replace with a regex pattern (normalizer or decoder) is refused by name.
  const nlohmann::json regex_replace = {{"type", "Replace"}, {"pattern", {{"Regex", " +"}}}, {"content", "\u2581"}};
  auto regex_message = error_of<NotImplemented>([&] { (void)HfTokenizer::from_json(with("normalizer", regex_replace)); });
  EXPECT_TRUE(contains(regex_message, "Regex")) << regex_message;
  regex_message = error_of<NotImplemented>([&] { (void)HfTokenizer::from_json(with("decoder", regex_replace)); });
  EXPECT_TRUE(contains(regex_message, "decoder Replace.pattern")) << regex_message;
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

namespace {

const std::string meta = "\u2581";  // SentencePiece's meta symbol

/// "▁" for each '_' of `text`, to keep the expectations readable.
std::string m(std::string_view text) {
  std::string out;
  for (const char c : text) out += c == '_' ? meta : std::string(1, c);
  return out;
}

std::vector<std::string> ms(std::initializer_list<std::string_view> items) {
  std::vector<std::string> out;
  for (const auto item : items) out.push_back(m(item));
  return out;
}

PreTokenizer metaspace(const char* scheme, bool split) {
  return PreTokenizer::from_json({{"type", "Metaspace"}, {"replacement", meta}, {"prepend_scheme", scheme}, {"split", split}});
}

std::string decode_with(const nlohmann::json& config, const std::vector<std::string>& tokens) {
  return Decoder::from_json(config).decode(tokens);
}

}  // namespace

TEST(TokenizerMetaspace, EveryPrependSchemeWithAndWithoutSplit) {
  // split false: one piece, spaces -> "▁".
  EXPECT_EQ(metaspace("first", false).words("ab c"), ms({"_ab_c"}));
  EXPECT_EQ(metaspace("first", false).words(" ab"), ms({"_ab"}));  // already starts with "▁"
  EXPECT_EQ(metaspace("always", false).words("  ab  "), ms({"__ab__"}));
  EXPECT_EQ(metaspace("never", false).words("ab c"), ms({"ab_c"}));
  // split true: a piece starts at each "▁" (MergedWithNext), runs of "▁" stay apart.
  EXPECT_EQ(metaspace("always", true).words("ab c"), ms({"_ab", "_c"}));
  EXPECT_EQ(metaspace("first", true).words("  ab  "), ms({"_", "_ab", "_", "_"}));
  EXPECT_EQ(metaspace("never", true).words("ab c"), ms({"ab", "_c"}));
  EXPECT_EQ(metaspace("never", true).words("ab "), ms({"ab", "_"}));
  EXPECT_EQ(metaspace("never", true).words(m("a_b")), ms({"a", "_b"}));  // a "▁" in the text splits too
  // "first" prepends only to text at the start of the input (not after an added token).
  EXPECT_EQ(metaspace("first", false).words("ab", /*at_text_start=*/false), ms({"ab"}));
  EXPECT_EQ(metaspace("always", false).words("ab", /*at_text_start=*/false), ms({"_ab"}));
  EXPECT_TRUE(metaspace("always", true).words("").empty());
  // After a Split that drops a leading delimiter, the first piece no longer starts the input.
  const auto split_then_metaspace = PreTokenizer::from_json(
      {{"type", "Sequence"},
       {"pretokenizers",
        {{{"type", "Split"}, {"pattern", {{"String", ","}}}, {"behavior", "Removed"}, {"invert", false}},
         {{"type", "Metaspace"}, {"replacement", meta}, {"prepend_scheme", "first"}, {"split", false}}}}});
  EXPECT_EQ(split_then_metaspace.words("a,b"), ms({"_a", "b"}));
  EXPECT_EQ(split_then_metaspace.words(",a,b"), ms({"a", "b"}));
  // Legacy fields: add_prefix_space true keeps the default "always"; split defaults to true.
  const auto legacy = PreTokenizer::from_json({{"type", "Metaspace"}, {"replacement", meta}, {"add_prefix_space", true}});
  EXPECT_EQ(legacy.words("a b"), ms({"_a", "_b"}));
}

TEST(TokenizerMetaspace, BadOptionsAreInvalidArguments) {
  auto with = [](nlohmann::json json) { return [json] { (void)PreTokenizer::from_json(json); }; };
  auto message = error_of<InvalidArgument>(with({{"type", "Metaspace"}, {"replacement", meta + meta}}));
  EXPECT_TRUE(contains(message, "Metaspace.replacement")) << message;
  EXPECT_THROW(with({{"type", "Metaspace"}, {"replacement", ""}})(), InvalidArgument);
  message = error_of<InvalidArgument>(with({{"type", "Metaspace"}, {"replacement", meta}, {"prepend_scheme", "First"}}));
  EXPECT_TRUE(contains(message, "prepend_scheme")) << message;
  // As in tokenizers, add_prefix_space false needs prepend_scheme "never".
  EXPECT_THROW(with({{"type", "Metaspace"}, {"replacement", meta}, {"add_prefix_space", false}})(), InvalidArgument);
  EXPECT_NO_THROW(
      with({{"type", "Metaspace"}, {"replacement", meta}, {"add_prefix_space", false}, {"prepend_scheme", "never"}})());
}

TEST(TokenizerNormalizer, PrependAndReplace) {
  const auto legacy = Normalizer::from_json(
      {{"type", "Sequence"},
       {"normalizers",
        {{{"type", "Prepend"}, {"prepend", meta}}, {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", meta}}}}});
  EXPECT_EQ(legacy.apply("a b  c"), m("_a_b__c"));
  EXPECT_EQ(legacy.apply(" "), m("__"));
  EXPECT_EQ(legacy.apply(""), "");  // Prepend leaves empty text empty
  const auto replace =
      Normalizer::from_json({{"type", "Replace"}, {"pattern", {{"String", "aa"}}}, {"content", "b"}});
  EXPECT_EQ(replace.apply("aaaaa"), "bba");  // left to right, non-overlapping
  EXPECT_THROW((void)Normalizer::from_json({{"type", "Replace"}, {"pattern", {{"String", ""}}}, {"content", "x"}}),
               NotImplemented);
  EXPECT_THROW((void)Normalizer::from_json({{"type", "Replace"}, {"pattern", {{"String", "a"}}}}), InvalidArgument);
  EXPECT_THROW((void)Normalizer::from_json({{"type", "Prepend"}}), InvalidArgument);
}

TEST(TokenizerSentencePiece, NormalizerAndMetaspaceRunPerPieceBetweenAddedTokens) {
  // Legacy Llama-2: Prepend marks every piece between added tokens (normalizers run per piece).
  const auto llama2 = HfTokenizer::from_file(data_dir / "llama2.tokenizer.json");
  auto tokens = [](const HfTokenizer& tokenizer, std::string_view text) {
    std::vector<std::string> out;
    for (const auto id : tokenizer.encode(text, false)) out.push_back(*tokenizer.id_to_token(id));
    return out;
  };
  auto llama2_tokens = tokens(llama2, "is</s>is");
  EXPECT_EQ(llama2_tokens, ms({"_is", "</s>", "_is"}));
  EXPECT_EQ(llama2.encode("is", true).front(), *llama2.token_to_id("<s>"));
  // Metaspace "first" (Mistral): only the text at offset 0 gets "▁".
  const auto mistral = HfTokenizer::from_file(data_dir / "mistral.tokenizer.json");
  EXPECT_EQ(tokens(mistral, "is</s>is"), ms({"_i", "s", "</s>", "is"}));
  EXPECT_EQ(tokens(mistral, "</s>is"), ms({"</s>", "is"}));
  EXPECT_EQ(mistral.decode(mistral.encode(" is</s> is", false), false), "is</s> is");
  // Decoding drops one leading space of the whole text (Strip after Fuse), so with the legacy
  // normalizer a piece after an added token keeps its extra "▁" as a space.
  EXPECT_EQ(llama2.decode(llama2.encode(" is</s> is", false), false), " is</s>  is");
  EXPECT_EQ(llama2.decode(llama2.encode("is</s>is", false), true), "is is");
}

TEST(TokenizerBpe, ByteFallbackAndUnknownCharacters) {
  auto model = [](bool fuse_unk, bool with_unk) {
    nlohmann::json json = {{"type", "BPE"},
                           {"vocab", {{"<unk>", 0}, {"<0xC3>", 1}, {"<0xA9>", 2}, {"a", 3}, {"b", 4}, {"ab", 5}, {"<0xF0>", 6}}},
                           {"merges", {"a b"}},
                           {"byte_fallback", true},
                           {"fuse_unk", fuse_unk},
                           {"unk_token", with_unk ? nlohmann::json("<unk>") : nlohmann::json()}};
    return BpeModel::from_json(json);
  };
  auto ids = [](const BpeModel& bpe, std::string_view word) {
    std::vector<std::int32_t> out;
    bpe.tokenize(word, out);
    return out;
  };
  using Ids = std::vector<std::int32_t>;
  const auto fused = model(true, true);
  EXPECT_TRUE(fused.byte_fallback());
  EXPECT_EQ(ids(fused, "\xC3\xA9"), (Ids{1, 2}));  // é: both byte tokens exist
  // 😀 lacks <0x9F> and <0x98>: unk. A pending unk is only placed before the next in-vocabulary
  // character, so it lands after byte tokens and fuses with a later unk across them (tokenizers).
  EXPECT_EQ(ids(fused, "\xF0\x9F\x98\x80\xC3\xA9\xF0\x9F\x98\x80"), (Ids{1, 2, 0}));
  EXPECT_EQ(ids(fused, "\xF0\x9F\x98\x80\xC3\xA9" "a"), (Ids{1, 2, 0, 3}));
  EXPECT_EQ(ids(fused, "a\xF0\x9F\x98\x80" "b"), (Ids{3, 0, 4}));  // the unk keeps a and b from merging
  EXPECT_EQ(ids(fused, "ab"), (Ids{5}));
  const auto separate = model(false, true);
  EXPECT_EQ(ids(separate, "\xF0\x9F\x98\x80\xC3\xA9\xF0\x9F\x98\x80"), (Ids{1, 2, 0, 0}));
  EXPECT_EQ(ids(separate, "a\xE4\xB8\xAD\xE4\xB8\xAD" "b"), (Ids{3, 0, 0, 4}));
  // Without an unk token the character is dropped, and its neighbours can merge.
  const auto no_unk = model(true, false);
  EXPECT_EQ(ids(no_unk, "a\xF0\x9F\x98\x80" "b"), (Ids{5}));
  EXPECT_EQ(ids(no_unk, "\xF0\x9F\x98\x80\xF0\x9F\x98\x80"), Ids{});
}

TEST(TokenizerDecoder, ByteFallbackRunsAndInvalidBytes) {
  const nlohmann::json byte_fallback = {{"type", "ByteFallback"}};
  const std::string fffd = "\xEF\xBF\xBD";
  EXPECT_EQ(decode_with(byte_fallback, {"<0xE4>", "<0xB8>", "<0xAD>"}), "\xE4\xB8\xAD");
  // A run that is not valid UTF-8 gives one U+FFFD per byte, valid bytes in it included.
  EXPECT_EQ(decode_with(byte_fallback, {"<0x41>", "<0xE4>"}), fffd + fffd);
  EXPECT_EQ(decode_with(byte_fallback, {"<0xE4>", "<0xB8>", "a", "<0xAD>"}), fffd + fffd + "a" + fffd);
  EXPECT_EQ(decode_with(byte_fallback, {"<0xFF>", "<0xFE>"}), fffd + fffd);
  // Rust's from_str_radix: either case, and a leading '+'.
  EXPECT_EQ(decode_with(byte_fallback, {"<0xe4>", "<0xb8>", "<0xad>"}), "\xE4\xB8\xAD");
  EXPECT_EQ(decode_with(byte_fallback, {"<0x+F>"}), "\x0F");
  EXPECT_EQ(decode_with(byte_fallback, {"<0x4G>", "<0x-1>", "<0x41"}), "<0x4G><0x-1><0x41");
}

TEST(TokenizerDecoder, ReplaceStripFuseMetaspace) {
  EXPECT_EQ(decode_with({{"type", "Replace"}, {"pattern", {{"String", "ab"}}}, {"content", "X"}}, {"aab", "abab", "b"}),
            "aXXXb");
  // Strip works on each token.
  const nlohmann::json strip = {{"type", "Strip"}, {"content", " "}, {"start", 2}, {"stop", 1}};
  EXPECT_EQ(decode_with(strip, {"  a  ", "  b "}), "a b");
  EXPECT_EQ(decode_with({{"type", "Sequence"}, {"decoders", {{{"type", "Fuse"}}, strip}}}, {"  a  ", "  b "}), "a    b");
  // Where tokenizers panics (stripping more than the token holds), the token becomes empty.
  EXPECT_EQ(decode_with({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 1}}, {" ", "x"}), "x");
  // The Metaspace decoder drops every "▁" of the first token, unless prepend_scheme is "never".
  const nlohmann::json first = {{"type", "Metaspace"}, {"replacement", meta}, {"prepend_scheme", "first"}, {"split", false}};
  const nlohmann::json never = {{"type", "Metaspace"}, {"replacement", meta}, {"prepend_scheme", "never"}, {"split", false}};
  EXPECT_EQ(decode_with(first, ms({"_a_b", "_c"})), "ab c");
  EXPECT_EQ(decode_with(first, ms({"__", "_a"})), " a");
  EXPECT_EQ(decode_with(never, ms({"__", "_a"})), "   a");
  // Llama-2 / Mistral: Replace, ByteFallback, Fuse, then Strip one leading space of the whole text.
  const nlohmann::json llama = {
      {"type", "Sequence"},
      {"decoders",
       {{{"type", "Replace"}, {"pattern", {{"String", meta}}}, {"content", " "}},
        {{"type", "ByteFallback"}},
        {{"type", "Fuse"}},
        {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}};
  EXPECT_EQ(decode_with(llama, ms({"_", "<0x20>", "_a"})), "  a");
  EXPECT_EQ(decode_with(llama, ms({"<0x20>", "a"})), "a");
  EXPECT_EQ(decode_with(llama, ms({"_Hello", "_world"})), "Hello world");
  // No decoder: tokens joined with spaces; an empty Sequence: concatenated.
  EXPECT_EQ(decode_with(nullptr, {"a", "b"}), "a b");
  EXPECT_EQ(decode_with({{"type", "Sequence"}, {"decoders", nlohmann::json::array()}}, {"a", "b"}), "ab");
  EXPECT_THROW((void)Decoder::from_json({{"type", "Strip"}, {"content", "  "}, {"start", 1}, {"stop", 0}}), InvalidArgument);
  EXPECT_THROW((void)Decoder::from_json({{"type", "Strip"}, {"content", " "}, {"start", -1}, {"stop", 0}}), InvalidArgument);
  EXPECT_THROW((void)Decoder::from_json({{"type", "Strip"}, {"start", 1}, {"stop", 0}}), InvalidArgument);
  EXPECT_THROW((void)Decoder::from_json({{"type", "CTC"}}), NotImplemented);
}
