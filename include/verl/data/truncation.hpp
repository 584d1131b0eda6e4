// verl's `data.truncation` for prompts longer than `data.max_prompt_length`: keep the end
// ("left" drops from the left), keep the start ("right"), keep both ends ("middle": the first
// max//2 and the last max - max//2 tokens), or fail ("error", the default).
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "verl/core/error.hpp"

namespace verl::data {

enum class Truncation { error, left, right, middle };

inline constexpr std::array<std::string_view, 4> truncation_names = {"error", "left", "right", "middle"};

constexpr std::string_view to_string(Truncation truncation) {
  return truncation_names[static_cast<std::size_t>(truncation)];
}

inline Truncation parse_truncation(std::string_view name) {
  for (std::size_t i = 0; i < truncation_names.size(); ++i) {
    if (truncation_names[i] == name) return static_cast<Truncation>(i);
  }
  ::verl::detail::throw_invalid_argument("truncation: expected one of {}, got '{}'", fmt::join(truncation_names, ", "),
                                         name);
}

/// `ids` cut to `max_length` tokens by `truncation`; unchanged when it fits. With
/// Truncation::error an overlong input throws (naming both lengths).
template <class T>
std::vector<T> truncate(std::span<const T> ids, std::int64_t max_length, Truncation truncation) {
  VERL_CHECK_ARG(max_length > 0, "max_length: expected a positive length, got {}", max_length);
  const auto max = static_cast<std::size_t>(max_length);
  if (ids.size() <= max) return std::vector<T>(ids.begin(), ids.end());
  switch (truncation) {
    case Truncation::left: return std::vector<T>(ids.end() - static_cast<std::ptrdiff_t>(max), ids.end());
    case Truncation::right: return std::vector<T>(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(max));
    case Truncation::middle: {
      const std::size_t left_half = max / 2;
      const std::size_t right_half = max - left_half;
      std::vector<T> out(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(left_half));
      out.insert(out.end(), ids.end() - static_cast<std::ptrdiff_t>(right_half), ids.end());
      return out;
    }
    case Truncation::error: break;
  }
  ::verl::detail::throw_invalid_argument(
      "prompt: {} tokens is longer than max_prompt_length={} (data.truncation=error; use data.truncation=left|right|middle "
      "or data.filter_overlong_prompts=true)",
      ids.size(), max_length);
}

}  // namespace verl::data
