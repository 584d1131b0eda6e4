// Safe RLHF (Dai et al., "Safe RLHF: Safe Reinforcement Learning from Human Feedback", ICLR 2024,
// arXiv:2310.12773): PPO with a Lagrangian constraint on the expected cost. A reward model scores
// helpfulness, a cost model scores harm; a reward critic and a cost critic give GAE advantages
// A_r and A_c; the actor maximises the reward subject to J_C = E[cost] <= d, relaxed with a
// multiplier lambda >= 0 that gradient ascent moves from the observed episode costs. The numerics
// follow PKU-Alignment/safe-rlhf's PPO-Lagrangian trainer (safe_rlhf/algorithms/ppo_lag/trainer.py,
// defaults from its main.py); what a controller program calls, in the order it calls it:
//
//   1. kl_penalized_rewards_and_costs  the KL term split between the two signals
//                                      (the trainer's add_kl_divergence_regularization)
//   2. episode_costs + LagrangeMultiplier::update
//                                      the window of episode costs and the SGD step on log lambda
//                                      (post_rollout and the top of rl_step)
//   3. GAE on each signal              algo::GAE with the reward critic's and the cost critic's values
//   4. combine_reward_and_cost_advantages
//                                      (A_r - lambda A_c) / (1 + lambda) (actor_loss_fn), fed to
//                                      the usual clipped policy loss
//
// Configuration keys (verl has none for Safe-RLHF; these are ours, read by the controller program;
// defaults are the reference's argparse defaults):
//
//   algorithm.safe_rlhf.cost_limit                  0.0    d, the bound on the expected episode
//                                                          cost (the reference's --threshold)
//   algorithm.safe_rlhf.lambda_init                 1.0    initial lambda (> 0: log lambda is stored)
//   algorithm.safe_rlhf.lambda_lr                   0.1    SGD learning rate on log lambda
//   algorithm.safe_rlhf.lambda_max                  null   upper bound on lambda; null: unbounded
//   algorithm.safe_rlhf.lambda_update_delay_steps   0      update() calls that leave lambda alone
//                                                          (costs are still recorded)
//   algorithm.safe_rlhf.episode_cost_window_size    128    the last N episode costs whose mean is J_C
//   algorithm.safe_rlhf.clip_range_score            50.0   token rewards and costs are clamped to
//                                                          [-c, c] after the KL term; null: no clamp
//   reward.cost_model.model_path                    null   the cost model (required), beside verl
//                                                          0.9.1's reward.reward_model.model_path
//   cost_critic.model.path                          null   the cost critic; null: initialised from
//                                                          the cost model, as the reference does;
//                                                          its optimiser settings are critic.*'s
//
// The KL coefficient and estimator are verl's own algorithm.kl_ctrl.kl_coef (with kl_ctrl.type)
// and algorithm.kl_penalty; the reference's fixed kl_coeff defaults to 0.02, verl's to 0.001.
// gamma and lam (algorithm.gamma, algorithm.lam) serve both critics, as in the reference.
//
// Metrics (ours, under safe_rlhf/): lambda, episode_cost, cost_violation (J_C - d), lambda_loss,
// lambda_updated, reward_with_kl_penalty, cost_with_kl_penalty, kl_divergence; the KL controller's
// actor/reward_kl_penalty and actor/reward_kl_penalty_coeff are verl's.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <deque>
#include <optional>
#include <ranges>
#include <type_traits>
#include <vector>

#include "verl/algo/kl/estimator.hpp"
#include "verl/algo/kl/penalty.hpp"
#include "verl/algo/loss_aggregation.hpp"  // detail::row_major_view, detail::count_mask_row
#include "verl/config.hpp"
#include "verl/core/error.hpp"
#include "verl/core/metrics.hpp"
#include "verl/core/tensor.hpp"

