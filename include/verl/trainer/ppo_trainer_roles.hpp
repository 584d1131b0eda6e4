// The roles a PPO trainer is composed of, as types: the policy (a CausalLM), an optional critic
// (a ValueModel, or NoCritic), a reward function (verl's default_compute_score by data_source, or
// a user's callable) and a communicator (SelfCommunicator, or MpiCommunicator for data
// parallelism). Also the generation used for a policy: the KV-cache engine when the model is an
// IncrementalDecoder, else a plain engine that re-runs the forward pass for every new token
// (any CausalLM can be trained, just more slowly).
#pragma once

#include <algorithm>
#include <concepts>
#include <cstdint>
#include <functional>
#include <string>
#include <span>
#include <type_traits>
#include <vector>

#include "verl/config.hpp"
#include "verl/core/error.hpp"
#include "verl/core/tensor.hpp"
#include "verl/model/causal_lm.hpp"
#include "verl/model/value_model.hpp"
#include "verl/parallel/communicator.hpp"
#include "verl/reward/reward_function.hpp"
#include "verl/rollout/kv_cache_rollout.hpp"
#include "verl/rollout/rollout_engine.hpp"
#include "verl/rollout/sampling.hpp"

namespace verl::trainer {

/// What the trainer needs from the tokenizer: decoding responses for the reward function, and the
/// ids that end and pad a response.
struct TokenizerHooks {
  std::function<std::string(std::span<const model::TokenId>)> decode;  ///< skip_special_tokens=True
  std::vector<model::TokenId> eos_token_ids;
  model::TokenId pad_token_id = 0;
};

/// A trainer without a critic (GRPO, RLOO, REINFORCE++, ReMax, ...).
struct NoCritic {};

/// The critic slot of a trainer: a ValueModel, or NoCritic.
template <class C>
concept CriticRole = std::same_as<C, NoCritic> || model::ValueModel<C>;

template <class Policy, class Critic, class Reward>
consteval bool check_trainer_roles() {
  VERL_STATIC_ASSERT(model::CausalLM<Policy>, THE_POLICY_MODEL_MUST_SATISFY_THE_CAUSAL_LM_CONCEPT);
  VERL_STATIC_ASSERT(CriticRole<Critic>, THE_CRITIC_MUST_BE_A_VALUE_MODEL_OR_NoCritic);
  VERL_STATIC_ASSERT(reward::RewardFunction<Reward>,
                     REWARD_FUNCTION_MUST_TAKE_DATA_SOURCE_SOLUTION_STR_GROUND_TRUTH_AND_RETURN_A_SCORE);
  return true;
}

/// Generation for any CausalLM: every step re-runs the forward pass over each running sequence
/// and samples from its last logits, with the KV-cache engine's random streams (sample j of
/// prompt b draws from (seed_b, j, step)), so both engines sample alike from equal logits.
template <model::CausalLM Model>
class RecomputeRollout {
 public:
  explicit RecomputeRollout(Model& model) : model_(&model) {}

  rollout::RolloutOutput generate(const rollout::PromptBatch& prompts, const rollout::SamplingParams& params) {
    params.validate();
    const Index batch = prompts.input_ids.rows(), n = params.n, response = params.max_response_length;
    VERL_CHECK_ARG(batch > 0, "input_ids: expected at least one prompt, got none");
    VERL_CHECK_ARG(prompts.seeds.empty() || static_cast<Index>(prompts.seeds.size()) == batch,
                   "seeds: expected {} per-prompt seeds (one per prompt) or none, got {}", batch, prompts.seeds.size());
    const Index rows = batch * n, vocab = model_->vocab_size();
    rollout::RolloutOutput out;
    out.responses = MatrixI64::Constant(rows, response, params.pad_token_id);
    out.response_mask = MatrixF::Zero(rows, response);
    out.rollout_log_probs = MatrixF::Zero(rows, response);
    out.response_lengths.assign(static_cast<std::size_t>(rows), 0);
    out.finish_reasons.assign(static_cast<std::size_t>(rows), rollout::FinishReason::length);
    std::vector<std::vector<model::TokenId>> sequences(static_cast<std::size_t>(rows));
    for (Index r = 0; r < rows; ++r) {
      for (Index t = 0; t < prompts.input_ids.cols(); ++t)
        if (prompts.attention_mask(r / n, t) != 0) sequences[static_cast<std::size_t>(r)].push_back(prompts.input_ids(r / n, t));
    }
    std::vector<Index> active(static_cast<std::size_t>(rows));
    for (Index r = 0; r < rows; ++r) active[static_cast<std::size_t>(r)] = r;
    rollout::SamplerScratch scratch;
    for (Index step = 0; step < response && !active.empty(); ++step) {
      std::vector<model::TokenId> tokens;
      std::vector<std::int64_t> cu = {0};
      for (const Index r : active) {
        const auto& s = sequences[static_cast<std::size_t>(r)];
        tokens.insert(tokens.end(), s.begin(), s.end());
        cu.push_back(static_cast<std::int64_t>(tokens.size()));
      }
      const auto packed = model::TokenBatch::packed(tokens, cu);
      const auto output = model_->forward(packed, {.return_logits = true});
      std::vector<Index> still_running;
      for (std::size_t i = 0; i < active.size(); ++i) {
        const Index r = active[i], b = r / n, j = r % n;
        const std::uint64_t seed = prompts.seeds.empty() ? rollout::derive_seed(params.seed, static_cast<std::uint64_t>(b))
                                                         : prompts.seeds[static_cast<std::size_t>(b)];
        const double u = rollout::counter_uniform(seed, static_cast<std::uint64_t>(j), static_cast<std::uint64_t>(step));
        const Index last = cu[i + 1] - 1;
        std::vector<float> logits(static_cast<std::size_t>(vocab));
        for (Index v = 0; v < vocab; ++v) logits[static_cast<std::size_t>(v)] = static_cast<float>(output.logits(last, v));
        const auto sampled = rollout::sample_token(logits, params, u, scratch);
        out.responses(r, step) = sampled.token;
        out.response_mask(r, step) = 1.0f;
        out.rollout_log_probs(r, step) = sampled.log_prob;
        out.response_lengths[static_cast<std::size_t>(r)] = step + 1;
        sequences[static_cast<std::size_t>(r)].push_back(sampled.token);
        if (params.is_stop_token(sampled.token)) {
          out.finish_reasons[static_cast<std::size_t>(r)] = rollout::FinishReason::stop;
        } else {
          still_running.push_back(r);
        }
      }
      active.swap(still_running);
    }
    rollout::assemble_rollout_tensors(prompts, n, out);
    return out;
  }

 private:
  Model* model_;
};

/// The engine the trainer generates with for `Model`.
template <class Model>
auto make_rollout_engine(Model& model) {
  if constexpr (rollout::IncrementalDecoder<Model>) {
    return rollout::KvCacheRollout<Model>(model);
  } else {
    return RecomputeRollout<Model>(model);
  }
}

}  // namespace verl::trainer
