// Megatron tensor parallelism on host matrices: the conjugate region operators (f: identity
// forward / all-reduce backward, g: all-reduce forward / identity backward, and the gather /
// split pair along the last dimension) and the column- and row-parallel linear layers built from
// them, forward and backward. A linear layer computes y = x W^T + b with torch's W [out, in].
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "verl/core/error.hpp"
#include "verl/core/tensor.hpp"
#include "verl/parallel/communicator.hpp"

namespace verl::parallel {

namespace detail {

/// Columns [rank * n/size, (rank+1) * n/size) of a row-major matrix.
inline MatrixF own_column_block(ConstMatrixRefF x, int rank, int size, std::string_view argument) {
  VERL_CHECK_ARG(x.cols() % size == 0, "{}: expected a last dimension divisible by the tensor-parallel size {}, got {}",
                 argument, size, x.cols());
  const Index width = x.cols() / size;
  return x.middleCols(rank * width, width);
}

}  // namespace detail

// ---- region operators ---------------------------------------------------------------------------
/// All-reduce (sum) of a matrix over the group, in place.
template <Communicator C>
void all_reduce_sum(C& tp, MatrixF& x) {
  tp.all_reduce(std::span<float>(x.data(), static_cast<std::size_t>(x.size())), ReduceOp::sum);
}

/// Concatenates every rank's [rows, n] matrix along the last dimension: [rows, size * n].
template <Communicator C>
MatrixF all_gather_last_dim(C& tp, ConstMatrixRefF x) {
  const MatrixF local = x;  // contiguous send buffer
  MatrixF blocks(x.rows() * tp.size(), x.cols());  // rank-major stack of the blocks
  tp.all_gather(std::span<const float>(local.data(), static_cast<std::size_t>(local.size())),
                std::span<float>(blocks.data(), static_cast<std::size_t>(blocks.size())));
  MatrixF out(x.rows(), x.cols() * tp.size());
  for (int r = 0; r < tp.size(); ++r) out.middleCols(r * x.cols(), x.cols()) = blocks.middleRows(r * x.rows(), x.rows());
  return out;
}

/// f = copy_to_tensor_parallel_region: the input of a column-parallel layer.
struct CopyToTensorParallelRegion {
  static MatrixF forward(ConstMatrixRefF x) { return x; }
  template <Communicator C>
  static MatrixF backward(C& tp, ConstMatrixRefF grad) {
    MatrixF g = grad;
    all_reduce_sum(tp, g);
    return g;
  }
};

/// g = reduce_from_tensor_parallel_region: the output of a row-parallel layer.
struct ReduceFromTensorParallelRegion {
  template <Communicator C>
  static MatrixF forward(C& tp, ConstMatrixRefF x) {
    MatrixF y = x;
    all_reduce_sum(tp, y);
    return y;
  }
  static MatrixF backward(ConstMatrixRefF grad) { return grad; }
};

/// gather_from_tensor_parallel_region: concatenate the last dimension; backward keeps this
/// rank's block.
struct GatherFromTensorParallelRegion {
  template <Communicator C>
  static MatrixF forward(C& tp, ConstMatrixRefF x) {
    return all_gather_last_dim(tp, x);
  }
  template <Communicator C>
  static MatrixF backward(C& tp, ConstMatrixRefF grad) {
    return detail::own_column_block(grad, tp.rank(), tp.size(), "grad");
  }
};

/// scatter_to_tensor_parallel_region: keep this rank's block of the last dimension; backward
/// concatenates.
struct ScatterToTensorParallelRegion {
  template <Communicator C>
  static MatrixF forward(C& tp, ConstMatrixRefF x) {
    return detail::own_column_block(x, tp.rank(), tp.size(), "x");
  }
  template <Communicator C>
  static MatrixF backward(C& tp, ConstMatrixRefF grad) {
    return all_gather_last_dim(tp, grad);
  }
};

/// Gradients of a linear layer with respect to its input and this rank's parameters.
struct LinearGrads {
  MatrixF input;
  MatrixF weight;
  VectorF bias;  ///< empty without a bias
};

// ---- layers ---------------------------------------------------------------------------------------
/// Y = X W^T + b with W split by rows (output features): rank r holds W[r*out/t : (r+1)*out/t]
/// and that slice of b. The input is replicated (f); the output stays split unless
/// gather_output.
class ColumnParallelLinear {
 public:
  ColumnParallelLinear(MatrixF weight_shard, VectorF bias_shard, bool gather_output)
      : weight_(std::move(weight_shard)), bias_(std::move(bias_shard)), gather_output_(gather_output) {
    VERL_CHECK_ARG(bias_.size() == 0 || bias_.size() == weight_.rows(),
                   "bias_shard: expected length {} (the weight shard's rows) or 0, got {}", weight_.rows(), bias_.size());
  }
  /// This rank's shard of a full layer.
  static ColumnParallelLinear shard_of(ConstMatrixRefF weight, const VectorF& bias, int rank, int size,
                                       bool gather_output) {
    VERL_CHECK_ARG(weight.rows() % size == 0, "weight: expected rows divisible by the tensor-parallel size {}, got {}",
                   size, weight.rows());
    const Index rows = weight.rows() / size;
    VectorF b = bias.size() ? VectorF(bias.segment(rank * rows, rows)) : VectorF();
    return {weight.middleRows(rank * rows, rows), std::move(b), gather_output};
  }

