// Python's heapq push/pop, step for step. verl's Karmarkar-Karp pops states from a heapq whose
// ordering has ties; which of two tied states comes out first depends on the exact sift
// sequence, so std::priority_queue (a different sift order) would give different partitions.
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

namespace verl::detail::heapq {

/// Moves heap[pos] towards the root while it is `less` than its parent (heapq._siftdown).
template <class T, class Less>
void sift_towards_root(std::vector<T>& heap, std::size_t root, std::size_t pos, const Less& less) {
  T item = std::move(heap[pos]);
  while (pos > root) {
    const std::size_t parent = (pos - 1) >> 1;
    if (!less(item, heap[parent])) break;
    heap[pos] = std::move(heap[parent]);
    pos = parent;
  }
  heap[pos] = std::move(item);
}

/// heapq._siftup: walks the hole at `pos` down to a leaf along the smaller children (the right
/// child wins unless the left one is strictly less), then sifts the displaced item back up.
template <class T, class Less>
void sift_towards_leaves(std::vector<T>& heap, std::size_t pos, const Less& less) {
  const std::size_t end = heap.size();
  const std::size_t start = pos;
  T item = std::move(heap[pos]);
  std::size_t child = 2 * pos + 1;
  while (child < end) {
    const std::size_t right = child + 1;
    if (right < end && !less(heap[child], heap[right])) child = right;
    heap[pos] = std::move(heap[child]);
    pos = child;
    child = 2 * pos + 1;
  }
  heap[pos] = std::move(item);
  sift_towards_root(heap, start, pos, less);
}

/// heapq.heappush with `less` as the `<` of the pushed objects.
template <class T, class Less>
void push(std::vector<T>& heap, T item, const Less& less) {
  heap.push_back(std::move(item));
  sift_towards_root(heap, 0, heap.size() - 1, less);
}

/// heapq.heappop: the smallest item; the last item refills the root. The heap must not be empty.
template <class T, class Less>
T pop(std::vector<T>& heap, const Less& less) {
  T last = std::move(heap.back());
  heap.pop_back();
  if (heap.empty()) return last;
  T top = std::move(heap.front());
  heap.front() = std::move(last);
  sift_towards_leaves(heap, 0, less);
  return top;
}

}  // namespace verl::detail::heapq
