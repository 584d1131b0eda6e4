// Chat templates against renderings of the official Jinja templates (jinja2, as transformers'
// apply_chat_template runs them), and the pretrained-folder loader.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "verl/tokenizer/chat_template.hpp"
#include "verl/tokenizer/pretrained.hpp"

using namespace verl;
using namespace verl::tokenizer;
namespace fs = std::filesystem;

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

std::vector<ChatMessage> messages_of(const nlohmann::json& list) {
  std::vector<ChatMessage> messages;
  for (const auto& item : list) messages.push_back({item["role"].get<std::string>(), item["content"].get<std::string>()});
  return messages;
}

class TempDir {
 public:
  TempDir() : path_(fs::temp_directory_path() / ("verl_chat_" + std::to_string(std::random_device{}()))) {
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

}  // namespace

TEST(ChatTemplate, RendersExactlyLikeTheJinjaTemplates) {
  const auto rows = read_jsonl(data_dir / "chat_templates.jsonl");
  ASSERT_GE(rows.size(), 90u);
  const auto qwen2 = HfTokenizer::from_file(data_dir / "qwen2.tokenizer.json");
  const auto llama3 = HfTokenizer::from_file(data_dir / "llama3.tokenizer.json");
  for (const auto& row : rows) {
    const auto chat_template = make_chat_template(row["template"].get<std::string>());
    const auto messages = messages_of(row["messages"]);
    const bool add_generation_prompt = row["add_generation_prompt"].get<bool>();
    const auto text = chat_template.render(messages, add_generation_prompt);
    EXPECT_EQ(text, row["text"].get<std::string>()) << row.dump();
    const auto& tokenizer = row["tokenizer"].get<std::string>() == "qwen2" ? qwen2 : llama3;
    EXPECT_EQ(tokenizer.encode(text, false), row["ids"].get<std::vector<TokenId>>()) << row.dump();
  }
}

TEST(ChatTemplate, PolicyTypesAndRegistry) {
  static_assert(ChatTemplate<ChatMLTemplate> && ChatTemplate<Llama3Template>);
  EXPECT_EQ(make_chat_template("chatml").name(), "chatml");
  EXPECT_EQ(make_chat_template("qwen2").name(), "chatml");
  EXPECT_EQ(make_chat_template("llama3").name(), "llama3");
  try {
    (void)make_chat_template("vicuna");
    FAIL() << "expected an exception";
  } catch (const InvalidArgument& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("chat_template"), std::string::npos) << message;
    EXPECT_NE(message.find("chatml, qwen2, llama3"), std::string::npos) << message;
    EXPECT_NE(message.find("vicuna"), std::string::npos) << message;
  }
  const std::vector<ChatMessage> messages = {{"user", "hi"}};
  EXPECT_EQ(ChatMLTemplate{}.render(messages, true), "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(ChatMLTemplate::qwen2().render({}, true), "<|im_start|>assistant\n");
  EXPECT_EQ(Llama3Template{}.render(messages, false),
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>");
}

TEST(ChatTemplate, DetectsTheTemplatesFromTheirJinjaSource) {
  const auto sources = read_json(data_dir / "chat_template_sources.json");
  const std::vector<ChatMessage> messages = {{"user", "  2 + 3? "}, {"assistant", "5"}, {"user", "and 4 + 4?"}};
  for (const auto& [name, source] : sources.items()) {
    const auto detected = detect_chat_template(source.get<std::string>());
    ASSERT_TRUE(detected.has_value()) << name;
    for (const bool add_generation_prompt : {false, true}) {
      EXPECT_EQ(detected->render(messages, add_generation_prompt),
                make_chat_template(name).render(messages, add_generation_prompt))
          << name;
    }
  }
  const auto qwen = detect_chat_template(sources["qwen2"].get<std::string>());
  EXPECT_EQ(std::get<ChatMLTemplate>(qwen->get()).default_system_prompt, "You are a helpful assistant.");
  EXPECT_FALSE(std::get<ChatMLTemplate>(detect_chat_template(sources["chatml"].get<std::string>())->get())
                   .default_system_prompt.has_value());
  // Templates we do not reproduce are not guessed.
  EXPECT_FALSE(detect_chat_template("{{ bos_token }}{% for m in messages %}[INST] {{ m['content'] }} [/INST]{% endfor %}"));
  EXPECT_FALSE(detect_chat_template("<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: ..."));
  EXPECT_FALSE(detect_chat_template("<|im_start|>assistant\n<think>\n"));
}

TEST(PretrainedTokenizer, LoadsSpecialTokensAndChatTemplateFromTheFolder) {
  TempDir folder;
  fs::copy_file(data_dir / "qwen2.tokenizer.json", folder.path() / "tokenizer.json");
  const auto sources = read_json(data_dir / "chat_template_sources.json");
  nlohmann::json config = {{"bos_token", nullptr},
                           {"eos_token", "<|im_end|>"},
                           {"pad_token", {{"content", "<|endoftext|>"}, {"lstrip", false}}},
                           {"chat_template", sources["qwen2"]}};
  std::ofstream(folder.path() / "tokenizer_config.json") << config.dump();
  const auto loaded = load_pretrained_tokenizer(folder.path());
  EXPECT_EQ(loaded.tokenizer.special_ids().bos, std::nullopt);
  EXPECT_EQ(loaded.tokenizer.special_ids().eos, loaded.tokenizer.token_to_id("<|im_end|>"));
  EXPECT_EQ(loaded.tokenizer.special_ids().pad, loaded.tokenizer.token_to_id("<|endoftext|>"));
  ASSERT_TRUE(loaded.chat_template.has_value());

  for (const auto& row : read_jsonl(data_dir / "chat_templates.jsonl")) {
    if (row["template"] != "qwen2") continue;
    const auto messages = messages_of(row["messages"]);
    EXPECT_EQ(loaded.apply_chat_template(messages, row["add_generation_prompt"].get<bool>()), row["text"]);
    EXPECT_EQ(loaded.encode_chat(messages, row["add_generation_prompt"].get<bool>()),
              row["ids"].get<std::vector<TokenId>>());
  }

  // Without tokenizer_config.json: no special ids, no template, and a clear error on use.
  fs::remove(folder.path() / "tokenizer_config.json");
  const auto bare = load_pretrained_tokenizer(folder.path());
  EXPECT_FALSE(bare.chat_template.has_value());
  const std::vector<ChatMessage> messages = {{"user", "hi"}};
  EXPECT_THROW((void)bare.apply_chat_template(messages), InvalidArgument);

  // A special token that is not in the vocabulary is named.
  config["eos_token"] = "</s>";
  std::ofstream(folder.path() / "tokenizer_config.json") << config.dump();
  try {
    (void)load_pretrained_tokenizer(folder.path());
    FAIL() << "expected an exception";
  } catch (const InvalidArgument& error) {
    EXPECT_NE(std::string(error.what()).find("</s>"), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find("eos_token"), std::string::npos) << error.what();
  }
}

TEST(PretrainedTokenizer, UnrecognizedChatTemplatesRenderThroughJinja) {
  TempDir folder;
  fs::copy_file(data_dir / "qwen2.tokenizer.json", folder.path() / "tokenizer.json");
  const auto sources = read_json(data_dir / "jinja_templates.json");
  const std::string qwen3 = sources["official"]["qwen3"]["template"].get<std::string>();
  ASSERT_FALSE(detect_chat_template(qwen3).has_value());
  nlohmann::json config = {{"eos_token", "<|im_end|>"}, {"chat_template", qwen3}};
  std::ofstream(folder.path() / "tokenizer_config.json") << config.dump();
  const auto loaded = load_pretrained_tokenizer(folder.path());
  ASSERT_TRUE(loaded.chat_template.has_value());
  EXPECT_EQ(loaded.chat_template->name(), "jinja");
  EXPECT_EQ(std::get<JinjaChatTemplate>(loaded.chat_template->get()).eos_token(), "<|im_end|>");

  // Byte for byte what jinja2 renders (tools/scripts/make_jinja_golden.py) for plain conversations.
  std::size_t checked = 0;
  for (const auto& row : read_jsonl(data_dir / "jinja.golden.jsonl")) {
    if (!row.contains("template") || row["template"] != "qwen3" || !row.contains("text") || !row["context"].empty()) continue;
    bool plain = true;
    for (const auto& message : row["messages"]) plain = plain && message.size() == 2 && message["content"].is_string();
    if (!plain) continue;
    EXPECT_EQ(loaded.apply_chat_template(messages_of(row["messages"]), row["add_generation_prompt"].get<bool>()),
              row["text"].get<std::string>())
        << row.dump();
    ++checked;
  }
  EXPECT_GE(checked, 20u);

  // A template that does not parse is reported with the file, the key and the position.
  config["chat_template"] = "{% if messages %}never closed";
  std::ofstream(folder.path() / "tokenizer_config.json") << config.dump();
  try {
    (void)load_pretrained_tokenizer(folder.path());
    FAIL() << "expected an exception";
  } catch (const InvalidArgument& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("tokenizer_config.json"), std::string::npos) << message;
    EXPECT_NE(message.find("chat_template"), std::string::npos) << message;
    EXPECT_NE(message.find("endif"), std::string::npos) << message;
  }
}

TEST(PretrainedTokenizer, ChatTemplateJinjaFileTakesPrecedence) {
  // transformers >= 4.51 saves the template as chat_template.jinja beside tokenizer_config.json,
  // and reads that file first.
  TempDir folder;
  fs::copy_file(data_dir / "qwen2.tokenizer.json", folder.path() / "tokenizer.json");
  const auto sources = read_json(data_dir / "jinja_templates.json");
  const std::string qwen3 = sources["official"]["qwen3"]["template"].get<std::string>();
  std::ofstream(folder.path() / "chat_template.jinja") << qwen3;
  const std::vector<ChatMessage> messages = {{"user", "What is 2 + 3?"}};
  std::string expected;
  for (const auto& row : read_jsonl(data_dir / "jinja.golden.jsonl")) {
    if (row.value("template", "") == "qwen3" && row["context"].empty() && row["messages"].size() == 1 &&
        row["messages"][0]["content"] == messages[0].content && row["add_generation_prompt"] == true && row.contains("text")) {
      expected = row["text"].get<std::string>();
    }
  }
  ASSERT_FALSE(expected.empty());

  // Alone (no tokenizer_config.json) ...
  EXPECT_EQ(load_pretrained_tokenizer(folder.path()).apply_chat_template(messages, true), expected);
  // ... and over a tokenizer_config.json template.
  const nlohmann::json config = {{"eos_token", "<|im_end|>"}, {"chat_template", "{{ 'from the config' }}"}};
  std::ofstream(folder.path() / "tokenizer_config.json") << config.dump();
  const auto loaded = load_pretrained_tokenizer(folder.path());
  EXPECT_EQ(loaded.apply_chat_template(messages, true), expected);
  EXPECT_EQ(loaded.chat_template_source, qwen3);
  EXPECT_EQ(loaded.tokenizer.special_ids().eos, loaded.tokenizer.token_to_id("<|im_end|>"));

  // A template file that does not parse is named in the error.
  std::ofstream(folder.path() / "chat_template.jinja") << "{% for m in messages %}";
  try {
    (void)load_pretrained_tokenizer(folder.path());
    FAIL() << "expected an exception";
  } catch (const InvalidArgument& error) {
    EXPECT_NE(std::string(error.what()).find("chat_template.jinja"), std::string::npos) << error.what();
  }
}
