// verl_train: verl's PPO-family trainer, configured as verl's main_ppo is:
//
//   verl_train [--config FILE.yaml | --config-path DIR --config-name NAME] key=value ...
//
// e.g. verl_train algorithm.adv_estimator=grpo data.train_files=train.jsonl data.val_files=test.jsonl
//        actor_rollout_ref.model.path=MODEL_DIR actor_rollout_ref.rollout.n=8 trainer.total_training_steps=20
//
// The policy (and the reference, when a KL term needs one) comes from actor_rollout_ref.model.path
// (a Hugging Face folder: config.json, model.safetensors, tokenizer.json [+ tokenizer_config.json],
// or a GGUF file with its own tokenizer); with actor_rollout_ref.model.lora_rank > 0 the actor
// trains LoRA adapters on the frozen base and the reference is the base without them (one copy);
// a critic, when the estimator needs one (gae), from critic.model.path (its value head is
// initialised when the folder has none). The final actor is written as a Hugging Face folder to
// <trainer.default_local_dir>/global_step_<N>/actor/huggingface (merged, with LoRA; the PEFT adapter
// goes to actor/lora_adapter).
//
// With MPI, verl_train is a HybridFlow job (hybridflow::run_controller): rank 0 runs the
// controller program (trainer::PPOController, verl's RayPPOTrainer.fit); the actor/rollout/
// reference worker group takes trainer.nnodes x trainer.n_gpus_per_node ranks, the critic the same
// ranks or a pool of its own (+critic.nnodes, +critic.n_gpus_per_node), one MPI rank standing for one
// device: `mpirun -np 2 verl_train trainer.n_gpus_per_node=2 ...`. Without MPI, one process runs
// the in-process trainer (trainer::PPOTrainer). All logic lives in the library; this file wires the
// pieces.
#include <chrono>
#include <concepts>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "verl/data/prompt_formatter.hpp"
#include "verl/data/rl_dataset.hpp"
#include "verl/model/checkpoint.hpp"
#include "verl/tokenizer/pretrained.hpp"
#include "verl/trainer/config.hpp"
#include "verl/trainer/config_yaml.hpp"
#include "verl/trainer/controller_inputs.hpp"
#include "verl/trainer/ppo_trainer.hpp"
#include "verl/trainer/policy_source.hpp"
#include "verl/trainer/prompt_chat_template.hpp"

#include "verl/core/paths.hpp"
#include "verl/trainer/workers/model_sources.hpp"
#ifdef VERL_TRAIN_WITH_MPI
#include "verl/hybridflow/runtime.hpp"
#include "verl/trainer/ppo_controller.hpp"
#include "verl/trainer/workers/reward_model_worker.hpp"
#include "verl/trainer/workers/megatron_actor_worker.hpp"
#include "verl/trainer/workers/megatron_critic_worker.hpp"
#include "verl/trainer/workers/rollout_worker.hpp"
#endif

