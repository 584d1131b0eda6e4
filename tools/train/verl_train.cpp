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
// goes to actor/lora_adapter). Under mpirun, ranks split each
// batch (data parallel). All logic lives in the library; this file wires the pieces.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "verl/data/prompt_formatter.hpp"
#include "verl/data/rl_dataset.hpp"
#include "verl/model/checkpoint.hpp"
#include "verl/tokenizer/pretrained.hpp"
#include "verl/trainer/config.hpp"
#include "verl/trainer/config_yaml.hpp"
#include "verl/trainer/ppo_trainer.hpp"
#include "verl/trainer/policy_source.hpp"
#include "verl/trainer/prompt_chat_template.hpp"

#ifdef VERL_TRAIN_WITH_MPI
#include "verl/parallel/mpi_communicator.hpp"
#endif

namespace {

namespace fs = std::filesystem;
using namespace verl;

constexpr std::string_view usage = R"(usage: verl_train [--config FILE.yaml | --config-path DIR --config-name NAME] [--cfg job] key=value ...

Trains a Hugging Face model folder with verl's PPO-family algorithms, configured with verl's keys, e.g.
  verl_train algorithm.adv_estimator=grpo data.train_files=train.jsonl data.val_files=test.jsonl \
      actor_rollout_ref.model.path=MODEL_DIR actor_rollout_ref.rollout.n=8 data.train_batch_size=16 \
      trainer.total_training_steps=20 trainer.logger=[console,file]
Run under `mpirun -np N` for data parallelism. `--cfg job` prints the resolved configuration (every key,
as it would run) as YAML and exits, as verl's Hydra entry point does.
)";

#ifdef VERL_TRAIN_WITH_MPI
using Communicator = parallel::MpiCommunicator;
/// MPI_COMM_WORLD's ranks, whose collectives give up after actor_rollout_ref.nccl_timeout seconds
/// (an error then, which ends every rank).
Communicator make_communicator(const trainer::PPOConfig& config) {
  auto comm = parallel::MpiCommunicator::world();
  comm.set_timeout(std::chrono::seconds(config.actor_rollout_ref.nccl_timeout));
  return comm;
}
#else
using Communicator = parallel::SelfCommunicator;
Communicator make_communicator(const trainer::PPOConfig&) { return {}; }
#endif

fs::path expand_home(const std::string& path) {
  if (path.starts_with("~/")) {
    if (const char* home = std::getenv("HOME")) return fs::path(home) / path.substr(2);
  }
  return path;
}

std::vector<fs::path> paths_of(const std::vector<std::string>& files) {
  std::vector<fs::path> out;
  for (const auto& f : files) out.push_back(expand_home(f));
  return out;
}

/// The chat template (trainer::prompt_chat_template), else the messages' contents joined: what RLHFDataset
/// renders prompts with.
struct Formatter {
  std::optional<tokenizer::AnyChatTemplate> chat;
  [[nodiscard]] std::string render(std::span<const tokenizer::ChatMessage> messages, bool add_generation_prompt) const {
    if (chat) return chat->render(messages, add_generation_prompt);
    return data::ContentOnlyFormatter{"\n"}.render(messages, add_generation_prompt);
  }
};

