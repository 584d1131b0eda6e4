// Each tiny model folder's tokenizer.json + tokenizer_config.json chat template (byte-level and
// SentencePiece-style tokenizers; fast renderers and the Jinja engine) gives the chat prompt ids
// transformers' apply_chat_template produced for it (tools/scripts/make_model_golden.py).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "verl/tokenizer/pretrained.hpp"

namespace fs = std::filesystem;
using verl::tokenizer::TokenId;

namespace {
const fs::path models_dir = fs::path(VERL_GOLDEN_DIR) / ".." / "models";
}  // namespace

class ModelFolderTokenizer : public ::testing::TestWithParam<std::string> {};

TEST_P(ModelFolderTokenizer, ChatPromptIdsMatchTransformers) {
  std::ifstream in(models_dir / GetParam() / "golden.json");
  ASSERT_TRUE(in) << GetParam();
  const auto golden = nlohmann::json::parse(in);
  std::vector<verl::tokenizer::ChatMessage> messages;
  for (const auto& message : golden["chat_messages"]) {
    messages.push_back({message["role"].get<std::string>(), message["content"].get<std::string>()});
  }
  const auto tokenizer = verl::tokenizer::load_pretrained_tokenizer(models_dir / GetParam());
  EXPECT_EQ(tokenizer.encode_chat(messages), golden["chat_prompt_ids"].get<std::vector<TokenId>>());
}

INSTANTIATE_TEST_SUITE_P(TinyModels, ModelFolderTokenizer,
                         ::testing::Values("tiny-qwen2", "tiny-llama", "tiny-qwen3", "tiny-qwen2-sliding", "tiny-mistral",
                                           "tiny-llama2"));
