// GPG, group policy gradient (arXiv:2504.02546): verl's "gpg", compute_gpg_outcome_advantage.
#pragma once

#include <algorithm>
#include <string_view>

#include "verl/algo/advantages/detail/outcome.hpp"

namespace verl::algo {

/// a_i = alpha * (s_i - mean_g) / f_norm with alpha = B / max(#rows whose score is nonzero, 1)
/// over the whole batch; a group of one has mean 0. advantages = returns = a_i * m.
struct GPG {
  static constexpr std::string_view name = "gpg";
  static constexpr AdvantageInputs needs{.group_index = true};
  static GPG from_config(const AdvantageConfig& config) {
    return {.epsilon = config.group_epsilon(), .f_norm = config.f_norm, .alpha = config.alpha};
  }

  double epsilon = 1e-6;  ///< accepted for verl's signature; unused
  double f_norm = 1.0;    ///< divides the advantage
  double alpha = 1.0;     ///< ignored, as in verl: alpha is recomputed from the batch

  AdvantageResult compute(const AdvantageBatch& batch) const { return detail::compute_fresh(*this, batch); }
  void compute_into(const AdvantageBatch& batch, AdvantageResult& out) const { detail::outcome_into(*this, batch, out); }
  /// alpha (s_i - mean_g) / f_norm, alpha = B / (responses with a nonzero score).
  VectorF response_scalars(const AdvantageBatch& /*batch*/, const VectorF& scores,
                           const detail::PromptGroups& groups) const {
    const auto moments = detail::torch_group_moments(scores, groups);
    Index nonzero = 0;
    for (Index i = 0; i < scores.size(); ++i) nonzero += scores[i] != 0.0f ? 1 : 0;
    // verl's `bsz / m.clamp(min=1)` runs torch's Tensor.__rtruediv__, reciprocal(m) * bsz, in float32.
    const float batch_alpha =
        (1.0f / static_cast<float>(std::max<Index>(nonzero, 1))) * static_cast<float>(scores.size());
    const float norm = static_cast<float>(f_norm);
    VectorF scalars(scores.size());
    for (Index i = 0; i < scores.size(); ++i) {
      const auto g = static_cast<std::size_t>(groups.group_of(i));
      scalars[i] = (batch_alpha * (scores[i] - moments.mean[g])) / norm;
    }
    return scalars;
  }
};

}  // namespace verl::algo