template <class Policy, class Critic>
int train(const trainer::PPOConfig& config, const trainer::PPOAlgorithm& algorithm, const fs::path& model_path,
          Policy actor, std::optional<Policy> reference, Critic critic, const tokenizer::PretrainedTokenizer& tokenizer,
          const Formatter& formatter, Communicator comm) {
  const int rank = comm.rank();
  const auto& special = tokenizer.tokenizer.special_ids();

  // A tokenizer with more ids than the model has embeddings (another model's tokenizer) would
  // index past the embedding table; a model padded past the tokenizer (Qwen's 151936) is fine.
  const auto tokenizer_path = config.actor_rollout_ref.model.tokenizer_path ? expand_home(*config.actor_rollout_ref.model.tokenizer_path)
                                                                            : model_path;
  VERL_CHECK_ARG(static_cast<std::int64_t>(tokenizer.tokenizer.vocab_size()) <= static_cast<std::int64_t>(actor.vocab_size()),
                 "actor_rollout_ref.model.tokenizer_path: the tokenizer in '{}' has {} ids, more than the {} embeddings "
                 "(vocab_size) of the model in '{}'; they do not belong together",
                 tokenizer_path.string(), tokenizer.tokenizer.vocab_size(), actor.vocab_size(), model_path.string());
  trainer::TokenizerHooks hooks;
  const auto vocab = static_cast<model::TokenId>(tokenizer.tokenizer.vocab_size());
  hooks.decode = [&tokenizer, vocab](std::span<const model::TokenId> ids) {
    // Model vocabularies are often padded past the tokenizer's; those ids have no text.
    std::vector<model::TokenId> known;
    for (const auto id : ids)
      if (id >= 0 && id < vocab) known.push_back(id);
    return tokenizer.tokenizer.decode(known, true);
  };
  hooks.eos_token_ids = actor.config().eos_token_ids;
  if (special.eos) hooks.eos_token_ids.push_back(*special.eos);
  hooks.pad_token_id = special.pad.value_or(actor.config().pad_token_id.value_or(special.eos.value_or(0)));

  const auto train_files = paths_of(config.data.train_files);
  data::RLHFDataset train =
      data::RLHFDataset::load(train_files, tokenizer.tokenizer, formatter, trainer::dataset_options(config.data));
  data::RLHFDataset val;
  if (!config.data.val_files.empty()) {
    const auto val_files = paths_of(config.data.val_files);
    val = data::RLHFDataset::load(val_files, tokenizer.tokenizer, formatter, trainer::dataset_options(config.data, true));
  }
  if (rank == 0) {
    fmt::print("verl_train: {} ({} trainable parameters), {} train prompts ({} filtered as overlong), {} validation prompts, "
               "adv_estimator={}, loss_mode={}, {} rank(s)\n",
               model_path.string(), model::parameter_count(actor), train.size(), train.filtered_count(), val.size(),
               algorithm.estimator.name(), algorithm.policy_loss.name(), comm.size());
    std::fflush(stdout);
  }
  trainer::PPOTrainer<Policy, Critic, reward::DefaultRewardFunction, Communicator> ppo(
      config, algorithm, std::move(actor), std::move(reference), std::move(critic), reward::DefaultRewardFunction{},
      std::move(hooks), std::move(train), std::move(val), std::move(comm));
  ppo.fit();
  if (rank == 0) {
    const fs::path actor_dir = fs::path(expand_home(config.trainer.default_local_dir)) /
                               fmt::format("global_step_{}", ppo.global_step()) / "actor";
    const fs::path out = actor_dir / "huggingface";
    const std::string saved = trainer::save_policy(ppo.actor(), out, actor_dir / "lora_adapter", model_path.string());
    trainer::save_tokenizer_files(config.actor_rollout_ref.model.tokenizer_path
                                      ? expand_home(*config.actor_rollout_ref.model.tokenizer_path)
                                      : model_path,
                                  out);
    fmt::print("verl_train: saved the final actor to {}\n", saved);
  }
  return 0;
}

/// Every rank must run the same configuration (the same file, overrides and environment): a rank
/// that resolved another one stops the run before anything is trained, naming the digests.
void require_the_same_configuration_on_every_rank(const trainer::PPOConfig& config, std::string_view resolved_yaml) {
#ifdef VERL_TRAIN_WITH_MPI
  std::uint64_t digest = 0xcbf29ce484222325ULL;  // FNV-1a
  for (const char ch : resolved_yaml) digest = (digest ^ static_cast<unsigned char>(ch)) * 0x100000001b3ULL;
  auto comm = make_communicator(config);
  std::int64_t rank0_bits = static_cast<std::int64_t>(digest);
  comm.broadcast(std::span<std::int64_t>(&rank0_bits, 1), 0);
  const auto rank0 = static_cast<std::uint64_t>(rank0_bits);
  VERL_CHECK_ARG(rank0 == digest,
                 "configuration: rank {} resolved a different configuration than rank 0 (digest {:016x}, rank 0's "
                 "{:016x}); every rank must be given the same config file and overrides (compare `verl_train --cfg "
                 "job ...` on each)",
                 comm.rank(), digest, rank0);
#else
  (void)config;
  (void)resolved_yaml;
#endif
}