namespace {

namespace fs = std::filesystem;
using namespace verl;

constexpr std::string_view usage = R"(usage: verl_train [--config FILE.yaml | --config-path DIR --config-name NAME] [--plan FILE] [--cfg job] key=value ...

Trains a Hugging Face model folder with verl's PPO-family algorithms, configured with verl's keys, e.g.
  verl_train algorithm.adv_estimator=grpo data.train_files=train.jsonl data.val_files=test.jsonl \
      actor_rollout_ref.model.path=MODEL_DIR actor_rollout_ref.rollout.n=8 data.train_batch_size=16 \
      trainer.total_training_steps=20 trainer.logger=[console,file]
Run under `mpirun -np N` with trainer.n_gpus_per_node=N (one rank per device) for data parallelism; a
critic of its own pool takes +critic.nnodes / +critic.n_gpus_per_node more ranks. `--plan FILE` reads
the placement `verl_plan --emit-keys FILE` chose (the command line's keys win). `--cfg job` prints the
resolved configuration (every key, as it would run) as YAML and exits, as verl's Hydra entry point does.
)";

fs::path expand_home(const std::string& path) { return io::expand_user(path); }


using trainer::ControllerInputs;
using Formatter = trainer::PromptFormatter;

/// What the datasets hold, for the start-up line.
struct DatasetSizes {
  std::size_t train = 0, filtered = 0, val = 0;
  explicit DatasetSizes(const ControllerInputs& in) : train(in.train.size()), filtered(in.train.filtered_count()), val(in.val.size()) {}
};

void print_start(const trainer::PPOConfig& config, const trainer::PPOAlgorithm& algorithm, std::int64_t parameters,
                 const DatasetSizes& sizes, std::string_view placement, int ranks) {
  fmt::print("verl_train: {} ({} trainable parameters), {} train prompts ({} filtered as overlong), {} validation prompts, "
             "adv_estimator={}, loss_mode={}, {} rank(s){}\n",
             expand_home(config.actor_rollout_ref.model.path).string(), parameters, sizes.train, sizes.filtered, sizes.val,
             algorithm.estimator.name(), algorithm.policy_loss.name(), ranks,
             placement.empty() ? std::string() : fmt::format(" ({})", placement));
  std::fflush(stdout);
}

fs::path final_actor_folder(const trainer::PPOConfig& config, std::int64_t global_step) {
  return fs::path(expand_home(config.trainer.default_local_dir)) / fmt::format("global_step_{}", global_step) / "actor";
}

#ifdef VERL_TRAIN_WITH_MPI

/// The digest of this process's resolved configuration (set before the runtime starts).
std::uint64_t own_config_digest = 0;

std::uint64_t config_digest(std::string_view resolved_yaml) {
  std::uint64_t digest = 0xcbf29ce484222325ULL;  // FNV-1a
  for (const char ch : resolved_yaml) digest = (digest ^ static_cast<unsigned char>(ch)) * 0x100000001b3ULL;
  return digest;
}

/// Every rank must be started with the controller's configuration: the workers run what the
/// controller sends them, so another command line on some rank would otherwise be ignored without
/// a word. Checked once at start on every rank.
struct ConfigCheck {
  static constexpr std::string_view name = "ConfigCheck";
  explicit ConfigCheck(hybridflow::WorkerContext& context) : context_(&context) {}
  void same_as_controller(std::uint64_t controller_digest) const {
    VERL_CHECK_ARG(controller_digest == own_config_digest,
                   "configuration: rank {} resolved a different configuration than rank 0 (digest {:016x}, rank 0's "
                   "{:016x}); every rank must be given the same config file and overrides (compare `verl_train --cfg "
                   "job ...` on each)",
                   context_->global_rank, own_config_digest, controller_digest);
  }
  using methods = TypeList<hybridflow::Method<&ConfigCheck::same_as_controller, hybridflow::Dispatch::one_to_all,
                                              "same_as_controller">>;

