// The trainer's infrastructure built from a PPOConfig the way verl builds it: AdamW and its
// learning-rate schedule from an optim section (with verl's warmup rule and its injected
// total_training_steps), datasets and data loaders from `data`, the Tracking backends and the
// checkpoint manager from `trainer`.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <system_error>
#include <optional>

#include "verl/core/error.hpp"
#include "verl/data/dataloader.hpp"
#include "verl/data/rl_dataset.hpp"
#include "verl/trainer/checkpoint.hpp"
#include "verl/trainer/config/ppo_config.hpp"
#include "verl/trainer/logging/tracking.hpp"
#include "verl/optim/adamw.hpp"
#include "verl/optim/lr_scheduler.hpp"
#include "verl/optim/schedules.hpp"

namespace verl::trainer {

/// verl's step count: trainer.total_training_steps when set, else batches per epoch times
/// trainer.total_epochs.
/// `train_prompts`, when known, names the cause of an empty epoch: fewer prompts than one batch.
inline std::int64_t total_training_steps(const PPOConfig& config, std::int64_t batches_per_epoch,
                                         std::optional<std::int64_t> train_prompts = std::nullopt) {
  VERL_CHECK_ARG(batches_per_epoch >= 1 || !train_prompts,
                 "data.train_batch_size: expected at most the {} training prompts of data.train_files (after "
                 "data.train_max_samples and the overlong filter), got {}; the train dataloader would be empty "
                 "(verl: 'Train dataloader is empty!')",
                 train_prompts.value_or(0), config.data.train_batch_size);
  VERL_CHECK_ARG(batches_per_epoch >= 1,
                 "train dataloader: expected at least one batch per epoch (verl: 'Train dataloader is empty!'), got {}",
                 batches_per_epoch);
  if (config.trainer.total_training_steps) return *config.trainer.total_training_steps;
  return batches_per_epoch * config.trainer.total_epochs;
}

/// torch.optim.AdamW's arguments from an optim section (eps is torch's default).
inline optim::AdamWConfig adamw_config(const OptimConfig& optim) {
  VERL_CHECK_ARG(optim.betas.size() == 2, "optim.betas: expected two values [beta1, beta2], got {}", optim.betas.size());
  return {.lr = optim.lr, .beta1 = optim.betas[0], .beta2 = optim.betas[1], .eps = 1e-8,
          .weight_decay = optim.weight_decay};
}

/// The schedule verl's worker builds: `total_training_steps` is what the trainer injects into
/// the optim config (an explicit optim.total_training_steps > 0 wins).
inline optim::AnyLrSchedule lr_schedule(const OptimConfig& optim, std::int64_t total_training_steps) {
  optim::LrScheduleConfig schedule;
  schedule.lr_scheduler_type = optim.warmup_style ? *optim.warmup_style : optim.lr_scheduler_type;
  schedule.lr_warmup_steps = optim.lr_warmup_steps;
  schedule.lr_warmup_steps_ratio = optim.lr_warmup_steps_ratio;
  schedule.total_training_steps = optim.total_training_steps > 0 ? optim.total_training_steps : total_training_steps;
  schedule.min_lr_ratio = optim.min_lr_ratio;
  schedule.num_cycles = optim.num_cycles;
  return optim::make_lr_schedule(schedule);
}

inline optim::LrScheduler<> lr_scheduler(const OptimConfig& optim, std::int64_t total_training_steps) {
  return optim::LrScheduler<>(optim.lr, lr_schedule(optim, total_training_steps));
}

inline std::uint64_t data_seed(const DataConfig& data) {
  return data.seed ? static_cast<std::uint64_t>(*data.seed) : data::default_data_seed;
}

/// RLHFDataset options for the training (or validation) files.
inline data::RLHFDatasetOptions dataset_options(const DataConfig& data, bool validation = false) {
  data::RLHFDatasetOptions options;
  options.prompt_key = data.prompt_key;
  options.data_source_key = data.reward_fn_key;
  options.max_prompt_length = data.max_prompt_length;
  options.filter_overlong_prompts = data.filter_overlong_prompts;
  options.truncation = data.truncation;
  options.max_samples = validation ? data.val_max_samples : data.train_max_samples;
  options.shuffle = data.shuffle;
  options.seed = data_seed(data);
  return options;
}

/// The training loader: data.gen_batch_size (else train_batch_size) prompts per step, shuffled
/// by data.seed when data.shuffle, the last partial batch dropped.
inline data::DataLoaderOptions train_loader_options(const DataConfig& data) {
  return {.batch_size = data.gen_batch_size.value_or(data.train_batch_size),
          .shuffle = data.shuffle,
          .seed = data_seed(data),
          .drop_last = true};
}

/// The validation loader: data.val_batch_size (else the whole set) per batch, every sample kept.
inline data::DataLoaderOptions validation_loader_options(const DataConfig& data, std::int64_t validation_size) {
  return {.batch_size = data.val_batch_size.value_or(std::max<std::int64_t>(1, validation_size)),
          .shuffle = data.validation_shuffle,
          .seed = data_seed(data),
          .drop_last = false};
}

inline RetentionPolicy retention_policy(const TrainerConfig& trainer) {
  return {{"actor", trainer.max_actor_ckpt_to_keep}, {"critic", trainer.max_critic_ckpt_to_keep}};
}

/// A folder the run will write to, created and probed before the first step, so that a typo or a
/// read-only mount is an error naming its key now rather than after hours of training.
inline void require_writable_folder(std::string_view key, const std::filesystem::path& folder) {
  std::error_code error;
  std::filesystem::create_directories(folder, error);
  VERL_CHECK_ARG(!error && std::filesystem::is_directory(folder), "{}: cannot create the folder '{}' ({})", key,
                 folder.string(), error ? error.message() : std::string("a file of that name is in the way"));
  const std::filesystem::path probe = folder / ".verl_cpp_write_probe";
  {
    std::ofstream out(probe);
    out << "probe";
    VERL_CHECK_ARG(out.good(), "{}: cannot write in the folder '{}'", key, folder.string());
  }
  std::filesystem::remove(probe, error);
}

/// Every output folder of the trainer section this run writes to (checkpoints only when saved).
inline void require_writable_outputs(const TrainerConfig& trainer, bool saves_checkpoints) {
  if (saves_checkpoints) require_writable_folder("trainer.default_local_dir", trainer.default_local_dir);
  if (trainer.rollout_data_dir) require_writable_folder("trainer.rollout_data_dir", *trainer.rollout_data_dir);
  if (trainer.validation_data_dir) require_writable_folder("trainer.validation_data_dir", *trainer.validation_data_dir);
}

inline CheckpointManager checkpoint_manager(const TrainerConfig& trainer) {
  return CheckpointManager(trainer.default_local_dir, retention_policy(trainer));
}

/// The trainer.logger backends for this run (the console's progress bar ends at `total_steps`;
/// `resumed_at_step`: the file logger keeps its earlier lines up to that step).
inline Tracking tracking(const TrainerConfig& trainer, std::int64_t total_steps,
                         std::optional<std::int64_t> resumed_at_step = std::nullopt, std::ostream& console = std::cout) {
  TrackingOptions options;
  options.console.total_steps = total_steps;
  options.console_stream = &console;
  options.resumed_at_step = resumed_at_step;
  return Tracking(trainer.project_name, trainer.experiment_name, trainer.logger, options);
}

}  // namespace verl::trainer
