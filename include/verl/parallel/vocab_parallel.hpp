// Log-probabilities and entropy of softmax(logits / T) when each tensor-parallel rank holds only a
// slice of the vocabulary's logits (verl's vocab_parallel_log_probs_from_logits and
// vocab_parallel_entropy, Megatron's vocab-parallel cross entropy): the logits are never
// gathered. Per row, one all-reduce (max) of the shard maxima and one all-reduce (sum) of four
// partial sums, sum e^(x - m), the target's x, sum e^(x - m) x and sum e^(2 (x - m)), give
//   log p[target] = x[target] - lse,  H = lse - sum p x,  sum p^2,  with lse = m + log sum e^(x - m).
// The backward pass needs no communication: each rank writes the gradient of its own columns.
// Exponentials are taken in the logits' scalar by the SIMD softmax kernel (cpu/softmax.hpp); the
// partial sums are accumulated in double (float only within blocks of 1024 columns) and reduced
// in double. Rows run in parallel on an optional pool.
#pragma once

#include <Eigen/Core>

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "verl/core/error.hpp"
#include "verl/core/tensor.hpp"
#include "verl/cpu/softmax.hpp"
#include "verl/cpu/thread_pool.hpp"
#include "verl/parallel/communicator.hpp"

namespace verl::parallel {

/// What the backward pass needs per row: lse = logsumexp(logits / T) over the whole vocabulary,
/// and the entropy.
template <class Scalar>
struct VocabParallelStatistics {
  Vector<Scalar> log_normalizer;
  Vector<Scalar> entropy;
};

/// Where the per-row results go; each span is empty (not wanted) or has one value per row.
template <class Scalar>
struct VocabParallelOutputs {
  std::span<Scalar> log_probs = {};  ///< needs labels
  std::span<Scalar> entropy = {};
  std::span<Scalar> sum_pi_squared = {};
};

namespace detail {

inline void require_vocab_shard(Index rows, std::span<const std::int64_t> labels, Index vocab_begin, Index vocab_size) {
  VERL_CHECK_ARG(labels.empty() || static_cast<Index>(labels.size()) == rows,
                 "labels: expected {} values (one per row) or none, got {}", rows, labels.size());
  for (std::size_t r = 0; r < labels.size(); ++r) {
    VERL_CHECK_ARG(labels[r] >= 0 && labels[r] < vocab_size, "labels: expected ids in [0, {}) (vocab_size), got {} at row {}",
                   vocab_size, labels[r], r);
  }
  VERL_CHECK_ARG(vocab_begin >= 0, "vocab_begin: expected a value >= 0, got {}", vocab_begin);
}

/// body(r) for every row, in blocks of rows on `pool` when given.
template <class Body>
void for_each_row(cpu::ThreadPool* pool, Index rows, const Body& body) {
  if (pool == nullptr || pool->size() == 1 || rows < 2) {
    for (Index r = 0; r < rows; ++r) body(r);
    return;
  }
  const Index blocks = std::min<Index>(rows, static_cast<Index>(pool->size()) * 4);
  pool->parallel_for(blocks, [&](Index b) {
    for (Index r = rows * b / blocks; r < rows * (b + 1) / blocks; ++r) body(r);
  });
}

template <class Scalar>
void require_outputs(const VocabParallelOutputs<Scalar>& out, Index rows, bool has_labels) {
  auto check = [&](std::span<Scalar> values, std::string_view argument) {
    VERL_CHECK_ARG(values.empty() || static_cast<Index>(values.size()) == rows,
                   "{}: expected {} values (one per row) or none, got {}", argument, rows, values.size());
  };
  check(out.log_probs, "outputs.log_probs");
  check(out.entropy, "outputs.entropy");
  check(out.sum_pi_squared, "outputs.sum_pi_squared");
  VERL_CHECK_ARG(out.log_probs.empty() || has_labels, "outputs.log_probs: log-probs need labels, got none");
}

}  // namespace detail

/// `logits` (rows, this rank's columns) are the columns [vocab_begin, vocab_begin + cols) of the
/// (rows, vocab_size) logits; every rank of `tp` calls this with the same rows and labels, and the
/// shards tile the vocabulary. Collective. Returns what vocab_parallel_logprob_entropy_backward
/// needs.
template <class Scalar, Communicator C>
VocabParallelStatistics<Scalar> vocab_parallel_logprob_entropy(C& tp, const Eigen::Ref<const RowMatrix<Scalar>>& logits,
                                                               Index vocab_begin, Index vocab_size,
                                                               std::span<const std::int64_t> labels, float temperature,
                                                               const VocabParallelOutputs<Scalar>& out,
                                                               cpu::ThreadPool* pool = nullptr) {
  const Index rows = logits.rows(), cols = logits.cols();
  detail::require_vocab_shard(rows, labels, vocab_begin, vocab_size);
  detail::require_outputs(out, rows, !labels.empty());
  VERL_CHECK_ARG(vocab_begin + cols <= vocab_size, "logits: expected at most {} columns (vocab_size - vocab_begin), got {}",
                 vocab_size - vocab_begin, cols);
  VERL_CHECK_ARG(std::isfinite(temperature) && temperature > 0, "temperature: expected a finite value > 0, got {}",
                 temperature);
  const auto t = static_cast<Scalar>(temperature);

  std::vector<double> max(static_cast<std::size_t>(rows), -std::numeric_limits<double>::infinity());
  for (Index r = 0; r < rows; ++r) {
    if (cols > 0) max[static_cast<std::size_t>(r)] = static_cast<double>(logits.row(r).maxCoeff() / t);
  }
  tp.all_reduce(std::span<double>(max), ReduceOp::max);

  // Per row: sum e^(x - m), x[target] (0 off this shard), sum e^(x - m) x, sum e^(2 (x - m)).
  constexpr std::size_t kSums = 4;
  std::vector<double> sums(static_cast<std::size_t>(rows) * kSums, 0.0);
  detail::for_each_row(pool, rows, [&](Index r) {
    const auto m = static_cast<Scalar>(max[static_cast<std::size_t>(r)]);
    double* s = sums.data() + static_cast<std::size_t>(r) * kSums;
    if (cols > 0) {
      thread_local std::vector<Scalar> exponentials;
      const Scalar* x = logits.row(r).data();
      exponentials.assign(x, x + cols);
      if constexpr (std::same_as<Scalar, float>) {
        s[0] = cpu::exp_shifted_row_double_sum(exponentials.data(), cols, Scalar(1) / t, m);
      } else {
        s[0] = cpu::exp_shifted_row<Scalar>(exponentials.data(), cols, Scalar(1) / t, m);
      }
      constexpr Index block = 1024;
      double e_dot_x = 0;
      for (Index j = 0; j < cols; j += block) {
        const Index n = std::min(block, cols - j);
        const Eigen::Map<const Vector<Scalar>> e(exponentials.data() + j, n), xs(x + j, n);
        e_dot_x += static_cast<double>(e.dot(xs));
        s[3] += static_cast<double>(e.squaredNorm());
      }
      s[2] = e_dot_x / static_cast<double>(t);
    }
    if (!labels.empty()) {
      const Index local = labels[static_cast<std::size_t>(r)] - vocab_begin;
      if (local >= 0 && local < cols) s[1] = static_cast<double>(logits(r, local) / t);
    }
  });
  tp.all_reduce(std::span<double>(sums), ReduceOp::sum);

  VocabParallelStatistics<Scalar> stats;
  stats.log_normalizer.resize(rows);
  stats.entropy.resize(rows);
  for (Index r = 0; r < rows; ++r) {
    const auto at = static_cast<std::size_t>(r);
    const double* s = sums.data() + at * kSums;
    const double lse = max[at] + std::log(s[0]);
    const double entropy = lse - s[2] / s[0];
    stats.log_normalizer[r] = static_cast<Scalar>(lse);
    stats.entropy[r] = static_cast<Scalar>(entropy);
    if (!out.log_probs.empty()) out.log_probs[at] = static_cast<Scalar>(s[1] - lse);
    if (!out.entropy.empty()) out.entropy[at] = static_cast<Scalar>(entropy);
    if (!out.sum_pi_squared.empty()) out.sum_pi_squared[at] = static_cast<Scalar>(s[3] / (s[0] * s[0]));
  }
  return stats;
}

/// Overwrites this rank's logits shard with d(loss)/d(logits) for the cotangents of the
/// log-probs and the entropy (each empty = zero, else one per row):
///   d x_j = (g_lp ([j = target] - p_j) - g_H p_j (log p_j + H)) / T.
/// Local: no communication.
template <class Scalar>
void vocab_parallel_logprob_entropy_backward(Eigen::Ref<RowMatrix<Scalar>> logits, Index vocab_begin,
                                             std::span<const std::int64_t> labels,
                                             const VocabParallelStatistics<Scalar>& stats,
                                             std::span<const Scalar> grad_log_probs,
                                             std::span<const Scalar> grad_entropy, float temperature,
                                             cpu::ThreadPool* pool = nullptr) {
  const Index rows = logits.rows(), cols = logits.cols();
  VERL_CHECK_ARG(stats.log_normalizer.size() == rows && stats.entropy.size() == rows,
                 "stats: expected statistics of {} rows, got {}", rows, stats.log_normalizer.size());
  VERL_CHECK_ARG(grad_log_probs.empty() || static_cast<Index>(grad_log_probs.size()) == rows,
                 "grad_log_probs: expected {} values (one per row) or none, got {}", rows, grad_log_probs.size());
  VERL_CHECK_ARG(grad_entropy.empty() || static_cast<Index>(grad_entropy.size()) == rows,
                 "grad_entropy: expected {} values (one per row) or none, got {}", rows, grad_entropy.size());
  VERL_CHECK_ARG(grad_log_probs.empty() || static_cast<Index>(labels.size()) == rows,
                 "labels: expected {} values (one per row) with grad_log_probs, got {}", rows, labels.size());
  const auto t = static_cast<Scalar>(temperature);
  detail::for_each_row(pool, rows, [&](Index r) {
    const auto at = static_cast<std::size_t>(r);
    const Scalar g_lp = grad_log_probs.empty() ? Scalar(0) : grad_log_probs[at];
    const Scalar g_h = grad_entropy.empty() ? Scalar(0) : grad_entropy[at];
    // p_j = exp(x_j / T - lse) by the SIMD kernel, then one vectorized pass with log p_j recomputed.
    thread_local std::vector<Scalar> probabilities;
    auto row = logits.row(r).array();
    probabilities.assign(row.data(), row.data() + cols);
    cpu::exp_shifted_row<Scalar>(probabilities.data(), cols, Scalar(1) / t, stats.log_normalizer[r]);
    const Eigen::Map<const Eigen::Array<Scalar, 1, Eigen::Dynamic>> p(probabilities.data(), cols);
    const Scalar shift = stats.entropy[r] - stats.log_normalizer[r];  // log p_j + H = x_j / T + shift
    row = p * (-g_lp - g_h * (row / t + shift)) / t;
    if (g_lp != Scalar(0)) {
      const Index local = labels[at] - vocab_begin;
      if (local >= 0 && local < cols) row[local] += g_lp / t;
    }
  });
}

}  // namespace verl::parallel
