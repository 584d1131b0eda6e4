// Flat layouts after CuTe: a shape and a stride of R modes map a coordinate to an offset
// (their inner product) and a linear index to a coordinate column-major (first mode fastest).
// Everything is constexpr, so a layout built from static sizes is checked by static_assert and
// the same code runs on sizes read at run time.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "verl/core/error.hpp"
#include "verl/core/int_tuple.hpp"

namespace verl {

template <std::size_t R>
using Coord = std::array<std::int64_t, R>;

template <std::size_t R>
struct Layout {
  static constexpr std::size_t modes = R;

  Coord<R> shape{};
  Coord<R> stride{};

  /// Number of coordinates (the product of the shape).
  constexpr std::int64_t size() const noexcept { return detail::product(shape); }

  /// Offset of a coordinate: sum_i coord[i] * stride[i].
  constexpr std::int64_t operator()(const Coord<R>& coord) const noexcept {
    std::int64_t offset = 0;
    for (std::size_t i = 0; i < R; ++i) offset += coord[i] * stride[i];
    return offset;
  }

  /// Offset of the index-th coordinate in column-major order.
  constexpr std::int64_t operator()(std::int64_t index) const noexcept { return (*this)(coord(index)); }

  /// The index-th coordinate, first mode fastest (CuTe's idx2crd).
  constexpr Coord<R> coord(std::int64_t index) const noexcept {
    Coord<R> result{};
    for (std::size_t i = 0; i < R; ++i) {
      result[i] = index % shape[i];
      index /= shape[i];
    }
    return result;
  }

  /// Column-major index of a coordinate (CuTe's crd2idx with compact strides).
  constexpr std::int64_t index(const Coord<R>& coord) const noexcept {
    std::int64_t result = 0;
    for (std::size_t i = R; i-- > 0;) result = result * shape[i] + coord[i];
    return result;
  }

  /// One past the largest offset (strides are non-negative here).
  constexpr std::int64_t cosize() const noexcept {
    std::int64_t largest = 0;
    for (std::size_t i = 0; i < R; ++i) largest += (shape[i] - 1) * stride[i];
    return size() == 0 ? 0 : largest + 1;
  }

  /// The index whose offset is `offset`, for layouts whose modes do not overlap (every layout
  /// built here: slices and divides of compact layouts). Greedy from the largest stride, then
  /// verified, so an offset outside the image gives nullopt.
  constexpr std::optional<std::int64_t> index_of(std::int64_t offset) const noexcept {
    std::array<std::size_t, R> order{};
    for (std::size_t i = 0; i < R; ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return stride[a] > stride[b]; });
    Coord<R> result{};
    std::int64_t rest = offset;
    for (std::size_t i : order) {
      if (shape[i] == 1 || stride[i] == 0) continue;
      const std::int64_t c = rest / stride[i];
      if (rest < 0 || c >= shape[i]) return std::nullopt;
      result[i] = c;
      rest -= c * stride[i];
    }
    if (rest != 0 || (*this)(result) != offset) return std::nullopt;
    return index(result);
  }

  friend constexpr bool operator==(const Layout&, const Layout&) = default;
};

/// Compact column-major layout (first mode has stride 1): Megatron's rank order.
template <std::size_t R>
constexpr Layout<R> make_col_major(const Coord<R>& shape) noexcept {
  return {shape, detail::exclusive_prefix_product(shape)};
}

/// Compact row-major layout (last mode has stride 1): torch's tensor order.
template <std::size_t R>
constexpr Layout<R> make_row_major(const Coord<R>& shape) noexcept {
  Layout<R> layout{shape, {}};
  std::int64_t running = 1;
  for (std::size_t i = R; i-- > 0;) {
    layout.stride[i] = running;
    running *= shape[i];
  }
  return layout;
}

/// Splits mode `mode` of size n and stride s into two modes (tile, n/tile):(s, tile*s) — CuTe's
/// logical_divide of one mode by a tile. The inner mode enumerates the elements of a tile, the
/// outer mode enumerates tiles. Requires tile to divide n.
template <std::size_t R>
constexpr Layout<R + 1> divide_mode(const Layout<R>& layout, std::size_t mode, std::int64_t tile) {
  VERL_CHECK_ARG(mode < R, "mode: expected an index below {}, got {}", R, mode);
  VERL_CHECK_ARG(tile > 0 && layout.shape[mode] % tile == 0, "tile: expected a divisor of {}, got {}",
                 layout.shape[mode], tile);
  Layout<R + 1> result{};
  std::size_t out = 0;
  for (std::size_t i = 0; i < R; ++i) {
    if (i == mode) {
      result.shape[out] = tile;
      result.stride[out++] = layout.stride[i];
      result.shape[out] = layout.shape[i] / tile;
      result.stride[out++] = layout.stride[i] * tile;
    } else {
      result.shape[out] = layout.shape[i];
      result.stride[out++] = layout.stride[i];
    }
  }
  return result;
}

/// True when the layout maps [0, size) one-to-one onto [0, size): a permutation of the index
/// space. The post-condition of every rank layout (groups partition the ranks).
template <std::size_t R>
constexpr bool is_bijection(const Layout<R>& layout) {
  const std::int64_t n = layout.size();
  std::vector<bool> seen(static_cast<std::size_t>(n), false);
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t offset = layout(i);
    if (offset < 0 || offset >= n || seen[static_cast<std::size_t>(offset)]) return false;
    seen[static_cast<std::size_t>(offset)] = true;
  }
  return true;
}

/// "(4,2):(1,4)", CuTe's notation.
template <std::size_t R>
std::string to_string(const Layout<R>& layout) {
  std::string shape, stride;
  for (std::size_t i = 0; i < R; ++i) {
    shape += fmt::format("{}{}", i ? "," : "", layout.shape[i]);
    stride += fmt::format("{}{}", i ? "," : "", layout.stride[i]);
  }
  return "(" + shape + "):(" + stride + ")";
}

}  // namespace verl
