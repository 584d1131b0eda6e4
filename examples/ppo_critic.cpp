// PPO with a critic: the reference transformer as actor (and frozen reference), a transformer
// critic with a value head, GAE advantages and KL in the reward with an adaptive controller —
// verl's classic PPO recipe — on a synthetic task (reward 1 when the response starts with an odd
// digit). Prints verl's metrics per step.
//
//   verl_example_ppo_critic [steps]
#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "verl/data/prompt_formatter.hpp"
#include "verl/data/rl_dataset.hpp"
#include "verl/tokenizer/char_tokenizer.hpp"
#include "verl/model/transformer/critic.hpp"
#include "verl/model/transformer/transformer.hpp"
#include "verl/trainer/config.hpp"
#include "verl/trainer/recipes.hpp"

using namespace verl;

struct OddFirstDigit {
  double operator()(std::string_view, std::string_view text, std::string_view) const {
    return !text.empty() && text.front() >= '0' && text.front() <= '9' && (text.front() - '0') % 2 == 1 ? 1.0 : 0.0;
  }
};

int main(int argc, char** argv) try {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 20;
  const tokenizer::CharTokenizer tokenizer("0123456789+= ");
  const nlohmann::json json = {{"model_type", "llama"}, {"hidden_size", 32}, {"intermediate_size", 64},
                               {"num_hidden_layers", 2}, {"num_attention_heads", 2}, {"num_key_value_heads", 1},
                               {"vocab_size", tokenizer.vocab_size()}, {"max_position_embeddings", 64},
                               {"eos_token_id", tokenizer::CharTokenizer::eos_id}, {"pad_token_id", tokenizer::CharTokenizer::pad_id}};
  const auto model_config = model::HfModelConfig::from_json(json, "example config");
  auto policy = [&] { return model::Transformer::random(model_config, {.initializer_range = 0.2, .seed = 1}, {.num_threads = 1}); };
  auto critic = model::BasicTransformerCritic<float>::random(model_config, {.initializer_range = 0.2, .seed = 2}, {.num_threads = 1});

  std::vector<data::RLHFRow> rows;
  for (int i = 0; i < 32; ++i) {
    data::RLHFRow row;
    row.data_source = "synthetic";
    row.prompt = {{"user", fmt::format("{}+{}=", i % 10, (i * 7 + 3) % 10)}};
    rows.push_back(std::move(row));
  }
  data::RLHFDatasetOptions options;
  options.max_prompt_length = 8;
  auto train = data::RLHFDataset::from_rows(std::move(rows), tokenizer, data::ContentOnlyFormatter{}, options);

  const trainer::PPOConfig config = trainer::load_ppo_config(
      {"algorithm.adv_estimator=gae", "algorithm.kl_ctrl.type=adaptive", "algorithm.kl_ctrl.kl_coef=0.01",
       "data.train_batch_size=8", "data.max_prompt_length=8", "data.max_response_length=4",
       "actor_rollout_ref.rollout.n=2", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
       "actor_rollout_ref.actor.ppo_epochs=2", "actor_rollout_ref.actor.optim.lr=0.005", "critic.optim.lr=0.01",
       "trainer.critic_warmup=1", fmt::format("trainer.total_training_steps={}", steps)});
  trainer::TokenizerHooks hooks{.decode = [&](std::span<const model::TokenId> ids) { return tokenizer.decode(ids, true); },
                                .eos_token_ids = {tokenizer::CharTokenizer::eos_id},
                                .pad_token_id = tokenizer::CharTokenizer::pad_id};
  trainer::RecipeTrainer<trainer::recipes::PPOWithRewardKL, model::Transformer, model::BasicTransformerCritic<float>, OddFirstDigit>
      ppo(config, policy(), policy(), std::move(critic), OddFirstDigit{}, hooks, std::move(train), {});
  double first = 0, last = 0;
  for (int s = 1; s <= steps; ++s) {
    const Metrics m = ppo.step();
    if (s == 1) first = m.at("critic/score/mean");
    last = m.at("critic/score/mean");
    fmt::print("step:{} - critic/score/mean:{:.3f} - critic/vf_loss:{:.4f} - critic/values/mean:{:.3f} - "
               "actor/reward_kl_penalty_coeff:{:.5f} - actor/pg_loss:{} - timing_s/step:{:.3f}\n",
               s, last, m.at("critic/vf_loss"), m.at("critic/values/mean"), m.at("actor/reward_kl_penalty_coeff"),
               m.contains("actor/pg_loss") ? fmt::format("{:.4f}", m.at("actor/pg_loss")) : "(critic warmup)",
               m.at("timing_s/step"));
  }
  fmt::print("PPO with a critic: mean score {:.3f} at step 1 -> {:.3f} at step {}\n", first, last, steps);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "verl_example_ppo_critic: %s\n", e.what());
  return 1;
}
