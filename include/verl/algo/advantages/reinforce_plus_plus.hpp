// REINFORCE++ (arXiv:2501.03262): verl's "reinforce_plus_plus" (discounted returns whitened over
// the batch) and "reinforce_plus_plus_baseline" (group-mean baseline, then whitened).
#pragma once

#include <string_view>

#include "verl/algo/advantages/detail/masked_whiten.hpp"
#include "verl/algo/advantages/detail/outcome.hpp"

namespace verl::algo {

/// verl 0.9.1's REINFORCE++ returns, backwards over t:
///   g = r_t + gamma * G,  returns_t = g * m_t,  G = g * m_t + G * (1 - m_t),
/// so a masked position (observation tokens, padding) gets return 0, its reward is dropped and the
/// running return passes over it unchanged; advantages = masked_whiten(returns, m) * m over the
/// whole batch.
struct ReinforcePlusPlus {
  static constexpr std::string_view name = "reinforce_plus_plus";
  static constexpr AdvantageInputs needs{};
  static ReinforcePlusPlus from_config(const AdvantageConfig& config) { return {.gamma = config.gamma}; }

  double gamma = 1.0;  ///< discount (verl reads config.gamma)

  AdvantageResult compute(const AdvantageBatch& batch) const { return detail::compute_fresh(*this, batch); }
  /// As compute(), reusing the storage of `out` (the previous step's result) when it fits.
  void compute_into(const AdvantageBatch& batch, AdvantageResult& out) const {
    detail::validate_advantage_batch<ReinforcePlusPlus>(batch);
    const Index rows = batch.batch_size(), cols = batch.response_length();
    MatrixF& returns = out.separate_returns();
    detail::prepare_output(out.advantages, rows, cols);
    detail::prepare_output(returns, rows, cols);
    detail::MaskedBatchSum batch_sum(rows, cols);
    // Each row is a serial recursion; a few rows side by side hide its latency (four measured best:
    // more rows means more backward memory streams than the prefetchers follow).
    constexpr Index block = 4;
    Index i = 0;
    for (; i + block <= rows; i += block) discounted_returns<block>(batch, i, returns, batch_sum);
    for (; i < rows; ++i) discounted_returns<1>(batch, i, returns, batch_sum);
    detail::masked_whiten(returns, batch.response_mask, batch_sum, detail::MaskedPositions::zeroed, out.advantages);
  }

 private:
  template <Index Rows>
  void discounted_returns(const AdvantageBatch& batch, Index first, MatrixF& returns,
                          detail::MaskedBatchSum& batch_sum) const {
    const Index cols = batch.response_length();
    const float discount = static_cast<float>(gamma);
    const float* reward[Rows];
    const float* mask[Rows];
    float* out[Rows];
    float running[Rows];
    for (Index k = 0; k < Rows; ++k) {
      reward[k] = detail::row_of(batch.token_level_rewards, first + k);
      mask[k] = detail::row_of(batch.response_mask, first + k);
      out[k] = detail::row_of(returns, first + k);
      running[k] = 0.0f;
      detail::require_binary_mask_row("response_mask", mask[k], cols, first + k);
    }
    for (Index t = cols - 1; t >= 0; --t) {
      for (Index k = 0; k < Rows; ++k) {
        const float m = mask[k][t];
        const float g = reward[k][t] + discount * running[k];
        out[k][t] = g * m;
        running[k] = g * m + running[k] * (1.0f - m);  // carried over masked positions
      }
    }
    for (Index k = 0; k < Rows; ++k) batch_sum.add_row(out[k], mask[k]);
  }
};

/// a_i = s_i - mean_g (a group of one has mean 0), tiled over the valid tokens, then
/// masked_whiten(., m) * m over the whole batch. advantages = returns.
struct ReinforcePlusPlusBaseline {
  static constexpr std::string_view name = "reinforce_plus_plus_baseline";
  static constexpr AdvantageInputs needs{.group_index = true};
  static ReinforcePlusPlusBaseline from_config(const AdvantageConfig& config) { return {.epsilon = config.group_epsilon()}; }

  double epsilon = 1e-6;  ///< accepted for verl's signature; unused

  AdvantageResult compute(const AdvantageBatch& batch) const { return detail::compute_fresh(*this, batch); }
  /// As compute(), reusing the storage of `out` (the previous step's result) when it fits.
  void compute_into(const AdvantageBatch& batch, AdvantageResult& out) const {
    detail::outcome_into(*this, batch, out);
    const auto& mask = batch.response_mask;
    detail::MaskedBatchSum whitening(mask.rows(), mask.cols());
    for (Index i = 0; i < mask.rows(); ++i) whitening.add_row(detail::row_of(out.advantages, i), detail::row_of(mask, i));
    detail::masked_whiten(out.advantages, mask, whitening, detail::MaskedPositions::zeroed, out.advantages);
  }

  /// s_i minus its group's mean (compute_into broadcasts it, then whitens over the batch).
  VectorF response_scalars(const AdvantageBatch& /*batch*/, const VectorF& scores,
                           const detail::PromptGroups& groups) const {
    const auto moments = detail::torch_group_moments(scores, groups);
    VectorF centered(scores.size());
    for (Index i = 0; i < scores.size(); ++i)
      centered[i] = scores[i] - moments.mean[static_cast<std::size_t>(groups.group_of(i))];
    return centered;
  }
};

}  // namespace verl::algo