namespace verl::algo {

// ---------------------------------------------------------------------------------------------
// The Lagrange multiplier
// ---------------------------------------------------------------------------------------------

/// The multiplier's knobs (algorithm.safe_rlhf.*; see the keys above).
struct LagrangeMultiplierConfig {
  double cost_limit = 0.0;                      ///< d
  double lambda_init = 1.0;                     ///< > 0
  double lambda_lr = 0.1;                       ///< >= 0
  std::optional<double> lambda_max{};           ///< > 0 and >= lambda_init when set
  std::int64_t lambda_update_delay_steps = 0;   ///< >= 0
  std::int64_t episode_cost_window_size = 128;  ///< >= 1
};

/// Everything a checkpoint must hold to resume the multiplier exactly.
struct LagrangeMultiplierState {
  double log_lambda = 0.0;
  std::int64_t steps = 0;                    ///< update() calls so far (the reference's global_step)
  std::vector<double> episode_cost_window;  ///< oldest first, at most episode_cost_window_size
  friend bool operator==(const LagrangeMultiplierState&, const LagrangeMultiplierState&) = default;
};

/// The Lagrangian term that the multiplier descends, as a function of log lambda:
///   L(log lambda) = -(J_C - d) * exp(log lambda),  dL/d log lambda = -(J_C - d) * lambda.
/// Minimising it raises lambda while the expected cost J_C exceeds the limit d and lowers it
/// otherwise; the log parameterisation keeps lambda > 0 and makes the step proportional to lambda
/// (value and gradient coincide: d exp(x)/dx = exp(x)).
struct LagrangianLoss {
  double value = 0;
  double grad_log_lambda = 0;
};

inline LagrangianLoss lagrangian_loss(double log_lambda, double episode_cost, double cost_limit) {
  const double violation = episode_cost - cost_limit;
  const double lambda = std::exp(log_lambda);
  return {.value = -violation * lambda, .grad_log_lambda = -violation * lambda};
}

/// What one update() did.
struct LagrangeStep {
  double lambda = 0;          ///< after the step: the multiplier the actor update uses
  double episode_cost = 0;    ///< J_C, the mean of the cost window
  double loss = 0;            ///< the Lagrangian at the lambda before the step
  bool updated = false;       ///< false during the delay
  Metrics metrics;            ///< safe_rlhf/lambda, episode_cost, cost_violation, lambda_loss, lambda_updated
};

/// The multiplier lambda of Safe RLHF, kept as log lambda and moved by plain SGD on
/// lagrangian_loss, as the reference does (torch.optim.SGD on log_lambda, no momentum):
///
///   J_C        = mean of the last `episode_cost_window_size` recorded episode costs
///   log lambda <- log lambda - lambda_lr * dL/d log lambda = log lambda + lambda_lr * (J_C - d) * lambda
///   log lambda <- min(log lambda, log lambda_max)                 (when lambda_max is set)
///
/// A step that would take lambda beyond double range throws (naming lambda_lr) and leaves lambda
/// and the step count as they were.
/// The step is skipped while fewer than `lambda_update_delay_steps` update() calls came before
/// (the reference compares its global_step, which counts rl_step calls, with the delay); costs are
/// recorded all the same. Arithmetic is in double: the reference takes the window's mean in
/// float32 (a difference below 1e-7 relative) and steps log lambda in float64.
///
/// The reference steps once per rl_step, that is once per actor micro-batch and update iteration,
/// after the whole rollout's costs were recorded; a controller that steps once per rollout batch
/// takes fewer steps and should say so.
///
/// The reference keeps one window per rank and averages the ranks' means; a single controller sees
/// every cost, so its window is global: `episode_cost_window_size` = the reference's value times
/// the number of ranks gives the same J_C whenever each rank's share of a batch fills its window
/// in whole batches.
class LagrangeMultiplier {
 public:
  explicit LagrangeMultiplier(const LagrangeMultiplierConfig& config = {}) : config_(config) {
    validate_config(config);
    log_lambda_ = std::log(config.lambda_init);
  }

  /// lambda = exp(log lambda) > 0.
  double value() const { return std::exp(log_lambda_); }
  double log_value() const { return log_lambda_; }
  std::int64_t steps() const { return steps_; }
  const LagrangeMultiplierConfig& config() const { return config_; }

  /// J_C: the mean of the recorded window. Throws when nothing was recorded yet (the reference
  /// would take the mean of an empty tensor, NaN, and turn lambda into NaN).
  double expected_episode_cost() const {
    VERL_CHECK_ARG(!window_.empty(), "episode_costs: expected at least one recorded episode cost, got none");
    double sum = 0;
    for (const double cost : window_) sum += cost;
    return sum / static_cast<double>(window_.size());
  }

