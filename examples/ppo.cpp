// PPO with a critic (Ouyang et al., "Training language models to follow instructions with human
// feedback", 2022; verl's classic recipe) as a HybridFlow controller program over two worker groups:
// the actor/rollout/reference, and the critic, on the same ranks or on a pool of its own. PPO::step()
// below is the algorithm: sample; score with the rule reward; take the old log-probs, the
// reference's and the critic's values at once (a critic on its own ranks computes while the actor's
// do); subtract the KL term from the rewards (adaptive or fixed beta); GAE; update the critic and,
// after trainer.critic_warmup steps, the actor, both issued together.
//
//   mpirun -np 2 verl_example_ppo trainer.n_gpus_per_node=1 +critic.nnodes=1 +critic.n_gpus_per_node=1
//       data.train_files=[train.jsonl] actor_rollout_ref.model.path=POLICY critic.model.path=CRITIC
//       trainer.total_training_steps=10                                      (one command line)
//
// Configuration: verl's keys (data.*, actor_rollout_ref.*, critic.*, algorithm.gamma / lam /
// use_kl_in_reward / kl_penalty / kl_ctrl.*, trainer.*), with algorithm.adv_estimator=gae by default
// (required). For the same keys it computes what `verl_train algorithm.adv_estimator=gae` computes
// (the example's test compares the two runs' metrics). The rule reward is verl's default_compute_score
// by data_source. Metrics: actor/*, critic/* (the update's and verl's data metrics, values
// included), global_seqlen/*.
#include <fmt/format.h>

#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "verl/algo/advantages/gae.hpp"
#include "verl/algo/kl/controller.hpp"
#include "verl/algo/kl/rewards.hpp"
#include "verl/data/data_proto.hpp"
#include "verl/hybridflow/placement.hpp"
#include "verl/hybridflow/runtime.hpp"
#include "verl/reward/reward_score.hpp"
#include "verl/trainer/components_from_config.hpp"
#include "verl/trainer/config.hpp"
#include "verl/trainer/controller_calls.hpp"
#include "verl/trainer/controller_inputs.hpp"
#include "verl/trainer/ppo_controller.hpp"
#include "verl/trainer/workers/actor_rollout_ref_worker.hpp"
#include "verl/trainer/workers/critic_worker.hpp"
#include "verl/trainer/workers/model_sources.hpp"

namespace {

using namespace verl;
namespace keys = trainer::keys;
using trainer::float_column;

using Actor = trainer::ActorRolloutRefWorker<trainer::HfPolicySource>;
using Critic = trainer::CriticWorker<trainer::HfCriticSource>;

template <class Runtime>
class PPO {
 public:
  PPO(Runtime& runtime, trainer::PPOConfig config, const hybridflow::RolePlacement& placement,
        trainer::TokenizerHooks tokenizer, data::RLHFDataset train)
      : config_(std::move(config)),
        algorithm_(trainer::PPOAlgorithm::from_config(config_)),
        tokenizer_(std::move(tokenizer)),
        prompts_(config_, std::move(train)),
        kl_ctrl_(algo::get_kl_controller(algorithm_.kl_ctrl)),
        actor_(runtime.template spawn<Actor>(placement.actor)),
        critic_(runtime.template spawn<Critic>(placement.critic.value())) {
    trainer::require_plain_ppo_step(config_, algorithm_, "PPO");
    VERL_CHECK_ARG(config_.algorithm.adv_estimator == "gae",
                   "algorithm.adv_estimator: this program is PPO with a critic (GAE); expected gae, got '{}'",
                   config_.algorithm.adv_estimator);
    const std::vector<std::string> overrides = trainer::to_overrides(config_);
    auto actor = actor_.template call<&Actor::init_model>(overrides, prompts_.total_steps());
    auto critic = critic_.template call<&Critic::init_model>(overrides, prompts_.total_steps());
    hybridflow::wait_all(actor, critic);
  }

