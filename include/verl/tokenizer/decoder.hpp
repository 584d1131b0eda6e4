// tokenizer.json's "decoder": how the token strings of decoded ids become text.
//
// As in tokenizers, a decoder maps the list of token strings to a new list, a Sequence chains
// them, and the final list is concatenated, so per-token steps act on each token separately:
//   ByteLevel     byte characters -> bytes, all tokens fused into one string (lossy UTF-8)
//   Replace       a literal pattern -> content in each token
//   ByteFallback  each run of consecutive <0xXX> tokens -> its bytes as one string; when the run
//                 is not valid UTF-8, one U+FFFD per byte of the run (not per invalid sequence)
//   Fuse          all tokens -> one string
//   Strip         up to `start` leading / `stop` trailing `content` characters off each token
//   Metaspace     "▁" -> ' ' in each token; in the first token "▁" is dropped instead, unless
//                 prepend_scheme is "never"
// The Llama-2 / Mistral chain Sequence[Replace("▁" -> " "), ByteFallback, Fuse, Strip(" ", 1, 0)]
// therefore drops one leading space of the whole text. Other decoders (WordPiece, BPEDecoder,
// CTC, Replace with a regex) throw verl::NotImplemented when loaded.
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "verl/core/error.hpp"
#include "verl/tokenizer/byte_level.hpp"
#include "verl/tokenizer/detail/unicode.hpp"
#include "verl/tokenizer/normalizer.hpp"
#include "verl/tokenizer/pre_tokenizer.hpp"

namespace verl::tokenizer {

namespace detail {

/// The byte a ByteFallback token such as "<0x4F>" stands for, or -1. Like tokenizers (Rust's
/// u8::from_str_radix on the two characters), hex digits of either case and a leading '+' are
/// accepted.
inline int byte_fallback_value(std::string_view token) {
  if (token.size() != 6 || !token.starts_with("<0x") || token[5] != '>') return -1;
  auto digit = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  const int high = digit(token[3]);
  const int low = digit(token[4]);
  if (low < 0) return -1;
  if (token[3] == '+') return low;
  return high < 0 ? -1 : high * 16 + low;
}

}  // namespace detail

class Decoder {
 public:
  enum class Kind { byte_level, replace, byte_fallback, fuse, strip, metaspace };
  struct Step {
    Kind kind = Kind::fuse;
    std::string pattern;        ///< replace: the literal to find
    std::string content;        ///< replace: the replacement; strip: the character to strip
    std::size_t start = 0;      ///< strip: at most this many leading characters
    std::size_t stop = 0;       ///< strip: at most this many trailing characters
    MetaspaceOptions metaspace;  ///< metaspace
  };

  Decoder() = default;

  static Decoder from_json(const nlohmann::json& json) {
    Decoder decoder;
    decoder.present_ = !json.is_null();
    decoder.append(json);
    return decoder;
  }

  /// Whether tokenizer.json has a decoder at all (without one, tokens are joined with spaces).
  [[nodiscard]] bool present() const { return present_; }
  /// Exactly the ByteLevel decoder (GPT-2 style files), which allows a faster byte-table path.
  [[nodiscard]] bool is_byte_level() const { return steps_.size() == 1 && steps_[0].kind == Kind::byte_level; }
  [[nodiscard]] const std::vector<Step>& steps() const { return steps_; }

  /// The text of `tokens` (token strings, special tokens already left out as requested).
  [[nodiscard]] std::string decode(std::vector<std::string> tokens) const {
    if (!present_) {
      std::string out;
      for (std::size_t i = 0; i < tokens.size(); ++i) {
        if (i > 0) out += ' ';
        out += tokens[i];
      }
      return out;
    }
    for (const Step& step : steps_) tokens = run(step, std::move(tokens));
    std::string out;
    for (const auto& token : tokens) out += token;
    return out;
  }

