// PPOConfig: the typed form of verl's PPO trainer configuration, with verl's section and key
// names (data, actor_rollout_ref.{actor,ref,rollout,model}, critic, reward, algorithm, trainer)
// and verl 0.9.1's defaults, for the keys verl-cpp supports.
// visit_fields() walks every supported key with its dotted path: the single list from which
// loading, dumping and the "supported key" check are all derived.
//
// Defaults differ from verl's yaml in three places, because verl-cpp runs without Python
// services and on CPU by default: trainer.logger = ['console'] (verl: console, wandb),
// trainer.n_gpus_per_node = 1 (verl: 8), trainer.device = 'cpu' (verl: cuda).
//
// Keys marked "verl-cpp extension" are not in verl's ppo_trainer.yaml; they come from verl's
// recipes (DAPO: data.gen_batch_size, reward_model.overlong_buffer). verl 0.9.1 moved the reward
// settings under reward.*; its legacy reward_model.* / custom_reward_function.* keys are carried
// over by config.hpp as verl's migrate_legacy_reward_impl does.
#pragma once

#include <nlohmann/json.hpp>

#include <concepts>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "verl/data/truncation.hpp"
#include "verl/trainer/checkpoint.hpp"
#include "verl/trainer/config/detail/config_fields.hpp"

