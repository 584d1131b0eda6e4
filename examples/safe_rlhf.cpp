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
#include "verl/trainer/controller_calls.hpp"
#include "verl/trainer/controller_inputs.hpp"
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
  trainer::require_plain_ppo_step(config, trainer::PPOAlgorithm::from_config(config), "Safe-RLHF");
}

template <class Runtime>
class SafeRLHF {
 public:
  SafeRLHF(Runtime& runtime, trainer::PPOConfig config, const hybridflow::RolePlacement& placement,
           trainer::TokenizerHooks tokenizer, data::RLHFDataset train)
      : config_(std::move(config)),
        tokenizer_(std::move(tokenizer)),
        prompts_(config_, std::move(train)),
        kl_ctrl_(algo::get_kl_controller(trainer::PPOAlgorithm::from_config(config_).kl_ctrl)),
        lambda_(trainer::lagrange_multiplier_config(config_)),
        clip_range_score_(trainer::safe_rlhf_clip_range_score(config_)),
        actor_(runtime.template spawn<Actor>(placement.actor)),
        reward_critic_(runtime.template spawn<RewardCritic>(*placement.critic)),
        cost_critic_(runtime.template spawn<CostCritic>(*placement.critic)),
        reward_model_(runtime.template spawn<RewardModel>(*placement.reward_model)),
        cost_model_(runtime.template spawn<CostModel>(*placement.reward_model)) {
    const std::vector<std::string> overrides = trainer::to_overrides(config_);
    auto actor = actor_.template call<&Actor::init_model>(overrides, prompts_.total_steps());
    auto reward_critic = reward_critic_.template call<&RewardCritic::init_model>(overrides, prompts_.total_steps());
    auto cost_critic = cost_critic_.template call<&CostCritic::init_model>(overrides, prompts_.total_steps());
    auto reward_model = reward_model_.template call<&RewardModel::init_model>(overrides);
    auto cost_model = cost_model_.template call<&CostModel::init_model>(overrides);
    hybridflow::wait_all(actor, reward_critic, cost_critic, reward_model, cost_model);
  }

  /// One Safe-RLHF iteration: the controller program.
  Metrics step() {
    ++global_step_;
    Metrics metrics;
    data::DataProto batch = generate(prompts_.next());
    if (config_.trainer.balance_batch) merge(metrics, trainer::balance_batch(batch, static_cast<int>(actor_.dp_size())));
    // Every forward pass at once: groups on other ranks work at the same time, colocated ones in turn.
    const data::DataProto sequences = trainer::sequence_columns(batch);
    auto old = actor_.template call<&Actor::compute_log_prob>(sequences);
    auto ref = actor_.template call<&Actor::compute_ref_log_prob>(sequences);
    auto reward_values = reward_critic_.template call<&RewardCritic::compute_values>(sequences);
    auto cost_values = cost_critic_.template call<&CostCritic::compute_values>(sequences);
    auto reward_scores = reward_model_.template call<&RewardModel::compute_rm_score>(sequences);
    auto cost_scores = cost_model_.template call<&CostModel::compute_rm_score>(sequences);
    batch.union_with(old.get()).union_with(ref.get()).union_with(reward_values.get());
    const trainer::PPOAlgorithm algorithm = trainer::PPOAlgorithm::from_config(config_);
    if (algorithm.rollout.compare) {  // the rollout's own log-probs against the actor's, and their correction
      trainer::add_rollout_probs_diff_metrics(batch, metrics);
      trainer::correct_for_the_rollout(batch, algorithm, metrics);
    }
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
    trainer::absorb_update_metrics(reward_critic.get(), metrics, "critic/");
    trainer::absorb_update_metrics(cost_critic.get(), metrics, "cost_critic/");
    trainer::absorb_update_metrics(actor.get(), metrics, "actor/");
    merge(metrics, shaped.metrics);
    merge(metrics, lagrange.metrics);
    merge(metrics, data_metrics(batch, reward, shaped.token_level_rewards, reward_gae.returns()));
    metrics["training/global_step"] = static_cast<double>(global_step_);
    return metrics;
  }

  /// Steps until trainer.total_training_steps (or the epochs' end), logging each step's metrics.
  void fit() {
    trainer::Tracking tracking = trainer::tracking(config_.trainer, prompts_.total_steps());
    while (global_step_ < prompts_.total_steps()) {
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

  data::DataProto critic_batch(const data::DataProto& batch, const MatrixF& values, const MatrixF& returns) const {
    data::DataProto part = trainer::sequence_columns(batch);
    part.set(std::string(keys::values), values);
    part.set(std::string(keys::returns), returns);
    return trainer::update_batch(part, {std::string(keys::input_ids), std::string(keys::attention_mask),
                                        std::string(keys::position_ids), std::string(keys::response_mask),
                                        std::string(keys::values), std::string(keys::returns)},
                                 config_.critic.ppo_mini_batch_size * config_.actor_rollout_ref.rollout.n,
                                 reward_critic_.dp_size(), "critic.ppo_mini_batch_size");
  }

  data::DataProto actor_batch(const data::DataProto& batch) const {
    data::DataProto part = trainer::update_batch(
        batch, {std::string(keys::input_ids), std::string(keys::attention_mask), std::string(keys::position_ids),
                std::string(keys::response_mask), std::string(keys::advantages), std::string(keys::old_log_probs),
                std::string(keys::ref_log_prob), std::string(keys::rollout_is_weights)},
        config_.actor_rollout_ref.actor.ppo_mini_batch_size * config_.actor_rollout_ref.rollout.n, actor_.dp_size(),
        "actor_rollout_ref.actor.ppo_mini_batch_size");
    part.meta_info()["entropy_metric"] = false;
    return part;
  }

  // ---- generation -----------------------------------------------------------------------------

  /// rollout.n responses to each prompt on the actor group; prompt k draws from its own seed, so
  /// the samples do not depend on the number of ranks.
  data::DataProto generate(const std::vector<std::int64_t>& indices) {
    return trainer::generate_sequences<Actor>(actor_, prompts_.dataset(), indices,
                                              trainer::rollout_sampling_params(config_, tokenizer_),
                                              trainer::generation_round_seed(config_.data, global_step_, 1), 0,
                                              tokenizer_.pad_token_id);
  }

  trainer::PPOConfig config_;
  trainer::TokenizerHooks tokenizer_;
  trainer::PromptStream prompts_;
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
    trainer::ControllerInputs in = trainer::controller_inputs(config, tokenizer);
    SafeRLHF<Runtime> program(runtime, config, placement, std::move(in.hooks), std::move(in.train));
    const double lambda_init = program.lambda();
    program.fit();
    fmt::print("safe_rlhf: {} steps, lambda {:.6g} -> {:.6g} ({})\n", program.global_step(), lambda_init, program.lambda(),
               placement.describe());
    return 0;
  });
}
