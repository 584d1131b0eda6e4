// Python's str methods that chat templates call (strip, split, replace, startswith, title, ...)
// on UTF-8 strings, indexing by code point as Python does.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "verl/tokenizer/jinja/python.hpp"

namespace verl::tokenizer::jinja::detail {

/// Simple case mapping for ASCII, Latin-1, Latin Extended-A, Greek and Cyrillic (the scripts
/// whose letters have one-to-one case pairs there); other code points are left unchanged.
inline char32_t to_upper(char32_t cp) {
  if (cp >= 'a' && cp <= 'z') return cp - 32;
  if (cp < 0x80) return cp;
  if ((cp >= 0xE0 && cp <= 0xFE && cp != 0xF7)) return cp - 32;
  if (cp == 0xFF) return 0x178;
  if (cp >= 0x100 && cp <= 0x17F && cp != 0x130 && cp != 0x131 && cp != 0x138 && cp != 0x149 && cp != 0x17F) {
    const bool odd_pairs = (cp >= 0x139 && cp <= 0x148) || (cp >= 0x179 && cp <= 0x17E);
    if (odd_pairs ? (cp % 2 == 0) : (cp % 2 == 1)) return cp - 1;
    return cp;
  }
  if (cp >= 0x3B1 && cp <= 0x3C9 && cp != 0x3C2) return cp - 32;
  if (cp == 0x3C2) return 0x3A3;
  if (cp >= 0x430 && cp <= 0x44F) return cp - 32;
  if (cp >= 0x450 && cp <= 0x45F) return cp - 80;
  return cp;
}

inline char32_t to_lower(char32_t cp) {
  if (cp >= 'A' && cp <= 'Z') return cp + 32;
  if (cp < 0x80) return cp;
  if (cp >= 0xC0 && cp <= 0xDE && cp != 0xD7) return cp + 32;
  if (cp == 0x178) return 0xFF;
  if (cp >= 0x100 && cp <= 0x17F && cp != 0x130 && cp != 0x131 && cp != 0x138 && cp != 0x149 && cp != 0x17F) {
    const bool odd_pairs = (cp >= 0x139 && cp <= 0x148) || (cp >= 0x179 && cp <= 0x17E);
    if (odd_pairs ? (cp % 2 == 1) : (cp % 2 == 0)) return cp + 1;
    return cp;
  }
  if (cp >= 0x391 && cp <= 0x3A9 && cp != 0x3A2) return cp + 32;
  if (cp >= 0x410 && cp <= 0x42F) return cp + 32;
  if (cp >= 0x400 && cp <= 0x40F) return cp + 80;
  return cp;
}

inline bool is_cased(char32_t cp) { return to_upper(cp) != cp || to_lower(cp) != cp; }

inline std::string map_code_points(std::string_view text, char32_t (*mapping)(char32_t)) {
  std::vector<char32_t> points = code_points(text);
  for (auto& cp : points) cp = mapping(cp);
  return from_code_points(points);
}

inline std::string str_upper(std::string_view text) { return map_code_points(text, to_upper); }
inline std::string str_lower(std::string_view text) { return map_code_points(text, to_lower); }

/// str.capitalize(): the first character upper-cased, the rest lower-cased.
inline std::string str_capitalize(std::string_view text) {
  std::vector<char32_t> points = code_points(text);
  for (std::size_t i = 0; i < points.size(); ++i) points[i] = i == 0 ? to_upper(points[i]) : to_lower(points[i]);
  return from_code_points(points);
}

/// str.title(): each run of cased letters starts upper-case, continues lower-case.
inline std::string str_title(std::string_view text) {
  std::vector<char32_t> points = code_points(text);
  bool previous_cased = false;
  for (auto& cp : points) {
    if (is_cased(cp)) {
      cp = previous_cased ? to_lower(cp) : to_upper(cp);
      previous_cased = true;
    } else {
      previous_cased = false;
    }
  }
  return from_code_points(points);
}

/// str.strip / lstrip / rstrip with Python's white space, or the given characters.
inline std::string str_strip(std::string_view text, const std::optional<std::string>& chars, bool left, bool right) {
  const std::vector<char32_t> points = code_points(text);
  const std::vector<char32_t> strip_set = chars ? code_points(*chars) : std::vector<char32_t>{};
  const auto strips = [&](char32_t cp) {
    return chars ? std::find(strip_set.begin(), strip_set.end(), cp) != strip_set.end() : is_python_space(cp);
  };
  std::size_t begin = 0;
  std::size_t end = points.size();
  if (left) {
    while (begin < end && strips(points[begin])) ++begin;
  }
  if (right) {
    while (end > begin && strips(points[end - 1])) --end;
  }
  return from_code_points(std::vector<char32_t>(points.begin() + static_cast<std::ptrdiff_t>(begin),
                                                points.begin() + static_cast<std::ptrdiff_t>(end)));
}

/// str.split(sep=None, maxsplit=-1) and str.rsplit.
inline std::vector<std::string> str_split(std::string_view text, const std::optional<std::string>& separator,
                                          std::int64_t max_split, bool from_right) {
  std::vector<std::string> parts;
  if (separator) {
    if (separator->empty()) throw RenderError("split: empty separator");
    if (!from_right) {
      std::size_t start = 0;
      while (max_split != 0) {
        const std::size_t found = text.find(*separator, start);
        if (found == std::string_view::npos) break;
        parts.emplace_back(text.substr(start, found - start));
        start = found + separator->size();
        if (max_split > 0) --max_split;
      }
      parts.emplace_back(text.substr(start));
      return parts;
    }
    std::size_t end = text.size();
    while (max_split != 0 && end >= separator->size()) {
      const std::size_t found = text.rfind(*separator, end - separator->size());
      if (found == std::string_view::npos) break;
      parts.emplace_back(text.substr(found + separator->size(), end - found - separator->size()));
      end = found;
      if (max_split > 0) --max_split;
    }
    parts.emplace_back(text.substr(0, end));
    std::reverse(parts.begin(), parts.end());
    return parts;
  }
  // Runs of white space separate; leading and trailing white space yields no empty parts.
  const std::vector<char32_t> points = code_points(text);
  if (!from_right) {
    std::size_t i = 0;
    while (true) {
      while (i < points.size() && is_python_space(points[i])) ++i;
      if (i >= points.size()) break;
      if (max_split == 0) {
        std::size_t end = points.size();
        while (end > i && is_python_space(points[end - 1])) --end;
        parts.push_back(from_code_points({points.begin() + static_cast<std::ptrdiff_t>(i), points.begin() + static_cast<std::ptrdiff_t>(end)}));
        break;
      }
      std::size_t j = i;
      while (j < points.size() && !is_python_space(points[j])) ++j;
      parts.push_back(from_code_points({points.begin() + static_cast<std::ptrdiff_t>(i), points.begin() + static_cast<std::ptrdiff_t>(j)}));
      i = j;
      if (max_split > 0) --max_split;
    }
    return parts;
  }
  std::size_t end = points.size();
  while (true) {
    while (end > 0 && is_python_space(points[end - 1])) --end;
    if (end == 0) break;
    if (max_split == 0) {
      std::size_t begin = 0;
      while (begin < end && is_python_space(points[begin])) ++begin;
      parts.push_back(from_code_points({points.begin() + static_cast<std::ptrdiff_t>(begin), points.begin() + static_cast<std::ptrdiff_t>(end)}));
      break;
    }
    std::size_t begin = end;
    while (begin > 0 && !is_python_space(points[begin - 1])) --begin;
    parts.push_back(from_code_points({points.begin() + static_cast<std::ptrdiff_t>(begin), points.begin() + static_cast<std::ptrdiff_t>(end)}));
    end = begin;
    if (max_split > 0) --max_split;
  }
  std::reverse(parts.begin(), parts.end());
  return parts;
}

/// str.replace(old, new, count=-1); an empty `old` inserts between characters, as in Python.
inline std::string str_replace(std::string_view text, std::string_view old, std::string_view replacement,
                               std::int64_t count) {
  std::string out;
  if (old.empty()) {
    const std::vector<char32_t> points = code_points(text);
    for (std::size_t i = 0; i <= points.size(); ++i) {
      if (count != 0) {
        out.append(replacement);
        if (count > 0) --count;
      }
      if (i < points.size()) tokenizer::detail::append_utf8(out, points[i]);
    }
    return out;
  }
  std::size_t start = 0;
  while (count != 0) {
    const std::size_t found = text.find(old, start);
    if (found == std::string_view::npos) break;
    out.append(text.substr(start, found - start)).append(replacement);
    start = found + old.size();
    if (count > 0) --count;
  }
  out.append(text.substr(start));
  return out;
}

/// str.splitlines(): the line boundaries Python recognises.
inline std::vector<std::string> str_splitlines(std::string_view text) {
  std::vector<std::string> lines;
  const std::vector<char32_t> points = code_points(text);
  std::vector<char32_t> line;
  for (std::size_t i = 0; i < points.size(); ++i) {
    const char32_t cp = points[i];
    const bool boundary = cp == '\n' || cp == '\r' || cp == 0x0B || cp == 0x0C || (cp >= 0x1C && cp <= 0x1E) ||
                          cp == 0x85 || cp == 0x2028 || cp == 0x2029;
    if (!boundary) {
      line.push_back(cp);
      continue;
    }
    if (cp == '\r' && i + 1 < points.size() && points[i + 1] == '\n') ++i;
    lines.push_back(from_code_points(line));
    line.clear();
  }
  if (!line.empty()) lines.push_back(from_code_points(line));
  return lines;
}

/// Python-style index normalisation for a sequence of `size` elements; nullopt when out of range.
inline std::optional<std::size_t> python_index(std::int64_t index, std::size_t size) {
  const auto count = static_cast<std::int64_t>(size);
  if (index < 0) index += count;
  if (index < 0 || index >= count) return std::nullopt;
  return static_cast<std::size_t>(index);
}

/// The positions a[start:stop:step] selects, with Python's clamping rules.
inline std::vector<std::size_t> slice_positions(std::size_t size, std::optional<std::int64_t> start,
                                                std::optional<std::int64_t> stop, std::optional<std::int64_t> step) {
  const std::int64_t stride = step.value_or(1);
  if (stride == 0) throw RenderError("slice step cannot be zero");
  const auto count = static_cast<std::int64_t>(size);
  const auto clamp = [&](std::optional<std::int64_t> bound, std::int64_t fallback) {
    if (!bound) return fallback;
    std::int64_t value = *bound;
    if (value < 0) value += count;
    if (stride > 0) return std::clamp<std::int64_t>(value, 0, count);
    return std::clamp<std::int64_t>(value, -1, count - 1);
  };
  const std::int64_t begin = clamp(start, stride > 0 ? 0 : count - 1);
  const std::int64_t end = clamp(stop, stride > 0 ? count : -1);
  std::vector<std::size_t> positions;
  for (std::int64_t i = begin; stride > 0 ? i < end : i > end; i += stride) positions.push_back(static_cast<std::size_t>(i));
  return positions;
}

}  // namespace verl::tokenizer::jinja::detail
