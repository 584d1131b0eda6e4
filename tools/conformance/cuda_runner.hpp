// The CUDA path of verl_conformance: host functions (defined in cuda_families.cu, compiled by
// nvcc) that upload a golden case's tensors, run the kernels of include/verl/kernels and download
// the results. g++-compilable: cuda_handlers.cpp translates the JSON cases and calls these.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "verl/algo/advantages/estimator.hpp"
#include "verl/algo/entropy_loss.hpp"
#include "verl/algo/value_loss.hpp"
#include "verl/algo/policy_losses/policy_loss.hpp"
#include "verl/algo/policy_losses/registry.hpp"
#include "verl/kernels/advantages.hpp"
#include "verl/kernels/kl_penalty.hpp"
#include "verl/kernels/masked_reductions.hpp"
#include "verl/kernels/optimal_token_baseline.hpp"
#include "verl/kernels/policy_loss.hpp"
#include "verl/kernels/rollout_correction.hpp"

namespace verl::conformance::cuda_path {

/// "" when a CUDA device is usable, else why not.
std::string unavailable_reason();

/// Outcome estimators on (B, T) rewards and mask; ids of any layout (sorted on the device).
/// Throws where verl raises (whitening of fewer than 2 valid tokens).
algo::AdvantageResult outcome_advantages(const kernels::OutcomeParams& params, const MatrixF& rewards,
                                         const MatrixF& mask, const std::vector<std::int64_t>& ids);
algo::AdvantageResult gae(double gamma, double lam, const MatrixF& rewards, const MatrixF& values, const MatrixF& mask);
algo::AdvantageResult reinforce_plus_plus(double gamma, const MatrixF& rewards, const MatrixF& mask);
algo::AdvantageResult remax(const MatrixF& rewards, const MatrixF& mask, const VectorF& baselines);

/// Both optimal-token-baseline forms; rollout_is_weights may be null.
algo::AdvantageResult optimal_token_baseline(const kernels::OptimalTokenBaselineParams& params, const MatrixF& rewards,
                                             const MatrixF& mask, const std::vector<std::int64_t>& ids,
                                             const MatrixF& old_log_probs, const MatrixF& sum_pi_squared,
                                             const MatrixF* rollout_is_weights);

struct AggLossOutput {
  float loss;
  MatrixF weights;  ///< d loss / d loss_mat
};
AggLossOutput agg_loss(const MatrixF& loss, const MatrixF& mask, algo::LossAggMode mode,
                       const algo::GlobalBatchInfo& info);

struct KlOutput {
  MatrixF kl;
  MatrixF grad_logprob;  ///< cotangent * d kl / d logprob (empty without a cotangent)
};
KlOutput kl_penalty(kernels::KlType type, const MatrixF& logprob, const MatrixF& ref_logprob,
                    const MatrixF* cotangent);

/// verl's compute_rewards: scores - (old - ref) * kl_ratio.
MatrixF kl_rewards(const MatrixF& scores, const MatrixF& old_log_prob, const MatrixF& ref_log_prob, double kl_ratio);

/// verl's masked_whiten and, with a cotangent, its VJP w.r.t. the values.
struct WhitenOutput {
  MatrixF result;
  MatrixF grad;  ///< empty without a cotangent
};
WhitenOutput masked_whiten(const MatrixF& values, const MatrixF& mask, const MatrixF* cotangent, bool shift_mean);

/// verl's gather_from_labels, clip_by_value and get_response_mask through kernels/functional.cuh.
VectorF gather_from_labels(const MatrixF& data, const std::vector<std::int64_t>& labels);
MatrixF clip_by_value(const MatrixF& x, const MatrixF& tensor_min, const MatrixF& tensor_max);
RowMatrix<std::int64_t> response_mask(const RowMatrix<std::int64_t>& response_ids, const std::vector<std::int64_t>& eos);

/// verl's compute_value_loss through kernels/value_loss.cuh.
algo::ValueLoss<float> value_loss(const MatrixF& vpreds, const MatrixF& returns, const MatrixF& values,
                                  const MatrixF& mask, double cliprange_value, algo::LossAggMode mode);

/// verl's compute_entropy_loss through kernels/entropy_loss.cuh: logits (B*T, V), mask (B, T).
algo::EntropyLoss entropy_loss(const MatrixF& logits, const MatrixF& mask, algo::LossAggMode mode);

/// Whether a kernel runs this loss (every policy loss: bypass_mode through
/// kernels/rollout_correction.cuh, the others through kernels/policy_loss.cuh).
bool has_policy_loss_kernel(const algo::AnyPolicyLoss& loss);

/// A policy loss through its kernels: pg_loss, grad w.r.t. log_prob, and the metrics verl reports
/// for it (bypass_mode's include every "rollout_corr/..." metric). Requires has_policy_loss_kernel(loss).
algo::PolicyLossResult policy_loss(const algo::AnyPolicyLoss& loss, const algo::PolicyLossBatch& batch,
                                   algo::LossAggMode mode, const algo::GlobalBatchInfo& info);

/// Log-probs of `labels` (nullptr: none), entropy and sum p^2 of each row of `logits`, through
/// kernels/logprob_entropy.cuh; with a cotangent of the log-probs or of the entropy, also
/// d(sum cot * output)/d logits.
struct LogitsOutput {
  VectorF log_probs, entropy, sum_pi_squared;
  MatrixF grad_logits;  ///< empty without a cotangent
};
LogitsOutput logprob_entropy(const MatrixF& logits, const std::vector<std::int64_t>* labels,
                             const VectorF* log_prob_cotangent, const VectorF* entropy_cotangent);

/// masked_sum / masked_mean over the whole batch (axis none: `scalar` and the gradient of it) or
/// along an axis (`along_axis`, and with a cotangent the VJP), through masked_reductions.cuh.
struct MaskedReduceOutput {
  double scalar = 0;
  VectorF along_axis;
  MatrixF grad;  ///< empty for an axis without a cotangent
};
MaskedReduceOutput masked_reduce(const MatrixF& values, const MatrixF& mask, const int* axis, bool mean,
                                 const VectorF* cotangent);

/// masked_var and its gradient (cotangent 1); `count` is the number of valid elements.
struct MaskedVarOutput {
  float var;
  double count;
  MatrixF grad;
};
MaskedVarOutput masked_var(const MatrixF& values, const MatrixF& mask, bool unbiased);

}  // namespace verl::conformance::cuda_path
