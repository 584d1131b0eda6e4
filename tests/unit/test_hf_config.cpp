#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "verl/model/hf_config.hpp"

using namespace verl;
using namespace verl::model;

namespace {

// The shapes of real published configs (Qwen2.5-0.5B-Instruct, Llama-3.2-1B-Instruct).
const char* qwen2_config = R"({
  "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
  "eos_token_id": 151645, "hidden_act": "silu", "hidden_size": 896, "initializer_range": 0.02,
  "intermediate_size": 4864, "max_position_embeddings": 32768, "max_window_layers": 21,
  "model_type": "qwen2", "num_attention_heads": 14, "num_hidden_layers": 24, "num_key_value_heads": 2,
  "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 32768, "tie_word_embeddings": true,
  "torch_dtype": "bfloat16", "transformers_version": "4.43.1", "use_cache": true,
  "use_sliding_window": false, "vocab_size": 151936})";

const char* llama_config = R"({
  "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009], "head_dim": 64, "hidden_act": "silu",
  "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 8192, "max_position_embeddings": 131072,
  "mlp_bias": false, "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 16,
  "num_key_value_heads": 8, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
  "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "rope_theta": 500000.0, "tie_word_embeddings": true, "torch_dtype": "bfloat16", "use_cache": true,
  "vocab_size": 128256})";

// Qwen3-0.6B's shape: per-head q/k norms, head_dim 128 with hidden 1024 / 16 heads.
const char* qwen3_config = R"({
  "architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu", "hidden_size": 1024,
  "initializer_range": 0.02, "intermediate_size": 3072, "max_position_embeddings": 40960, "max_window_layers": 28,
  "model_type": "qwen3", "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 8,
  "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 1000000, "sliding_window": null,
  "tie_word_embeddings": true, "torch_dtype": "bfloat16", "transformers_version": "4.51.0", "use_cache": true,
  "use_sliding_window": false, "vocab_size": 151936})";

std::string error_of(const nlohmann::json& json) {
  try {
    (void)HfModelConfig::from_json(json, "tiny/config.json");
  } catch (const InvalidArgument& error) {
    return error.what();
  }
  ADD_FAILURE() << "expected verl::InvalidArgument for " << json.dump();
  return {};
}

