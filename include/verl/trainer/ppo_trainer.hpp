// PPOTrainer: verl's PPO dataflow (RayPPOTrainer.fit) in one process, on models the caller built.
//
//   PPOTrainer<Policy, Critic = NoCritic, Reward = reward::DefaultRewardFunction>
//
// It is the controller program verl_train runs under MPI (PPOController) on the in-process
// runtime (hybridflow::LocalRuntime): the actor/rollout/reference worker and the critic worker
// are built in this process from the objects given here (ProvidedPolicy, ProvidedCritic), so a
// step is the same calls, the same batch (a DataProto with verl's column names), the same numbers.
// The roles are types (ppo_trainer_roles.hpp): any float32 CausalLM as the policy, any ValueModel
// as the critic, any reward function; the algorithm is a PPOAlgorithm value, made from verl's
// config names (PPOAlgorithm::from_config) or from compile-time recipes (recipes.hpp), which the
// in-process runtime hands to the worker as it is.
//
// What a step does, as verl's: generate rollout.n responses per prompt → reward (the score at the
// last valid response token; ReMax's greedy baseline; DAPO's dynamic sampling and overlong
// penalty) → balance → old log-probs, reference log-probs, values → KL in the reward → advantages
// → critic update → actor update (from trainer.critic_warmup on), mini-batches of
// ppo_mini_batch_size prompts × n, micro-batches whose gradients accumulate, losses aggregated over
// the mini-batch, clipped, AdamW with the scheduled learning rate. Validation every
// trainer.test_freq steps, checkpoints every trainer.save_freq steps, metrics with verl's names
// through Tracking. Data parallelism is the MPI runtime's (verl_train under mpirun).
#pragma once

#include <cstdint>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include "verl/core/metrics.hpp"
#include "verl/data/data_proto.hpp"
#include "verl/data/rl_dataset.hpp"
#include "verl/hybridflow/local_runtime.hpp"
#include "verl/optim/adamw.hpp"
#include "verl/reward/reward_score.hpp"
#include "verl/trainer/config/ppo_config.hpp"
#include "verl/trainer/ppo_controller.hpp"
#include "verl/trainer/ppo_trainer_algorithm.hpp"
#include "verl/trainer/ppo_trainer_roles.hpp"
#include "verl/trainer/workers/actor_rollout_ref_worker.hpp"
#include "verl/trainer/workers/critic_worker.hpp"
#include "verl/trainer/workers/provided_models.hpp"

namespace verl::trainer {

namespace detail {
template <class Critic>
struct in_process_critic_worker {
  using type = CriticWorker<ProvidedCritic<Critic>>;
};
template <>
struct in_process_critic_worker<NoCritic> {
  using type = NoCritic;
};
}  // namespace detail

template <class Policy, class Critic = NoCritic, class Reward = reward::DefaultRewardFunction>
class PPOTrainer {
  static_assert(check_trainer_roles<Policy, Critic, Reward>());
  VERL_STATIC_ASSERT((std::same_as<typename Policy::scalar_type, float>), THE_TRAINER_NEEDS_A_FLOAT32_POLICY_MODEL);
  static constexpr bool has_critic = !std::same_as<Critic, NoCritic>;

 public:
  using ActorWorker = ActorRolloutRefWorker<ProvidedPolicy<Policy>>;
  using CriticWorkerType = typename detail::in_process_critic_worker<Critic>::type;
  using Controller = PPOController<hybridflow::LocalRuntime, ActorWorker, CriticWorkerType, Reward>;

  /// `reference` is the frozen reference policy (needed with a KL loss or KL in the reward; a
  /// LoRA policy without one uses its base, adapter off); `val` may be empty (no validation).
  PPOTrainer(PPOConfig config, PPOAlgorithm algorithm, Policy actor, std::optional<Policy> reference, Critic critic,
             Reward reward_fn, TokenizerHooks tokenizer, data::RLHFDataset train, data::RLHFDataset val)
      : runtime_(std::make_unique<hybridflow::LocalRuntime>()),
        controller_(*runtime_, std::move(config),
                    in_process_models(std::move(algorithm), std::move(actor), std::move(reference), std::move(critic)),
                    std::move(reward_fn), std::move(tokenizer), std::move(train), std::move(val)) {}

  // ---- the loop -------------------------------------------------------------------------------

  /// verl's fit(): resume (trainer.resume_mode), validate before training, then step until
  /// total_training_steps (or `stop_after_step`, to simulate an interrupted run). Returns the
  /// metrics logged at each step.
  std::vector<Metrics> fit(std::optional<std::int64_t> stop_after_step = std::nullopt, std::ostream& console = std::cout) {
    return controller_.fit(stop_after_step, console);
  }
  /// One iteration of verl's training loop; returns its metrics (not logged).
  Metrics step() { return controller_.step(); }
  /// val-core/<data_source>/reward/mean@N (acc when the reward function reports it) and val-aux/*.
  Metrics validate() { return controller_.validate(); }

  // ---- checkpoints ----------------------------------------------------------------------------
  void save_checkpoint() { controller_.save_checkpoint(); }
  void load_checkpoint(const std::filesystem::path& folder) { controller_.load_checkpoint(folder); }
  bool resume() { return controller_.resume(); }

  /// Adds a metrics backend of the caller's type (any MetricsLogger) beside trainer.logger's.
  template <class L>
  void add_logger(L logger) {
    controller_.add_logger(std::move(logger));
  }

  // ---- access ---------------------------------------------------------------------------------
  [[nodiscard]] Policy& actor() { return controller_.actor_group().worker().actor(); }
  [[nodiscard]] const Policy& actor() const { return controller_.actor_group().worker().actor_model(); }
  [[nodiscard]] Critic& critic()
    requires has_critic
  {
    return controller_.critic_group().worker().critic();
  }
  [[nodiscard]] const optim::AdamW& actor_optimizer() const { return controller_.actor_group().worker().optimizer(); }
  [[nodiscard]] const optim::AdamW& critic_optimizer() const
    requires has_critic
  {
    return controller_.critic_group().worker().optimizer();
  }
  [[nodiscard]] const PPOConfig& config() const { return controller_.config(); }
  [[nodiscard]] const PPOAlgorithm& algorithm() const { return controller_.algorithm(); }
  [[nodiscard]] std::int64_t global_step() const { return controller_.global_step(); }
  [[nodiscard]] std::int64_t total_training_steps() const { return controller_.total_training_steps(); }
  [[nodiscard]] double kl_coefficient() const { return controller_.kl_coefficient(); }
  /// The last step's batch (after dynamic sampling and balancing) with its log-probs, values and
  /// advantages, as verl's DataProto (trainer::keys names its columns).
  [[nodiscard]] const data::DataProto& last_batch() const { return controller_.last_batch(); }
  [[nodiscard]] Controller& controller() { return controller_; }

 private:
  static typename Controller::InProcessModels in_process_models(PPOAlgorithm algorithm, Policy actor,
                                                                std::optional<Policy> reference, Critic critic) {
    typename Controller::InProcessModels models;
    models.actor.actor_model.emplace(std::move(actor));
    if (reference) models.actor.reference_model.emplace(std::move(*reference));
    if constexpr (has_critic) models.critic.critic_model.emplace(std::move(critic));
    models.algorithm = std::move(algorithm);
    return models;
  }

  std::unique_ptr<hybridflow::LocalRuntime> runtime_;  ///< stable: the controller keeps a reference
  Controller controller_;
};

}  // namespace verl::trainer
