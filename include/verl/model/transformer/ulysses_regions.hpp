// SequenceParallelRegions over a parallel::Communicator (the sequence-parallel group): verl's
// gather_seq_scatter_heads / gather_heads_scatter_seq all-to-alls and an all-gather of per-token
// results (verl's gather_outputs_and_unpad).
#pragma once

#include <span>

#include "verl/core/tensor.hpp"
#include "verl/model/transformer/sequence_parallel_regions.hpp"
#include "verl/parallel/communicator.hpp"
#include "verl/parallel/ulysses.hpp"

namespace verl::model {

template <class Scalar, parallel::Communicator C>
class UlyssesRegions final : public SequenceParallelRegions<Scalar> {
 public:
  /// `group` (the ranks that share one batch) must outlive this object.
  explicit UlyssesRegions(C& group) : group_(&group) {}

  [[nodiscard]] int size() const override { return group_->size(); }
  [[nodiscard]] int rank() const override { return group_->rank(); }

  RowMatrix<Scalar> gather_seq_scatter_heads(const RowMatrix<Scalar>& x, Index heads) override {
    return parallel::gather_seq_scatter_heads<Scalar>(*group_, ConstMatrixRef<Scalar>(x), heads);
  }
  RowMatrix<Scalar> gather_heads_scatter_seq(const RowMatrix<Scalar>& x, Index heads) override {
    return parallel::gather_heads_scatter_seq<Scalar>(*group_, ConstMatrixRef<Scalar>(x), heads);
  }
  RowMatrix<Scalar> all_gather_rows(const RowMatrix<Scalar>& x) override {
    RowMatrix<Scalar> out(x.rows() * group_->size(), x.cols());
    group_->all_gather(std::span<const Scalar>(x.data(), static_cast<std::size_t>(x.size())),
                       std::span<Scalar>(out.data(), static_cast<std::size_t>(out.size())));
    return out;
  }

 private:
  C* group_;
};

}  // namespace verl::model