  /// One PPO iteration: the controller program.
  Metrics step() {
    ++global_step_;
    Metrics metrics;
    data::DataProto batch = generate(prompts_.next());
    batch.set(std::string(keys::token_level_scores), score(batch));
    if (config_.trainer.balance_batch) merge(metrics, trainer::balance_batch(batch, static_cast<int>(actor_.dp_size())));
    // Every forward pass at once: a critic on its own ranks computes while the actor's ranks do.
    const data::DataProto sequences = trainer::sequence_columns(batch);
    auto old = actor_.template call<&Actor::compute_log_prob>(sequences);
    std::optional<hybridflow::Future<Runtime, data::DataProto>> ref;
    if (algorithm_.needs_reference()) ref.emplace(actor_.template call<&Actor::compute_ref_log_prob>(sequences));
    auto values = critic_.template call<&Critic::compute_values>(sequences);
    trainer::add_old_log_probs(batch, old.get(), algorithm_, metrics);
    if (ref) batch.union_with(ref->get());
    batch.union_with(values.get());
    // The rollout's own log-probs against the actor's (rollout.calculate_log_probs), and the
    // correction algorithm.rollout_correction asks for.
    if (algorithm_.rollout.compare) {
      trainer::add_rollout_probs_diff_metrics(batch, metrics);
      trainer::correct_for_the_rollout(batch, algorithm_, metrics);
    }
    // The KL term in the rewards, then GAE on the critic's values.
    batch.set(std::string(keys::token_level_rewards), trainer::token_level_rewards(batch, algorithm_, kl_ctrl_, metrics));
    const algo::GAE gae{.gamma = config_.algorithm.gamma, .lam = config_.algorithm.lam};
    algo::AdvantageResult advantage = gae.compute({.token_level_rewards = float_column(batch, keys::token_level_rewards),
                                                   .response_mask = float_column(batch, keys::response_mask),
                                                   .values = float_column(batch, keys::values)});
    batch.set(std::string(keys::returns), advantage.returns());
    batch.set(std::string(keys::advantages), std::move(advantage.advantages));
    // The critic's update and, past the warm-up, the actor's, issued together.
    auto critic = critic_.template call<&Critic::update_critic>(trainer::critic_update_batch(batch, config_, critic_.dp_size()));
    std::optional<hybridflow::Future<Runtime, data::DataProto>> actor;
    if (config_.trainer.critic_warmup <= global_step_) {
      actor.emplace(actor_.template call<&Actor::update_actor>(trainer::actor_update_batch(
          batch, config_, algorithm_, actor_.dp_size(), /*send_old_log_probs=*/true, /*entropy_metric=*/false)));
    }
    trainer::absorb_update_metrics(critic.get(), metrics);
    if (actor) trainer::absorb_update_metrics(actor->get(), metrics);
    merge(metrics, trainer::data_metrics_of(batch));
    metrics["training/global_step"] = static_cast<double>(global_step_);
    return metrics;
  }

  /// Steps until trainer.total_training_steps (or the epochs' end), logging each step's metrics.
  void fit() {
    trainer::Tracking tracking = trainer::tracking(config_.trainer, prompts_.total_steps());
    while (global_step_ < prompts_.total_steps()) {
      const Metrics metrics = step();  // step() advances global_step_ first
      tracking.log(metrics, global_step_);
    }
  }
  [[nodiscard]] std::int64_t global_step() const { return global_step_; }

 private:
  static void merge(Metrics& into, const Metrics& from) {
    for (const auto& [k, v] : from) into[k] = v;
  }

  MatrixF score(const data::DataProto& rows) {
    return trainer::rule_token_level_scores(reward_fn_, prompts_.dataset(), rows, tokenizer_);
  }

  /// rollout.n responses per prompt (the first generation round's seeds, as verl_train's).
  data::DataProto generate(const std::vector<std::int64_t>& prompts) {
    return trainer::generate_sequences<Actor>(actor_, prompts_.dataset(), prompts,
                                              trainer::rollout_sampling_params(config_, tokenizer_),
                                              trainer::generation_round_seed(config_.data, global_step_, 1), 0,
                                              tokenizer_.pad_token_id);
  }

  trainer::PPOConfig config_;
  trainer::PPOAlgorithm algorithm_;
  trainer::TokenizerHooks tokenizer_;
  trainer::PromptStream prompts_;
  algo::AnyKLController kl_ctrl_;
  reward::DefaultRewardFunction reward_fn_{};
  hybridflow::WorkerGroup<Runtime, Actor> actor_;
  hybridflow::WorkerGroup<Runtime, Critic> critic_;
  std::int64_t global_step_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> overrides = {"algorithm.adv_estimator=gae"};
  for (int i = 1; i < argc; ++i) overrides.emplace_back(argv[i]);
  return hybridflow::run_controller<Actor, Critic>(argc, argv, [&](auto& runtime) {
    using Runtime = std::remove_reference_t<decltype(runtime)>;
    const trainer::PPOConfig config = trainer::load_ppo_config(overrides);
    const hybridflow::RolePlacement placement =
        hybridflow::place_roles(trainer::placement_keys(config, /*use_critic=*/true), runtime.world_size());
    const tokenizer::PretrainedTokenizer tokenizer = trainer::load_policy_tokenizer(trainer::detail::tokenizer_source(config));
    trainer::ControllerInputs in = trainer::controller_inputs(config, tokenizer);
    PPO<Runtime> program(runtime, config, placement, std::move(in.hooks), std::move(in.train));
    program.fit();
    fmt::print("ppo: {} steps ({})\n", program.global_step(), placement.describe());
    return 0;
  });
}
