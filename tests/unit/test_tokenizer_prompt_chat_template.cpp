// Which chat template renders the dataset's prompts: the tokenizer's own, verl's
// actor_rollout_ref.model.custom_chat_template (Jinja source or a registry name) and
// data.apply_chat_template_kwargs (e.g. Qwen3's enable_thinking), checked against jinja2's output.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "verl/trainer/config.hpp"
#include "verl/trainer/prompt_chat_template.hpp"

namespace fs = std::filesystem;
using verl::InvalidArgument;
using verl::tokenizer::ChatMessage;
using verl::trainer::load_ppo_config;
using verl::trainer::prompt_chat_template;

namespace {

const fs::path data_dir = fs::path(VERL_GOLDEN_DIR) / "..";

std::string template_source(const std::string& name) {
  std::ifstream in(data_dir / "tokenizer" / "jinja_templates.json");
  return nlohmann::json::parse(in).at("official").at(name).at("template").get<std::string>();
}

/// The jinja2 rendering of `name` for one user message with add_generation_prompt, under `context`.
std::string golden_text(const std::string& name, const nlohmann::json& context) {
  std::ifstream in(data_dir / "tokenizer" / "jinja.golden.jsonl");
  for (std::string line; std::getline(in, line);) {
    const auto row = nlohmann::json::parse(line);
    if (row.value("template", "") == name && row.value("context", nlohmann::json::object()) == context &&
        row.value("add_generation_prompt", false) && row["messages"].size() == 1 && row.contains("text")) {
      return row["text"].get<std::string>();
    }
  }
  ADD_FAILURE() << "no golden rendering of " << name << " with " << context.dump();
  return {};
}

const verl::tokenizer::PretrainedTokenizer& qwen2_tokenizer() {
  static const auto tokenizer = verl::tokenizer::load_pretrained_tokenizer(data_dir / "models" / "tiny-qwen2");
  return tokenizer;
}

}  // namespace

TEST(PromptChatTemplate, KwargsAreAFreeFormMappingThatRoundTrips) {
  const auto config = load_ppo_config({"data.apply_chat_template_kwargs={enable_thinking: false, depth: 2, tag: 'x'}"});
  const auto& kwargs = config.data.apply_chat_template_kwargs;
  EXPECT_EQ(kwargs, nlohmann::ordered_json::parse(R"({"enable_thinking": false, "depth": 2, "tag": "x"})"));
  EXPECT_TRUE(load_ppo_config({}).data.apply_chat_template_kwargs.empty());
  EXPECT_EQ(load_ppo_config(verl::trainer::to_overrides(config)).data, config.data);
}

TEST(PromptChatTemplate, TheTokenizersOwnByDefault) {
  const auto chosen = prompt_chat_template(load_ppo_config({}), qwen2_tokenizer());
  ASSERT_TRUE(chosen.has_value());
  const std::vector<ChatMessage> messages = {{"user", "What is 2 + 3?"}};
  EXPECT_EQ(chosen->render(messages, true), qwen2_tokenizer().apply_chat_template(messages, true));
}

TEST(PromptChatTemplate, CustomJinjaTemplateWithKwargsRendersAsJinja2) {
  const std::string qwen3 = template_source("qwen3");
  const auto config = load_ppo_config({"actor_rollout_ref.model.custom_chat_template=" + nlohmann::json(qwen3).dump(),
                                       "data.apply_chat_template_kwargs={enable_thinking: false}"});
  const auto chosen = prompt_chat_template(config, qwen2_tokenizer());
  ASSERT_TRUE(chosen.has_value());
  EXPECT_EQ(chosen->name(), "jinja");
  const std::vector<ChatMessage> messages = {{"user", "What is 2 + 3?"}};
  const std::string expected = golden_text("qwen3", {{"enable_thinking", false}});
  EXPECT_EQ(chosen->render(messages, true), expected);
  EXPECT_NE(expected.find("<think>\n\n</think>"), std::string::npos);  // the kwarg took effect

  // Without the kwarg the template thinks by default: no empty think block.
  const auto thinking = prompt_chat_template(
      load_ppo_config({"actor_rollout_ref.model.custom_chat_template=" + nlohmann::json(qwen3).dump()}),
      qwen2_tokenizer());
  EXPECT_EQ(thinking->render(messages, true), golden_text("qwen3", nlohmann::json::object()));
}

TEST(PromptChatTemplate, KwargsReachTheTokenizersOwnTemplate) {
  // The tokenizer's ChatML template ignores the variable; the rendering is unchanged but exact.
  const auto chosen =
      prompt_chat_template(load_ppo_config({"data.apply_chat_template_kwargs={enable_thinking: false}"}), qwen2_tokenizer());
  const std::vector<ChatMessage> messages = {{"user", "Hi"}};
  EXPECT_EQ(chosen->name(), "jinja");
  EXPECT_EQ(chosen->render(messages, false), qwen2_tokenizer().apply_chat_template(messages, false));
}

TEST(PromptChatTemplate, RegistryNamesAndErrors) {
  EXPECT_EQ(prompt_chat_template(load_ppo_config({"actor_rollout_ref.model.custom_chat_template=llama3"}),
                                 qwen2_tokenizer())
                ->name(),
            "llama3");
  try {
    (void)prompt_chat_template(load_ppo_config({"actor_rollout_ref.model.custom_chat_template='{% if %}'"}),
                               qwen2_tokenizer());
    FAIL() << "a template that does not parse";
  } catch (const InvalidArgument& error) {
    EXPECT_NE(std::string(error.what()).find("custom_chat_template"), std::string::npos) << error.what();
  }
  const verl::tokenizer::PretrainedTokenizer bare{qwen2_tokenizer().tokenizer, std::nullopt, std::nullopt};
  EXPECT_FALSE(prompt_chat_template(load_ppo_config({}), bare).has_value());
  try {
    (void)prompt_chat_template(load_ppo_config({"data.apply_chat_template_kwargs={enable_thinking: false}"}), bare);
    FAIL() << "kwargs without a template";
  } catch (const InvalidArgument& error) {
    EXPECT_NE(std::string(error.what()).find("apply_chat_template_kwargs"), std::string::npos) << error.what();
  }
}
