// PPOController: verl's RayPPOTrainer.fit as a single-controller program over worker groups (the
// HybridFlow runtime). The controller runs in rank 0's process; the actor/rollout/reference and the
// critic are worker groups on resource pools (colocated on the same ranks, or split), and every
// model computation is a call on them that returns a future:
//
//   batch = generate(prompts)                          actor.generate_sequences   (DP_COMPUTE_PROTO)
//   reward(batch)                                      the rule reward, here
//   old = actor.compute_log_prob(batch)                ┐
//   ref = actor.compute_ref_log_prob(batch)            ├ issued together; the critic's pool
//   values = critic.compute_values(batch)              ┘ works while the actor's does
//   compute_advantages(batch)                          here (verl's compute_advantage)
//   critic.update_critic(batch); actor.update_actor(batch)
//
// What the step computes is the in-process PPOTrainer's, call for call: the same seeds (a prompt's
// samples depend only on its seed), the same rows on each data-parallel rank, the same mini-batches
// (each a contiguous run of the batch, split over the ranks: mini_batch_major_order), the same
// reductions. The controller holds the batch as verl's DataProto; each call sends a group only the
// columns it reads.
//
//   PPOController<Runtime, ActorWorker, CriticWorker = NoCritic, Reward = reward::DefaultRewardFunction>
#pragma once

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "verl/algo/advantages/registry.hpp"
#include "verl/algo/kl/controller.hpp"
#include "verl/algo/kl/rewards.hpp"
#include "verl/algo/loss_aggregation.hpp"
#include "verl/algo/rollout_correction.hpp"
#include "verl/core/error.hpp"
#include "verl/core/metrics.hpp"
#include "verl/data/data_proto.hpp"
#include "verl/data/dataloader.hpp"
#include "verl/data/rl_dataset.hpp"
#include "verl/hybridflow/placement.hpp"
#include "verl/parallel/seqlen_balancing.hpp"
#include "verl/reward/reward_score.hpp"
#include "verl/rollout/sampling.hpp"
#include "verl/trainer/checkpoint.hpp"
#include "verl/trainer/components_from_config.hpp"
#include "verl/trainer/config.hpp"
#include "verl/trainer/controller_calls.hpp"
#include "verl/trainer/placement_keys.hpp"
#include "verl/trainer/separate_async.hpp"
#include "verl/trainer/generations.hpp"
#include "verl/trainer/logging/tracking.hpp"
#include "verl/trainer/metrics.hpp"
#include "verl/trainer/ppo_trainer_algorithm.hpp"
#include "verl/trainer/ppo_trainer_roles.hpp"
#include "verl/trainer/timer.hpp"
#include "verl/trainer/validation_metrics.hpp"
#include "verl/trainer/workers/actor_rollout_ref_worker.hpp"
#include "verl/trainer/workers/batch_keys.hpp"
#include "verl/trainer/workers/critic_worker.hpp"
#include "verl/trainer/workers/role_state.hpp"

namespace verl::trainer {

/// A controller without a reward-model worker type (rule-based rewards only).
struct NoRewardModel {};
/// A controller without a rollout worker type (the rollout is always the actor's: the hybrid engine).
struct NoRolloutWorker {};

namespace detail {
/// The worker group of W on Runtime (NoCritic, NoRewardModel: none).
template <class Runtime, class W>
struct group_of {
  using type = typename Runtime::template group_type<W>;
};
template <class Runtime>
struct group_of<Runtime, NoCritic> {
  using type = NoCritic;
};
template <class Runtime>
struct group_of<Runtime, NoRewardModel> {
  using type = NoRewardModel;
};
template <class Runtime>
struct group_of<Runtime, NoRolloutWorker> {
  using type = NoRolloutWorker;
};

/// A worker type's model source (W::models_type), or nothing (NoCritic, a worker without one).
template <class W>
struct models_of {
  using type = std::monostate;
};
template <class W>
  requires requires { typename W::models_type; }
struct models_of<W> {
  using type = typename W::models_type;
};

/// A worker group's (tp, dp, pp) mesh when the worker type lays its ranks out itself (the
/// Megatron actor's and critic's group_mesh), else none (all data parallel).
template <class W>
std::optional<hybridflow::GroupMesh> worker_group_mesh(const PPOConfig& config, const hybridflow::ResourcePool& pool) {
  if constexpr (requires { W::group_mesh(config, 1); }) {
    return W::group_mesh(config, static_cast<int>(pool.size()));
  } else {
    return std::nullopt;
  }
}

/// A result the group's first rank gives: a rank_zero method's value, or the first of a
/// one_to_all method's (a worker whose method is collective, e.g. gathering TP shards).
template <class T>
T first_rank_result(T value) {
  return value;
}
template <class T>
T first_rank_result(std::vector<T> values) {
  return std::move(values.front());
}

/// Per-rank metrics a worker returned in meta_info["metrics"], reduced over the collected ranks.
/// They arrive in one of three shapes: one object of numbers (a single collected rank: the call
/// went to one data-parallel group, no concatenation), the dict of lists DataProto::concat makes
/// of the collected ranks' objects (verl's DataProto.concat: one value per collected rank, in rank
/// order; dp > 1), or a list of per-rank objects. Every shape is read (a dict of lists used to be
/// dropped, so the Megatron worker's reshard metrics vanished at dp > 1).
/// perf/* entries are per-rank figures (the reshard's perf/reshard_bytes_received and
/// perf/peak_param_bytes): equal on every rank when the reshard plan is balanced, and logged as
/// the max over the ranks otherwise (the worst rank: what its memory and link must carry). Other
/// entries (timing_s/reshard): the mean over the ranks.
inline Metrics worker_meta_metrics(const nlohmann::json& meta) {
  Metrics out;
  if (!meta.is_object() || !meta.contains("metrics")) return out;
  const nlohmann::json& m = meta["metrics"];
  MetricLists lists;
  const auto add = [&](const std::string& name, const nlohmann::json& value) {
    if (value.is_number()) {
      lists[name].push_back(value.get<double>());
    } else if (value.is_array()) {
      for (const auto& v : value)
        if (v.is_number()) lists[name].push_back(v.get<double>());
    }
  };
  if (m.is_array()) {
    for (const auto& part : m)
      if (part.is_object())
        for (const auto& [k, v] : part.items()) add(k, v);
  } else if (m.is_object()) {
    for (const auto& [k, v] : m.items()) add(k, v);
  }
  for (const auto& [name, values] : lists) {
    if (values.empty()) continue;
    if (name.starts_with("perf/")) {
      out[name] = *std::max_element(values.begin(), values.end());
    } else {
      double sum = 0.0;
      for (const double v : values) sum += v;
      out[name] = sum / static_cast<double>(values.size());
    }
  }
  return out;
}
}  // namespace detail

template <class Runtime, class ActorWorker, class CriticWorker = NoCritic, class Reward = reward::DefaultRewardFunction,
          class RewardModelWorker = NoRewardModel, class RolloutWorkerType = NoRolloutWorker>
class PPOController {
  static constexpr bool has_critic = !std::same_as<CriticWorker, NoCritic>;
  static constexpr bool can_roll_out_apart = !std::same_as<RolloutWorkerType, NoRolloutWorker>;
  static constexpr bool can_score_with_a_model = !std::same_as<RewardModelWorker, NoRewardModel>;
  /// trainer.v1.trainer_mode=separate_async: a rollout pool of its own and an actor that keeps pi_old.
  static constexpr bool can_run_separate_async =
      can_roll_out_apart && requires(ActorWorker& w, const data::DataProto& b) {
        w.save_old_policy();
        w.compute_old_policy_log_prob(b);
      };
  VERL_STATIC_ASSERT(reward::RewardFunction<Reward>,
                     REWARD_FUNCTION_MUST_TAKE_DATA_SOURCE_SOLUTION_STR_GROUND_TRUTH_AND_RETURN_A_SCORE);
  using ActorGroup = typename Runtime::template group_type<ActorWorker>;
  template <class T>
  using Future = typename Runtime::template future_type<T>;
  using CriticGroup = typename detail::group_of<Runtime, CriticWorker>::type;
  using RewardModelGroup = typename detail::group_of<Runtime, RewardModelWorker>::type;
  using RolloutGroup = typename detail::group_of<Runtime, RolloutWorkerType>::type;

