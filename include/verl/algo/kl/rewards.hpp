// KL in the reward (algorithm.use_kl_in_reward): verl's compute_rewards and the trainer's
// apply_kl_penalty, which subtracts beta * KL(old || ref) from the token-level scores and lets a
// KL controller move beta.
#pragma once

#include <cstdint>
#include <string_view>
#include <type_traits>

#include "verl/algo/kl/controller.hpp"
#include "verl/algo/kl/estimator.hpp"
#include "verl/algo/kl/penalty.hpp"
#include "verl/algo/kl/registry.hpp"
#include "verl/algo/loss_aggregation.hpp"
#include "verl/config.hpp"
#include "verl/core/error.hpp"
#include "verl/core/metrics.hpp"
#include "verl/core/tensor.hpp"

namespace verl::algo {

/// verl's compute_rewards: scores - (old_log_prob - ref_log_prob) * kl_ratio, element-wise (the
/// k1 estimate, unmasked). kl_ratio is rounded to the scores' precision first, as torch does.
template <class SD, class OD, class RD>
RowMatrix<typename SD::Scalar> compute_rewards(const Eigen::MatrixBase<SD>& token_level_scores,
                                               const Eigen::MatrixBase<OD>& old_log_prob,
                                               const Eigen::MatrixBase<RD>& ref_log_prob, double kl_ratio) {
  using Scalar = typename SD::Scalar;
  VERL_STATIC_ASSERT(std::is_floating_point_v<Scalar>, KL_PENALTY_NEEDS_FLOATING_POINT_LOG_PROBS);
  verl::detail::require_same_shape("old_log_prob", shape_of(old_log_prob), "token_level_scores",
                                   shape_of(token_level_scores));
  verl::detail::require_same_shape("ref_log_prob", shape_of(ref_log_prob), "token_level_scores",
                                   shape_of(token_level_scores));
  const Scalar ratio = static_cast<Scalar>(kl_ratio);
  RowMatrix<Scalar> rewards(token_level_scores.rows(), token_level_scores.cols());
  rewards = (token_level_scores.template cast<Scalar>().array() -
             (old_log_prob.template cast<Scalar>().array() - ref_log_prob.template cast<Scalar>().array()) * ratio)
                .matrix();
  return rewards;
}

/// What apply_kl_penalty produced for one batch.
template <class Scalar>
struct KLInReward {
  RowMatrix<Scalar> token_level_rewards;  ///< scores - beta * kl * mask
  double current_kl = 0;                  ///< batch mean of the per-response masked-mean KL
  double beta = 0;                        ///< the coefficient used (before the controller's update)
  Metrics metrics;                        ///< actor/reward_kl_penalty, actor/reward_kl_penalty_coeff
};

/// verl's apply_kl_penalty (ray_trainer.py): kl = estimator(old_log_probs, ref_log_prob) * mask,
/// rewards = scores - beta * kl with beta = kl_ctrl.value, then kl_ctrl.update(current_kl, B)
/// where current_kl is the batch mean of each response's masked-mean KL. An empty batch is an
/// error: verl would feed NaN into the controller.
template <class SD, class OD, class RD, class MD, KLController Controller, KLEstimator Estimator = KL>
KLInReward<typename SD::Scalar> apply_kl_penalty(const Eigen::MatrixBase<SD>& token_level_scores,
                                                 const Eigen::MatrixBase<OD>& old_log_probs,
                                                 const Eigen::MatrixBase<RD>& ref_log_prob,
                                                 const Eigen::MatrixBase<MD>& response_mask, Controller& kl_ctrl,
                                                 const Estimator& kl_penalty = Estimator{}) {
  using Scalar = typename SD::Scalar;
  detail::require_log_prob_types<SD, OD>();
  detail::require_log_prob_types<SD, RD>();
  const Shape2 shape = shape_of(token_level_scores);
  verl::detail::require_same_shape("old_log_probs", shape_of(old_log_probs), "token_level_scores", shape);
  verl::detail::require_same_shape("ref_log_prob", shape_of(ref_log_prob), "token_level_scores", shape);
  verl::detail::require_same_shape("response_mask", shape_of(response_mask), "token_level_scores", shape);
  VERL_CHECK_ARG(shape.rows > 0, "token_level_scores: expected at least one response, got shape ({}, {})",
                 shape.rows, shape.cols);

  const auto scores = detail::row_major_view(token_level_scores);
  const auto old_lp = detail::row_major_view(old_log_probs);
  const auto ref_lp = detail::row_major_view(ref_log_prob);
  const auto mask = detail::row_major_view(response_mask);
  using M = typename MD::Scalar;

  KLInReward<Scalar> out;
  out.beta = kl_ctrl.value;
  const Scalar beta = static_cast<Scalar>(out.beta);
  out.token_level_rewards.resize(shape.rows, shape.cols);
  double sum_of_row_means = 0;
  for (Index i = 0; i < shape.rows; ++i) {
    const Scalar* s = scores.data() + i * scores.outerStride();
    const Scalar* a = old_lp.data() + i * old_lp.outerStride();
    const Scalar* b = ref_lp.data() + i * ref_lp.outerStride();
    const M* m = mask.data() + i * mask.outerStride();
    Scalar* r = out.token_level_rewards.data() + i * shape.cols;
    const Index length = detail::count_mask_row("response_mask", m, shape.cols, i);
    double row_kl = 0;
    for (Index j = 0; j < shape.cols; ++j) {
      const Scalar kl = kl_penalty.value(a[j], b[j]) * static_cast<Scalar>(m[j]);
      r[j] = s[j] - beta * kl;
      if (m[j] != M(0)) row_kl += static_cast<double>(kl);
    }
    // masked_mean(kl, mask, axis=-1) in the scores' precision: sum / (len + 1e-8).
    sum_of_row_means += static_cast<double>(static_cast<Scalar>(row_kl) /
                                            (static_cast<Scalar>(length) + static_cast<Scalar>(1e-8)));
  }
  // torch.mean over the batch returns a Scalar tensor; .item() widens it to a Python float.
  out.current_kl = static_cast<double>(static_cast<Scalar>(sum_of_row_means / static_cast<double>(shape.rows)));
  kl_ctrl.update(out.current_kl, static_cast<std::int64_t>(shape.rows));
  out.metrics["actor/reward_kl_penalty"] = out.current_kl;
  out.metrics["actor/reward_kl_penalty_coeff"] = out.beta;
  return out;
}

/// Runtime controller and KL type, as verl's trainer configures them
/// (algorithm.kl_ctrl, algorithm.kl_penalty).
template <class SD, class OD, class RD, class MD>
KLInReward<typename SD::Scalar> apply_kl_penalty(const Eigen::MatrixBase<SD>& token_level_scores,
                                                 const Eigen::MatrixBase<OD>& old_log_probs,
                                                 const Eigen::MatrixBase<RD>& ref_log_prob,
                                                 const Eigen::MatrixBase<MD>& response_mask, AnyKLController& kl_ctrl,
                                                 std::string_view kl_penalty = KL::name) {
  const AnyKLEstimator estimator = make_kl_estimator(kl_penalty);
  return std::visit(
      [&](auto& controller, const auto& kl_type) {
        return apply_kl_penalty(token_level_scores, old_log_probs, ref_log_prob, response_mask, controller, kl_type);
      },
      kl_ctrl, estimator);
}

}  // namespace verl::algo
