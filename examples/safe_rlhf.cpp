// Safe-RLHF (Dai et al., "Safe RLHF", ICLR 2024) as a HybridFlow controller program: PPO-Lagrangian
// over five worker groups — the actor/rollout/reference, a reward critic and a cost critic (two
// CriticWorker instantiations), a reward model and a cost model (two RewardModelWorker
// instantiations) — with the numerics of algo/safe_rlhf.hpp. SafeRLHF::step() below is the
// algorithm: generate; score, evaluate and take log-probs on every group at once; shape the rewards
// and costs with the KL term; move lambda from the episode costs; GAE on each signal; combine the
// advantages; update the actor and both critics, each critic on its own returns.
//
//   mpirun -np 2 verl_example_safe_rlhf trainer.n_gpus_per_node=2 data.train_files=[train.jsonl]
//       actor_rollout_ref.model.path=POLICY critic.model.path=POLICY_OR_CRITIC
//       reward.reward_model.model_path=RM reward.cost_model.model_path=CM
//       algorithm.safe_rlhf.cost_limit=0.0 trainer.total_training_steps=2      (one command line)
//
// Configuration: verl's keys (data.*, actor_rollout_ref.*, critic.* for both critics, algorithm.gamma
// / lam / kl_ctrl.*, trainer.*), with algorithm.adv_estimator=gae and algorithm.use_kl_in_reward=True
// by default (both required), and Safe-RLHF's own (verl has none; the `+` of Hydra's new keys is
// accepted, not needed):
//
//   reward.reward_model.model_path                  the reward model (verl 0.9.1's key; required)
//   reward.cost_model.model_path                    the cost model (required)
//   cost_critic.model.path                          the cost critic; null: from the cost model
//   algorithm.safe_rlhf.cost_limit                  0.0    d, the bound on the expected episode cost
//   algorithm.safe_rlhf.lambda_init                 1.0    initial lambda (> 0)
//   algorithm.safe_rlhf.lambda_lr                   0.1    SGD learning rate on log lambda
//   algorithm.safe_rlhf.lambda_max                  null   upper bound on lambda
//   algorithm.safe_rlhf.lambda_update_delay_steps   0      steps that leave lambda alone
//   algorithm.safe_rlhf.episode_cost_window_size    128    the last N episode costs whose mean is J_C
//   algorithm.safe_rlhf.clip_range_score            50.0   clamp of the shaped rewards and costs
//
// lambda takes one step per rollout batch (the reference steps once per actor micro-batch). The
// reward and cost models must share the policy's tokenizer. Metrics: safe_rlhf/* (lambda,
// episode_cost, cost_violation, lambda_loss, lambda_updated, reward_with_kl_penalty,
// cost_with_kl_penalty, kl_divergence), actor/*, critic/* (the reward critic), cost_critic/*, and
// verl's data metrics of the reward signal.
#include <fmt/format.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "verl/algo/advantages/gae.hpp"
#include "verl/algo/kl/controller.hpp"
#include "verl/algo/loss_aggregation.hpp"
#include "verl/algo/safe_rlhf.hpp"
#include "verl/core/paths.hpp"
#include "verl/data/data_proto.hpp"
#include "verl/data/dataloader.hpp"
#include "verl/data/prompt_formatter.hpp"
#include "verl/data/rl_dataset.hpp"
#include "verl/hybridflow/placement.hpp"
#include "verl/hybridflow/runtime.hpp"
#include "verl/tokenizer/pretrained.hpp"
#include "verl/trainer/components_from_config.hpp"
#include "verl/trainer/config.hpp"
#include "verl/trainer/metrics.hpp"
#include "verl/trainer/policy_source.hpp"
#include "verl/trainer/ppo_controller.hpp"
#include "verl/trainer/prompt_chat_template.hpp"
#include "verl/trainer/safe_rlhf_config.hpp"
#include "verl/trainer/workers/actor_rollout_ref_worker.hpp"
#include "verl/trainer/workers/critic_worker.hpp"
#include "verl/trainer/workers/model_sources.hpp"
#include "verl/trainer/workers/reward_model_worker.hpp"

