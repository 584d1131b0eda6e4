// The PPO trainer on a tiny random transformer (2 layers, hidden 32, a character vocabulary) and
// synthetic prompts: the update's independence of the micro-batch size, ppo_epochs and
// mini-batch counts, the critic's value loss, dynamic sampling, KL in the reward with the adaptive
// controller, resume == uninterrupted, configuration errors, a GRPO run whose reward rises,
// balance_batch (verl's _balance_batch), generation logs / JSONL dumps and warnings for keys
// without effect.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "verl/data/prompt_formatter.hpp"
#include "verl/data/rl_dataset.hpp"
#include "verl/tokenizer/char_tokenizer.hpp"
#include "verl/model/checkpoint.hpp"
#include "verl/model/transformer/critic.hpp"
#include "verl/model/transformer/transformer.hpp"
#include "verl/trainer/config.hpp"
#include "verl/trainer/ppo_trainer.hpp"
#include "verl/trainer/recipes.hpp"
#include "../support/error_message.hpp"

namespace {

using namespace verl;
using namespace verl::trainer;
using verl::test_support::message_of;
using tokenizer::CharTokenizer;
using model::Transformer;
namespace fs = std::filesystem;

const CharTokenizer& tokenizer() {
  static const CharTokenizer tok("0123456789+= ");
  return tok;
}

model::HfModelConfig tiny_config() {
  const nlohmann::json json = {{"model_type", "llama"},     {"hidden_size", 32},          {"intermediate_size", 64},
                               {"num_hidden_layers", 2},    {"num_attention_heads", 2},   {"num_key_value_heads", 1},
                               {"vocab_size", tokenizer().vocab_size()}, {"rms_norm_eps", 1e-5},
                               {"max_position_embeddings", 64}, {"eos_token_id", CharTokenizer::eos_id},
                               {"pad_token_id", CharTokenizer::pad_id}};
  return model::HfModelConfig::from_json(json, "tiny trainer config");
}

Transformer tiny_policy() { return Transformer::random(tiny_config(), {.initializer_range = 0.2, .seed = 11}, {.num_threads = 1}); }

/// Prompts "a+b=" with ground truth (a + b) mod 10; `constant_every` > 0 marks every k-th prompt
/// "const" (its reward does not depend on the response).
data::RLHFDataset prompts(int count, int constant_every = 0) {
  std::vector<data::RLHFRow> rows;
  for (int i = 0; i < count; ++i) {
    data::RLHFRow row;
    row.data_source = "synthetic";
    const int a = i % 10, b = (i * 7 + 3) % 10;
    row.prompt = {{"user", std::to_string(a) + "+" + std::to_string(b) + "="}};
    row.reward_model.ground_truth = constant_every > 0 && i % constant_every == 0 ? "const" : std::to_string((a + b) % 10);
    row.extra_info = {{"index", i}};
    rows.push_back(std::move(row));
  }
  data::RLHFDatasetOptions options;
  options.max_prompt_length = 8;
  return data::RLHFDataset::from_rows(std::move(rows), tokenizer(), data::ContentOnlyFormatter{}, options);
}

/// 1 when the response starts with '7': learnable from any prompt.
struct StartsWithSeven {
  double operator()(std::string_view, std::string_view text, std::string_view) const {
    return !text.empty() && text.front() == '7' ? 1.0 : 0.0;
  }
};

/// The parity of the first digit (about half the responses score 1); "const" prompts always 0.5.
struct FirstDigitParity {
  double operator()(std::string_view, std::string_view text, std::string_view truth) const {
    if (truth == "const") return 0.5;
    return !text.empty() && text.front() >= '0' && text.front() <= '9' && (text.front() - '0') % 2 == 1 ? 1.0 : 0.0;
  }
};

TokenizerHooks hooks() {
  return {.decode = [](std::span<const model::TokenId> ids) { return tokenizer().decode(ids, true); },
          .eos_token_ids = {CharTokenizer::eos_id},
          .pad_token_id = CharTokenizer::pad_id};
}

std::vector<std::string> base_overrides() {
  return {"algorithm.adv_estimator=grpo",
          "data.train_batch_size=4",
          "data.max_prompt_length=8",
          "data.max_response_length=3",
          "actor_rollout_ref.rollout.n=4",
          "actor_rollout_ref.actor.ppo_mini_batch_size=2",
          "actor_rollout_ref.actor.optim.lr=0.01",
          "trainer.total_training_steps=4",
          "trainer.val_before_train=False",
          "trainer.logger=[file]"};
}

template <class Critic = NoCritic, class Reward = StartsWithSeven>
PPOTrainer<Transformer, Critic, Reward> make_trainer(std::vector<std::string> extra, Critic critic = {}, Reward reward = {},
                                                     int dataset_size = 16, int constant_every = 0) {
  std::vector<std::string> overrides = base_overrides();
  overrides.insert(overrides.end(), extra.begin(), extra.end());
  const PPOConfig config = load_ppo_config(overrides);
  const PPOAlgorithm algorithm = PPOAlgorithm::from_config(config);
  std::optional<Transformer> reference;
  if (algorithm.needs_reference()) reference = tiny_policy();
  return PPOTrainer<Transformer, Critic, Reward>(config, algorithm, tiny_policy(), std::move(reference), std::move(critic),
                                                 reward, hooks(), prompts(dataset_size, constant_every), data::RLHFDataset{});
}

std::vector<float> parameters(Transformer& model) {
  std::vector<float> out;
  model.for_each_parameter([&](const auto& p) { out.insert(out.end(), p.value.begin(), p.value.end()); });
  return out;
}

/// The trainer's last batch (verl's DataProto) as named views of its columns; a column the step
/// did not compute is empty.
struct Batch {
  explicit Batch(const data::DataProto& batch)
      : proto(&batch),
        responses(ints(keys::responses)),
        input_ids(ints(keys::input_ids)),
        position_ids(ints(keys::position_ids)),
        attention_mask(floats(keys::attention_mask)),
        response_mask(floats(keys::response_mask)),
        old_log_probs(floats(keys::old_log_probs)),
        sum_pi_squared(floats(keys::sum_pi_squared)),
        rollout_is_weights(floats(keys::rollout_is_weights)),
        token_level_rewards(floats(keys::token_level_rewards)),
        advantages(floats(keys::advantages)),
        uid(batch.non_tensor<std::int64_t>(keys::uid)) {
    for (const auto& j : batch.non_tensor<nlohmann::json>(keys::reward_output)) reward_outputs.push_back(reward_output_from_json(j));
  }
  [[nodiscard]] Index rows() const { return proto->size(); }

  const data::DataProto* proto;
  const MatrixI64 &responses, &input_ids, &position_ids;
  const MatrixF &attention_mask, &response_mask, &old_log_probs, &sum_pi_squared, &rollout_is_weights, &token_level_rewards,
      &advantages;
  const std::vector<std::int64_t>& uid;
  std::vector<reward::RewardOutput> reward_outputs;

