// The products of a linear layer y = x W^T + b (torch's nn.Linear, W of shape (out, in)) and of
// its backward pass, split into fixed blocks that run on the thread pool. Block sizes depend only
// on the shapes, so results do not depend on the number of threads.
#pragma once

#include <Eigen/Core>

#include <algorithm>

#include "verl/core/tensor.hpp"
#include "verl/model/transformer/detail/thread_pool.hpp"

namespace verl::model::detail {

/// Rows (or weight rows) per task: large enough that Eigen's packing of the other operand is
/// amortized, small enough to spread a few hundred tokens over the cores.
inline constexpr Index linear_block = 128;
/// Below this many multiply-adds a product runs as one task (waking threads costs more).
inline constexpr double linear_parallel_min_flops = 1 << 18;

template <class S>
using ConstRef = Eigen::Ref<const RowMatrix<S>>;
template <class S>
using MutRef = Eigen::Ref<RowMatrix<S>>;

inline Index block_count(Index n, Index block) { return (n + block - 1) / block; }

/// y (M, N) = x (M, K) W^T (+ bias (1, N)). With many rows the split is over rows of x, else over
/// rows of W (output columns), so that a decode step with few tokens still uses every core.
template <class S>
void linear_forward(ThreadPool& pool, const ConstRef<S>& x, const RowMatrix<S>& weight, const RowMatrix<S>* bias,
                    MutRef<S> y) {
  const Index m = x.rows(), n = weight.rows();
  auto finish_rows = [&](Index r0, Index rows, Index c0, Index cols) {
    auto out = y.block(r0, c0, rows, cols);
    out.noalias() = x.middleRows(r0, rows) * weight.middleRows(c0, cols).transpose();
    if (bias != nullptr && bias->size() > 0) out.rowwise() += bias->row(0).segment(c0, cols);
  };
  const double flops = static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(x.cols());
  if (flops < linear_parallel_min_flops) {
    finish_rows(0, m, 0, n);
  } else if (m >= 2 * linear_block) {
    pool.parallel_for(block_count(m, linear_block), [&](Index b) {
      const Index r0 = b * linear_block;
      finish_rows(r0, std::min(linear_block, m - r0), 0, n);
    });
  } else {
    pool.parallel_for(block_count(n, linear_block), [&](Index b) {
      const Index c0 = b * linear_block;
      finish_rows(0, m, c0, std::min(linear_block, n - c0));
    });
  }
}

/// dx (M, K) (+)= dy (M, N) W, split over rows of dy.
template <class S>
void linear_backward_input(ThreadPool& pool, const ConstRef<S>& dy, const RowMatrix<S>& weight, MutRef<S> dx,
                           bool accumulate) {
  const Index m = dy.rows(), k = weight.cols();
  auto rows = [&](Index r0, Index count) {
    if (accumulate) {
      dx.middleRows(r0, count).noalias() += dy.middleRows(r0, count) * weight;
    } else {
      dx.middleRows(r0, count).noalias() = dy.middleRows(r0, count) * weight;
    }
  };
  const double flops = static_cast<double>(m) * static_cast<double>(weight.rows()) * static_cast<double>(k);
  if (flops < linear_parallel_min_flops) {
    rows(0, m);
  } else if (m >= 2 * linear_block) {
    pool.parallel_for(block_count(m, linear_block), [&](Index b) {
      const Index r0 = b * linear_block;
      rows(r0, std::min(linear_block, m - r0));
    });
  } else {
    // Few rows: split the output columns instead.
    pool.parallel_for(block_count(k, linear_block), [&](Index b) {
      const Index c0 = b * linear_block, cols = std::min(linear_block, k - c0);
      if (accumulate) {
        dx.middleCols(c0, cols).noalias() += dy * weight.middleCols(c0, cols);
      } else {
        dx.middleCols(c0, cols).noalias() = dy * weight.middleCols(c0, cols);
      }
    });
  }
}

/// dW (N, K) += dy (M, N)^T x (M, K) and dbias (1, N) += column sums of dy, split over rows of dW
/// so that no two tasks write the same gradient.
template <class S>
void linear_backward_weight(ThreadPool& pool, const ConstRef<S>& dy, const ConstRef<S>& x, RowMatrix<S>& weight_grad,
                            RowMatrix<S>* bias_grad) {
  const Index n = weight_grad.rows();
  auto rows = [&](Index r0, Index count) {
    weight_grad.middleRows(r0, count).noalias() += dy.middleCols(r0, count).transpose() * x;
    if (bias_grad != nullptr && bias_grad->size() > 0) {
      bias_grad->row(0).segment(r0, count) += dy.middleCols(r0, count).colwise().sum();
    }
  };
  const double flops = static_cast<double>(dy.rows()) * static_cast<double>(n) * static_cast<double>(x.cols());
  if (flops < linear_parallel_min_flops) {
    rows(0, n);
    return;
  }
  pool.parallel_for(block_count(n, linear_block), [&](Index b) {
    const Index r0 = b * linear_block;
    rows(r0, std::min(linear_block, n - r0));
  });
}

}  // namespace verl::model::detail