namespace verl::trainer {

/// actor_rollout_ref.actor.optim / critic.optim (verl's FSDPOptimizerConfig).
struct OptimConfig {
  std::string optimizer = "AdamW";
  double lr = 1e-6;
  double lr_warmup_steps_ratio = 0.0;
  std::int64_t total_training_steps = -1;
  double weight_decay = 0.01;
  std::int64_t lr_warmup_steps = -1;
  std::vector<double> betas = {0.9, 0.999};
  double clip_grad = 1.0;
  double min_lr_ratio = 0.0;
  double num_cycles = 0.5;
  std::string lr_scheduler_type = "constant";
  std::optional<std::string> warmup_style;  ///< deprecated alias of lr_scheduler_type
  friend bool operator==(const OptimConfig&, const OptimConfig&) = default;
};

/// actor_rollout_ref.actor.policy_loss.
struct PolicyLossSection {
  std::string loss_mode = "vanilla";
  double clip_cov_ratio = 0.0002;
  double clip_cov_lb = 1.0;
  double clip_cov_ub = 5.0;
  double kl_cov_ratio = 0.0002;
  double ppo_kl_coef = 0.1;
  std::optional<double> dro_beta;  ///< dro's penalty weight (verl 0.9.1; required by loss_mode dro)
  friend bool operator==(const PolicyLossSection&, const PolicyLossSection&) = default;
};

/// <role>.checkpoint: what a checkpoint holds ("model", "optimizer", "extra").
struct CheckpointContentsConfig {
  std::vector<std::string> save_contents = {"model", "optimizer", "extra"};
  std::vector<std::string> load_contents = {"model", "optimizer", "extra"};
  friend bool operator==(const CheckpointContentsConfig&, const CheckpointContentsConfig&) = default;
};

/// actor_rollout_ref.model.
struct ModelSection {
  std::string path = "~/models/deepseek-llm-7b-chat";
  std::optional<std::string> tokenizer_path;
  /// A Jinja chat template that replaces the tokenizer's (as in verl), or one of verl-cpp's
  /// registry names: chatml, qwen2, llama3.
  std::optional<std::string> custom_chat_template;
  /// LoRA (verl's FSDP/PEFT keys): rank > 0 trains adapters on a frozen base, and the reference
  /// policy is the base without the adapter. verl's newer `lora.*` section configures
  /// Megatron-Bridge's LoRA (Megatron module names: linear_qkv, linear_fc1, ...) and stays
  /// accepted only at its defaults.
  std::int64_t lora_rank = 0;
  double lora_alpha = 16;
  std::vector<std::string> target_modules = {"all-linear"};
  std::optional<std::vector<std::string>> exclude_modules;
  /// A PEFT adapter folder to start from (its adapter_config.json sets rank, alpha and targets).
  std::optional<std::string> lora_adapter_path;
  friend bool operator==(const ModelSection&, const ModelSection&) = default;
};

/// actor_rollout_ref.actor.megatron and critic.megatron: Megatron's parallel layout (with
/// strategy=megatron). verl's defaults; what verl-cpp does not build is refused by name in validate().
struct MegatronSection {
  std::int64_t tensor_model_parallel_size = 1;
  std::int64_t pipeline_model_parallel_size = 1;
  std::int64_t context_parallel_size = 1;
  bool sequence_parallel = true;
  bool use_distributed_optimizer = true;
  friend bool operator==(const MegatronSection&, const MegatronSection&) = default;
};

/// actor_rollout_ref.{actor,ref}.fsdp_config and critic.fsdp: what verl-cpp acts on of verl's FSDP engine
/// settings (the others are machinery, config.hpp).
struct FsdpEngineSection {
  /// The FSDP sharding group: parameters, gradients and AdamW's moments sharded over fsdp_size
  /// ranks and replicated over world / fsdp_size (HYBRID_SHARD); -1: every rank of the group.
  std::int64_t fsdp_size = -1;
  friend bool operator==(const FsdpEngineSection&, const FsdpEngineSection&) = default;
};

/// actor_rollout_ref.actor.
struct ActorConfig {
  /// fsdp / fsdp2: the data-parallel worker (ActorRolloutRefWorker); megatron: the tensor-parallel
  /// one (MegatronActorRolloutRefWorker) with `megatron`'s layout.
  std::string strategy = "fsdp";
  MegatronSection megatron;
  OptimConfig optim;
  std::int64_t ppo_mini_batch_size = 256;
  std::optional<std::int64_t> ppo_micro_batch_size;
  std::optional<std::int64_t> ppo_micro_batch_size_per_gpu;
  bool use_dynamic_bsz = false;
  double clip_ratio = 0.2;
  double clip_ratio_low = 0.2;
  double clip_ratio_high = 0.2;
  double tau_pos = 1.0;
  double tau_neg = 1.05;
  PolicyLossSection policy_loss;
  double clip_ratio_c = 3.0;
  std::string loss_agg_mode = "token-mean";
  std::optional<double> loss_scale_factor;
  double entropy_coeff = 0.0;
  /// Also compute sum_j pi_j^2 per token with the old log-probs (the optimal-token-baseline
  /// estimators read it; verl asserts it is on for them).
  bool calculate_sum_pi_squared = false;
  bool use_kl_loss = false;
  double kl_loss_coef = 0.001;
  std::string kl_loss_type = "low_var_kl";
  std::int64_t ppo_epochs = 1;
  CheckpointContentsConfig checkpoint;
  double grad_clip = 1.0;
  /// Ulysses sequence parallelism of the fsdp worker: the ranks that share one data-parallel
  /// rank's rows and split their tokens (ActorRolloutRefWorker; the reference follows it).
  std::int64_t ulysses_sequence_parallel_size = 1;
  FsdpEngineSection fsdp_config;
  friend bool operator==(const ActorConfig&, const ActorConfig&) = default;
};

/// actor_rollout_ref.ref.
struct RefConfig {
  std::optional<std::int64_t> log_prob_micro_batch_size;
  std::optional<std::int64_t> log_prob_micro_batch_size_per_gpu;
  bool log_prob_use_dynamic_bsz = false;
  FsdpEngineSection fsdp_config;
  friend bool operator==(const RefConfig&, const RefConfig&) = default;
};

/// actor_rollout_ref.rollout.val_kwargs: sampling for validation (greedy by default).
struct ValidationSamplingConfig {
  std::int64_t top_k = -1;
  double top_p = 1.0;
  double temperature = 0.0;
  std::int64_t n = 1;
  bool do_sample = false;
  friend bool operator==(const ValidationSamplingConfig&, const ValidationSamplingConfig&) = default;
};

/// actor_rollout_ref.rollout.
struct RolloutConfig {
  std::optional<std::string> name;  ///< verl's mandatory engine name ("???"); unset means verl-cpp's own
  double temperature = 1.0;
  std::int64_t top_k = -1;
  double top_p = 1.0;
  std::int64_t prompt_length = 512;    ///< follows data.max_prompt_length
  std::int64_t response_length = 512;  ///< follows data.max_response_length
  bool do_sample = true;
  std::int64_t n = 1;
  bool ignore_eos = false;
  std::optional<std::int64_t> log_prob_micro_batch_size;
  std::optional<std::int64_t> log_prob_micro_batch_size_per_gpu;
  bool log_prob_use_dynamic_bsz = false;
  /// The precision the rollout decodes with: float32 (verl-cpp's default: the weights as
  /// trained) or bfloat16 (verl's default: the weights rounded, as its inference engines run).
  std::string dtype = "float32";
  /// The generation layout's TP size tg (the 3D-HybridEngine's generation mesh (pg = 1, tg,
  /// dg = ranks / tg)). Acts with actor.strategy=megatron, where it must divide the training
  /// actor.megatron.tensor_model_parallel_size; with fsdp every rank generates with the whole
  /// model (tg = 1) and only 1 or verl's default 2 are accepted.
  std::int64_t tensor_model_parallel_size = 2;
  /// Whether the rollout's own log-probs are compared with the actor's (verl's
  /// training/rollout_probs_diff_* metrics); rollout correction needs them too.
  bool calculate_log_probs = true;
  ValidationSamplingConfig val_kwargs;
  /// The rollout's own pool (nnodes x n_gpus_per_node ranks after the trainer's), with
  /// actor_rollout_ref.hybrid_engine=False; n_gpus_per_node is verl's
  /// ${oc.select:trainer.n_gpus_per_node,8}, trainer.n_gpus_per_node's default here.
  std::int64_t nnodes = 0;
  std::int64_t n_gpus_per_node = 1;
  friend bool operator==(const RolloutConfig&, const RolloutConfig&) = default;
};

struct ActorRolloutRefConfig {
  ModelSection model;
  ActorConfig actor;
  RefConfig ref;
  RolloutConfig rollout;
  /// verl's hybrid engine: the rollout runs in the actor's processes on weights resharded in place;
  /// False puts it on a pool of its own (actor_rollout_ref.rollout.nnodes / n_gpus_per_node), whose
  /// weights the actor's replace after every update.
  bool hybrid_engine = true;
  /// Seconds any collective may wait for the other ranks before the run ends with an error
  /// (verl's NCCL timeout; verl-cpp's MPI collectives honour it).
  std::int64_t nccl_timeout = 600;
  friend bool operator==(const ActorRolloutRefConfig&, const ActorRolloutRefConfig&) = default;
};

/// critic.model.
struct CriticModelSection {
  std::string path = "~/models/deepseek-llm-7b-chat";
  std::optional<std::string> tokenizer_path;
  friend bool operator==(const CriticModelSection&, const CriticModelSection&) = default;
};

/// critic.
struct CriticConfig {
  /// fsdp / fsdp2: the data-parallel worker (CriticWorker); megatron: the tensor-parallel one
  /// (MegatronCriticWorker) with `megatron`'s layout.
  std::string strategy = "fsdp";
  /// critic.megatron (verl's ppo_megatron_trainer.yaml): the critic's own Megatron layout.
  MegatronSection megatron;
  OptimConfig optim = [] {
    OptimConfig critic_optim;
    critic_optim.lr = 1e-5;
    return critic_optim;
  }();
  CriticModelSection model;
  std::optional<bool> enable;  ///< null: decided by the advantage estimator (GAE needs a critic)
  std::int64_t ppo_mini_batch_size = 256;  ///< follows the actor's
  std::optional<std::int64_t> ppo_micro_batch_size;
  std::optional<std::int64_t> ppo_micro_batch_size_per_gpu;
  bool use_dynamic_bsz = false;
  std::int64_t ppo_epochs = 1;
  double cliprange_value = 0.5;
  std::string loss_agg_mode = "token-mean";
  CheckpointContentsConfig checkpoint;
  std::optional<std::int64_t> forward_micro_batch_size;
  std::optional<std::int64_t> forward_micro_batch_size_per_gpu;
  double grad_clip = 1.0;
  /// The critic's own resource pool (verl-cpp's keys, `+critic.nnodes` / `+critic.n_gpus_per_node`:
  /// verl has none; its split-placement example builds this pool in code). 0: the critic shares
  /// the actor's ranks.
  std::int64_t nnodes = 0;
  std::int64_t n_gpus_per_node = 0;
  /// Ulysses sequence parallelism of the critic worker (as the actor's).
  std::int64_t ulysses_sequence_parallel_size = 1;
  /// critic.fsdp (0.9.1's name for the critic's FSDP engine settings).
  FsdpEngineSection fsdp;
  friend bool operator==(const CriticConfig&, const CriticConfig&) = default;
};

/// reward_model.overlong_buffer (DAPO's overlong penalty; verl-cpp extension).
struct OverlongBufferConfig {
  bool enable = false;
  std::int64_t len = 0;
  double penalty_factor = 0.0;
  bool log = false;
  friend bool operator==(const OverlongBufferConfig&, const OverlongBufferConfig&) = default;
};

/// reward_model: verl 0.9.1 keeps this section only for legacy keys (migrated into reward.*);
/// verl-cpp keeps its DAPO extension here.
struct RewardModelConfig {
  OverlongBufferConfig overlong_buffer;
  friend bool operator==(const RewardModelConfig&, const RewardModelConfig&) = default;
};

/// reward.reward_manager: how responses are scored ("naive": the rule-based score of each
/// response; "dapo": the same, with the overlong buffer of reward_model.overlong_buffer).
struct RewardManagerSection {
  std::string name = "naive";
  friend bool operator==(const RewardManagerSection&, const RewardManagerSection&) = default;
};

/// reward.reward_model: rule-based rewards only in verl_train (enable=true is not supported yet);
/// model_path is the sequence-classification reward model RewardModelWorker loads
/// (HfRewardModelSource).
struct RewardModelSection {
  bool enable = false;
  std::optional<std::string> model_path;
  /// A pool of its own (nnodes x n_gpus_per_node ranks after the trainer's), else the actor's ranks.
  bool enable_resource_pool = false;
  std::int64_t n_gpus_per_node = 8;
  std::int64_t nnodes = 0;
  friend bool operator==(const RewardModelSection&, const RewardModelSection&) = default;
};

/// reward.cost_model: Safe-RLHF's cost model, a sequence-classification folder as the reward
/// model's (verl-cpp extension; verl has no Safe-RLHF). Read by HfCostModelSource.
struct CostModelSection {
  std::optional<std::string> model_path;
  friend bool operator==(const CostModelSection&, const CostModelSection&) = default;
};

/// reward (verl 0.9.1).
struct RewardConfig {
  RewardManagerSection reward_manager;
  RewardModelSection reward_model;
  CostModelSection cost_model;
  friend bool operator==(const RewardConfig&, const RewardConfig&) = default;
};

/// algorithm.kl_ctrl.
struct KLControlSection {
  std::string type = "fixed";
  double kl_coef = 0.001;
  double horizon = 10000;
  double target_kl = 0.1;
  friend bool operator==(const KLControlSection&, const KLControlSection&) = default;
};

/// algorithm.rollout_correction.
struct RolloutCorrectionSection {
  std::optional<std::string> rollout_is;
  /// A number (TIS), or verl's IcePop bounds "lower_upper" (a string, as in verl 0.9.1).
  std::optional<std::string> rollout_is_threshold = std::string("2.0");
  std::optional<std::string> rollout_rs;
  std::optional<std::string> rollout_rs_threshold;  ///< a number, or one entry per rollout_rs option
  bool bypass_mode = false;
  std::string loss_type = "ppo_clip";
  bool rollout_is_batch_normalize = false;
  friend bool operator==(const RolloutCorrectionSection&, const RolloutCorrectionSection&) = default;
};

/// algorithm.filter_groups (DAPO's dynamic sampling).
struct FilterGroupsConfig {
  bool enable = false;
  std::string metric = "reward";  ///< acc, score, seq_reward or seq_final_reward when enabled
  std::int64_t max_num_gen_batches = 0;
  friend bool operator==(const FilterGroupsConfig&, const FilterGroupsConfig&) = default;
};

/// algorithm.safe_rlhf: Safe-RLHF's Lagrange multiplier and score clamp (verl-cpp extension; the
/// keys and defaults of algo/safe_rlhf.hpp). Read by trainer::lagrange_multiplier_config.
struct SafeRLHFSection {
  double cost_limit = 0.0;
  double lambda_init = 1.0;
  double lambda_lr = 0.1;
  std::optional<double> lambda_max;
  std::int64_t lambda_update_delay_steps = 0;
  std::int64_t episode_cost_window_size = 128;
  std::optional<double> clip_range_score = 50.0;
  friend bool operator==(const SafeRLHFSection&, const SafeRLHFSection&) = default;
};

/// algorithm.
struct AlgorithmConfig {
  double gamma = 1.0;
  double lam = 1.0;
  std::string adv_estimator = "gae";
  bool norm_adv_by_std_in_grpo = true;
  bool use_kl_in_reward = false;
  std::string kl_penalty = "kl";
  KLControlSection kl_ctrl;
  RolloutCorrectionSection rollout_correction;
  FilterGroupsConfig filter_groups;
  /// gdpo: the reward function's named scores to normalise one by one, and their weights (null:
  /// all 1). Fields of verl's AlgoConfig that its yaml does not list (`+algorithm.gdpo_reward_keys`).
  std::optional<std::vector<std::string>> gdpo_reward_keys;
  std::optional<std::vector<double>> gdpo_reward_weights;
  SafeRLHFSection safe_rlhf;
  friend bool operator==(const AlgorithmConfig&, const AlgorithmConfig&) = default;
};

/// data.
struct DataConfig {
  std::vector<std::string> train_files = {"~/data/rlhf/gsm8k/train.parquet"};
  std::vector<std::string> val_files = {"~/data/rlhf/gsm8k/test.parquet"};
  std::int64_t train_max_samples = -1;
  std::int64_t val_max_samples = -1;
  std::string prompt_key = "prompt";
  std::string reward_fn_key = "data_source";
  std::int64_t max_prompt_length = 512;
  std::int64_t max_response_length = 512;
  std::int64_t train_batch_size = 1024;
  std::optional<std::int64_t> val_batch_size;
  std::optional<std::int64_t> gen_batch_size;  ///< verl-cpp extension (DAPO); null: train_batch_size
  bool shuffle = true;
  std::optional<std::int64_t> seed;
  bool validation_shuffle = false;
  bool filter_overlong_prompts = false;
  data::Truncation truncation = data::Truncation::error;
  /// Extra variables for the chat template (e.g. {enable_thinking: false} for Qwen3), as verl
  /// passes them to apply_chat_template.
  nlohmann::ordered_json apply_chat_template_kwargs = nlohmann::ordered_json::object();
  friend bool operator==(const DataConfig&, const DataConfig&) = default;
};

/// trainer.
/// trainer.v1.separate_async: a rollout pool of its own generates continuously while the
/// trainer updates; data.train_batch_size = parameter_sync_step x ppo_mini_batch_size, one
/// update per mini-batch as it arrives, the rollout's weights replaced after each step.
struct SeparateAsyncConfig {
  std::int64_t num_warmup_batches = 1;   ///< batches sent to the rollout before the first step
  std::int64_t parameter_sync_step = 4;  ///< mini-batches (updates) per step, between weight syncs
  friend bool operator==(const SeparateAsyncConfig&, const SeparateAsyncConfig&) = default;
};

/// trainer.v1.sampler: the off-policy bound of the asynchronous modes (a no-op in sync mode).
struct V1SamplerConfig {
  /// The most global steps a prompt may span from being sent to the rollout to being trained on.
  std::int64_t max_off_policy_threshold = 8;
  std::string max_off_policy_strategy = "drop";  ///< drop (evict and send fresh prompts) or wait
  friend bool operator==(const V1SamplerConfig&, const V1SamplerConfig&) = default;
};

/// trainer.v1: verl 0.9.1's trainer modes (sync, or separate_async with a rollout pool of its own).
struct TrainerV1Config {
  std::string trainer_mode = "sync";
  SeparateAsyncConfig separate_async;
  V1SamplerConfig sampler;
  friend bool operator==(const TrainerV1Config&, const TrainerV1Config&) = default;
};

struct TrainerConfig {
  bool balance_batch = true;
  std::int64_t total_epochs = 30;
  std::optional<std::int64_t> total_training_steps;
  std::string project_name = "verl_examples";
  std::string experiment_name = "gsm8k";
  std::vector<std::string> logger = {"console"};
  std::int64_t log_val_generations = 0;
  std::optional<std::string> rollout_data_dir;
  std::optional<std::string> validation_data_dir;
  std::int64_t nnodes = 1;
  std::int64_t n_gpus_per_node = 1;
  std::int64_t save_freq = -1;
  ResumeMode resume_mode = ResumeMode::automatic;
  std::optional<std::string> resume_from_path;
  bool val_before_train = true;
  bool val_only = false;
  std::int64_t test_freq = -1;
  std::int64_t critic_warmup = 0;
  bool del_local_ckpt_after_load = false;
  std::string default_local_dir = "checkpoints/verl_examples/gsm8k";  ///< checkpoints/<project>/<experiment>
  std::optional<std::int64_t> max_actor_ckpt_to_keep;
  std::optional<std::int64_t> max_critic_ckpt_to_keep;
  /// verl-cpp: a training step whose every optimizer update had a non-finite gradient norm (NaN or
  /// inf loss, gradient or weights) is skipped and counted, as verl skips such updates; this many
  /// such steps in a row end the run with an error instead of training on, or saving, a broken model.
  std::int64_t max_consecutive_nonfinite_steps = 3;
  std::string device = "cpu";
  TrainerV1Config v1;
  friend bool operator==(const TrainerConfig&, const TrainerConfig&) = default;
};

/// cost_critic.model: Safe-RLHF's cost critic (verl-cpp extension). path null: the critic is
/// initialised from the cost model (reward.cost_model.model_path), as the reference does; its
/// optimiser and batch settings are critic.*'s. Read by HfCostCriticSource.
struct CostCriticModelSection {
  std::optional<std::string> path;
  friend bool operator==(const CostCriticModelSection&, const CostCriticModelSection&) = default;
};

/// cost_critic (verl-cpp extension).
struct CostCriticConfig {
  CostCriticModelSection model;
  friend bool operator==(const CostCriticConfig&, const CostCriticConfig&) = default;
};

struct PPOConfig {
  DataConfig data;
  ActorRolloutRefConfig actor_rollout_ref;
  CriticConfig critic;
  CostCriticConfig cost_critic;
  RewardModelConfig reward_model;
  RewardConfig reward;
  AlgorithmConfig algorithm;
  TrainerConfig trainer;
  friend bool operator==(const PPOConfig&, const PPOConfig&) = default;
};

// ---- the keys: every section's key fields, in verl's order ------------------------------------

VERL_CONFIG_FIELDS(OptimConfig, optimizer, lr, lr_warmup_steps_ratio, total_training_steps, weight_decay,
                   lr_warmup_steps, betas, clip_grad, min_lr_ratio, num_cycles, lr_scheduler_type, warmup_style)
VERL_CONFIG_FIELDS(PolicyLossSection, loss_mode, clip_cov_ratio, clip_cov_lb, clip_cov_ub, kl_cov_ratio, ppo_kl_coef,
                   dro_beta)
VERL_CONFIG_FIELDS(CheckpointContentsConfig, save_contents, load_contents)
VERL_CONFIG_FIELDS(ModelSection, path, tokenizer_path, custom_chat_template, lora_rank, lora_alpha, target_modules,
                   exclude_modules, lora_adapter_path)
VERL_CONFIG_FIELDS(MegatronSection, tensor_model_parallel_size, pipeline_model_parallel_size, context_parallel_size,
                   sequence_parallel, use_distributed_optimizer)
VERL_CONFIG_FIELDS(FsdpEngineSection, fsdp_size)
VERL_CONFIG_FIELDS(ActorConfig, strategy, megatron, optim, ppo_mini_batch_size, ppo_micro_batch_size, ppo_micro_batch_size_per_gpu,
                   use_dynamic_bsz, clip_ratio, clip_ratio_low, clip_ratio_high, tau_pos, tau_neg, policy_loss,
                   clip_ratio_c, loss_agg_mode, loss_scale_factor, entropy_coeff, calculate_sum_pi_squared,
                   use_kl_loss, kl_loss_coef, kl_loss_type, ppo_epochs, checkpoint, grad_clip,
                   ulysses_sequence_parallel_size, fsdp_config)
VERL_CONFIG_FIELDS(RefConfig, log_prob_micro_batch_size, log_prob_micro_batch_size_per_gpu, log_prob_use_dynamic_bsz,
                   fsdp_config)
VERL_CONFIG_FIELDS(ValidationSamplingConfig, top_k, top_p, temperature, n, do_sample)
VERL_CONFIG_FIELDS(RolloutConfig, name, temperature, top_k, top_p, prompt_length, response_length, do_sample, n,
                   ignore_eos, log_prob_micro_batch_size, log_prob_micro_batch_size_per_gpu, log_prob_use_dynamic_bsz,
                   dtype, tensor_model_parallel_size, calculate_log_probs, val_kwargs, nnodes, n_gpus_per_node)
VERL_CONFIG_FIELDS(ActorRolloutRefConfig, model, actor, ref, rollout, hybrid_engine, nccl_timeout)
VERL_CONFIG_FIELDS(CriticModelSection, path, tokenizer_path)
VERL_CONFIG_FIELDS(CriticConfig, strategy, megatron, optim, model, enable, ppo_mini_batch_size, ppo_micro_batch_size,
                   ppo_micro_batch_size_per_gpu, use_dynamic_bsz, ppo_epochs, cliprange_value, loss_agg_mode, checkpoint, forward_micro_batch_size, forward_micro_batch_size_per_gpu,
                   grad_clip, nnodes, n_gpus_per_node, ulysses_sequence_parallel_size, fsdp)
VERL_CONFIG_FIELDS(OverlongBufferConfig, enable, len, penalty_factor, log)
VERL_CONFIG_FIELDS(RewardModelConfig, overlong_buffer)
VERL_CONFIG_FIELDS(RewardManagerSection, name)
VERL_CONFIG_FIELDS(RewardModelSection, enable, model_path, enable_resource_pool, n_gpus_per_node, nnodes)
VERL_CONFIG_FIELDS(CostModelSection, model_path)
VERL_CONFIG_FIELDS(RewardConfig, reward_manager, reward_model, cost_model)
VERL_CONFIG_FIELDS(KLControlSection, type, kl_coef, horizon, target_kl)
VERL_CONFIG_FIELDS(RolloutCorrectionSection, rollout_is, rollout_is_threshold, rollout_rs, rollout_rs_threshold,
                   bypass_mode, loss_type, rollout_is_batch_normalize)
VERL_CONFIG_FIELDS(FilterGroupsConfig, enable, metric, max_num_gen_batches)
VERL_CONFIG_FIELDS(SafeRLHFSection, cost_limit, lambda_init, lambda_lr, lambda_max, lambda_update_delay_steps,
                   episode_cost_window_size, clip_range_score)
VERL_CONFIG_FIELDS(AlgorithmConfig, gamma, lam, adv_estimator, norm_adv_by_std_in_grpo, use_kl_in_reward, kl_penalty,
                   kl_ctrl, rollout_correction, filter_groups, gdpo_reward_keys, gdpo_reward_weights, safe_rlhf)
VERL_CONFIG_FIELDS(DataConfig, train_files, val_files, train_max_samples, val_max_samples, prompt_key,
                   reward_fn_key, max_prompt_length, max_response_length, train_batch_size, val_batch_size,
                   gen_batch_size, shuffle, seed, validation_shuffle, filter_overlong_prompts, truncation,
                   apply_chat_template_kwargs)
VERL_CONFIG_FIELDS(SeparateAsyncConfig, num_warmup_batches, parameter_sync_step)
VERL_CONFIG_FIELDS(V1SamplerConfig, max_off_policy_threshold, max_off_policy_strategy)
VERL_CONFIG_FIELDS(TrainerV1Config, trainer_mode, separate_async, sampler)
VERL_CONFIG_FIELDS(TrainerConfig, balance_batch, total_epochs, total_training_steps, project_name, experiment_name,
                   logger, log_val_generations, rollout_data_dir, validation_data_dir, nnodes, n_gpus_per_node,
                   save_freq, resume_mode, resume_from_path, val_before_train, val_only, test_freq, critic_warmup,
                   del_local_ckpt_after_load, default_local_dir, max_actor_ckpt_to_keep, max_critic_ckpt_to_keep,
                   device, max_consecutive_nonfinite_steps, v1)
VERL_CONFIG_FIELDS(CostCriticModelSection, path)
VERL_CONFIG_FIELDS(CostCriticConfig, model)
VERL_CONFIG_FIELDS(PPOConfig, data, actor_rollout_ref, critic, cost_critic, reward_model, reward, algorithm, trainer)

/// Calls v(path, field) for every supported key of `config` (PPOConfig or const PPOConfig).
template <class Config, class Visitor>
  requires std::same_as<std::remove_const_t<Config>, PPOConfig>
void visit_fields(Config& config, Visitor&& v) {
  visit_config_fields(config, std::string_view{}, v);
}

}  // namespace verl::trainer
