// Output matrices of batch size. A caller that passes the previous step's AdvantageResult back
// (compute_into) has its storage reused; otherwise the storage is allocated with a hint for
// transparent huge pages: a (16384, 1024) float32 matrix spans 16384 pages of 4 KiB whose
// first-touch faults cost more than an outcome estimator's arithmetic.
#pragma once

#include <cstddef>
#include <cstdint>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "verl/core/tensor.hpp"

namespace verl::algo::detail {

/// Asks the kernel to back the pages of [data, data + bytes) with huge pages when it first
/// touches them. Only a hint: a no-op off Linux, for small buffers, or when THP is disabled.
inline void advise_huge_pages(void* data, std::size_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  constexpr std::uintptr_t page = 4096;
  constexpr std::size_t worthwhile = std::size_t{4} << 20;
  if (bytes < worthwhile) return;
  const auto first = reinterpret_cast<std::uintptr_t>(data);
  const std::uintptr_t begin = (first + page - 1) & ~(page - 1);
  const std::uintptr_t end = (first + bytes) & ~(page - 1);
  if (end > begin) (void)madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
#else
  (void)data;
  (void)bytes;
#endif
}

/// Gives `m` the shape (rows, cols), keeping its storage when it already has that size. Contents
/// are unspecified: every estimator writes each element.
inline void prepare_output(MatrixF& m, Index rows, Index cols) {
  if (m.rows() == rows && m.cols() == cols) return;
  m.resize(0, 0);  // release first, so that reshaping never holds both buffers
  m.resize(rows, cols);
  advise_huge_pages(m.data(), static_cast<std::size_t>(m.size()) * sizeof(float));
}

}  // namespace verl::algo::detail
