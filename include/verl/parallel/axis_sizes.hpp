// Axis sizes read at run time, e.g. from a command line or a configuration ("pp=2,tp=4,dp=1").
#pragma once

#include <array>
#include <charconv>
#include <cstdint>
#include <string>
#include <string_view>

#include "verl/core/error.hpp"
#include "verl/parallel/axis.hpp"

namespace verl::parallel {

/// A size per axis kind; axes not given have size 1.
struct AxisSizes {
  std::array<std::int64_t, axis_kind_count> sizes{1, 1, 1, 1, 1};
  std::array<bool, axis_kind_count> given{};

  constexpr std::int64_t operator[](AxisKind kind) const noexcept { return sizes[static_cast<std::size_t>(kind)]; }
  constexpr bool has(AxisKind kind) const noexcept { return given[static_cast<std::size_t>(kind)]; }
  constexpr void set(AxisKind kind, std::int64_t size) noexcept {
    sizes[static_cast<std::size_t>(kind)] = size;
    given[static_cast<std::size_t>(kind)] = true;
  }
  constexpr std::int64_t world_size() const noexcept {
    std::int64_t world = 1;
    for (auto s : sizes) world *= s;
    return world;
  }
};

/// Parses "name=size,name=size,..." (names: tp, cp, sp, ep, dp, pp). `argument` names the
/// source in error messages (e.g. "--train"). An unknown name, an axis given twice, a size
/// that is not a positive integer, or an empty item is an error.
inline AxisSizes parse_axis_sizes(std::string_view text, std::string_view argument = "mesh") {
  AxisSizes result;
  VERL_CHECK_ARG(!text.empty(), "{}: expected axis sizes like 'pp=2,tp=4,dp=1', got an empty string", argument);
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = std::min(text.find(',', start), text.size());
    const std::string_view item = text.substr(start, comma - start);
    const std::size_t eq = item.find('=');
    VERL_CHECK_ARG(eq != std::string_view::npos && eq > 0 && eq + 1 < item.size(),
                   "{}: expected items like 'tp=4', got '{}' in '{}'", argument, item, text);
    const std::string_view name = item.substr(0, eq);
    const std::string_view value = item.substr(eq + 1);
    AxisKind kind{};
    try {
      kind = parse_axis_kind(name);
    } catch (const InvalidArgument&) {
      ::verl::detail::throw_invalid_argument("{}: expected axis names among tp, cp, sp, ep, dp, pp, got '{}' in '{}'", argument,
                                     name, text);
    }
    VERL_CHECK_ARG(!result.has(kind), "{}: expected each axis at most once, got {} twice in '{}'", argument,
                   axis_name(kind), text);
    std::int64_t size = 0;
    const auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), size);
    VERL_CHECK_ARG(error == std::errc{} && end == value.data() + value.size(),
                   "{}: axis {}: expected an integer size, got '{}'", argument, axis_name(kind), value);
    VERL_CHECK_ARG(size > 0, "{}: axis {}: expected a positive size, got {}", argument, axis_name(kind), size);
    result.set(kind, size);
    start = comma + 1;
  }
  return result;
}

}  // namespace verl::parallel
