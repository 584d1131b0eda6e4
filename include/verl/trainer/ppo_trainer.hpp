// PPOTrainer: verl's PPO dataflow (RayPPOTrainer.fit) for one process or a data-parallel group.
//
//   PPOTrainer<Policy, Critic = NoCritic, Reward = reward::DefaultRewardFunction,
//              Comm = parallel::SelfCommunicator>
//
// The roles are types (ppo_trainer_roles.hpp); the algorithm (advantage estimator, policy loss,
// aggregation, KL choices, dynamic sampling, overlong penalty) is a PPOAlgorithm value, made from
// verl's config names (PPOAlgorithm::from_config) or from compile-time recipes (recipes.hpp).
//
// One step, as verl's: generate rollout.n responses per prompt → reward (the score at the last
// valid response token) → [dynamic sampling: drop groups whose responses all score alike, refill
// from the next batches] → old log-probs (recomputed by the actor) → reference log-probs → values
// → KL in the reward (apply_kl_penalty, controller update) → advantages → critic update (its
// mini-batches and epochs) → actor update (from trainer.critic_warmup on): ppo_epochs over
// mini-batches of ppo_mini_batch_size prompts × n, each split into micro-batches whose gradients
// accumulate; losses are aggregated with GlobalBatchInfo (the mini-batch's token and row counts
// and the DP size), so the update does not depend on the micro-batch size; gradients are
// averaged over ranks, clipped (grad_clip), and AdamW steps with the scheduled learning rate.
// Validation every trainer.test_freq steps, checkpoints every trainer.save_freq steps, metrics
// with verl's names through Tracking; trainer.rollout_data_dir / validation_data_dir dump the
// generations as JSONL and trainer.log_val_generations prints validation samples.
//
// trainer.balance_batch (verl's _balance_batch) reorders the rows between reward and old log-probs
// so that every rank's contiguous share has about the same total sequence length.
//
// Data parallelism follows verl's DP dispatch: each rank generates and scores its contiguous
// share of the prompts and computes log-probs / values for its share of the rows; the shares are
// gathered so that every rank holds the whole batch (advantages then need no communication), and
// each mini-batch is split across ranks for the updates. A prompt's samples depend only on its
// seed (run seed, step, position in the global batch), so any number of ranks generates the same
// batch as one process.
#pragma once

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "verl/algo/advantages/registry.hpp"
#include "verl/algo/kl/controller.hpp"
#include "verl/algo/kl/registry.hpp"
#include "verl/algo/kl/rewards.hpp"
#include "verl/algo/loss_aggregation.hpp"
#include "verl/algo/policy_losses/registry.hpp"
#include "verl/algo/rollout_correction.hpp"
#include "verl/algo/value_loss.hpp"
#include "verl/core/error.hpp"
#include "verl/core/finite.hpp"
#include "verl/core/metrics.hpp"
#include "verl/core/tensor.hpp"
#include "verl/cpu/decode_precision.hpp"
#include "verl/data/dataloader.hpp"
#include "verl/data/random_permutation.hpp"
#include "verl/data/rl_dataset.hpp"
#include "verl/parallel/self_communicator.hpp"
#include "verl/reward/reward_score.hpp"
#include "verl/rollout/sampling.hpp"
#include "verl/trainer/checkpoint.hpp"
#include "verl/trainer/components_from_config.hpp"
#include "verl/trainer/config/ppo_config.hpp"
#include "verl/trainer/generations.hpp"
#include "verl/trainer/metrics.hpp"
#include "verl/optim/adamw.hpp"
#include "verl/optim/clip_grad_norm.hpp"
#include "verl/optim/lr_scheduler.hpp"
#include "verl/trainer/ppo_trainer_algorithm.hpp"
#include "verl/trainer/ppo_trainer_batch.hpp"
#include "verl/trainer/ppo_trainer_roles.hpp"
#include "verl/trainer/timer.hpp"
#include "verl/trainer/validation_metrics.hpp"
#include "verl/trainer/workers/role_state.hpp"

namespace verl::trainer {

template <class Policy, class Critic = NoCritic, class Reward = reward::DefaultRewardFunction,
          class Comm = parallel::SelfCommunicator>
class PPOTrainer {
  static_assert(check_trainer_roles<Policy, Critic, Reward, Comm>());
  VERL_STATIC_ASSERT((std::same_as<typename Policy::scalar_type, float>), THE_TRAINER_NEEDS_A_FLOAT32_POLICY_MODEL);
  static constexpr bool has_critic = !std::same_as<Critic, NoCritic>;

 public:
  /// `reference` is the frozen reference policy (needed with a KL loss or KL in the reward);
  /// `val` may be empty (no validation).
  PPOTrainer(PPOConfig config, PPOAlgorithm algorithm, Policy actor, std::optional<Policy> reference, Critic critic,
             Reward reward_fn, TokenizerHooks tokenizer, data::RLHFDataset train, data::RLHFDataset val,
             Comm comm = Comm{})
      : config_(std::move(config)),
        algorithm_(std::move(algorithm)),
        actor_(std::move(actor)),
        reference_(std::move(reference)),
        critic_(std::move(critic)),
        reward_fn_(std::move(reward_fn)),
        tokenizer_(std::move(tokenizer)),
        train_(std::move(train)),
        val_(std::move(val)),
        comm_(std::move(comm)),
        loader_(train_.size(), train_loader_options(config_.data)),
        total_steps_(trainer::total_training_steps(config_, loader_.num_batches(),
                                                   static_cast<std::int64_t>(train_.size()))),
        actor_optimizer_(adamw_config(config_.actor_rollout_ref.actor.optim)),
        actor_scheduler_(lr_scheduler(config_.actor_rollout_ref.actor.optim, total_steps_)),
        critic_optimizer_(adamw_config(config_.critic.optim)),
        critic_scheduler_(lr_scheduler(config_.critic.optim, total_steps_)),
        kl_ctrl_(algo::get_kl_controller(algorithm_.kl_ctrl)),
        checkpoints_(checkpoint_manager(config_.trainer)) {
    validate_setup();
    set_rollout_precision();
    warn_unused_keys();
  }

  // ---- the loop -------------------------------------------------------------------------------

