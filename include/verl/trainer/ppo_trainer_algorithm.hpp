// PPOAlgorithm: the algorithmic choices of one PPO-family run — advantage estimator, policy loss,
// loss aggregation, KL in the reward (with its controller) and/or as a loss, entropy bonus, and
// DAPO's dynamic sampling and overlong penalty — as run-time values of the library's policy
// types. from_config() reads them from verl's keys (algorithm.adv_estimator,
// actor.policy_loss.loss_mode, actor.loss_agg_mode, actor.kl_loss_type, algorithm.use_kl_in_reward,
// algorithm.kl_ctrl.type, ...) through the registries; recipes.hpp builds the same value from
// compile-time policy types. The trainer only ever sees a PPOAlgorithm.
#pragma once

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <span>
#include <variant>
#include <string>
#include <vector>

#include "verl/algo/advantages/registry.hpp"
#include "verl/algo/kl/controller.hpp"
#include "verl/algo/kl/registry.hpp"
#include "verl/algo/loss_aggregation.hpp"
#include "verl/algo/policy_losses/registry.hpp"
#include "verl/algo/rollout_correction.hpp"
#include "verl/core/error.hpp"
#include "verl/core/metrics.hpp"
#include "verl/core/tensor.hpp"
#include "verl/reward/scorer.hpp"
#include "verl/trainer/config/ppo_config.hpp"

namespace verl::trainer {

/// DAPO's overlong reward shaping (reward_model.overlong_buffer): a response longer than
/// max_response_length - len is penalised linearly, down to -penalty_factor at the limit.
struct OverlongPenalty {
  std::int64_t buffer_length = 0;
  double penalty_factor = 0.0;
  bool log = false;  ///< reward/overlong_penalty/mean in the step's metrics (DAPO's overlong_buffer.log)
};

/// DAPO's dynamic sampling (algorithm.filter_groups): groups whose `metric` is the same for all
/// their responses are dropped and the batch is refilled from the next generation batches.
struct GroupFilter {
  /// "acc" (falls back to the score when absent), "score", or the response's summed scores
  /// ("seq_reward"; "seq_final_reward" is the same without KL in the reward)
  std::string metric = "acc";
  std::int64_t max_num_gen_batches = 0;  ///< <= 0: unlimited
};

/// The advantage estimators' knobs from verl's keys (algorithm.*): every estimator, whether chosen
/// by name (PPOAlgorithm::from_config) or by type (recipes), is built from this one value.
inline algo::AdvantageConfig advantage_config(const PPOConfig& config) {
  const auto& al = config.algorithm;
  return {.gamma = al.gamma,
          .lam = al.lam,
          .norm_adv_by_std_in_grpo = al.norm_adv_by_std_in_grpo,
          .gdpo_reward_keys = al.gdpo_reward_keys.value_or(std::vector<std::string>{}),
          .gdpo_reward_weights = al.gdpo_reward_weights};
}

namespace detail {
/// A threshold key's text as verl's value: a number when all of it reads as one, else the string
/// (IcePop's "lower_upper", or one entry per rejection option). nullopt stays nullopt.
inline std::optional<std::variant<double, std::string>> threshold_value(const std::optional<std::string>& text) {
  if (!text) return std::nullopt;
  char* end = nullptr;
  const double number = std::strtod(text->c_str(), &end);
  if (!text->empty() && end == text->c_str() + text->size()) return number;
  return *text;
}
}  // namespace detail

/// algorithm.rollout_correction in the algo layer's form (a numeric rollout_is_threshold or
/// rollout_rs_threshold is a number, anything else verl's string: IcePop's "lower_upper", or one
/// entry per rejection option).
inline algo::RolloutCorrectionConfig rollout_correction_config(const PPOConfig& config) {
  const auto& section = config.algorithm.rollout_correction;
  algo::RolloutCorrectionConfig out;
  out.rollout_is = section.rollout_is;
  out.rollout_is_threshold = detail::threshold_value(section.rollout_is_threshold);
  out.rollout_is_batch_normalize = section.rollout_is_batch_normalize;
  out.rollout_rs = section.rollout_rs;
  out.rollout_rs_threshold = detail::threshold_value(section.rollout_rs_threshold);
  out.loss_type = section.loss_type;
  return out;
}

/// The policy losses' knobs from verl's keys (actor.clip_ratio*, actor.tau_*, actor.policy_loss.*):
/// every loss, whether chosen by name or by type, is built from this one value.
inline algo::PolicyLossConfig policy_loss_config(const PPOConfig& config) {
  const auto& actor = config.actor_rollout_ref.actor;
  algo::PolicyLossConfig loss;
  loss.clip_ratio = actor.clip_ratio;
  loss.clip_ratio_low = actor.clip_ratio_low;
  loss.clip_ratio_high = actor.clip_ratio_high;
  loss.clip_ratio_c = actor.clip_ratio_c;
  loss.tau_pos = actor.tau_pos;
  loss.tau_neg = actor.tau_neg;
  loss.policy_loss.loss_mode = actor.policy_loss.loss_mode;
  loss.policy_loss.clip_cov_ratio = actor.policy_loss.clip_cov_ratio;
  loss.policy_loss.clip_cov_lb = actor.policy_loss.clip_cov_lb;
  loss.policy_loss.clip_cov_ub = actor.policy_loss.clip_cov_ub;
  loss.policy_loss.kl_cov_ratio = actor.policy_loss.kl_cov_ratio;
  loss.policy_loss.ppo_kl_coef = actor.policy_loss.ppo_kl_coef;
  loss.policy_loss.dro_beta = actor.policy_loss.dro_beta;
  loss.policy_loss.rollout_correction = rollout_correction_config(config);
  // verl's bypass mode: the rollout's log-probs are the old ones, and the loss corrects on the fly.
  if (config.algorithm.rollout_correction.bypass_mode) loss.policy_loss.loss_mode = "bypass_mode";
  return loss;
}

/// What the trainer does with the rollout's own log-probs (actor_rollout_ref.rollout.calculate_log_probs
/// and algorithm.rollout_correction), as verl's ray trainer does after the old_log_prob pass.
struct RolloutLogProbUse {
  /// Compare them with the actor's: training/rollout_probs_diff_* and rollout_corr/* metrics.
  bool compare = false;
  /// Decoupled correction: IS weights on the policy loss and rejection in the response mask.
  algo::RolloutCorrection correction{};
  /// Bypass mode: they stand in for the old log-probs (no old_log_prob pass).
  bool bypass = false;