namespace {

using namespace verl;
namespace keys = trainer::keys;
using trainer::float_column;

using Actor = trainer::ActorRolloutRefWorker<trainer::HfPolicySource>;
using RewardCritic = trainer::CriticWorker<trainer::HfCriticSource>;
using CostCritic = trainer::CriticWorker<trainer::HfCostCriticSource>;
using RewardModel = trainer::RewardModelWorker<trainer::HfRewardModelSource>;
using CostModel = trainer::RewardModelWorker<trainer::HfCostModelSource>;

/// The chat template of the policy's tokenizer (trainer::prompt_chat_template), else the messages'
/// contents joined.
struct Formatter {
  std::optional<tokenizer::AnyChatTemplate> chat;
  [[nodiscard]] std::string render(std::span<const tokenizer::ChatMessage> messages, bool add_generation_prompt) const {
    if (chat) return chat->render(messages, add_generation_prompt);
    return data::ContentOnlyFormatter{"\n"}.render(messages, add_generation_prompt);
  }
};

/// What Safe-RLHF needs of verl's keys besides its own; each refusal names the key.
void require_safe_rlhf_settings(const trainer::PPOConfig& config) {
  VERL_CHECK_ARG(config.algorithm.adv_estimator == "gae",
                 "algorithm.adv_estimator: Safe-RLHF takes GAE advantages from its reward and cost critics; expected "
                 "gae, got '{}'",
                 config.algorithm.adv_estimator);
  VERL_CHECK_ARG(config.algorithm.use_kl_in_reward,
                 "algorithm.use_kl_in_reward: Safe-RLHF's rewards and costs carry the KL term to the reference "
                 "(algorithm.kl_ctrl.kl_coef); expected True, got False");
  VERL_CHECK_ARG(config.reward.reward_model.model_path.has_value(),
                 "reward.reward_model.model_path: Safe-RLHF needs a reward model (a *ForSequenceClassification folder), "
                 "got null");
  VERL_CHECK_ARG(config.reward.cost_model.model_path.has_value(),
                 "reward.cost_model.model_path: Safe-RLHF needs a cost model (a *ForSequenceClassification folder), got "
                 "null");
  (void)trainer::lagrange_multiplier_config(config);  // the checks across its keys
}

template <class Runtime>
class SafeRLHF {
 public:
  SafeRLHF(Runtime& runtime, trainer::PPOConfig config, const hybridflow::RolePlacement& placement,
           trainer::TokenizerHooks tokenizer, data::RLHFDataset train)
      : config_(std::move(config)),
        tokenizer_(std::move(tokenizer)),
        train_(std::move(train)),
        loader_(train_.size(), trainer::train_loader_options(config_.data)),
        total_steps_(trainer::total_training_steps(config_, loader_.num_batches(), train_.size())),
        kl_ctrl_(algo::get_kl_controller(trainer::PPOAlgorithm::from_config(config_).kl_ctrl)),
        lambda_(trainer::lagrange_multiplier_config(config_)),
        clip_range_score_(trainer::safe_rlhf_clip_range_score(config_)),
        actor_(runtime.template spawn<Actor>(placement.actor)),
        reward_critic_(runtime.template spawn<RewardCritic>(*placement.critic)),
        cost_critic_(runtime.template spawn<CostCritic>(*placement.critic)),
        reward_model_(runtime.template spawn<RewardModel>(*placement.reward_model)),
        cost_model_(runtime.template spawn<CostModel>(*placement.reward_model)) {
    const std::vector<std::string> overrides = trainer::to_overrides(config_);
    auto actor = actor_.template call<&Actor::init_model>(overrides, total_steps_);
    auto reward_critic = reward_critic_.template call<&RewardCritic::init_model>(overrides, total_steps_);
    auto cost_critic = cost_critic_.template call<&CostCritic::init_model>(overrides, total_steps_);
    auto reward_model = reward_model_.template call<&RewardModel::init_model>(overrides);
    auto cost_model = cost_model_.template call<&CostModel::init_model>(overrides);
    hybridflow::wait_all(actor, reward_critic, cost_critic, reward_model, cost_model);
  }