  /// verl's fit(): resume (trainer.resume_mode), validate before training, then step until
  /// total_training_steps (or `stop_after_step`, to simulate an interrupted run). Returns the
  /// metrics logged at each step.
  std::vector<Metrics> fit(std::optional<std::int64_t> stop_after_step = std::nullopt, std::ostream& console = std::cout) {
    console_ = &console;
    if (comm_.rank() == 0) require_writable_outputs(config_.trainer, config_.trainer.save_freq > 0);
    const bool resumed = resume();
    Tracking tracking;
    if (comm_.rank() == 0) {
      tracking = trainer::tracking(config_.trainer, total_steps_,
                                   resumed ? std::optional<std::int64_t>(global_step_) : std::nullopt, console);
    }
    std::vector<Metrics> history;
    if (!val_.samples().empty() && config_.trainer.val_before_train) {
      const Metrics val = validate();
      tracking.log(val, global_step_);
      history.push_back(val);
      if (config_.trainer.val_only) {
        tracking.finish();
        return history;
      }
    }
    while (global_step_ < total_steps_ && (!stop_after_step || global_step_ < *stop_after_step)) {
      Metrics metrics = step();
      tracking.log(metrics, global_step_);
      history.push_back(std::move(metrics));
    }
    tracking.finish();
    return history;
  }

  /// One iteration of verl's training loop; returns its metrics (not logged).
  Metrics step() {
    ++global_step_;
    const bool last_step = global_step_ >= total_steps_;
    TimingRaw timing;
    Metrics metrics;
    Trajectories batch;
    {
      ScopedTimer step_timer("step", timing);
      batch = collect_batch(timing, metrics);
      if (config_.trainer.balance_batch) {
        // verl balances after generation (and, with dynamic sampling, after filtering): each
        // rank's share of the rows gets about the same number of tokens for the forward passes
        // and updates. Mini-batches then hold other rows than without balancing.
        for (const auto& [k, v] : balance_batch(batch, static_cast<int>(comm_.size()))) metrics[k] = v;
      }
      // On-policy (one mini-batch, one epoch), verl's actor takes the update's own log-probs,
      // detached, as the old ones, and the parameters do not change before the optimizer step:
      // when nothing before the update reads old log-probs (no KL in the reward), the separate
      // old_log_prob pass would only produce actor/entropy, which the update's forward also gives.
      // Comparing with (or correcting by) the rollout's log-probs needs the old ones first; in
      // bypass mode the rollout's own stand in for them.
      const bool actor_updates = config_.trainer.critic_warmup <= global_step_;
      const bool bypass = algorithm_.rollout.bypass;
      const bool sum_pi_squared = config_.actor_rollout_ref.actor.calculate_sum_pi_squared;
      const bool fold_old_log_prob = bypass || (actor_updates && actor_on_policy(batch.rows()) &&
                                                !config_.algorithm.use_kl_in_reward && !algorithm_.rollout.compare &&
                                                !sum_pi_squared);
      if (bypass) {
        batch.old_log_probs = batch.rollout_log_probs;
      } else if (!fold_old_log_prob) {
        ScopedTimer t("old_log_prob", timing);
        const auto& rollout = config_.actor_rollout_ref.rollout;  // verl: the rollout's micro-batches
        ResponseStatistics old = log_probs_of(actor_, batch, {.entropy = true, .sum_pi_squared = sum_pi_squared},
                                              {rollout.log_prob_micro_batch_size_per_gpu, rollout.log_prob_micro_batch_size});
        batch.old_log_probs = std::move(old.log_probs);
        batch.sum_pi_squared = std::move(old.sum_pi_squared);
        metrics["actor/entropy"] = algo::agg_loss(old.entropy, batch.response_mask, algorithm_.loss_agg_mode);
        if (algorithm_.rollout.compare) {
          for (const auto& [k, v] : compute_rollout_probs_diff_metrics(batch.old_log_probs, batch.rollout_log_probs, batch.response_mask))
            metrics[k] = v;
        }
      }
      if (algorithm_.needs_reference()) {
        ScopedTimer t("ref", timing);
        const auto& ref = config_.actor_rollout_ref.ref;
        batch.ref_log_probs = log_probs_of(*reference_, batch, {},
                                           {ref.log_prob_micro_batch_size_per_gpu, ref.log_prob_micro_batch_size})
                                  .log_probs;
      }
      if constexpr (has_critic) {
        ScopedTimer t("values", timing);
        batch.values = values_of(batch);
      }
      {
        ScopedTimer t("adv", timing);
        if (algorithm_.rollout.compare && !bypass) correct_for_the_rollout(batch, metrics);
        compute_advantages(batch, metrics);
      }
      last_batch_ = batch;
      if constexpr (has_critic) {
        ScopedTimer t("update_critic", timing);
        update_critic(batch, metrics);
      }
      if (actor_updates) {
        ScopedTimer t("update_actor", timing);
        update_actor(batch, metrics, /*entropy_metric=*/fold_old_log_prob);
      }
      skip_nonfinite_step(metrics);
      if (config_.trainer.rollout_data_dir && comm_.rank() == 0) {
        ScopedTimer t("dump_rollout_generations", timing);
        std::vector<Generation> generations;
        for (Index r = 0; r < batch.rows(); ++r) {
          const auto& sample = train_[batch.sample[static_cast<std::size_t>(r)]];
          generations.push_back({tokenizer_.decode(sample.prompt_ids), response_text(batch, r),
                                 sample.row.ground_truth_text(), static_cast<double>(batch.token_level_scores.row(r).sum())});
        }
        dump_generations(generations, *config_.trainer.rollout_data_dir, global_step_);
      }
      if (!val_.samples().empty() && config_.trainer.test_freq > 0 &&
          (last_step || global_step_ % config_.trainer.test_freq == 0)) {
        ScopedTimer t("testing", timing);
        for (const auto& [k, v] : validate()) metrics[k] = v;
      }
      if (config_.trainer.save_freq > 0 && (last_step || global_step_ % config_.trainer.save_freq == 0)) {
        ScopedTimer t("save_checkpoint", timing);
        save_checkpoint();
      }
    }
    const Index response_width = batch.responses.cols();
    const Metrics data_metrics = compute_data_metrics(DataMetricsInputs{
        .token_level_scores = batch.token_level_scores,
        .token_level_rewards = batch.token_level_rewards,
        .advantages = batch.advantages,
        .returns = batch.returns,
        .attention_mask = batch.attention_mask,
        .response_mask = batch.response_mask,
        .values = has_critic ? std::optional<ConstMatrixRefF>(batch.values) : std::nullopt});
    for (const auto& [k, v] : data_metrics) metrics[k] = v;
    const TokenCounts tokens = count_tokens(batch.attention_mask, response_width);
    for (const auto& [k, v] : compute_timing_metrics(tokens, timing)) metrics[k] = v;
    for (const auto& [k, v] : compute_throughout_metrics(tokens.overall(), timing, comm_.size())) metrics[k] = v;
    metrics["training/global_step"] = static_cast<double>(global_step_);
    metrics["training/epoch"] = static_cast<double>(loader_.epoch());
    return metrics;
  }

