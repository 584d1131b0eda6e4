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

  /// The token id of this rank's first embedding row (its rows are [vocab_begin, vocab_begin + rows)).
  [[nodiscard]] virtual Index vocab_begin() const = 0;
  /// The whole vocabulary (token ids are checked against it).
  [[nodiscard]] virtual Index vocab_size() const = 0;
};

}  // namespace verl::model
