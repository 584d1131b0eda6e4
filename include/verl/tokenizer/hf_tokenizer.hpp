// A Hugging Face `tokenizer.json` with a BPE model, encoding and decoding exactly as the
// `tokenizers` package does. Two families are supported:
//   byte-level BPE (GPT-2, Qwen2, Llama-3 and their relatives): NFC, Split / ByteLevel
//     pre-tokenizers, ByteLevel decoder;
//   SentencePiece-style BPE with byte_fallback (Llama-2, Mistral <= v0.3, TinyLlama): either the
//     legacy normalizer Sequence[Prepend("▁"), Replace(" " -> "▁")] without a pre-tokenizer, or a
//     Metaspace pre-tokenizer (prepend_scheme first / always / never, split or not); decoders
//     Replace, ByteFallback, Fuse, Strip, Metaspace.
//
//   text -> cut out added tokens (raw, then after normalization) -> normalizer, per piece between
//   added tokens -> pre-tokenizer -> BPE per word -> post-processor (e.g. prepend <bos>)
//   ids  -> token strings (skipping special tokens on request) -> decoder chain -> text
//
// Unsupported components (WordPiece/Unigram models, BPE dropout, other normalizers,
// pre-tokenizers, decoders or post-processors, Replace with a regex) throw verl::NotImplemented
// when the file is loaded. Unlike tokenizers, decode() rejects ids outside the vocabulary instead
// of dropping them.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "verl/core/error.hpp"
#include "verl/core/file_io.hpp"
#include "verl/tokenizer/added_vocabulary.hpp"
#include "verl/tokenizer/bpe_model.hpp"
#include "verl/tokenizer/concept.hpp"
#include "verl/tokenizer/decoder.hpp"
#include "verl/tokenizer/byte_level.hpp"
#include "verl/tokenizer/detail/unicode.hpp"
#include "verl/tokenizer/normalizer.hpp"
#include "verl/tokenizer/pre_tokenizer.hpp"

namespace verl::tokenizer {

namespace detail {

/// The ids a post-processor puts around a single sequence when add_special_tokens is true.
struct SingleSequenceTemplate {
  std::vector<std::int32_t> prefix;
  std::vector<std::int32_t> suffix;

  void append(const nlohmann::json& json) {
    if (json.is_null()) return;
    VERL_CHECK_ARG(json.is_object() && json.contains("type") && json["type"].is_string(),
                   "tokenizer.json post_processor: expected null or an object with a 'type', got {}", json.dump());
    const auto& type = json["type"].get_ref<const std::string&>();
    if (type == "ByteLevel") return;  // only adjusts offsets
    if (type == "Sequence") {
      VERL_CHECK_ARG(json.contains("processors") && json["processors"].is_array(),
                     "tokenizer.json post_processor Sequence: expected a 'processors' list");
      for (const auto& inner : json["processors"]) append(inner);
      return;
    }
    if (type != "TemplateProcessing") {
      ::verl::detail::throw_not_implemented(
          "tokenizer.json post_processor: type '{}' is not supported (supported: ByteLevel, TemplateProcessing, "
          "Sequence)",
          type);
    }
    const auto& single = json.at("single");
    const auto& special_tokens = json.at("special_tokens");
    // A later processor wraps what the earlier ones produced.
    std::vector<std::int32_t> new_prefix;
    std::vector<std::int32_t> new_suffix;
    bool seen_sequence = false;
    for (const auto& item : single) {
      if (item.contains("Sequence")) {
        const auto id = item["Sequence"].value("id", std::string("A"));
        VERL_CHECK_ARG(id == "A", "tokenizer.json TemplateProcessing.single: expected only sequence $A, got ${}", id);
        seen_sequence = true;
        continue;
      }
      VERL_CHECK_ARG(item.contains("SpecialToken"), "tokenizer.json TemplateProcessing.single: unexpected item {}",
                     item.dump());
      const auto name = item["SpecialToken"].at("id").get<std::string>();
      VERL_CHECK_ARG(special_tokens.contains(name),
                     "tokenizer.json TemplateProcessing: special token '{}' is missing from special_tokens", name);
      auto& target = seen_sequence ? new_suffix : new_prefix;
      for (const auto& id : special_tokens[name].at("ids")) target.push_back(id.get<std::int32_t>());
    }
    new_prefix.insert(new_prefix.end(), prefix.begin(), prefix.end());
    suffix.insert(suffix.end(), new_suffix.begin(), new_suffix.end());
    prefix = std::move(new_prefix);
  }
};

}  // namespace detail

class HfTokenizer {
 public:
  static constexpr std::string_view name = "hf_bpe";

  HfTokenizer() = default;

