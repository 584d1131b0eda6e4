// Output matrices of batch size. A caller that passes the previous step's output back
// (compute_into, kl_penalty_into) has its storage reused; otherwise the storage is allocated with
// a hint for transparent huge pages (detail/huge_pages.hpp).
#pragma once

#include <cstddef>

#include "verl/cpu/huge_pages.hpp"
#include "verl/core/tensor.hpp"

namespace verl::algo::detail {

/// Gives `m` the shape (rows, cols), keeping its storage when it already has that size. Contents
/// are unspecified: every caller writes each element.
template <class Scalar>
void prepare_output(RowMatrix<Scalar>& m, Index rows, Index cols) {
  if (m.rows() == rows && m.cols() == cols) return;
  m.resize(0, 0);  // release first, so that reshaping never holds both buffers
  m.resize(rows, cols);
  cpu::advise_huge_pages(m.data(), static_cast<std::size_t>(m.size()) * sizeof(Scalar));
}

}  // namespace verl::algo::detail
