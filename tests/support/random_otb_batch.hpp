// Random inputs of the optimal-token-baseline tests, shared by the host test (tests/unit) and the
// CUDA test (tests/cuda): mixed group sizes (groups of one included), contiguous or shuffled ids,
// masks with fully masked rows, single tokens, ties for the longest and (multi-turn) observation
// holes, and rollout-like log-probs, sum pi^2 and IS weights.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "verl/algo/advantages/estimator.hpp"
#include "verl/core/tensor.hpp"

namespace verl::test {

struct OtbBatch {
  MatrixF rewards, mask, old_log_probs, sum_pi_squared, is_weights;
  std::vector<std::int64_t> ids;
};

/// Group ids in runs of `sizes` (cycled; groups of one included); `shuffle` scatters the groups
/// over the batch.
inline std::vector<std::int64_t> group_ids(Index rows, std::mt19937& rng, bool shuffle, const std::vector<Index>& sizes) {
  std::vector<std::int64_t> ids;
  std::int64_t id = -3;
  for (std::size_t s = 0; static_cast<Index>(ids.size()) < rows; ++s) {
    for (Index j = 0; j < sizes[s % sizes.size()] && static_cast<Index>(ids.size()) < rows; ++j)
      ids.push_back(id * 1000003);
    id += 1 + static_cast<std::int64_t>(rng() % 4);
  }
  if (shuffle) std::shuffle(ids.begin(), ids.end(), rng);
  return ids;
}

/// Left-aligned responses, with masked observation spans inside them when `holes` (multi-turn);
/// every 6th row fully masked, single tokens, and full-length rows that tie for the longest.
inline MatrixF response_mask(Index rows, Index cols, std::mt19937& rng, bool holes) {
  MatrixF m = MatrixF::Zero(rows, cols);
  std::uniform_int_distribution<Index> length(0, cols);
  std::bernoulli_distribution hole(0.15);
  for (Index i = 0; i < rows; ++i) {
    Index n = length(rng);
    if (i % 6 == 0) n = 0;
    if (i % 6 == 1) n = std::min<Index>(cols, 1);
    if (i % 12 == 2 || i % 12 == 3) n = cols;
    for (Index j = 0; j < n; ++j) m(i, j) = (holes && j > 0 && hole(rng)) ? 0.0f : 1.0f;
  }
  return m;
}

/// Log-probabilities of p in (0.01, 1), sum pi^2 in [p^2, 1], IS weights in [0.5, 2], dense
/// token rewards on some tokens plus an outcome score at each row's last valid token.
inline OtbBatch random_otb_batch(Index rows, Index cols, std::uint32_t seed, bool holes, bool shuffle,
                      const std::vector<Index>& sizes) {
  std::mt19937 rng(seed);
  OtbBatch b;
  b.mask = response_mask(rows, cols, rng, holes);
  b.ids = group_ids(rows, rng, shuffle, sizes);
  std::uniform_real_distribution<float> prob(0.01f, 1.0f), unit(0.0f, 1.0f), weight(0.5f, 2.0f);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::bernoulli_distribution dense(0.3);
  b.rewards = MatrixF::Zero(rows, cols);
  b.old_log_probs.resize(rows, cols);
  b.sum_pi_squared.resize(rows, cols);
  b.is_weights.resize(rows, cols);
  for (Index i = 0; i < rows; ++i) {
    Index last = -1;
    for (Index j = 0; j < cols; ++j) {
      const float p = prob(rng);
      b.old_log_probs(i, j) = std::log(p);
      b.sum_pi_squared(i, j) = p * p + unit(rng) * (1.0f - p * p) * 0.5f;
      b.is_weights(i, j) = weight(rng);
      if (dense(rng)) b.rewards(i, j) = 0.1f * normal(rng);
      if (b.mask(i, j) != 0.0f) last = j;
    }
    if (last >= 0) b.rewards(i, last) += normal(rng);
  }
  return b;
}

inline verl::algo::AdvantageBatch algo_batch(const OtbBatch& b, bool with_is) {
  verl::algo::AdvantageBatch batch{b.rewards, b.mask, b.ids};
  batch.old_log_probs.emplace(b.old_log_probs);
  batch.sum_pi_squared.emplace(b.sum_pi_squared);
  if (with_is) batch.rollout_is_weights.emplace(b.is_weights);
  return batch;
}

}  // namespace verl::test