 public:
  /// What the in-process runtime (hybridflow::LocalRuntime) hands to the workers it builds: the
  /// actor's and the critic's model sources with the models in them (ProvidedPolicy,
  /// ProvidedCritic), and a compile-time recipe's algorithm, which cannot travel over MPI.
  struct InProcessModels {
    typename detail::models_of<ActorWorker>::type actor{};
    typename detail::models_of<CriticWorker>::type critic{};
    std::optional<PPOAlgorithm> algorithm{};
  };

  /// Spawns the worker groups on their pools (`placement.critic` for the critic) and initialises
  /// their models with this configuration.
  PPOController(Runtime& runtime, PPOConfig config, const hybridflow::RolePlacement& placement, Reward reward_fn,
                TokenizerHooks tokenizer, data::RLHFDataset train, data::RLHFDataset val)
      : PPOController(runtime, std::move(config), &placement, std::move(reward_fn), std::move(tokenizer), std::move(train),
                      std::move(val), nullptr) {}

  /// In one process (the runtime is a LocalRuntime): every role on it (the pool keys must say one
  /// process), the workers built with `models`.
  PPOController(Runtime& runtime, PPOConfig config, InProcessModels models, Reward reward_fn, TokenizerHooks tokenizer,
                data::RLHFDataset train, data::RLHFDataset val)
      : PPOController(runtime, std::move(config), nullptr, std::move(reward_fn), std::move(tokenizer), std::move(train),
                      std::move(val), &models) {}

 private:

  /// Builds W on `pool`, with `models` when the runtime builds workers in process.
  template <class W, class Models>
  static auto spawn(Runtime& runtime, const hybridflow::ResourcePool& pool, std::optional<hybridflow::GroupMesh> mesh,
                    Models* models) {
    if constexpr (requires { runtime.template spawn<W>(pool, mesh, std::move(*models)); }) {
      if (models != nullptr) return runtime.template spawn<W>(pool, std::move(mesh), std::move(*models));
    } else {
      VERL_CHECK_ARG(models == nullptr,
                     "PPOController: models handed over in process need the in-process runtime (hybridflow::LocalRuntime); "
                     "under MPI the workers load theirs from the configuration's keys");
    }
    return runtime.template spawn<W>(pool, std::move(mesh));
  }

  /// `placement`: null in process (the keys' placement over the runtime's one rank).
  PPOController(Runtime& runtime, PPOConfig config, const hybridflow::RolePlacement* placement, Reward reward_fn,
                TokenizerHooks tokenizer, data::RLHFDataset train, data::RLHFDataset val, InProcessModels* in_process)
      : runtime_(&runtime),
        config_(std::move(config)),
        placement_(placement != nullptr ? *placement
                                        : hybridflow::place_roles(placement_keys(config_, has_critic), runtime.world_size())),
        algorithm_(in_process != nullptr && in_process->algorithm ? *in_process->algorithm : PPOAlgorithm::from_config(config_)),
        reward_fn_(std::move(reward_fn)),
        tokenizer_(std::move(tokenizer)),
        train_(std::move(train)),
        val_(std::move(val)),
        loader_(train_.size(), train_loader_options(config_.data)),
        total_steps_(trainer::total_training_steps(config_, loader_.num_batches(), static_cast<std::int64_t>(train_.size()))),
        kl_ctrl_(algo::get_kl_controller(algorithm_.kl_ctrl)),
        checkpoints_(checkpoint_manager(config_.trainer)),
        actor_(spawn<ActorWorker>(runtime, placement_.actor, detail::worker_group_mesh<ActorWorker>(config_, placement_.actor),
                                  in_process != nullptr ? &in_process->actor : nullptr)) {
    if (in_process != nullptr && in_process->algorithm) {
      if constexpr (requires { actor_.worker().use_algorithm(algorithm_); }) actor_.worker().use_algorithm(algorithm_);
    }
    if constexpr (has_critic) {
      VERL_CHECK_ARG(placement_.critic.has_value(), "placement: the trainer has a critic but the placement gives it no pool");
      critic_.emplace(spawn<CriticWorker>(runtime, *placement_.critic,
                                          detail::worker_group_mesh<CriticWorker>(config_, *placement_.critic),
                                          in_process != nullptr ? &in_process->critic : nullptr));
    } else {
      VERL_CHECK_ARG(!algorithm_.needs_critic(),
                     "algorithm.adv_estimator: '{}' needs a critic; build the trainer with a critic worker "
                     "(critic.model.path)",
                     algorithm_.estimator.name());
    }
    if (config_.reward.reward_model.enable) {
      if constexpr (can_score_with_a_model) {
        VERL_CHECK_ARG(placement_.reward_model.has_value(),
                       "placement: reward.reward_model.enable=True but the placement gives the reward model no pool");
        reward_model_.emplace(runtime.template spawn<RewardModelWorker>(*placement_.reward_model));
      } else {
        ::verl::detail::throw_invalid_argument(
            "reward.reward_model.enable: True, but this controller was built without a reward-model worker type "
            "(PPOController's RewardModelWorker parameter)");
      }
    }
    if (!placement_.rollout_colocated()) {
      if constexpr (can_roll_out_apart) {
        rollout_.emplace(runtime.template spawn<RolloutWorkerType>(placement_.rollout));
      } else {
        ::verl::detail::throw_invalid_argument(
            "actor_rollout_ref.hybrid_engine: False (a rollout pool of its own), but this controller was built without a "
            "rollout worker type (PPOController's RolloutWorkerType parameter); expected True");
      }
    }
    validate_setup();
    warn_unused_keys();
    if (config_.trainer.v1.trainer_mode == "separate_async") {
      if constexpr (can_run_separate_async) {
        separate_async_.emplace(SeparateAsyncSettings::from_config(config_));
      } else {
        ::verl::detail::throw_invalid_argument(
            "trainer.v1.trainer_mode: separate_async needs a rollout worker type and an actor worker that keeps its old "
            "policy (save_old_policy, compute_old_policy_log_prob); this controller was built without them");
      }
    }
    const std::vector<std::string> overrides = to_overrides(config_);
    auto actor_ready = actor_.template call<&ActorWorker::init_model>(overrides, total_steps_);
    if constexpr (can_roll_out_apart) {
      if (rollout_) rollout_->template call<&RolloutWorkerType::init_model>(overrides).get();
    }
    if constexpr (has_critic) critic_->template call<&CriticWorker::init_model>(overrides, total_steps_).get();
    if constexpr (can_score_with_a_model) {
      if (reward_model_) reward_model_->template call<&RewardModelWorker::init_model>(overrides).get();
    }
    actor_ready.get();
  }


 public:
  /// Adds a metrics backend of the caller's type (any MetricsLogger) beside trainer.logger's.
  template <class L>
  void add_logger(L logger) {
    auto shared = std::make_shared<L>(std::move(logger));
    extra_loggers_.push_back([shared](Tracking& tracking) { tracking.add(std::move(*shared)); });
  }

  // ---- the program ----------------------------------------------------------------------------