  /// One Safe-RLHF iteration: the controller program.
  Metrics step() {
    ++global_step_;
    Metrics metrics;
    data::DataProto batch = generate(next_prompts());
    if (config_.trainer.balance_batch) merge(metrics, trainer::balance_batch(batch, static_cast<int>(actor_.dp_size())));
    // Every forward pass at once: groups on other ranks work at the same time, colocated ones in turn.
    const data::DataProto sequences = sequence_columns(batch);
    auto old = actor_.template call<&Actor::compute_log_prob>(sequences);
    auto ref = actor_.template call<&Actor::compute_ref_log_prob>(sequences);
    auto reward_values = reward_critic_.template call<&RewardCritic::compute_values>(sequences);
    auto cost_values = cost_critic_.template call<&CostCritic::compute_values>(sequences);
    auto reward_scores = reward_model_.template call<&RewardModel::compute_rm_score>(sequences);
    auto cost_scores = cost_model_.template call<&CostModel::compute_rm_score>(sequences);
    batch.union_with(old.get()).union_with(ref.get()).union_with(reward_values.get());
    const MatrixF cost_value = float_column(cost_values.get(), keys::values);
    const MatrixF reward = float_column(reward_scores.get(), keys::rm_scores);
    const MatrixF cost = float_column(cost_scores.get(), keys::rm_scores);
    const MatrixF& mask = float_column(batch, keys::response_mask);
    const MatrixF& reward_value = float_column(batch, keys::values);
    // The KL term in both signals, lambda from this batch's episode costs, GAE on each signal.
    auto shaped = algo::kl_penalized_rewards_and_costs(reward, cost, float_column(batch, keys::old_log_probs),
                                                       float_column(batch, keys::ref_log_prob), mask,
                                                       algo::kl_coefficient(kl_ctrl_), clip_range_score_);
    algo::update_kl_controller(kl_ctrl_, shaped.current_kl, batch.size());
    const algo::LagrangeStep lagrange = lambda_.update(algo::episode_costs(cost, mask));
    const algo::GAE gae{.gamma = config_.algorithm.gamma, .lam = config_.algorithm.lam};
    const algo::AdvantageResult reward_gae =
        gae.compute({.token_level_rewards = shaped.token_level_rewards, .response_mask = mask, .values = reward_value});
    const algo::AdvantageResult cost_gae =
        gae.compute({.token_level_rewards = shaped.token_level_costs, .response_mask = mask, .values = cost_value});
    batch.set(std::string(keys::advantages),
              algo::combine_reward_and_cost_advantages(reward_gae.advantages, cost_gae.advantages, mask, lagrange.lambda));
    // The three updates, issued together: each critic learns its own returns.
    auto reward_critic =
        reward_critic_.template call<&RewardCritic::update_critic>(critic_batch(batch, reward_value, reward_gae.returns()));
    auto cost_critic =
        cost_critic_.template call<&CostCritic::update_critic>(critic_batch(batch, cost_value, cost_gae.returns()));
    auto actor = actor_.template call<&Actor::update_actor>(actor_batch(batch));
    absorb(reward_critic.get(), "critic/", metrics);
    absorb(cost_critic.get(), "cost_critic/", metrics);
    absorb(actor.get(), "actor/", metrics);
    merge(metrics, shaped.metrics);
    merge(metrics, lagrange.metrics);
    merge(metrics, data_metrics(batch, reward, shaped.token_level_rewards, reward_gae.returns()));
    metrics["training/global_step"] = static_cast<double>(global_step_);
    return metrics;
  }

  /// Steps until trainer.total_training_steps (or the epochs' end), logging each step's metrics.
  void fit() {
    trainer::Tracking tracking = trainer::tracking(config_.trainer, total_steps_);
    while (global_step_ < total_steps_) {
      const Metrics metrics = step();
      tracking.log(metrics, global_step_);
    }
  }

  [[nodiscard]] double lambda() const { return lambda_.value(); }
  [[nodiscard]] std::int64_t global_step() const { return global_step_; }

 private:
  static void merge(Metrics& into, const Metrics& from) {
    for (const auto& [k, v] : from) into[k] = v;
  }

  /// An update's metrics (reduced over its group: the first rank's), named under `prefix`.
  static void absorb(const data::DataProto& result, std::string_view prefix, Metrics& metrics) {
    const nlohmann::json& info = result.meta_info();
    if (!info.contains("metrics")) return;
    for (const auto& [name, values] : info["metrics"].items()) {
      const auto slash = name.find('/');
      const std::string leaf = name.substr(slash == std::string::npos ? 0 : slash + 1);
      metrics[std::string(prefix) + leaf] = values.front().template get<double>();
    }
  }