  /// Appends one batch's episode costs (the cost model's score of each response, before the KL
  /// term: see episode_costs()) to the window, dropping the oldest beyond its size. All-or-nothing:
  /// a non-finite cost throws before anything is recorded.
  template <std::ranges::input_range Costs>
    requires std::is_arithmetic_v<std::ranges::range_value_t<Costs>>
  void record_episode_costs(const Costs& episode_costs) {
    std::vector<double> batch;
    for (const auto cost : episode_costs) {
      const auto value = static_cast<double>(cost);
      VERL_CHECK_ARG(std::isfinite(value), "episode_costs: expected finite costs, got {} at index {}", value,
                     batch.size());
      batch.push_back(value);
    }
    for (const double cost : batch) {
      window_.push_back(cost);
      if (static_cast<std::int64_t>(window_.size()) > config_.episode_cost_window_size) window_.pop_front();
    }
  }

  /// One step of the multiplier from the costs recorded so far; returns lambda after the step.
  LagrangeStep update() {
    LagrangeStep step;
    step.episode_cost = expected_episode_cost();
    const LagrangianLoss loss = lagrangian_loss(log_lambda_, step.episode_cost, config_.cost_limit);
    step.loss = loss.value;
    step.updated = steps_ >= config_.lambda_update_delay_steps;
    if (step.updated) {
      double next = log_lambda_ + -config_.lambda_lr * loss.grad_log_lambda;
      if (config_.lambda_max) next = std::min(next, std::log(*config_.lambda_max));
      // Without a bound, a violation that persists grows lambda doubly exponentially; the
      // reference carries on with inf and then NaN. Refuse the step instead: lambda and the step
      // count stay as they were (the costs already recorded stay recorded).
      VERL_CHECK_ARG(std::isfinite(std::exp(next)),
                     "lambda_lr: the step from log lambda = {} with J_C - d = {} and lambda_lr = {} gives a lambda "
                     "beyond double range; expected a lambda_max or a smaller lambda_lr",
                     log_lambda_, step.episode_cost - config_.cost_limit, config_.lambda_lr);
      log_lambda_ = next;
    }
    ++steps_;
    step.lambda = value();
    step.metrics["safe_rlhf/lambda"] = step.lambda;
    step.metrics["safe_rlhf/episode_cost"] = step.episode_cost;
    step.metrics["safe_rlhf/cost_violation"] = step.episode_cost - config_.cost_limit;
    step.metrics["safe_rlhf/lambda_loss"] = step.loss;
    step.metrics["safe_rlhf/lambda_updated"] = step.updated ? 1.0 : 0.0;
    return step;
  }

  /// record_episode_costs(episode_costs), then update().
  template <std::ranges::input_range Costs>
    requires std::is_arithmetic_v<std::ranges::range_value_t<Costs>>
  LagrangeStep update(const Costs& episode_costs) {
    record_episode_costs(episode_costs);
    return update();
  }

  LagrangeMultiplierState state() const {
    return {.log_lambda = log_lambda_, .steps = steps_,
            .episode_cost_window = std::vector<double>(window_.begin(), window_.end())};
  }

  /// Resumes from a checkpoint taken with state() under the same configuration.
  void restore(const LagrangeMultiplierState& state) {
    VERL_CHECK_ARG(std::isfinite(state.log_lambda), "state.log_lambda: expected a finite value, got {}",
                   state.log_lambda);
    if (config_.lambda_max) {
      const double bound = std::log(*config_.lambda_max);
      VERL_CHECK_ARG(state.log_lambda <= bound, "state.log_lambda: expected at most log(lambda_max) = {}, got {}",
                     bound, state.log_lambda);
    }
    VERL_CHECK_ARG(state.steps >= 0, "state.steps: expected a count >= 0, got {}", state.steps);
    VERL_CHECK_ARG(static_cast<std::int64_t>(state.episode_cost_window.size()) <= config_.episode_cost_window_size,
                   "state.episode_cost_window: expected at most episode_cost_window_size = {} costs, got {}",
                   config_.episode_cost_window_size, state.episode_cost_window.size());
    for (std::size_t i = 0; i < state.episode_cost_window.size(); ++i)
      VERL_CHECK_ARG(std::isfinite(state.episode_cost_window[i]),
                     "state.episode_cost_window: expected finite costs, got {} at index {}",
                     state.episode_cost_window[i], i);
    log_lambda_ = state.log_lambda;
    steps_ = state.steps;
    window_.assign(state.episode_cost_window.begin(), state.episode_cost_window.end());
  }

