// The tiny models, prompts, reward and tokenizer hooks the HybridFlow controller tests train on:
// a two-layer Llama over a character vocabulary, built in place on every rank (no folder to read).
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "verl/data/prompt_formatter.hpp"
#include "verl/data/rl_dataset.hpp"
#include "verl/model/transformer/critic.hpp"
#include "verl/model/transformer/transformer.hpp"
#include "verl/tokenizer/char_tokenizer.hpp"
#include "verl/trainer/config.hpp"
#include "verl/trainer/ppo_trainer_roles.hpp"

namespace verl::test_support {

using tokenizer::CharTokenizer;
using model::Transformer;
using Critic = model::BasicTransformerCritic<float>;
using trainer::PPOConfig;
using trainer::TokenizerHooks;

inline const CharTokenizer& tokenizer() {
  static const CharTokenizer tok("0123456789+= ");
  return tok;
}

inline model::HfModelConfig tiny_config() {
  const nlohmann::json json = {{"model_type", "llama"},     {"hidden_size", 32},          {"intermediate_size", 64},
                               {"num_hidden_layers", 2},    {"num_attention_heads", 2},   {"num_key_value_heads", 1},
                               {"vocab_size", tokenizer().vocab_size()}, {"rms_norm_eps", 1e-5},
                               {"max_position_embeddings", 64}, {"eos_token_id", CharTokenizer::eos_id},
                               {"pad_token_id", CharTokenizer::pad_id}};
  return model::HfModelConfig::from_json(json, "tiny trainer config");
}

inline Transformer tiny_policy() { return Transformer::random(tiny_config(), {.initializer_range = 0.2, .seed = 11}, {.num_threads = 1}); }
inline Critic tiny_critic() { return Critic::random(tiny_config(), {.initializer_range = 0.2, .seed = 5}, {.num_threads = 1}); }

inline data::RLHFDataset prompts(int count) {
  std::vector<data::RLHFRow> rows;
  for (int i = 0; i < count; ++i) {
    data::RLHFRow row;
    row.data_source = "synthetic";
    row.prompt = {{"user", std::to_string(i % 10) + "+" + std::to_string((i * 7 + 3) % 10) + "="}};
    row.reward_model.ground_truth = "x";
    rows.push_back(std::move(row));
  }
  data::RLHFDatasetOptions options;
  options.max_prompt_length = 8;
  return data::RLHFDataset::from_rows(std::move(rows), tokenizer(), data::ContentOnlyFormatter{}, options);
}

struct FirstDigitParity {
  double operator()(std::string_view, std::string_view text, std::string_view) const {
    return !text.empty() && text.front() >= '0' && text.front() <= '9' && (text.front() - '0') % 2 == 1 ? 1.0 : 0.0;
  }
};

inline TokenizerHooks hooks() {
  return {.decode = [](std::span<const model::TokenId> ids) { return tokenizer().decode(ids, true); },
          .eos_token_ids = {CharTokenizer::eos_id},
          .pad_token_id = CharTokenizer::pad_id};
}

/// The workers' models: built in place on every rank (no folder to read).
struct TinyPolicySource {
  using policy_type = Transformer;
  static Transformer actor(const PPOConfig&) { return tiny_policy(); }
  static Transformer reference(const PPOConfig&, const Transformer&) { return tiny_policy(); }
};
struct TinyCriticSource {
  using critic_type = Critic;
  static Critic critic(const PPOConfig&) { return tiny_critic(); }
};
}  // namespace verl::test_support