  /// verl's fit(): resume, validate before training, then step until total_training_steps (or
  /// `stop_after_step`). Returns the metrics logged at each step.
  std::vector<Metrics> fit(std::optional<std::int64_t> stop_after_step = std::nullopt, std::ostream& console = std::cout) {
    console_ = &console;
    require_writable_outputs(config_.trainer, config_.trainer.save_freq > 0);
    const bool resumed = resume();
    Tracking tracking =
        trainer::tracking(config_.trainer, total_steps_, resumed ? std::optional<std::int64_t>(global_step_) : std::nullopt, console);
    for (const auto& attach : extra_loggers_) attach(tracking);
    extra_loggers_.clear();
    std::vector<Metrics> history;
    if (!val_.samples().empty() && config_.trainer.val_before_train) {
      history.push_back(validate());
      tracking.log(history.back(), global_step_);
      if (config_.trainer.val_only) return history;
    }
    while (global_step_ < total_steps_ && (!stop_after_step || global_step_ < *stop_after_step)) {
      history.push_back(step());
      tracking.log(history.back(), global_step_);
    }
    if (rollout_queue_) rollout_queue_->drain();  // generations sent ahead: awaited, not trained on
    await_weights_loaded();
    return history;
  }

  /// One iteration of verl's training loop; returns its metrics (not logged). The program of
  /// HybridFlow's Figure: every model computation is a call on a worker group.
  Metrics step() {
    if constexpr (can_run_separate_async) {
      if (separate_async_) return separate_async_step();
    }
    ++global_step_;
    TimingRaw timing;
    Metrics metrics;
    data::DataProto batch;
    {
      ScopedTimer step_timer("step", timing);
      batch = collect_batch(timing, metrics);  // generate_sequences, the reward, dynamic sampling
      if (config_.trainer.balance_batch) merge(metrics, balance_batch(batch, static_cast<int>(actor_.dp_size())));
      const StepPlan plan = plan_step(batch.size());
      forward_passes(batch, plan, timing, metrics);  // compute_log_prob, compute_ref_log_prob, compute_values
      {
        ScopedTimer t("adv", timing);
        if (algorithm_.rollout.compare && !algorithm_.rollout.bypass) correct_for_the_rollout(batch, algorithm_, metrics);
        compute_advantages(batch, metrics);
      }
      last_batch_ = batch;
      updates(batch, plan, timing, metrics);  // update_critic, update_actor
      after_updates(batch, timing, metrics);  // dumps, validation, checkpoint
    }
    step_metrics(batch, timing, metrics);
    return metrics;
  }

  /// Generates for every validation prompt with val_kwargs and scores the responses:
  /// val-core/<data_source>/reward/mean@N (acc when the reward function reports it) and val-aux/*.
  Metrics validate() {
    sync_rollout_weights();
    const auto& kw = config_.actor_rollout_ref.rollout.val_kwargs;
    rollout::SamplingParams params = sampling_params();
    params.n = kw.n;
    params.temperature = kw.do_sample ? static_cast<float>(kw.temperature) : 0.0f;
    params.top_k = kw.top_k;
    params.top_p = static_cast<float>(kw.top_p);
    std::vector<std::string> sources, uids;
    std::vector<double> scores, accs;
    std::vector<Generation> generations;
    bool any_acc = false;
    const auto size = val_.size();
    const std::int64_t chunk = config_.data.val_batch_size.value_or(size);
    VERL_CHECK_ARG(chunk > 0, "data.val_batch_size: expected a positive size, got {}", chunk);
    for (std::int64_t begin = 0; begin < size; begin += chunk) {
      std::vector<std::int64_t> indices;
      for (std::int64_t i = begin; i < std::min(size, begin + chunk); ++i) indices.push_back(i);
      // Validation prompts keep their own seeds whatever the step, so runs compare alike.
      const data::DataProto part = generate(val_, indices, params, validation_seed_base(), begin);
      const auto& samples = part.non_tensor<std::int64_t>(keys::index);
      const std::vector<reward::RewardOutput> outputs = reward_outputs(val_, part);
      for (Index r = 0; r < part.size(); ++r) {
        const auto& sample = val_[samples[static_cast<std::size_t>(r)]];
        const reward::RewardOutput& out = outputs[static_cast<std::size_t>(r)];
        sources.push_back(sample.row.data_source);
        uids.push_back(std::to_string(samples[static_cast<std::size_t>(r)]));
        scores.push_back(out.score);
        accs.push_back(out.acc ? (*out.acc ? 1.0 : 0.0) : out.score);
        any_acc = any_acc || out.acc.has_value();
        generations.push_back({tokenizer_.decode(sample.prompt_ids), response_text(part, r), sample.row.ground_truth_text(),
                               out.score});
      }
    }
    if (config_.trainer.validation_data_dir) dump_generations(generations, *config_.trainer.validation_data_dir, global_step_);
    log_val_generations(std::move(generations), config_.trainer.log_val_generations, global_step_, *console_);
    ValidationInfos infos;
    infos["reward"] = scores;
    if (any_acc) infos["acc"] = accs;
    return validation_metrics(sources, uids, infos);
  }

  // ---- checkpoints ----------------------------------------------------------------------------

  /// Writes global_step_<N> atomically: each role's state comes from its group's first rank, the
  /// data position and the KL controller from here.
  void save_checkpoint() {
    auto actor_state = actor_.template call<&ActorWorker::checkpoint_state>();
    std::optional<RoleState> critic;
    if constexpr (has_critic) critic.emplace(detail::first_rank_result(critic_->template call<&CriticWorker::checkpoint_state>().get()));
    const RoleState actor = detail::first_rank_result(actor_state.get());
    CheckpointSnapshot snapshot;
    snapshot.global_step = global_step_;
    snapshot.roles["actor"] = actor.snapshot();
    if (critic) snapshot.roles["critic"] = critic->snapshot();
    snapshot.data = loader_.state();
    snapshot.extra = {{"kl_coef", algo::kl_coefficient(kl_ctrl_)}, {"next_uid", next_uid_}};
    if constexpr (can_run_separate_async) {
      if (rollout_queue_) snapshot.files[std::string(separate_async_file)] = separate_async_state();
    }
    checkpoints_.save(snapshot);
  }

  /// Restores a checkpoint folder written by save_checkpoint() (or the in-process trainer's).
  void load_checkpoint(const std::filesystem::path& folder) {
    const LoadedCheckpoint loaded = CheckpointManager::load(folder);
    VERL_CHECK_ARG(loaded.data.has_value(),
                   "checkpoint '{}': no data.json (the data loader's position); a damaged checkpoint is not resumed",
                   folder.string());
    auto actor = actor_.template call<&ActorWorker::load_checkpoint_state>(RoleState::from(loaded.role("actor"), "actor"));
    if constexpr (has_critic) {
      critic_->template call<&CriticWorker::load_checkpoint_state>(RoleState::from(loaded.role("critic"), "critic")).get();
    }
    actor.get();
    rollout_weights_stale_ = true;
    loader_.load_state(*loaded.data);
    global_step_ = loaded.global_step;
    const double kl_coef = loaded.extra.value("kl_coef", algo::kl_coefficient(kl_ctrl_));
    std::visit([&](auto& controller) { controller.value = kl_coef; }, kl_ctrl_);
    next_uid_ = loaded.extra.value("next_uid", next_uid_);
    const auto in_flight = loaded.files.find(std::string(separate_async_file));
    VERL_CHECK_ARG(in_flight == loaded.files.end() || separate_async_,
                   "trainer.v1.trainer_mode: checkpoint '{}' holds separate_async's generations in flight, which trainer_mode={} "
                   "would drop; expected separate_async",
                   folder.string(), config_.trainer.v1.trainer_mode);
    if constexpr (can_run_separate_async) {
      if (in_flight != loaded.files.end()) restore_separate_async_state(in_flight->second, folder);
    }
  }

  /// trainer.resume_mode: resumes from the latest (auto) or the given (resume_path) checkpoint.
  bool resume() {
    const auto folder = checkpoints_.resume_folder(config_.trainer.resume_mode, config_.trainer.resume_from_path);
    if (!folder) {
      if (config_.trainer.resume_mode == ResumeMode::automatic) {
        *console_ << fmt::format("trainer.resume_mode=auto: no checkpoint in '{}'; training from scratch\n",
                                 config_.trainer.default_local_dir);
      }
      return false;
    }
    load_checkpoint(*folder);
    return true;
  }

