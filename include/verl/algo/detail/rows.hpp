// Row pointers into row-major (B, T) batches: the algo kernels walk rows as contiguous spans.
#pragma once

#include "verl/core/tensor.hpp"

namespace verl::algo::detail {

/// Row `row` of a view (contiguous within the row; rows may be strided).
inline const float* row_of(const ConstMatrixRefF& m, Index row) { return m.data() + row * m.outerStride(); }
/// Row `row` of an owning matrix.
inline float* row_of(MatrixF& m, Index row) { return m.data() + row * m.cols(); }

}  // namespace verl::algo::detail
