// The model sources verl_train's workers build their models from, by verl's keys (each satisfies
// ActorModels / CriticModels; a user's own type can stand in their place):
//
//   HfPolicySource      actor_rollout_ref.model.path (a Hugging Face folder or a GGUF file); the
//                       reference policy is a frozen copy
//   HfLoraPolicySource  the same with LoRA adapters (lora_rank > 0); the reference is the base
//                       with the adapter disabled, sharing its weights (verl's ref_in_actor)
//   HfCriticSource      critic.model.path (its value head is initialised when the folder has none)
//   HfRewardModelSource reward.reward_model.model_path (a one-label *ForSequenceClassification
//                       folder; satisfies RewardModels)
//   HfCostModelSource   reward.cost_model.model_path (Safe-RLHF's cost model, the same kind of folder)
//   HfCostCriticSource  cost_critic.model.path (Safe-RLHF's cost critic); null: initialised from the
//                       cost model (its body and score head, a zero bias), as the reference does
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include "verl/core/error.hpp"
#include "verl/core/paths.hpp"
#include "verl/model/checkpoint.hpp"
#include "verl/model/transformer/critic.hpp"
#include "verl/model/transformer/lora.hpp"
#include "verl/model/transformer/reward_model.hpp"
#include "verl/model/transformer/transformer.hpp"
#include "verl/trainer/config/ppo_config.hpp"
#include "verl/trainer/policy_source.hpp"

namespace verl::trainer {

namespace detail {
/// Where the tokenizer files of the actor come from (its own key, else the model's path).
inline std::filesystem::path tokenizer_source(const PPOConfig& config) {
  const auto& model = config.actor_rollout_ref.model;
  return io::expand_user(model.tokenizer_path.value_or(model.path));
}

/// A reward model from the folder at `path` (set), the error naming `key` otherwise.
inline model::TransformerRewardModel load_reward_model_at(const std::optional<std::string>& path, std::string_view key) {
  VERL_CHECK_ARG(path.has_value(), "{}: expected the folder of a sequence-classification reward model, got null", key);
  const std::filesystem::path folder = io::expand_user(*path);
  VERL_CHECK_ARG(std::filesystem::is_directory(folder),
                 "{}: expected a Hugging Face *ForSequenceClassification folder, got '{}' ({})", key, folder.string(),
                 std::filesystem::exists(folder) ? "not a folder" : "does not exist");
  return model::load_reward_model(folder);
}

/// A critic whose body and value head are a reward model's (score.weight), with a zero bias:
/// its value at a token is the reward model's score had the sequence ended there.
inline model::TransformerCritic critic_from_reward_model(const model::TransformerRewardModel& reward_model) {
  model::TransformerCritic critic(reward_model.config());
  model::StateDict weights = reward_model.state_dict();
  weights["score.bias"] = model::StateTensor{{1}, {0.0f}};
  critic.load_state_dict(weights);
  return critic;
}

/// Writes the actor as a Hugging Face folder with its tokenizer files.
template <class Policy>
std::string save_actor_folder(const Policy& actor, const std::string& folder, const std::string& adapter_folder,
                              const PPOConfig& config) {
  const std::string saved =
      save_policy(actor, folder, adapter_folder, io::expand_user(config.actor_rollout_ref.model.path).string());
  save_tokenizer_files(tokenizer_source(config), folder);
  return saved;
}
}  // namespace detail

struct HfPolicySource {
  using policy_type = model::Transformer;
  static policy_type actor(const PPOConfig& config) {
    return load_policy(io::expand_user(config.actor_rollout_ref.model.path), "actor_rollout_ref.model.path");
  }
  static policy_type reference(const PPOConfig&, const policy_type& actor) { return actor; }
  static std::string save(const policy_type& actor, const std::string& folder, const std::string& adapter_folder,
                          const PPOConfig& config) {
    return detail::save_actor_folder(actor, folder, adapter_folder, config);
  }
};

struct HfLoraPolicySource {
  using policy_type = model::LoraTransformer;
  static policy_type actor(const PPOConfig& config) {
    const LoraKeys keys = lora_keys(config.actor_rollout_ref.model);
    const auto options = lora_options(keys, "actor_rollout_ref.model.");
    VERL_CHECK_ARG(options.has_value(), "actor_rollout_ref.model.lora_rank: the LoRA actor needs lora_rank > 0, got {}",
                   keys.lora_rank);
    return make_lora_policy(HfPolicySource::actor(config), *options, keys, "actor_rollout_ref.model.");
  }
  static policy_type reference(const PPOConfig&, const policy_type& actor) { return actor.with_adapter_disabled(); }
  static std::string save(const policy_type& actor, const std::string& folder, const std::string& adapter_folder,
                          const PPOConfig& config) {
    return detail::save_actor_folder(actor, folder, adapter_folder, config);
  }
};

struct HfCriticSource {
  using critic_type = model::TransformerCritic;
  static critic_type critic(const PPOConfig& config) {
    return load_critic_model(io::expand_user(config.critic.model.path), "critic.model.path");
  }
};

struct HfRewardModelSource {
  using reward_model_type = model::TransformerRewardModel;
  static constexpr std::string_view key = "reward.reward_model.model_path";
  static reward_model_type reward_model(const PPOConfig& config) {
    return detail::load_reward_model_at(config.reward.reward_model.model_path, key);
  }
};

struct HfCostModelSource {
  using reward_model_type = model::TransformerRewardModel;
  static constexpr std::string_view key = "reward.cost_model.model_path";
  static reward_model_type reward_model(const PPOConfig& config) {
    return detail::load_reward_model_at(config.reward.cost_model.model_path, key);
  }
};

struct HfCostCriticSource {
  using critic_type = model::TransformerCritic;
  static critic_type critic(const PPOConfig& config) {
    if (const auto& path = config.cost_critic.model.path) return load_critic_model(io::expand_user(*path), "cost_critic.model.path");
    return detail::critic_from_reward_model(HfCostModelSource::reward_model(config));
  }
};

}  // namespace verl::trainer
