// verl_train's LoRA and GGUF paths through the library: a PPO step with actor_rollout_ref.model.
// lora_rank > 0 trains only the adapters, the reference policy (the actor with its adapter
// disabled, sharing the base) gives the base model's log-probs, a resumed run ends with the same
// adapters as an uninterrupted one, LoRA keys are refused by name, and a step from a GGUF file
// equals a step from the equivalent Hugging Face folder.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "verl/data/prompt_formatter.hpp"
#include "verl/data/rl_dataset.hpp"
#include "verl/tokenizer/char_tokenizer.hpp"
#include "verl/trainer/config.hpp"
#include "verl/trainer/policy_source.hpp"
#include "verl/trainer/ppo_trainer.hpp"
#include "../support/error_message.hpp"

namespace {

using namespace verl;
using namespace verl::trainer;
using verl::test_support::message_of;
using tokenizer::CharTokenizer;
namespace fs = std::filesystem;

const CharTokenizer& char_tokenizer() {
  static const CharTokenizer tok("0123456789+= ");
  return tok;
}

model::Transformer tiny_policy() {
  const nlohmann::json json = {{"model_type", "llama"},     {"hidden_size", 32},          {"intermediate_size", 64},
                               {"num_hidden_layers", 2},    {"num_attention_heads", 2},   {"num_key_value_heads", 1},
                               {"vocab_size", char_tokenizer().vocab_size()}, {"rms_norm_eps", 1e-5},
                               {"max_position_embeddings", 64}, {"eos_token_id", CharTokenizer::eos_id},
                               {"pad_token_id", CharTokenizer::pad_id}};
  return model::Transformer::random(model::HfModelConfig::from_json(json, "tiny"), {.initializer_range = 0.2, .seed = 11},
                                    {.num_threads = 1});
}

std::vector<data::RLHFRow> rows(int count) {
  std::vector<data::RLHFRow> out;
  for (int i = 0; i < count; ++i) {
    data::RLHFRow row;
    row.data_source = "synthetic";
    row.prompt = {{"user", std::to_string(i % 10) + "+" + std::to_string((i * 7 + 3) % 10) + "="}};
    row.reward_model.ground_truth = "7";
    row.extra_info = {{"index", i}};
    out.push_back(std::move(row));
  }
  return out;
}

/// 1 when the response starts with an odd digit, '+' or '=': about half of a random model's
/// responses, so that groups have advantages to learn from.
struct OddStart {
  double operator()(std::string_view, std::string_view text, std::string_view) const {
    if (text.empty()) return 0.0;
    const char c = text.front();
    return (c >= '0' && c <= '9' && (c - '0') % 2 == 1) || c == '+' || c == '=' ? 1.0 : 0.0;
  }
};

std::vector<std::string> overrides(std::vector<std::string> extra) {
  std::vector<std::string> out = {"algorithm.adv_estimator=grpo",
                                  "data.train_batch_size=4",
                                  "data.max_prompt_length=8",
                                  "data.max_response_length=3",
                                  "actor_rollout_ref.rollout.n=4",
                                  "actor_rollout_ref.actor.ppo_mini_batch_size=2",
                                  "actor_rollout_ref.actor.optim.lr=0.05",
                                  "actor_rollout_ref.actor.use_kl_loss=True",
                                  "actor_rollout_ref.model.lora_rank=4",
                                  "actor_rollout_ref.model.lora_alpha=8",
                                  "trainer.total_training_steps=2",
                                  "trainer.val_before_train=False",
                                  "trainer.logger=[file]"};
  out.insert(out.end(), extra.begin(), extra.end());
  return out;
}

using LoraTrainer = PPOTrainer<model::LoraTransformer, NoCritic, OddStart>;

/// The trainer verl_train builds for a LoRA configuration: the reference shares the actor's base.
LoraTrainer make_lora_trainer(const PPOConfig& config) {
  const auto keys = lora_keys(config.actor_rollout_ref.model);
  const auto options = lora_options(keys, "actor_rollout_ref.model.");
  EXPECT_TRUE(options.has_value());
  model::LoraTransformer actor = make_lora_policy(tiny_policy(), *options, keys, "actor_rollout_ref.model.");
  std::optional<model::LoraTransformer> reference = actor.with_adapter_disabled();
  EXPECT_TRUE(reference->shares_base_with(actor));
  data::RLHFDatasetOptions data_options;
  data_options.max_prompt_length = 8;
  return LoraTrainer(config, PPOAlgorithm::from_config(config), std::move(actor), std::move(reference), NoCritic{},
                     OddStart{},
                     {.decode = [](std::span<const model::TokenId> ids) { return char_tokenizer().decode(ids, true); },
                      .eos_token_ids = {CharTokenizer::eos_id},
                      .pad_token_id = CharTokenizer::pad_id},
                     data::RLHFDataset::from_rows(rows(16), char_tokenizer(), data::ContentOnlyFormatter{}, data_options),
                     data::RLHFDataset{});
}

fs::path temp_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("verl_test_lora_trainer_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

TEST(LoraTrainer, StepsTrainOnlyTheAdaptersAndTheReferenceIsTheBaseModel) {
  const fs::path dir = temp_dir("step");
  auto trainer = make_lora_trainer(load_ppo_config(overrides({"trainer.default_local_dir=" + dir.string()})));
  const model::StateDict base_before = trainer.actor().base().state_dict();
  const model::StateDict adapters_before = trainer.actor().state_dict();
  std::ostringstream console;
  const auto metrics = trainer.fit(std::nullopt, console);
  ASSERT_EQ(metrics.size(), 2u);
  EXPECT_GT(metrics.back().at("actor/kl_loss"), 0.0);  // the actor moved away from the reference
  EXPECT_EQ(trainer.actor().base().state_dict(), base_before);
  EXPECT_NE(trainer.actor().state_dict(), adapters_before);
  // AdamW holds moments for the adapters alone.
  EXPECT_EQ(trainer.actor_optimizer().state().exp_avg.size(), trainer.actor().state_dict().size());

  // The reference log-probs are the untouched base model's.
  const data::DataProto& batch = trainer.last_batch();
  const MatrixI64& input_ids = int_column(batch, keys::input_ids);
  const MatrixI64& responses = int_column(batch, keys::responses);
  const MatrixF& response_mask = float_column(batch, keys::response_mask);
  const MatrixF& ref_log_probs = float_column(batch, keys::ref_log_prob);
  model::Transformer base = tiny_policy();
  const auto tokens = model::TokenBatch::padded(input_ids, float_column(batch, keys::attention_mask),
                                                int_column(batch, keys::position_ids));
  const MatrixI64 targets = model::next_token_targets(tokens);
  const auto out = base.forward(tokens, {.targets = {targets.data(), static_cast<std::size_t>(targets.size())}});
  const Index prompt = input_ids.cols() - responses.cols();
  float worst = 0;
  for (Index r = 0; r < batch.size(); ++r) {
    for (Index j = 0; j < responses.cols(); ++j) {
      if (response_mask(r, j) == 0) continue;
      worst = std::max(worst, std::abs(ref_log_probs(r, j) - out.log_probs(r, prompt - 1 + j)));
    }
  }
  EXPECT_LT(worst, 1e-5f);
  // With the adapter trained, the actor's own log-probs differ from the reference's.
  EXPECT_GT((float_column(batch, keys::old_log_probs) - ref_log_probs).cwiseAbs().maxCoeff(), 1e-6f);
  fs::remove_all(dir);
}

TEST(LoraTrainer, ResumedRunEndsWithTheAdaptersOfAnUninterruptedOne) {
  const fs::path dir = temp_dir("resume");
  auto config_for = [&](const std::string& name) {
    return load_ppo_config(overrides({"trainer.total_training_steps=4", "trainer.save_freq=2",
                                      "trainer.default_local_dir=" + (dir / name).string()}));
  };
  std::ostringstream console;
  auto full = make_lora_trainer(config_for("full"));
  full.fit(std::nullopt, console);
  {
    auto first = make_lora_trainer(config_for("resumed"));
    first.fit(2, console);
  }
  auto resumed = make_lora_trainer(config_for("resumed"));
  resumed.fit(std::nullopt, console);
  EXPECT_EQ(resumed.global_step(), 4);
  EXPECT_EQ(resumed.actor().state_dict(), full.actor().state_dict());
  // The checkpoint holds the adapters, not a copy of the base.
  const fs::path actor_dir = dir / "resumed" / "global_step_2" / "actor";
  ASSERT_TRUE(fs::exists(actor_dir));
  std::uintmax_t bytes = 0;
  for (const auto& entry : fs::recursive_directory_iterator(actor_dir))
    if (entry.is_regular_file()) bytes += entry.file_size();
  EXPECT_LT(bytes, static_cast<std::uintmax_t>(model::parameter_count(full.actor().base()) * 4));
  // The export: a merged Hugging Face folder and a PEFT adapter.
  const fs::path out = dir / "export";
  save_policy(full.actor(), out / "huggingface", out / "lora_adapter", "base");
  EXPECT_TRUE(fs::exists(out / "huggingface" / "model.safetensors"));
  EXPECT_TRUE(fs::exists(out / "lora_adapter" / "adapter_config.json"));
  EXPECT_EQ(model::load_lora_adapter(tiny_policy(), out / "lora_adapter").state_dict(), full.actor().state_dict());
  fs::remove_all(dir);
}

TEST(LoraTrainer, LoraKeysAreCheckedAndUnsupportedOnesRefusedByName) {
  const auto problem = [](std::vector<std::string> extra) {
    return message_of([&] {
      const PPOConfig config = load_ppo_config(overrides(std::move(extra)));
      (void)lora_options(lora_keys(config.actor_rollout_ref.model), "actor_rollout_ref.model.");
    });
  };
  EXPECT_NE(problem({"actor_rollout_ref.model.lora.rank=8"}).find("actor_rollout_ref.model.lora.rank"), std::string::npos);
  EXPECT_NE(problem({"actor_rollout_ref.model.lora.type=dora"}).find("actor_rollout_ref.model.lora.type"), std::string::npos);
  EXPECT_NE(problem({"actor_rollout_ref.model.lora_rank=-1"}).find("actor_rollout_ref.model.lora_rank: expected an integer >= 0"),
            std::string::npos);
  EXPECT_NE(problem({"actor_rollout_ref.model.lora_alpha=nan"}).find("actor_rollout_ref.model.lora_alpha: expected a finite"),
            std::string::npos);
  EXPECT_NE(problem({"actor_rollout_ref.model.target_modules=[all-linear,q_proj]"})
                .find("actor_rollout_ref.model.target_modules: expected 'all-linear' alone"),
            std::string::npos);
  EXPECT_NE(problem({"actor_rollout_ref.model.lora_rank=0", "actor_rollout_ref.model.lora_adapter_path=/x"})
                .find("actor_rollout_ref.model.lora_adapter_path: expected null when"),
            std::string::npos);
  EXPECT_NE(message_of([] {
              const PPOConfig config =
                  load_ppo_config(overrides({"actor_rollout_ref.model.target_modules=[lm_head]"}));
              (void)make_lora_trainer(config);
            }).find("actor_rollout_ref.model.target_modules: 'lm_head' matches no linear layer"),
            std::string::npos);
  const PPOConfig plain = load_ppo_config(overrides({"actor_rollout_ref.model.lora_rank=0"}));
  EXPECT_FALSE(lora_options(lora_keys(plain.actor_rollout_ref.model), "actor_rollout_ref.model.").has_value());
}

/// One GRPO step from tests/data/gguf/tiny-qwen2.gguf and one from the folder it was written from
/// (tiny-llama.gguf leaves out its folder's llama3 rope scaling, so it is not equivalent): the
/// same weights, tokenizer and metrics.
TEST(GgufTrainer, AStepFromAGgufFileEqualsAStepFromItsFolder) {
  const fs::path data = fs::path(VERL_GOLDEN_DIR) / "..";
  const fs::path gguf = data / "gguf" / "tiny-qwen2.gguf", folder = data / "models" / "tiny-qwen2";
  auto run = [&](const fs::path& source, const std::string& name) {
    const fs::path dir = temp_dir("gguf_" + name);
    const PPOConfig config = load_ppo_config(
        {"algorithm.adv_estimator=grpo", "data.train_batch_size=2", "data.max_prompt_length=32",
         "data.max_response_length=4", "actor_rollout_ref.rollout.n=2", "actor_rollout_ref.actor.ppo_mini_batch_size=2",
         "actor_rollout_ref.actor.use_kl_loss=True", "trainer.total_training_steps=1", "trainer.val_before_train=False",
         "trainer.logger=[file]", "actor_rollout_ref.model.path=" + source.string(),
         "trainer.default_local_dir=" + dir.string()});
    auto policy = load_policy(source, "actor_rollout_ref.model.path");
    const auto tokenizer = load_policy_tokenizer(source);
    const auto& special = tokenizer.tokenizer.special_ids();
    TokenizerHooks hooks{.decode = [&](std::span<const model::TokenId> ids) { return tokenizer.tokenizer.decode(ids, true); },
                         .eos_token_ids = {*special.eos},  // a GGUF file carries one end-of-sequence id
                         .pad_token_id = special.pad.value_or(special.eos.value_or(0))};
    data::RLHFDatasetOptions options;
    options.max_prompt_length = 32;
    auto train = data::RLHFDataset::from_rows(rows(4), tokenizer.tokenizer, data::ContentOnlyFormatter{}, options);
    std::optional<model::Transformer> reference = policy;
    PPOTrainer<model::Transformer, NoCritic, OddStart> ppo(config, PPOAlgorithm::from_config(config), std::move(policy),
                                                                  std::move(reference), NoCritic{}, OddStart{},
                                                                  std::move(hooks), std::move(train), data::RLHFDataset{});
    std::ostringstream console;
    auto metrics = ppo.fit(std::nullopt, console);
    // The export is an ordinary folder with the tokenizer files.
    save_policy(ppo.actor(), dir / "hf", dir / "lora_adapter", source.string());
    save_tokenizer_files(source, dir / "hf");
    EXPECT_EQ(tokenizer::load_pretrained_tokenizer(dir / "hf").tokenizer.encode("12+34= ok"),
              tokenizer.tokenizer.encode("12+34= ok"));
    EXPECT_EQ(model::load_transformer(dir / "hf").state_dict(), ppo.actor().state_dict());
    fs::remove_all(dir);
    std::erase_if(metrics.front(), [](const auto& entry) {
      return entry.first.starts_with("timing") || entry.first.starts_with("perf/time") || entry.first == "perf/throughput";
    });
    return metrics.front();
  };
  EXPECT_EQ(load_policy(gguf, "path").state_dict(), load_policy(folder, "path").state_dict());
  const auto from_gguf = run(gguf, "file"), from_folder = run(folder, "folder");
  EXPECT_GT(from_gguf.size(), 10u);
  EXPECT_EQ(from_gguf, from_folder);
  EXPECT_NE(message_of([] { (void)load_policy("/nonexistent/model", "actor_rollout_ref.model.path"); })
                .find("actor_rollout_ref.model.path: expected a Hugging Face model folder or a GGUF file"),
            std::string::npos);
}

}  // namespace