  /// Builds a tokenizer from the parsed tokenizer.json.
  static HfTokenizer from_json(const nlohmann::json& json) {
    VERL_CHECK_ARG(json.is_object() && json.contains("model"),
                   "tokenizer.json: expected a JSON object with a 'model', got {}", json.type_name());
    try {
      HfTokenizer tokenizer;
      tokenizer.model_ = BpeModel::from_json(json["model"]);
      tokenizer.normalizer_ = Normalizer::from_json(json.value("normalizer", nlohmann::json()));
      tokenizer.pre_tokenizer_ = PreTokenizer::from_json(json.value("pre_tokenizer", nlohmann::json()));
      tokenizer.template_.append(json.value("post_processor", nlohmann::json()));
      tokenizer.decoder_ = Decoder::from_json(json.value("decoder", nlohmann::json()));
      const Normalizer& normalizer = tokenizer.normalizer_;
      tokenizer.added_ = AddedVocabulary::from_json(
          json.value("added_tokens", nlohmann::json()), [&](std::string_view content) { return normalizer.apply(content); });
      if (const auto truncation = json.find("truncation"); truncation != json.end() && !truncation->is_null()) {
        ::verl::detail::throw_not_implemented("tokenizer.json truncation: built-in truncation is not supported");
      }
      if (const auto padding = json.find("padding"); padding != json.end() && !padding->is_null()) {
        ::verl::detail::throw_not_implemented("tokenizer.json padding: built-in padding is not supported");
      }
      tokenizer.build_decode_table();
      return tokenizer;
    } catch (const nlohmann::json::exception& error) {
      // A field of the wrong JSON type somewhere the checks above do not look.
      ::verl::detail::throw_invalid_argument("tokenizer.json: malformed ({})", error.what());
    }
  }

  static HfTokenizer from_json_string(std::string_view text, std::string_view source = "tokenizer.json") {
    nlohmann::json json;
    try {
      json = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& error) {
      ::verl::detail::throw_invalid_argument("{}: not valid JSON ({})", source, error.what());
    }
    return from_json(json);
  }

  /// Reads a tokenizer.json file (or the tokenizer.json in a model folder).
  static HfTokenizer from_file(const std::filesystem::path& path) {
    const auto file = std::filesystem::is_directory(path) ? path / "tokenizer.json" : path;
    return from_json_string(io::read_text_file(file), file.string());
  }

  /// Token ids of `text` (UTF-8). With add_special_tokens the post-processor's template is
  /// applied (e.g. Llama-3 prepends <|begin_of_text|>); special tokens written in the text are
  /// always recognized, as in tokenizers.
  [[nodiscard]] std::vector<TokenId> encode(std::string_view text, bool add_special_tokens = true) const {
    if (const auto invalid = detail::find_invalid_utf8(text)) {
      ::verl::detail::throw_invalid_argument("text: expected valid UTF-8, got an invalid byte 0x{:02X} at offset {}",
                                             static_cast<unsigned char>(text[*invalid]), *invalid);
    }
    std::vector<std::int32_t> ids;
    ids.reserve(text.size() / 3 + 8);
    if (add_special_tokens) ids.insert(ids.end(), template_.prefix.begin(), template_.prefix.end());
    std::vector<TextSegment> raw_segments;
    std::vector<TextSegment> normalized_segments;
    added_.split(text, /*normalized_pass=*/false, raw_segments);
    for (const TextSegment& raw : raw_segments) {
      // Metaspace's prepend_scheme "first" marks only the text at offset 0 of the input.
      const bool raw_at_start = raw.text.data() == text.data();
      if (raw.is_added_token()) {
        ids.push_back(raw.added_token_id);
        continue;
      }
      const std::string normalized = normalizer_.is_identity() ? std::string() : normalizer_.apply(raw.text);
      const std::string_view piece = normalizer_.is_identity() ? raw.text : std::string_view(normalized);
      normalized_segments.clear();
      added_.split(piece, /*normalized_pass=*/true, normalized_segments);
      for (const TextSegment& segment : normalized_segments) {
        if (segment.is_added_token()) {
          ids.push_back(segment.added_token_id);
          continue;
        }
        const bool at_start = raw_at_start && segment.text.data() == piece.data();
        pre_tokenizer_.run(segment.text, [&](std::string_view word) { model_.tokenize(word, ids); }, at_start);
      }
    }
    if (add_special_tokens) ids.insert(ids.end(), template_.suffix.begin(), template_.suffix.end());
    return std::vector<TokenId>(ids.begin(), ids.end());
  }

