// Named parallelism axes (TP, CP/SP, EP, DP, PP) and sets of them. An axis type carries its
// kind and its size, static (`TP<4>`) or dynamic (`TP<>`, the size given at run time).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>

#include "verl/config.hpp"
#include "verl/core/error.hpp"
#include "verl/core/int_tuple.hpp"

namespace verl::parallel {

/// The kinds of parallelism, listed in Megatron's default order tp-cp-ep-dp-pp.
/// Ulysses sequence parallelism (verl's `ulysses_sequence_parallel_size`) is the cp axis.
enum class AxisKind : std::uint8_t { tp, cp, ep, dp, pp };

inline constexpr std::size_t axis_kind_count = 5;
inline constexpr std::array<AxisKind, axis_kind_count> megatron_axis_order{AxisKind::tp, AxisKind::cp, AxisKind::ep,
                                                                           AxisKind::dp, AxisKind::pp};

constexpr std::string_view axis_name(AxisKind kind) noexcept {
  switch (kind) {
    case AxisKind::tp: return "tp";
    case AxisKind::cp: return "cp";
    case AxisKind::ep: return "ep";
    case AxisKind::dp: return "dp";
    case AxisKind::pp: return "pp";
  }
  return "?";
}

/// Parses an axis name; "sp" (verl's Ulysses sequence parallelism) names the cp axis.
inline AxisKind parse_axis_kind(std::string_view name) {
  for (AxisKind kind : megatron_axis_order) {
    if (axis_name(kind) == name) return kind;
  }
  if (name == "sp") return AxisKind::cp;
  ::verl::detail::throw_invalid_argument("axis: expected one of tp, cp, sp, ep, dp, pp, got '{}'", name);
}

/// One axis of a mesh: its kind and its size (`dynamic` when given at run time).
template <AxisKind Kind, std::int64_t Size = dynamic>
struct Axis {
  static constexpr AxisKind kind = Kind;
  static constexpr std::int64_t static_size = Size;
  static constexpr bool is_static = Size != dynamic;
};

template <std::int64_t N = dynamic>
using TP = Axis<AxisKind::tp, N>;
template <std::int64_t N = dynamic>
using CP = Axis<AxisKind::cp, N>;
/// Ulysses sequence parallelism shares the cp axis.
template <std::int64_t N = dynamic>
using SP = Axis<AxisKind::cp, N>;
template <std::int64_t N = dynamic>
using EP = Axis<AxisKind::ep, N>;
template <std::int64_t N = dynamic>
using DP = Axis<AxisKind::dp, N>;
template <std::int64_t N = dynamic>
using PP = Axis<AxisKind::pp, N>;

template <class T>
struct is_axis : std::false_type {};
template <AxisKind K, std::int64_t N>
struct is_axis<Axis<K, N>> : std::true_type {};

/// A mesh axis type: `TP<4>`, `DP<>`, ...
template <class T>
concept MeshAxis = is_axis<T>::value;

/// A set of axis kinds, e.g. `AxisKind::tp | AxisKind::cp` for a tp-cp group.
class AxisSet {
 public:
  constexpr AxisSet() noexcept = default;
  constexpr AxisSet(AxisKind kind) noexcept : bits_(bit(kind)) {}  // NOLINT(google-explicit-constructor)

  constexpr bool contains(AxisKind kind) const noexcept { return (bits_ & bit(kind)) != 0; }
  constexpr bool empty() const noexcept { return bits_ == 0; }
  constexpr AxisSet operator|(AxisSet other) const noexcept { return from_bits(bits_ | other.bits_); }
  friend constexpr bool operator==(AxisSet, AxisSet) = default;

  /// "tp-cp", in Megatron's order.
  std::string to_string() const {
    std::string result;
    for (AxisKind kind : megatron_axis_order) {
      if (!contains(kind)) continue;
      if (!result.empty()) result += '-';
      result += axis_name(kind);
    }
    return result.empty() ? "none" : result;
  }

 private:
  static constexpr std::uint8_t bit(AxisKind kind) noexcept { return std::uint8_t(1u << static_cast<unsigned>(kind)); }
  static constexpr AxisSet from_bits(std::uint8_t bits) noexcept {
    AxisSet set;
    set.bits_ = bits;
    return set;
  }
  std::uint8_t bits_ = 0;
};

constexpr AxisSet operator|(AxisKind a, AxisKind b) noexcept { return AxisSet(a) | AxisSet(b); }

}  // namespace verl::parallel
