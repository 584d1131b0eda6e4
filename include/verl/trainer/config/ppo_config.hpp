// PPOConfig: the typed form of verl's PPO trainer configuration, with verl's section and key
// names (data, actor_rollout_ref.{actor,ref,rollout,model}, critic, reward_model,
// reward_manager, algorithm, trainer) and verl's defaults, for the keys verl-cpp supports.
// visit_fields() walks every supported key with its dotted path: the single list from which
// loading, dumping and the "supported key" check are all derived.
//
// Defaults differ from verl's yaml in three places, because verl-cpp runs without Python
// services and on CPU by default: trainer.logger = ['console'] (verl: console, wandb),
// trainer.n_gpus_per_node = 1 (verl: 8), trainer.device = 'cpu' (verl: cuda).
//
// Keys marked "verl-cpp extension" are not in verl's ppo_trainer.yaml; they come from verl's
// recipes (DAPO: data.gen_batch_size, algorithm.filter_groups, reward_model.overlong_buffer).
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
  friend bool operator==(const ModelSection&, const ModelSection&) = default;
};

/// actor_rollout_ref.actor.
struct ActorConfig {
  OptimConfig optim;
  std::int64_t ppo_mini_batch_size = 256;
  std::optional<std::int64_t> ppo_micro_batch_size;
  std::optional<std::int64_t> ppo_micro_batch_size_per_gpu;
  bool use_dynamic_bsz = false;
  std::int64_t ppo_max_token_len_per_gpu = 16384;
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
  bool calculate_entropy = false;
  bool use_kl_loss = false;
  double kl_loss_coef = 0.001;
  std::string kl_loss_type = "low_var_kl";
  std::int64_t ppo_epochs = 1;
  bool shuffle = false;
  std::int64_t data_loader_seed = 42;
  CheckpointContentsConfig checkpoint;
  double grad_clip = 1.0;
  std::int64_t ulysses_sequence_parallel_size = 1;
  friend bool operator==(const ActorConfig&, const ActorConfig&) = default;
};

/// actor_rollout_ref.ref.
struct RefConfig {
  std::optional<std::int64_t> log_prob_micro_batch_size;
  std::optional<std::int64_t> log_prob_micro_batch_size_per_gpu;
  bool log_prob_use_dynamic_bsz = false;
  std::int64_t log_prob_max_token_len_per_gpu = 16384;
  std::int64_t ulysses_sequence_parallel_size = 1;
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
  std::int64_t log_prob_max_token_len_per_gpu = 16384;
  std::int64_t tensor_model_parallel_size = 2;
  std::int64_t data_parallel_size = 1;
  std::int64_t pipeline_model_parallel_size = 1;
  std::int64_t expert_parallel_size = 1;
  bool calculate_log_probs = false;
  ValidationSamplingConfig val_kwargs;
  friend bool operator==(const RolloutConfig&, const RolloutConfig&) = default;
};

struct ActorRolloutRefConfig {
  ModelSection model;
  ActorConfig actor;
  RefConfig ref;
  RolloutConfig rollout;
  friend bool operator==(const ActorRolloutRefConfig&, const ActorRolloutRefConfig&) = default;
};

/// critic.model.
struct CriticModelSection {
  std::string path = "~/models/deepseek-llm-7b-chat";
  std::optional<std::string> tokenizer_path = std::string("~/models/deepseek-llm-7b-chat");  ///< follows the actor's
  friend bool operator==(const CriticModelSection&, const CriticModelSection&) = default;
};

