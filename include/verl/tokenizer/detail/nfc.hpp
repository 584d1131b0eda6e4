// Unicode Normalization Form C (canonical decomposition, canonical ordering, canonical
// composition; UAX #15), for tokenizer.json's {"type": "NFC"} normalizer (Qwen2).
//
// Only the spans around code points that NFC can touch (see nfc_data::unstable_ranges) are
// normalized; the rest of the text is copied, so NFC costs one scan for most text.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "verl/tokenizer/detail/nfc_tables.hpp"
#include "verl/tokenizer/detail/unicode.hpp"

namespace verl::tokenizer::detail {

namespace hangul {
inline constexpr char32_t s_base = 0xAC00, l_base = 0x1100, v_base = 0x1161, t_base = 0x11A7;
inline constexpr char32_t l_count = 19, v_count = 21, t_count = 28, n_count = v_count * t_count,
                          s_count = l_count * n_count;
}  // namespace hangul

inline std::uint8_t combining_class(char32_t cp) {
  if (cp < 0x300) return 0;
  const auto& runs = nfc_data::combining_classes;
  const auto* found = std::upper_bound(std::begin(runs), std::end(runs), cp,
                                       [](char32_t value, const auto& run) { return value < run.first; });
  if (found == std::begin(runs)) return 0;
  --found;
  return cp <= found->last ? found->ccc : 0;
}

inline bool nfc_may_change(char32_t cp) {
  if (cp < 0x300) return false;
  const auto& ranges = nfc_data::unstable_ranges;
  const auto* found = std::upper_bound(std::begin(ranges), std::end(ranges), cp,
                                       [](char32_t value, const auto& range) { return value < range.first; });
  return found != std::begin(ranges) && cp <= (found - 1)->last;
}

inline void append_canonical_decomposition(char32_t cp, std::vector<char32_t>& out) {
  using namespace hangul;
  if (cp >= s_base && cp < s_base + s_count) {
    const char32_t index = cp - s_base;
    out.push_back(l_base + index / n_count);
    out.push_back(v_base + (index % n_count) / t_count);
    if (index % t_count != 0) out.push_back(t_base + index % t_count);
    return;
  }
  if (cp >= 0xC0) {
    const auto& table = nfc_data::decompositions;
    const auto* found = std::lower_bound(std::begin(table), std::end(table), cp,
                                         [](const auto& entry, char32_t value) { return entry.code_point < value; });
    if (found != std::end(table) && found->code_point == cp) {
      const auto* data = nfc_data::decomposition_data + found->offset;
      out.insert(out.end(), data, data + found->length);
      return;
    }
  }
  out.push_back(cp);
}

/// The primary composite of (first, second), or 0 when they do not compose.
inline char32_t compose_pair(char32_t first, char32_t second) {
  using namespace hangul;
  if (first >= l_base && first < l_base + l_count && second >= v_base && second < v_base + v_count) {
    return s_base + ((first - l_base) * v_count + (second - v_base)) * t_count;
  }
  if (first >= s_base && first < s_base + s_count && (first - s_base) % t_count == 0 && second > t_base &&
      second < t_base + t_count) {
    return first + (second - t_base);
  }
  const std::uint64_t key = (static_cast<std::uint64_t>(first) << 21) | second;
  const auto& table = nfc_data::compositions;
  const auto* found = std::lower_bound(std::begin(table), std::end(table), key,
                                       [](const auto& entry, std::uint64_t value) { return entry.pair < value; });
  return found != std::end(table) && found->pair == key ? found->composite : 0;
}

/// NFC of a short span that contains code points NFC may change (appends to `out`).
inline void nfc_span(std::string_view text, std::vector<char32_t>& buffer, std::string& out) {
  buffer.clear();
  for (std::size_t pos = 0; pos < text.size();) append_canonical_decomposition(next_code_point(text, pos), buffer);

  // Canonical ordering: a stable sort of every run of non-starters by combining class.
  for (std::size_t i = 0; i < buffer.size();) {
    if (combining_class(buffer[i]) == 0) {
      ++i;
      continue;
    }
    std::size_t end = i;
    while (end < buffer.size() && combining_class(buffer[end]) != 0) ++end;
    std::stable_sort(buffer.begin() + static_cast<std::ptrdiff_t>(i), buffer.begin() + static_cast<std::ptrdiff_t>(end),
                     [](char32_t a, char32_t b) { return combining_class(a) < combining_class(b); });
    i = end;
  }

  // Canonical composition: each character composes with the last starter unless a character in
  // between has a class of 0 or >= its own (blocked).
  std::size_t written = 0;
  std::size_t starter = 0;
  bool have_starter = false;
  int last_class = -1;  // -1: nothing kept since the starter
  for (std::size_t i = 0; i < buffer.size(); ++i) {
    const char32_t cp = buffer[i];
    const int cp_class = combining_class(cp);
    if (have_starter && last_class < cp_class) {
      if (const char32_t composite = compose_pair(buffer[starter], cp); composite != 0) {
        buffer[starter] = composite;
        continue;
      }
    }
    if (cp_class == 0) {
      starter = written;
      have_starter = true;
      last_class = -1;
    } else {
      last_class = cp_class;
    }
    buffer[written++] = cp;
  }
  for (std::size_t i = 0; i < written; ++i) append_utf8(out, buffer[i]);
}

/// NFC of valid UTF-8.
///
/// A code point outside nfc_data::unstable_ranges is a starter that nothing before it can
/// compose with, so the text splits into independent spans at such code points: only a run of
/// unstable code points, together with the stable code point just before it (which they may
/// compose with), is normalized; everything else is copied.
inline std::string nfc(std::string_view text) {
  std::string out;
  std::vector<char32_t> buffer;
  std::size_t copied = 0;           // text[0, copied) is in out
  std::size_t last_stable = 0;      // start of the last stable code point
  bool have_stable = false;
  std::size_t pos = 0;
  while (pos < text.size()) {
    const auto lead = static_cast<unsigned char>(text[pos]);
    const std::size_t start = pos;
    if (lead < 0xCC) {  // below U+0300: always stable
      pos += utf8_length(lead);
      last_stable = start;
      have_stable = true;
      continue;
    }
    if (!nfc_may_change(next_code_point(text, pos))) {
      last_stable = start;
      have_stable = true;
      continue;
    }
    // An unstable run: extend it to the next stable code point.
    std::size_t run_end = pos;
    while (run_end < text.size()) {
      std::size_t next = run_end;
      const auto next_lead = static_cast<unsigned char>(text[next]);
      if (next_lead < 0xCC) break;
      if (!nfc_may_change(next_code_point(text, next))) break;
      run_end = next;
    }
    const std::size_t span_begin = have_stable ? last_stable : start;
    if (out.empty() && copied == 0) out.reserve(text.size() + 16);
    out.append(text.substr(copied, span_begin - copied));
    nfc_span(text.substr(span_begin, run_end - span_begin), buffer, out);
    copied = run_end;
    pos = run_end;
    have_stable = false;
  }
  if (copied == 0) return std::string(text);
  out.append(text.substr(copied));
  return out;
}

}  // namespace verl::tokenizer::detail
