// The products of a linear layer y = x W^T + b (torch's nn.Linear, W of shape (out, in)) and of
// its backward pass, on the model's thread pool (gemm.hpp splits the work).
#pragma once

#include <Eigen/Core>

#include <concepts>

#include "verl/core/tensor.hpp"
#include "verl/cpu/gemm.hpp"
#include "verl/cpu/thread_pool.hpp"

namespace verl::model::detail {

template <class S>
using ConstRef = Eigen::Ref<const RowMatrix<S>>;
template <class S>
using MutRef = Eigen::Ref<RowMatrix<S>>;

/// y (M, N) = x (M, K) W^T (+ bias (1, N)).
template <class S>
void linear_forward(cpu::ThreadPool& pool, const ConstRef<S>& x, const RowMatrix<S>& weight, const RowMatrix<S>* bias,
                    MutRef<S> y) {
  cpu::gemm<S>(&pool, x.rows(), weight.rows(), x.cols(), cpu::rows_of(x.data(), x.outerStride()),
          cpu::transpose_of(weight.data(), weight.cols()), y.data(), y.outerStride(), false);
  if (bias != nullptr && bias->size() > 0) y.rowwise() += bias->row(0);
}

/// The same with W also given packed (decoding); an empty or null `packed` is ignored.
template <class S>
void linear_forward(cpu::ThreadPool& pool, const ConstRef<S>& x, const RowMatrix<S>& weight, const RowMatrix<S>* bias,
                    MutRef<S> y, const cpu::PackedMatrix* packed) {
  if constexpr (std::same_as<S, float>) {
    if (packed != nullptr && !packed->empty()) {
      cpu::gemm(&pool, x.rows(), weight.rows(), x.cols(), cpu::rows_of(x.data(), x.outerStride()),
           cpu::transpose_of(weight.data(), weight.cols()), *packed, y.data(), y.outerStride(), false);
      if (bias != nullptr && bias->size() > 0) y.rowwise() += bias->row(0);
      return;
    }
  }
  linear_forward<S>(pool, x, weight, bias, y);
}

/// dx (M, K) (+)= dy (M, N) W.
template <class S>
void linear_backward_input(cpu::ThreadPool& pool, const ConstRef<S>& dy, const RowMatrix<S>& weight, MutRef<S> dx,
                           bool accumulate) {
  cpu::gemm<S>(&pool, dy.rows(), weight.cols(), weight.rows(), cpu::rows_of(dy.data(), dy.outerStride()),
          cpu::rows_of(weight.data(), weight.cols()), dx.data(), dx.outerStride(), accumulate);
}

/// dW (N, K) += dy (M, N)^T x (M, K) and dbias (1, N) += column sums of dy; nothing when dW is
/// empty (frozen).
template <class S>
void linear_backward_weight(cpu::ThreadPool& pool, const ConstRef<S>& dy, const ConstRef<S>& x, RowMatrix<S>& weight_grad,
                            RowMatrix<S>* bias_grad) {
  if (weight_grad.size() == 0) return;  // a frozen weight (and its bias) takes no gradient
  cpu::gemm<S>(&pool, weight_grad.rows(), x.cols(), dy.rows(), cpu::transpose_of(dy.data(), dy.outerStride()),
          cpu::rows_of(x.data(), x.outerStride()), weight_grad.data(), weight_grad.cols(), true);
  if (bias_grad != nullptr && bias_grad->size() > 0) bias_grad->row(0) += dy.colwise().sum();
}

}  // namespace verl::model::detail
