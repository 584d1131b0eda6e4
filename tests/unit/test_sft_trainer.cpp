// The SFT trainer: the loss's gradient against finite differences, independence from the
// micro-batch size, learning, exact resume from a checkpoint, tokenization and configuration.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <limits>
#include <filesystem>
#include <string>
#include <vector>

#include "verl/trainer/tasks/arithmetic.hpp"
#include "verl/tokenizer/pretrained.hpp"
#include "verl/trainer/sft_trainer.hpp"
#include "../support/error_message.hpp"

namespace {

using namespace verl;
using trainer::SFTExample;
namespace fs = std::filesystem;

/// Expects `expr` to throw verl's InvalidArgument with `text` in its message.
#define EXPECT_THAT_ERROR(expr, text)                                                   \
  do {                                                                                  \
    try {                                                                               \
      (void)(expr);                                                                     \
      ADD_FAILURE() << "expected an error containing: " << (text);                      \
    } catch (const InvalidArgument& e) {                                                \
      EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();       \
    }                                                                                   \
  } while (false)

fs::path scratch(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("verl_test_sft_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  return dir;
}

model::HfModelConfig tiny_config() {
  return trainer::tasks::tiny_qwen2_config({.hidden_size = 16,
                                         .intermediate_size = 24,
                                         .num_hidden_layers = 1,
                                         .num_attention_heads = 2,
                                         .num_key_value_heads = 1,
                                         .max_position_embeddings = 32});
}

/// Examples of varied lengths and prompt lengths (token ids in the byte range).
std::vector<SFTExample> examples(int count, std::uint64_t seed = 3) {
  std::mt19937_64 engine(seed);
  std::vector<SFTExample> out;
  for (int i = 0; i < count; ++i) {
    SFTExample e;
    const int prompt = 2 + static_cast<int>(engine() % 4), response = 1 + static_cast<int>(engine() % 4);
    for (int t = 0; t < prompt + response; ++t) e.input_ids.push_back(static_cast<model::TokenId>(40 + engine() % 20));
    e.prompt_length = prompt;
    out.push_back(std::move(e));
  }
  return out;
}

std::vector<std::int64_t> iota(std::int64_t n) {
  std::vector<std::int64_t> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = i;
  return v;
}

TEST(SFTLoss, GradientMatchesFiniteDifferences) {
  auto policy = model::BasicTransformer<double>::random(tiny_config(), {.initializer_range = 0.5, .seed = 11},
                                                         {.num_threads = 1});
  const auto data = examples(5);
  const auto all = iota(5);
  policy.zero_grad();
  const double loss = trainer::sft_loss(policy, data, all, 2, true);
  EXPECT_GT(loss, 0.0);
  // Central differences on a few entries of every tensor.
  int checked = 0;
  policy.for_each_parameter([&](const auto& p) {
    for (std::size_t k = 0; k < p.value.size(); k += std::max<std::size_t>(1, p.value.size() / 3)) {
      const double saved = p.value[k], h = 1e-6;
      p.value[k] = saved + h;
      const double plus = trainer::sft_loss(policy, data, all, 5, false);
      p.value[k] = saved - h;
      const double minus = trainer::sft_loss(policy, data, all, 5, false);
      p.value[k] = saved;
      const double numeric = (plus - minus) / (2 * h);
      EXPECT_NEAR(p.grad[k], numeric, 1e-6 + 1e-5 * std::abs(numeric)) << p.name << "[" << k << "]";
      ++checked;
    }
  });
  EXPECT_GT(checked, 20);
}

TEST(SFTLoss, IsTheMeanOverResponseTokens) {
  auto policy = model::Transformer::random(tiny_config(), {.seed = 2}, {.num_threads = 1});
  const auto data = examples(3);
  // Each example alone, weighted by its response tokens, gives the batch's token mean.
  double weighted = 0.0, tokens = 0.0;
  for (std::int64_t i = 0; i < 3; ++i) {
    const std::vector<std::int64_t> one = {i};
    const double n = static_cast<double>(data[static_cast<std::size_t>(i)].response_tokens());
    weighted += trainer::sft_loss(policy, data, one, 1, false) * n;
    tokens += n;
  }
  EXPECT_NEAR(trainer::sft_loss(policy, data, iota(3), 3, false), weighted / tokens, 1e-6);
  // A batch without response tokens has no loss to average.
  auto no_response = data;
  no_response[0].prompt_length = static_cast<std::int64_t>(no_response[0].input_ids.size());
  const std::vector<std::int64_t> only_first = {0};
  EXPECT_THROW(trainer::sft_loss(policy, no_response, only_first, 1, false), InvalidArgument);
}

TEST(SFTLoss, GradientDoesNotDependOnMicroBatchSize) {
  const auto data = examples(8);
  const auto all = iota(8);
  auto gradients = [&](std::int64_t micro) {
    auto policy = model::Transformer::random(tiny_config(), {.seed = 5}, {.num_threads = 1});
    policy.zero_grad();
    const double loss = trainer::sft_loss(policy, data, all, micro, true);
    std::vector<float> flat;
    policy.for_each_parameter([&](const auto& p) { flat.insert(flat.end(), p.grad.begin(), p.grad.end()); });
    return std::pair{loss, flat};
  };
  const auto [loss1, grad1] = gradients(1);
  for (const std::int64_t micro : {3, 8}) {
    const auto [loss, grad] = gradients(micro);
    EXPECT_NEAR(loss, loss1, 1e-6 * std::abs(loss1));
    ASSERT_EQ(grad.size(), grad1.size());
    double max_diff = 0.0, max_abs = 0.0;
    for (std::size_t i = 0; i < grad.size(); ++i) {
      max_diff = std::max(max_diff, static_cast<double>(std::abs(grad[i] - grad1[i])));
      max_abs = std::max(max_abs, static_cast<double>(std::abs(grad1[i])));
    }
    EXPECT_LT(max_diff, 1e-5 * max_abs) << "micro batch size " << micro;
  }
}

trainer::SFTConfig small_config(const fs::path& dir) {
  const std::vector<std::string> overrides = {"data.train_files=unused.jsonl",
                                              "model.partial_pretrain=unused",
                                              "data.train_batch_size=8",
                                              "data.micro_batch_size_per_gpu=3",
                                              "optim.lr=1e-2",
                                              "optim.weight_decay=0",
                                              "trainer.total_training_steps=6",
                                              "trainer.save_freq=3",
                                              "trainer.test_freq=2",
                                              "trainer.logger=[]",
                                              "trainer.default_local_dir=" + dir.string()};
  return trainer::load_sft_config(overrides);
}

/// Records the metrics a run logs.
struct RecordingLogger {
  static constexpr std::string_view name = "recording";
  std::vector<std::pair<std::int64_t, Metrics>>* out;
  void log(const Metrics& metrics, std::int64_t step) { out->emplace_back(step, metrics); }
  void finish() {}
};

TEST(SFTTrainer, LossDecreases) {
  const fs::path dir = scratch("learn");
  auto config = small_config(dir);
  config.trainer.total_training_steps = 40;
  config.trainer.save_freq = -1;
  auto policy = model::Transformer::random(tiny_config(), {.seed = 4}, {.num_threads = 1});
  trainer::SFTTrainer sft(policy, config, examples(16), examples(4, 9));
  std::vector<std::pair<std::int64_t, Metrics>> logged;
  trainer::Tracking tracking;
  tracking.add(RecordingLogger{&logged});
  sft.fit(tracking);
  ASSERT_EQ(logged.size(), 40u);
  EXPECT_LT(logged.back().second.at("train/loss"), 0.5 * logged.front().second.at("train/loss"));
  EXPECT_TRUE(logged[1].second.contains("val/loss"));   // step 2: test_freq
  EXPECT_FALSE(logged[0].second.contains("val/loss"));  // step 1
  EXPECT_EQ(logged.front().second.at("train/lr"), 0.0);  // warmup starts at 0, as torch's LambdaLR
  fs::remove_all(dir);
}

TEST(SFTTrainer, NonFiniteUpdatesAreSkippedCountedAndEndTheRun) {
  const fs::path dir = scratch("nonfinite");
  auto config = small_config(dir);
  config.trainer.save_freq = -1;
  config.trainer.max_consecutive_nonfinite_steps = 2;
  auto policy = model::Transformer::random(tiny_config(), {.seed = 4}, {.num_threads = 1});
  bool poisoned = false;
  policy.for_each_parameter([&](auto p) {  // a view: its values are the model's
    if (!poisoned) p.value[0] = std::numeric_limits<float>::quiet_NaN();
    poisoned = true;
  });
  trainer::SFTTrainer sft(policy, config, examples(16), examples(4, 9));
  const std::vector<std::int64_t> batch = {0, 1, 2, 3, 4, 5, 6, 7};
  const Metrics first = sft.train_step(batch);
  EXPECT_EQ(first.at("training/nonfinite_updates_skipped"), 1.0);
  EXPECT_FALSE(std::isfinite(first.at("train/grad_norm")));
  const std::string error = test_support::message_of([&] { (void)sft.train_step(batch); });
  EXPECT_NE(error.find("trainer.max_consecutive_nonfinite_steps: 2 steps in a row"), std::string::npos) << error;
  fs::remove_all(dir);
}

TEST(SFTTrainer, ResumeGivesTheSameLossesAsAnUninterruptedRun) {
  const fs::path full_dir = scratch("full"), resumed_dir = scratch("resumed");
  auto run = [&](const fs::path& dir, bool interrupt) {
    std::vector<std::pair<std::int64_t, Metrics>> logged;
    const auto config = small_config(dir);
    {
      auto policy = model::Transformer::random(tiny_config(), {.seed = 6}, {.num_threads = 1});
      trainer::SFTTrainer sft(policy, config, examples(20), examples(4, 9));
      trainer::Tracking tracking;
      tracking.add(RecordingLogger{&logged});
      if (interrupt) {
        sft.fit(tracking, 4);  // killed after step 4; the checkpoint of step 3 survives
        logged.resize(3);
      } else {
        sft.fit(tracking);
      }
    }
    if (interrupt) {
      // A fresh process: different initial weights, everything comes from the checkpoint.
      auto policy = model::Transformer::random(tiny_config(), {.seed = 99}, {.num_threads = 1});
      trainer::SFTTrainer sft(policy, config, examples(20), examples(4, 9));
      EXPECT_EQ(sft.maybe_resume(), std::optional<std::int64_t>(3));
      trainer::Tracking tracking;
      tracking.add(RecordingLogger{&logged});
      sft.fit(tracking);
    }
    return logged;
  };
  const auto full = run(full_dir, false);
  const auto resumed = run(resumed_dir, true);
  ASSERT_EQ(full.size(), 6u);
  ASSERT_EQ(resumed.size(), 6u);
  for (std::size_t i = 0; i < full.size(); ++i) {
    EXPECT_EQ(full[i].first, resumed[i].first);
    EXPECT_EQ(full[i].second, resumed[i].second) << "step " << full[i].first;  // bit-identical
  }
  fs::remove_all(full_dir);
  fs::remove_all(resumed_dir);
}

TEST(SFTData, TokenizesPromptAsChatAndResponseWithEos) {
  const fs::path dir = scratch("tok");
  trainer::tasks::write_initial_model(dir, {.hidden_size = 8, .intermediate_size = 8, .num_hidden_layers = 1,
                                         .num_attention_heads = 2, .num_key_value_heads = 1});
  const auto tokenizer = tokenizer::load_pretrained_tokenizer(dir);
  const auto e = trainer::tokenize_sft_pair(tokenizer, "1+2=", "#### 3", 64, "error");
  const std::string prompt = "<|im_start|>user\n1+2=<|im_end|>\n<|im_start|>assistant\n";
  EXPECT_EQ(e.prompt_length, static_cast<std::int64_t>(tokenizer.tokenizer.encode(prompt, false).size()));
  EXPECT_EQ(e.response_tokens(), 7);  // "#### 3" + <|im_end|>
  EXPECT_EQ(e.input_ids.back(), 258);
  EXPECT_THROW(trainer::tokenize_sft_pair(tokenizer, "1+2=", "#### 3", 10, "error"), InvalidArgument);
  const auto left = trainer::tokenize_sft_pair(tokenizer, "1+2=", "#### 3", 10, "left");
  EXPECT_EQ(left.input_ids.size(), 10u);
  EXPECT_EQ(left.response_tokens(), 7);
  const auto right = trainer::tokenize_sft_pair(tokenizer, "1+2=", "#### 3", 10, "right");
  EXPECT_EQ(right.input_ids.size(), 10u);
  EXPECT_EQ(right.response_tokens(), 0);
  fs::remove_all(dir);
}

// verl's gsm8k SFT recipe reads its parquet with data.prompt_key=extra_info,
// data.prompt_dict_keys=[question] (and the same for the answer): nested columns, .parquet or JSONL.
TEST(SFTData, NestedColumnsFromParquetEqualThoseFromJsonLines) {
  const fs::path dir = scratch("nested");
  trainer::tasks::write_initial_model(dir, {.hidden_size = 8, .intermediate_size = 8, .num_hidden_layers = 1,
                                         .num_attention_heads = 2, .num_key_value_heads = 1});
  const auto tokenizer = tokenizer::load_pretrained_tokenizer(dir);
  trainer::SFTConfig::Data keys;
  keys.prompt_key = "extra_info";
  keys.response_key = "extra_info";
  keys.prompt_dict_keys = std::vector<std::string>{"question"};
  keys.response_dict_keys = std::vector<std::string>{"answer"};
  keys.max_length = 256;
  const fs::path datasets = fs::path(VERL_GOLDEN_DIR) / ".." / "datasets";
  const std::vector<std::string> jsonl = {(datasets / "parquet_rows.jsonl").string()};
  const auto from_jsonl = trainer::load_sft_examples(jsonl, tokenizer, keys);
  ASSERT_EQ(from_jsonl.size(), 5u);
  const auto first = trainer::tokenize_sft_pair(
      tokenizer, "Natalia sold clips to 48 of her friends in April, and then half as many in May. How many altogether?",
      "72", 256, "error");
  EXPECT_EQ(from_jsonl[0].input_ids, first.input_ids);
  EXPECT_EQ(from_jsonl[0].prompt_length, first.prompt_length);

  // A key that leads to a non-string, or a missing nested key, is named in the error.
  keys.prompt_dict_keys = std::vector<std::string>{"index"};
  EXPECT_THAT_ERROR(trainer::load_sft_examples(jsonl, tokenizer, keys), "expected 'extra_info.index' to be a string");
  keys.prompt_dict_keys = std::vector<std::string>{"question", "deeper"};
  EXPECT_THAT_ERROR(trainer::load_sft_examples(jsonl, tokenizer, keys),
                    "expected 'extra_info.question' to be an object with a key 'deeper' (data.prompt_dict_keys)");
  keys.prompt_dict_keys.reset();
  EXPECT_THAT_ERROR(trainer::load_sft_examples(jsonl, tokenizer, keys), "expected 'extra_info' to be a string (data.prompt_key)");
  keys.prompt_dict_keys = std::vector<std::string>{"question"};

#if defined(VERL_HAS_PARQUET)
  const std::vector<std::string> parquet = {(datasets / "parquet_rows.parquet").string()};
  const auto from_parquet = trainer::load_sft_examples(parquet, tokenizer, keys);
  ASSERT_EQ(from_parquet.size(), from_jsonl.size());
  for (std::size_t i = 0; i < from_parquet.size(); ++i) {
    EXPECT_EQ(from_parquet[i].input_ids, from_jsonl[i].input_ids) << "row " << i;
    EXPECT_EQ(from_parquet[i].prompt_length, from_jsonl[i].prompt_length) << "row " << i;
  }
#endif
  fs::remove_all(dir);
}

TEST(SFTConfig, VerlKeysDefaultsAndErrors) {
  const std::vector<std::string> base = {"data.train_files=[a.jsonl]", "model.partial_pretrain=m"};
  const auto config = trainer::load_sft_config(base);
  EXPECT_EQ(config.data.prompt_key, "question");
  EXPECT_EQ(config.data.micro_batch_size_per_gpu, 4);
  EXPECT_EQ(config.optim.betas, (std::vector<double>{0.9, 0.95}));
  EXPECT_EQ(config.trainer.default_local_dir, "checkpoints/gsm8k-sft/test");
  auto message = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), base.begin(), base.end());
    try {
      trainer::load_sft_config(extra);
    } catch (const trainer::ConfigError& error) {
      return std::string(error.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message({"optim.lrr=1"}).find("unknown key 'optim.lrr'"), std::string::npos);
  EXPECT_NE(message({"optim.lrr=1"}).find("did you mean 'optim.lr'"), std::string::npos);
  EXPECT_NE(message({"data.max_length=long"}).find("data.max_length: expected an integer"), std::string::npos);
  EXPECT_NE(message({"data.multiturn.enable=true"}).find("data.multiturn.enable: not supported"), std::string::npos);
  // LoRA acts (model.lora_rank, lora_alpha, target_modules); its values are checked.
  EXPECT_NE(message({"model.lora_rank=-2"}).find("model.lora_rank: expected an integer >= 0"), std::string::npos);
  EXPECT_EQ(message({"model.lora_rank=8", "model.lora_alpha=32", "model.target_modules=[q_proj,v_proj]"}), "no error");
  EXPECT_EQ(message({"model.lora_rank=0", "model.fsdp_config.cpu_offload=true", "trainer.nnodes=1"}), "no error");
  EXPECT_NE(message({"trainer.logger=[wandb]"}).find("wandb"), std::string::npos);
  EXPECT_NE(message({"data.truncation=middle"}).find("data.truncation"), std::string::npos);
  EXPECT_FALSE(config.data.prompt_dict_keys.has_value());  // verl's null
  auto nested = base;
  nested.insert(nested.end(), {"data.prompt_key=extra_info", "data.prompt_dict_keys=[question]",
                               "data.response_dict_keys=null"});
  const auto nested_config = trainer::load_sft_config(nested);
  EXPECT_EQ(nested_config.data.prompt_dict_keys, (std::optional<std::vector<std::string>>{{"question"}}));
  EXPECT_FALSE(nested_config.data.response_dict_keys.has_value());
}

}  // namespace
