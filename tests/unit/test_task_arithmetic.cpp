// The built-in arithmetic task: deterministic, disjoint splits; rows in verl's schema that the
// gsm8k scorer grades; a model folder our loaders (and transformers) read.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <set>
#include <string>

#include "verl/data/rlhf_row.hpp"
#include "verl/trainer/tasks/arithmetic.hpp"
#include "verl/trainer/tasks/greedy_accuracy.hpp"
#include "verl/model/checkpoint.hpp"
#include "verl/tokenizer/pretrained.hpp"
#include "verl/reward/reward_score.hpp"

namespace {

using namespace verl::trainer::tasks;
namespace fs = std::filesystem;

fs::path scratch(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("verl_test_task_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  return dir;
}

TEST(ArithmeticTask, SameSeedSameProblemsAndSplitsAreDisjoint) {
  const ArithmeticTaskOptions options{.digits = 2, .operands = 3, .train_size = 300, .val_size = 50, .seed = 7};
  const auto a = generate_arithmetic_problems(options);
  const auto b = generate_arithmetic_problems(options);
  EXPECT_EQ(a.train, b.train);
  EXPECT_EQ(a.val, b.val);
  std::set<ArithmeticProblem> all(a.train.begin(), a.train.end());
  EXPECT_EQ(all.size(), a.train.size());
  for (const auto& p : a.val) EXPECT_FALSE(all.contains(p)) << p.question();
  for (const auto& p : a.train) {
    ASSERT_EQ(p.operands.size(), 3u);
    for (const auto v : p.operands) EXPECT_TRUE(v >= 0 && v < 100);
  }
  auto other = options;
  other.seed = 8;
  EXPECT_NE(generate_arithmetic_problems(other).train, a.train);
}

TEST(ArithmeticTask, RowsFollowVerlSchemaAndTheReferenceAnswerScoresOne) {
  const ArithmeticProblem problem{{37, 85}};
  EXPECT_EQ(problem.question(), "37+85=");
  EXPECT_EQ(problem.response(), "#### 122");
  const auto row = verl::data::parse_rlhf_row(rl_row(problem, "train", 3), {"test", 1});
  EXPECT_EQ(row.data_source, "openai/gsm8k");
  ASSERT_EQ(row.prompt.size(), 1u);
  EXPECT_EQ(row.prompt[0].content, "37+85=");
  EXPECT_EQ(row.index(), 3);
  EXPECT_EQ(row.ground_truth_text(), "122");
  EXPECT_EQ(verl::reward::default_compute_score(row.data_source, problem.response(), row.ground_truth_text()).score,
            1.0);
  EXPECT_EQ(verl::reward::default_compute_score(row.data_source, "#### 121", row.ground_truth_text()).score, 0.0);
  EXPECT_EQ(sft_row(problem)["answer"], "#### 122");
}

TEST(ArithmeticTask, InstructPromptsAskForTheScorersFormat) {
  const ArithmeticProblem problem{{80, 32}};
  EXPECT_EQ(problem.question(ArithmeticPromptStyle::instruct),
            "What is 80 + 32? End your answer with \"#### \" and the number.");
  const auto row =
      verl::data::parse_rlhf_row(rl_row(problem, "test", 0, ArithmeticPromptStyle::instruct), {"test", 1});
  EXPECT_EQ(row.prompt[0].content, problem.question(ArithmeticPromptStyle::instruct));
  EXPECT_EQ(row.ground_truth_text(), "112");
  // What a pretrained model answers when it follows the instruction scores one; the bare sum does not
  // (the gsm8k scorer is strict: the number after "#### ").
  EXPECT_EQ(verl::reward::default_compute_score(row.data_source, "80 + 32 = 112\n#### 112", "112").score, 1.0);
  EXPECT_EQ(verl::reward::default_compute_score(row.data_source, "80 + 32 = 112.", "112").score, 0.0);
  EXPECT_EQ(sft_row(problem, false, ArithmeticPromptStyle::instruct)["question"],
            problem.question(ArithmeticPromptStyle::instruct));
  EXPECT_EQ(parse_arithmetic_prompt_style("instruct", "--prompt-style"), ArithmeticPromptStyle::instruct);
  EXPECT_EQ(parse_arithmetic_prompt_style("bare", "--prompt-style"), ArithmeticPromptStyle::bare);
  try {
    (void)parse_arithmetic_prompt_style("chat", "--prompt-style");
    FAIL() << "expected a throw";
  } catch (const verl::InvalidArgument& error) {
    EXPECT_NE(std::string(error.what()).find("--prompt-style"), std::string::npos) << error.what();
  }
}

TEST(ArithmeticTask, WithoutAModelOnlyTheRowsAreWritten) {
  const fs::path out = scratch("rows_only");
  const auto files = write_arithmetic_task(
      out, {.digits = 2, .operands = 2, .train_size = 20, .val_size = 5, .prompt_style = ArithmeticPromptStyle::instruct},
      std::nullopt);
  EXPECT_TRUE(files.model.empty());
  EXPECT_FALSE(fs::exists(out / "model"));
  const auto rows = read_rlhf_rows(files.val);
  ASSERT_EQ(rows.size(), 5u);
  EXPECT_TRUE(rows[0].prompt[0].content.starts_with("What is ")) << rows[0].prompt[0].content;
  fs::remove_all(out);
}

TEST(ArithmeticTask, InvalidOptionsNameTheArgument) {
  EXPECT_THROW(generate_arithmetic_problems({.digits = 0}), verl::InvalidArgument);
  try {
    generate_arithmetic_problems({.digits = 1, .operands = 2, .train_size = 95, .val_size = 10});
    FAIL() << "expected a throw: there are only 100 problems";
  } catch (const verl::InvalidArgument& error) {
    EXPECT_NE(std::string(error.what()).find("train_size + val_size"), std::string::npos) << error.what();
  }
  // Dense requests (every problem) are drawn without repetition.
  const auto all = generate_arithmetic_problems({.digits = 1, .operands = 2, .train_size = 90, .val_size = 10});
  std::set<ArithmeticProblem> distinct(all.train.begin(), all.train.end());
  distinct.insert(all.val.begin(), all.val.end());
  EXPECT_EQ(distinct.size(), 100u);
}

TEST(ArithmeticTask, WritesFilesAndALoadableModelFolder) {
  const fs::path out = scratch("files");
  const auto files = write_arithmetic_task(out, {.digits = 1, .operands = 3, .train_size = 40, .val_size = 10},
                                           TinyModelOptions{.hidden_size = 16, .intermediate_size = 32,
                                                            .num_hidden_layers = 1, .num_attention_heads = 2,
                                                            .num_key_value_heads = 1});
  EXPECT_EQ(read_rlhf_rows(files.train).size(), 40u);
  EXPECT_EQ(read_rlhf_rows(files.val).size(), 10u);
  EXPECT_TRUE(fs::exists(files.sft_train));

  const auto tokenizer = verl::tokenizer::load_pretrained_tokenizer(files.model);
  // One token per byte; the special tokens follow the bytes.
  EXPECT_EQ(tokenizer.tokenizer.encode("1+2=", false), (std::vector<verl::model::TokenId>{'1', '+', '2', '='}));
  ASSERT_TRUE(tokenizer.chat_template.has_value());
  const verl::tokenizer::ChatMessage message{"user", "1+2="};
  EXPECT_EQ(tokenizer.apply_chat_template(std::span(&message, 1)),
            "<|im_start|>user\n1+2=<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(tokenizer.encode_chat(std::span(&message, 1)).front(), 257);
  EXPECT_EQ(tokenizer.tokenizer.special_ids().eos, 258);
  EXPECT_EQ(tokenizer.tokenizer.special_ids().pad, 256);
  EXPECT_EQ(tokenizer.tokenizer.decode(std::vector<verl::model::TokenId>{'#', ' ', '7', 258}, true), "# 7");

  auto policy = verl::model::load_transformer(files.model);
  EXPECT_EQ(policy.config().model_type, "qwen2");
  EXPECT_EQ(policy.vocab_size(), byte_tokenizer_vocab_size);
  // An untrained model answers nothing right; the evaluation runs end to end.
  const auto rows = read_rlhf_rows(files.val);
  const auto accuracy = greedy_accuracy(policy, tokenizer, rows, {.max_new_tokens = 4, .batch_size = 3});
  EXPECT_EQ(accuracy.count, 10);
  EXPECT_EQ(accuracy.responses.size(), 10u);
  EXPECT_EQ(accuracy.mean_score, 0.0);
  fs::remove_all(out);
}

}  // namespace