  /// verl's data metrics (critic/score, critic/rewards, critic/advantages, critic/returns,
  /// critic/values, lengths) of the reward signal.
  static Metrics data_metrics(const data::DataProto& batch, const MatrixF& scores, const MatrixF& rewards,
                              const MatrixF& returns) {
    return trainer::compute_data_metrics(trainer::DataMetricsInputs{
        .token_level_scores = scores,
        .token_level_rewards = rewards,
        .advantages = float_column(batch, keys::advantages),
        .returns = returns,
        .attention_mask = float_column(batch, keys::attention_mask),
        .response_mask = float_column(batch, keys::response_mask),
        .values = std::optional<ConstMatrixRefF>(float_column(batch, keys::values))});
  }

  // ---- what each call sends -------------------------------------------------------------------

  static data::DataProto columns(const data::DataProto& batch, const std::vector<std::string>& names) {
    return batch.select(names, std::vector<std::string>{}, std::vector<std::string>{});
  }

  static data::DataProto sequence_columns(const data::DataProto& batch) {
    return columns(batch, {std::string(keys::input_ids), std::string(keys::attention_mask),
                           std::string(keys::position_ids), std::string(keys::response_mask)});
  }

  /// `part` with its rows in the order that hands each of `dp` ranks its share of every
  /// mini-batch of `mini_batch_size` prompts (trainer::mini_batch_major_order).
  data::DataProto mini_batch_major(data::DataProto part, std::int64_t mini_batch_size, Index dp,
                                   std::string_view key) const {
    const Index rows = mini_batch_size * config_.actor_rollout_ref.rollout.n;
    part.reorder(trainer::mini_batch_major_order(part.size(), rows, dp, key));
    return part;
  }

  data::DataProto critic_batch(const data::DataProto& batch, const MatrixF& values, const MatrixF& returns) const {
    data::DataProto part = sequence_columns(batch);
    part.set(std::string(keys::values), values);
    part.set(std::string(keys::returns), returns);
    return mini_batch_major(std::move(part), config_.critic.ppo_mini_batch_size, reward_critic_.dp_size(),
                            "critic.ppo_mini_batch_size");
  }

  data::DataProto actor_batch(const data::DataProto& batch) const {
    data::DataProto part = columns(batch, {std::string(keys::input_ids), std::string(keys::attention_mask),
                                           std::string(keys::position_ids), std::string(keys::response_mask),
                                           std::string(keys::advantages), std::string(keys::old_log_probs),
                                           std::string(keys::ref_log_prob)});
    part.meta_info()["entropy_metric"] = false;
    return mini_batch_major(std::move(part), config_.actor_rollout_ref.actor.ppo_mini_batch_size, actor_.dp_size(),
                            "actor_rollout_ref.actor.ppo_mini_batch_size");
  }

  // ---- generation -----------------------------------------------------------------------------

  std::vector<std::int64_t> next_prompts() {
    auto indices = loader_.next();
    if (!indices) indices = loader_.next();  // the epoch ended: the loader stands at the next one
    VERL_CHECK_ARG(indices.has_value(), "data.train_batch_size: no batch from {} prompts", train_.size());
    return *indices;
  }

  rollout::SamplingParams sampling_params() const {
    const auto& r = config_.actor_rollout_ref.rollout;
    rollout::SamplingParams params;
    params.temperature = r.do_sample ? static_cast<float>(r.temperature) : 0.0f;
    params.top_k = r.top_k;
    params.top_p = static_cast<float>(r.top_p);
    params.n = r.n;
    params.max_response_length = config_.data.max_response_length;
    if (!r.ignore_eos) params.eos_token_ids = tokenizer_.eos_token_ids;
    params.pad_token_id = tokenizer_.pad_token_id;
    return params;
  }

  /// rollout.n responses to each prompt on the actor group (prompts that do not divide over its
  /// ranks are padded with copies of the last, whose responses are dropped); prompt k draws from
  /// its own seed, so the samples do not depend on the number of ranks.
  data::DataProto generate(const std::vector<std::int64_t>& indices) {
    const rollout::SamplingParams params = sampling_params();
    const auto prompts = static_cast<Index>(indices.size());
    const Index dp = actor_.dp_size(), padded = (prompts + dp - 1) / dp * dp;
    const std::uint64_t step_seed =
        rollout::derive_seed(trainer::data_seed(config_.data), static_cast<std::uint64_t>(global_step_));
    std::vector<std::vector<model::TokenId>> prompt_ids;
    std::vector<std::int64_t> seeds;
    for (Index b = 0; b < padded; ++b) {
      const Index source = std::min(b, prompts - 1);
      prompt_ids.push_back(train_[indices[static_cast<std::size_t>(source)]].prompt_ids);
      seeds.push_back(static_cast<std::int64_t>(rollout::derive_seed(step_seed, static_cast<std::uint64_t>(source))));
    }
    const rollout::PromptBatch all = rollout::PromptBatch::left_padded(prompt_ids, tokenizer_.pad_token_id);
    data::DataProto request;
    request.set(std::string(keys::input_ids), all.input_ids);
    request.set(std::string(keys::attention_mask), all.attention_mask);
    request.set_non_tensor(std::string(keys::seed), std::move(seeds));
    request.meta_info()["sampling_params"] = trainer::sampling_params_to_json(params);
    data::DataProto out = actor_.template call<&Actor::generate_sequences>(request).get();
    return padded == prompts ? out : out.slice(0, prompts * params.n);
  }