 private:
  const MatrixI64& ints(std::string_view key) const { return int_column(*proto, key); }
  const MatrixF& floats(std::string_view key) const {
    static const MatrixF none;
    return proto->has_tensor(key) ? float_column(*proto, key) : none;
  }
};

fs::path temp_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("verl_test_ppo_trainer_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

TEST(PPOTrainer, UpdateDoesNotDependOnTheMicroBatchSize) {
  for (const std::string mode : {"token-mean", "seq-mean-token-mean"}) {
    auto whole = make_trainer({"actor_rollout_ref.actor.loss_agg_mode=" + mode,
                               "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8"},
                              NoCritic{}, FirstDigitParity{});
    auto split = make_trainer({"actor_rollout_ref.actor.loss_agg_mode=" + mode,
                               "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=3"},
                              NoCritic{}, FirstDigitParity{});
    const Metrics a = whole.step();
    const Metrics b = split.step();
    EXPECT_NEAR(a.at("actor/pg_loss"), b.at("actor/pg_loss"), 1e-6) << mode;
    EXPECT_NEAR(a.at("actor/grad_norm"), b.at("actor/grad_norm"), 1e-5 * std::max(1.0, a.at("actor/grad_norm"))) << mode;
    EXPECT_GT(a.at("actor/grad_norm"), 0.0) << mode;
    const auto pa = parameters(whole.actor()), pb = parameters(split.actor());
    ASSERT_EQ(pa.size(), pb.size());
    double worst = 0;
    for (std::size_t i = 0; i < pa.size(); ++i) worst = std::max(worst, static_cast<double>(std::abs(pa[i] - pb[i])));
    // AdamW's first step moves every parameter by about lr * sign(g) = 0.01; float rounding of
    // near-zero gradients summed in another order shows through g / sqrt(v), so allow 0.5% of it.
    EXPECT_LT(worst, 5e-5) << mode;
  }
}

TEST(PPOTrainer, OnPolicyUpdateTakesActorEntropyFromItsOwnForward) {
  // One mini-batch, one epoch: verl's actor uses its own detached log-probs as the old ones, so
  // the old_log_prob pass only feeds actor/entropy, and the trainer folds it into the update.
  // KL in the reward with coefficient 0 needs old log-probs before the update (so the pass runs)
  // without changing the rewards: both runs must train identically.
  // (Without comparing the rollout's log-probs with the old ones, which would need the pass too.)
  const std::vector<std::string> on_policy = {"actor_rollout_ref.actor.ppo_mini_batch_size=4",
                                              "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean",
                                              "actor_rollout_ref.rollout.calculate_log_probs=False"};
  auto folded = make_trainer(on_policy, NoCritic{}, FirstDigitParity{});
  auto with_pass = on_policy;
  with_pass.insert(with_pass.end(), {"algorithm.use_kl_in_reward=True", "algorithm.kl_ctrl.kl_coef=0"});
  auto separate = make_trainer(with_pass, NoCritic{}, FirstDigitParity{});
  for (int step = 1; step <= 2; ++step) {
    const Metrics a = folded.step();
    const Metrics b = separate.step();
    EXPECT_FALSE(a.contains("timing_s/old_log_prob")) << step;
    ASSERT_TRUE(b.contains("timing_s/old_log_prob")) << step;
    ASSERT_TRUE(a.contains("actor/entropy")) << step;
    EXPECT_GT(a.at("actor/entropy"), 0.0) << step;
    EXPECT_NEAR(a.at("actor/entropy"), b.at("actor/entropy"), 1e-6 * b.at("actor/entropy")) << step;
    // The ratio is exactly 1 on-policy, with or without the separate pass.
    for (const Metrics* m : {&a, &b}) {
      EXPECT_EQ(m->at("actor/ppo_kl"), 0.0) << step;
      EXPECT_EQ(m->at("actor/pg_clipfrac"), 0.0) << step;
    }
    EXPECT_EQ(a.at("actor/pg_loss"), b.at("actor/pg_loss")) << step;
    EXPECT_EQ(a.at("actor/grad_norm"), b.at("actor/grad_norm")) << step;
    EXPECT_EQ(parameters(folded.actor()), parameters(separate.actor())) << step;
  }
}

TEST(PPOTrainer, PpoEpochsAndMiniBatchesCountOptimizerSteps) {
  // 4 prompts, mini-batches of 2 prompts: 2 mini-batches per epoch, 3 epochs, 2 steps -> 12.
  auto trainer = make_trainer({"actor_rollout_ref.actor.ppo_epochs=3"});
  trainer.step();
  EXPECT_EQ(trainer.actor_optimizer().state().step, 6);
  trainer.step();
  EXPECT_EQ(trainer.actor_optimizer().state().step, 12);
  EXPECT_EQ(trainer.global_step(), 2);
}

TEST(PPOTrainer, CriticUpdatesReduceTheValueLoss) {
  auto critic = model::BasicTransformerCritic<float>::random(tiny_config(), {.initializer_range = 0.2, .seed = 5}, {.num_threads = 1});
  auto trainer = make_trainer({"algorithm.adv_estimator=gae", "actor_rollout_ref.actor.optim.lr=0", "critic.optim.lr=0.01",
                               "critic.ppo_epochs=4", "trainer.total_training_steps=10"},
                              std::move(critic), FirstDigitParity{});
  std::vector<double> losses;
  for (int s = 0; s < 10; ++s) {
    const Metrics m = trainer.step();
    ASSERT_TRUE(m.contains("critic/vf_loss"));
    ASSERT_TRUE(m.contains("critic/values/mean"));
    losses.push_back(m.at("critic/vf_loss"));
  }
  const double first = (losses[0] + losses[1]) / 2, last = (losses[8] + losses[9]) / 2;
  EXPECT_LT(last, 0.5 * first) << "vf_loss " << first << " -> " << last;
  EXPECT_EQ(trainer.critic_optimizer().state().step, 10 * 4 * 2);
}

TEST(PPOTrainer, DynamicSamplingDropsGroupsWithEqualRewards) {
  // Every other prompt has a constant reward: its group is always dropped.
  auto trainer = make_trainer({"algorithm.filter_groups.enable=True", "algorithm.filter_groups.metric=score",
                               "algorithm.filter_groups.max_num_gen_batches=50"},
                              NoCritic{}, FirstDigitParity{}, 16, 2);
  for (int s = 0; s < 2; ++s) {
    const Metrics m = trainer.step();
    const Batch batch(trainer.last_batch());
    ASSERT_EQ(batch.rows(), 16);
    EXPECT_GE(m.at("train/num_gen_batches"), 2.0);  // half the prompts are always dropped
    for (Index g = 0; g < 4; ++g) {
      double lo = 1e9, hi = -1e9;
      for (Index j = 0; j < 4; ++j) {
        const double score = batch.reward_outputs[static_cast<std::size_t>(g * 4 + j)].score;
        lo = std::min(lo, score);
        hi = std::max(hi, score);
        EXPECT_EQ(batch.uid[static_cast<std::size_t>(g * 4 + j)], batch.uid[static_cast<std::size_t>(g * 4)]);
      }
      EXPECT_LT(lo, hi) << "group " << g << " has equal rewards";
    }
  }
}

TEST(PPOTrainer, KLInRewardWithAdaptiveController) {
  auto trainer = make_trainer({"algorithm.use_kl_in_reward=True", "algorithm.kl_ctrl.type=adaptive",
                               "algorithm.kl_ctrl.kl_coef=0.1", "algorithm.kl_ctrl.target_kl=0.01",
                               "algorithm.kl_ctrl.horizon=100", "actor_rollout_ref.actor.optim.lr=0.05"});
  const Metrics first = trainer.step();
  EXPECT_DOUBLE_EQ(first.at("actor/reward_kl_penalty_coeff"), 0.1);
  EXPECT_NEAR(first.at("actor/reward_kl_penalty"), 0.0, 1e-6);  // the actor equals the reference
  // Observed KL 0 < target: beta *= 1 + clip(0 / 0.01 - 1, -0.2, 0.2) * 16 / 100.
  EXPECT_NEAR(trainer.kl_coefficient(), 0.1 * (1 - 0.2 * 16 / 100.0), 1e-12);
  const double before = trainer.kl_coefficient();
  const Metrics second = trainer.step();
  EXPECT_DOUBLE_EQ(second.at("actor/reward_kl_penalty_coeff"), before);
  EXPECT_GT(std::abs(second.at("actor/reward_kl_penalty")), 0.0);
  EXPECT_NE(trainer.kl_coefficient(), before);
}

std::vector<nlohmann::json> comparable_lines(const fs::path& file) {
  std::vector<nlohmann::json> out;
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) {
    nlohmann::json j = nlohmann::json::parse(line);
    nlohmann::json kept = nlohmann::json::object();
    for (const auto& [k, v] : j["data"].items())
      if (!k.starts_with("timing_s/") && !k.starts_with("timing_per_token_ms/") && !k.starts_with("perf/")) kept[k] = v;
    out.push_back({{"step", j["step"]}, {"data", kept}});
  }
  return out;
}

TEST(PPOTrainer, ResumedRunLogsExactlyTheMetricsOfAnUninterruptedOne) {
  const fs::path dir = temp_dir("resume");
  const std::vector<std::string> common = {"trainer.save_freq=2", "trainer.resume_mode=auto", "actor_rollout_ref.actor.optim.lr_warmup_steps=2",
                                           "actor_rollout_ref.actor.optim.lr_scheduler_type=cosine",
                                           "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=3"};
  auto with = [&](std::string key) {
    auto v = common;
    v.push_back(std::move(key));
    return v;
  };
  ::setenv("VERL_FILE_LOGGER_PATH", (dir / "full.jsonl").c_str(), 1);
  {
    auto trainer = make_trainer(with("trainer.default_local_dir=" + (dir / "full").string()), NoCritic{}, FirstDigitParity{});
    std::ostringstream quiet;
    trainer.fit(std::nullopt, quiet);
  }
  ::setenv("VERL_FILE_LOGGER_PATH", (dir / "resumed.jsonl").c_str(), 1);
  {
    auto trainer = make_trainer(with("trainer.default_local_dir=" + (dir / "resumed").string()), NoCritic{}, FirstDigitParity{});
    std::ostringstream quiet;
    trainer.fit(2, quiet);  // "killed" after the checkpoint of step 2
  }
  {
    auto trainer = make_trainer(with("trainer.default_local_dir=" + (dir / "resumed").string()), NoCritic{}, FirstDigitParity{});
    std::ostringstream quiet;
    const auto history = trainer.fit(std::nullopt, quiet);
    EXPECT_EQ(history.size(), 2u);  // steps 3 and 4 only
  }
  ::unsetenv("VERL_FILE_LOGGER_PATH");
  const auto full = comparable_lines(dir / "full.jsonl");
  const auto resumed = comparable_lines(dir / "resumed.jsonl");
  ASSERT_EQ(full.size(), 4u);
  ASSERT_EQ(resumed.size(), 4u);
  EXPECT_GT(full[3]["data"]["actor/grad_norm"].get<double>(), 0.0);  // the runs did learn something
  for (std::size_t i = 0; i < full.size(); ++i) EXPECT_EQ(full[i].dump(), resumed[i].dump()) << "line " << i;
  EXPECT_TRUE(fs::exists(dir / "resumed" / "global_step_4" / "actor" / "model.safetensors"));
  // A damaged latest checkpoint is an error naming what is missing, never a quiet restart.
  const auto resume_error = [&] {
    auto trainer = make_trainer(with("trainer.default_local_dir=" + (dir / "resumed").string()), NoCritic{}, FirstDigitParity{});
    std::ostringstream quiet;
    return message_of([&] { (void)trainer.fit(std::nullopt, quiet); });
  };
  fs::remove(dir / "resumed" / "global_step_4" / "actor" / "optim.safetensors");
  EXPECT_NE(resume_error().find("checkpoint role 'actor': no optimizer state"), std::string::npos);
  fs::remove(dir / "resumed" / "global_step_4" / "data.json");
  EXPECT_NE(resume_error().find("no data.json (the data loader's position)"), std::string::npos);
  fs::remove_all(dir);
}

TEST(PPOTrainer, BadConfigurationsAreErrorsNamingTheKey) {
  EXPECT_NE(message_of([] { (void)load_ppo_config({"algorithm.adv_estimatr=grpo"}); }).find("algorithm.adv_estimator"),
            std::string::npos);
  const std::string type_error = message_of([] { (void)load_ppo_config({"data.train_batch_size=many"}); });
  EXPECT_NE(type_error.find("data.train_batch_size"), std::string::npos) << type_error;
  const std::string no_critic = message_of([] { (void)make_trainer({"algorithm.adv_estimator=gae"}); });
  EXPECT_NE(no_critic.find("needs a critic"), std::string::npos) << no_critic;
  const std::string mini = message_of([] { (void)make_trainer({"actor_rollout_ref.actor.ppo_mini_batch_size=8"}); });
  EXPECT_NE(mini.find("actor_rollout_ref.actor.ppo_mini_batch_size"), std::string::npos) << mini;
  const std::string loss = message_of([] { (void)make_trainer({"actor_rollout_ref.actor.policy_loss.loss_mode=ppo2"}); });
  EXPECT_NE(loss.find("loss_mode"), std::string::npos) << loss;
}

TEST(PPOTrainer, RowsWithoutAGroundTruthAndUnwritableOutputsAreNamedBeforeTraining) {
  // The rule-based default reward needs every row's reward_model.ground_truth.
  std::vector<data::RLHFRow> rows(4);
  for (int i = 0; i < 4; ++i) {
    rows[static_cast<std::size_t>(i)].data_source = "openai/gsm8k";
    rows[static_cast<std::size_t>(i)].prompt = {{"user", std::to_string(i) + "+1="}};
    rows[static_cast<std::size_t>(i)].reward_model.ground_truth = std::to_string(i + 1);
  }
  rows[2].reward_model.ground_truth = nullptr;
  data::RLHFDatasetOptions options;
  options.max_prompt_length = 8;
  auto dataset = data::RLHFDataset::from_rows(rows, tokenizer(), data::ContentOnlyFormatter{}, options, "gsm8k.jsonl");
  const PPOConfig config = load_ppo_config(base_overrides());
  const std::string missing = message_of([&] {
    (void)PPOTrainer<Transformer>(config, PPOAlgorithm::from_config(config), tiny_policy(), std::nullopt, NoCritic{},
                                  reward::DefaultRewardFunction{}, hooks(), dataset, data::RLHFDataset{});
  });
  EXPECT_NE(missing.find("data.train_files: gsm8k.jsonl:3: the row has no reward_model.ground_truth"), std::string::npos)
      << missing;
  // An output folder that cannot be made is named by its key before the first step.
  const fs::path dir = temp_dir("outputs");
  std::ofstream(dir / "a_file") << "in the way";
  auto trainer = make_trainer({"trainer.rollout_data_dir=" + (dir / "a_file" / "rollouts").string()});
  std::ostringstream quiet;
  const std::string unwritable = message_of([&] { (void)trainer.fit(std::nullopt, quiet); });
  EXPECT_NE(unwritable.find("trainer.rollout_data_dir: cannot create the folder"), std::string::npos) << unwritable;
  EXPECT_EQ(trainer.global_step(), 0);
  fs::remove_all(dir);
}

TEST(PPOTrainer, RecipesComposeAtCompileTime) {
  using namespace recipes;
  static_assert(PPO::needs_critic && !GRPO::needs_critic && GRPO::needs_reference && !DAPO::needs_reference);
  static_assert(ReMax::needs_reference && !DrGRPO::needs_reference);
  const PPOConfig config = load_ppo_config(base_overrides());
  const PPOAlgorithm dapo = DAPO::algorithm(config);
  ASSERT_TRUE(dapo.filter_groups.has_value());
  ASSERT_TRUE(dapo.overlong_penalty.has_value());
  EXPECT_EQ(dapo.overlong_penalty->buffer_length, 1);  // max_response_length 3 / 4, at least 1
  const auto* clip = dapo.policy_loss.get_if<algo::VanillaPPO>();
  ASSERT_NE(clip, nullptr);
  const PPOAlgorithm dr = DrGRPO::algorithm(config);
  EXPECT_EQ(dr.loss_agg_mode, algo::LossAggMode::seq_mean_token_sum_norm);
  EXPECT_NE(dr.estimator.get_if<algo::DrGRPO>(), nullptr);
  RecipeTrainer<GRPO, Transformer, NoCritic, StartsWithSeven> grpo(config, tiny_policy(), tiny_policy(), NoCritic{},
                                                                   StartsWithSeven{}, hooks(), prompts(16), {});
  const Metrics m = grpo.step();
  EXPECT_TRUE(m.contains("actor/kl_loss"));
  EXPECT_TRUE(grpo.algorithm().kl_loss.has_value());
}

TEST(PPOTrainer, RecipeTrainersReadEveryPolicyLossSetting) {
  // Every actor.policy_loss.* value (and the clip and tau keys) reaches the loss of a recipe
  // trainer, as it reaches the loss chosen by name: both are built from policy_loss_config().
  std::vector<std::string> overrides = base_overrides();
  for (const char* setting :
       {"actor_rollout_ref.actor.policy_loss.clip_cov_ratio=0.25", "actor_rollout_ref.actor.policy_loss.clip_cov_lb=0.5",
        "actor_rollout_ref.actor.policy_loss.clip_cov_ub=7.5", "actor_rollout_ref.actor.policy_loss.kl_cov_ratio=0.125",
        "actor_rollout_ref.actor.policy_loss.ppo_kl_coef=0.75", "actor_rollout_ref.actor.clip_ratio_low=0.15",
        "actor_rollout_ref.actor.clip_ratio_high=0.3", "actor_rollout_ref.actor.clip_ratio_c=4.5",
        "actor_rollout_ref.actor.tau_pos=1.25", "actor_rollout_ref.actor.tau_neg=1.5"})
    overrides.emplace_back(setting);
  const PPOConfig config = load_ppo_config(overrides);

  using ClipCovGRPO = Recipe<algo::GRPO, algo::ClipCov>;
  RecipeTrainer<ClipCovGRPO, Transformer, NoCritic, StartsWithSeven> trainer(
      config, tiny_policy(), tiny_policy(), NoCritic{}, StartsWithSeven{}, hooks(), prompts(16), {});
  const auto* clip_cov = trainer.algorithm().policy_loss.get_if<algo::ClipCov>();
  ASSERT_NE(clip_cov, nullptr);
  EXPECT_EQ(clip_cov->clip_cov_ratio, 0.25);
  EXPECT_EQ(clip_cov->clip_cov_lb, 0.5);
  EXPECT_EQ(clip_cov->clip_cov_ub, 7.5);
  EXPECT_EQ(clip_cov->clip_ratio_low, 0.15);
  EXPECT_EQ(clip_cov->clip_ratio_high, 0.3);

  const PPOAlgorithm kl_cov = Recipe<algo::GRPO, algo::KLCov>::algorithm(config);
  ASSERT_NE(kl_cov.policy_loss.get_if<algo::KLCov>(), nullptr);
  EXPECT_EQ(kl_cov.policy_loss.get_if<algo::KLCov>()->kl_cov_ratio, 0.125);
  EXPECT_EQ(kl_cov.policy_loss.get_if<algo::KLCov>()->ppo_kl_coef, 0.75);
  const PPOAlgorithm sapo = Recipe<algo::GRPO, algo::SAPO>::algorithm(config);
  ASSERT_NE(sapo.policy_loss.get_if<algo::SAPO>(), nullptr);
  EXPECT_EQ(sapo.policy_loss.get_if<algo::SAPO>()->tau_pos, 1.25);
  EXPECT_EQ(sapo.policy_loss.get_if<algo::SAPO>()->tau_neg, 1.5);
  const PPOAlgorithm vanilla = Recipe<algo::GRPO, algo::VanillaPPO>::algorithm(config);
  ASSERT_NE(vanilla.policy_loss.get_if<algo::VanillaPPO>(), nullptr);
  EXPECT_EQ(vanilla.policy_loss.get_if<algo::VanillaPPO>()->clip_ratio_c, 4.5);

  // The by-name path gives the same loss.
  std::vector<std::string> by_name = overrides;
  by_name.emplace_back("actor_rollout_ref.actor.policy_loss.loss_mode=clip_cov");
  const PPOAlgorithm named = PPOAlgorithm::from_config(load_ppo_config(by_name));
  const auto* named_clip_cov = named.policy_loss.get_if<algo::ClipCov>();
  ASSERT_NE(named_clip_cov, nullptr);
  EXPECT_EQ(named_clip_cov->clip_cov_ratio, clip_cov->clip_cov_ratio);
  EXPECT_EQ(named_clip_cov->clip_cov_lb, clip_cov->clip_cov_lb);
  EXPECT_EQ(named_clip_cov->clip_cov_ub, clip_cov->clip_cov_ub);
  EXPECT_EQ(named_clip_cov->seed, clip_cov->seed);

  // And the recipe's steps run with it.
  const Metrics m = trainer.step();
  EXPECT_TRUE(std::isfinite(m.at("actor/pg_loss")));
}

/// Every response scores NaN: every loss, gradient norm and update of a step is non-finite.
struct NaNReward {
  double operator()(std::string_view, std::string_view, std::string_view) const {
    return std::numeric_limits<double>::quiet_NaN();
  }
};

TEST(PPOTrainer, NonFiniteUpdatesAreSkippedCountedAndEndTheRunWhenTheyPersist) {
  // A finite run reports no skipped update.
  auto finite = make_trainer({});
  EXPECT_EQ(finite.step().at("training/nonfinite_updates_skipped"), 0.0);

  // NaN rewards: each step's updates are skipped (the weights stay as they were) and counted; the
  // third such step in a row ends the run with an error naming the key.
  auto broken = make_trainer({"trainer.max_consecutive_nonfinite_steps=3"}, NoCritic{}, NaNReward{});
  const std::vector<float> before = parameters(broken.actor());
  const Metrics first = broken.step();
  EXPECT_GE(first.at("training/nonfinite_updates_skipped"), 1.0);
  EXPECT_FALSE(std::isfinite(first.at("actor/grad_norm")));
  EXPECT_EQ(parameters(broken.actor()), before);  // nothing was trained on
  (void)broken.step();
  const std::string error = message_of([&] { (void)broken.step(); });
  EXPECT_NE(error.find("trainer.max_consecutive_nonfinite_steps: 3 steps in a row"), std::string::npos) << error;
  EXPECT_EQ(parameters(broken.actor()), before);
}

TEST(PPOTrainer, NonFiniteWeightsAreRefusedAtLoadNamingTheTensor) {
  Transformer broken = tiny_policy();
  std::string name;
  broken.for_each_parameter([&](const auto& p) {
    if (!name.empty()) return;
    name = std::string(p.name);
    p.value[1] = std::numeric_limits<float>::infinity();
  });
  Transformer fresh = tiny_policy();
  const std::string from_dict = message_of([&] { fresh.load_state_dict(broken.state_dict()); });
  EXPECT_NE(from_dict.find("tensor '" + name + "': expected finite weights, got inf at index 1"), std::string::npos)
      << from_dict;
  const fs::path folder = fs::temp_directory_path() / ("verl_nonfinite_model_" + std::to_string(::getpid()));
  model::save_transformer(broken, folder);
  const std::string from_folder = message_of([&] { (void)model::load_transformer(folder); });
  fs::remove_all(folder);
  EXPECT_NE(from_folder.find("tensor '" + name + "' in '"), std::string::npos) << from_folder;
  EXPECT_NE(from_folder.find("expected finite weights, got inf at index 1"), std::string::npos) << from_folder;
}

TEST(PPOTrainer, EveryRuntimeEstimatorAndLossRunsAStep) {
  const std::vector<std::vector<std::string>> cases = {
      {"algorithm.adv_estimator=rloo", "actor_rollout_ref.actor.use_kl_loss=True"},
      {"algorithm.adv_estimator=reinforce_plus_plus", "actor_rollout_ref.actor.use_kl_loss=True",
       "actor_rollout_ref.actor.kl_loss_type=mse"},
      {"algorithm.adv_estimator=reinforce_plus_plus_baseline"},
      {"algorithm.adv_estimator=remax", "algorithm.use_kl_in_reward=True"},
      {"algorithm.adv_estimator=grpo", "algorithm.norm_adv_by_std_in_grpo=False",
       "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-sum-norm"},
      {"algorithm.adv_estimator=opo"},
      {"algorithm.adv_estimator=gpg", "actor_rollout_ref.actor.policy_loss.loss_mode=gpg"},
      {"algorithm.adv_estimator=grpo_passk"},
      {"algorithm.adv_estimator=grpo", "actor_rollout_ref.actor.policy_loss.loss_mode=gspo",
       "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean"},
      {"algorithm.adv_estimator=grpo", "actor_rollout_ref.actor.policy_loss.loss_mode=cispo",
       "actor_rollout_ref.actor.entropy_coeff=0.01"},
      {"algorithm.adv_estimator=rloo", "algorithm.filter_groups.enable=True", "algorithm.filter_groups.metric=score",
       "reward_model.overlong_buffer.enable=True", "reward_model.overlong_buffer.len=2",
       "reward_model.overlong_buffer.penalty_factor=1.0", "reward.reward_manager.name=dapo",
       "actor_rollout_ref.actor.clip_ratio_high=0.28"},
      {"algorithm.adv_estimator=grpo", "algorithm.rollout_correction.bypass_mode=True",
       "algorithm.rollout_correction.rollout_is=token", "algorithm.rollout_correction.loss_type=reinforce"},
      {"algorithm.adv_estimator=grpo", "actor_rollout_ref.actor.policy_loss.loss_mode=bypass_mode"},
  };
  for (const auto& overrides : cases) {
    auto trainer = make_trainer(overrides, NoCritic{}, FirstDigitParity{});
    const Metrics m = trainer.step();
    const std::string label = overrides.front() + " " + overrides.back();
    // In bypass mode the rollout's log-probs are the old ones: no old_log_prob pass.
    const bool bypass = std::any_of(overrides.begin(), overrides.end(),
                                    [](const std::string& o) { return o.find("bypass_mode") != std::string::npos; });
    for (const std::string key : {"actor/pg_loss", "actor/grad_norm", "actor/entropy", "critic/score/mean",
                                  "critic/advantages/mean", "response_length/mean", "timing_s/gen", "timing_s/old_log_prob",
                                  "timing_s/adv", "timing_s/update_actor", "timing_s/step", "perf/throughput", "actor/lr"}) {
      if (bypass && key == "timing_s/old_log_prob") continue;
      ASSERT_TRUE(m.contains(key)) << key << " missing for " << label;
      EXPECT_TRUE(std::isfinite(m.at(key))) << key << " for " << label;
    }
    EXPECT_EQ(trainer.actor_optimizer().state().step, 2) << label;
  }
  // DAPO's overlong penalty reaches the scores: responses of 3 tokens with a buffer of 2 past 1.
  auto dapo = make_trainer({"reward_model.overlong_buffer.enable=True", "reward_model.overlong_buffer.len=2",
                            "reward_model.overlong_buffer.penalty_factor=1.0", "reward.reward_manager.name=dapo",
                            "reward_model.overlong_buffer.log=True"},
                           NoCritic{}, FirstDigitParity{});
  const Metrics m = dapo.step();
  EXPECT_LT(m.at("reward/overlong_penalty/mean"), 0.0);
}

// ---- optimal token baselines (calculate_sum_pi_squared) and GDPO (gdpo_reward_keys) -----------------

TEST(PPOTrainer, OptimalTokenBaselinesReadTheActorsSumOfSquaredProbabilities) {
  const std::string on = "actor_rollout_ref.actor.calculate_sum_pi_squared=True";
  for (const std::string estimator : {"optimal_token_baseline", "tir_optimal_token_baseline"}) {
    const std::string key = "algorithm.adv_estimator=" + estimator;
    // verl asserts on it before its advantage computation; refused before any work here.
    const std::string off = message_of([&] { (void)make_trainer({key}); });
    EXPECT_NE(off.find("expected actor_rollout_ref.actor.calculate_sum_pi_squared=True, got False"), std::string::npos) << off;
    const std::string bypass =
        message_of([&] { (void)make_trainer({key, on, "algorithm.rollout_correction.bypass_mode=True"}); });
    EXPECT_NE(bypass.find("expected algorithm.rollout_correction.bypass_mode=False"), std::string::npos) << bypass;

    // lr = 0: the actor after the step is the one that computed the old log-probs.
    auto trainer = make_trainer({key, on, "actor_rollout_ref.actor.optim.lr=0"}, NoCritic{}, FirstDigitParity{});
    const Metrics m = trainer.step();
    EXPECT_TRUE(m.contains("timing_s/old_log_prob")) << estimator;
    EXPECT_TRUE(std::isfinite(m.at("actor/pg_loss"))) << estimator;
    const Batch t(trainer.last_batch());
    const Index width = t.responses.cols(), prompt = t.input_ids.cols() - width;
    ASSERT_EQ(t.sum_pi_squared.rows(), t.rows());
    ASSERT_EQ(t.sum_pi_squared.cols(), width);
    // Each response token's sum_j pi_j^2 is that of the actor's distribution over it.
    const auto batch = model::TokenBatch::padded(t.input_ids, t.attention_mask, t.position_ids);
    const auto out = trainer.actor().forward(batch, {.return_logits = true});
    for (Index r = 0; r < t.rows(); ++r) {
      for (Index c = 0; c < width; ++c) {
        if (t.response_mask(r, c) == 0) {
          EXPECT_EQ(t.sum_pi_squared(r, c), 0.0f);
          continue;
        }
        const Eigen::ArrayXd x = out.logits.row(r * t.input_ids.cols() + prompt - 1 + c).cast<double>().transpose().array();
        const Eigen::ArrayXd p = (x - x.maxCoeff()).exp() / (x - x.maxCoeff()).exp().sum();
        EXPECT_NEAR(t.sum_pi_squared(r, c), p.square().sum(), 1e-5) << estimator << " " << r << " " << c;
      }
    }
    // The estimator was given the batch's own old log-probs and sums: recomputing gives its advantages.
    algo::AdvantageBatch in{.token_level_rewards = t.token_level_rewards, .response_mask = t.response_mask, .index = t.uid};
    in.old_log_probs.emplace(t.old_log_probs);
    in.sum_pi_squared.emplace(t.sum_pi_squared);
    const auto expected = trainer.algorithm().estimator.compute(in);
    EXPECT_EQ(t.advantages, expected.advantages) << estimator;
    EXPECT_GT(t.advantages.cwiseAbs().maxCoeff(), 0.0f) << estimator;
  }
  // With rollout correction's token weights (a bfloat16 rollout), the estimator weighs by them too.
  auto weighted = make_trainer({"algorithm.adv_estimator=optimal_token_baseline", on, "actor_rollout_ref.rollout.dtype=bfloat16",
                                "algorithm.rollout_correction.rollout_is=token"},
                               NoCritic{}, FirstDigitParity{});
  (void)weighted.step();
  const Batch t(weighted.last_batch());
  ASSERT_EQ(t.rollout_is_weights.rows(), t.rows());
  algo::AdvantageBatch in{.token_level_rewards = t.token_level_rewards, .response_mask = t.response_mask, .index = t.uid};
  in.old_log_probs.emplace(t.old_log_probs);
  in.sum_pi_squared.emplace(t.sum_pi_squared);
  const auto unweighted = weighted.algorithm().estimator.compute(in);
  in.rollout_is_weights.emplace(t.rollout_is_weights);
  EXPECT_EQ(t.advantages, weighted.algorithm().estimator.compute(in).advantages);
  EXPECT_NE(t.advantages, unweighted.advantages);
}

/// A reward function returning verl's dict: a score and two named components.
struct DigitComponents {
  reward::RewardOutput operator()(std::string_view, std::string_view text, std::string_view) const {
    const bool digit = !text.empty() && text.front() >= '0' && text.front() <= '9';
    const double odd = digit && (text.front() - '0') % 2 == 1 ? 1.0 : 0.0;
    const double length = static_cast<double>(text.size()) / 3.0;
    return {.score = odd + length, .components = {{"odd", odd}, {"length", length}}};
  }
};

TEST(PPOTrainer, GdpoNormalisesTheRewardFunctionsNamedScores) {
  const std::vector<std::string> gdpo = {"algorithm.adv_estimator=gdpo", "+algorithm.gdpo_reward_keys=[odd,length]",
                                         "+algorithm.gdpo_reward_weights=[1.0,0.25]"};
  auto trainer = make_trainer(gdpo, NoCritic{}, DigitComponents{});
  const Metrics m = trainer.step();
  const Batch t(trainer.last_batch());
  // The components as verl's non_tensor_batch holds them, and its gdpo/<key>/* metrics.
  algo::RewardComponents components;
  for (const std::string key : {"odd", "length"}) {
    VectorF values(t.rows());
    for (Index r = 0; r < t.rows(); ++r) values[r] = static_cast<float>(*t.reward_outputs[static_cast<std::size_t>(r)].named_score(key));
    EXPECT_NEAR(m.at("gdpo/" + key + "/mean"), values.cast<double>().mean(), 1e-12) << key;
    EXPECT_EQ(m.at("gdpo/" + key + "/max"), values.maxCoeff()) << key;
    EXPECT_EQ(m.at("gdpo/" + key + "/min"), values.minCoeff()) << key;
    EXPECT_TRUE(m.contains("gdpo/" + key + "/std")) << key;
    components.emplace(key, values);
  }
  const algo::GDPO reference{.reward_weights = std::vector<double>{1.0, 0.25}};
  const auto expected = reference.compute({.token_level_rewards = t.token_level_rewards, .response_mask = t.response_mask, .index = t.uid},
                                          std::vector<std::string>{"odd", "length"}, components);
  EXPECT_EQ(t.advantages, expected.advantages);
  // Not the fallback on the summed score: the components were normalised one by one.
  EXPECT_NE(t.advantages, reference.compute({.token_level_rewards = t.token_level_rewards, .response_mask = t.response_mask,
                                             .index = t.uid}).advantages);

  // A key the reward function does not return names the key and what it did return.
  auto missing = make_trainer({"algorithm.adv_estimator=gdpo", "+algorithm.gdpo_reward_keys=[odd,format]"}, NoCritic{},
                              DigitComponents{});
  const std::string error = message_of([&] { (void)missing.step(); });
  EXPECT_NE(error.find("algorithm.gdpo_reward_keys: the reward function returned no number named 'format'"), std::string::npos)
      << error;
  EXPECT_NE(error.find("score, length, odd"), std::string::npos) << error;
  // verl asserts on missing keys; the weights must pair with the keys; other estimators do not read them.
  EXPECT_NE(message_of([] { (void)load_ppo_config({"algorithm.adv_estimator=gdpo"}); }).find("algorithm.gdpo_reward_keys: expected"),
            std::string::npos);
  EXPECT_NE(message_of([] {
              (void)load_ppo_config({"algorithm.adv_estimator=gdpo", "+algorithm.gdpo_reward_keys=[a,b]",
                                     "+algorithm.gdpo_reward_weights=[1.0]"});
            }).find("algorithm.gdpo_reward_weights: expected one weight per key of algorithm.gdpo_reward_keys (2), got 1"),
            std::string::npos);
  EXPECT_NE(message_of([] { (void)load_ppo_config({"algorithm.adv_estimator=grpo", "+algorithm.gdpo_reward_keys=[a]"}); })
                .find("algorithm.gdpo_reward_keys: only adv_estimator=gdpo reads it"),
            std::string::npos);
  EXPECT_NE(message_of([] {
              (void)load_ppo_config({"algorithm.adv_estimator=gdpo", "+algorithm.gdpo_reward_keys=[a]",
                                     "+algorithm.gdpo_reward_weights=[nan]"});
            }).find("algorithm.gdpo_reward_weights"),
            std::string::npos);
}

TEST(PPOTrainer, EveryRegisteredEstimatorAndPolicyLossRunsFromVerlsKeys) {
  // Each name of verl 0.9.1's registries, with the keys verl needs for it (gae: see the critic tests).
  const auto run = [](std::vector<std::string> overrides, const std::string& label) {
    auto trainer = make_trainer(std::move(overrides), NoCritic{}, DigitComponents{});
    const Metrics m = trainer.step();
    for (const std::string key : {"actor/pg_loss", "actor/grad_norm", "critic/advantages/mean"}) {
      ASSERT_TRUE(m.contains(key)) << key << " missing for " << label;
      EXPECT_TRUE(std::isfinite(m.at(key))) << key << " for " << label;
    }
  };
  for (const auto name : algo::advantage_estimator_names()) {
    if (name == "gae") continue;
    std::vector<std::string> overrides = {"algorithm.adv_estimator=" + std::string(name)};
    if (name == "optimal_token_baseline" || name == "tir_optimal_token_baseline")
      overrides.push_back("actor_rollout_ref.actor.calculate_sum_pi_squared=True");
    if (name == "gdpo") overrides.push_back("+algorithm.gdpo_reward_keys=[odd,length]");
    run(overrides, std::string(name));
  }
  for (const auto name : algo::policy_loss_names()) {
    std::vector<std::string> overrides = {"actor_rollout_ref.actor.policy_loss.loss_mode=" + std::string(name)};
    if (name == "dro") overrides.push_back("actor_rollout_ref.actor.policy_loss.dro_beta=0.1");
    run(overrides, std::string(name));
  }
}

// ---- the rollout's own log-probs (calculate_log_probs, rollout.dtype, rollout_correction) ----------

TEST(PPOTrainer, TheRolloutsLogProbsAreComparedWithTheActors) {
  // float32 decoding reads the weights as trained: the rollout's probabilities are the actor's.
  auto exact = make_trainer({});
  const Metrics a = exact.step();
  ASSERT_TRUE(a.contains("training/rollout_probs_diff_max"));
  EXPECT_EQ(a.at("training/rollout_probs_diff_valid"), 1.0);
  EXPECT_LT(a.at("training/rollout_probs_diff_max"), 1e-5);
  EXPECT_GT(a.at("training/rollout_actor_probs_pearson_corr"), 0.99999);
  ASSERT_TRUE(a.contains("rollout_corr/log_ppl_abs_diff"));  // verl's off-policy diagnostics, always on
  EXPECT_LT(a.at("rollout_corr/log_ppl_abs_diff"), 1e-5);
  // bfloat16 decoding (verl's default rollout.dtype): the mismatch rollout correction is for.
  auto rounded = make_trainer({"actor_rollout_ref.rollout.dtype=bfloat16"});
  const Metrics b = rounded.step();
  EXPECT_GT(b.at("training/rollout_probs_diff_max"), 1e-4);
  EXPECT_GT(b.at("rollout_corr/log_ppl_abs_diff"), 10 * a.at("rollout_corr/log_ppl_abs_diff") + 1e-6);
  EXPECT_GT(b.at("training/rollout_actor_probs_pearson_corr"), 0.9);  // close, not equal
  // Without calculate_log_probs nothing is compared, and the pass is folded into the update.
  auto off = make_trainer({"actor_rollout_ref.rollout.calculate_log_probs=False", "actor_rollout_ref.actor.ppo_mini_batch_size=4"});
  const Metrics c = off.step();
  EXPECT_FALSE(c.contains("training/rollout_probs_diff_max"));
  EXPECT_FALSE(c.contains("rollout_corr/kl"));
  EXPECT_FALSE(c.contains("timing_s/old_log_prob"));
}

TEST(PPOTrainer, RolloutCorrectionWeightsAndRejectsWhatTheRolloutGotWrong) {
  // One mini-batch, one epoch: on-policy, so only the rollout's rounding separates old from new.
  const std::vector<std::string> bf16 = {"actor_rollout_ref.rollout.dtype=bfloat16", "actor_rollout_ref.actor.ppo_mini_batch_size=4"};
  auto plain = make_trainer(bf16, NoCritic{}, FirstDigitParity{});
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.end(), bf16.begin(), bf16.end());
    return make_trainer(extra, NoCritic{}, FirstDigitParity{});
  };
  // Truncated IS weights on the policy loss (token level): the update changes.
  auto weighted = with({"algorithm.rollout_correction.rollout_is=token", "algorithm.rollout_correction.rollout_is_threshold=1.001"});
  const Metrics p = plain.step();
  const Metrics w = weighted.step();
  ASSERT_TRUE(w.contains("rollout_corr/rollout_is_mean"));
  EXPECT_FALSE(p.contains("rollout_corr/rollout_is_mean"));
  EXPECT_LT(w.at("rollout_corr/rollout_is_min"), 1.0);
  EXPECT_NE(parameters(plain.actor()), parameters(weighted.actor()));
  // IcePop (verl 0.9.1's "lower_upper" threshold): weights above 1.0001 are zeroed, not truncated.
  auto icepop = with({"algorithm.rollout_correction.rollout_is=token", "algorithm.rollout_correction.rollout_is_threshold='0.5_1.0001'"});
  const Metrics i = icepop.step();
  ASSERT_TRUE(i.contains("rollout_corr/rollout_is_oob_ratio"));
  EXPECT_GT(i.at("rollout_corr/rollout_is_oob_ratio"), 0.0);
  EXPECT_LT(i.at("rollout_corr/rollout_is_oob_ratio"), 1.0);
  EXPECT_FALSE(w.contains("rollout_corr/rollout_is_oob_ratio"));
  EXPECT_NE(parameters(icepop.actor()), parameters(weighted.actor()));
  // Rejection sampling with a tight token bound masks tokens out of training.
  auto rejecting = with({"algorithm.rollout_correction.rollout_rs=token_k1", "algorithm.rollout_correction.rollout_rs_threshold=1.0001"});
  const Metrics r = rejecting.step();
  ASSERT_TRUE(r.contains("rollout_corr/rollout_rs_masked_fraction"));
  EXPECT_GT(r.at("rollout_corr/rollout_rs_masked_fraction"), 0.0);
  EXPECT_NE(parameters(plain.actor()), parameters(rejecting.actor()));
  // Bypass mode: the rollout's log-probs are the old ones, so the PPO ratio sees the mismatch.
  auto bypass = with({"algorithm.rollout_correction.bypass_mode=True"});
  const Metrics y = bypass.step();
  EXPECT_FALSE(y.contains("timing_s/old_log_prob"));
  EXPECT_NE(y.at("actor/ppo_kl"), 0.0);
  EXPECT_EQ(p.at("actor/ppo_kl"), 0.0);  // on-policy without bypass: the ratio is exactly 1
  // Corrections need the rollout's log-probs; an invalid setting names its key.
  EXPECT_NE(message_of([&] { (void)with({"actor_rollout_ref.rollout.calculate_log_probs=False",
                                          "algorithm.rollout_correction.rollout_is=token"}); })
                .find("expected actor_rollout_ref.rollout.calculate_log_probs=True"),
            std::string::npos);
  const std::string bogus = message_of([&] { (void)with({"algorithm.rollout_correction.rollout_is=bogus"}); });
  EXPECT_NE(bogus.find("algorithm.rollout_correction.rollout_is"), std::string::npos) << bogus;
  EXPECT_NE(bogus.find("bogus"), std::string::npos) << bogus;
}

