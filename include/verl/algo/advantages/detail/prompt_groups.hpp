// Prompt groups: the rows that share a uid, found in O(B) with one open-addressing hash of the
// group ids. verl builds the same groups with a defaultdict keyed by uid: groups are numbered in
// order of first appearance and list their rows in batch order; they need not be contiguous.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "verl/core/tensor.hpp"

namespace verl::algo::detail {

class PromptGroups {
 public:
  explicit PromptGroups(std::span<const std::int64_t> index) : group_of_row_(index.size()) {
    const std::size_t rows = index.size();
    std::size_t capacity = 16;
    while (capacity < 2 * rows) capacity <<= 1;  // load factor <= 1/2 keeps probes short
    std::vector<std::int64_t> keys(capacity);
    std::vector<Index> slot_group(capacity, -1);
    const std::size_t wrap = capacity - 1;
    for (std::size_t row = 0; row < rows; ++row) {
      const std::int64_t id = index[row];
      std::size_t slot = hash(id) & wrap;
      while (slot_group[slot] >= 0 && keys[slot] != id) slot = (slot + 1) & wrap;
      if (slot_group[slot] < 0) {
        keys[slot] = id;
        slot_group[slot] = static_cast<Index>(offsets_.size());
        offsets_.push_back(0);
      }
      group_of_row_[row] = slot_group[slot];
      ++offsets_[static_cast<std::size_t>(slot_group[slot])];
    }
    // Counting sort of the rows by group: offsets_ becomes the CSR start of each group.
    Index start = 0;
    for (auto& count : offsets_) {
      const Index size = count;
      count = start;
      start += size;
    }
    offsets_.push_back(start);
    rows_.resize(rows);
    std::vector<Index> fill(offsets_.begin(), offsets_.end() - 1);
    for (std::size_t row = 0; row < rows; ++row)
      rows_[static_cast<std::size_t>(fill[static_cast<std::size_t>(group_of_row_[row])]++)] = static_cast<Index>(row);
  }

  Index num_groups() const { return static_cast<Index>(offsets_.size()) - 1; }
  Index num_rows() const { return static_cast<Index>(group_of_row_.size()); }
  /// Dense group number (0 .. num_groups-1) of a row.
  Index group_of(Index row) const { return group_of_row_[static_cast<std::size_t>(row)]; }
  Index size_of(Index group) const {
    return offsets_[static_cast<std::size_t>(group) + 1] - offsets_[static_cast<std::size_t>(group)];
  }
  /// The rows of a group, in batch order.
  std::span<const Index> rows_of(Index group) const {
    return {rows_.data() + offsets_[static_cast<std::size_t>(group)], static_cast<std::size_t>(size_of(group))};
  }
  std::span<const Index> group_of_row() const { return group_of_row_; }

 private:
  // splitmix64's finaliser: sequential uids spread over the whole table.
  static std::size_t hash(std::int64_t id) {
    auto x = static_cast<std::uint64_t>(id);
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return static_cast<std::size_t>(x ^ (x >> 31));
  }

  std::vector<Index> group_of_row_;
  std::vector<Index> offsets_;  // CSR: rows_of(g) = rows_[offsets_[g] .. offsets_[g+1])
  std::vector<Index> rows_;
};

}  // namespace verl::algo::detail
