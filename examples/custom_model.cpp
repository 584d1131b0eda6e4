// A user-defined model plugged into the PPO trainer: a bigram policy (the next token's logits are
// a learned row of the current token) that satisfies verl::model::CausalLM — forward with fused
// log-probs and entropy, backward, named parameters, state dict — trained with the GRPO recipe on
// a synthetic task (reward 1 when the response starts with '7'). The trainer generates with its
// forward-only engine, since this model has no KV cache.
//
//   verl_example_custom_model [steps]
#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "verl/data/prompt_formatter.hpp"
#include "verl/data/rl_dataset.hpp"
#include "verl/model/causal_lm.hpp"
#include "verl/tokenizer/char_tokenizer.hpp"
#include "verl/trainer/config.hpp"
#include "verl/trainer/recipes.hpp"

using namespace verl;

/// logits(next | current) = table[current]; log-probs and entropy of softmax(logits / T).
class BigramModel {
 public:
  using scalar_type = float;

  explicit BigramModel(Index vocab) : vocab_(vocab), table_(static_cast<std::size_t>(vocab * vocab), 0.0f),
                                      grad_(table_.size(), 0.0f), shape_{vocab, vocab} {}

  [[nodiscard]] Index vocab_size() const { return vocab_; }

  model::CausalLMOutput<float> forward(const model::TokenBatch& batch, const model::ForwardOptions& options) {
    model::CausalLMOutput<float> out;
    const auto tokens = batch.tokens();
    const auto slots = batch.slots();
    const bool scored = !options.targets.empty();
    if (options.return_logits) out.logits = RowMatrix<float>::Zero(batch.layout_size(), vocab_);
    if (scored) out.log_probs = RowMatrix<float>::Zero(batch.rows(), batch.cols());
    if (options.return_entropy) out.entropy = RowMatrix<float>::Zero(batch.rows(), batch.cols());
    saved_.clear();
    temperature_ = options.temperature;
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      const float* row = &table_[static_cast<std::size_t>(tokens[i] * vocab_)];
      const auto slot = slots[i];
      if (options.return_logits)
        for (Index v = 0; v < vocab_; ++v) out.logits(slot, v) = row[v];
      if (!scored && !options.return_entropy) continue;
      const std::vector<double> logp = log_softmax(row, options.temperature);
      double entropy = 0;
      for (const double lp : logp) entropy -= std::exp(lp) * lp;
      const auto target = scored ? options.targets[static_cast<std::size_t>(slot)] : 0;
      if (scored) out.log_probs.data()[slot] = static_cast<float>(logp[static_cast<std::size_t>(target)]);
      if (options.return_entropy) out.entropy.data()[slot] = static_cast<float>(entropy);
      if (options.keep_activations) saved_.push_back({tokens[i], target, slot});
    }
    return out;
  }

  void backward(const model::CausalLMCotangents<float>& cotangents) {
    for (const auto& [token, target, slot] : saved_) {
      const float* row = &table_[static_cast<std::size_t>(token * vocab_)];
      const std::vector<double> logp = log_softmax(row, temperature_);
      double entropy = 0;
      for (const double lp : logp) entropy -= std::exp(lp) * lp;
      const double g_lp = cotangents.log_probs.empty() ? 0.0 : cotangents.log_probs[static_cast<std::size_t>(slot)];
      const double g_h = cotangents.entropy.empty() ? 0.0 : cotangents.entropy[static_cast<std::size_t>(slot)];
      for (Index v = 0; v < vocab_; ++v) {
        const double p = std::exp(logp[static_cast<std::size_t>(v)]);
        // d log p_y / d z_v = [v == y] - p_v;  d H / d z_v = -p_v (log p_v + H);  z = logits / T.
        const double d = g_lp * ((v == target ? 1.0 : 0.0) - p) - g_h * p * (logp[static_cast<std::size_t>(v)] + entropy);
        grad_[static_cast<std::size_t>(token * vocab_ + v)] += static_cast<float>(d / temperature_);
      }
    }
  }

  template <class Fn>
  void for_each_parameter(Fn&& fn) {
    fn(model::Parameter<float>{"bigram.weight", shape_, table_, grad_});
  }
  void zero_grad() { std::fill(grad_.begin(), grad_.end(), 0.0f); }
  [[nodiscard]] model::StateDict state_dict() const { return {{"bigram.weight", {{vocab_, vocab_}, table_}}}; }
  void load_state_dict(const model::StateDict& dict) { table_ = dict.at("bigram.weight").values; }

 private:
  struct Saved {
    model::TokenId token;
    std::int64_t target;
    std::int64_t slot;
  };
  std::vector<double> log_softmax(const float* row, float temperature) const {
    std::vector<double> z(static_cast<std::size_t>(vocab_));
    double max = -1e300, total = 0;
    for (Index v = 0; v < vocab_; ++v) max = std::max(max, z[static_cast<std::size_t>(v)] = row[v] / temperature);
    for (const double x : z) total += std::exp(x - max);
    for (double& x : z) x -= max + std::log(total);
    return z;
  }

  Index vocab_;
  std::vector<float> table_, grad_;
  std::vector<std::int64_t> shape_;
  std::vector<Saved> saved_;
  float temperature_ = 1.0f;
};