 private:
  static std::vector<std::string> run(const Step& step, std::vector<std::string> tokens) {
    switch (step.kind) {
      case Kind::byte_level: {
        const auto& tables = byte_level_tables();
        std::string bytes;
        for (const auto& token : tokens) {
          if (!tables.decode(token, bytes)) bytes += token;  // characters outside the byte alphabet stay
        }
        return {detail::utf8_lossy(bytes)};
      }
      case Kind::replace:
        for (auto& token : tokens) token = detail::replace_all(token, step.pattern, step.content);
        return tokens;
      case Kind::byte_fallback: {
        std::vector<std::string> out;
        out.reserve(tokens.size());
        std::string run_bytes;
        std::size_t run_length = 0;
        auto flush = [&] {
          if (run_length == 0) return;
          if (detail::find_invalid_utf8(run_bytes)) {
            for (std::size_t k = 0; k < run_length; ++k) out.emplace_back("\xEF\xBF\xBD");
          } else {
            out.push_back(run_bytes);
          }
          run_bytes.clear();
          run_length = 0;
        };
        for (auto& token : tokens) {
          if (const int byte = detail::byte_fallback_value(token); byte >= 0) {
            run_bytes.push_back(static_cast<char>(byte));
            ++run_length;
          } else {
            flush();
            out.push_back(std::move(token));
          }
        }
        flush();
        return out;
      }
      case Kind::fuse: {
        std::string fused;
        for (const auto& token : tokens) fused += token;
        return {std::move(fused)};
      }
      case Kind::strip:
        for (auto& token : tokens) token = strip(token, step);
        return tokens;
      case Kind::metaspace: {
        const std::string& replacement = step.metaspace.replacement;
        for (std::size_t i = 0; i < tokens.size(); ++i) {
          const bool drop = i == 0 && step.metaspace.prepend_scheme != PrependScheme::never;
          tokens[i] = detail::replace_all(tokens[i], replacement, drop ? "" : " ");
        }
        return tokens;
      }
    }
    return tokens;
  }

  /// Strip on one token. Where tokenizers panics (a token shorter than what is stripped from
  /// both ends), the token becomes empty.
  static std::string strip(const std::string& token, const Step& step) {
    const std::string_view content = step.content;
    std::string_view view = token;
    for (std::size_t k = 0; k < step.start && view.starts_with(content); ++k) view.remove_prefix(content.size());
    const std::size_t stripped_front = token.size() - view.size();
    std::string_view tail = token;
    std::size_t back = token.size();
    for (std::size_t k = 0; k < step.stop && tail.ends_with(content); ++k) {
      tail.remove_suffix(content.size());
      back = tail.size();
    }
    if (back <= stripped_front) return {};
    return token.substr(stripped_front, back - stripped_front);
  }

  void append(const nlohmann::json& json) {
    if (json.is_null()) return;
    VERL_CHECK_ARG(json.is_object() && json.contains("type") && json["type"].is_string(),
                   "tokenizer.json decoder: expected null or an object with a 'type', got {}", json.dump());
    const auto& type = json["type"].get_ref<const std::string&>();
    Step step;
    if (type == "Sequence") {
      VERL_CHECK_ARG(json.contains("decoders") && json["decoders"].is_array(),
                     "tokenizer.json decoder Sequence: expected a 'decoders' list");
      for (const auto& inner : json["decoders"]) append(inner);
      return;
    }
    if (type == "ByteLevel") {
      step.kind = Kind::byte_level;
    } else if (type == "Replace") {
      step.kind = Kind::replace;
      std::tie(step.pattern, step.content) = detail::parse_replace(json, "decoder");
    } else if (type == "ByteFallback") {
      step.kind = Kind::byte_fallback;
    } else if (type == "Fuse") {
      step.kind = Kind::fuse;
    } else if (type == "Strip") {
      step.kind = Kind::strip;
      const auto content = json.find("content");
      VERL_CHECK_ARG(content != json.end() && content->is_string() &&
                         detail::is_single_code_point(content->get_ref<const std::string&>()),
                     "tokenizer.json decoder Strip.content: expected one character, got {}",
                     content == json.end() ? std::string("nothing") : content->dump());
      step.content = content->get<std::string>();
      for (const auto& [key, target] : {std::pair{"start", &step.start}, std::pair{"stop", &step.stop}}) {
        const auto found = json.find(key);
        VERL_CHECK_ARG(found != json.end() && found->is_number_integer() && found->get<std::int64_t>() >= 0,
                       "tokenizer.json decoder Strip.{}: expected a non-negative integer, got {}", key,
                       found == json.end() ? std::string("nothing") : found->dump());
        *target = found->get<std::size_t>();
      }
    } else if (type == "Metaspace") {
      step.kind = Kind::metaspace;
      step.metaspace = MetaspaceOptions::from_json(json, "decoder");
    } else {
      ::verl::detail::throw_not_implemented(
          "tokenizer.json decoder: type '{}' is not supported (supported: ByteLevel, Replace, ByteFallback, Fuse, "
          "Strip, Metaspace, Sequence)",
          type);
    }
    steps_.push_back(std::move(step));
  }

  bool present_ = false;
  std::vector<Step> steps_;
};

}  // namespace verl::tokenizer
