// RMSNorm as Llama / Qwen2 use it: y = w * x / sqrt(mean(x^2) + eps), row by row, and its
// backward pass. The saved per-row factor r = 1 / sqrt(mean(x^2) + eps) is all backward needs.
#pragma once

#include <cmath>
#include <concepts>

#include "verl/core/tensor.hpp"
#include "verl/cpu/rms_norm.hpp"

namespace verl::model::detail {

/// Rows [begin, end) of rms_norm_forward, r into inv_rms[begin, end): row blocks may run on
/// separate threads (each row is computed alone, so the split changes no bits).
template <class S>
void rms_norm_forward_rows(const Eigen::Ref<const RowMatrix<S>>& x, const RowMatrix<S>& weight, double eps,
                           Eigen::Ref<RowMatrix<S>> y, S* inv_rms, Index begin, Index end) {
  if constexpr (std::same_as<S, float>) {
    const auto& kernels = cpu::rms_norm_detail::kernels();
    for (Index t = begin; t < end; ++t) {
      inv_rms[t] = kernels.forward(x.row(t).data(), weight.data(), eps, y.row(t).data(), x.cols());
    }
    return;
  }
  const double width = static_cast<double>(x.cols());
  for (Index t = begin; t < end; ++t) {
    // The mean of squares in double: H terms of very different magnitudes.
    const double mean_square = x.row(t).template cast<double>().squaredNorm() / width;
    const auto r = static_cast<S>(1.0 / std::sqrt(mean_square + eps));
    inv_rms[t] = r;
    y.row(t) = weight.row(0).cwiseProduct(x.row(t) * r);
  }
}

/// y = w * x * r per row; writes r into inv_rms (rows).
template <class S>
void rms_norm_forward(const Eigen::Ref<const RowMatrix<S>>& x, const RowMatrix<S>& weight, double eps,
                      Eigen::Ref<RowMatrix<S>> y, Vector<S>& inv_rms) {
  inv_rms.resize(x.rows());
  rms_norm_forward_rows<S>(x, weight, eps, y, inv_rms.data(), 0, x.rows());
}

/// Rows [begin, end) of rms_norm_recompute (row blocks may run on separate threads).
template <class S>
void rms_norm_recompute_rows(const Eigen::Ref<const RowMatrix<S>>& x, const RowMatrix<S>& weight, const S* inv_rms,
                             Eigen::Ref<RowMatrix<S>> y, Index begin, Index end) {
  if constexpr (std::same_as<S, float>) {
    const auto& kernels = cpu::rms_norm_detail::kernels();
    for (Index t = begin; t < end; ++t) kernels.scale(x.row(t).data(), weight.data(), inv_rms[t], y.row(t).data(), x.cols());
    return;
  }
  for (Index t = begin; t < end; ++t) y.row(t) = weight.row(0).cwiseProduct(x.row(t) * inv_rms[t]);
}

/// The normalized rows times the weight again (the forward output), from the saved factors.
template <class S>
void rms_norm_recompute(const Eigen::Ref<const RowMatrix<S>>& x, const RowMatrix<S>& weight, const Vector<S>& inv_rms,
                        Eigen::Ref<RowMatrix<S>> y) {
  rms_norm_recompute_rows<S>(x, weight, inv_rms.data(), y, 0, x.rows());
}

/// Given dy, accumulates dweight += sum_t dy_t * x_t * r_t and dx (+)= r g - x r^3 (g . x) / H
/// with g = w * dy.
template <class S>
void rms_norm_backward(const Eigen::Ref<const RowMatrix<S>>& x, const RowMatrix<S>& weight, const Vector<S>& inv_rms,
                       const Eigen::Ref<const RowMatrix<S>>& dy, RowMatrix<S>* weight_grad,
                       Eigen::Ref<RowMatrix<S>> dx, bool accumulate) {
  if (weight_grad != nullptr && weight_grad->size() == 0) weight_grad = nullptr;  // frozen weight
  if constexpr (std::same_as<S, float>) {
    const auto& kernels = cpu::rms_norm_detail::kernels();
    float* dw = weight_grad != nullptr ? weight_grad->data() : nullptr;
    for (Index t = 0; t < x.rows(); ++t) {
      kernels.backward(x.row(t).data(), weight.data(), inv_rms[t], dy.row(t).data(), dw, dx.row(t).data(), accumulate,
                       x.cols());
    }
    return;
  }
  const S width = static_cast<S>(x.cols());
  for (Index t = 0; t < x.rows(); ++t) {
    const S r = inv_rms[t];
    if (weight_grad != nullptr) weight_grad->row(0) += dy.row(t).cwiseProduct(x.row(t)) * r;
    const auto g = weight.row(0).cwiseProduct(dy.row(t));
    const S projection = static_cast<S>(g.template cast<double>().dot(x.row(t).template cast<double>()));
    const S coefficient = r * r * r * projection / width;
    if (accumulate) {
      dx.row(t) += r * g - coefficient * x.row(t);
    } else {
      dx.row(t) = r * g - coefficient * x.row(t);
    }
  }
}

}  // namespace verl::model::detail
