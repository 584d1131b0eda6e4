// GAE, generalized advantage estimation (arXiv:1506.02438): verl's "gae",
// compute_gae_advantage_return. The only estimator that needs a critic.
#pragma once

#include <algorithm>
#include <string_view>

#include "verl/algo/advantages/estimator.hpp"
#include "verl/algo/advantages/detail/masked_whiten.hpp"
#include "verl/algo/advantages/detail/row_ops.hpp"

namespace verl::algo {

/// Backward over t: delta = r_t + gamma * V_next - V_t, A_t = delta + gamma*lam * A_next, where the
/// state (V_next, A_next) only advances on valid tokens (mask-0 positions are skipped and see the
/// carried state). returns = A + values at every position; advantages = masked_whiten(A, mask) over
/// the whole batch, not multiplied by the mask (padding holds (0 - mean) / std, as in verl).
struct GAE {
  static constexpr std::string_view name = "gae";
  static constexpr AdvantageInputs needs{.critic_values = true};
  static GAE from_config(const AdvantageConfig& config) { return {.gamma = config.gamma, .lam = config.lam}; }

  double gamma = 1.0;  ///< discount (algorithm.gamma)
  double lam = 1.0;    ///< GAE lambda (algorithm.lam)

  AdvantageResult compute(const AdvantageBatch& batch) const { return detail::compute_fresh(*this, batch); }
  /// As compute(), reusing the storage of `out` (the previous step's result) when it fits.
  void compute_into(const AdvantageBatch& batch, AdvantageResult& out) const {
    detail::validate_advantage_batch<GAE>(batch);
    const Index rows = batch.batch_size(), cols = batch.response_length();
    detail::prepare_output(out.advantages, rows, cols);
    detail::prepare_output(out.separate_returns(), rows, cols);
    detail::MaskedBatchSum batch_sum(rows, cols);
    // Each row is a serial recursion in t; eight rows side by side fill the vector lanes.
    constexpr Index block = 8;
    Index i = 0;
    const ConstMatrixRefF& values = batch.values.value();  // present: validated above
    for (; i + block <= rows; i += block) backward_rows<block>(batch, values, i, out, batch_sum);
    for (; i < rows; ++i) backward_rows<1>(batch, values, i, out, batch_sum);
    detail::masked_whiten(out.advantages, batch.response_mask, batch_sum, detail::MaskedPositions::whitened,
                          out.advantages);
  }

 private:
  /// The backward recursion for `Lanes` rows at once. Tiles of the rows are transposed into
  /// lane-major scratch so that one step over all lanes is a contiguous, vectorisable loop (the
  /// recursion itself is serial in t); the results are transposed back.
  template <Index Lanes>
  void backward_rows(const AdvantageBatch& batch, const ConstMatrixRefF& values, Index first, AdvantageResult& out,
                     detail::MaskedBatchSum& batch_sum) const {
    constexpr Index kChunk = 64;
    const Index cols = batch.response_length();
    // Python floats meet float32 tensors: gamma, and gamma*lam (multiplied in double first).
    const float discount = static_cast<float>(gamma);
    const float trace_decay = static_cast<float>(gamma * lam);
    alignas(64) float reward[kChunk][Lanes], value[kChunk][Lanes], mask[kChunk][Lanes];
    alignas(64) float advantage[kChunk][Lanes], returns[kChunk][Lanes];
    float next_value[Lanes] = {}, last_advantage[Lanes] = {};
    for (Index k = 0; k < Lanes; ++k)
      detail::require_binary_mask_row("response_mask", detail::row_of(batch.response_mask, first + k), cols, first + k);
    for (Index end = cols; end > 0;) {
      const Index begin = std::max<Index>(end - kChunk, 0), width = end - begin;
      for (Index k = 0; k < Lanes; ++k) {
        const float* r = detail::row_of(batch.token_level_rewards, first + k) + begin;
        const float* v = detail::row_of(values, first + k) + begin;
        const float* m = detail::row_of(batch.response_mask, first + k) + begin;
        for (Index c = 0; c < width; ++c) {
          reward[c][k] = r[c];
          value[c][k] = v[c];
          mask[c][k] = m[c];
        }
      }
      for (Index c = width - 1; c >= 0; --c) {
        for (Index k = 0; k < Lanes; ++k) {
          const float v = value[c][k], carried_value = next_value[k], carried = last_advantage[k];
          const float delta = (reward[c][k] + discount * carried_value) - v;
          const float candidate = delta + trace_decay * carried;
          // The state only advances on valid tokens.
          const float updated = detail::select_valid(mask[c][k], candidate, carried);
          next_value[k] = detail::select_valid(mask[c][k], v, carried_value);
          last_advantage[k] = updated;
          advantage[c][k] = updated;
          returns[c][k] = updated + v;
        }
      }
      for (Index k = 0; k < Lanes; ++k) {
        float* a = detail::row_of(out.advantages, first + k) + begin;
        float* g = detail::row_of(out.returns(), first + k) + begin;
        for (Index c = 0; c < width; ++c) {
          a[c] = advantage[c][k];
          g[c] = returns[c][k];
        }
      }
      end = begin;
    }
    for (Index k = 0; k < Lanes; ++k)
      batch_sum.add_row(detail::row_of(out.advantages, first + k), detail::row_of(batch.response_mask, first + k));
  }
};

}  // namespace verl::algo
