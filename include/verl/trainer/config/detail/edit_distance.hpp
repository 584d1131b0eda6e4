// Levenshtein distance, to suggest the nearest valid key for a misspelt one.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string_view>
#include <vector>

namespace verl::trainer::detail {

inline std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> previous(b.size() + 1), current(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) previous[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    current[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t substitution = previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      current[j] = std::min({previous[j] + 1, current[j - 1] + 1, substitution});
    }
    std::swap(previous, current);
  }
  return previous[b.size()];
}

/// The candidate nearest to `word` (the first among equals); empty when there are none.
template <class Range>
std::string_view nearest(std::string_view word, const Range& candidates) {
  std::string_view best;
  std::size_t best_distance = static_cast<std::size_t>(-1);
  for (const auto& candidate : candidates) {
    const std::size_t d = edit_distance(word, candidate);
    if (d < best_distance) {
      best_distance = d;
      best = candidate;
    }
  }
  return best;
}

}  // namespace verl::trainer::detail
