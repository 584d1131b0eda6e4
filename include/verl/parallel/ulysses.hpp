// DeepSpeed-Ulysses sequence parallelism, as verl uses it with padding removed: activations of
// one packed sequence are [tokens, heads * head_dim] row-major. Outside attention each rank
// holds a contiguous chunk of the tokens and every head; inside attention it holds every token
// and a contiguous group of heads. One all-to-all switches between the two (verl's
// gather_seq_scatter_heads / gather_heads_scatter_seq).
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "verl/core/error.hpp"
#include "verl/core/tensor.hpp"
#include "verl/parallel/communicator.hpp"

namespace verl::parallel {

namespace detail {

inline void check_ulysses_heads(std::string_view argument, Index cols, std::int64_t num_heads, int sp) {
  VERL_CHECK_ARG(num_heads > 0 && num_heads % sp == 0,
                 "num_heads: expected a positive multiple of the sequence-parallel size {}, got {}", sp, num_heads);
  VERL_CHECK_ARG(cols % num_heads == 0, "{}: expected columns divisible by num_heads {} (heads * head_dim), got {}",
                 argument, num_heads, cols);
}

}  // namespace detail

/// [tokens/sp, heads * head_dim] (this rank's tokens, all heads) ->
/// [tokens, heads/sp * head_dim] (all tokens, this rank's heads).
template <CommElement T, Communicator C>
RowMatrix<T> gather_seq_scatter_heads(C& sp, const ConstMatrixRef<T>& x, std::int64_t num_heads) {
  const int n = sp.size();
  detail::check_ulysses_heads("x", x.cols(), num_heads, n);
  const Index local_tokens = x.rows();
  const Index width = x.cols() / n;  // (heads / sp) * head_dim
  // Send block j = this rank's tokens x the heads of rank j, packed contiguously.
  std::vector<T> send(static_cast<std::size_t>(x.size()));
  for (int j = 0; j < n; ++j) {
    T* block = send.data() + static_cast<std::ptrdiff_t>(j) * local_tokens * width;
    for (Index t = 0; t < local_tokens; ++t) {
      const auto row = x.row(t).segment(j * width, width);
      std::copy(row.data(), row.data() + width, block + t * width);
    }
  }
  // Block i received = rank i's tokens x this rank's heads: rows [i * local, (i+1) * local).
  RowMatrix<T> out(local_tokens * n, width);
  sp.all_to_all(std::span<const T>(send), std::span<T>(out.data(), static_cast<std::size_t>(out.size())));
  return out;
}

/// The inverse: [tokens, heads/sp * head_dim] -> [tokens/sp, heads * head_dim].
template <CommElement T, Communicator C>
RowMatrix<T> gather_heads_scatter_seq(C& sp, const ConstMatrixRef<T>& x, std::int64_t num_heads) {
  const int n = sp.size();
  VERL_CHECK_ARG(num_heads > 0 && num_heads % n == 0,
                 "num_heads: expected a positive multiple of the sequence-parallel size {}, got {}", n, num_heads);
  VERL_CHECK_ARG(x.cols() % (num_heads / n) == 0,
                 "x: expected columns divisible by this rank's {} heads (heads/sp * head_dim), got {}", num_heads / n,
                 x.cols());
  VERL_CHECK_ARG(x.rows() % n == 0, "x: expected tokens divisible by the sequence-parallel size {}, got {}", n, x.rows());
  const Index local_tokens = x.rows() / n;
  const Index width = x.cols();
  // Send block j = the tokens of rank j x this rank's heads: contiguous rows of a row-major x.
  const T* rows = x.data();
  RowMatrix<T> packed;
  if (x.outerStride() != x.cols()) {  // a block of a wider matrix: pack it first
    packed = x;
    rows = packed.data();
  }
  std::vector<T> recv(static_cast<std::size_t>(x.size()));
  sp.all_to_all(std::span<const T>(rows, static_cast<std::size_t>(x.size())), std::span<T>(recv));
  // Block i received = this rank's tokens x the heads of rank i: columns [i * width, ...).
  RowMatrix<T> out(local_tokens, width * n);
  for (int i = 0; i < n; ++i) {
    const T* block = recv.data() + static_cast<std::ptrdiff_t>(i) * local_tokens * width;
    for (Index t = 0; t < local_tokens; ++t) std::copy(block + t * width, block + (t + 1) * width, &out(t, i * width));
  }
  return out;
}

}  // namespace verl::parallel
