// A process group as a slice of a rank layout: offset + Layout. Member i is
// offset + layout(i); any slice of a mesh along some of its axes (and the micro-DP groups of a
// reshard plan) has this form, so groups are values, computed constexpr, with no rank lists.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include "verl/core/error.hpp"
#include "verl/core/layout.hpp"
#include "verl/parallel/axis.hpp"

namespace verl::parallel {

/// A set of ranks laid out as offset + layout(i), i in [0, size). Modes a slice does not use
/// have size 1.
struct RankGroup {
  using LayoutType = Layout<axis_kind_count>;

  std::int64_t offset = 0;
  LayoutType layout{make_col_major(Coord<axis_kind_count>{1, 1, 1, 1, 1})};

  constexpr std::int64_t size() const noexcept { return layout.size(); }

  /// The i-th member (the group's local rank i).
  constexpr std::int64_t operator[](std::int64_t i) const noexcept { return offset + layout(i); }

  /// The local rank of `rank` inside the group, or nullopt when it is not a member.
  constexpr std::optional<std::int64_t> index_of(std::int64_t rank) const noexcept {
    return layout.index_of(rank - offset);
  }
  constexpr bool contains(std::int64_t rank) const noexcept { return index_of(rank).has_value(); }

  /// Smallest member: a colour that identifies the group among the groups that partition a
  /// rank space (strides are non-negative, so it is member 0).
  constexpr std::int64_t leader() const noexcept { return offset; }

  constexpr std::vector<std::int64_t> to_vector() const {
    std::vector<std::int64_t> ranks(static_cast<std::size_t>(size()));
    for (std::int64_t i = 0; i < size(); ++i) ranks[static_cast<std::size_t>(i)] = (*this)[i];
    return ranks;
  }

  class iterator {
   public:
    using value_type = std::int64_t;
    using difference_type = std::ptrdiff_t;
    constexpr iterator() = default;
    constexpr iterator(const RankGroup* group, std::int64_t i) : group_(group), i_(i) {}
    constexpr std::int64_t operator*() const { return (*group_)[i_]; }
    constexpr iterator& operator++() { ++i_; return *this; }
    constexpr iterator operator++(int) { auto copy = *this; ++i_; return copy; }
    friend constexpr bool operator==(const iterator& a, const iterator& b) { return a.i_ == b.i_; }

   private:
    const RankGroup* group_ = nullptr;
    std::int64_t i_ = 0;
  };
  constexpr iterator begin() const noexcept { return {this, 0}; }
  constexpr iterator end() const noexcept { return {this, size()}; }

  /// Members in order are equal (the layouts may differ by size-1 modes).
  friend constexpr bool operator==(const RankGroup& a, const RankGroup& b) noexcept {
    if (a.size() != b.size()) return false;
    for (std::int64_t i = 0; i < a.size(); ++i) {
      if (a[i] != b[i]) return false;
    }
    return true;
  }
};

/// "[0, 2, 4, 6]"
inline std::string to_string(const RankGroup& group) {
  std::string result = "[";
  for (std::int64_t i = 0; i < group.size(); ++i) result += fmt::format("{}{}", i ? ", " : "", group[i]);
  return result + "]";
}

}  // namespace verl::parallel