  /// Writes the trained actor as a Hugging Face folder (and a LoRA adapter beside it).
  std::string export_actor(const std::filesystem::path& folder, const std::filesystem::path& adapter_folder) {
    return detail::first_rank_result(
        actor_.template call<&ActorWorker::export_actor>(folder.string(), adapter_folder.string()).get());
  }

  // ---- access ---------------------------------------------------------------------------------
  [[nodiscard]] const PPOConfig& config() const { return config_; }
  [[nodiscard]] const hybridflow::RolePlacement& placement() const { return placement_; }
  [[nodiscard]] const PPOAlgorithm& algorithm() const { return algorithm_; }
  [[nodiscard]] std::int64_t global_step() const { return global_step_; }
  [[nodiscard]] std::int64_t total_training_steps() const { return total_steps_; }
  [[nodiscard]] double kl_coefficient() const { return algo::kl_coefficient(kl_ctrl_); }
  [[nodiscard]] ActorGroup& actor_group() { return actor_; }
  [[nodiscard]] const ActorGroup& actor_group() const { return actor_; }
  [[nodiscard]] CriticGroup& critic_group()
    requires has_critic
  {
    return *critic_;
  }
  [[nodiscard]] const CriticGroup& critic_group() const
    requires has_critic
  {
    return *critic_;
  }
  /// The last step's batch (after dynamic sampling and balancing) with its log-probs, values and
  /// advantages, for inspection.
  [[nodiscard]] const data::DataProto& last_batch() const { return last_batch_; }

 private:
  static void merge(Metrics& into, const Metrics& from) {
    for (const auto& [k, v] : from) into[k] = v;
  }

  // ---- the step's stages --------------------------------------------------------------------

  /// What a step computes, decided from the batch and the configuration.
  struct StepPlan {
    bool actor_updates = true;      ///< past trainer.critic_warmup
    bool fold_old_log_prob = false; ///< the update's own forward gives the old log-probs (and actor/entropy)
    bool old_policy_saved = false;  ///< separate_async: the old log-probs come from the step's saved pi_old
  };

  StepPlan plan_step(Index rows) const {
    StepPlan plan;
    plan.actor_updates = config_.trainer.critic_warmup <= global_step_;
    // As the in-process trainer: on-policy, the update's own forward gives the old log-probs
    // (detached) and actor/entropy, so the separate pass runs only when something reads them first;
    // in bypass mode the rollout's log-probs stand in for them.
    plan.fold_old_log_prob = algorithm_.rollout.bypass ||
                             (plan.actor_updates && actor_on_policy(rows) && !config_.algorithm.use_kl_in_reward &&
                              !algorithm_.rollout.compare && !config_.actor_rollout_ref.actor.calculate_sum_pi_squared);
    return plan;
  }

  /// The forward passes, issued together: colocated roles run one after another on their ranks, a
  /// critic on its own pool at the same time (each timer measures the wait for its result after
  /// the ones before it).
  void forward_passes(data::DataProto& batch, const StepPlan& plan, TimingRaw& timing, Metrics& metrics) {
    if (algorithm_.rollout.bypass) batch.set(std::string(keys::old_log_probs), float_column(batch, keys::rollout_log_probs));
    const data::DataProto sequences = sequence_columns(batch);
    std::optional<Future<data::DataProto>> old, ref, values;
    if (plan.old_policy_saved) {
      if constexpr (can_run_separate_async)
        old.emplace(actor_.template call<&ActorWorker::compute_old_policy_log_prob>(sequences));
    } else if (!plan.fold_old_log_prob) {
      old.emplace(actor_.template call<&ActorWorker::compute_log_prob>(sequences));
    }
    if (algorithm_.needs_reference()) ref.emplace(actor_.template call<&ActorWorker::compute_ref_log_prob>(sequences));
    if constexpr (has_critic) values.emplace(critic_->template call<&CriticWorker::compute_values>(sequences));
    if (old) {
      ScopedTimer t("old_log_prob", timing);
      add_old_log_probs(batch, old->get(), algorithm_, metrics);
      if (algorithm_.rollout.compare) add_rollout_probs_diff_metrics(batch, metrics);
    }
    if (ref) {
      ScopedTimer t("ref", timing);
      batch.union_with(ref->get());
    }
    if (values) {
      ScopedTimer t("values", timing);
      batch.union_with(values->get());
    }
  }

  /// The critic's update, then the actor's (from trainer.critic_warmup on).
  void updates(const data::DataProto& batch, const StepPlan& plan, TimingRaw& timing, Metrics& metrics) {
    update_models(batch, plan, timing, metrics);
    skip_nonfinite_step(metrics);
  }

  void update_models(const data::DataProto& batch, const StepPlan& plan, TimingRaw& timing, Metrics& metrics) {
    if constexpr (has_critic) {
      ScopedTimer t("update_critic", timing);
      absorb_update(critic_->template call<&CriticWorker::update_critic>(critic_update_batch(batch)).get(), metrics);
    }
    if (plan.actor_updates) {
      ScopedTimer t("update_actor", timing);
      absorb_update(
          actor_.template call<&ActorWorker::update_actor>(actor_update_batch(batch, plan.fold_old_log_prob)).get(), metrics);
      rollout_weights_stale_ = true;
    }
  }

  /// trainer.rollout_data_dir's dump, validation every trainer.test_freq steps, a checkpoint every
  /// trainer.save_freq steps (and both after the last step).
  void after_updates(const data::DataProto& batch, TimingRaw& timing, Metrics& metrics) {
    const bool last_step = global_step_ >= total_steps_;
    if (config_.trainer.rollout_data_dir) {
      ScopedTimer t("dump_rollout_generations", timing);
      std::vector<Generation> generations;
      const auto& samples = batch.non_tensor<std::int64_t>(keys::index);
      const MatrixF& scores = float_column(batch, keys::token_level_scores);
      for (Index r = 0; r < batch.size(); ++r) {
        const auto& sample = train_[samples[static_cast<std::size_t>(r)]];
        generations.push_back({tokenizer_.decode(sample.prompt_ids), response_text(batch, r), sample.row.ground_truth_text(),
                               static_cast<double>(scores.row(r).sum())});
      }
      dump_generations(generations, *config_.trainer.rollout_data_dir, global_step_);
    }
    if (!val_.samples().empty() && config_.trainer.test_freq > 0 &&
        (last_step || global_step_ % config_.trainer.test_freq == 0)) {
      ScopedTimer t("testing", timing);
      merge(metrics, validate());
    }
    if (config_.trainer.save_freq > 0 && (last_step || global_step_ % config_.trainer.save_freq == 0)) {
      ScopedTimer t("save_checkpoint", timing);
      save_checkpoint();
    }
  }

  /// verl's compute_data_metrics, compute_timing_metrics and compute_throughout_metrics.
  void step_metrics(const data::DataProto& batch, const TimingRaw& timing, Metrics& metrics) const {
    merge(metrics, data_metrics_of(batch));
    const TokenCounts tokens =
        count_tokens(float_column(batch, keys::attention_mask), float_column(batch, keys::response_mask).cols());
    merge(metrics, compute_timing_metrics(tokens, timing));
    merge(metrics, compute_throughout_metrics(tokens.overall(), timing, runtime_->world_size()));
    metrics["training/global_step"] = static_cast<double>(global_step_);
    metrics["training/epoch"] = static_cast<double>(loader_.epoch());
  }

  // ---- setup ----------------------------------------------------------------------------------

