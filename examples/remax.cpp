// ReMax (Li et al., "ReMax: A Simple, Effective, and Efficient Reinforcement Learning Method for
// Aligning Large Language Models", ICML 2024) as a HybridFlow controller program over one worker
// group: the actor/rollout/reference. ReMax::step() below is the algorithm: sample rollout.n
// responses per prompt and one greedy response as the baseline; score both with the rule reward;
// take the old and reference log-probs together; the advantage of a response is its reward-to-go
// minus its prompt's greedy reward (verl's compute_remax_outcome_advantage); update the actor.
// No critic, no value model: ReMax's point is that the greedy baseline replaces both.
//
//   mpirun -np 2 verl_example_remax trainer.n_gpus_per_node=2 data.train_files=[train.jsonl]
//       actor_rollout_ref.model.path=POLICY actor_rollout_ref.rollout.n=4 trainer.total_training_steps=10
//
// Configuration: verl's keys (data.*, actor_rollout_ref.*, algorithm.use_kl_in_reward with
// algorithm.kl_penalty / kl_ctrl.*, actor.use_kl_loss, trainer.*), with algorithm.adv_estimator=remax
// by default (required). For the same keys it computes what `verl_train algorithm.adv_estimator=remax`
// computes (the example's test compares the two runs' metrics). The rule reward is verl's
// default_compute_score by data_source. Metrics: actor/*, verl's data metrics (critic/score,
// critic/rewards, critic/advantages, critic/returns, lengths), global_seqlen/*.
#include <fmt/format.h>

#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "verl/algo/advantages/remax.hpp"
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
#include "verl/trainer/workers/model_sources.hpp"

namespace {

using namespace verl;
namespace keys = trainer::keys;
using trainer::float_column;

using Actor = trainer::ActorRolloutRefWorker<trainer::HfPolicySource>;

template <class Runtime>
class ReMax {
 public:
  ReMax(Runtime& runtime, trainer::PPOConfig config, const hybridflow::RolePlacement& placement,
        trainer::TokenizerHooks tokenizer, data::RLHFDataset train)
      : config_(std::move(config)),
        algorithm_(trainer::PPOAlgorithm::from_config(config_)),
        tokenizer_(std::move(tokenizer)),
        prompts_(config_, std::move(train)),
        kl_ctrl_(algo::get_kl_controller(algorithm_.kl_ctrl)),
        actor_(runtime.template spawn<Actor>(placement.actor)) {
    trainer::require_plain_ppo_step(config_, algorithm_, "ReMax");
    VERL_CHECK_ARG(config_.algorithm.adv_estimator == "remax",
                   "algorithm.adv_estimator: this program is ReMax; expected remax, got '{}'", config_.algorithm.adv_estimator);
    actor_.template call<&Actor::init_model>(trainer::to_overrides(config_), prompts_.total_steps()).get();
  }

