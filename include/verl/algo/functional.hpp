// verl's verl/utils/torch_functional.py as one module header: the small tensor helpers below
// (gather_from_labels, clip_by_value, get_response_mask) plus the log-prob, entropy and masked
// statistics headers it groups.
#pragma once

#include <Eigen/Core>

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <span>

#include "verl/algo/logits/entropy.hpp"
#include "verl/algo/logits/logprob.hpp"
#include "verl/algo/logits/logprob_entropy.hpp"
#include "verl/algo/masked_stats.hpp"
#include "verl/core/error.hpp"
#include "verl/core/tensor.hpp"

namespace verl::algo {

/// data[i, labels[i]] for each row of (N, V) data; labels in [0, V).
template <class Derived>
Vector<typename Derived::Scalar> gather_from_labels(const Eigen::MatrixBase<Derived>& data,
                                                    std::span<const std::int64_t> labels) {
  verl::detail::require_length("labels", static_cast<Index>(labels.size()), data.rows());
  Vector<typename Derived::Scalar> out(data.rows());
  for (Index i = 0; i < data.rows(); ++i) {
    const std::int64_t label = labels[static_cast<std::size_t>(i)];
    VERL_CHECK_ARG(label >= 0 && label < data.cols(), "labels: expected values in [0, {}) (size of the last dim), got {} at {}",
                   data.cols(), label, i);
    out[i] = data(i, label);
  }
  return out;
}

/// VJP of gather_from_labels: d(sum_i cotangent_i * data[i, labels[i]]) / d data, an (N, V)
/// matrix holding cotangent_i at (i, labels[i]) and 0 elsewhere.
inline MatrixF gather_from_labels_backward(Index vocab, std::span<const std::int64_t> labels,
                                           const ConstVectorRefF& cotangent) {
  verl::detail::require_length("cotangent", cotangent.size(), static_cast<Index>(labels.size()));
  MatrixF grad = MatrixF::Zero(static_cast<Index>(labels.size()), vocab);
  for (Index i = 0; i < grad.rows(); ++i) {
    const std::int64_t label = labels[static_cast<std::size_t>(i)];
    VERL_CHECK_ARG(label >= 0 && label < vocab, "labels: expected values in [0, {}) (size of the last dim), got {} at {}",
                   vocab, label, i);
    grad(i, label) = cotangent[i];
  }
  return grad;
}

namespace detail {
/// torch.minimum / torch.maximum propagate NaN from either side.
template <class T>
T nan_propagating_min(T a, T b) {
  if (a != a) return a;
  if (b != b) return b;
  return b < a ? b : a;
}
template <class T>
T nan_propagating_max(T a, T b) {
  if (a != a) return a;
  if (b != b) return b;
  return b > a ? b : a;
}
}  // namespace detail

/// max(min(x, tensor_max), tensor_min) element-wise (tensor_min wins where the bounds cross, as
/// in verl).
template <class XD, class MinD, class MaxD>
RowMatrix<typename XD::Scalar> clip_by_value(const Eigen::MatrixBase<XD>& x, const Eigen::MatrixBase<MinD>& tensor_min,
                                             const Eigen::MatrixBase<MaxD>& tensor_max) {
  verl::detail::require_same_shape("tensor_min", shape_of(tensor_min), "x", shape_of(x));
  verl::detail::require_same_shape("tensor_max", shape_of(tensor_max), "x", shape_of(x));
  using Scalar = typename XD::Scalar;
  RowMatrix<Scalar> out(x.rows(), x.cols());
  for (Index i = 0; i < x.rows(); ++i)
    for (Index j = 0; j < x.cols(); ++j)
      out(i, j) = detail::nan_propagating_max<Scalar>(
          detail::nan_propagating_min<Scalar>(x(i, j), static_cast<Scalar>(tensor_max(i, j))),
          static_cast<Scalar>(tensor_min(i, j)));
  return out;
}

/// 1 up to and including the first token of each row that is one of `eos_tokens`, 0 after it
/// (a row without EOS is all 1). `Out` is the mask's element type (verl's `dtype`, int64 by
/// default).
template <class Out = std::int64_t, class Derived>
RowMatrix<Out> get_response_mask(const Eigen::MatrixBase<Derived>& response_id, std::span<const std::int64_t> eos_tokens) {
  RowMatrix<Out> mask(response_id.rows(), response_id.cols());
  for (Index i = 0; i < response_id.rows(); ++i) {
    bool ended = false;
    for (Index j = 0; j < response_id.cols(); ++j) {
      mask(i, j) = ended ? Out(0) : Out(1);
      const auto token = static_cast<std::int64_t>(response_id(i, j));
      for (const std::int64_t eos : eos_tokens) ended = ended || token == eos;
    }
  }
  return mask;
}

/// Single EOS id (verl's default is 2).
template <class Out = std::int64_t, class Derived>
RowMatrix<Out> get_response_mask(const Eigen::MatrixBase<Derived>& response_id, std::int64_t eos_token = 2) {
  return get_response_mask<Out>(response_id, std::span<const std::int64_t>(&eos_token, 1));
}

template <class Out = std::int64_t, class Derived>
RowMatrix<Out> get_response_mask(const Eigen::MatrixBase<Derived>& response_id,
                                 std::initializer_list<std::int64_t> eos_tokens) {
  return get_response_mask<Out>(response_id, std::span<const std::int64_t>(eos_tokens.begin(), eos_tokens.size()));
}

}  // namespace verl::algo