TEST(PPOTrainer, GrpoRaisesTheMeanRewardOnALearnableTask) {
  auto trainer = make_trainer({"trainer.total_training_steps=30", "actor_rollout_ref.actor.optim.lr=0.02",
                               "actor_rollout_ref.rollout.n=8", "data.train_batch_size=4"});
  std::vector<double> scores;
  for (int s = 0; s < 30; ++s) scores.push_back(trainer.step().at("critic/score/mean"));
  const double first = (scores[0] + scores[1] + scores[2]) / 3, last = (scores[27] + scores[28] + scores[29]) / 3;
  EXPECT_GT(last, first + 0.3) << "mean score " << first << " -> " << last;
}

// ---- trainer.balance_batch --------------------------------------------------------------------

/// A batch whose rows 0..3 are long (10 tokens) and 4..7 short (1 token): the naive split over
/// two ranks gives 40 and 4 tokens. Every column of row r carries r so that moves can be traced.
data::DataProto skewed_batch() {
  const Index rows = 8, prompt = 6, width = 4;
  MatrixI64 responses = MatrixI64::Zero(rows, width), input_ids = MatrixI64::Zero(rows, prompt + width),
            position_ids = MatrixI64::Zero(rows, prompt + width);
  MatrixF response_mask = MatrixF::Zero(rows, width), attention_mask = MatrixF::Zero(rows, prompt + width),
          scores = MatrixF::Zero(rows, width), old_log_probs = MatrixF::Zero(rows, width), baselines = MatrixF::Zero(rows, 1);
  std::vector<std::int64_t> uid, sample;
  std::vector<nlohmann::json> outputs;
  for (Index r = 0; r < rows; ++r) {
    const Index length = r < 4 ? 10 : 1;
    attention_mask.row(r).tail(length).setOnes();
    input_ids.row(r).setConstant(r);
    responses.row(r).setConstant(r);
    response_mask(r, 0) = 1.0f;
    position_ids.row(r).setConstant(r);
    scores(r, 0) = static_cast<float>(r);
    old_log_probs(r, 1) = static_cast<float>(-r);
    baselines(r, 0) = static_cast<float>(r) / 2;
    uid.push_back(100 + r / 2);
    sample.push_back(r);
    reward::RewardOutput out;
    out.score = static_cast<double>(r);
    outputs.push_back(to_json(out));
  }
  data::DataProto t;
  t.set(std::string(keys::responses), std::move(responses));
  t.set(std::string(keys::input_ids), std::move(input_ids));
  t.set(std::string(keys::position_ids), std::move(position_ids));
  t.set(std::string(keys::response_mask), std::move(response_mask));
  t.set(std::string(keys::attention_mask), std::move(attention_mask));
  t.set(std::string(keys::token_level_scores), std::move(scores));
  t.set(std::string(keys::old_log_probs), std::move(old_log_probs));
  t.set(std::string(keys::reward_baselines), std::move(baselines));
  t.set_non_tensor(std::string(keys::uid), std::move(uid));
  t.set_non_tensor(std::string(keys::index), std::move(sample));
  t.set_non_tensor(std::string(keys::reward_output), std::move(outputs));
  return t;
}

