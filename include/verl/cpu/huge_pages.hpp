// A hint that large, freshly allocated outputs be backed by transparent huge pages: a (16384,
// 1024) float32 matrix spans 16384 pages of 4 KiB, and their first-touch faults cost more than an
// element-wise kernel's arithmetic (measured: allocating and filling 64 MiB takes 27 ms on 4 KiB
// pages, 12 ms on huge pages, on the development machine).
#pragma once

#include <cstddef>
#include <cstdint>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace verl::cpu {

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

}  // namespace verl::cpu
