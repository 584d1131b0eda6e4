// A GGUF file (llama.cpp) as a model of ours: the architecture from its metadata, the weights
// under llama.cpp's tensor names, and the tokenizer from its tokenizer.ggml.* keys.
//
// Architectures: llama, qwen2, qwen3 (`general.architecture`). Their sizes come from
// `<arch>.block_count`, `.embedding_length`, `.feed_forward_length`, `.attention.head_count`,
// `.attention.head_count_kv`, `.attention.key_length` (head dim), `.rope.freq_base`,
// `.attention.layer_norm_rms_epsilon`, `.context_length`; the vocabulary size from
// token_embd.weight; a file without output.weight has a tied head. llama.cpp's converter
// interleaves the rows of llama's q and k projections (and biases) for its rope; the loader puts
// them back in Hugging Face's order (qwen2/qwen3 files are not permuted). Rope scaling: none,
// `<arch>.rope.scaling.type` "linear" with `.rope.scaling.factor`, or Llama 3.1's "llama3", which
// llama.cpp's converter keeps only as the tensor rope_freqs.weight (what each inverse frequency is
// divided by; no metadata keys): the loader recovers a llama3 rope_scaling that gives exactly those
// factors, or refuses the tensor by name. Partial rotary dimensions are refused by name.
//
// The tokenizer: `tokenizer.ggml.model` "gpt2" (byte-level BPE) with the pre-tokenizer that
// `tokenizer.ggml.pre` names (llama-bpe, smollm, qwen2, gpt-2; others are refused by name),
// built as the tokenizer.json and tokenizer_config.json a Hugging Face folder would hold, so that
// save_gguf_as_hf_folder writes exactly what was loaded.
#pragma once

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <numbers>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "verl/core/error.hpp"
#include "verl/core/file_io.hpp"
#include "verl/model/checkpoint.hpp"
#include "verl/model/gguf.hpp"
#include "verl/model/hf_config.hpp"
#include "verl/model/transformer/transformer.hpp"
#include "verl/tokenizer/pre_tokenizer.hpp"
#include "verl/tokenizer/pretrained.hpp"

