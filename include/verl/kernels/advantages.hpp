// Host side of the advantage kernels (advantages.cuh): the estimator choices and parameters, the
// per-response formula shared with the kernels, launch-shape helpers and the CPU reference (the
// verl::algo estimators, golden-exact) that the CUDA tests and the conformance runner compare to.
#pragma once

#include <cmath>
#include <cstdint>
#include <string_view>

#include "verl/algo/advantages.hpp"
#include "verl/core/error.hpp"
#include "verl/core/type_list.hpp"
#include "verl/kernels/detail/host_device.hpp"
#include "verl/kernels/detail/launch.hpp"

namespace verl::kernels {

/// The outcome estimators: one scalar per response from its score and its group, broadcast over
/// the response's valid tokens.
enum class OutcomeEstimator {
  grpo,                          ///< (s - mean) / (std + eps), or s - mean (Dr.GRPO)
  grpo_vectorized,               ///< grpo with float32 batch-order sums, two-pass variance
  rloo,                          ///< leave-one-out baseline (verl's per-group loop)
  rloo_vectorized,               ///< (c s - sum) / max(c - 1, 1), 0 for a group of one
  gpg,                           ///< alpha (s - mean) / f_norm, alpha = B / #nonzero scores
  opo,                           ///< s - length-weighted group mean
  reinforce_plus_plus_baseline,  ///< s - mean, then masked whitening over the batch
  grpo_passk,                    ///< the group's best row: (s - runner-up) / (std + eps); others 0.
                                 ///< A group of one gets NaN (verl raises: check sizes on the host)
};

/// algo's estimator types behind OutcomeEstimator, in its order: the kernels' names and the
/// parameter of an estimator type derive from this list.
using OutcomeEstimators = TypeList<algo::GRPO, algo::GRPOVectorized, algo::RLOO, algo::RLOOVectorized, algo::GPG,
                                   algo::OPO, algo::ReinforcePlusPlusBaseline, algo::GRPOPassK>;
static_assert(OutcomeEstimators::size == static_cast<std::size_t>(OutcomeEstimator::grpo_passk) + 1,
              "OutcomeEstimators lists one algo type per OutcomeEstimator, in the enum's order");

/// The kernels' parameter for algo's estimator type E.
template <class E>
  requires(contains_v<E, OutcomeEstimators>)
inline constexpr OutcomeEstimator outcome_estimator_of = static_cast<OutcomeEstimator>(index_in_v<E, OutcomeEstimators>);

/// verl's registry name of the estimator.
constexpr std::string_view to_string(OutcomeEstimator e) {
  constexpr auto names = names_of(OutcomeEstimators{});
  const auto index = static_cast<std::size_t>(e);
  return index < names.size() ? names[index] : "?";
}

/// How group ids are laid out. `contiguous` promises that the rows of each id form one run (verl's
/// usual repeat-interleave layout); a run boundary is then a change of id. `any` sorts (id, row)
/// pairs first, which groups equal ids wherever they are and keeps batch order inside a group.
enum class GroupLayout { contiguous, any };

struct OutcomeParams {
  OutcomeEstimator estimator = OutcomeEstimator::grpo;
  float epsilon = 1e-6f;                 ///< grpo: added to the std (verl's Python float, as float32)
  bool norm_adv_by_std_in_grpo = true;   ///< false: Dr.GRPO
  float f_norm = 1.0f;                   ///< gpg
};

/// What the kernels know about one group when they compute its rows' scalars.
struct GroupStats {
  std::int64_t size = 0;
  float mean = 0;      ///< float32 mean (0 for a group of one)
  float std = 1;       ///< unbiased std as torch.std (1 for a group of one)
  float baseline = 0;  ///< opo: sum(len * s) / sum(len) (0 for a group of one)
  float sum = 0;       ///< rloo_vectorized: float32 sum of the scores in batch order
  std::int64_t best_row = -1;  ///< grpo_passk: the first row (batch order) with the group's top score
  float margin = 0;            ///< grpo_passk: top score - the best of the other rows (NaN for a group of one)
};

/// The per-response scalar of each outcome estimator, float32 step by step as verl (and
/// verl::algo) compute it. `gpg_alpha` = B / max(#nonzero scores, 1), computed once per batch;
/// `row` is read by grpo_passk only.
VERL_KERNELS_HD float outcome_scalar(const OutcomeParams& p, float score, const GroupStats& g, float gpg_alpha,
                                     std::int64_t row = -1) {
  switch (p.estimator) {
    case OutcomeEstimator::grpo_passk:
      if (row != g.best_row) return 0.0f;
      return p.norm_adv_by_std_in_grpo ? g.margin / (g.std + p.epsilon) : g.margin;
    case OutcomeEstimator::grpo:
    case OutcomeEstimator::grpo_vectorized: {
      const float centered = score - g.mean;
      return p.norm_adv_by_std_in_grpo ? centered / (g.std + p.epsilon) : centered;
    }
    case OutcomeEstimator::rloo_vectorized: {
      const float c = static_cast<float>(g.size);
      const float leave_one_out = detail::add_rn(detail::mul_rn(c, score), -g.sum) / (c - 1.0f > 1.0f ? c - 1.0f : 1.0f);
      return leave_one_out * (c > 1.0f ? 1.0f : 0.0f);
    }
    case OutcomeEstimator::rloo: {
      if (g.size <= 1) return score;
      const float n = static_cast<float>(g.size), n1 = static_cast<float>(g.size - 1);
      return (score * n) / n1 - (g.mean * n) / n1;
    }
    case OutcomeEstimator::gpg: return (gpg_alpha * (score - g.mean)) / p.f_norm;
    case OutcomeEstimator::opo: return score - g.baseline;
    case OutcomeEstimator::reinforce_plus_plus_baseline: return score - g.mean;
  }
  return 0.0f;
}

/// GAE's knobs as the kernels take them: gamma and gamma*lam (multiplied in double, then
/// rounded, as a Python float meets a float32 tensor).
struct GaeParams {
  float discount = 1.0f;
  float trace_decay = 1.0f;
  static GaeParams from(double gamma, double lam) {
    return {static_cast<float>(gamma), static_cast<float>(gamma * lam)};
  }
};

/// The CPU reference of an outcome estimator on a full (B, T) batch: verl::algo's estimator.
inline algo::AdvantageResult reference_outcome(const OutcomeParams& p, const algo::AdvantageBatch& batch) {
  switch (p.estimator) {
    case OutcomeEstimator::grpo:
      return algo::GRPO{.epsilon = static_cast<double>(p.epsilon), .norm_adv_by_std_in_grpo = p.norm_adv_by_std_in_grpo}
          .compute(batch);
    case OutcomeEstimator::grpo_vectorized:
      return algo::GRPOVectorized{.epsilon = static_cast<double>(p.epsilon),
                                  .norm_adv_by_std_in_grpo = p.norm_adv_by_std_in_grpo}
          .compute(batch);
    case OutcomeEstimator::rloo: return algo::RLOO{}.compute(batch);
    case OutcomeEstimator::rloo_vectorized: return algo::RLOOVectorized{}.compute(batch);
    case OutcomeEstimator::gpg: return algo::GPG{.f_norm = static_cast<double>(p.f_norm)}.compute(batch);
    case OutcomeEstimator::opo: return algo::OPO{}.compute(batch);
    case OutcomeEstimator::reinforce_plus_plus_baseline: return algo::ReinforcePlusPlusBaseline{}.compute(batch);
    case OutcomeEstimator::grpo_passk:
      return algo::GRPOPassK{.epsilon = static_cast<double>(p.epsilon),
                             .norm_adv_by_std_in_grpo = p.norm_adv_by_std_in_grpo}
          .compute(batch);
  }
  verl::detail::throw_invalid_argument("estimator: unknown value {}", static_cast<int>(p.estimator));
}

}  // namespace verl::kernels
