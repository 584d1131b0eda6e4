// A hook through which a DecoderBody runs under Ulysses sequence parallelism (verl's
// ulysses_sequence_parallel_size, DeepSpeed-Ulysses): every rank of the group is given the same
// batch; the packed (padding-removed) tokens, padded to a multiple of the group size as verl's
// ulysses_pad does, are cut into one contiguous slice per rank. Outside attention a rank computes
// only its slice; around attention an all-to-all switches to every token x 1/size of the heads,
// so that each sequence's causal attention sees all of its tokens. The body stays free of any
// communicator type: UlyssesRegions (ulysses_regions.hpp) implements this over a
// parallel::Communicator, and a test may implement it in process.
#pragma once

#include "verl/core/tensor.hpp"

namespace verl::model {

template <class Scalar>
class SequenceParallelRegions {
 public:
  virtual ~SequenceParallelRegions() = default;

  [[nodiscard]] virtual int size() const = 0;
  [[nodiscard]] virtual int rank() const = 0;

  /// (tokens / size, heads * head_dim): this rank's tokens, every head ->
  /// (tokens, heads / size * head_dim): every token, this rank's contiguous group of heads.
  virtual RowMatrix<Scalar> gather_seq_scatter_heads(const RowMatrix<Scalar>& x, Index heads) = 0;
  /// The inverse of gather_seq_scatter_heads.
  virtual RowMatrix<Scalar> gather_heads_scatter_seq(const RowMatrix<Scalar>& x, Index heads) = 0;
  /// Every rank's (rows, cols) block stacked in rank order: (rows * size, cols).
  virtual RowMatrix<Scalar> all_gather_rows(const RowMatrix<Scalar>& x) = 0;
};

}  // namespace verl::model