/// critic.
struct CriticConfig {
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
  std::int64_t ppo_max_token_len_per_gpu = 32768;
  std::int64_t forward_max_token_len_per_gpu = 32768;
  std::int64_t ppo_epochs = 1;
  bool shuffle = false;
  std::int64_t data_loader_seed = 42;
  double cliprange_value = 0.5;
  std::string loss_agg_mode = "token-mean";
  CheckpointContentsConfig checkpoint;
  std::optional<std::int64_t> forward_micro_batch_size;
  std::optional<std::int64_t> forward_micro_batch_size_per_gpu;
  std::int64_t ulysses_sequence_parallel_size = 1;
  double grad_clip = 1.0;
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

/// reward_model: rule-based rewards only (a reward model, enable=true, is not supported yet).
struct RewardModelConfig {
  bool enable = false;
  std::string reward_manager = "naive";
  OverlongBufferConfig overlong_buffer;
  friend bool operator==(const RewardModelConfig&, const RewardModelConfig&) = default;
};

/// reward_manager (verl's newer spelling of reward_model.reward_manager).
struct RewardManagerConfig {
  std::string name = "naive";  ///< follows reward_model.reward_manager
  friend bool operator==(const RewardManagerConfig&, const RewardManagerConfig&) = default;
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
  std::optional<double> rollout_is_threshold = 2.0;
  std::optional<std::string> rollout_rs;
  std::optional<std::string> rollout_rs_threshold;  ///< a number, or one entry per rollout_rs option
  bool bypass_mode = false;
  std::string loss_type = "ppo_clip";
  bool rollout_is_batch_normalize = false;
  friend bool operator==(const RolloutCorrectionSection&, const RolloutCorrectionSection&) = default;
};

/// algorithm.filter_groups (DAPO's dynamic sampling; verl-cpp extension).
struct FilterGroupsConfig {
  bool enable = false;
  std::optional<std::string> metric;  ///< e.g. "acc" or "score"
  std::int64_t max_num_gen_batches = 0;
  friend bool operator==(const FilterGroupsConfig&, const FilterGroupsConfig&) = default;
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
  friend bool operator==(const AlgorithmConfig&, const AlgorithmConfig&) = default;
};

/// data.
struct DataConfig {
  std::optional<std::string> tokenizer;
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
  std::string device = "cpu";
  friend bool operator==(const TrainerConfig&, const TrainerConfig&) = default;
};

struct PPOConfig {
  DataConfig data;
  ActorRolloutRefConfig actor_rollout_ref;
  CriticConfig critic;
  RewardModelConfig reward_model;
  RewardManagerConfig reward_manager;
  AlgorithmConfig algorithm;
  TrainerConfig trainer;
  friend bool operator==(const PPOConfig&, const PPOConfig&) = default;
};

namespace detail {

template <class Optim, class Visitor>
void visit_optim(std::string_view prefix, Optim& o, Visitor& v) {
  const std::string p(prefix);
  v(p + ".optimizer", o.optimizer);
  v(p + ".lr", o.lr);
  v(p + ".lr_warmup_steps_ratio", o.lr_warmup_steps_ratio);
  v(p + ".total_training_steps", o.total_training_steps);
  v(p + ".weight_decay", o.weight_decay);
  v(p + ".lr_warmup_steps", o.lr_warmup_steps);
  v(p + ".betas", o.betas);
  v(p + ".clip_grad", o.clip_grad);
  v(p + ".min_lr_ratio", o.min_lr_ratio);
  v(p + ".num_cycles", o.num_cycles);
  v(p + ".lr_scheduler_type", o.lr_scheduler_type);
  v(p + ".warmup_style", o.warmup_style);
}

template <class Contents, class Visitor>
void visit_checkpoint(std::string_view prefix, Contents& c, Visitor& v) {
  v(std::string(prefix) + ".save_contents", c.save_contents);
  v(std::string(prefix) + ".load_contents", c.load_contents);
}

}  // namespace detail

/// Calls v(path, field) for every supported key of `config` (PPOConfig or const PPOConfig).
template <class Config, class Visitor>
  requires std::same_as<std::remove_const_t<Config>, PPOConfig>
void visit_fields(Config& config, Visitor&& v) {
  auto& d = config.data;
  v("data.tokenizer", d.tokenizer);
  v("data.train_files", d.train_files);
  v("data.val_files", d.val_files);
  v("data.train_max_samples", d.train_max_samples);
  v("data.val_max_samples", d.val_max_samples);
  v("data.prompt_key", d.prompt_key);
  v("data.reward_fn_key", d.reward_fn_key);
  v("data.max_prompt_length", d.max_prompt_length);
  v("data.max_response_length", d.max_response_length);
  v("data.train_batch_size", d.train_batch_size);
  v("data.val_batch_size", d.val_batch_size);
  v("data.gen_batch_size", d.gen_batch_size);
  v("data.shuffle", d.shuffle);
  v("data.seed", d.seed);
  v("data.validation_shuffle", d.validation_shuffle);
  v("data.filter_overlong_prompts", d.filter_overlong_prompts);
  v("data.truncation", d.truncation);
  v("data.apply_chat_template_kwargs", d.apply_chat_template_kwargs);

  auto& m = config.actor_rollout_ref.model;
  v("actor_rollout_ref.model.path", m.path);
  v("actor_rollout_ref.model.tokenizer_path", m.tokenizer_path);
  v("actor_rollout_ref.model.custom_chat_template", m.custom_chat_template);

  auto& a = config.actor_rollout_ref.actor;
  detail::visit_optim("actor_rollout_ref.actor.optim", a.optim, v);
  v("actor_rollout_ref.actor.ppo_mini_batch_size", a.ppo_mini_batch_size);
  v("actor_rollout_ref.actor.ppo_micro_batch_size", a.ppo_micro_batch_size);
  v("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", a.ppo_micro_batch_size_per_gpu);
  v("actor_rollout_ref.actor.use_dynamic_bsz", a.use_dynamic_bsz);
  v("actor_rollout_ref.actor.ppo_max_token_len_per_gpu", a.ppo_max_token_len_per_gpu);
  v("actor_rollout_ref.actor.clip_ratio", a.clip_ratio);
  v("actor_rollout_ref.actor.clip_ratio_low", a.clip_ratio_low);
  v("actor_rollout_ref.actor.clip_ratio_high", a.clip_ratio_high);
  v("actor_rollout_ref.actor.tau_pos", a.tau_pos);
  v("actor_rollout_ref.actor.tau_neg", a.tau_neg);
  v("actor_rollout_ref.actor.policy_loss.loss_mode", a.policy_loss.loss_mode);
  v("actor_rollout_ref.actor.policy_loss.clip_cov_ratio", a.policy_loss.clip_cov_ratio);
  v("actor_rollout_ref.actor.policy_loss.clip_cov_lb", a.policy_loss.clip_cov_lb);
  v("actor_rollout_ref.actor.policy_loss.clip_cov_ub", a.policy_loss.clip_cov_ub);
  v("actor_rollout_ref.actor.policy_loss.kl_cov_ratio", a.policy_loss.kl_cov_ratio);
  v("actor_rollout_ref.actor.policy_loss.ppo_kl_coef", a.policy_loss.ppo_kl_coef);
  v("actor_rollout_ref.actor.clip_ratio_c", a.clip_ratio_c);
  v("actor_rollout_ref.actor.loss_agg_mode", a.loss_agg_mode);
  v("actor_rollout_ref.actor.loss_scale_factor", a.loss_scale_factor);
  v("actor_rollout_ref.actor.entropy_coeff", a.entropy_coeff);
  v("actor_rollout_ref.actor.calculate_entropy", a.calculate_entropy);
  v("actor_rollout_ref.actor.use_kl_loss", a.use_kl_loss);
  v("actor_rollout_ref.actor.kl_loss_coef", a.kl_loss_coef);
  v("actor_rollout_ref.actor.kl_loss_type", a.kl_loss_type);
  v("actor_rollout_ref.actor.ppo_epochs", a.ppo_epochs);
  v("actor_rollout_ref.actor.shuffle", a.shuffle);
  v("actor_rollout_ref.actor.data_loader_seed", a.data_loader_seed);
  detail::visit_checkpoint("actor_rollout_ref.actor.checkpoint", a.checkpoint, v);
  v("actor_rollout_ref.actor.grad_clip", a.grad_clip);
  v("actor_rollout_ref.actor.ulysses_sequence_parallel_size", a.ulysses_sequence_parallel_size);

  auto& r = config.actor_rollout_ref.ref;
  v("actor_rollout_ref.ref.log_prob_micro_batch_size", r.log_prob_micro_batch_size);
  v("actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu", r.log_prob_micro_batch_size_per_gpu);
  v("actor_rollout_ref.ref.log_prob_use_dynamic_bsz", r.log_prob_use_dynamic_bsz);
  v("actor_rollout_ref.ref.log_prob_max_token_len_per_gpu", r.log_prob_max_token_len_per_gpu);
  v("actor_rollout_ref.ref.ulysses_sequence_parallel_size", r.ulysses_sequence_parallel_size);

  auto& g = config.actor_rollout_ref.rollout;
  v("actor_rollout_ref.rollout.name", g.name);
  v("actor_rollout_ref.rollout.temperature", g.temperature);
  v("actor_rollout_ref.rollout.top_k", g.top_k);
  v("actor_rollout_ref.rollout.top_p", g.top_p);
  v("actor_rollout_ref.rollout.prompt_length", g.prompt_length);
  v("actor_rollout_ref.rollout.response_length", g.response_length);
  v("actor_rollout_ref.rollout.do_sample", g.do_sample);
  v("actor_rollout_ref.rollout.n", g.n);
  v("actor_rollout_ref.rollout.ignore_eos", g.ignore_eos);
  v("actor_rollout_ref.rollout.log_prob_micro_batch_size", g.log_prob_micro_batch_size);
  v("actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu", g.log_prob_micro_batch_size_per_gpu);
  v("actor_rollout_ref.rollout.log_prob_use_dynamic_bsz", g.log_prob_use_dynamic_bsz);
  v("actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu", g.log_prob_max_token_len_per_gpu);
  v("actor_rollout_ref.rollout.tensor_model_parallel_size", g.tensor_model_parallel_size);
  v("actor_rollout_ref.rollout.data_parallel_size", g.data_parallel_size);
  v("actor_rollout_ref.rollout.pipeline_model_parallel_size", g.pipeline_model_parallel_size);
  v("actor_rollout_ref.rollout.expert_parallel_size", g.expert_parallel_size);
  v("actor_rollout_ref.rollout.calculate_log_probs", g.calculate_log_probs);
  v("actor_rollout_ref.rollout.val_kwargs.top_k", g.val_kwargs.top_k);
  v("actor_rollout_ref.rollout.val_kwargs.top_p", g.val_kwargs.top_p);
  v("actor_rollout_ref.rollout.val_kwargs.temperature", g.val_kwargs.temperature);
  v("actor_rollout_ref.rollout.val_kwargs.n", g.val_kwargs.n);
  v("actor_rollout_ref.rollout.val_kwargs.do_sample", g.val_kwargs.do_sample);

  auto& c = config.critic;
  detail::visit_optim("critic.optim", c.optim, v);
  v("critic.model.path", c.model.path);
  v("critic.model.tokenizer_path", c.model.tokenizer_path);
  v("critic.enable", c.enable);
  v("critic.ppo_mini_batch_size", c.ppo_mini_batch_size);
  v("critic.ppo_micro_batch_size", c.ppo_micro_batch_size);
  v("critic.ppo_micro_batch_size_per_gpu", c.ppo_micro_batch_size_per_gpu);
  v("critic.use_dynamic_bsz", c.use_dynamic_bsz);
  v("critic.ppo_max_token_len_per_gpu", c.ppo_max_token_len_per_gpu);
  v("critic.forward_max_token_len_per_gpu", c.forward_max_token_len_per_gpu);
  v("critic.ppo_epochs", c.ppo_epochs);
  v("critic.shuffle", c.shuffle);
  v("critic.data_loader_seed", c.data_loader_seed);
  v("critic.cliprange_value", c.cliprange_value);
  v("critic.loss_agg_mode", c.loss_agg_mode);
  detail::visit_checkpoint("critic.checkpoint", c.checkpoint, v);
  v("critic.forward_micro_batch_size", c.forward_micro_batch_size);
  v("critic.forward_micro_batch_size_per_gpu", c.forward_micro_batch_size_per_gpu);
  v("critic.ulysses_sequence_parallel_size", c.ulysses_sequence_parallel_size);
  v("critic.grad_clip", c.grad_clip);

  auto& rm = config.reward_model;
  v("reward_model.enable", rm.enable);
  v("reward_model.reward_manager", rm.reward_manager);
  v("reward_model.overlong_buffer.enable", rm.overlong_buffer.enable);
  v("reward_model.overlong_buffer.len", rm.overlong_buffer.len);
  v("reward_model.overlong_buffer.penalty_factor", rm.overlong_buffer.penalty_factor);
  v("reward_model.overlong_buffer.log", rm.overlong_buffer.log);
  v("reward_manager.name", config.reward_manager.name);

  auto& al = config.algorithm;
  v("algorithm.gamma", al.gamma);
  v("algorithm.lam", al.lam);
  v("algorithm.adv_estimator", al.adv_estimator);
  v("algorithm.norm_adv_by_std_in_grpo", al.norm_adv_by_std_in_grpo);
  v("algorithm.use_kl_in_reward", al.use_kl_in_reward);
  v("algorithm.kl_penalty", al.kl_penalty);
  v("algorithm.kl_ctrl.type", al.kl_ctrl.type);
  v("algorithm.kl_ctrl.kl_coef", al.kl_ctrl.kl_coef);
  v("algorithm.kl_ctrl.horizon", al.kl_ctrl.horizon);
  v("algorithm.kl_ctrl.target_kl", al.kl_ctrl.target_kl);
  v("algorithm.rollout_correction.rollout_is", al.rollout_correction.rollout_is);
  v("algorithm.rollout_correction.rollout_is_threshold", al.rollout_correction.rollout_is_threshold);
  v("algorithm.rollout_correction.rollout_rs", al.rollout_correction.rollout_rs);
  v("algorithm.rollout_correction.rollout_rs_threshold", al.rollout_correction.rollout_rs_threshold);
  v("algorithm.rollout_correction.bypass_mode", al.rollout_correction.bypass_mode);
  v("algorithm.rollout_correction.loss_type", al.rollout_correction.loss_type);
  v("algorithm.rollout_correction.rollout_is_batch_normalize", al.rollout_correction.rollout_is_batch_normalize);
  v("algorithm.filter_groups.enable", al.filter_groups.enable);
  v("algorithm.filter_groups.metric", al.filter_groups.metric);
  v("algorithm.filter_groups.max_num_gen_batches", al.filter_groups.max_num_gen_batches);

  auto& t = config.trainer;
  v("trainer.balance_batch", t.balance_batch);
  v("trainer.total_epochs", t.total_epochs);
  v("trainer.total_training_steps", t.total_training_steps);
  v("trainer.project_name", t.project_name);
  v("trainer.experiment_name", t.experiment_name);
  v("trainer.logger", t.logger);
  v("trainer.log_val_generations", t.log_val_generations);
  v("trainer.rollout_data_dir", t.rollout_data_dir);
  v("trainer.validation_data_dir", t.validation_data_dir);
  v("trainer.nnodes", t.nnodes);
  v("trainer.n_gpus_per_node", t.n_gpus_per_node);
  v("trainer.save_freq", t.save_freq);
  v("trainer.resume_mode", t.resume_mode);
  v("trainer.resume_from_path", t.resume_from_path);
  v("trainer.val_before_train", t.val_before_train);
  v("trainer.val_only", t.val_only);
  v("trainer.test_freq", t.test_freq);
  v("trainer.critic_warmup", t.critic_warmup);
  v("trainer.del_local_ckpt_after_load", t.del_local_ckpt_after_load);
  v("trainer.default_local_dir", t.default_local_dir);
  v("trainer.max_actor_ckpt_to_keep", t.max_actor_ckpt_to_keep);
  v("trainer.max_critic_ckpt_to_keep", t.max_critic_ckpt_to_keep);
  v("trainer.device", t.device);
}

}  // namespace verl::trainer
