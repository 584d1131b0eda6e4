// A hook through which a DecoderBody holding one tensor-parallel rank's shard (Megatron's layout:
// column-parallel q/k/v and gate/up, row-parallel o_proj and down_proj, a vocabulary-parallel
// embedding) joins the other ranks of its group. The body stays free of any communicator type:
// TensorParallelTransformer implements this over a parallel::Communicator.
#pragma once

#include "verl/core/tensor.hpp"

namespace verl::model {

template <class Scalar>
class TensorParallelRegions {
 public:
  virtual ~TensorParallelRegions() = default;

  /// Sums `partial` over the ranks, in place. The body calls it on the outputs of the row-parallel
  /// layers and of the embedding before the residual add (Megatron's g), and on the input
  /// gradients of the column-parallel layers before the norms' backward (f's backward); every
  /// rank calls it in the same order.
  virtual void all_reduce_sum(RowMatrix<Scalar>& partial) = 0;

  /// Megatron's sequence parallelism (the body's set_megatron_sequence_parallel): outside the
  /// tensor-parallel regions each rank holds a contiguous 1/size slice of the (padded) tokens.
  [[nodiscard]] virtual int size() const = 0;
  [[nodiscard]] virtual int rank() const = 0;
  /// (size * rows, cols) partial sums -> (rows, cols): this rank's block of rows of their sum over
  /// the ranks (the all-reduce after a row-parallel layer, keeping only this rank's tokens).
  virtual void reduce_scatter_rows(const RowMatrix<Scalar>& partial, RowMatrix<Scalar>& slice) = 0;
  /// (rows, cols) -> (size * rows, cols): every rank's block stacked in rank order (before a
  /// column-parallel layer, whose input is every token).
  virtual void all_gather_rows(const RowMatrix<Scalar>& slice, RowMatrix<Scalar>& whole) = 0;

  /// The token id of this rank's first embedding row (its rows are [vocab_begin, vocab_begin + rows)).
  [[nodiscard]] virtual Index vocab_begin() const = 0;
  /// The whole vocabulary (token ids are checked against it).
  [[nodiscard]] virtual Index vocab_size() const = 0;
};

}  // namespace verl::model