TEST(PPOTrainer, BalanceBatchEvensTheRanksSharesAndKeepsRowsTogether) {
  data::DataProto t = skewed_batch();
  const Metrics m = balance_batch(t, 2);
  // verl's log_seqlen_unbalance names and values: naive chunks 40 / 4, balanced 22 / 22.
  EXPECT_EQ(m.at("global_seqlen/min"), 4.0);
  EXPECT_EQ(m.at("global_seqlen/max"), 40.0);
  EXPECT_EQ(m.at("global_seqlen/minmax_diff"), 36.0);
  EXPECT_EQ(m.at("global_seqlen/balanced_min"), 22.0);
  EXPECT_EQ(m.at("global_seqlen/balanced_max"), 22.0);
  EXPECT_EQ(m.at("global_seqlen/mean"), 22.0);
  EXPECT_EQ(m.size(), 6u);
  ASSERT_EQ(t.size(), 8);
  // Each rank's contiguous half now holds 22 tokens.
  const MatrixF& attention = float_column(t, keys::attention_mask);
  EXPECT_EQ(attention.topRows(4).sum(), 22.0f);
  EXPECT_EQ(attention.bottomRows(4).sum(), 22.0f);
  std::set<std::int64_t> seen;
  const auto& sample = t.non_tensor<std::int64_t>(keys::index);
  const auto& uid = t.non_tensor<std::int64_t>(keys::uid);
  const auto& outputs = t.non_tensor<nlohmann::json>(keys::reward_output);
  for (Index i = 0; i < t.size(); ++i) {
    const std::int64_t r = sample[static_cast<std::size_t>(i)];
    seen.insert(r);
    EXPECT_EQ(int_column(t, keys::input_ids)(i, 0), r);
    EXPECT_EQ(int_column(t, keys::responses)(i, 0), r);
    EXPECT_EQ(int_column(t, keys::position_ids)(i, 0), r);
    EXPECT_EQ(attention.row(i).sum(), r < 4 ? 10.0f : 1.0f);
    EXPECT_EQ(float_column(t, keys::token_level_scores)(i, 0), static_cast<float>(r));
    EXPECT_EQ(float_column(t, keys::old_log_probs)(i, 1), static_cast<float>(-r));
    EXPECT_EQ(float_column(t, keys::reward_baselines)(i, 0), static_cast<float>(r) / 2);
    EXPECT_EQ(uid[static_cast<std::size_t>(i)], 100 + r / 2);
    EXPECT_EQ(reward_output_from_json(outputs[static_cast<std::size_t>(i)]).score, static_cast<double>(r));
  }
  EXPECT_EQ(seen.size(), 8u);
  EXPECT_FALSE(t.has_tensor(keys::advantages));  // columns not computed yet stay absent

  // One rank: the order is unchanged, the metrics still logged.
  data::DataProto single = skewed_batch();
  const Metrics one = balance_batch(single, 1);
  for (Index i = 0; i < single.size(); ++i) EXPECT_EQ(single.non_tensor<std::int64_t>(keys::index)[static_cast<std::size_t>(i)], i);
  EXPECT_EQ(one.at("global_seqlen/mean"), 44.0);
  EXPECT_EQ(one.at("global_seqlen/minmax_diff"), 0.0);

  data::DataProto odd = skewed_batch();
  EXPECT_THROW((void)balance_batch(odd, 3), std::invalid_argument);
}