  trainer::PPOConfig config_;
  trainer::TokenizerHooks tokenizer_;
  data::RLHFDataset train_;
  data::DataLoader loader_;
  std::int64_t total_steps_;
  algo::AnyKLController kl_ctrl_;
  algo::LagrangeMultiplier lambda_;
  std::optional<double> clip_range_score_;
  hybridflow::WorkerGroup<Runtime, Actor> actor_;
  hybridflow::WorkerGroup<Runtime, RewardCritic> reward_critic_;
  hybridflow::WorkerGroup<Runtime, CostCritic> cost_critic_;
  hybridflow::WorkerGroup<Runtime, RewardModel> reward_model_;
  hybridflow::WorkerGroup<Runtime, CostModel> cost_model_;
  std::int64_t global_step_ = 0;
};

/// The tokenizer's hooks for the controller: the ids that end a response (the model's and the
/// tokenizer's eos) and the one that pads.
trainer::TokenizerHooks tokenizer_hooks(const trainer::PPOConfig& config, const tokenizer::PretrainedTokenizer& tokenizer) {
  const model::HfModelConfig model = trainer::load_policy_config(io::expand_user(config.actor_rollout_ref.model.path),
                                                                 "actor_rollout_ref.model.path");
  const auto& special = tokenizer.tokenizer.special_ids();
  trainer::TokenizerHooks hooks;
  for (const auto id : model.eos_token_ids) hooks.eos_token_ids.push_back(static_cast<model::TokenId>(id));
  if (special.eos) hooks.eos_token_ids.push_back(*special.eos);
  hooks.pad_token_id = special.pad.value_or(model.pad_token_id ? static_cast<model::TokenId>(*model.pad_token_id)
                                                               : special.eos.value_or(0));
  return hooks;
}

}  // namespace

int main(int argc, char** argv) {
  // Safe-RLHF's defaults before the command line's keys (which may restate them).
  std::vector<std::string> overrides = {"algorithm.adv_estimator=gae", "algorithm.use_kl_in_reward=True"};
  for (int i = 1; i < argc; ++i) overrides.emplace_back(argv[i]);
  return hybridflow::run_controller<Actor, RewardCritic, CostCritic, RewardModel, CostModel>(argc, argv, [&](auto& runtime) {
    using Runtime = std::remove_reference_t<decltype(runtime)>;
    const trainer::PPOConfig config = trainer::load_ppo_config(overrides);
    require_safe_rlhf_settings(config);
    hybridflow::PlacementKeys placement_keys = trainer::placement_keys(config, /*use_critic=*/true);
    placement_keys.reward_model = true;  // the reward and cost models, on the actor's ranks
    const hybridflow::RolePlacement placement = hybridflow::place_roles(placement_keys, runtime.world_size());
    const tokenizer::PretrainedTokenizer tokenizer = trainer::load_policy_tokenizer(trainer::detail::tokenizer_source(config));
    const Formatter formatter{trainer::prompt_chat_template(config, tokenizer)};
    std::vector<std::filesystem::path> files;
    for (const auto& f : config.data.train_files) files.push_back(io::expand_user(f));
    data::RLHFDataset train =
        data::RLHFDataset::load(files, tokenizer.tokenizer, formatter, trainer::dataset_options(config.data));
    SafeRLHF<Runtime> program(runtime, config, placement, tokenizer_hooks(config, tokenizer), std::move(train));
    const double lambda_init = program.lambda();
    program.fit();
    fmt::print("safe_rlhf: {} steps, lambda {:.6g} -> {:.6g} ({})\n", program.global_step(), lambda_init, program.lambda(),
               placement.describe());
    return 0;
  });
}