int run(int argc, char** argv) {
  const trainer::ConfigArguments args = trainer::parse_config_arguments(argc, argv);
  if (args.help) {
    std::fputs(usage.data(), stdout);
    return 0;
  }
  trainer::detail::ConfigNode resolved;
  const trainer::PPOConfig config = args.config_file
                                        ? trainer::load_ppo_config(*args.config_file, args.overrides, &resolved)
                                        : trainer::load_ppo_config(args.overrides, &resolved);
  if (args.print_config) {  // Hydra's --cfg job: what would run, then stop
    std::fputs(trainer::to_yaml(resolved).c_str(), stdout);
    return 0;
  }
  require_the_same_configuration_on_every_rank(config, trainer::to_yaml(resolved));
  // The final actor is saved under trainer.default_local_dir whatever trainer.save_freq says.
  trainer::require_writable_folder("trainer.default_local_dir",
                                   expand_home(config.trainer.default_local_dir));
  const trainer::PPOAlgorithm algorithm = trainer::PPOAlgorithm::from_config(config);
  const fs::path model_path = expand_home(config.actor_rollout_ref.model.path);
  const trainer::LoraKeys lora_keys = trainer::lora_keys(config.actor_rollout_ref.model);
  const auto lora = trainer::lora_options(lora_keys, "actor_rollout_ref.model.");
  model::Transformer base = trainer::load_policy(model_path, "actor_rollout_ref.model.path");
  const fs::path tokenizer_path = config.actor_rollout_ref.model.tokenizer_path
                                      ? expand_home(*config.actor_rollout_ref.model.tokenizer_path)
                                      : model_path;
  const tokenizer::PretrainedTokenizer tokenizer = trainer::load_policy_tokenizer(tokenizer_path);
  const Formatter formatter{trainer::prompt_chat_template(config, tokenizer)};

  const bool use_critic = config.critic.enable.value_or(algorithm.needs_critic());
  VERL_CHECK_ARG(use_critic || !algorithm.needs_critic(),
                 "critic.enable: algorithm.adv_estimator '{}' needs a critic, but critic.enable=False",
                 algorithm.estimator.name());
  // With LoRA the reference is the actor with its adapter disabled, sharing the base weights
  // (verl's ref_in_actor); without, a second copy of the model.
  auto run_with = [&](auto critic) {
    if (lora) {
      model::LoraTransformer actor =
          trainer::make_lora_policy(std::move(base), *lora, lora_keys, "actor_rollout_ref.model.");
      std::optional<model::LoraTransformer> reference;
      if (algorithm.needs_reference()) reference = actor.with_adapter_disabled();
      return train(config, algorithm, model_path, std::move(actor), std::move(reference), std::move(critic), tokenizer,
                   formatter, make_communicator(config));
    }
    std::optional<model::Transformer> reference;
    if (algorithm.needs_reference()) reference = base;
    return train(config, algorithm, model_path, std::move(base), std::move(reference), std::move(critic), tokenizer,
                 formatter, make_communicator(config));
  };
  if (use_critic) return run_with(trainer::load_critic_model(expand_home(config.critic.model.path), "critic.model.path"));
  return run_with(trainer::NoCritic{});
}

}  // namespace

int main(int argc, char** argv) {
#ifdef VERL_TRAIN_WITH_MPI
  verl::parallel::MpiEnvironment mpi(argc, argv);
#endif
  try {
    return run(argc, argv);
  } catch (const std::exception& error) {
#ifdef VERL_TRAIN_WITH_MPI
    const auto [rank, size] = parallel::world_rank_and_size();
    if (size > 1) {
      std::fprintf(stderr, "verl_train: rank %d of %d: error: %s\n", rank, size, error.what());
      std::fflush(stderr);
      parallel::abort_every_rank(1);  // the other ranks may wait in a collective for this one
    }
#endif
    std::fprintf(stderr, "verl_train: error: %s\n", error.what());
    return 1;
  }
}