  /// Keys verl acts on that verl-cpp accepts but does not act on: said once, not silently ignored.
  void warn_unused_keys() const {
    const auto& a = config_.actor_rollout_ref;
    // Dynamic batch sizes only regroup micro-batches; with GlobalBatchInfo the update does not
    // depend on the micro-batches, so these change speed in verl, not results.
    const std::pair<bool, std::string_view> unused[] = {
        {config_.trainer.del_local_ckpt_after_load,
         "trainer.del_local_ckpt_after_load=True (checkpoints are kept after loading)"},
        {a.actor.use_dynamic_bsz, "actor_rollout_ref.actor.use_dynamic_bsz=True (micro-batches follow ppo_micro_batch_size_per_gpu)"},
        {a.ref.log_prob_use_dynamic_bsz,
         "actor_rollout_ref.ref.log_prob_use_dynamic_bsz=True (micro-batches follow log_prob_micro_batch_size_per_gpu)"},
        {a.rollout.log_prob_use_dynamic_bsz,
         "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=True (micro-batches follow log_prob_micro_batch_size_per_gpu)"},
        {config_.critic.use_dynamic_bsz, "critic.use_dynamic_bsz=True (micro-batches follow ppo_micro_batch_size_per_gpu)"},
    };
    for (const auto& [set, what] : unused)
      if (set) std::cerr << "warning: " << what << " has no effect in verl-cpp\n";
  }


  void validate_setup() {
    const auto& actor = config_.actor_rollout_ref.actor;
    const std::int64_t dp = actor_.dp_size();
    if (std::same_as<Reward, reward::DefaultRewardFunction> && !scores_with_a_model()) {
      for (const auto& [key, dataset] : {std::pair<std::string_view, const data::RLHFDataset*>{"data.train_files", &train_},
                                         {"data.val_files", &val_}}) {
        for (const auto& sample : dataset->samples()) {
          VERL_CHECK_ARG(!sample.row.reward_model.ground_truth.is_null(),
                         "{}: {}: the row has no reward_model.ground_truth, which the rule-based reward of data_source "
                         "'{}' compares with",
                         key, sample.source.to_string(), sample.row.data_source);
        }
      }
    }
    VERL_CHECK_ARG(train_.size() > 0, "data.train_files: expected at least one usable prompt, got none");
    const std::int64_t batch = config_.data.train_batch_size;
    VERL_CHECK_ARG(actor.ppo_mini_batch_size >= 1 && actor.ppo_mini_batch_size <= batch,
                   "actor_rollout_ref.actor.ppo_mini_batch_size: expected a value in [1, data.train_batch_size = {}], "
                   "got {}",
                   batch, actor.ppo_mini_batch_size);
    VERL_CHECK_ARG(actor.ppo_epochs >= 1, "actor_rollout_ref.actor.ppo_epochs: expected >= 1, got {}", actor.ppo_epochs);
    const std::int64_t gen = config_.data.gen_batch_size.value_or(batch);
    VERL_CHECK_ARG(gen % dp == 0 && batch % dp == 0,
                   "data.train_batch_size / data.gen_batch_size: expected multiples of the actor's {} data-parallel ranks "
                   "(trainer.nnodes x trainer.n_gpus_per_node), got {} / {}",
                   dp, batch, gen);
    VERL_CHECK_ARG((actor.ppo_mini_batch_size * config_.actor_rollout_ref.rollout.n) % dp == 0,
                   "actor_rollout_ref.actor.ppo_mini_batch_size: {} prompts x rollout.n {} must split evenly over {} "
                   "ranks",
                   actor.ppo_mini_batch_size, config_.actor_rollout_ref.rollout.n, dp);
    VERL_CHECK_ARG(algorithm_.filter_groups || gen == batch,
                   "data.gen_batch_size: {} differs from data.train_batch_size {}, which only dynamic sampling "
                   "(algorithm.filter_groups.enable=True) uses",
                   gen, batch);
    if constexpr (has_critic) {
      const auto& critic = config_.critic;
      VERL_CHECK_ARG(critic.ppo_mini_batch_size >= 1 && critic.ppo_mini_batch_size <= batch,
                     "critic.ppo_mini_batch_size: expected a value in [1, data.train_batch_size = {}], got {}", batch,
                     critic.ppo_mini_batch_size);
      const std::int64_t critic_dp = critic_->dp_size();
      VERL_CHECK_ARG(batch * config_.actor_rollout_ref.rollout.n % critic_dp == 0 &&
                         critic.ppo_mini_batch_size * config_.actor_rollout_ref.rollout.n % critic_dp == 0,
                     "critic.ppo_mini_batch_size / data.train_batch_size: {} / {} prompts x rollout.n {} must split evenly "
                     "over the critic's {} ranks",
                     critic.ppo_mini_batch_size, batch, config_.actor_rollout_ref.rollout.n, critic_dp);
    }
  }

  // ---- separate_async (trainer.v1.trainer_mode=separate_async) ---------------------------------

  /// A generate_sequences call in flight on the rollout pool, and how its answer becomes rows.
  struct PendingRows {
    std::shared_ptr<Future<data::DataProto>> future;
    GenerationRequest request;
    std::optional<data::DataProto> rows;  ///< the answer once settled (or restored from a checkpoint)

    data::DataProto get() {
      settle();
      data::DataProto out = std::move(*rows);
      rows.reset();
      return out;
    }
    /// Waits for the answer and keeps it.
    const data::DataProto& settle() {
      if (!rows) {
        rows = generated_rows(future->get(), request);
        future.reset();
      }
      return *rows;
    }
  };

  static constexpr std::string_view separate_async_file = "separate_async_in_flight.bin";

  RolloutQueue<PendingRows> make_rollout_queue() {
    return RolloutQueue<PendingRows>(
        *separate_async_, [this] { return next_indices(); },
        [this](std::span<const std::int64_t> indices, std::uint64_t seed, std::int64_t first) {
          return send_generation(indices, seed, first);
        },
        [this](std::int64_t step, std::int64_t k) { return generation_round_seed(config_.data, step, k); });
  }

  /// The generations in flight, settled (a checkpoint waits for them: resuming then trains on the
  /// very samples the uninterrupted run trains on), and the queue's place in the prompt stream.
  std::vector<std::byte> separate_async_state() {
    hybridflow::WireWriter w;
    const auto position = rollout_queue_->position();
    hybridflow::write(w, position.prompts);
    hybridflow::write(w, position.seeding_step);
    hybridflow::write(w, position.sent_this_step);
    hybridflow::write(w, static_cast<std::int64_t>(rollout_queue_->chunks().size()));
    for (auto& chunk : rollout_queue_->chunks()) {
      hybridflow::write(w, chunk.indices);
      hybridflow::write(w, chunk.sent_at_step);
      hybridflow::write(w, chunk.weight_version);
      hybridflow::write(w, static_cast<std::int64_t>(chunk.seed));
      hybridflow::write(w, chunk.first);
      hybridflow::write(w, chunk.pending.settle());
    }
    const hybridflow::Bytes bytes = w.take();
    return std::vector<std::byte>(bytes.begin(), bytes.end());
  }

  void restore_separate_async_state(const std::vector<std::byte>& bytes, const std::filesystem::path& folder) {
    try {
      hybridflow::WireReader r(bytes);
      typename RolloutQueue<PendingRows>::Position position;
      position.prompts = hybridflow::read<std::vector<std::int64_t>>(r);
      position.seeding_step = hybridflow::read<std::int64_t>(r);
      position.sent_this_step = hybridflow::read<std::int64_t>(r);
      const auto count = hybridflow::read<std::int64_t>(r);
      VERL_CHECK_ARG(count >= 0 && count <= 1'000'000, "expected a chunk count, got {}", count);
      std::deque<RolloutChunk<PendingRows>> chunks;
      for (std::int64_t c = 0; c < count; ++c) {
        RolloutChunk<PendingRows> chunk;
        chunk.indices = hybridflow::read<std::vector<std::int64_t>>(r);
        chunk.sent_at_step = hybridflow::read<std::int64_t>(r);
        chunk.weight_version = hybridflow::read<std::int64_t>(r);
        chunk.seed = static_cast<std::uint64_t>(hybridflow::read<std::int64_t>(r));
        chunk.first = hybridflow::read<std::int64_t>(r);
        chunk.pending.rows = hybridflow::read<data::DataProto>(r);
        for (const std::int64_t i : chunk.indices)
          VERL_CHECK_ARG(i >= 0 && i < static_cast<std::int64_t>(train_.size()), "a prompt index {} outside the {} training prompts",
                         i, train_.size());
        chunks.push_back(std::move(chunk));
      }
      VERL_CHECK_ARG(r.remaining() == 0, "{} bytes left over after the last chunk", r.remaining());
      rollout_queue_.emplace(make_rollout_queue());
      rollout_queue_->restore(std::move(chunks), position);
    } catch (const std::exception& error) {
      ::verl::detail::throw_invalid_argument("checkpoint file '{}': {} (a damaged checkpoint is not resumed)",
                                             (folder / separate_async_file).string(), error.what());
    }
  }