 private:
  static void validate_config(const LagrangeMultiplierConfig& config) {
    VERL_CHECK_ARG(std::isfinite(config.cost_limit), "cost_limit: expected a finite value, got {}", config.cost_limit);
    VERL_CHECK_ARG(std::isfinite(config.lambda_init) && config.lambda_init > 0,
                   "lambda_init: expected a finite value > 0 (log lambda is stored), got {}", config.lambda_init);
    VERL_CHECK_ARG(std::isfinite(config.lambda_lr) && config.lambda_lr >= 0,
                   "lambda_lr: expected a finite value >= 0, got {}", config.lambda_lr);
    if (config.lambda_max) {
      const double max = *config.lambda_max;
      VERL_CHECK_ARG(std::isfinite(max) && max > 0, "lambda_max: expected a finite value > 0 or none, got {}", max);
      VERL_CHECK_ARG(config.lambda_init <= max, "lambda_init: expected at most lambda_max = {}, got {}", max,
                     config.lambda_init);
    }
    VERL_CHECK_ARG(config.lambda_update_delay_steps >= 0,
                   "lambda_update_delay_steps: expected a count >= 0, got {}", config.lambda_update_delay_steps);
    VERL_CHECK_ARG(config.episode_cost_window_size >= 1,
                   "episode_cost_window_size: expected a size >= 1, got {}", config.episode_cost_window_size);
  }

