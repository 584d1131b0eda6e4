// Names of an enum's values, spelled once: to_string and the parser of a configuration string
// (with verl's error naming the argument and the valid names) derive from one table.
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <string_view>
#include <utility>

#include "verl/core/error.hpp"

namespace verl {

template <class Enum, std::size_t N>
struct EnumNames {
  std::array<std::pair<Enum, std::string_view>, N> entries;

  /// The name of `value` ("?" for a value outside the table).
  [[nodiscard]] constexpr std::string_view name(Enum value) const {
    for (const auto& [entry, text] : entries)
      if (entry == value) return text;
    return "?";
  }

  /// The value named `text`; an unknown name throws verl::InvalidArgument
  /// "<argument>: expected one of <names><note>, got '<text>'".
  [[nodiscard]] Enum parse(std::string_view text, std::string_view argument, std::string_view note = {}) const {
    for (const auto& [entry, name_text] : entries)
      if (name_text == text) return entry;
    std::string names;
    for (const auto& entry : entries) {
      if (!names.empty()) names += ", ";
      names += entry.second;
    }
    detail::throw_invalid_argument("{}: expected one of {}{}, got '{}'", argument, names, note, text);
  }
};

template <class Enum, class... Entries>
EnumNames(std::pair<Enum, std::string_view>, Entries...) -> EnumNames<Enum, 1 + sizeof...(Entries)>;

}  // namespace verl