bool contains(const std::string& text, std::string_view part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST(HfConfig, ParsesAQwen2Config) {
  const auto config = HfModelConfig::from_json(nlohmann::json::parse(qwen2_config));
  EXPECT_EQ(config.family, ModelFamily::qwen2);
  EXPECT_EQ(config.architectures, std::vector<std::string>{"Qwen2ForCausalLM"});
  EXPECT_EQ(config.hidden_size, 896);
  EXPECT_EQ(config.intermediate_size, 4864);
  EXPECT_EQ(config.num_hidden_layers, 24);
  EXPECT_EQ(config.num_attention_heads, 14);
  EXPECT_EQ(config.num_key_value_heads, 2);
  EXPECT_EQ(config.num_key_value_groups(), 7);
  EXPECT_EQ(config.head_dim, 64);
  EXPECT_EQ(config.vocab_size, 151936);
  EXPECT_EQ(config.max_position_embeddings, 32768);
  EXPECT_DOUBLE_EQ(config.rms_norm_eps, 1e-6);
  EXPECT_DOUBLE_EQ(config.rope_theta, 1e6);
  EXPECT_FALSE(config.rope_scaling.has_value());
  EXPECT_TRUE(config.tie_word_embeddings);
  EXPECT_TRUE(config.qkv_bias);
  EXPECT_FALSE(config.o_proj_bias);
  EXPECT_EQ(config.bos_token_id(), 151643);
  EXPECT_EQ(config.eos_token_ids, std::vector<std::int64_t>{151645});
  EXPECT_FALSE(config.pad_token_id.has_value());
  EXPECT_EQ(config.torch_dtype, "bfloat16");
}

TEST(HfConfig, ParsesALlama3Config) {
  const auto config = HfModelConfig::from_json(nlohmann::json::parse(llama_config));
  EXPECT_EQ(config.family, ModelFamily::llama);
  EXPECT_EQ(config.head_dim, 64);
  EXPECT_EQ(config.num_key_value_heads, 8);
  EXPECT_DOUBLE_EQ(config.rms_norm_eps, 1e-5);
  EXPECT_DOUBLE_EQ(config.rope_theta, 500000.0);
  ASSERT_TRUE(config.rope_scaling.has_value());
  EXPECT_EQ(config.rope_scaling->rope_type, "llama3");
  EXPECT_DOUBLE_EQ(config.rope_scaling->factor, 32.0);
  EXPECT_EQ(config.rope_scaling->original_max_position_embeddings, 8192);
  EXPECT_FALSE(config.qkv_bias);
  EXPECT_FALSE(config.o_proj_bias);
  EXPECT_EQ(config.eos_token_ids, (std::vector<std::int64_t>{128001, 128008, 128009}));
}

TEST(HfConfig, ParsesAQwen3Config) {
  const auto config = HfModelConfig::from_json(nlohmann::json::parse(qwen3_config));
  EXPECT_EQ(config.family, ModelFamily::qwen3);
  EXPECT_EQ(config.model_type, "qwen3");
  EXPECT_EQ(config.head_dim, 128);
  EXPECT_EQ(config.num_key_value_groups(), 2);
  EXPECT_TRUE(config.qk_norm);
  EXPECT_FALSE(config.qkv_bias);
  EXPECT_FALSE(config.o_proj_bias);
  EXPECT_FALSE(config.mlp_bias);
  EXPECT_FALSE(config.use_sliding_window);
  EXPECT_TRUE(config.tie_word_embeddings);
  EXPECT_DOUBLE_EQ(config.rope_theta, 1e6);
  EXPECT_FALSE(config.rope_scaling.has_value());
  // attention_bias puts biases on q, k, v and o, as in Qwen3Attention.
  auto biased = nlohmann::json::parse(qwen3_config);
  biased["attention_bias"] = true;
  EXPECT_TRUE(HfModelConfig::from_json(biased).qkv_bias);
  EXPECT_TRUE(HfModelConfig::from_json(biased).o_proj_bias);
  // Qwen2 and Llama have no q/k norms.
  EXPECT_FALSE(HfModelConfig::from_json(nlohmann::json::parse(qwen2_config)).qk_norm);
  EXPECT_FALSE(HfModelConfig::from_json(nlohmann::json::parse(llama_config)).qk_norm);
}

TEST(HfConfig, ParsesAMistralConfigWithMistralConfigDefaults) {
  const nlohmann::json minimal = {{"model_type", "mistral"},  {"hidden_size", 64},         {"intermediate_size", 128},
                                  {"num_hidden_layers", 2},     {"num_attention_heads", 16}, {"vocab_size", 100}};
  const auto config = HfModelConfig::from_json(minimal);
  EXPECT_EQ(config.family, ModelFamily::mistral);
  EXPECT_EQ(config.num_key_value_heads, 8);  // MistralConfig's default, not one per query head
  EXPECT_EQ(config.max_position_embeddings, 131072);
  EXPECT_EQ(config.bos_token_ids, std::vector<std::int64_t>{1});
  EXPECT_EQ(config.eos_token_ids, std::vector<std::int64_t>{2});
  EXPECT_FALSE(config.qkv_bias || config.o_proj_bias || config.mlp_bias || config.qk_norm);
  // Every layer slides, 4096 keys by default.
  EXPECT_EQ(config.attention_window(0), 4096);
  EXPECT_EQ(config.attention_window(1), 4096);
  EXPECT_EQ(HfModelConfig::from_json(config.to_json()), config);
  auto explicit_null = minimal;
  explicit_null["sliding_window"] = nullptr;  // Mistral-7B-v0.2 and later
  explicit_null["num_key_value_heads"] = nullptr;
  const auto full = HfModelConfig::from_json(explicit_null);
  EXPECT_FALSE(full.use_sliding_window);
  EXPECT_EQ(full.attention_window(1), 0);
  EXPECT_EQ(full.num_key_value_heads, 16);
  EXPECT_EQ(HfModelConfig::from_json(full.to_json()), full);
  auto legacy = minimal;
  legacy.erase("model_type");
  legacy["architectures"] = {"MistralForCausalLM"};
  EXPECT_EQ(HfModelConfig::from_json(legacy).family, ModelFamily::mistral);
}

TEST(HfConfig, SlidingWindowCountsOnlyWhereALayerSlides) {
  // As Qwen2Config / Qwen3Config decide: use_sliding_window with a window and a layer at or past
  // max_window_layers (or a "sliding_attention" entry in layer_types).
  auto json = nlohmann::json::parse(qwen2_config);  // 24 layers, max_window_layers 21, sliding_window 32768
  json["use_sliding_window"] = true;
  const auto sliding = HfModelConfig::from_json(json);
  EXPECT_TRUE(sliding.use_sliding_window);
  EXPECT_EQ(sliding.sliding_window, 32768);
  EXPECT_EQ(sliding.attention_window(20), 0);
  EXPECT_EQ(sliding.attention_window(21), 32768);
  EXPECT_EQ(sliding.attention_window(23), 32768);
  EXPECT_EQ(HfModelConfig::from_json(sliding.to_json()), sliding);  // written back as layer_types
  json["sliding_window"] = 0;
  EXPECT_TRUE(contains(error_of(json), "'sliding_window': expected a positive integer, got 0"));
  json["sliding_window"] = 32768;
  json["max_window_layers"] = 24;
  EXPECT_FALSE(HfModelConfig::from_json(json).use_sliding_window);
  json["max_window_layers"] = 21;
  json["sliding_window"] = nullptr;
  EXPECT_FALSE(HfModelConfig::from_json(json).use_sliding_window);
  json = nlohmann::json::parse(qwen3_config);
  json["use_sliding_window"] = true;
  json["sliding_window"] = 4096;
  json["layer_types"] = nlohmann::json::array();
  for (int l = 0; l < 28; ++l) json["layer_types"].push_back("full_attention");
  EXPECT_FALSE(HfModelConfig::from_json(json).use_sliding_window);
  json["layer_types"][27] = "sliding_attention";
  EXPECT_TRUE(HfModelConfig::from_json(json).use_sliding_window);
  EXPECT_EQ(HfModelConfig::from_json(json).attention_window(27), 4096);
  EXPECT_EQ(HfModelConfig::from_json(json).attention_window(26), 0);
  auto short_types = json;
  short_types["layer_types"].erase(0);
  EXPECT_TRUE(contains(error_of(short_types), "'layer_types': expected one entry per layer (28), got 27"));
  // Without use_sliding_window no layer slides, whatever layer_types says.
  json["use_sliding_window"] = false;
  EXPECT_FALSE(HfModelConfig::from_json(json).use_sliding_window);
}

TEST(HfConfig, DefaultsFollowTheTransformersConfigClasses) {
  const nlohmann::json minimal = {{"model_type", "llama"},       {"hidden_size", 64},       {"intermediate_size", 128},
                                  {"num_hidden_layers", 2},      {"num_attention_heads", 4}, {"vocab_size", 100}};
  const auto llama = HfModelConfig::from_json(minimal);
  EXPECT_EQ(llama.num_key_value_heads, 4);
  EXPECT_EQ(llama.head_dim, 16);
  EXPECT_EQ(llama.max_position_embeddings, 2048);
  EXPECT_DOUBLE_EQ(llama.rope_theta, 10000.0);
  EXPECT_FALSE(llama.tie_word_embeddings);
  EXPECT_EQ(llama.bos_token_ids, std::vector<std::int64_t>{1});
  EXPECT_EQ(llama.eos_token_ids, std::vector<std::int64_t>{2});
  auto no_bos = minimal;
  no_bos["bos_token_id"] = nullptr;  // an explicit null is not the default
  EXPECT_TRUE(HfModelConfig::from_json(no_bos).bos_token_ids.empty());
  EXPECT_EQ(HfModelConfig::from_json(HfModelConfig::from_json(no_bos).to_json()), HfModelConfig::from_json(no_bos));

  auto qwen_json = minimal;
  qwen_json["model_type"] = "qwen2";
  qwen_json["bos_token_id"] = nullptr;
  const auto qwen = HfModelConfig::from_json(qwen_json);
  EXPECT_EQ(qwen.max_position_embeddings, 32768);
  EXPECT_TRUE(qwen.bos_token_ids.empty());
  EXPECT_TRUE(qwen.qkv_bias);

  // Llama with attention_bias has biases on q, k, v and o.
  auto biased = minimal;
  biased["attention_bias"] = true;
  const auto with_bias = HfModelConfig::from_json(biased);
  EXPECT_TRUE(with_bias.qkv_bias);
  EXPECT_TRUE(with_bias.o_proj_bias);

  // No model_type: the architecture name decides.
  auto legacy = minimal;
  legacy.erase("model_type");
  legacy["architectures"] = {"Qwen2ForTokenClassification"};
  EXPECT_EQ(HfModelConfig::from_json(legacy).family, ModelFamily::qwen2);
  legacy["architectures"] = {"Qwen3ForCausalLM"};
  EXPECT_EQ(HfModelConfig::from_json(legacy).family, ModelFamily::qwen3);
  // Other architectures whose names merely start alike are not these families.
  legacy["architectures"] = {"Qwen2MoeForCausalLM"};
  EXPECT_TRUE(contains(error_of(legacy), "Qwen2MoeForCausalLM"));

  auto qwen3_json = minimal;
  qwen3_json["model_type"] = "qwen3";
  const auto qwen3 = HfModelConfig::from_json(qwen3_json);
  EXPECT_EQ(qwen3.max_position_embeddings, 32768);
  EXPECT_TRUE(qwen3.bos_token_ids.empty());
  EXPECT_FALSE(qwen3.qkv_bias);
  EXPECT_TRUE(qwen3.qk_norm);

  // transformers v5 nests the rope settings.
  auto nested = minimal;
  nested["rope_parameters"] = {{"rope_theta", 250000.0}, {"rope_type", "default"}};
  EXPECT_DOUBLE_EQ(HfModelConfig::from_json(nested).rope_theta, 250000.0);
  EXPECT_FALSE(HfModelConfig::from_json(nested).rope_scaling.has_value());
}

TEST(HfConfig, ErrorsNameTheFileAndTheKey) {
  auto json = nlohmann::json::parse(qwen2_config);
  json.erase("hidden_size");
  auto message = error_of(json);
  EXPECT_TRUE(contains(message, "tiny/config.json")) << message;
  EXPECT_TRUE(contains(message, "missing required key 'hidden_size'")) << message;

  json = nlohmann::json::parse(qwen2_config);
  json["num_hidden_layers"] = "24";
  message = error_of(json);
  EXPECT_TRUE(contains(message, "key 'num_hidden_layers': expected an integer, got string")) << message;

  json = nlohmann::json::parse(qwen2_config);
  json["vocab_size"] = 151936.5;
  EXPECT_TRUE(contains(error_of(json), "'vocab_size': expected an integer"));

  json = nlohmann::json::parse(qwen2_config);
  json["num_key_value_heads"] = 3;
  EXPECT_TRUE(contains(error_of(json), "num_key_value_heads"));

  json = nlohmann::json::parse(qwen2_config);
  json["tie_word_embeddings"] = 1;
  EXPECT_TRUE(contains(error_of(json), "'tie_word_embeddings': expected true or false"));

  json = nlohmann::json::parse(qwen2_config);
  json["eos_token_id"] = {1, "two"};
  EXPECT_TRUE(contains(error_of(json), "'eos_token_id'"));

  json = nlohmann::json::parse(qwen2_config);
  json["model_type"] = "mixtral";
  message = error_of(json);
  EXPECT_TRUE(contains(message, "expected one of llama, mistral, qwen2, qwen3, got 'mixtral'")) << message;

  json = nlohmann::json::parse(qwen2_config);
  json["hidden_size"] = 0;
  EXPECT_TRUE(contains(error_of(json), "'hidden_size': expected a positive integer, got 0"));

  json = nlohmann::json::parse(llama_config);
  json.erase("head_dim");
  json["hidden_size"] = 2050;
  EXPECT_TRUE(contains(error_of(json), "multiple of num_attention_heads"));

  json = nlohmann::json::parse(llama_config);
  json["rope_scaling"] = {{"factor", 2.0}};
  EXPECT_TRUE(contains(error_of(json), "rope_type"));

  EXPECT_TRUE(contains(error_of(nlohmann::json::array()), "expected a JSON object"));
}

TEST(HfConfig, RoundTripsThroughJsonAndFiles) {
  for (const char* text : {qwen2_config, llama_config, qwen3_config}) {
    const auto config = HfModelConfig::from_json(nlohmann::json::parse(text));
    EXPECT_EQ(HfModelConfig::from_json(config.to_json()), config);
  }
  const auto folder = std::filesystem::temp_directory_path() / ("verl_hf_config_" + std::to_string(std::random_device{}()));
  std::filesystem::create_directories(folder);
  std::ofstream(folder / "config.json") << llama_config;
  EXPECT_EQ(HfModelConfig::from_file(folder).hidden_size, 2048);
  EXPECT_EQ(HfModelConfig::from_file(folder / "config.json").num_hidden_layers, 16);
  std::ofstream(folder / "config.json") << "{ not json";
  EXPECT_THROW((void)HfModelConfig::from_file(folder), InvalidArgument);
  std::filesystem::remove_all(folder);
  EXPECT_THROW((void)HfModelConfig::from_file(folder), InvalidArgument);
}
