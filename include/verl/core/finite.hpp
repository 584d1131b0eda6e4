// Where a buffer of numbers stops being finite: the checks that refuse NaN and inf weights,
// gradients and settings find the first offending position with one pass.
#pragma once

#include <cmath>
#include <concepts>
#include <cstddef>
#include <optional>
#include <span>

namespace verl {

/// The index of the first NaN or infinity in `values`, or nullopt when every value is finite.
template <std::floating_point T>
std::optional<std::size_t> first_non_finite(std::span<const T> values) {
  for (std::size_t i = 0; i < values.size(); ++i)
    if (!std::isfinite(values[i])) return i;
  return std::nullopt;
}

}  // namespace verl