  /// Generates for every validation prompt with val_kwargs and scores the responses:
  /// val-core/<data_source>/reward/mean@N (acc when the reward function reports it) and val-aux/*.
  Metrics validate() {
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
      const Trajectories part = generate(val_, indices, params, validation_seed_base(), begin);
      for (Index r = 0; r < part.rows(); ++r) {
        const auto& sample = val_[part.sample[static_cast<std::size_t>(r)]];
        const auto out = score_response(sample, part, r);
        sources.push_back(sample.row.data_source);
        uids.push_back(std::to_string(part.sample[static_cast<std::size_t>(r)]));
        scores.push_back(out.score);
        accs.push_back(out.acc ? (*out.acc ? 1.0 : 0.0) : out.score);
        any_acc = any_acc || out.acc.has_value();
        generations.push_back({tokenizer_.decode(sample.prompt_ids), response_text(part, r), sample.row.ground_truth_text(),
                               out.score});
      }
    }
    // Every rank holds every validation row; one writes.
    if (comm_.rank() == 0) {
      if (config_.trainer.validation_data_dir) dump_generations(generations, *config_.trainer.validation_data_dir, global_step_);
      log_val_generations(std::move(generations), config_.trainer.log_val_generations, global_step_, *console_);
    }
    ValidationInfos infos;
    infos["reward"] = scores;
    if (any_acc) infos["acc"] = accs;
    return validation_metrics(sources, uids, infos);
  }

  // ---- checkpoints ----------------------------------------------------------------------------

  /// Writes global_step_<N> (actor, critic, optimizer moments, scheduler position, data position,
  /// KL controller) atomically; rank 0 writes, the others wait.
  void save_checkpoint() {
    if (comm_.rank() == 0) {
      CheckpointSnapshot snapshot;
      snapshot.global_step = global_step_;
      snapshot.roles["actor"] = role_snapshot(actor_, actor_optimizer_, actor_scheduler_);
      if constexpr (has_critic) snapshot.roles["critic"] = role_snapshot(critic_, critic_optimizer_, critic_scheduler_);
      snapshot.data = loader_.state();
      snapshot.extra = {{"kl_coef", algo::kl_coefficient(kl_ctrl_)}, {"next_uid", next_uid_}};
      checkpoints_.save(snapshot);
    }
    comm_.barrier();
  }

  /// Restores a checkpoint folder written by save_checkpoint().
  void load_checkpoint(const std::filesystem::path& folder) {
    const LoadedCheckpoint loaded = CheckpointManager::load(folder);
    // The trainer always saves the data position: without it a resume would replay the epoch.
    VERL_CHECK_ARG(loaded.data.has_value(),
                   "checkpoint '{}': no data.json (the data loader's position); a damaged checkpoint is not resumed",
                   folder.string());
    restore_role(loaded.role("actor"), actor_, actor_optimizer_, actor_scheduler_, "actor");
    if constexpr (has_critic) restore_role(loaded.role("critic"), critic_, critic_optimizer_, critic_scheduler_, "critic");
    loader_.load_state(*loaded.data);
    global_step_ = loaded.global_step;
    const double kl_coef = loaded.extra.value("kl_coef", algo::kl_coefficient(kl_ctrl_));
    std::visit([&](auto& controller) { controller.value = kl_coef; }, kl_ctrl_);
    next_uid_ = loaded.extra.value("next_uid", next_uid_);
  }

  /// trainer.resume_mode: resumes from the latest (auto) or the given (resume_path) checkpoint.
  bool resume() {
    const auto folder = checkpoints_.resume_folder(config_.trainer.resume_mode, config_.trainer.resume_from_path);
    if (!folder) {
      if (config_.trainer.resume_mode == ResumeMode::automatic && comm_.rank() == 0) {
        *console_ << fmt::format("trainer.resume_mode=auto: no checkpoint in '{}'; training from scratch\n",
                                 config_.trainer.default_local_dir);
      }
      return false;
    }
    load_checkpoint(*folder);
    return true;
  }

  // ---- access ---------------------------------------------------------------------------------

  [[nodiscard]] Policy& actor() { return actor_; }
  [[nodiscard]] Critic& critic() { return critic_; }
  [[nodiscard]] const PPOConfig& config() const { return config_; }
  [[nodiscard]] const PPOAlgorithm& algorithm() const { return algorithm_; }
  [[nodiscard]] std::int64_t global_step() const { return global_step_; }
  [[nodiscard]] std::int64_t total_training_steps() const { return total_steps_; }
  [[nodiscard]] const optim::AdamW& actor_optimizer() const { return actor_optimizer_; }
  [[nodiscard]] const optim::AdamW& critic_optimizer() const { return critic_optimizer_; }
  [[nodiscard]] double kl_coefficient() const { return algo::kl_coefficient(kl_ctrl_); }
  [[nodiscard]] Comm& communicator() { return comm_; }
  /// The last step's batch (after dynamic sampling and balancing) with its log-probs, values and
  /// advantages, for inspection.
  [[nodiscard]] const Trajectories& last_batch() const { return last_batch_; }

 private:
  // ---- setup ----------------------------------------------------------------------------------