  LagrangeMultiplierConfig config_;
  double log_lambda_ = 0.0;
  std::int64_t steps_ = 0;
  std::deque<double> window_;
};

// ---------------------------------------------------------------------------------------------
// Token rewards and costs, episode costs
// ---------------------------------------------------------------------------------------------

/// The two shaped signals of one batch.
template <class Scalar>
struct RewardsAndCosts {
  RowMatrix<Scalar> token_level_rewards;  ///< clamp(scores - beta * kl * mask, -c, c)
  RowMatrix<Scalar> token_level_costs;    ///< clamp(cost_scores + beta * kl * mask, -c, c)
  double current_kl = 0;                  ///< batch mean of each response's masked-mean KL (for kl_ctrl.update)
  double beta = 0;                        ///< the coefficient used
  Metrics metrics;
};

/// The reference's add_kl_divergence_regularization on verl's token-level scores. With
/// kl_t = estimator(old_log_probs_t, ref_log_prob_t) * mask_t (k1 = old - ref by default, the
/// reference's estimate):
///
///   token_level_rewards_t = clamp(token_level_scores_t      - beta * kl_t, -c, c)
///   token_level_costs_t   = clamp(token_level_cost_scores_t + beta * kl_t, -c, c)
///
/// The KL term enters both signals in full, with opposite signs: drifting from the reference
/// policy is a penalty to the reward and a cost. In the actor's advantages
/// (A_r - lambda A_c) / (1 + lambda) the two shares add back to a single -beta * kl per token
/// (GAE is linear in the rewards), whatever lambda is. Scores are verl's token-level scores (the
/// reward and cost models' scores on each response's last token, zero elsewhere), which is where
/// the reference adds its scalar scores. c = clip_range_score, no clamp when unset; beta is rounded
/// to the scores' precision, as torch does. Padding is 0 before the clamp (the reference's GAE
/// multiplies by the mask).
///
/// Metrics (the reference's, summed over each response's tokens and averaged over the batch):
/// safe_rlhf/reward_with_kl_penalty, safe_rlhf/cost_with_kl_penalty, safe_rlhf/kl_divergence;
/// and verl's actor/reward_kl_penalty (= current_kl) and actor/reward_kl_penalty_coeff (= beta).
template <class SD, class CD, class OD, class RD, class MD, KLEstimator Estimator = KL>
RewardsAndCosts<typename SD::Scalar> kl_penalized_rewards_and_costs(
    const Eigen::MatrixBase<SD>& token_level_scores, const Eigen::MatrixBase<CD>& token_level_cost_scores,
    const Eigen::MatrixBase<OD>& old_log_probs, const Eigen::MatrixBase<RD>& ref_log_prob,
    const Eigen::MatrixBase<MD>& response_mask, double kl_coef, std::optional<double> clip_range_score = 50.0,
    const Estimator& kl_penalty = Estimator{}) {
  using Scalar = typename SD::Scalar;
  VERL_STATIC_ASSERT(std::is_floating_point_v<Scalar>, SAFE_RLHF_NEEDS_FLOATING_POINT_SCORES);
  VERL_STATIC_ASSERT((std::is_same_v<Scalar, typename CD::Scalar> && std::is_same_v<Scalar, typename OD::Scalar> &&
                      std::is_same_v<Scalar, typename RD::Scalar>),
                     SAFE_RLHF_SCORES_AND_LOG_PROBS_MUST_SHARE_ONE_SCALAR_TYPE);
  const Shape2 shape = shape_of(token_level_scores);
  verl::detail::require_same_shape("token_level_cost_scores", shape_of(token_level_cost_scores),
                                   "token_level_scores", shape);
  verl::detail::require_same_shape("old_log_probs", shape_of(old_log_probs), "token_level_scores", shape);
  verl::detail::require_same_shape("ref_log_prob", shape_of(ref_log_prob), "token_level_scores", shape);
  verl::detail::require_same_shape("response_mask", shape_of(response_mask), "token_level_scores", shape);
  VERL_CHECK_ARG(shape.rows > 0, "token_level_scores: expected at least one response, got shape ({}, {})", shape.rows,
                 shape.cols);
  VERL_CHECK_ARG(std::isfinite(kl_coef), "kl_coef: expected a finite value, got {}", kl_coef);
  if (clip_range_score)
    VERL_CHECK_ARG(std::isfinite(*clip_range_score) && *clip_range_score > 0,
                   "clip_range_score: expected a finite value > 0 or none, got {}", *clip_range_score);

  const auto scores = detail::row_major_view(token_level_scores);
  const auto costs = detail::row_major_view(token_level_cost_scores);
  const auto old_lp = detail::row_major_view(old_log_probs);
  const auto ref_lp = detail::row_major_view(ref_log_prob);
  const auto mask = detail::row_major_view(response_mask);
  using M = typename MD::Scalar;
  const Scalar beta = static_cast<Scalar>(kl_coef);
  const Scalar bound = clip_range_score ? static_cast<Scalar>(*clip_range_score) : Scalar(0);
  const auto clamp = [&](Scalar v) { return clip_range_score ? std::clamp(v, -bound, bound) : v; };

  RewardsAndCosts<Scalar> out;
  out.beta = kl_coef;
  out.token_level_rewards.resize(shape.rows, shape.cols);
  out.token_level_costs.resize(shape.rows, shape.cols);
  double kl_total = 0, reward_total = 0, cost_total = 0, sum_of_row_means = 0;
  for (Index i = 0; i < shape.rows; ++i) {
    const Scalar* s = scores.data() + i * scores.outerStride();
    const Scalar* c = costs.data() + i * costs.outerStride();
    const Scalar* a = old_lp.data() + i * old_lp.outerStride();
    const Scalar* b = ref_lp.data() + i * ref_lp.outerStride();
    const M* m = mask.data() + i * mask.outerStride();
    Scalar* r = out.token_level_rewards.data() + i * shape.cols;
    Scalar* k = out.token_level_costs.data() + i * shape.cols;
    const Index length = detail::count_mask_row("response_mask", m, shape.cols, i);
    double row_kl = 0;
    for (Index j = 0; j < shape.cols; ++j) {
      const bool valid = m[j] != M(0);
      const Scalar kl = valid ? kl_penalty.value(a[j], b[j]) : Scalar(0);
      const Scalar penalty = beta * kl;
      r[j] = clamp(s[j] - penalty);
      k[j] = clamp(c[j] + penalty);
      if (valid) {
        row_kl += static_cast<double>(kl);
        reward_total += static_cast<double>(r[j]);
        cost_total += static_cast<double>(k[j]);
      }
    }
    kl_total += row_kl;
    // verl's masked_mean in the scores' precision: sum / (len + 1e-8), as apply_kl_penalty.
    sum_of_row_means +=
        static_cast<double>(static_cast<Scalar>(row_kl) / (static_cast<Scalar>(length) + static_cast<Scalar>(1e-8)));
  }
  const double rows = static_cast<double>(shape.rows);
  out.current_kl = static_cast<double>(static_cast<Scalar>(sum_of_row_means / rows));
  out.metrics["safe_rlhf/kl_divergence"] = kl_total / rows;
  out.metrics["safe_rlhf/reward_with_kl_penalty"] = reward_total / rows;
  out.metrics["safe_rlhf/cost_with_kl_penalty"] = cost_total / rows;
  out.metrics["actor/reward_kl_penalty"] = out.current_kl;
  out.metrics["actor/reward_kl_penalty_coeff"] = out.beta;
  return out;
}

/// Each response's episode cost, the quantity the multiplier constrains: the sum of its
/// token-level cost scores over its valid tokens, in double. With verl's token-level scores (the
/// cost model's score on the last response token) it is that score, the reference's `cost`;
/// the KL share of the costs is not part of it.
template <class CD, class MD>
VectorD episode_costs(const Eigen::MatrixBase<CD>& token_level_cost_scores, const Eigen::MatrixBase<MD>& response_mask) {
  verl::detail::require_same_shape("response_mask", shape_of(response_mask), "token_level_cost_scores",
                                   shape_of(token_level_cost_scores));
  const auto costs = detail::row_major_view(token_level_cost_scores);
  const auto mask = detail::row_major_view(response_mask);
  using M = typename MD::Scalar;
  VectorD out(costs.rows());
  for (Index i = 0; i < costs.rows(); ++i) {
    const M* m = mask.data() + i * mask.outerStride();
    (void)detail::count_mask_row("response_mask", m, costs.cols(), i);
    double sum = 0;
    for (Index j = 0; j < costs.cols(); ++j)
      if (m[j] != M(0)) sum += static_cast<double>(costs(i, j));
    out[i] = sum;
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// The actor's advantages
// ---------------------------------------------------------------------------------------------

/// The actor's advantages from the reward and cost advantages (the reference's actor_loss_fn):
///
///   A_t = (A_r,t - lambda * A_c,t) / (1 + lambda)    at valid tokens, 0 at padding
///
/// the advantage of the Lagrangian r - lambda c, divided by 1 + lambda so that its scale stays
/// that of one signal however large lambda grows. lambda is the multiplier after this step's
/// update (the reference updates it before the actor's loss). As torch computes it with a Python
/// float, lambda and 1 + lambda (summed in double) are rounded to the advantages' precision first.
/// The advantages are constants for the actor (no gradient flows into them); the result goes to
/// the clipped policy loss in place of GAE's advantages.
template <class RD, class CD, class MD>
RowMatrix<typename RD::Scalar> combine_reward_and_cost_advantages(const Eigen::MatrixBase<RD>& reward_advantages,
                                                                 const Eigen::MatrixBase<CD>& cost_advantages,
                                                                 const Eigen::MatrixBase<MD>& response_mask,
                                                                 double lambda) {
  using Scalar = typename RD::Scalar;
  VERL_STATIC_ASSERT(std::is_floating_point_v<Scalar>, SAFE_RLHF_NEEDS_FLOATING_POINT_ADVANTAGES);
  VERL_STATIC_ASSERT((std::is_same_v<Scalar, typename CD::Scalar>), SAFE_RLHF_ADVANTAGES_MUST_SHARE_ONE_SCALAR_TYPE);
  const Shape2 shape = shape_of(reward_advantages);
  verl::detail::require_same_shape("cost_advantages", shape_of(cost_advantages), "reward_advantages", shape);
  verl::detail::require_same_shape("response_mask", shape_of(response_mask), "reward_advantages", shape);
  VERL_CHECK_ARG(std::isfinite(lambda) && lambda >= 0, "lambda: expected a finite value >= 0, got {}", lambda);

  const auto reward = detail::row_major_view(reward_advantages);
  const auto cost = detail::row_major_view(cost_advantages);
  const auto mask = detail::row_major_view(response_mask);
  using M = typename MD::Scalar;
  const Scalar multiplier = static_cast<Scalar>(lambda);
  const Scalar normaliser = static_cast<Scalar>(1.0 + lambda);
  RowMatrix<Scalar> out(shape.rows, shape.cols);
  for (Index i = 0; i < shape.rows; ++i) {
    const Scalar* ar = reward.data() + i * reward.outerStride();
    const Scalar* ac = cost.data() + i * cost.outerStride();
    const M* m = mask.data() + i * mask.outerStride();
    Scalar* o = out.data() + i * shape.cols;
    (void)detail::count_mask_row("response_mask", m, shape.cols, i);
    for (Index j = 0; j < shape.cols; ++j) {
      const Scalar combined = (ar[j] - multiplier * ac[j]) / normaliser;
      o[j] = detail::keep_if(m[j] != M(0), combined);
    }
  }
  return out;
}

}  // namespace verl::algo