TEST(PPOTrainer, BalanceBatchMetricsInTheStepAndItsOptOut) {
  auto balanced = make_trainer({});
  const Metrics a = balanced.step();
  ASSERT_TRUE(a.contains("global_seqlen/mean"));
  // One rank: the mean is the batch's token count, which the throughput metrics count too.
  EXPECT_EQ(a.at("global_seqlen/mean"), static_cast<double>(Batch(balanced.last_batch()).attention_mask.sum()));
  EXPECT_EQ(a.at("global_seqlen/balanced_max"), a.at("global_seqlen/mean"));
  auto plain = make_trainer({"trainer.balance_batch=False"});
  const Metrics b = plain.step();
  EXPECT_FALSE(b.contains("global_seqlen/mean"));
  // With one rank balancing is the identity: the update is the same.
  EXPECT_EQ(a.at("actor/pg_loss"), b.at("actor/pg_loss"));
  EXPECT_EQ(parameters(balanced.actor()), parameters(plain.actor()));
}

// ---- generations: log_val_generations, rollout_data_dir, validation_data_dir -------------------

std::vector<nlohmann::json> jsonl(const fs::path& path) {
  std::ifstream in(path);
  std::vector<nlohmann::json> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

TEST(PPOTrainer, GenerationsAreLoggedAndDumped) {
  const fs::path dir = temp_dir("generations");
  auto run = [&](const std::string& name) {
    std::vector<std::string> overrides = base_overrides();
    for (const std::string extra : {"trainer.total_training_steps=1", "trainer.val_before_train=True", "trainer.test_freq=1",
                                    "trainer.log_val_generations=3"})
      overrides.push_back(extra);
    overrides.push_back("trainer.rollout_data_dir=" + (dir / name / "rollout").string());
    overrides.push_back("trainer.validation_data_dir=" + (dir / name / "val").string());
    const PPOConfig config = load_ppo_config(overrides);
    PPOTrainer<Transformer, NoCritic, FirstDigitParity> trainer(config, PPOAlgorithm::from_config(config), tiny_policy(),
                                                                std::nullopt, NoCritic{}, FirstDigitParity{}, hooks(),
                                                                prompts(16), prompts(6));
    std::ostringstream console;
    const auto history = trainer.fit(std::nullopt, console);
    return std::make_pair(console.str(), history.back());
  };
  const auto [console, last] = run("a");
  // verl's _maybe_log_val_generations: 3 of the 6 validation samples, before training and at step 1.
  EXPECT_NE(console.find("validation generations (step 0, 3 of 6)"), std::string::npos) << console;
  EXPECT_NE(console.find("validation generations (step 1, 3 of 6)"), std::string::npos) << console;
  EXPECT_NE(console.find("[3] input: "), std::string::npos);
  EXPECT_EQ(console.find("[4] input: "), std::string::npos);
  EXPECT_EQ(run("b").first, console);  // the same samples every run

  // verl's _dump_generations: <dir>/<step>.jsonl with input, output, gts, score, step.
  const auto val0 = jsonl(dir / "a" / "val" / "0.jsonl");
  const auto val1 = jsonl(dir / "a" / "val" / "1.jsonl");
  ASSERT_EQ(val0.size(), 6u);
  ASSERT_EQ(val1.size(), 6u);
  double val_total = 0;
  for (const auto& line : val1) {
    ASSERT_EQ(line.size(), 5u) << line.dump();
    EXPECT_EQ(line["step"].get<std::int64_t>(), 1);
    EXPECT_NE(line["input"].get<std::string>().find('+'), std::string::npos);  // "a+b="
    EXPECT_FALSE(line["gts"].get<std::string>().empty());
    val_total += line["score"].get<double>();
  }
  EXPECT_NEAR(val_total / 6.0, last.at("val-core/synthetic/reward/mean@1"), 1e-12);
  const auto rollout = jsonl(dir / "a" / "rollout" / "1.jsonl");
  ASSERT_EQ(rollout.size(), 16u);  // 4 prompts x rollout.n 4
  double total = 0;
  for (const auto& line : rollout) total += line["score"].get<double>();
  EXPECT_NEAR(total / 16.0, last.at("critic/score/mean"), 1e-6);
  EXPECT_FALSE(fs::exists(dir / "a" / "rollout" / "0.jsonl"));
  fs::remove_all(dir);
}

TEST(PPOTrainer, KeysWithoutEffectAreWarnedAbout) {
  testing::internal::CaptureStderr();
  (void)make_trainer({"actor_rollout_ref.actor.use_dynamic_bsz=True", "trainer.del_local_ckpt_after_load=True"});
  const std::string warned = testing::internal::GetCapturedStderr();
  EXPECT_NE(warned.find("actor_rollout_ref.actor.use_dynamic_bsz=True (micro-batches follow"), std::string::npos) << warned;
  EXPECT_NE(warned.find("trainer.del_local_ckpt_after_load=True"), std::string::npos) << warned;
  EXPECT_NE(warned.find("has no effect in verl-cpp"), std::string::npos) << warned;
  testing::internal::CaptureStderr();
  (void)make_trainer({});
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");  // verl's defaults: nothing to say
}

}  // namespace
