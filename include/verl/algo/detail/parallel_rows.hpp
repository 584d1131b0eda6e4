// Row-block parallelism for the element-wise algo kernels (policy losses, KL, advantage
// broadcasts): contiguous row blocks, one per thread, the caller's thread taking the first. Each
// row is computed by exactly one thread with a fixed order of operations and per-row partial
// results are combined in row order afterwards, so results never depend on the thread count.
#pragma once

#include <algorithm>
#include <system_error>
#include <thread>
#include <vector>

#include "verl/core/tensor.hpp"
#include "verl/core/threads.hpp"

namespace verl::algo::detail {

/// Below this many elements per thread a second thread costs more (start-up, page faults on
/// another core) than it saves.
inline constexpr Index kParallelMinElementsPerThread = Index{1} << 17;

/// Most threads one pass may use: the environment variable VERL_ALGO_THREADS (to compare with a
/// framework run at a given thread count, or to leave cores to other work), else VERL_NUM_THREADS,
/// else the CPUs this process may run on. Read once; a malformed value is an error naming it.
inline Index algo_thread_limit() {
  static const Index limit = [] {
    if (const auto algo = thread_count_from_environment("VERL_ALGO_THREADS")) return static_cast<Index>(*algo);
    return static_cast<Index>(default_thread_count());
  }();
  return limit;
}

/// Threads for a (rows, cols) element-wise pass: algo_thread_limit(), fewer for small inputs.
inline unsigned parallel_thread_count(Index rows, Index cols) {
  const Index hardware = algo_thread_limit();
  const Index by_work = std::max<Index>(1, rows * cols / kParallelMinElementsPerThread);
  return static_cast<unsigned>(std::max<Index>(1, std::min({hardware, by_work, rows})));
}

/// Runs fn(begin, end) over contiguous row blocks on `threads` threads. `fn` must not throw:
/// callers validate their inputs first.
template <class Fn>
void parallel_row_blocks(Index rows, unsigned threads, const Fn& fn) {
  if (threads <= 1 || rows <= 1) {
    fn(Index{0}, rows);
    return;
  }
  std::vector<std::thread> workers;
  workers.reserve(threads - 1);
  const auto bound = [&](unsigned t) { return rows * static_cast<Index>(t) / static_cast<Index>(threads); };
  unsigned started = 1;
  try {
    for (; started < threads; ++started)
      workers.emplace_back([&fn, b = bound(started), e = bound(started + 1)] { fn(b, e); });
  } catch (const std::system_error&) {
    // No more threads available: the caller's thread runs the blocks that did not get one.
  }
  fn(Index{0}, bound(1));
  for (unsigned t = started; t < threads; ++t) fn(bound(t), bound(t + 1));
  for (auto& w : workers) w.join();
}

/// parallel_row_blocks with the thread count of parallel_thread_count(rows, cols).
template <class Fn>
void parallel_rows(Index rows, Index cols, const Fn& fn) {
  parallel_row_blocks(rows, parallel_thread_count(rows, cols), fn);
}

}  // namespace verl::algo::detail
