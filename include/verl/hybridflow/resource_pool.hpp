// Resource pools: the sets of ranks (one rank standing for one device, as verl's one worker per
// GPU) that worker groups are placed on. Groups on one pool are colocated (they share its
// processes and run one call at a time there); groups on disjoint pools run at the same time.
#pragma once

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "verl/core/error.hpp"

namespace verl::hybridflow {

class ResourcePool {
 public:
  ResourcePool() = default;

  /// The ranks [first, first + count) of a job of `world_size` ranks.
  static ResourcePool range(int first, int count, int world_size) {
    VERL_CHECK_ARG(count > 0, "resource pool: expected a positive number of ranks, got {}", count);
    VERL_CHECK_ARG(first >= 0 && first + count <= world_size,
                   "resource pool: ranks [{}, {}) do not fit in the job's {} ranks (mpirun -np)", first, first + count,
                   world_size);
    std::vector<int> ranks(static_cast<std::size_t>(count));
    for (int i = 0; i < count; ++i) ranks[static_cast<std::size_t>(i)] = first + i;
    return ResourcePool(std::move(ranks));
  }

  /// Any distinct ranks of a job of `world_size` ranks, in group order.
  static ResourcePool of_ranks(std::vector<int> ranks, int world_size) {
    ResourcePool pool(std::move(ranks));
    VERL_CHECK_ARG(!pool.ranks_.empty(), "resource pool: expected at least one rank, got none");
    pool.require_within(world_size);
    return pool;
  }

  [[nodiscard]] const std::vector<int>& ranks() const { return ranks_; }
  [[nodiscard]] std::int64_t size() const { return static_cast<std::int64_t>(ranks_.size()); }
  [[nodiscard]] bool contains(int rank) const { return std::find(ranks_.begin(), ranks_.end(), rank) != ranks_.end(); }
  [[nodiscard]] bool overlaps(const ResourcePool& other) const {
    return std::any_of(ranks_.begin(), ranks_.end(), [&](int r) { return other.contains(r); });
  }
  [[nodiscard]] std::string to_string() const { return fmt::format("[{}]", fmt::join(ranks_, ", ")); }

  void require_within(int world_size) const {
    std::set<int> seen;
    for (const int r : ranks_) {
      VERL_CHECK_ARG(r >= 0 && r < world_size, "resource pool {}: rank {} is not one of the job's {} ranks", to_string(),
                     r, world_size);
      VERL_CHECK_ARG(seen.insert(r).second, "resource pool {}: rank {} is listed twice", to_string(), r);
    }
  }

  friend bool operator==(const ResourcePool&, const ResourcePool&) = default;

 private:
  explicit ResourcePool(std::vector<int> ranks) : ranks_(std::move(ranks)) {}
  std::vector<int> ranks_;
};

}  // namespace verl::hybridflow