  /// Text of `ids`. With skip_special_tokens, special added tokens are left out (the default of
  /// the tokenizers package; transformers' decode defaults to false). Bytes that do not form
  /// valid UTF-8 (a multi-byte character cut between tokens) become U+FFFD, as the decoder says
  /// (ByteLevel: per invalid sequence; ByteFallback: per byte of a broken run of <0xXX> tokens).
  [[nodiscard]] std::string decode(std::span<const TokenId> ids, bool skip_special_tokens = true) const {
    const bool byte_level = decoder_.is_byte_level();
    std::string bytes;
    std::vector<std::string> tokens;
    if (byte_level) {
      bytes.reserve(ids.size() * 4);
    } else {
      tokens.reserve(ids.size());
    }
    for (std::size_t i = 0; i < ids.size(); ++i) {
      const TokenId id = ids[i];
      const auto kind = id >= 0 && static_cast<std::size_t>(id) < id_kinds_.size() ? id_kinds_[static_cast<std::size_t>(id)]
                                                                                     : IdKind::absent;
      VERL_CHECK_ARG(kind != IdKind::absent, "ids[{}]: expected a token id in the vocabulary [0, {}), got {}", i,
                     vocab_size(), id);
      if (skip_special_tokens && kind == IdKind::special) continue;
      if (byte_level) {
        bytes += decoded_[static_cast<std::size_t>(id)];
      } else {
        tokens.push_back(decoded_[static_cast<std::size_t>(id)]);
      }
    }
    return byte_level ? detail::utf8_lossy(bytes) : decoder_.decode(std::move(tokens));
  }

  /// One past the largest id (model vocabulary and added tokens).
  [[nodiscard]] std::size_t vocab_size() const { return std::max(model_.id_space(), added_.id_space()); }

  [[nodiscard]] SpecialTokenIds special_ids() const { return special_ids_; }
  /// Sets bos/eos/pad (tokenizer.json does not name them; tokenizer_config.json or the model's
  /// config does).
  void set_special_ids(SpecialTokenIds ids) {
    for (const auto& [label, id] : {std::pair{"bos", ids.bos}, std::pair{"eos", ids.eos}, std::pair{"pad", ids.pad}}) {
      VERL_CHECK_ARG(!id || (*id >= 0 && static_cast<std::size_t>(*id) < vocab_size()),
                     "special_ids.{}: expected an id in [0, {}), got {}", label, vocab_size(), id.value_or(-1));
    }
    special_ids_ = ids;
  }

  /// The id of a token string (added tokens first, then the model vocabulary).
  [[nodiscard]] std::optional<TokenId> token_to_id(std::string_view token) const {
    if (const auto id = added_.token_to_id(token)) return *id;
    if (const auto id = model_.token_to_id(token)) return *id;
    return std::nullopt;
  }
  /// The token string of an id (as stored: byte-level characters for BPE tokens).
  [[nodiscard]] std::optional<std::string> id_to_token(TokenId id) const {
    if (const AddedToken* added = added_.find(id)) return added->content;
    if (const std::string* token = model_.id_to_token(id)) return *token;
    return std::nullopt;
  }

  [[nodiscard]] const AddedVocabulary& added_vocabulary() const { return added_; }
  [[nodiscard]] const BpeModel& model() const { return model_; }
  [[nodiscard]] const PreTokenizer& pre_tokenizer() const { return pre_tokenizer_; }
  [[nodiscard]] const Normalizer& normalizer() const { return normalizer_; }
  [[nodiscard]] const Decoder& decoder() const { return decoder_; }

 private:
  enum class IdKind : std::uint8_t { absent, regular, special };

  /// What each id decodes to, computed once: the token's bytes under the ByteLevel decoder (else
  /// the token string the decoder chain starts from), and whether skip_special_tokens drops it.
  /// As in tokenizers, a token is special when its string is a special added token's content.
  void build_decode_table() {
    const auto& tables = byte_level_tables();
    const std::size_t size = vocab_size();
    id_kinds_.assign(size, IdKind::absent);
    decoded_.assign(size, std::string());
    auto set = [&](std::size_t id, const std::string& token) {
      id_kinds_[id] = added_.is_special_content(token) ? IdKind::special : IdKind::regular;
      decoded_[id].clear();  // an added token may reuse a model id
      // Tokens spelled in byte characters give their bytes; others (e.g. added tokens with
      // characters outside the byte alphabet) their UTF-8 text.
      if (!decoder_.is_byte_level() || !tables.decode(token, decoded_[id])) decoded_[id] = token;
    };
    for (std::size_t id = 0; id < size; ++id) {
      if (const std::string* token = model_.id_to_token(static_cast<TokenId>(id))) set(id, *token);
    }
    for (const AddedToken& token : added_.tokens()) {
      set(static_cast<std::size_t>(token.id), added_.decode_form(token));
    }
  }

  BpeModel model_;
  Normalizer normalizer_;
  PreTokenizer pre_tokenizer_;
  detail::SingleSequenceTemplate template_;
  AddedVocabulary added_;
  Decoder decoder_;
  SpecialTokenIds special_ids_;
  std::vector<IdKind> id_kinds_;     ///< by id
  std::vector<std::string> decoded_;  ///< by id: bytes (ByteLevel decoder) or the token string
};

static_assert(Tokenizer<HfTokenizer>);

}  // namespace verl::tokenizer