  const MatrixF& weight() const noexcept { return weight_; }
  const VectorF& bias() const noexcept { return bias_; }

  template <Communicator C>
  MatrixF forward(C& tp, ConstMatrixRefF x) const {
    check_input(x);
    MatrixF y = x * weight_.transpose();  // f is the identity forward: no copy of x
    if (bias_.size()) y.rowwise() += bias_.transpose();
    return gather_output_ ? GatherFromTensorParallelRegion::forward(tp, y) : y;
  }

  /// `grad_output` has the forward output's shape ([B, out] when gathered, else [B, out/t]).
  template <Communicator C>
  LinearGrads backward(C& tp, ConstMatrixRefF x, ConstMatrixRefF grad_output) const {
    check_input(x);
    const Index out = gather_output_ ? weight_.rows() * tp.size() : weight_.rows();
    ::verl::detail::require_shape("grad_output", shape_of(grad_output), {x.rows(), out});
    const MatrixF dy = gather_output_ ? GatherFromTensorParallelRegion::backward(tp, grad_output) : MatrixF(grad_output);
    LinearGrads grads;
    grads.weight = dy.transpose() * x;
    if (bias_.size()) grads.bias = dy.colwise().sum().transpose();
    grads.input = CopyToTensorParallelRegion::backward(tp, dy * weight_);
    return grads;
  }

 private:
  void check_input(ConstMatrixRefF x) const {
    VERL_CHECK_ARG(x.cols() == weight_.cols(), "x: expected {} input features, got {}", weight_.cols(), x.cols());
  }
  MatrixF weight_;
  VectorF bias_;
  bool gather_output_;
};

/// Y = X W^T + b with W split by columns (input features): rank r holds W[:, r*in/t : ...].
/// The input arrives split (or is split here unless input_is_parallel); partial products are
/// summed (g) and the full bias is added once after the reduction.
class RowParallelLinear {
 public:
  RowParallelLinear(MatrixF weight_shard, VectorF bias, bool input_is_parallel)
      : weight_(std::move(weight_shard)), bias_(std::move(bias)), input_is_parallel_(input_is_parallel) {
    VERL_CHECK_ARG(bias_.size() == 0 || bias_.size() == weight_.rows(),
                   "bias: expected length {} (the output features) or 0, got {}", weight_.rows(), bias_.size());
  }
  static RowParallelLinear shard_of(ConstMatrixRefF weight, const VectorF& bias, int rank, int size,
                                    bool input_is_parallel) {
    return {detail::own_column_block(weight, rank, size, "weight"), bias, input_is_parallel};
  }

  const MatrixF& weight() const noexcept { return weight_; }
  const VectorF& bias() const noexcept { return bias_; }

  template <Communicator C>
  MatrixF forward(C& tp, ConstMatrixRefF x) const {
    const MatrixF x_shard = local_input(tp, x);
    MatrixF y = ReduceFromTensorParallelRegion::forward(tp, x_shard * weight_.transpose());
    if (bias_.size()) y.rowwise() += bias_.transpose();
    return y;
  }

  /// The input gradient has the input's shape (split when input_is_parallel); the bias
  /// gradient is the same on every rank (the bias is replicated).
  template <Communicator C>
  LinearGrads backward(C& tp, ConstMatrixRefF x, ConstMatrixRefF grad_output) const {
    const MatrixF x_shard = local_input(tp, x);
    ::verl::detail::require_shape("grad_output", shape_of(grad_output), {x.rows(), weight_.rows()});
    const MatrixF dy = ReduceFromTensorParallelRegion::backward(grad_output);
    LinearGrads grads;
    grads.weight = dy.transpose() * x_shard;
    if (bias_.size()) grads.bias = dy.colwise().sum().transpose();
    MatrixF dx = dy * weight_;
    grads.input = input_is_parallel_ ? dx : ScatterToTensorParallelRegion::backward(tp, dx);
    return grads;
  }

 private:
  template <Communicator C>
  MatrixF local_input(C& tp, ConstMatrixRefF x) const {
    const Index expected = input_is_parallel_ ? weight_.cols() : weight_.cols() * tp.size();
    VERL_CHECK_ARG(x.cols() == expected, "x: expected {} input features{}, got {}", expected,
                   input_is_parallel_ ? " (this rank's split)" : "", x.cols());
    return input_is_parallel_ ? MatrixF(x) : ScatterToTensorParallelRegion::forward(tp, x);
  }
  MatrixF weight_;
  VectorF bias_;
  bool input_is_parallel_;
};

}  // namespace verl::parallel
