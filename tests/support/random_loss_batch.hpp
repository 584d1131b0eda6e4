// Random inputs of the loss tests, shared by the host tests (tests/unit) and the CUDA tests
// (tests/cuda): normal matrices, and 0/1 masks with the edge rows every loss must handle.
#pragma once

#include <algorithm>
#include <random>

#include "verl/core/tensor.hpp"

namespace verl::test {

inline MatrixF random_matrix(Index rows, Index cols, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> normal(0.0f, scale);
  MatrixF m(rows, cols);
  for (Index i = 0; i < m.size(); ++i) m.data()[i] = normal(rng);
  return m;
}

/// Left-aligned masks of random length, with empty rows (every 5th), single tokens and full rows.
inline MatrixF random_mask(Index rows, Index cols, std::mt19937& rng) {
  MatrixF m = MatrixF::Zero(rows, cols);
  std::uniform_int_distribution<Index> length(0, cols);
  for (Index i = 0; i < rows; ++i) {
    Index n = length(rng);
    if (i % 5 == 0) n = 0;
    if (i % 5 == 1) n = std::min<Index>(cols, 1);
    if (i % 5 == 2) n = cols;
    for (Index j = 0; j < n; ++j) m(i, j) = 1.0f;
  }
  return m;
}

}  // namespace verl::test