  /// verl's separate_async step: one batch of prompts sent to the rollout pool (beside the ones
  /// sent earlier), then parameter_sync_step mini-batches, each trained as soon as the rollout
  /// has it (gen: the wait), with its old log-probs from the step's saved pi_old; then the actor's
  /// weights are sent to the rollout pool, behind the generations already queued there.
  Metrics separate_async_step() {
    ++global_step_;
    TimingRaw timing;
    Metrics metrics;
    data::DataProto batch;
    const SeparateAsyncSettings& settings = *separate_async_;
    const std::int64_t version = global_step_ - 1;  // one weight sync per step: the actor now holds step - 1's
    {
      ScopedTimer step_timer("step", timing);
      if (rollout_weights_stale_) {
        ScopedTimer t("update_weights", timing);
        send_weights_to_rollout(version);
      }
      if (!rollout_queue_) {
        rollout_queue_.emplace(make_rollout_queue());
        rollout_queue_->send_warmup(global_step_, rollout_weight_version_);
      }
      rollout_queue_->send_batch(global_step_, rollout_weight_version_);
      if (!algorithm_.rollout.bypass) {
        ScopedTimer t("old_log_prob", timing);
        actor_.template call<&ActorWorker::save_old_policy>().get();
      }
      MetricsAggregator per_update;
      Evictions evictions;
      std::vector<std::int64_t> min_versions, max_versions;
      for (std::int64_t update = 0; update < settings.parameter_sync_step; ++update) {
        Metrics m;
        data::DataProto part = take_generated(timing, evictions, version);
        const auto& lo = part.non_tensor<std::int64_t>(keys::min_global_steps);
        const auto& hi = part.non_tensor<std::int64_t>(keys::max_global_steps);
        min_versions.insert(min_versions.end(), lo.begin(), lo.end());
        max_versions.insert(max_versions.end(), hi.begin(), hi.end());
        {
          ScopedTimer t("reward", timing);
          compute_rewards(part, m);
        }
        if (config_.trainer.balance_batch) merge(m, balance_batch(part, static_cast<int>(actor_.dp_size())));
        StepPlan plan = plan_step(part.size());
        plan.fold_old_log_prob = algorithm_.rollout.bypass;
        plan.old_policy_saved = !algorithm_.rollout.bypass;
        forward_passes(part, plan, timing, m);
        {
          ScopedTimer t("adv", timing);
          if (algorithm_.rollout.compare && !algorithm_.rollout.bypass) correct_for_the_rollout(part, algorithm_, m);
          compute_advantages(part, m);
        }
        update_models(part, plan, timing, m);
        per_update.add(m, part.size());
        batch = append_rows(std::move(batch), std::move(part));
      }
      metrics = per_update.aggregated();
      skip_nonfinite_step(metrics);
      evictions.add_to(metrics);
      merge(metrics, trajectory_staleness_metrics(min_versions, max_versions, global_step_));
      last_batch_ = batch;
      if (rollout_weights_stale_) {
        ScopedTimer t("update_weights", timing);
        send_weights_to_rollout(global_step_);
      }
      after_updates(batch, timing, metrics);  // dumps, validation (queued behind the generations), checkpoint
    }
    step_metrics(batch, timing, metrics);
    return metrics;
  }

  /// Waits for the last load_weights sent to the rollout pool (if any is still unanswered).
  void await_weights_loaded() {
    if (!await_weights_loading_) return;
    auto wait = std::move(await_weights_loading_);
    await_weights_loading_ = nullptr;
    wait();
  }

  /// Sends dataset[indices] to the rollout pool (generate_sequences), without waiting.
  PendingRows send_generation(std::span<const std::int64_t> indices, std::uint64_t seed, std::int64_t first) {
    GenerationRequest request =
        generation_request(train_, indices, sampling_params(), seed, first, rollout_->dp_size(), tokenizer_.pad_token_id);
    auto future = std::make_shared<Future<data::DataProto>>(
        rollout_->template call<&RolloutWorkerType::generate_sequences>(request.prompts));
    return PendingRows{std::move(future), std::move(request), std::nullopt};
  }

  /// The next mini-batch of generations to train on (stale ones dropped and replaced), with
  /// verl's uid per prompt; checks that the rollout generated it with the weights it was sent
  /// behind. `version`: the weights the actor holds at the step's start.
  data::DataProto take_generated(TimingRaw& timing, Evictions& evictions, std::int64_t version) {
    ScopedTimer t("gen", timing);
    auto chunk = rollout_queue_->take(global_step_, rollout_weight_version_, evictions);
    data::DataProto part = chunk.pending.get();
    for (const auto& column : {keys::min_global_steps, keys::max_global_steps}) {
      for (const std::int64_t v : part.non_tensor<std::int64_t>(column)) {
        VERL_CHECK_ARG(v == chunk.weight_version && v <= version,
                       "separate_async: step {}: a generation sent at step {} behind the weights of step {} came back "
                       "with {} = {} (the rollout pool ran its calls out of order)",
                       global_step_, chunk.sent_at_step, chunk.weight_version, column, v);
      }
    }
    const Index n = sampling_params().n;
    std::vector<std::int64_t> uid;
    for (Index r = 0; r < part.size(); ++r) uid.push_back(next_uid_ + r / n);
    part.set_non_tensor(std::string(keys::uid), std::move(uid));
    next_uid_ += static_cast<std::int64_t>(chunk.indices.size());
    return part;
  }

  /// The actor's weights to the rollout pool as `version`, queued behind what the pool already
  /// has to generate (calls run there in order); waits only for the previous load to be done.
  void send_weights_to_rollout(std::int64_t version) {
    if constexpr (can_roll_out_apart) {
      await_weights_loaded();
      const PolicyWeights weights = detail::first_rank_result(actor_.template call<&ActorWorker::actor_weights>().get());
      auto loading = std::make_shared<decltype(rollout_->template call<&RolloutWorkerType::load_weights>(weights, version))>(
          rollout_->template call<&RolloutWorkerType::load_weights>(weights, version));
      await_weights_loading_ = [loading] { loading->get(); };
      rollout_weight_version_ = version;
      rollout_weights_stale_ = false;
    }
  }

  // ---- generation and reward ------------------------------------------------------------------

  rollout::SamplingParams sampling_params() const { return rollout_sampling_params(config_, tokenizer_); }

