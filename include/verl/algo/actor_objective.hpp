// The actor's training objective as verl's actor update builds it from its parts:
//   policy_loss = pg_loss - entropy_coeff * agg(entropy) + kl_loss_coef * agg(kl_penalty(lp, ref))
// composed at compile time from a policy loss, a KL-loss term and an aggregation mode, with the
// gradient with respect to the log-probs and to the per-token entropy (the fused logits backward
// turns both into d loss / d logits).
#pragma once

#include <optional>
#include <string_view>
#include <type_traits>

#include "verl/algo/kl/estimator.hpp"
#include "verl/algo/kl/penalty.hpp"
#include "verl/algo/loss_aggregation.hpp"
#include "verl/algo/policy_losses/policy_loss.hpp"
#include "verl/config.hpp"
#include "verl/core/error.hpp"
#include "verl/core/metrics.hpp"
#include "verl/core/tensor.hpp"

namespace verl::algo {

/// No KL loss (verl: actor.use_kl_loss=False); KL may still be applied in the reward.
struct NoKLLoss {
  static constexpr bool enabled = false;
};

/// KL to the reference policy as a loss term (verl: actor.use_kl_loss=True, kl_loss_type,
/// kl_loss_coef), aggregated with the objective's mode.
template <KLEstimator Estimator>
struct KLLoss {
  static constexpr bool enabled = true;
  Estimator estimator{};
  double coef = 0.001;  ///< kl_loss_coef
};

namespace detail {
template <class T>
struct is_kl_loss_term : std::false_type {};
template <>
struct is_kl_loss_term<NoKLLoss> : std::true_type {};
template <class E>
struct is_kl_loss_term<KLLoss<E>> : std::true_type {};
}  // namespace detail

/// A KL-loss term is NoKLLoss or KLLoss<E> for a KL estimator E.
template <class T>
concept KLLossTerm = detail::is_kl_loss_term<T>::value;

/// One micro-batch for the objective: the policy-loss inputs plus what the optional terms need.
struct ActorObjectiveBatch {
  PolicyLossBatch policy;
  std::optional<ConstMatrixRefF> ref_log_prob = std::nullopt;  ///< (B, T), needed with a KL loss
  std::optional<ConstMatrixRefF> entropy = std::nullopt;       ///< (B, T), needed when entropy_coeff != 0
};

struct ActorObjectiveResult {
  float loss = 0;          ///< the scalar verl back-propagates (before micro-batch scaling)
  MatrixF grad_log_prob;   ///< d loss / d log_prob, (B, T)
  MatrixF grad_entropy;    ///< d loss / d entropy, (B, T); empty when entropy_coeff == 0
  Metrics metrics;         ///< actor/pg_loss, actor/pg_clipfrac, ..., actor/entropy, actor/kl_loss, actor/kl_coef
};

/// verl's actor objective. `Mode` is the configured loss_agg_mode; a policy loss that would
/// silently override it (gspo, sapo, geo_mean) is a compile error, as with compute_policy_loss.
template <class Loss, class KLTerm = NoKLLoss, class Mode = TokenMean>
struct ActorObjective {
  VERL_STATIC_ASSERT(PolicyLoss<Loss>, THE_LOSS_TYPE_DOES_NOT_SATISFY_THE_POLICY_LOSS_CONCEPT);
  VERL_STATIC_ASSERT(KLLossTerm<KLTerm>, THE_KL_TERM_MUST_BE_NoKLLoss_OR_KLLoss_OF_A_KL_ESTIMATOR);
  VERL_STATIC_ASSERT(LossAggregation<Mode>, THE_AGGREGATION_MODE_MUST_BE_A_LOSS_AGGREGATION_POLICY);

  Loss policy_loss{};
  KLTerm kl_loss{};
  double entropy_coeff = 0;  ///< actor.entropy_coeff: the entropy bonus weight

  ActorObjectiveResult compute(const ActorObjectiveBatch& batch, const GlobalBatchInfo& info = {}) const {
    const Shape2 shape = shape_of(batch.policy.log_prob);
    ActorObjectiveResult result;
    PolicyLossResult pg = compute_policy_loss<Mode>(policy_loss, batch.policy, info);
    result.loss = pg.pg_loss;
    result.grad_log_prob = std::move(pg.grad_log_prob);
    result.metrics = std::move(pg.metrics);
    result.metrics["actor/pg_loss"] = pg.pg_loss;

    const auto& mask = batch.policy.response_mask;
    if (batch.entropy) {
      verl::detail::require_same_shape("entropy", shape_of(*batch.entropy), "log_prob", shape);
      const float entropy_agg = agg_loss(*batch.entropy, mask, Mode::mode, info);
      result.metrics["actor/entropy"] = entropy_agg;
      if (entropy_coeff != 0) {
        // loss -= coeff * agg(entropy): in float32, as verl's tensors are.
        result.loss = result.loss - entropy_agg * static_cast<float>(entropy_coeff);
        result.grad_entropy = agg_loss_weights(mask, Mode::mode, info) * static_cast<float>(-entropy_coeff);
      }
    } else {
      VERL_CHECK_ARG(entropy_coeff == 0,
                     "entropy: entropy_coeff is {} but the batch carries no per-token entropy (B, T) = ({}, {})",
                     entropy_coeff, shape.rows, shape.cols);
    }

    if constexpr (KLTerm::enabled) {
      VERL_CHECK_ARG(batch.ref_log_prob.has_value(),
                     "ref_log_prob: the KL loss ({}) needs the reference policy's log-probs ({}, {}), got none",
                     decltype(kl_loss.estimator)::name, shape.rows, shape.cols);
      verl::detail::require_same_shape("ref_log_prob", shape_of(*batch.ref_log_prob), "log_prob", shape);
      const MatrixF kld = kl_penalty(batch.policy.log_prob, *batch.ref_log_prob, kl_loss.estimator);
      const float kl_value = agg_loss(kld, mask, Mode::mode, info);
      const float coef = static_cast<float>(kl_loss.coef);
      result.loss = result.loss + kl_value * coef;
      const MatrixF cotangent = agg_loss_weights(mask, Mode::mode, info) * coef;
      const auto kl_grad = kl_penalty_backward(batch.policy.log_prob, *batch.ref_log_prob, cotangent, kl_loss.estimator);
      result.grad_log_prob += kl_grad.logprob;
      result.metrics["actor/kl_loss"] = kl_value;
      result.metrics["actor/kl_coef"] = kl_loss.coef;
    }
    return result;
  }
};

}  // namespace verl::algo
