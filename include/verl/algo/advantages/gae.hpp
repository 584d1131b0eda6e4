// GAE, generalized advantage estimation (arXiv:1506.02438): verl's "gae",
// compute_gae_advantage_return. The only estimator that needs a critic.
#pragma once

#include <string_view>

#include "verl/algo/advantage_estimator.hpp"
#include "verl/algo/advantages/detail/masked_whiten.hpp"
#include "verl/algo/advantages/detail/row_ops.hpp"

namespace verl::algo {

/// Backward over t: delta = r_t + gamma * V_next - V_t, A_t = delta + gamma*lam * A_next, where the
/// state (V_next, A_next) only advances on valid tokens (mask-0 positions are skipped and see the
/// carried state). returns = A + values at every position; advantages = masked_whiten(A, mask) over
/// the whole batch, not multiplied by the mask (padding holds (0 - mean) / std, as in verl).
struct GAE {
  static constexpr std::string_view name = "gae";
  static constexpr bool needs_critic = true;
  static constexpr bool needs_group_index = false;
  static constexpr bool needs_reward_baseline = false;
  static constexpr bool needs_old_log_probs = false;

  double gamma = 1.0;  ///< discount (algorithm.gamma)
  double lam = 1.0;    ///< GAE lambda (algorithm.lam)

  AdvantageResult compute(const AdvantageBatch& batch) const {
    detail::validate_advantage_batch<GAE>(batch);
    const Index rows = batch.batch_size(), cols = batch.response_length();
    AdvantageResult out{MatrixF(rows, cols), MatrixF(rows, cols)};
    detail::MaskedBatchSum batch_sum(rows, cols);
    // Each row is a serial recursion; running several rows side by side hides its latency.
    constexpr Index block = 8;
    Index i = 0;
    for (; i + block <= rows; i += block) backward_rows<block>(batch, i, out, batch_sum);
    for (; i < rows; ++i) backward_rows<1>(batch, i, out, batch_sum);
    detail::masked_whiten(out.advantages, batch.response_mask, batch_sum, detail::MaskedPositions::whitened,
                          out.advantages);
    return out;
  }

 private:
  template <Index Rows>
  void backward_rows(const AdvantageBatch& batch, Index first, AdvantageResult& out,
                     detail::MaskedBatchSum& batch_sum) const {
    const Index cols = batch.response_length();
    // Python floats meet float32 tensors: gamma, and gamma*lam (multiplied in double first).
    const float discount = static_cast<float>(gamma);
    const float trace_decay = static_cast<float>(gamma * lam);
    const float* reward[Rows];
    const float* value[Rows];
    const float* mask[Rows];
    float* advantage[Rows];
    float* returns[Rows];
    float next_value[Rows];
    float last_advantage[Rows];
    for (Index k = 0; k < Rows; ++k) {
      reward[k] = detail::row_of(batch.token_level_rewards, first + k);
      value[k] = detail::row_of(*batch.values, first + k);
      mask[k] = detail::row_of(batch.response_mask, first + k);
      advantage[k] = detail::row_of(out.advantages, first + k);
      returns[k] = detail::row_of(out.returns, first + k);
      next_value[k] = 0.0f;
      last_advantage[k] = 0.0f;
      detail::require_binary_mask_row("response_mask", mask[k], cols, first + k);
    }
    for (Index t = cols - 1; t >= 0; --t) {
      for (Index k = 0; k < Rows; ++k) {
        const float v = value[k][t];
        const float delta = (reward[k][t] + discount * next_value[k]) - v;
        const float candidate = delta + trace_decay * last_advantage[k];
        const bool valid = mask[k][t] != 0.0f;
        next_value[k] = valid ? v : next_value[k];
        last_advantage[k] = valid ? candidate : last_advantage[k];
        advantage[k][t] = last_advantage[k];
        returns[k][t] = last_advantage[k] + v;
      }
    }
    for (Index k = 0; k < Rows; ++k) batch_sum.add_row(advantage[k], mask[k]);
  }
};

}  // namespace verl::algo