static_assert(model::check_causal_lm<BigramModel>());

struct StartsWithSeven {
  double operator()(std::string_view, std::string_view text, std::string_view) const {
    return !text.empty() && text.front() == '7' ? 1.0 : 0.0;
  }
};

int main(int argc, char** argv) try {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 20;
  const tokenizer::CharTokenizer tokenizer("0123456789+= ");
  std::vector<data::RLHFRow> rows;
  for (int i = 0; i < 16; ++i) {
    data::RLHFRow row;
    row.data_source = "synthetic";
    row.prompt = {{"user", fmt::format("{}+{}=", i % 10, (i * 7 + 3) % 10)}};
    rows.push_back(std::move(row));
  }
  data::RLHFDatasetOptions options;
  options.max_prompt_length = 8;
  auto train = data::RLHFDataset::from_rows(std::move(rows), tokenizer, data::ContentOnlyFormatter{}, options);
  const trainer::PPOConfig config = trainer::load_ppo_config(
      {"data.train_batch_size=4", "data.max_prompt_length=8", "data.max_response_length=3", "actor_rollout_ref.rollout.n=8",
       "actor_rollout_ref.actor.ppo_mini_batch_size=4", "actor_rollout_ref.actor.optim.lr=0.1",
       fmt::format("trainer.total_training_steps={}", steps)});
  trainer::TokenizerHooks hooks{.decode = [&](std::span<const model::TokenId> ids) { return tokenizer.decode(ids, true); },
                                .eos_token_ids = {tokenizer::CharTokenizer::eos_id},
                                .pad_token_id = tokenizer::CharTokenizer::pad_id};
  const Index vocab = tokenizer.vocab_size();
  trainer::RecipeTrainer<trainer::recipes::GRPO, BigramModel, trainer::NoCritic, StartsWithSeven> grpo(
      config, BigramModel(vocab), BigramModel(vocab), trainer::NoCritic{}, StartsWithSeven{}, hooks, std::move(train), {});
  double first = 0, last = 0;
  for (int s = 1; s <= steps; ++s) {
    const Metrics m = grpo.step();
    if (s == 1) first = m.at("critic/score/mean");
    last = m.at("critic/score/mean");
    fmt::print("step:{} - critic/score/mean:{:.3f} - actor/pg_loss:{:.4f} - actor/kl_loss:{:.4f} - actor/grad_norm:{:.3f}\n", s,
               last, m.at("actor/pg_loss"), m.at("actor/kl_loss"), m.at("actor/grad_norm"));
  }
  fmt::print("bigram policy, GRPO: mean score {:.3f} at step 1 -> {:.3f} at step {}\n", first, last, steps);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "verl_example_custom_model: %s\n", e.what());
  return 1;
}