  [[nodiscard]] bool corrects() const { return correction.rollout_is.has_value() || !correction.rollout_rs.empty(); }
};

inline RolloutLogProbUse rollout_log_prob_use(const PPOConfig& config) {
  const auto& section = config.algorithm.rollout_correction;
  RolloutLogProbUse use;
  use.compare = config.actor_rollout_ref.rollout.calculate_log_probs;
  use.bypass = section.bypass_mode || config.actor_rollout_ref.actor.policy_loss.loss_mode == "bypass_mode";
  try {
    const algo::RolloutCorrectionConfig correction = rollout_correction_config(config);
    // Checked even while rollout_is is off (verl reads it only then): a malformed or non-finite
    // value is refused rather than kept for later.
    if (correction.rollout_is_threshold) (void)algo::parse_importance_threshold(*correction.rollout_is_threshold);
    use.correction = algo::make_rollout_correction(correction);
    (void)algo::parse_bypass_loss_type(section.loss_type);
  } catch (const InvalidArgument& error) {
    ::verl::detail::throw_invalid_argument("algorithm.rollout_correction.{}", error.what());
  }
  VERL_CHECK_ARG(use.compare || !(use.corrects() || use.bypass),
                 "algorithm.rollout_correction: importance weights, rejection sampling and bypass mode need the "
                 "rollout's log-probs; expected actor_rollout_ref.rollout.calculate_log_probs=True, got False");
  return use;
}

/// algorithm.kl_ctrl.
inline algo::KLControlConfig kl_control_config(const PPOConfig& config) {
  const auto& ctrl = config.algorithm.kl_ctrl;
  return {.type = ctrl.type, .kl_coef = ctrl.kl_coef, .target_kl = ctrl.target_kl, .horizon = ctrl.horizon};
}

struct PPOAlgorithm {
  algo::AnyAdvantageEstimator estimator = algo::GRPO{};
  algo::AnyPolicyLoss policy_loss = algo::VanillaPPO{0.2, 0.2, 3.0};
  algo::LossAggMode loss_agg_mode = algo::LossAggMode::token_mean;
  double entropy_coeff = 0.0;
  /// KL to the reference as a loss term (actor.use_kl_loss).
  std::optional<algo::AnyKLEstimator> kl_loss = std::nullopt;
  double kl_loss_coef = 0.001;
  /// KL in the reward (algorithm.use_kl_in_reward), with algorithm.kl_penalty and kl_ctrl.
  bool use_kl_in_reward = false;
  std::string kl_penalty = "kl";
  algo::KLControlConfig kl_ctrl{};
  std::optional<GroupFilter> filter_groups = std::nullopt;
  std::optional<OverlongPenalty> overlong_penalty = std::nullopt;
  RolloutLogProbUse rollout{};

  [[nodiscard]] bool needs_reference() const { return kl_loss.has_value() || use_kl_in_reward; }
  [[nodiscard]] bool needs_critic() const { return estimator.needs_critic(); }