 private:
  hybridflow::WorkerContext* context_;
};

using DenseActor = trainer::ActorRolloutRefWorker<trainer::HfPolicySource>;
using LoraActor = trainer::ActorRolloutRefWorker<trainer::HfLoraPolicySource>;
using MegatronActor = trainer::MegatronActorRolloutRefWorker<trainer::HfPolicySource>;
using Critic = trainer::CriticWorker<trainer::HfCriticSource>;
using MegatronCritic = trainer::MegatronCriticWorker<trainer::HfCriticSource>;
using RewardModel = trainer::RewardModelWorker<trainer::HfRewardModelSource>;
using Rollout = trainer::RolloutWorker<trainer::HfPolicySource>;  // a rollout pool of its own (hybrid_engine=False)

/// The controller program (rank 0): places the roles, spawns the worker groups and runs fit().
template <class Actor, class CriticWorker, class Runtime>
int train_with_workers(Runtime& runtime, const trainer::PPOConfig& config, const trainer::PPOAlgorithm& algorithm,
                       const hybridflow::RolePlacement& placement, const tokenizer::PretrainedTokenizer& tokenizer,
                       const Formatter& formatter) {
  // The model's sizes and ids without loading its weights here: config.json (or the GGUF header).
  const model::HfModelConfig model_config = trainer::load_policy_config(expand_home(config.actor_rollout_ref.model.path),
                                                                        "actor_rollout_ref.model.path");
  std::vector<std::int64_t> eos(model_config.eos_token_ids.begin(), model_config.eos_token_ids.end());
  std::optional<std::int64_t> pad;
  if (model_config.pad_token_id) pad = *model_config.pad_token_id;
  ControllerInputs in = trainer::controller_inputs(config, tokenizer, formatter, model_config.vocab_size, eos, pad);
  const DatasetSizes sizes(in);
  // The dense actor's rollout may live on a pool of its own; the config refuses that for the others.
  using RolloutType = std::conditional_t<std::same_as<Actor, DenseActor>, Rollout, trainer::NoRolloutWorker>;
  trainer::PPOController<Runtime, Actor, CriticWorker, reward::DefaultRewardFunction, RewardModel, RolloutType> controller(
      runtime, config, placement, reward::DefaultRewardFunction{}, std::move(in.hooks), std::move(in.train),
      std::move(in.val));
  const trainer::PolicyFacts facts = controller.actor_group().template call<&Actor::policy_facts>().get();
  print_start(config, algorithm, facts.parameter_count, sizes, placement.describe(), placement.world_size);
  controller.fit();
  const fs::path actor_dir = final_actor_folder(config, controller.global_step());
  fmt::print("verl_train: saved the final actor to {}\n",
             controller.export_actor(actor_dir / "huggingface", actor_dir / "lora_adapter"));
  return 0;
}

#else

/// Without MPI: the in-process trainer (one process, every role in it).
template <class Policy, class Critic>
int train_in_process(const trainer::PPOConfig& config, const trainer::PPOAlgorithm& algorithm, Policy actor,
                     std::optional<Policy> reference, Critic critic, const tokenizer::PretrainedTokenizer& tokenizer,
                     const Formatter& formatter) {
  std::vector<std::int64_t> eos(actor.config().eos_token_ids.begin(), actor.config().eos_token_ids.end());
  std::optional<std::int64_t> pad;
  if (actor.config().pad_token_id) pad = *actor.config().pad_token_id;
  ControllerInputs in = trainer::controller_inputs(config, tokenizer, formatter, actor.vocab_size(), eos, pad);
  print_start(config, algorithm, static_cast<std::int64_t>(model::parameter_count(actor)), DatasetSizes(in), "", 1);
  trainer::PPOTrainer<Policy, Critic> ppo(config, algorithm, std::move(actor), std::move(reference), std::move(critic),
                                          reward::DefaultRewardFunction{}, std::move(in.hooks), std::move(in.train),
                                          std::move(in.val));
  ppo.fit();
  const fs::path actor_dir = final_actor_folder(config, ppo.global_step());
  const fs::path out = actor_dir / "huggingface";
  const std::string saved = trainer::save_policy(ppo.actor(), out, actor_dir / "lora_adapter",
                                                 expand_home(config.actor_rollout_ref.model.path).string());
  trainer::save_tokenizer_files(trainer::detail::tokenizer_source(config), out);
  fmt::print("verl_train: saved the final actor to {}\n", saved);
  return 0;
}

#endif

/// The command line's configuration (every rank reads its own; the controller checks they agree).
struct Command {
  trainer::PPOConfig config;
  std::string resolved_yaml;
};

std::optional<Command> read_command(int argc, char** argv) {
  const trainer::ConfigArguments args = trainer::parse_config_arguments(argc, argv);
  if (args.help) {
    std::fputs(usage.data(), stdout);
    return std::nullopt;
  }
  trainer::detail::ConfigNode resolved;
  trainer::PPOConfig config = args.config_file ? trainer::load_ppo_config(*args.config_file, args.overrides, &resolved)
                                               : trainer::load_ppo_config(args.overrides, &resolved);
  if (args.print_config) {  // Hydra's --cfg job: what would run, then stop
    std::fputs(trainer::to_yaml(resolved).c_str(), stdout);
    return std::nullopt;
  }
  return Command{std::move(config), trainer::to_yaml(resolved)};
}

/// The setup every path shares: output folder, algorithm, tokenizer and prompt format, critic.
struct Setup {
  trainer::PPOAlgorithm algorithm;
  tokenizer::PretrainedTokenizer tokenizer;
  Formatter formatter;
  bool use_critic = false;
  bool lora = false;
};

Setup setup_of(const trainer::PPOConfig& config) {
  // The final actor is saved under trainer.default_local_dir whatever trainer.save_freq says.
  trainer::require_writable_folder("trainer.default_local_dir", expand_home(config.trainer.default_local_dir));
  Setup setup{trainer::PPOAlgorithm::from_config(config), trainer::load_policy_tokenizer(trainer::detail::tokenizer_source(config)),
              {}, false, false};
  setup.formatter = trainer::prompt_formatter(config, setup.tokenizer);
  setup.use_critic = config.critic.enable.value_or(setup.algorithm.needs_critic());
  VERL_CHECK_ARG(setup.use_critic || !setup.algorithm.needs_critic(),
                 "critic.enable: algorithm.adv_estimator '{}' needs a critic, but critic.enable=False",
                 setup.algorithm.estimator.name());
  setup.lora = trainer::lora_options(trainer::lora_keys(config.actor_rollout_ref.model), "actor_rollout_ref.model.").has_value();
  return setup;
}

#ifdef VERL_TRAIN_WITH_MPI

int run(int argc, char** argv) {
  std::optional<Command> command;
  try {
    command = read_command(argc, argv);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "verl_train: error: %s\n", error.what());
    return 1;
  }
  if (!command) return 0;
  own_config_digest = config_digest(command->resolved_yaml);
  const trainer::PPOConfig& config = command->config;
  // Rank 0 runs the controller program below; every rank (rank 0 too, in a thread of its own)
  // serves the worker groups placed on it.
  return hybridflow::run_controller<ConfigCheck, DenseActor, LoraActor, MegatronActor, Critic, MegatronCritic, RewardModel,
                                     Rollout>(
      argc, argv, [&](auto& runtime) {
    runtime.template spawn<ConfigCheck>(runtime.whole_world())
        .template call<&ConfigCheck::same_as_controller>(own_config_digest)
        .get();
    const Setup setup = setup_of(config);
    const hybridflow::RolePlacement placement =
        hybridflow::place_roles(trainer::placement_keys(config, setup.use_critic), runtime.world_size());
    const auto with_critic = [&]<class Actor>() {
      // critic.strategy=megatron: the tensor-parallel critic (its own critic.megatron layout).
      if (setup.use_critic && config.critic.strategy == "megatron")
        return train_with_workers<Actor, MegatronCritic>(runtime, config, setup.algorithm, placement, setup.tokenizer,
                                                         setup.formatter);
      if (setup.use_critic)
        return train_with_workers<Actor, Critic>(runtime, config, setup.algorithm, placement, setup.tokenizer, setup.formatter);
      return train_with_workers<Actor, trainer::NoCritic>(runtime, config, setup.algorithm, placement, setup.tokenizer,
                                                          setup.formatter);
    };
    // actor_rollout_ref.actor.strategy=megatron: the tensor-parallel worker (config.hpp refuses LoRA with it).
    if (config.actor_rollout_ref.actor.strategy == "megatron") return with_critic.template operator()<MegatronActor>();
    return setup.lora ? with_critic.template operator()<LoraActor>() : with_critic.template operator()<DenseActor>();
  });
}

