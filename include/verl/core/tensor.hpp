// Dense host tensors: row-major Eigen matrices, the layout torch uses for (B, T) batches, and
// shape/mask checks that produce verl::InvalidArgument messages naming the argument.
#pragma once

#include <Eigen/Core>
#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <span>
#include <string_view>

#include "verl/core/error.hpp"

namespace verl {

using Index = Eigen::Index;

template <class Scalar>
using RowMatrix = Eigen::Matrix<Scalar, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class Scalar>
using Vector = Eigen::Matrix<Scalar, Eigen::Dynamic, 1>;

using MatrixF = RowMatrix<float>;   ///< (B, T) float32 batch, row-major like torch
using MatrixD = RowMatrix<double>;
using VectorF = Vector<float>;
using VectorD = Vector<double>;
using VectorI64 = Vector<std::int64_t>;
using MatrixI64 = RowMatrix<std::int64_t>;

/// Read-only view of a row-major matrix: binds to MatrixF, Eigen::Map and contiguous blocks
/// without a copy.
template <class Scalar>
using ConstMatrixRef = Eigen::Ref<const RowMatrix<Scalar>>;
template <class Scalar>
using MatrixRef = Eigen::Ref<RowMatrix<Scalar>>;
template <class Scalar>
using ConstVectorRef = Eigen::Ref<const Vector<Scalar>>;

using ConstMatrixRefF = ConstMatrixRef<float>;
using ConstVectorRefF = ConstVectorRef<float>;

/// A (rows, cols) shape, formatted as "(rows, cols)".
struct Shape2 {
  Index rows;
  Index cols;
  friend bool operator==(const Shape2&, const Shape2&) = default;
};

template <class Derived>
Shape2 shape_of(const Eigen::DenseBase<Derived>& m) {
  return {m.rows(), m.cols()};
}

namespace detail {

/// Throws unless `actual` has the expected shape.
inline void require_shape(std::string_view argument, Shape2 actual, Shape2 expected) {
  VERL_CHECK_ARG(actual == expected, "{}: expected shape ({}, {}), got ({}, {})", argument,
                 expected.rows, expected.cols, actual.rows, actual.cols);
}

/// Throws unless `actual` has the same shape as the reference argument.
inline void require_same_shape(std::string_view argument, Shape2 actual, std::string_view reference,
                               Shape2 expected) {
  VERL_CHECK_ARG(actual == expected, "{}: expected the shape of {} ({}, {}), got ({}, {})", argument,
                 reference, expected.rows, expected.cols, actual.rows, actual.cols);
}

inline void require_length(std::string_view argument, Index actual, Index expected) {
  VERL_CHECK_ARG(actual == expected, "{}: expected length {}, got {}", argument, expected, actual);
}

/// Masks are 0/1 (verl slices them from attention_mask); anything else is a caller bug that
/// would silently reweight the loss.
template <class Derived>
void require_binary_mask(std::string_view argument, const Eigen::DenseBase<Derived>& mask) {
  for (Index i = 0; i < mask.rows(); ++i) {
    for (Index j = 0; j < mask.cols(); ++j) {
      const auto v = mask(i, j);
      if (!(v == 0 || v == 1)) {
        throw_invalid_argument("{}: expected a 0/1 mask, got {} at ({}, {})", argument,
                               static_cast<double>(v), i, j);
      }
    }
  }
}

}  // namespace detail
}  // namespace verl