  /// verl's names from a PPOConfig; unknown names throw naming the key and the valid names.
  static PPOAlgorithm from_config(const PPOConfig& config) {
    const auto& actor = config.actor_rollout_ref.actor;
    const auto& al = config.algorithm;
    PPOAlgorithm out;
    out.estimator = algo::make_advantage_estimator(al.adv_estimator, advantage_config(config));
    out.rollout = rollout_log_prob_use(config);
    if (out.estimator.needs_old_log_probs()) {
      // verl asserts the same before its advantage computation.
      VERL_CHECK_ARG(actor.calculate_sum_pi_squared,
                     "algorithm.adv_estimator: '{}' needs the actor's per-token sum of squared probabilities; expected "
                     "actor_rollout_ref.actor.calculate_sum_pi_squared=True, got False",
                     al.adv_estimator);
      VERL_CHECK_ARG(!out.rollout.bypass,
                     "algorithm.adv_estimator: '{}' needs the actor's old log-probs and sum_pi_squared, which bypass "
                     "mode does not compute (it takes the rollout's log-probs as the old ones); expected "
                     "algorithm.rollout_correction.bypass_mode=False and a policy loss other than bypass_mode",
                     al.adv_estimator);
    }
    out.policy_loss = algo::make_policy_loss(policy_loss_config(config));
    out.loss_agg_mode = algo::parse_loss_agg_mode(actor.loss_agg_mode);
    out.entropy_coeff = actor.entropy_coeff;
    if (actor.use_kl_loss) out.kl_loss = algo::make_kl_estimator(actor.kl_loss_type);
    out.kl_loss_coef = actor.kl_loss_coef;
    out.use_kl_in_reward = al.use_kl_in_reward;
    out.kl_penalty = al.kl_penalty;
    out.kl_ctrl = kl_control_config(config);
    if (out.use_kl_in_reward) {
      (void)algo::get_kl_controller(out.kl_ctrl);    // validates type and horizon now
      (void)algo::make_kl_estimator(out.kl_penalty);  // and the KL type
    }
    if (al.filter_groups.enable) {
      out.filter_groups = GroupFilter{.metric = al.filter_groups.metric,
                                      .max_num_gen_batches = al.filter_groups.max_num_gen_batches};
    }
    if (config.reward_model.overlong_buffer.enable) {
      VERL_CHECK_ARG(config.reward_model.overlong_buffer.len > 0 &&
                         config.reward_model.overlong_buffer.len <= config.data.max_response_length,
                     "reward_model.overlong_buffer.len: expected a length in [1, data.max_response_length = {}], got {}",
                     config.data.max_response_length, config.reward_model.overlong_buffer.len);
      out.overlong_penalty = OverlongPenalty{config.reward_model.overlong_buffer.len,
                                             config.reward_model.overlong_buffer.penalty_factor,
                                             config.reward_model.overlong_buffer.log};
    }
    return out;
  }
};

/// The reward function's scores named by `keys`, one per response (verl's non_tensor_batch[key]
/// as float32), with verl's gdpo/<key>/{mean,std,max,min} metrics. A name the reward function did
/// not return, or a non-finite value, is an error naming the key and the response.
inline algo::RewardComponents reward_components(std::span<const reward::RewardOutput> outputs,
                                                const std::vector<std::string>& keys, Metrics& metrics) {
  algo::RewardComponents components;
  const auto rows = static_cast<Index>(outputs.size());
  for (const std::string& key : keys) {
    VectorF values(rows);
    for (Index r = 0; r < rows; ++r) {
      const auto& out = outputs[static_cast<std::size_t>(r)];
      const std::optional<double> value = out.named_score(key);
      if (!value)
        verl::detail::throw_invalid_argument(
            "algorithm.gdpo_reward_keys: the reward function returned no number named '{}' for response {} "
            "(it returned: {})",
            key, r, fmt::join(out.score_names(), ", "));
      VERL_CHECK_ARG(std::isfinite(*value),
                     "algorithm.gdpo_reward_keys: reward component '{}' of response {}: expected a finite number, got {}",
                     key, r, *value);
      values[r] = static_cast<float>(*value);
    }
    if (values.size() > 0) {
      const double mean = values.cast<double>().mean();
      metrics["gdpo/" + key + "/mean"] = mean;
      metrics["gdpo/" + key + "/std"] = std::sqrt((values.cast<double>().array() - mean).square().mean());
      metrics["gdpo/" + key + "/max"] = values.maxCoeff();
      metrics["gdpo/" + key + "/min"] = values.minCoeff();
    }
    components.emplace(key, std::move(values));
  }
  return components;
}

}  // namespace verl::trainer
