// Causal scaled-dot-product attention for one head of one sequence, forward and backward, in
// blocks of queries (flash-attention's bookkeeping on the CPU): the forward pass saves only the
// log-sum-exp of each query's scores, and the backward pass recomputes the probabilities from it
// instead of storing (L, L) matrices.
//
// Query i of a call attends to keys [0, key_offset + i]: key_offset = 0 for a whole sequence,
// the number of cached tokens when extending a KV cache. With a sliding window W > 0 it sees only
// the last W of those keys (itself included), as transformers' sliding-window mask does.
#pragma once

#include <Eigen/Core>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "verl/core/tensor.hpp"
#include "verl/cpu/gemm.hpp"
#include "verl/cpu/softmax.hpp"

namespace verl::model::detail {

/// Queries per block: the (block, keys) score tile stays in cache for a few thousand keys.
inline constexpr Index attention_query_block = 64;

template <class S>
using StridedMap = Eigen::Map<RowMatrix<S>, Eigen::Unaligned, Eigen::OuterStride<>>;
template <class S>
using ConstStridedMap = Eigen::Map<const RowMatrix<S>, Eigen::Unaligned, Eigen::OuterStride<>>;

/// Rows of a head: `rows` vectors of `width` values, `stride` apart.
template <class S>
struct HeadRows {
  S* data;
  Index stride;
};
template <class S>
struct ConstHeadRows {
  const S* data;
  Index stride;
};

/// The first key a query sees: `end` keys are causally visible, the last `window` of them with a
/// sliding window (0: all).
inline Index first_visible_key(Index end, Index window) { return window > 0 && end > window ? end - window : 0; }

/// The `visible` raw scores of one query, in place, -> softmax(scale * scores); returns their
/// log-sum-exp. One definition for every attention path, so that they agree bit for bit.
template <class S>
S softmax_scores(S* scores, Index visible, S scale) {
  Eigen::Map<Eigen::Matrix<S, 1, Eigen::Dynamic>> row(scores, visible);
  const S shift = scale * row.maxCoeff();
  const auto sum = static_cast<S>(cpu::exp_shifted_row<S>(scores, visible, scale, shift));
  row /= sum;
  return shift + std::log(sum);
}

/// out = softmax(scale q k^T + causal mask) v for `queries` query rows; lse (if not null) gets
/// the log-sum-exp of each query's scaled scores (lse_stride apart). `window` > 0: sliding-window
/// attention over the last `window` keys. The keys come as k^T (head_dim x keys), in whatever
/// layout holds them: cpu::transpose_of(rows of keys, stride), or a KV cache's transposed keys.
template <class S>
void attention_forward_head(ConstHeadRows<S> q, cpu::Operand<S> keys_transposed, ConstHeadRows<S> v, Index queries, Index key_offset,
                            Index head_dim, S scale, HeadRows<S> out, S* lse, Index lse_stride,
                            std::vector<S>& scratch, Index window = 0) {
  for (Index i0 = 0; i0 < queries; i0 += attention_query_block) {
    const Index rows = std::min(attention_query_block, queries - i0);
    // Keys any query of the block can see: [first, end).
    const Index first = first_visible_key(key_offset + i0 + 1, window), end = key_offset + i0 + rows;
    const Index keys = end - first;
    scratch.resize(static_cast<std::size_t>(rows * keys));
    Eigen::Map<RowMatrix<S>> scores(scratch.data(), rows, keys);
    cpu::gemm<S>(rows, keys, head_dim, cpu::rows_of(q.data + i0 * q.stride, q.stride),
            {keys_transposed.data + first * keys_transposed.col_stride, keys_transposed.row_stride, keys_transposed.col_stride},
            scores.data(), keys, false);
    for (Index r = 0; r < rows; ++r) {
      const Index row_end = key_offset + i0 + r + 1 - first;  // within the block's keys
      const Index row_first = first_visible_key(key_offset + i0 + r + 1, window) - first;
      const Index visible = row_end - row_first;
      const S row_lse = softmax_scores(scores.data() + r * keys + row_first, visible, scale);
      scores.row(r).head(row_first).setZero();
      scores.row(r).tail(keys - row_end).setZero();
      if (lse != nullptr) lse[(i0 + r) * lse_stride] = row_lse;
    }
    cpu::gemm<S>(rows, head_dim, keys, cpu::rows_of(scores.data(), keys), cpu::rows_of(v.data + first * v.stride, v.stride),
            out.data + i0 * out.stride, out.stride, false);
  }
}

/// One query token for each of `heads` heads that share their keys and values (the query heads of
/// one key/value head in a decode step), against `key_count` cached keys (the query's own
/// included): q and out hold one row per head. Each head's result is attention_forward_head's for
/// one query at key_offset = key_count - 1, bit for bit (the same chains of multiply-adds per
/// element and the same softmax), but the group reads the keys and values once, and the heads'
/// chains interleave instead of each waiting on its own.
template <class S>
void attention_decode_heads(ConstHeadRows<S> q, cpu::Operand<S> keys_transposed, ConstHeadRows<S> v, Index heads,
                            Index key_count, Index head_dim, S scale, HeadRows<S> out, std::vector<S>& scratch,
                            Index window = 0) {
  const Index first = first_visible_key(key_count, window), keys = key_count - first;
  scratch.resize(static_cast<std::size_t>(heads * keys));
  cpu::gemm<S>(heads, keys, head_dim, cpu::rows_of(q.data, q.stride),
               {keys_transposed.data + first * keys_transposed.col_stride, keys_transposed.row_stride,
                keys_transposed.col_stride},
               scratch.data(), keys, false);
  for (Index h = 0; h < heads; ++h) softmax_scores(scratch.data() + h * keys, keys, scale);
  cpu::gemm<S>(heads, head_dim, keys, cpu::rows_of(scratch.data(), keys), cpu::rows_of(v.data + first * v.stride, v.stride),
               out.data, out.stride, false);
}

/// Backward of attention_forward_head (key_offset 0, the same window) for one query head: dq =
/// (overwritten), dk and dv accumulate (several query heads share a key/value head).
template <class S>
void attention_backward_head(ConstHeadRows<S> q, ConstHeadRows<S> k, ConstHeadRows<S> v, ConstHeadRows<S> out,
                             ConstHeadRows<S> d_out, const S* lse, Index lse_stride, Index queries, Index head_dim,
                             S scale, HeadRows<S> dq, HeadRows<S> dk, HeadRows<S> dv, std::vector<S>& scratch,
                             Index window = 0) {
  for (Index i0 = 0; i0 < queries; i0 += attention_query_block) {
    const Index rows = std::min(attention_query_block, queries - i0);
    const Index first = first_visible_key(i0 + 1, window);
    const Index keys = i0 + rows - first;
    scratch.resize(static_cast<std::size_t>(2 * rows * keys));
    Eigen::Map<RowMatrix<S>> probs(scratch.data(), rows, keys);
    Eigen::Map<RowMatrix<S>> d_scores(scratch.data() + rows * keys, rows, keys);
    const ConstStridedMap<S> o_block(out.data + i0 * out.stride, rows, head_dim, Eigen::OuterStride<>(out.stride));
    const ConstStridedMap<S> do_block(d_out.data + i0 * d_out.stride, rows, head_dim,
                                      Eigen::OuterStride<>(d_out.stride));
    const auto q_block = cpu::rows_of(q.data + i0 * q.stride, q.stride);
    const auto do_rows = cpu::rows_of(d_out.data + i0 * d_out.stride, d_out.stride);
    const S* k_first = k.data + first * k.stride;
    cpu::gemm<S>(rows, keys, head_dim, q_block, cpu::transpose_of(k_first, k.stride), probs.data(), keys, false);
    cpu::gemm<S>(rows, keys, head_dim, do_rows, cpu::transpose_of(v.data + first * v.stride, v.stride), d_scores.data(), keys,
            false);  // dP
    for (Index r = 0; r < rows; ++r) {
      const Index row_end = i0 + r + 1 - first;
      const Index row_first = first_visible_key(i0 + r + 1, window) - first;
      const Index visible = row_end - row_first;
      cpu::exp_shifted_row<S>(probs.data() + r * keys + row_first, visible, scale, lse[(i0 + r) * lse_stride]);
      const auto p = probs.row(r).segment(row_first, visible).array();
      probs.row(r).head(row_first).setZero();
      probs.row(r).tail(keys - row_end).setZero();
      // dS = P (dP - rowsum(dP P)), and rowsum(dP P) = dO . O.
      const S centre = do_block.row(r).dot(o_block.row(r));
      auto ds = d_scores.row(r).segment(row_first, visible).array();
      ds = p * (ds - centre) * scale;
      d_scores.row(r).head(row_first).setZero();
      d_scores.row(r).tail(keys - row_end).setZero();
    }
    cpu::gemm<S>(rows, head_dim, keys, cpu::rows_of(d_scores.data(), keys), cpu::rows_of(k_first, k.stride), dq.data + i0 * dq.stride,
            dq.stride, false);
    cpu::gemm<S>(keys, head_dim, rows, cpu::transpose_of(d_scores.data(), keys), q_block, dk.data + first * dk.stride, dk.stride,
            true);
    cpu::gemm<S>(keys, head_dim, rows, cpu::transpose_of(probs.data(), keys), do_rows, dv.data + first * dv.stride, dv.stride,
            true);
  }
}

}  // namespace verl::model::detail