  /// One ReMax iteration: the controller program.
  Metrics step() {
    ++global_step_;
    Metrics metrics;
    const std::vector<std::int64_t> prompts = prompts_.next();
    const std::uint64_t seed = trainer::generation_round_seed(config_.data, global_step_, 1);
    // rollout.n samples per prompt, and ReMax's baseline: one greedy response per prompt.
    const rollout::SamplingParams sampled = trainer::rollout_sampling_params(config_, tokenizer_);
    rollout::SamplingParams greedy = sampled;
    greedy.temperature = 0.0f;
    greedy.n = 1;
    data::DataProto batch = generate(prompts, sampled, seed);
    const data::DataProto baseline = generate(prompts, greedy, seed);
    batch.set(std::string(keys::token_level_scores), score(batch));
    batch.set(std::string(keys::reward_baselines), per_sample(score(baseline), sampled.n));
    if (config_.trainer.balance_batch) merge(metrics, trainer::balance_batch(batch, static_cast<int>(actor_.dp_size())));
    // The old and the reference log-probs, issued together.
    const data::DataProto sequences = trainer::sequence_columns(batch);
    auto old = actor_.template call<&Actor::compute_log_prob>(sequences);
    std::optional<hybridflow::Future<Runtime, data::DataProto>> ref;
    if (algorithm_.needs_reference()) ref.emplace(actor_.template call<&Actor::compute_ref_log_prob>(sequences));
    trainer::add_old_log_probs(batch, old.get(), algorithm_, metrics);
    if (ref) batch.union_with(ref->get());
    // The rollout's own log-probs against the actor's (rollout.calculate_log_probs), and the
    // correction algorithm.rollout_correction asks for.
    if (algorithm_.rollout.compare) {
      trainer::add_rollout_probs_diff_metrics(batch, metrics);
      trainer::correct_for_the_rollout(batch, algorithm_, metrics);
    }
    // The rewards (with the KL term when algorithm.use_kl_in_reward), then ReMax's advantages.
    batch.set(std::string(keys::token_level_rewards), trainer::token_level_rewards(batch, algorithm_, kl_ctrl_, metrics));
    const VectorF baselines = float_column(batch, keys::reward_baselines).col(0);
    const algo::AdvantageResult advantage = algo::ReMax{}.compute({.token_level_rewards = float_column(batch, keys::token_level_rewards),
                                                                   .response_mask = float_column(batch, keys::response_mask),
                                                                   .reward_baselines = baselines});
    batch.set(std::string(keys::returns), advantage.returns());
    batch.set(std::string(keys::advantages), advantage.advantages);
    trainer::absorb_update_metrics(actor_.template call<&Actor::update_actor>(trainer::actor_update_batch(
                                       batch, config_, algorithm_, actor_.dp_size(), /*send_old_log_probs=*/true,
                                       /*entropy_metric=*/false)).get(),
                                   metrics);
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

  data::DataProto generate(const std::vector<std::int64_t>& prompts, const rollout::SamplingParams& params,
                           std::uint64_t seed) {
    return trainer::generate_sequences<Actor>(actor_, prompts_.dataset(), prompts, params, seed, 0, tokenizer_.pad_token_id);
  }

  /// Each prompt's greedy reward, repeated for its n samples: a (prompts * n, 1) column.
  static MatrixF per_sample(const MatrixF& greedy_scores, Index n) {
    MatrixF out(greedy_scores.rows() * n, 1);
    for (Index r = 0; r < out.rows(); ++r) out(r, 0) = greedy_scores.row(r / n).sum();
    return out;
  }

  trainer::PPOConfig config_;
  trainer::PPOAlgorithm algorithm_;
  trainer::TokenizerHooks tokenizer_;
  trainer::PromptStream prompts_;
  algo::AnyKLController kl_ctrl_;
  reward::DefaultRewardFunction reward_fn_{};
  hybridflow::WorkerGroup<Runtime, Actor> actor_;
  std::int64_t global_step_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> overrides = {"algorithm.adv_estimator=remax"};
  for (int i = 1; i < argc; ++i) overrides.emplace_back(argv[i]);
  return hybridflow::run_controller<Actor>(argc, argv, [&](auto& runtime) {
    using Runtime = std::remove_reference_t<decltype(runtime)>;
    const trainer::PPOConfig config = trainer::load_ppo_config(overrides);
    const hybridflow::RolePlacement placement =
        hybridflow::place_roles(trainer::placement_keys(config, /*use_critic=*/false), runtime.world_size());
    const tokenizer::PretrainedTokenizer tokenizer = trainer::load_policy_tokenizer(trainer::detail::tokenizer_source(config));
    trainer::ControllerInputs in = trainer::controller_inputs(config, tokenizer);
    ReMax<Runtime> program(runtime, config, placement, std::move(in.hooks), std::move(in.train));
    program.fit();
    fmt::print("remax: {} steps ({})\n", program.global_step(), placement.describe());
    return 0;
  });
}