namespace verl::model {

/// llama.cpp's name of one of our (Hugging Face) parameters.
inline std::string gguf_tensor_name(std::string_view hf_name) {
  if (hf_name == "model.embed_tokens.weight") return "token_embd.weight";
  if (hf_name == "model.norm.weight") return "output_norm.weight";
  if (hf_name == "lm_head.weight") return "output.weight";
  static constexpr std::pair<std::string_view, std::string_view> layer_names[] = {
      {"input_layernorm.weight", "attn_norm.weight"},
      {"post_attention_layernorm.weight", "ffn_norm.weight"},
      {"self_attn.q_proj.weight", "attn_q.weight"},
      {"self_attn.q_proj.bias", "attn_q.bias"},
      {"self_attn.k_proj.weight", "attn_k.weight"},
      {"self_attn.k_proj.bias", "attn_k.bias"},
      {"self_attn.v_proj.weight", "attn_v.weight"},
      {"self_attn.v_proj.bias", "attn_v.bias"},
      {"self_attn.o_proj.weight", "attn_output.weight"},
      {"self_attn.o_proj.bias", "attn_output.bias"},
      {"self_attn.q_norm.weight", "attn_q_norm.weight"},
      {"self_attn.k_norm.weight", "attn_k_norm.weight"},
      {"mlp.gate_proj.weight", "ffn_gate.weight"},
      {"mlp.up_proj.weight", "ffn_up.weight"},
      {"mlp.down_proj.weight", "ffn_down.weight"},
      {"mlp.gate_proj.bias", "ffn_gate.bias"},
      {"mlp.up_proj.bias", "ffn_up.bias"},
      {"mlp.down_proj.bias", "ffn_down.bias"},
  };
  constexpr std::string_view prefix = "model.layers.";
  if (hf_name.starts_with(prefix)) {
    const std::string_view rest = hf_name.substr(prefix.size());
    const auto dot = rest.find('.');
    if (dot != std::string_view::npos) {
      const std::string_view suffix = rest.substr(dot + 1);
      for (const auto& [hf, gguf] : layer_names) {
        if (suffix == hf) return fmt::format("blk.{}.{}", rest.substr(0, dot), gguf);
      }
    }
  }
  ::verl::detail::throw_invalid_argument("parameter '{}': no GGUF tensor name is known for it", hf_name);
}

namespace detail::gguf {

/// A size read from metadata, positive and small enough for every later product.
inline std::int64_t positive_size(const GgufFile& file, const std::string& key, std::uint64_t value) {
  if (value == 0 || value > (std::uint64_t{1} << 31)) {
    file.fail("key '{}': expected a positive size below 2^31, got {}", key, value);
  }
  return static_cast<std::int64_t>(value);
}

/// llama.cpp's rope_freqs.weight for a llama3 rope scaling (convert_hf_to_gguf.py,
/// generate_extra_tensors): the factor each of the head_dim / 2 inverse frequencies is divided by
/// (1 above the high-frequency wavelength, `factor` below the low-frequency one, the smooth
/// interpolation between), which is transformers' llama3 inv_freq as a divisor.
inline std::vector<double> llama3_rope_factors(double theta, std::int64_t head_dim, const RopeScaling& scaling) {
  const double old_context = static_cast<double>(scaling.original_max_position_embeddings.value_or(8192));
  const double low = scaling.low_freq_factor, high = scaling.high_freq_factor, factor = scaling.factor;
  const double low_freq_wavelen = old_context / low, high_freq_wavelen = old_context / high;
  std::vector<double> factors;
  for (std::int64_t i = 0; i < head_dim / 2; ++i) {
    const double exponent = static_cast<double>(2 * i) / static_cast<double>(head_dim);
    const double wavelen = 2 * std::numbers::pi * std::pow(theta, exponent);
    if (wavelen < high_freq_wavelen) {
      factors.push_back(1.0);
    } else if (wavelen > low_freq_wavelen) {
      factors.push_back(factor);
    } else {
      const double smooth = (old_context / wavelen - low) / (high - low);
      factors.push_back(1.0 / ((1.0 - smooth) / factor + smooth));
    }
  }
  return factors;
}

/// The llama3 rope_scaling whose factors are the file's rope_freqs.weight (nullopt when they are
/// all 1). Only the two wavelengths original_max_position_embeddings / low_freq_factor and
/// / high_freq_factor matter, so low_freq_factor is taken as 1 (every Llama 3.x) unless that
/// leaves original_max_position_embeddings far from an integer: with two or more frequencies on
/// the ramp between the wavelengths, its straight line gives them; with fewer, llama.cpp's
/// defaults (high 4, context 8192) are tried, then thresholds placed between the frequencies.
/// Each candidate must reproduce every stored factor (relative 1e-3; the file holds float32
/// computed in float32); none does: NotImplemented naming the tensor.
inline std::optional<RopeScaling> llama3_scaling_from_rope_freqs(const GgufFile& file, const HfModelConfig& config) {
  constexpr std::string_view name = "rope_freqs.weight";
  const GgufTensorInfo& info = file.tensor(name);
  const std::int64_t half = config.head_dim / 2;
  if (info.dims.size() != 1 || info.dims[0] != static_cast<std::uint64_t>(half)) {
    file.fail("tensor '{}': expected dims [{}] (half the head dim {}), got {}", name, half, config.head_dim,
              format_dims(info.dims));
  }
  const std::vector<float> stored = file.dequantize(name);
  for (std::size_t i = 0; i < stored.size(); ++i) {
    if (!std::isfinite(stored[i]) || !(stored[i] > 0)) {
      file.fail("tensor '{}': expected positive finite factors, got {} at index {}", name, stored[i], i);
    }
  }
  const double factor = *std::ranges::max_element(stored);
  if (std::ranges::all_of(stored, [](float value) { return value == 1.0f; })) return std::nullopt;

  std::vector<double> wavelen(stored.size());
  for (std::size_t i = 0; i < stored.size(); ++i) {
    wavelen[i] = 2 * std::numbers::pi *
                 std::pow(config.rope_theta, static_cast<double>(2 * i) / static_cast<double>(config.head_dim));
  }
  // On the ramp, 1 / r = (1 - s) / factor + s with s = (context / wavelen - low) / (high - low).
  std::vector<std::size_t> ramp;
  double ones_max = 0, factor_min = std::numeric_limits<double>::infinity();
  for (std::size_t i = 0; i < stored.size(); ++i) {
    if (stored[i] == 1.0f) {
      ones_max = std::max(ones_max, wavelen[i]);
    } else if (stored[i] == static_cast<float>(factor)) {
      factor_min = std::min(factor_min, wavelen[i]);
    } else {
      ramp.push_back(i);
    }
  }
  auto llama3 = [&](double low, double high, double context) {
    RopeScaling scaling;
    scaling.rope_type = "llama3";
    scaling.factor = factor;
    scaling.low_freq_factor = low;
    scaling.high_freq_factor = high;
    scaling.original_max_position_embeddings = std::llround(context);
    return scaling;
  };
  std::vector<RopeScaling> candidates;
  // (1, high, context) and the same thresholds with the context rounded: (k, k high, round(context)).
  auto add = [&](double high, double context) {
    if (!(high > 1) || !std::isfinite(high) || !(context >= 1) || !(context < 1e12)) return;
    const double rounded = static_cast<double>(std::llround(context));
    candidates.push_back(llama3(1.0, high, context));
    const double k = rounded / context;
    candidates.push_back(llama3(k, k * high, rounded));
  };
  if (ramp.size() >= 2) {
    // s is a straight line in x = 1 / wavelen: s = a x + b, a = context / (high - low), b = -low / (high - low).
    double sx = 0, sy = 0, sxx = 0, sxy = 0;
    for (const std::size_t i : ramp) {
      const double x = 1.0 / wavelen[i];
      const double y = (1.0 / stored[i] - 1.0 / factor) / (1.0 - 1.0 / factor);
      sx += x, sy += y, sxx += x * x, sxy += x * y;
    }
    const auto n = static_cast<double>(ramp.size());
    const double a = (n * sxy - sx * sy) / (n * sxx - sx * sx), b = (sy - a * sx) / n;
    if (b < 0) {
      // low = 1: high - 1 = -1 / b, context = a (high - 1). Near-integer highs are snapped first.
      const double high = 1.0 - 1.0 / b, context = -a / b;
      const double snapped = std::round(high * 1000.0) / 1000.0;
      if (snapped != high) add(snapped, context);
      add(high, context);
    }
  } else {
    add(4.0, 8192.0);  // llama.cpp's defaults
    if (ramp.size() == 1) {
      // low 1, high 4: s = (context / wavelen - 1) / 3.
      const std::size_t i = ramp.front();
      const double s = (1.0 / stored[i] - 1.0 / factor) / (1.0 - 1.0 / factor);
      add(4.0, wavelen[i] * (3.0 * s + 1.0));
    } else if (std::isfinite(factor_min) && factor_min > ones_max) {
      // No frequency on the ramp: context / low just below the first scaled wavelength, context / high
      // just above the last unscaled one (4 when that fits).
      const double context = std::max(std::ceil(factor_min) - 1.0, 1.0);
      if (context > 4.0 * ones_max) add(4.0, context);
      if (context > ones_max) add(context / ((ones_max + context) / 2.0), context);
    }
  }
  const std::vector<double> expected(stored.begin(), stored.end());
  for (const RopeScaling& candidate : candidates) {
    const std::vector<double> got = llama3_rope_factors(config.rope_theta, config.head_dim, candidate);
    bool same = true;
    for (std::size_t i = 0; i < got.size() && same; ++i) same = std::abs(got[i] - expected[i]) <= 1e-3 * expected[i];
    if (same) return candidate;
  }
  ::verl::detail::throw_not_implemented(
      "GGUF file '{}': tensor '{}': per-frequency rope factors that no llama3 rope scaling (factor, "
      "low_freq_factor, high_freq_factor, original_max_position_embeddings) gives are not supported",
      file.source(), name);
}

/// Undoes llama.cpp's rope permutation of q/k rows: within each head of `head_dim` rows, GGUF row
/// 2j + i holds Hugging Face row i * head_dim / 2 + j (i in {0, 1}).
inline void unpermute_rope_rows(std::vector<float>& values, std::int64_t heads, std::int64_t head_dim,
                                std::int64_t cols) {
  const std::vector<float> stored = values;
  const std::int64_t half = head_dim / 2;
  for (std::int64_t h = 0; h < heads; ++h) {
    for (std::int64_t i = 0; i < 2; ++i) {
      for (std::int64_t j = 0; j < half; ++j) {
        const auto to = static_cast<std::size_t>((h * head_dim + i * half + j) * cols);
        const auto from = static_cast<std::size_t>((h * head_dim + 2 * j + i) * cols);
        std::copy_n(stored.begin() + static_cast<std::ptrdiff_t>(from), cols, values.begin() + static_cast<std::ptrdiff_t>(to));
      }
    }
  }
}

/// The pre-tokenizer, normalizer and ignore_merges of a `tokenizer.ggml.pre` name, as the
/// original tokenizer.json of those models has them.
struct PreTokenization {
  nlohmann::json pre_tokenizer;
  nlohmann::json normalizer;
  bool ignore_merges = false;
};

inline PreTokenization pre_tokenization(const GgufFile& file, std::string_view name) {
  const nlohmann::json byte_level_plain = {
      {"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}};
  const nlohmann::json byte_level_gpt2 = {
      {"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
  auto split = [](std::string_view pattern) {
    return nlohmann::json{{"type", "Split"},
                          {"pattern", {{"Regex", std::string(pattern)}}},
                          {"behavior", "Isolated"},
                          {"invert", false}};
  };
  auto sequence = [](nlohmann::json first, nlohmann::json second) {
    return nlohmann::json{{"type", "Sequence"}, {"pretokenizers", nlohmann::json::array({first, second})}};
  };
  // Llama 3: up to three digits a word, and its tokenizer.json's ignore_merges (a word already in
  // the vocabulary is one token).
  if (name == "llama-bpe") return {sequence(split(tokenizer::llama3_pattern), byte_level_plain), nullptr, true};
  if (name == "qwen2") {
    return {sequence(split(tokenizer::qwen2_pattern), byte_level_plain), {{"type", "NFC"}}, false};
  }
  // SmolLM: every digit on its own (tokenizers' Digits(individual_digits)), then GPT-2's words.
  if (name == "smollm") return {sequence(split(R"(\p{N})"), byte_level_gpt2), nullptr, false};
  if (name == "gpt-2") return {byte_level_gpt2, nullptr, false};
  ::verl::detail::throw_not_implemented(
      "GGUF file '{}': key 'tokenizer.ggml.pre': pre-tokenizer '{}' is not supported (supported: llama-bpe, smollm, "
      "qwen2, gpt-2)",
      file.source(), name);
}

/// GGUF's token types (llama.cpp's llama_token_type).
enum class TokenType : std::int64_t { normal = 1, unknown = 2, control = 3, user_defined = 4, unused = 5, byte = 6 };

}  // namespace detail::gguf

/// The tokenizer of a GGUF file as Hugging Face files would hold it.
struct GgufTokenizerFiles {
  nlohmann::json tokenizer;         ///< tokenizer.json
  nlohmann::json tokenizer_config;  ///< tokenizer_config.json (special tokens, chat template)
};

/// tokenizer.json and tokenizer_config.json equivalent to a file's tokenizer.ggml.* keys.
inline GgufTokenizerFiles gguf_tokenizer_files(const GgufFile& file) {
  using detail::gguf::TokenType;
  const std::string& model = file.require_string("tokenizer.ggml.model");
  if (model != "gpt2") {
    ::verl::detail::throw_not_implemented(
        "GGUF file '{}': key 'tokenizer.ggml.model': only 'gpt2' (byte-level BPE) tokenizers are supported, got '{}'",
        file.source(), model);
  }
  const auto tokens = file.require_string_array("tokenizer.ggml.tokens");
  if (tokens.empty()) file.fail("key 'tokenizer.ggml.tokens': expected at least one token, got none");
  std::vector<std::int64_t> types(tokens.size(), static_cast<std::int64_t>(TokenType::normal));
  if (file.contains("tokenizer.ggml.token_type")) {
    types = file.require_int_array("tokenizer.ggml.token_type");
    if (types.size() != tokens.size()) {
      file.fail("key 'tokenizer.ggml.token_type': expected one type per token ({}), got {}", tokens.size(),
                types.size());
    }
  }
  const detail::gguf::PreTokenization pre =
      detail::gguf::pre_tokenization(file, file.optional_string("tokenizer.ggml.pre").value_or("default"));

  nlohmann::json vocab = nlohmann::json::object();
  nlohmann::json added = nlohmann::json::array();
  for (std::size_t id = 0; id < tokens.size(); ++id) {
    const std::string token(tokens[id]);
    const auto type = static_cast<TokenType>(types[id]);
    if (type == TokenType::control || type == TokenType::unknown || type == TokenType::user_defined) {
      // Matched in text before BPE, as llama.cpp's special-token pass and tokenizers' added tokens do.
      const bool special = type != TokenType::user_defined;
      added.push_back({{"id", id}, {"content", token}, {"single_word", false}, {"lstrip", false}, {"rstrip", false},
                       {"normalized", false}, {"special", special}});
    } else if (!vocab.contains(token)) {
      vocab[token] = id;
    }
  }
  nlohmann::json merges = nlohmann::json::array();
  if (file.contains("tokenizer.ggml.merges")) {
    for (const auto merge : file.require_string_array("tokenizer.ggml.merges")) merges.push_back(std::string(merge));
  }
  auto special_id = [&](std::string_view key) -> std::optional<std::int64_t> {
    const auto id = file.optional_uint(key);
    if (!id) return std::nullopt;
    if (*id >= tokens.size()) file.fail("key '{}': expected a token id below {}, got {}", key, tokens.size(), *id);
    return static_cast<std::int64_t>(*id);
  };
  const auto bos = special_id("tokenizer.ggml.bos_token_id");
  const auto eos = special_id("tokenizer.ggml.eos_token_id");
  const auto pad = special_id("tokenizer.ggml.padding_token_id");
  const auto unk = special_id("tokenizer.ggml.unknown_token_id");
  const bool add_bos = file.optional_bool("tokenizer.ggml.add_bos_token").value_or(false);
  const bool add_eos = file.optional_bool("tokenizer.ggml.add_eos_token").value_or(false);
  if (add_bos && !bos) file.fail("key 'tokenizer.ggml.add_bos_token' is true, but 'tokenizer.ggml.bos_token_id' is missing");
  if (add_eos && !eos) file.fail("key 'tokenizer.ggml.add_eos_token' is true, but 'tokenizer.ggml.eos_token_id' is missing");

  nlohmann::json post_processor = nullptr;
  if (add_bos || add_eos) {
    nlohmann::json single = nlohmann::json::array();
    nlohmann::json special_tokens = nlohmann::json::object();
    auto add_special = [&](std::int64_t id) {
      const std::string token(tokens[static_cast<std::size_t>(id)]);
      single.push_back({{"SpecialToken", {{"id", token}, {"type_id", 0}}}});
      special_tokens[token] = {{"id", token}, {"ids", {id}}, {"tokens", {token}}};
    };
    if (add_bos) add_special(*bos);
    single.push_back({{"Sequence", {{"id", "A"}, {"type_id", 0}}}});
    if (add_eos) add_special(*eos);
    post_processor = {{"type", "TemplateProcessing"}, {"single", single}, {"pair", nlohmann::json::array()},
                      {"special_tokens", special_tokens}};
  }
  GgufTokenizerFiles files;
  files.tokenizer = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", added},
      {"normalizer", pre.normalizer},
      {"pre_tokenizer", pre.pre_tokenizer},
      {"post_processor", post_processor},
      {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
      {"model",
       {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr}, {"fuse_unk", false}, {"byte_fallback", false},
        {"ignore_merges", pre.ignore_merges}, {"vocab", vocab}, {"merges", merges}}},
  };
  auto token_of = [&](std::optional<std::int64_t> id) -> nlohmann::json {
    return id ? nlohmann::json(std::string(tokens[static_cast<std::size_t>(*id)])) : nlohmann::json(nullptr);
  };
  files.tokenizer_config = {{"tokenizer_class", "PreTrainedTokenizerFast"},
                            {"bos_token", token_of(bos)},
                            {"eos_token", token_of(eos)},
                            {"pad_token", token_of(pad)},
                            {"unk_token", token_of(unk)},
                            {"add_bos_token", add_bos},
                            {"add_eos_token", add_eos},
                            {"clean_up_tokenization_spaces", false}};
  if (const auto chat_template = file.optional_string("tokenizer.chat_template")) {
    files.tokenizer_config["chat_template"] = *chat_template;
  }
  return files;
}

/// The file's tokenizer and chat template.
inline tokenizer::PretrainedTokenizer load_gguf_tokenizer(const GgufFile& file) {
  const GgufTokenizerFiles files = gguf_tokenizer_files(file);
  return tokenizer::make_pretrained_tokenizer(files.tokenizer, files.tokenizer_config, file.source());
}

/// Our model configuration from the file's metadata.
inline HfModelConfig gguf_model_config(const GgufFile& file) {
  const std::string& arch = file.require_string("general.architecture");
  HfModelConfig config;
  if (arch == "llama") {
    config.family = ModelFamily::llama;
    config.architectures = {"LlamaForCausalLM"};
  } else if (arch == "qwen2") {
    config.family = ModelFamily::qwen2;
    config.architectures = {"Qwen2ForCausalLM"};
  } else if (arch == "qwen3") {
    config.family = ModelFamily::qwen3;
    config.architectures = {"Qwen3ForCausalLM"};
  } else {
    ::verl::detail::throw_not_implemented(
        "GGUF file '{}': key 'general.architecture': expected llama, qwen2 or qwen3, got '{}'", file.source(), arch);
  }
  config.model_type = arch;
  auto key = [&](std::string_view suffix) { return fmt::format("{}.{}", arch, suffix); };
  auto size = [&](std::string_view suffix) {
    const std::string name = key(suffix);
    return detail::gguf::positive_size(file, name, file.require_uint(name));
  };
  config.num_hidden_layers = size("block_count");
  config.hidden_size = size("embedding_length");
  config.intermediate_size = size("feed_forward_length");
  config.num_attention_heads = size("attention.head_count");
  config.num_key_value_heads = file.contains(key("attention.head_count_kv")) ? size("attention.head_count_kv")
                                                                            : config.num_attention_heads;
  if (config.num_attention_heads % config.num_key_value_heads != 0) {
    file.fail("key '{}': expected a divisor of {} ({}), got {}", key("attention.head_count_kv"),
              key("attention.head_count"), config.num_attention_heads, config.num_key_value_heads);
  }
  if (file.contains(key("attention.key_length"))) {
    config.head_dim = size("attention.key_length");
  } else {
    if (config.hidden_size % config.num_attention_heads != 0) {
      file.fail("key '{}' = {} is not a multiple of '{}' = {}, and '{}' is absent", key("embedding_length"),
                config.hidden_size, key("attention.head_count"), config.num_attention_heads, key("attention.key_length"));
    }
    config.head_dim = config.hidden_size / config.num_attention_heads;
  }
  if (file.contains(key("attention.value_length")) && size("attention.value_length") != config.head_dim) {
    ::verl::detail::throw_not_implemented("GGUF file '{}': key '{}' = {} differs from the key length {}",
                                          file.source(), key("attention.value_length"),
                                          size("attention.value_length"), config.head_dim);
  }
  if (file.contains(key("rope.dimension_count")) && size("rope.dimension_count") != config.head_dim) {
    ::verl::detail::throw_not_implemented(
        "GGUF file '{}': key '{}' = {}: rope over part of a head (head dim {}) is not supported", file.source(),
        key("rope.dimension_count"), size("rope.dimension_count"), config.head_dim);
  }
  if (config.head_dim % 2 != 0) file.fail("head dim: expected an even number, got {}", config.head_dim);
  config.max_position_embeddings = size("context_length");
  config.rms_norm_eps = file.require_float(key("attention.layer_norm_rms_epsilon"));
  if (!(config.rms_norm_eps > 0) || !std::isfinite(config.rms_norm_eps)) {
    file.fail("key '{}': expected a positive number, got {}", key("attention.layer_norm_rms_epsilon"),
              config.rms_norm_eps);
  }
  config.rope_theta = file.optional_float(key("rope.freq_base")).value_or(10000.0);
  if (!(config.rope_theta > 0) || !std::isfinite(config.rope_theta)) {
    file.fail("key '{}': expected a positive number, got {}", key("rope.freq_base"), config.rope_theta);
  }
  if (const auto scaling = file.optional_string(key("rope.scaling.type")); scaling && *scaling != "none") {
    if (*scaling != "linear") {
      ::verl::detail::throw_not_implemented("GGUF file '{}': key '{}': rope scaling '{}' is not supported (supported: "
                                            "none, linear)",
                                            file.source(), key("rope.scaling.type"), *scaling);
    }
    RopeScaling linear;
    linear.rope_type = "linear";
    linear.factor = file.require_float(key("rope.scaling.factor"));
    config.rope_scaling = linear;
  }
  if (file.contains_tensor("rope_freqs.weight")) {
    if (config.rope_scaling) {
      ::verl::detail::throw_not_implemented(
          "GGUF file '{}': tensor 'rope_freqs.weight' together with key '{}' (two rope scalings) is not supported",
          file.source(), key("rope.scaling.type"));
    }
    config.rope_scaling = detail::gguf::llama3_scaling_from_rope_freqs(file, config);
  }
  const GgufTensorInfo& embedding = file.tensor("token_embd.weight");
  if (embedding.dims.size() != 2 || embedding.dims[0] != static_cast<std::uint64_t>(config.hidden_size)) {
    file.fail("tensor 'token_embd.weight': expected dims [{}, vocab size], got {}", config.hidden_size,
              detail::gguf::format_dims(embedding.dims));
  }
  config.vocab_size = detail::gguf::positive_size(file, "token_embd.weight rows", embedding.dims[1]);
  if (const auto vocab_size = file.optional_uint(key("vocab_size")); vocab_size && *vocab_size != embedding.dims[1]) {
    file.fail("key '{}': {} disagrees with the {} rows of token_embd.weight", key("vocab_size"), *vocab_size,
              embedding.dims[1]);
  }
  config.tie_word_embeddings = !file.contains_tensor("output.weight");
  if (config.family == ModelFamily::qwen2) {
    config.qkv_bias = true;
  } else {
    config.qkv_bias = file.contains_tensor("blk.0.attn_q.bias");
    config.o_proj_bias = file.contains_tensor("blk.0.attn_output.bias");
    if (config.family == ModelFamily::llama && config.qkv_bias != config.o_proj_bias) {
      file.fail("llama: tensors 'blk.0.attn_q.bias' and 'blk.0.attn_output.bias' must both be present or both absent "
                "(attention_bias)");
    }
    config.mlp_bias = config.family == ModelFamily::llama && file.contains_tensor("blk.0.ffn_up.bias");
  }
  config.qk_norm = config.family == ModelFamily::qwen3;
  if (const auto id = file.optional_uint("tokenizer.ggml.bos_token_id")) config.bos_token_ids = {static_cast<std::int64_t>(*id)};
  if (const auto id = file.optional_uint("tokenizer.ggml.eos_token_id")) config.eos_token_ids = {static_cast<std::int64_t>(*id)};
  if (const auto id = file.optional_uint("tokenizer.ggml.padding_token_id")) config.pad_token_id = static_cast<std::int64_t>(*id);
  config.torch_dtype = "float32";
  return config;
}

namespace detail::gguf {

/// Fills every parameter of `model` from the file (dequantized, rope rows of llama's q/k put
/// back); a tensor the model has no place for is an error.
template <class Model>
void load_gguf_parameters(Model& model, const GgufFile& file) {
  const HfModelConfig& config = model.config();
  std::set<std::string, std::less<>> used;
  model.for_each_parameter([&](const auto& p) {
    const std::string name = gguf_tensor_name(p.name);
    if (!file.contains_tensor(name)) {
      file.fail("missing tensor '{}' (our '{}', shape {})", name, p.name, shape_string(p.shape));
    }
    const GgufTensorInfo& info = file.tensor(name);
    const auto shape = info.torch_shape();
    if (!std::ranges::equal(shape, p.shape)) {
      file.fail("tensor '{}' (our '{}'): expected dims {} for the metadata's sizes, got {}", name, p.name,
                format_dims(std::vector<std::uint64_t>(p.shape.rbegin(), p.shape.rend())), format_dims(info.dims));
    }
    std::vector<float> values = file.dequantize(name);
    if (config.family == ModelFamily::llama) {
      const bool query = p.name.ends_with("q_proj.weight") || p.name.ends_with("q_proj.bias");
      const bool key = p.name.ends_with("k_proj.weight") || p.name.ends_with("k_proj.bias");
      if (query || key) {
        const std::int64_t cols = p.shape.size() == 2 ? p.shape[1] : 1;
        unpermute_rope_rows(values, query ? config.num_attention_heads : config.num_key_value_heads, config.head_dim,
                            cols);
      }
    }
    if (const auto bad = first_non_finite(std::span<const float>(values))) {
      file.fail("tensor '{}': expected finite weights, got {} at index {}", name, values[*bad], *bad);
    }
    std::ranges::transform(values, p.value.begin(), [](float v) { return static_cast<std::remove_cvref_t<decltype(p.value[0])>>(v); });
    used.insert(name);
  });
  // Llama 3.1's rope factors are the configuration's llama3 rope_scaling (gguf_model_config), not a parameter.
  if (config.rope_scaling && config.rope_scaling->rope_type == "llama3") used.insert("rope_freqs.weight");
  for (const auto& info : file.tensors()) {
    if (!used.contains(info.name)) {
      file.fail("unexpected tensor '{}' (dims {}): the {} model with {} layers has no such parameter", info.name,
                format_dims(info.dims), config.model_type, config.num_hidden_layers);
    }
  }
}

}  // namespace detail::gguf

/// A policy model from a GGUF file.
template <class Scalar = float>
BasicTransformer<Scalar> load_gguf_transformer(const GgufFile& file, const TransformerOptions& options = {}) {
  BasicTransformer<Scalar> model(gguf_model_config(file), options);
  detail::gguf::load_gguf_parameters(model, file);
  return model;
}

template <class Scalar = float>
BasicTransformer<Scalar> load_gguf_transformer(const std::filesystem::path& path, const TransformerOptions& options = {}) {
  return load_gguf_transformer<Scalar>(GgufFile(path), options);
}

/// Whether `path` names a GGUF file (rather than a Hugging Face folder).
inline bool is_gguf_file(const std::filesystem::path& path) { return GgufFile::has_magic(path); }

/// Writes the model of a GGUF file as an ordinary Hugging Face folder: config.json, the
/// dequantized weights (model.safetensors, `options.dtype`), tokenizer.json and
/// tokenizer_config.json (with the chat template).
inline void save_gguf_as_hf_folder(const std::filesystem::path& gguf_path, const std::filesystem::path& folder,
                                   const SaveOptions& options = {}) {
  const GgufFile file(gguf_path);
  const Transformer model = load_gguf_transformer(file, {.num_threads = 1});
  const GgufTokenizerFiles tokenizer_files = gguf_tokenizer_files(file);
  (void)tokenizer::make_pretrained_tokenizer(tokenizer_files.tokenizer, tokenizer_files.tokenizer_config,
                                             file.source());  // refuse before writing anything
  save_transformer(model, folder, options);
  io::write_file_atomically(folder / "tokenizer.json", tokenizer_files.tokenizer.dump(2) + "\n");
  io::write_file_atomically(folder / "tokenizer_config.json", tokenizer_files.tokenizer_config.dump(2) + "\n");
}

}  // namespace verl::model