  void validate_setup() {
    VERL_CHECK_ARG(!config_.reward.reward_model.enable,
                   "reward.reward_model.enable: the in-process trainer (PPOTrainer) scores with the reward function "
                   "only; a reward model runs on a worker group of the HybridFlow controller (PPOController, "
                   "verl_train built with MPI)");
    const auto& actor = config_.actor_rollout_ref.actor;
    const std::int64_t dp = comm_.size();
    if constexpr (std::same_as<Reward, reward::DefaultRewardFunction>) {
      // verl's rule-based scores compare with reward_model.ground_truth: a row without one is
      // named now instead of scoring 0 for every response.
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
    if constexpr (!has_critic) {
      VERL_CHECK_ARG(!algorithm_.needs_critic(),
                     "algorithm.adv_estimator: '{}' needs a critic; build the trainer with a critic model "
                     "(critic.model.path)",
                     algorithm_.estimator.name());
    }
    VERL_CHECK_ARG(!algorithm_.needs_reference() || reference_.has_value(),
                   "reference policy: actor.use_kl_loss / algorithm.use_kl_in_reward need a reference model, got none");
    VERL_CHECK_ARG(train_.size() > 0, "data.train_files: expected at least one usable prompt, got none");
    const std::int64_t batch = config_.data.train_batch_size;
    VERL_CHECK_ARG(actor.ppo_mini_batch_size >= 1 && actor.ppo_mini_batch_size <= batch,
                   "actor_rollout_ref.actor.ppo_mini_batch_size: expected a value in [1, data.train_batch_size = {}], "
                   "got {}",
                   batch, actor.ppo_mini_batch_size);
    VERL_CHECK_ARG(actor.ppo_epochs >= 1, "actor_rollout_ref.actor.ppo_epochs: expected >= 1, got {}", actor.ppo_epochs);
    const std::int64_t gen = config_.data.gen_batch_size.value_or(batch);
    VERL_CHECK_ARG(gen % dp == 0 && batch % dp == 0,
                   "data.train_batch_size / data.gen_batch_size: expected multiples of the {} data-parallel ranks, got "
                   "{} / {}",
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
      VERL_CHECK_ARG(config_.critic.ppo_mini_batch_size >= 1 && config_.critic.ppo_mini_batch_size <= batch,
                     "critic.ppo_mini_batch_size: expected a value in [1, data.train_batch_size = {}], got {}", batch,
                     config_.critic.ppo_mini_batch_size);
    }
  }

  /// actor_rollout_ref.rollout.dtype: the precision the rollout decodes the actor's weights in
  /// (bfloat16 as verl's inference engines run; training stays float32).
  void set_rollout_precision() {
    const cpu::DecodePrecision precision =
        cpu::parse_decode_precision(config_.actor_rollout_ref.rollout.dtype, "actor_rollout_ref.rollout.dtype");
    if constexpr (requires(Policy& policy) { policy.set_decode_precision(precision); }) {
      actor_.set_decode_precision(precision);
    } else {
      VERL_CHECK_ARG(precision == cpu::DecodePrecision::float32,
                     "actor_rollout_ref.rollout.dtype: this policy type decodes in float32 only (it has no "
                     "set_decode_precision), got '{}'",
                     config_.actor_rollout_ref.rollout.dtype);
    }
  }

  /// verl's compute_rollout_correction_and_add_to_batch (decoupled mode): the off-policy metrics
  /// between the old and the rollout's log-probs, and, when configured, IS weights for the policy
  /// loss and rejection sampling in the response mask (rejected tokens take no part in training).
  void correct_for_the_rollout(Trajectories& t, Metrics& metrics) const {
    auto result = algo::compute_rollout_correction_and_rejection_mask(t.old_log_probs, t.rollout_log_probs,
                                                                      t.response_mask, algorithm_.rollout.correction);
    t.response_mask = std::move(result.response_mask);
    if (result.rollout_is_weights) t.rollout_is_weights = std::move(*result.rollout_is_weights);
    for (const auto& [k, v] : result.metrics) metrics[k] = v;
  }

  /// Keys verl acts on that verl-cpp accepts but does not act on: said once, not silently ignored.
  void warn_unused_keys() const {
    if (comm_.rank() != 0) return;
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

  // ---- generations: console samples and JSONL dumps ------------------------------------------

  std::string response_text(const Trajectories& t, Index row) const {
    const auto length = static_cast<Index>(t.response_mask.row(row).sum());
    std::vector<model::TokenId> ids(t.responses.row(row).data(), t.responses.row(row).data() + length);
    return tokenizer_.decode(ids);
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

  std::uint64_t seed_base() const { return data_seed(config_.data); }
  std::uint64_t validation_seed_base() const { return rollout::derive_seed(seed_base(), 0x7661'6c69'6461'7465ULL); }

  // ---- generation and reward ------------------------------------------------------------------

  /// Generates for dataset[indices] (each rank its contiguous share of the prompts), gathered so
  /// that every rank holds every row. Prompt k of the call draws from seed (base, first + k).
  Trajectories generate(const data::RLHFDataset& dataset, std::span<const std::int64_t> indices,
                        const rollout::SamplingParams& params, std::uint64_t seed_base, std::int64_t first) {
    const auto prompts_total = static_cast<Index>(indices.size());
    const Index dp = comm_.size();
    const bool sharded = prompts_total % dp == 0;
    const Index share = sharded ? prompts_total / dp : prompts_total;
    const Index offset = sharded ? share * comm_.rank() : 0;
    std::vector<std::vector<model::TokenId>> prompt_ids;
    std::vector<std::uint64_t> seeds;
    for (Index b = 0; b < prompts_total; ++b) prompt_ids.push_back(dataset[indices[static_cast<std::size_t>(b)]].prompt_ids);
    const rollout::PromptBatch all = rollout::PromptBatch::left_padded(prompt_ids, tokenizer_.pad_token_id);
    rollout::PromptBatch local{all.input_ids.middleRows(offset, share), all.attention_mask.middleRows(offset, share), {}};
    for (Index b = 0; b < share; ++b)
      local.seeds.push_back(rollout::derive_seed(seed_base, static_cast<std::uint64_t>(first + offset + b)));
    auto engine = make_rollout_engine(actor_);
    const rollout::RolloutOutput out = engine.generate(local, params);
    rollout::RolloutOutput full;
    if (sharded && dp > 1) {
      full.responses = gather_rows(out.responses);
      full.response_mask = gather_rows(out.response_mask);
      full.rollout_log_probs = gather_rows(out.rollout_log_probs);
    } else {
      full.responses = out.responses;
      full.response_mask = out.response_mask;
      full.rollout_log_probs = out.rollout_log_probs;
    }
    rollout::assemble_rollout_tensors(all, params.n, full);
    Trajectories t;
    t.responses = std::move(full.responses);
    t.response_mask = std::move(full.response_mask);
    t.input_ids = std::move(full.input_ids);
    t.attention_mask = std::move(full.attention_mask);
    t.position_ids = std::move(full.position_ids);
    t.rollout_log_probs = std::move(full.rollout_log_probs);
    for (Index r = 0; r < t.responses.rows(); ++r) t.sample.push_back(indices[static_cast<std::size_t>(r / params.n)]);
    return t;
  }

  reward::ExtraInfo extra_info_of(const data::RLHFSample& sample) const {
    reward::ExtraInfo info;
    if (sample.row.extra_info.is_object()) {
      for (const auto& [key, value] : sample.row.extra_info.items())
        info[key] = value.is_string() ? value.template get<std::string>() : value.dump();
    }
    return info;
  }

  reward::RewardOutput score_response(const data::RLHFSample& sample, const Trajectories& t, Index row) {
    const std::string text = response_text(t, row);
    return reward::call_reward_function(reward_fn_, sample.row.data_source, text, sample.row.ground_truth_text(),
                                        extra_info_of(sample));
  }

  /// verl's reward manager: the score at the last valid response token (naive), plus DAPO's
  /// overlong penalty when configured.
  void compute_rewards(Trajectories& t, Metrics& metrics) {
    const Index rows = t.rows(), width = t.responses.cols();
    t.token_level_scores = MatrixF::Zero(rows, width);
    t.reward_outputs.clear();
    double overlong_total = 0;
    for (Index r = 0; r < rows; ++r) {
      const auto& sample = train_[t.sample[static_cast<std::size_t>(r)]];
      reward::RewardOutput out = score_response(sample, t, r);
      const auto length = static_cast<Index>(t.response_mask.row(r).sum());
      double reward = out.score;
      if (algorithm_.overlong_penalty) {
        const auto& p = *algorithm_.overlong_penalty;
        const double expected = static_cast<double>(config_.data.max_response_length - p.buffer_length);
        const double exceed = static_cast<double>(length) - expected;
        const double penalty = std::min(-exceed / static_cast<double>(p.buffer_length) * p.penalty_factor, 0.0);
        reward += penalty;
        overlong_total += penalty;
      }
      if (length > 0) t.token_level_scores(r, length - 1) = static_cast<float>(reward);
      t.reward_outputs.push_back(std::move(out));
    }
    if (algorithm_.overlong_penalty && algorithm_.overlong_penalty->log && rows > 0) metrics["reward/overlong_penalty/mean"] = overlong_total / static_cast<double>(rows);
  }

  std::vector<std::int64_t> next_indices() {
    auto batch = loader_.next();
    if (!batch) batch = loader_.next();  // the epoch ended: the loader stands at the next one
    VERL_CHECK_ARG(batch.has_value(), "train dataloader: no batch (dataset of {} samples, batch size {})",
                   loader_.dataset_size(), loader_.options().batch_size);
    return *batch;
  }

  /// gen + reward, with DAPO's dynamic sampling when configured.
  Trajectories collect_batch(TimingRaw& timing, Metrics& metrics) {
    const rollout::SamplingParams params = sampling_params();
    const Index n = params.n;
    const std::int64_t wanted = config_.data.train_batch_size;
    Trajectories kept;
    std::int64_t kept_prompts = 0, rounds = 0;
    for (;;) {
      ++rounds;
      const std::vector<std::int64_t> indices = next_indices();
      const std::uint64_t round_seed =
          rollout::derive_seed(rollout::derive_seed(seed_base(), static_cast<std::uint64_t>(global_step_)),
                               static_cast<std::uint64_t>(rounds));
      Trajectories part;
      {
        ScopedTimer t("gen", timing);
        part = generate(train_, indices, params, round_seed, 0);
      }
      for (Index r = 0; r < part.rows(); ++r) part.uid.push_back(next_uid_ + r / n);
      next_uid_ += static_cast<std::int64_t>(indices.size());
      if (algorithm_.estimator.needs_reward_baseline()) {
        ScopedTimer t("gen_max", timing);
        rollout::SamplingParams greedy = params;
        greedy.temperature = 0.0f;
        greedy.n = 1;
        Trajectories baseline = generate(train_, indices, greedy, round_seed, 0);
        Metrics ignored;
        compute_rewards(baseline, ignored);
        part.reward_baselines = VectorF(part.rows());
        for (Index r = 0; r < part.rows(); ++r) part.reward_baselines[r] = baseline.token_level_scores.row(r / n).sum();
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
      std::vector<Index> rows_kept;
      for (Index g = 0; g < part.rows() / n; ++g) {
        double lo = 0, hi = 0;
        for (Index j = 0; j < n; ++j) {
          const Index r = g * n + j;
          const auto& out = part.reward_outputs[static_cast<std::size_t>(r)];
          const double value = filter.metric == "acc" && out.acc ? (*out.acc ? 1.0 : 0.0)
                               : filter.metric == "score"        ? out.score
                                                                 : part.token_level_scores.row(r).sum();
          lo = j == 0 ? value : std::min(lo, value);
          hi = j == 0 ? value : std::max(hi, value);
        }
        if (hi > lo || n == 1) {
          for (Index j = 0; j < n; ++j) rows_kept.push_back(g * n + j);
          ++kept_prompts;
        }
      }
      kept.append(part.select(rows_kept));
      if (kept_prompts >= wanted) {
        std::vector<Index> first(static_cast<std::size_t>(wanted * n));
        for (Index r = 0; r < wanted * n; ++r) first[static_cast<std::size_t>(r)] = r;
        kept = kept.select(first);
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

  // ---- log-probs and values -------------------------------------------------------------------

  /// The rows [begin, end) of `t` as the model's token batch.
  static model::TokenBatch token_batch(const Trajectories& t, Index begin, Index end) {
    return model::TokenBatch::padded(t.input_ids.middleRows(begin, end - begin),
                                     t.attention_mask.middleRows(begin, end - begin),
                                     t.position_ids.middleRows(begin, end - begin));
  }

  /// The response part of a (rows, P + R) output: column P - 1 + t predicts response token t.
  static MatrixF response_block(const MatrixF& full, Index response_width) {
    return full.rightCols(response_width + 1).leftCols(response_width);
  }

  /// The rows this rank computes for a batch of `rows` rows.
  std::pair<Index, Index> local_rows(Index rows) const {
    const Index share = rows / comm_.size();
    return {share * comm_.rank(), share * (comm_.rank() + 1)};
  }

  template <class Matrix>
  Matrix gather_rows(const Matrix& local) {
    if (comm_.size() == 1) return local;
    Matrix full(local.rows() * comm_.size(), local.cols());
    using Scalar = typename Matrix::Scalar;
    comm_.all_gather(std::span<const Scalar>(local.data(), static_cast<std::size_t>(local.size())),
                     std::span<Scalar>(full.data(), static_cast<std::size_t>(full.size())));
    return full;
  }



  /// A role's log_prob_micro_batch_size_per_gpu and log_prob_micro_batch_size.
  struct MicroBatchSizes {
    std::optional<std::int64_t> per_gpu, global;
  };

  /// What a log-prob pass computes besides the log-probs.
  struct StatisticsWanted {
    bool entropy = false;
    bool sum_pi_squared = false;
  };
  /// Per response token: log-probs, and the entropy and sum_j pi_j^2 when asked (else empty).
  struct ResponseStatistics {
    MatrixF log_probs, entropy, sum_pi_squared;
  };

  /// Log-probs (and what `wanted` adds) of the responses under `model` at the rollout temperature.
  template <class M>
  ResponseStatistics log_probs_of(M& model, const Trajectories& t, StatisticsWanted wanted, MicroBatchSizes sizes) {
    const Index width = t.responses.cols();
    const auto [lo, hi] = local_rows(t.rows());
    const auto& rollout = config_.actor_rollout_ref.rollout;
    const Index micro = forward_micro_batch_size(sizes.per_gpu, sizes.global, comm_.size(), hi - lo);
    MatrixF log_probs(hi - lo, width), entropy = MatrixF::Zero(hi - lo, width);
    MatrixF sum_pi_squared = MatrixF::Zero(wanted.sum_pi_squared ? hi - lo : 0, width);
    for (Index b = lo; b < hi; b += micro) {
      const Index e = std::min(hi, b + micro);
      const auto batch = token_batch(t, b, e);
      const MatrixI64 targets = model::next_token_targets(batch);
      const auto out = model.forward(batch, {.targets = std::span<const std::int64_t>(targets.data(), static_cast<std::size_t>(targets.size())),
                                             .return_entropy = wanted.entropy,
                                             .return_sum_pi_squared = wanted.sum_pi_squared,
                                             .temperature = static_cast<float>(rollout.temperature)});
      const auto mask = t.response_mask.middleRows(b, e - b);
      log_probs.middleRows(b - lo, e - b) = response_block(out.log_probs, width).cwiseProduct(mask);
      if (wanted.entropy) entropy.middleRows(b - lo, e - b) = response_block(out.entropy, width);
      if (wanted.sum_pi_squared) {
        VERL_CHECK_ARG(out.sum_pi_squared.rows() == out.log_probs.rows() && out.sum_pi_squared.cols() == out.log_probs.cols(),
                       "actor_rollout_ref.actor.calculate_sum_pi_squared: the actor model returned no sum_pi_squared "
                       "(its forward must honour ForwardOptions::return_sum_pi_squared)");
        sum_pi_squared.middleRows(b - lo, e - b) = response_block(out.sum_pi_squared, width).cwiseProduct(mask);
      }
    }
    ResponseStatistics result;
    result.log_probs = gather_rows(log_probs);
    if (wanted.entropy) result.entropy = gather_rows(entropy);
    if (wanted.sum_pi_squared) result.sum_pi_squared = gather_rows(sum_pi_squared);
    return result;
  }

  MatrixF values_of(const Trajectories& t) {
    const Index width = t.responses.cols();
    const auto [lo, hi] = local_rows(t.rows());
    const Index micro = forward_micro_batch_size(config_.critic.forward_micro_batch_size_per_gpu,
                                                 config_.critic.forward_micro_batch_size, comm_.size(), hi - lo);
    MatrixF values(hi - lo, width);
    for (Index b = lo; b < hi; b += micro) {
      const Index e = std::min(hi, b + micro);
      const auto out = critic_.forward(token_batch(t, b, e), model::ValueForwardOptions{});
      values.middleRows(b - lo, e - b) = response_block(out.values, width).cwiseProduct(t.response_mask.middleRows(b, e - b));
    }
    return gather_rows(values);
  }

  // ---- advantages -----------------------------------------------------------------------------

  void compute_advantages(Trajectories& t, Metrics& metrics) {
    if (algorithm_.use_kl_in_reward) {
      auto kl = algo::apply_kl_penalty(t.token_level_scores, t.old_log_probs, t.ref_log_probs, t.response_mask, kl_ctrl_,
                                       algorithm_.kl_penalty);
      t.token_level_rewards = std::move(kl.token_level_rewards);
      for (const auto& [k, v] : kl.metrics) metrics[k] = v;
    } else {
      t.token_level_rewards = t.token_level_scores;
    }
    algo::AdvantageBatch in{.token_level_rewards = t.token_level_rewards, .response_mask = t.response_mask, .index = t.uid};
    if constexpr (has_critic) in.values.emplace(t.values);
    if (algorithm_.estimator.needs_reward_baseline()) in.reward_baselines.emplace(t.reward_baselines);
    if (algorithm_.estimator.needs_old_log_probs()) {
      in.old_log_probs.emplace(t.old_log_probs);
      in.sum_pi_squared.emplace(t.sum_pi_squared);
      if (t.rollout_is_weights.rows() > 0) in.rollout_is_weights.emplace(t.rollout_is_weights);
    }
    algo::RewardComponents components;
    if (algorithm_.estimator.reads_reward_components()) {
      components = reward_components(t.reward_outputs, config_.algorithm.gdpo_reward_keys.value_or(std::vector<std::string>{}), metrics);
      in.reward_components = &components;
    }
    auto result = algorithm_.estimator.compute(in);
    // Trajectories keep the two as separate fields (they are reordered and split row-wise); a
    // shared result (outcome estimators) is copied once here.
    t.returns = result.returns_are_advantages() ? MatrixF(result.advantages) : std::move(result.returns());
    t.advantages = std::move(result.advantages);
  }

  // ---- updates --------------------------------------------------------------------------------



  /// Averages gradients over the ranks (FSDP's reduce), then clips and steps. Returns the norm.
  float optimizer_step(std::vector<optim::ParameterRef>& refs, optim::AdamW& optimizer, double grad_clip) {
    if (comm_.size() > 1) average_gradients(comm_, refs);
    const float norm = optim::clip_grad_norm(refs, grad_clip);
    // verl skips the update when the norm is not finite; it is counted (see skip_nonfinite_step).
    ++updates_this_step_;
    if (std::isfinite(norm)) {
      optimizer.step(refs);
    } else {
      ++nonfinite_updates_this_step_;
    }
    return norm;
  }

  /// After a step's updates: the count of skipped (non-finite) updates as a metric and a warning;
  /// a step whose every update was skipped is a non-finite step, and
  /// trainer.max_consecutive_nonfinite_steps of them in a row end the run with an error (before
  /// anything is saved), instead of training on, or checkpointing, a broken model.
  void skip_nonfinite_step(Metrics& metrics) {
    metrics["training/nonfinite_updates_skipped"] = static_cast<double>(nonfinite_updates_this_step_);
    const bool all_skipped = updates_this_step_ > 0 && nonfinite_updates_this_step_ == updates_this_step_;
    if (nonfinite_updates_this_step_ > 0 && comm_.rank() == 0) {
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

  /// Mean over ranks of per-rank metrics (max / min for names that say so), as verl gathers them.
  void reduce_over_ranks(Metrics& metrics) {
    if (comm_.size() > 1) reduce_metrics_over_ranks(comm_, metrics);
  }


  /// Mini-batch boundaries over `rows` rows: chunks of `size` rows (torch's split: the last may
  /// be shorter).
  static std::vector<std::pair<Index, Index>> chunks(Index rows, Index size) {
    std::vector<std::pair<Index, Index>> out;
    for (Index b = 0; b < rows; b += size) out.emplace_back(b, std::min(rows, b + size));
    return out;
  }

  /// verl's dp_actor `on_policy`: the actor's update is a single mini-batch over a single epoch.
  bool actor_on_policy(Index rows) const {
    const auto& cfg = config_.actor_rollout_ref.actor;
    return cfg.ppo_epochs == 1 && rows <= cfg.ppo_mini_batch_size * config_.actor_rollout_ref.rollout.n;
  }

  /// The actor's PPO update. With `entropy_metric`, actor/entropy comes from the update's forward
  /// (on-policy only, where that forward runs on the parameters the old log-probs would use).
  void update_actor(const Trajectories& t, Metrics& metrics, bool entropy_metric = false) {
    const auto& cfg = config_.actor_rollout_ref.actor;
    const Index n = config_.actor_rollout_ref.rollout.n, width = t.responses.cols();
    const Index prompt_width = t.input_ids.cols() - width;
    const float temperature = static_cast<float>(config_.actor_rollout_ref.rollout.temperature);
    actor_scheduler_.apply(actor_optimizer_);
    metrics["actor/lr"] = actor_scheduler_.get_last_lr();
    MetricsAccumulator acc;
    const bool entropy_in_loss = algorithm_.entropy_coeff != 0;
    // Bypass mode: the stored old log-probs are the rollout's, never the update's own.
    const bool on_policy = actor_on_policy(t.rows()) && !algorithm_.rollout.bypass;
    for (std::int64_t epoch = 0; epoch < cfg.ppo_epochs; ++epoch) {
      for (const auto& [m0, m1] : chunks(t.rows(), cfg.ppo_mini_batch_size * n)) {
        VERL_CHECK_ARG((m1 - m0) % comm_.size() == 0, "ppo mini-batch: {} rows do not split over {} ranks", m1 - m0,
                       comm_.size());
        const algo::GlobalBatchInfo info{.dp_size = static_cast<double>(comm_.size()),
                                         .batch_num_tokens = static_cast<double>(t.response_mask.middleRows(m0, m1 - m0).sum()),
                                         .global_batch_size = static_cast<double>(m1 - m0),
                                         .loss_scale_factor = cfg.loss_scale_factor};
        const Index share = (m1 - m0) / comm_.size();
        const Index lo = m0 + share * comm_.rank(), hi = lo + share;
        const Index micro = cfg.ppo_micro_batch_size_per_gpu.value_or(
            cfg.ppo_micro_batch_size ? std::max<std::int64_t>(1, *cfg.ppo_micro_batch_size / comm_.size()) : share);
        actor_.zero_grad();
        Metrics mini;
        double pg_loss = 0, kl_loss = 0, entropy_agg = 0;
        for (Index b = lo; b < hi; b += micro) {
          const Index e = std::min(hi, b + micro), rows = e - b;
          const auto batch = token_batch(t, b, e);
          const MatrixI64 targets = model::next_token_targets(batch);
          const auto out = actor_.forward(batch, {.targets = std::span<const std::int64_t>(targets.data(), static_cast<std::size_t>(targets.size())),
                                                  .return_entropy = entropy_in_loss || entropy_metric,
                                                  .temperature = temperature,
                                                  .keep_activations = true});
          const MatrixF mask = t.response_mask.middleRows(b, rows);
          const MatrixF log_prob = response_block(out.log_probs, width);
          // verl: on-policy, old_log_prob = log_prob.detach() (the ratio is exactly 1).
          MatrixF stored_old;
          if (!on_policy) stored_old = t.old_log_probs.middleRows(b, rows);
          const MatrixF& old = on_policy ? log_prob : stored_old;
          if (entropy_metric) {
            entropy_agg += algo::agg_loss(response_block(out.entropy, width), mask, algorithm_.loss_agg_mode, info);
          }
          const MatrixF adv = t.advantages.middleRows(b, rows);
          algo::PolicyLossBatch loss_batch{.old_log_prob = old, .log_prob = log_prob, .advantages = adv, .response_mask = mask};
          MatrixF is_weights;
          if (t.rollout_is_weights.rows() > 0) {
            is_weights = t.rollout_is_weights.middleRows(b, rows);
            loss_batch.rollout_is_weights.emplace(is_weights);
          }
          algo::PolicyLossResult pg = algo::compute_policy_loss(
              algorithm_.policy_loss, loss_batch, {.loss_agg_mode = algorithm_.loss_agg_mode, .global_batch_info = info});
          pg_loss += pg.pg_loss;
          MatrixF grad_log_prob = std::move(pg.grad_log_prob);
          MatrixF grad_entropy;
          if (entropy_in_loss) {
            grad_entropy = algo::agg_loss_weights(mask, algorithm_.loss_agg_mode, info) * static_cast<float>(-algorithm_.entropy_coeff);
          }
          if (algorithm_.kl_loss) {
            const MatrixF ref = t.ref_log_probs.middleRows(b, rows);
            const MatrixF kld = algo::kl_penalty(log_prob, ref, *algorithm_.kl_loss);
            kl_loss += algo::agg_loss(kld, mask, algorithm_.loss_agg_mode, info);
            const MatrixF cotangent = algo::agg_loss_weights(mask, algorithm_.loss_agg_mode, info) *
                                      static_cast<float>(algorithm_.kl_loss_coef);
            grad_log_prob += algo::kl_penalty_backward(log_prob, ref, cotangent, *algorithm_.kl_loss).logprob;
          }
          // Cotangents in the model's (rows, P + R) layout.
          std::vector<float> d_log_probs(static_cast<std::size_t>(rows * (prompt_width + width)), 0.0f);
          std::vector<float> d_entropy(entropy_in_loss ? d_log_probs.size() : 0, 0.0f);
          for (Index r = 0; r < rows; ++r) {
            for (Index c = 0; c < width; ++c) {
              const auto at = static_cast<std::size_t>(r * (prompt_width + width) + prompt_width - 1 + c);
              d_log_probs[at] = grad_log_prob(r, c);
              if (entropy_in_loss) d_entropy[at] = grad_entropy(r, c);
            }
          }
          actor_.backward({.log_probs = d_log_probs, .entropy = d_entropy});
          for (const auto& [k, v] : pg.metrics) mini[k] += v / std::ceil(static_cast<double>(hi - lo) / static_cast<double>(micro));
        }
        auto refs = parameter_refs(actor_);
        const float norm = optimizer_step(refs, actor_optimizer_, cfg.grad_clip);
        // With GlobalBatchInfo each micro-batch's loss is its share of the mini-batch loss: their
        // sum is the mini-batch's loss, whatever the micro-batch size.
        mini["actor/pg_loss"] = pg_loss;
        if (entropy_metric) mini["actor/entropy"] = entropy_agg;
        if (algorithm_.kl_loss) {
          mini["actor/kl_loss"] = kl_loss;
          mini["actor/kl_coef"] = algorithm_.kl_loss_coef;
        }
        reduce_over_ranks(mini);
        mini["actor/grad_norm"] = norm;
        acc.append(mini);
      }
    }
    actor_scheduler_.step();
    for (const auto& [k, v] : acc.reduce()) metrics[k] = v;
  }

  void update_critic(const Trajectories& t, Metrics& metrics) {
    if constexpr (has_critic) {
      const auto& cfg = config_.critic;
      const Index n = config_.actor_rollout_ref.rollout.n, width = t.responses.cols();
      const Index prompt_width = t.input_ids.cols() - width;
      const algo::LossAggMode mode = algo::parse_loss_agg_mode(cfg.loss_agg_mode);
      critic_scheduler_.apply(critic_optimizer_);
      metrics["critic/lr"] = critic_scheduler_.get_last_lr();
      MetricsAccumulator acc;
      for (std::int64_t epoch = 0; epoch < cfg.ppo_epochs; ++epoch) {
        for (const auto& [m0, m1] : chunks(t.rows(), cfg.ppo_mini_batch_size * n)) {
          VERL_CHECK_ARG((m1 - m0) % comm_.size() == 0, "critic mini-batch: {} rows do not split over {} ranks",
                         m1 - m0, comm_.size());
          const algo::GlobalBatchInfo info{.dp_size = static_cast<double>(comm_.size()),
                                           .batch_num_tokens = static_cast<double>(t.response_mask.middleRows(m0, m1 - m0).sum()),
                                           .global_batch_size = static_cast<double>(m1 - m0),
                                           .loss_scale_factor = std::nullopt};
          const Index share = (m1 - m0) / comm_.size();
          const Index lo = m0 + share * comm_.rank(), hi = lo + share;
          const Index micro = cfg.ppo_micro_batch_size_per_gpu.value_or(
              cfg.ppo_micro_batch_size ? std::max<std::int64_t>(1, *cfg.ppo_micro_batch_size / comm_.size()) : share);
          critic_.zero_grad();
          Metrics mini;
          double vf_loss = 0;
          const double micro_count = std::ceil(static_cast<double>(hi - lo) / static_cast<double>(micro));
          for (Index b = lo; b < hi; b += micro) {
            const Index e = std::min(hi, b + micro), rows = e - b;
            const auto out = critic_.forward(token_batch(t, b, e), model::ValueForwardOptions{.keep_activations = true});
            const MatrixF vpreds = response_block(out.values, width);
            const auto loss = algo::compute_value_loss(vpreds, t.returns.middleRows(b, rows), t.values.middleRows(b, rows),
                                                       t.response_mask.middleRows(b, rows), cfg.cliprange_value, mode, info);
            vf_loss += loss.vf_loss;
            std::vector<float> d_values(static_cast<std::size_t>(rows * (prompt_width + width)), 0.0f);
            for (Index r = 0; r < rows; ++r)
              for (Index c = 0; c < width; ++c)
                d_values[static_cast<std::size_t>(r * (prompt_width + width) + prompt_width - 1 + c)] = loss.grad_vpreds(r, c);
            critic_.backward(model::ValueCotangents<float>{.values = d_values});
            for (const auto& [k, v] : loss.metrics) mini[k] += v / micro_count;
          }
          auto refs = parameter_refs(critic_);
          const float norm = optimizer_step(refs, critic_optimizer_, cfg.grad_clip);
          mini["critic/vf_loss"] = vf_loss;
          reduce_over_ranks(mini);
          mini["critic/grad_norm"] = norm;
          acc.append(mini);
        }
      }
      critic_scheduler_.step();
      for (const auto& [k, v] : acc.reduce()) metrics[k] = v;
    }
  }

  // ---- checkpoint helpers ---------------------------------------------------------------------

  template <class M>
  RoleSnapshot role_snapshot(M& model, const optim::AdamW& optimizer, const optim::LrScheduler<>& scheduler) {
    RoleSnapshot role;
    model.for_each_parameter([&](const auto& p) {
      role.model.push_back(TensorRef{std::string(p.name), std::vector<std::int64_t>(p.shape.begin(), p.shape.end()),
                                     std::span<const float>(p.value.data(), p.value.size())});
    });
    role.optimizer = &optimizer.state();
    role.extra = {{"lr_scheduler_last_epoch", scheduler.last_epoch()}};
    return role;
  }

  template <class M>
  static void restore_role(const LoadedRole& role, M& model, optim::AdamW& optimizer, optim::LrScheduler<>& scheduler,
                           std::string_view name) {
    restore_role_state(RoleState::from(role, name), model, optimizer, scheduler, name);
  }


  PPOConfig config_;
  PPOAlgorithm algorithm_;
  Policy actor_;
  std::optional<Policy> reference_;
  Critic critic_;
  Reward reward_fn_;
  TokenizerHooks tokenizer_;
  data::RLHFDataset train_;
  data::RLHFDataset val_;
  Comm comm_;
  data::DataLoader loader_;
  std::int64_t total_steps_;
  optim::AdamW actor_optimizer_;
  optim::LrScheduler<> actor_scheduler_;
  optim::AdamW critic_optimizer_;
  optim::LrScheduler<> critic_scheduler_;
  algo::AnyKLController kl_ctrl_;
  CheckpointManager checkpoints_;
  std::int64_t global_step_ = 0;
  std::int64_t updates_this_step_ = 0;            ///< optimizer updates of the current step
  std::int64_t nonfinite_updates_this_step_ = 0;  ///< of which skipped for a non-finite norm
  std::int64_t consecutive_nonfinite_steps_ = 0;  ///< steps in a row whose every update was skipped
  std::int64_t next_uid_ = 0;
  Trajectories last_batch_;
  std::ostream* console_ = &std::cout;  ///< fit()'s console (validation generations)
};

}  // namespace verl::trainer