#else

int run(int argc, char** argv) {
  try {
    const std::optional<Command> command = read_command(argc, argv);
    if (!command) return 0;
    const trainer::PPOConfig& config = command->config;
    const Setup setup = setup_of(config);
    // The tensor-parallel workers run on the HybridFlow runtime only (an MPI build); at tp = 1 the
    // in-process models compute what they would.
    for (const auto& [key, tp] : {std::pair<std::string_view, std::int64_t>{"actor_rollout_ref.actor.megatron.tensor_model_parallel_size",
                                                                            config.actor_rollout_ref.actor.megatron.tensor_model_parallel_size},
                                  {"critic.megatron.tensor_model_parallel_size", config.critic.megatron.tensor_model_parallel_size}}) {
      VERL_CHECK_ARG(tp == 1, "{}: this verl_train is built without MPI (one process, no tensor parallelism); expected 1, got {}",
                     key, tp);
    }
    model::Transformer base = trainer::HfPolicySource::actor(config);
    auto with_critic = [&](auto actor, auto reference) {
      if (setup.use_critic)
        return train_in_process(config, setup.algorithm, std::move(actor), std::move(reference),
                                trainer::HfCriticSource::critic(config), setup.tokenizer, setup.formatter);
      return train_in_process(config, setup.algorithm, std::move(actor), std::move(reference), trainer::NoCritic{},
                              setup.tokenizer, setup.formatter);
    };
    if (setup.lora) {
      model::LoraTransformer actor = trainer::HfLoraPolicySource::actor(config);
      std::optional<model::LoraTransformer> reference;
      if (setup.algorithm.needs_reference()) reference = actor.with_adapter_disabled();
      return with_critic(std::move(actor), std::move(reference));
    }
    std::optional<model::Transformer> reference;
    if (setup.algorithm.needs_reference()) reference = base;
    return with_critic(std::move(base), std::move(reference));
  } catch (const std::exception& error) {
    std::fprintf(stderr, "verl_train: error: %s\n", error.what());
    return 1;
  }
}

#endif

}  // namespace

int main(int argc, char** argv) { return run(argc, argv); }