  std::uint64_t seed_base() const { return data_seed(config_.data); }
  std::uint64_t validation_seed_base() const { return rollout::derive_seed(seed_base(), 0x7661'6c69'6461'7465ULL); }

  /// Generates for dataset[indices] on the actor group (generate_sequences: each rank its
  /// contiguous share of the prompts). Prompt k of the call draws from seed (base, first + k).
  data::DataProto generate(const data::RLHFDataset& dataset, std::span<const std::int64_t> indices,
                           const rollout::SamplingParams& params, std::uint64_t seed_base, std::int64_t first) {
    if constexpr (can_roll_out_apart) {
      if (rollout_) {
        VERL_CHECK_ARG(!rollout_weights_stale_, "generate: the rollout pool's weights are older than the actor's");
        return generate_sequences<RolloutWorkerType>(*rollout_, dataset, indices, params, seed_base, first,
                                                     tokenizer_.pad_token_id);
      }
    }
    return generate_sequences<ActorWorker>(actor_, dataset, indices, params, seed_base, first, tokenizer_.pad_token_id);
  }

  [[nodiscard]] bool rollout_present() const { return rollout_.has_value(); }

  /// With a rollout pool of its own: the actor's weights replace the rollout's when the actor
  /// changed since (verl's weight update from the trainer to a separated rollout).
  void sync_rollout_weights() {
    if constexpr (can_roll_out_apart) {
      if (!rollout_ || !rollout_weights_stale_) return;
      const PolicyWeights weights = detail::first_rank_result(actor_.template call<&ActorWorker::actor_weights>().get());
      rollout_->template call<&RolloutWorkerType::load_weights>(weights, global_step_).get();
      rollout_weight_version_ = global_step_;
      rollout_weights_stale_ = false;
    }
  }

  std::string response_text(const data::DataProto& batch, Index row) const {
    return trainer::response_text(batch, row, tokenizer_);
  }

  bool scores_with_a_model() const { return config_.reward.reward_model.enable; }

  /// Every row's reward: the reward model's score (verl's compute_rm_score; with a reward model,
  /// verl's reward manager returns its rm_scores as the reward) or the reward function's result.
  std::vector<reward::RewardOutput> reward_outputs(const data::RLHFDataset& dataset, const data::DataProto& batch) {
    std::vector<reward::RewardOutput> out(static_cast<std::size_t>(batch.size()));
    if (scores_with_a_model()) {
      if constexpr (can_score_with_a_model) {
        const data::DataProto scored =
            reward_model_->template call<&RewardModelWorker::compute_rm_score>(sequence_columns(batch)).get();
        const MatrixF& rm_scores = float_column(scored, keys::rm_scores);
        for (Index r = 0; r < batch.size(); ++r) out[static_cast<std::size_t>(r)].score = rm_scores.row(r).sum();
      }
      return out;
    }
    return rule_reward_outputs(reward_fn_, dataset, batch, tokenizer_);
  }

  /// verl's reward manager: the score at the last valid response token (naive), plus DAPO's
  /// overlong penalty when configured; the reward function's whole result is kept per row.
  void compute_rewards(data::DataProto& batch, Metrics& metrics) {
    const MatrixF& response_mask = float_column(batch, keys::response_mask);
    const Index rows = batch.size(), width = response_mask.cols();
    MatrixF scores = MatrixF::Zero(rows, width);
    std::vector<nlohmann::json> outputs;
    const std::vector<reward::RewardOutput> results = reward_outputs(train_, batch);
    double overlong_total = 0;
    for (Index r = 0; r < rows; ++r) {
      const reward::RewardOutput& out = results[static_cast<std::size_t>(r)];
      const auto length = static_cast<Index>(response_mask.row(r).sum());
      double reward = out.score;
      if (algorithm_.overlong_penalty) {
        const auto& p = *algorithm_.overlong_penalty;
        const double expected = static_cast<double>(config_.data.max_response_length - p.buffer_length);
        const double exceed = static_cast<double>(length) - expected;
        const double penalty = std::min(-exceed / static_cast<double>(p.buffer_length) * p.penalty_factor, 0.0);
        reward += penalty;
        overlong_total += penalty;
      }
      if (length > 0) scores(r, length - 1) = static_cast<float>(reward);
      outputs.push_back(to_json(out));
    }
    batch.set(std::string(keys::token_level_scores), std::move(scores));
    batch.set_non_tensor(std::string(keys::reward_output), std::move(outputs));
    if (algorithm_.overlong_penalty && algorithm_.overlong_penalty->log && rows > 0)
      metrics["reward/overlong_penalty/mean"] = overlong_total / static_cast<double>(rows);
  }

  std::vector<std::int64_t> next_indices() {
    auto batch = loader_.next();
    if (!batch) batch = loader_.next();  // the epoch ended: the loader stands at the next one
    VERL_CHECK_ARG(batch.has_value(), "train dataloader: no batch (dataset of {} samples, batch size {})",
                   loader_.dataset_size(), loader_.options().batch_size);
    return *batch;
  }

  /// `batch` with its sequence columns widened to `width` by left padding (masked: no model sees it).
  static data::DataProto widen_prompts(data::DataProto batch, Index width) {
    const Index current = int_column(batch, keys::input_ids).cols();
    if (current == width) return batch;
    const auto widen = [&](const auto& m) {
      std::remove_cvref_t<decltype(m)> out(m.rows(), width);
      out.leftCols(width - current).setZero();
      out.rightCols(current) = m;
      return out;
    };
    batch.set(std::string(keys::input_ids), widen(int_column(batch, keys::input_ids)));
    batch.set(std::string(keys::attention_mask), widen(float_column(batch, keys::attention_mask)));
    batch.set(std::string(keys::position_ids), widen(int_column(batch, keys::position_ids)));
    return batch;
  }

  /// `kept` followed by `part` (prompt widths may differ: the narrower is left-padded).
  static data::DataProto append_rows(data::DataProto kept, data::DataProto part) {
    if (kept.empty()) return part;
    const Index width = std::max(int_column(kept, keys::input_ids).cols(), int_column(part, keys::input_ids).cols());
    return data::DataProto::concat({widen_prompts(std::move(kept), width), widen_prompts(std::move(part), width)});
  }

  /// gen + reward, with ReMax's greedy baseline and DAPO's dynamic sampling when configured.
  data::DataProto collect_batch(TimingRaw& timing, Metrics& metrics) {
    if (rollout_weights_stale_ && rollout_present()) {
      ScopedTimer t("update_weights", timing);
      sync_rollout_weights();
    }
    const rollout::SamplingParams params = sampling_params();
    const Index n = params.n;
    const std::int64_t wanted = config_.data.train_batch_size;
    data::DataProto kept;
    std::int64_t kept_prompts = 0, rounds = 0;
    for (;;) {
      ++rounds;
      const std::vector<std::int64_t> indices = next_indices();
      const std::uint64_t round_seed = generation_round_seed(config_.data, global_step_, rounds);
      data::DataProto part;
      {
        ScopedTimer t("gen", timing);
        part = generate(train_, indices, params, round_seed, 0);
      }
      // What the rollout reports of itself (the Megatron worker's reshard: timing_s/reshard and
      // the bytes it moved and held), one value per collected rank at any dp: the per-rank
      // figure (detail::worker_meta_metrics).
      merge(metrics, detail::worker_meta_metrics(part.meta_info()));
      std::vector<std::int64_t> uid;
      for (Index r = 0; r < part.size(); ++r) uid.push_back(next_uid_ + r / n);
      part.set_non_tensor(std::string(keys::uid), std::move(uid));
      next_uid_ += static_cast<std::int64_t>(indices.size());
      if (algorithm_.estimator.needs_reward_baseline()) {
        ScopedTimer t("gen_max", timing);
        rollout::SamplingParams greedy = params;
        greedy.temperature = 0.0f;
        greedy.n = 1;
        data::DataProto baseline = generate(train_, indices, greedy, round_seed, 0);
        Metrics ignored;
        compute_rewards(baseline, ignored);
        const MatrixF& baseline_scores = float_column(baseline, keys::token_level_scores);
        MatrixF baselines(part.size(), 1);
        for (Index r = 0; r < part.size(); ++r) baselines(r, 0) = baseline_scores.row(r / n).sum();
        part.set(std::string(keys::reward_baselines), std::move(baselines));
      }
      {
        ScopedTimer t("reward", timing);
        compute_rewards(part, metrics);
      }
      if (!algorithm_.filter_groups) {
        kept = std::move(part);
        break;
      }
      // Dynamic sampling: keep the groups whose metric varies (or that have one response).
      const auto& filter = *algorithm_.filter_groups;
      const auto& outputs = part.non_tensor<nlohmann::json>(keys::reward_output);
      const MatrixF& scores = float_column(part, keys::token_level_scores);
      std::vector<Index> rows_kept;
      for (Index g = 0; g < part.size() / n; ++g) {
        double lo = 0, hi = 0;
        for (Index j = 0; j < n; ++j) {
          const Index r = g * n + j;
          const reward::RewardOutput out = reward_output_from_json(outputs[static_cast<std::size_t>(r)]);
          const double value = filter.metric == "acc" && out.acc ? (*out.acc ? 1.0 : 0.0)
                               : filter.metric == "score"        ? out.score
                                                                 : scores.row(r).sum();
          lo = j == 0 ? value : std::min(lo, value);
          hi = j == 0 ? value : std::max(hi, value);
        }
        if (hi > lo || n == 1) {
          for (Index j = 0; j < n; ++j) rows_kept.push_back(g * n + j);
          ++kept_prompts;
        }
      }
      kept = append_rows(std::move(kept), part.select_idxs(rows_kept));
      if (kept_prompts >= wanted) {
        kept = kept.slice(0, wanted * n);
        break;
      }
      VERL_CHECK_ARG(filter.max_num_gen_batches <= 0 || rounds < filter.max_num_gen_batches,
                     "algorithm.filter_groups.max_num_gen_batches: generated {} batches and kept {} of {} prompts; the "
                     "data is too easy or too hard (verl: 'Generated too many. Please check if your data are too "
                     "difficult.')",
                     rounds, kept_prompts, wanted);
    }
    metrics["train/num_gen_batches"] = static_cast<double>(rounds);
    return kept;
  }

  // ---- what each call sends -------------------------------------------------------------------

  data::DataProto actor_update_batch(const data::DataProto& batch, bool entropy_metric) const {
    data::DataProto out = trainer::actor_update_batch(
        batch, config_, algorithm_, actor_.dp_size(),
        !actor_on_policy(batch.size()) || algorithm_.rollout.bypass || separate_async_.has_value(), entropy_metric);
    if (separate_async_ && !algorithm_.rollout.bypass) out.meta_info()["old_policy_saved"] = true;
    return out;
  }

  data::DataProto critic_update_batch(const data::DataProto& batch) const {
    if constexpr (has_critic) {
      return trainer::critic_update_batch(batch, config_, critic_->dp_size());
    } else {
      return batch;
    }
  }

  /// verl's dp_actor `on_policy`: the actor's update is a single mini-batch over a single epoch.
  bool actor_on_policy(Index rows) const {
    const auto& cfg = config_.actor_rollout_ref.actor;
    return cfg.ppo_epochs == 1 && rows <= cfg.ppo_mini_batch_size * config_.actor_rollout_ref.rollout.n;
  }

  /// An update's metrics and its update counts.
  void absorb_update(const data::DataProto& result, Metrics& metrics) {
    const UpdateCounts counts = absorb_update_metrics(result, metrics);
    updates_this_step_ += counts.updates;
    nonfinite_updates_this_step_ += counts.nonfinite;
  }

  // ---- advantages -----------------------------------------------------------------------------

  void compute_advantages(data::DataProto& batch, Metrics& metrics) {
    batch.set(std::string(keys::token_level_rewards), token_level_rewards(batch, algorithm_, kl_ctrl_, metrics));
    const std::vector<std::int64_t>& uid = batch.non_tensor<std::int64_t>(keys::uid);
    algo::AdvantageBatch in{.token_level_rewards = float_column(batch, keys::token_level_rewards),
                            .response_mask = float_column(batch, keys::response_mask),
                            .index = uid};
    if constexpr (has_critic) in.values.emplace(float_column(batch, keys::values));
    VectorF baselines;
    if (algorithm_.estimator.needs_reward_baseline()) {
      baselines = float_column(batch, keys::reward_baselines).col(0);
      in.reward_baselines.emplace(baselines);
    }
    if (algorithm_.estimator.needs_old_log_probs()) {
      in.old_log_probs.emplace(float_column(batch, keys::old_log_probs));
      if (batch.has_tensor(keys::sum_pi_squared)) in.sum_pi_squared.emplace(float_column(batch, keys::sum_pi_squared));
      if (batch.has_tensor(keys::rollout_is_weights)) in.rollout_is_weights.emplace(float_column(batch, keys::rollout_is_weights));
    }
    algo::RewardComponents components;
    if (algorithm_.estimator.reads_reward_components()) {
      std::vector<reward::RewardOutput> outputs;
      for (const auto& j : batch.non_tensor<nlohmann::json>(keys::reward_output)) outputs.push_back(reward_output_from_json(j));
      components = reward_components(outputs, config_.algorithm.gdpo_reward_keys.value_or(std::vector<std::string>{}), metrics);
      in.reward_components = &components;
    }
    auto result = algorithm_.estimator.compute(in);
    MatrixF returns = result.returns_are_advantages() ? MatrixF(result.advantages) : std::move(result.returns());
    batch.set(std::string(keys::returns), std::move(returns));
    batch.set(std::string(keys::advantages), std::move(result.advantages));
  }

  /// After a step's updates: the count of skipped (non-finite) updates as a metric and a warning;
  /// trainer.max_consecutive_nonfinite_steps steps in a row whose every update was skipped end the
  /// run with an error (before anything is saved).
  void skip_nonfinite_step(Metrics& metrics) {
    metrics["training/nonfinite_updates_skipped"] = static_cast<double>(nonfinite_updates_this_step_);
    const bool all_skipped = updates_this_step_ > 0 && nonfinite_updates_this_step_ == updates_this_step_;
    if (nonfinite_updates_this_step_ > 0) {
      std::cerr << fmt::format(
          "warning: step {}: {} of {} optimizer updates had a non-finite gradient norm and were skipped\n",
          global_step_, nonfinite_updates_this_step_, updates_this_step_);
    }
    consecutive_nonfinite_steps_ = all_skipped ? consecutive_nonfinite_steps_ + 1 : 0;
    updates_this_step_ = nonfinite_updates_this_step_ = 0;
    const std::int64_t limit = config_.trainer.max_consecutive_nonfinite_steps;
    VERL_CHECK_ARG(consecutive_nonfinite_steps_ < limit,
                   "trainer.max_consecutive_nonfinite_steps: {} steps in a row (the last: step {}) had only "
                   "non-finite gradient norms (a NaN or inf loss, gradient or weight); stopping instead of "
                   "training on them (limit {})",
                   consecutive_nonfinite_steps_, global_step_, limit);
  }

  Runtime* runtime_;
  PPOConfig config_;
  hybridflow::RolePlacement placement_;
  PPOAlgorithm algorithm_;
  Reward reward_fn_;
  TokenizerHooks tokenizer_;
  data::RLHFDataset train_;
  data::RLHFDataset val_;
  data::DataLoader loader_;
  std::int64_t total_steps_;
  algo::AnyKLController kl_ctrl_;
  CheckpointManager checkpoints_;
  ActorGroup actor_;
  std::optional<CriticGroup> critic_;
  std::optional<RewardModelGroup> reward_model_;  ///< with reward.reward_model.enable
  std::optional<RolloutGroup> rollout_;           ///< with actor_rollout_ref.hybrid_engine=False
  bool rollout_weights_stale_ = true;             ///< the actor changed since the rollout's last load_weights
  std::int64_t rollout_weight_version_ = 0;       ///< the step of the weights last sent to the rollout pool
  std::optional<SeparateAsyncSettings> separate_async_;             ///< trainer.v1.trainer_mode=separate_async
  std::optional<RolloutQueue<PendingRows>> rollout_queue_;          ///< separate_async: prompts in flight
  std::function<void()> await_weights_loading_;                      ///< separate_async: the last load_weights sent
  std::int64_t global_step_ = 0;
  std::int64_t updates_this_step_ = 0;
  std::int64_t nonfinite_updates_this_step_ = 0;
  std::int64_t consecutive_nonfinite_steps_ = 0;
  std::int64_t next_uid_ = 0;
  data::DataProto last_batch_;
  std::vector<std::function<void(Tracking&)>> extra_loggers_;
  std::ostream* console_ = &std::cout;
};

}  // namespace verl::trainer
