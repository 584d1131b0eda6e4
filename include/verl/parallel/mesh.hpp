// A device mesh: named axes in an order, laid out column-major over the rank space (the first
// axis varies fastest), exactly like Megatron's RankGenerator for the order tp-cp-ep-dp-pp.
// Axis sizes are static (`TP<4>`) or dynamic (`TP<>`); with static sizes every query is a
// constant expression and invalid meshes are compile errors with named messages, with dynamic
// sizes the same code runs at run time and throws verl::InvalidArgument naming the values.
//
//   using Train = Mesh<TP<4>, DP<2>, PP<2>>;            // 16 ranks, Megatron order
//   static_assert(Train{}.group(5, AxisKind::tp) == ... );
//   Mesh<TP<>, DP<>, PP<>> dynamic_mesh(4, 2, 2);       // the same, sizes at run time
#pragma once

#include <fmt/format.h>

#include <array>
#include <cstdint>
#include <string>
#include <type_traits>

#include "verl/config.hpp"
#include "verl/core/error.hpp"
#include "verl/core/int_tuple.hpp"
#include "verl/core/layout.hpp"
#include "verl/parallel/axis.hpp"
#include "verl/parallel/axis_sizes.hpp"
#include "verl/parallel/rank_group.hpp"

namespace verl::parallel {

/// Marks the one axis whose size is the world size divided by the others (Megatron infers dp).
inline constexpr std::int64_t inferred = -2;

namespace detail {

template <MeshAxis... Axes>
consteval bool axes_are_distinct() {
  constexpr std::array<AxisKind, sizeof...(Axes)> kinds{Axes::kind...};
  for (std::size_t i = 0; i < kinds.size(); ++i) {
    for (std::size_t j = i + 1; j < kinds.size(); ++j) {
      if (kinds[i] == kinds[j]) return false;
    }
  }
  return true;
}

template <std::int64_t Size>
inline constexpr bool is_valid_axis_size = Size > 0 || Size == dynamic;

}  // namespace detail

template <MeshAxis... Axes>
class Mesh {
 public:
  static constexpr std::size_t num_axes = sizeof...(Axes);
  VERL_STATIC_ASSERT(num_axes <= axis_kind_count, MESH_HAS_MORE_AXES_THAN_AXIS_KINDS);
  VERL_STATIC_ASSERT(detail::axes_are_distinct<Axes...>(), MESH_AXIS_LISTED_TWICE);
  VERL_STATIC_ASSERT((detail::is_valid_axis_size<Axes::static_size> && ...), MESH_AXIS_SIZE_MUST_BE_POSITIVE);

  static constexpr std::array<AxisKind, num_axes> kinds{Axes::kind...};
  static constexpr std::size_t num_dynamic_axes = (std::size_t{0} + ... + std::size_t{!Axes::is_static});
  static constexpr bool is_static = num_dynamic_axes == 0;

  /// Takes one size per dynamic axis, in axis order (none for a static mesh).
  template <IntegerLike... DynamicSizes>
  constexpr explicit Mesh(DynamicSizes... dynamic_sizes) : sizes_{Axes::static_size...} {
    VERL_STATIC_ASSERT(sizeof...(DynamicSizes) == num_dynamic_axes, MESH_NEEDS_ONE_SIZE_PER_DYNAMIC_AXIS);
    const std::array<std::int64_t, num_dynamic_axes + 1> given{to_int64(dynamic_sizes)..., 0};
    std::size_t next = 0;
    for (std::size_t i = 0; i < num_axes; ++i) {
      if (sizes_[i] != dynamic) continue;
      VERL_CHECK_ARG(given[next] > 0, "mesh: axis {}: expected a positive size, got {}", axis_name(kinds[i]),
                     given[next]);
      sizes_[i] = given[next++];
    }
  }

  /// A mesh from every axis' size in axis order; static axes must match their type.
  static constexpr Mesh from_sizes(const Coord<num_axes>& sizes) {
    Mesh mesh = dynamic_placeholder();
    constexpr Coord<num_axes> declared{Axes::static_size...};
    for (std::size_t i = 0; i < num_axes; ++i) {
      VERL_CHECK_ARG(sizes[i] > 0, "mesh: axis {}: expected a positive size, got {}", axis_name(kinds[i]), sizes[i]);
      VERL_CHECK_ARG(declared[i] == dynamic || declared[i] == sizes[i],
                     "mesh: axis {}: expected the static size {}, got {}", axis_name(kinds[i]), declared[i], sizes[i]);
      mesh.sizes_[i] = sizes[i];
    }
    return mesh;
  }

  /// A mesh from parsed sizes: axes this mesh lacks must have size 1; axes not given are 1.
  static constexpr Mesh from_axis_sizes(const AxisSizes& given, std::string_view argument = "mesh") {
    for (AxisKind kind : megatron_axis_order) {
      VERL_CHECK_ARG(has_axis(kind) || given[kind] == 1, "{}: axis {}: expected size 1 (the mesh has axes {}), got {}",
                     argument, axis_name(kind), axes().to_string(), given[kind]);
    }
    Coord<num_axes> sizes{};
    for (std::size_t i = 0; i < num_axes; ++i) sizes[i] = given[kinds[i]];
    return from_sizes(sizes);
  }

  /// A mesh over `world_size` ranks from the dynamic sizes, one of which may be `inferred`
  /// (then it is world_size divided by the other axes, which must divide it); without an
  /// inferred axis the sizes must multiply to world_size.
  template <IntegerLike... DynamicSizes>
  static constexpr Mesh of_world(std::int64_t world_size, DynamicSizes... dynamic_sizes) {
    VERL_STATIC_ASSERT(sizeof...(DynamicSizes) == num_dynamic_axes, MESH_NEEDS_ONE_SIZE_PER_DYNAMIC_AXIS);
    VERL_CHECK_ARG(world_size > 0, "world_size: expected a positive size, got {}", world_size);
    const std::array<std::int64_t, num_dynamic_axes + 1> given{to_int64(dynamic_sizes)..., 0};
    Coord<num_axes> sizes{Axes::static_size...};
    std::size_t next = 0;
    std::size_t inferred_axis = num_axes;
    std::int64_t known = 1;
    for (std::size_t i = 0; i < num_axes; ++i) {
      if (sizes[i] == dynamic) sizes[i] = given[next++];
      if (sizes[i] == inferred) {
        VERL_CHECK_ARG(inferred_axis == num_axes, "mesh: expected at most one inferred axis, got {} and {}",
                       axis_name(kinds[inferred_axis]), axis_name(kinds[i]));
        inferred_axis = i;
        continue;
      }
      VERL_CHECK_ARG(sizes[i] > 0, "mesh: axis {}: expected a positive size, got {}", axis_name(kinds[i]), sizes[i]);
      known *= sizes[i];
    }
    if (inferred_axis == num_axes) {
      VERL_CHECK_ARG(known == world_size, "world_size: expected the product of the axis sizes {}, got {}", known,
                     world_size);
    } else {
      VERL_CHECK_ARG(world_size % known == 0,
                     "world_size: expected a multiple of the other axes' product {} to infer axis {}, got {}", known,
                     axis_name(kinds[inferred_axis]), world_size);
      sizes[inferred_axis] = world_size / known;
    }
    return from_sizes(sizes);
  }

  // ---- axes and sizes -----------------------------------------------------------------------
  static constexpr bool has_axis(AxisKind kind) noexcept { return position(kind) < num_axes; }

  /// Position of an axis in this mesh's order (num_axes when absent).
  static constexpr std::size_t position(AxisKind kind) noexcept {
    for (std::size_t i = 0; i < num_axes; ++i) {
      if (kinds[i] == kind) return i;
    }
    return num_axes;
  }

  static constexpr AxisSet axes() noexcept {
    AxisSet set;
    for (AxisKind kind : kinds) set = set | kind;
    return set;
  }

  /// Size of an axis: `Int<N>` when static, std::int64_t when dynamic, `Int<1>` when the mesh
  /// has no such axis (an absent axis is a trivial one, as in Megatron).
  template <AxisKind Kind>
  constexpr auto size() const noexcept {
    constexpr std::size_t i = position(Kind);
    if constexpr (i == num_axes) {
      return Int<1>{};
    } else if constexpr (static_sizes_[i] != dynamic) {
      return Int<static_sizes_[i]>{};
    } else {
      return sizes_[i];
    }
  }

  constexpr std::int64_t size(AxisKind kind) const noexcept {
    const std::size_t i = position(kind);
    return i == num_axes ? 1 : sizes_[i];
  }

  /// Number of ranks: `Int<N>` for a static mesh.
  constexpr auto world_size() const noexcept {
    if constexpr (is_static) {
      return Int<::verl::detail::product(static_sizes_)>{};
    } else {
      return ::verl::detail::product(sizes_);
    }
  }

  constexpr const Coord<num_axes>& sizes() const noexcept { return sizes_; }

  /// rank = layout()(coords): column-major over the axis sizes.
  constexpr Layout<num_axes> layout() const noexcept { return make_col_major(sizes_); }

  /// Stride of an axis in the rank space (0 when absent).
  constexpr std::int64_t stride(AxisKind kind) const noexcept {
    const std::size_t i = position(kind);
    return i == num_axes ? 0 : layout().stride[i];
  }

  // ---- ranks and coordinates ----------------------------------------------------------------
  constexpr Coord<num_axes> coords(std::int64_t rank) const {
    check_rank(rank);
    return layout().coord(rank);
  }

  /// Coordinate of `rank` along one axis (0 for an absent axis).
  constexpr std::int64_t coord(std::int64_t rank, AxisKind kind) const {
    const std::size_t i = position(kind);
    return i == num_axes ? 0 : coords(rank)[i];
  }

  constexpr std::int64_t rank_of(const Coord<num_axes>& coords) const {
    for (std::size_t i = 0; i < num_axes; ++i) {
      VERL_CHECK_ARG(coords[i] >= 0 && coords[i] < sizes_[i], "coords: axis {}: expected a coordinate in [0, {}), got {}",
                     axis_name(kinds[i]), sizes_[i], coords[i]);
    }
    return layout()(coords);
  }

  // ---- groups: slices of the rank layout ----------------------------------------------------
  /// The ranks that share every coordinate of `rank` except along `axes`, ordered column-major
  /// over those axes (Megatron's group for, e.g., "tp" or "tp-cp").
  constexpr RankGroup group(std::int64_t rank, AxisSet axes) const {
    check_axes(axes);
    const Coord<num_axes> c = coords(rank);
    const Layout<num_axes> full = layout();
    RankGroup group;
    for (std::size_t i = 0; i < num_axes; ++i) {
      if (axes.contains(kinds[i])) {
        group.layout.shape[i] = full.shape[i];
        group.layout.stride[i] = full.stride[i];
      } else {
        group.layout.shape[i] = 1;
        group.layout.stride[i] = 0;
        group.offset += c[i] * full.stride[i];
      }
    }
    return group;
  }

  /// Number of disjoint groups along `axes` (world size over the group size).
  constexpr std::int64_t group_count(AxisSet axes) const {
    check_axes(axes);
    std::int64_t count = 1;
    for (std::size_t i = 0; i < num_axes; ++i) {
      if (!axes.contains(kinds[i])) count *= sizes_[i];
    }
    return count;
  }

  /// Which of those groups holds `rank`: the column-major index of its other coordinates
  /// (Megatron lists groups in this order).
  constexpr std::int64_t group_index(std::int64_t rank, AxisSet axes) const {
    check_axes(axes);
    const Coord<num_axes> c = coords(rank);
    std::int64_t index = 0;
    for (std::size_t i = num_axes; i-- > 0;) {
      if (!axes.contains(kinds[i])) index = index * sizes_[i] + c[i];
    }
    return index;
  }

  /// The index-th group along `axes`.
  constexpr RankGroup group_at(AxisSet axes, std::int64_t index) const {
    const std::int64_t count = group_count(axes);
    VERL_CHECK_ARG(index >= 0 && index < count, "index: expected a group index in [0, {}), got {}", count, index);
    Coord<num_axes> c{};
    for (std::size_t i = 0; i < num_axes; ++i) {
      if (axes.contains(kinds[i])) continue;
      c[i] = index % sizes_[i];
      index /= sizes_[i];
    }
    return group(layout()(c), axes);
  }

  /// "tp=4,dp=2,pp=1", in axis order.
  std::string to_string() const {
    std::string result;
    for (std::size_t i = 0; i < num_axes; ++i) result += fmt::format("{}{}={}", i ? "," : "", axis_name(kinds[i]), sizes_[i]);
    return result;
  }

  friend constexpr bool operator==(const Mesh&, const Mesh&) = default;

 private:
  static constexpr Coord<num_axes> static_sizes_{Axes::static_size...};

  struct placeholder_tag {};
  constexpr explicit Mesh(placeholder_tag) : sizes_{Axes::static_size...} {}
  static constexpr Mesh dynamic_placeholder() { return Mesh(placeholder_tag{}); }

  constexpr void check_rank(std::int64_t rank) const {
    VERL_CHECK_ARG(rank >= 0 && rank < ::verl::detail::product(sizes_), "rank: expected a rank in [0, {}), got {}",
                   ::verl::detail::product(sizes_), rank);
  }
  static constexpr void check_axes(AxisSet axes) {
    for (AxisKind kind : megatron_axis_order) {
      VERL_CHECK_ARG(!axes.contains(kind) || has_axis(kind), "axes: expected axes of the mesh ({}), got {}",
                     Mesh::axes().to_string(), axis_name(kind));
    }
  }

  Coord<num_axes> sizes_;
};

template <class T>
struct is_mesh : std::false_type {};
template <MeshAxis... Axes>
struct is_mesh<Mesh<Axes...>> : std::true_type {};

/// Any `Mesh<...>`.
template <class T>
concept MeshType = is_mesh<std::remove_cvref_t<T>>::value;

/// Megatron's full mesh with every size given at run time.
using MegatronMesh = Mesh<TP<>, CP<>, EP<>, DP<>, PP<>>;

namespace detail {

template <std::int64_t World, MeshAxis... Axes>
struct mesh_of_world {
  static constexpr std::size_t inferred_axes = (std::size_t{0} + ... + std::size_t{Axes::static_size == inferred});
  VERL_STATIC_ASSERT(inferred_axes == 1, MESH_OF_WORLD_NEEDS_EXACTLY_ONE_INFERRED_AXIS);
  VERL_STATIC_ASSERT(((Axes::static_size == inferred || Axes::static_size > 0) && ...),
                     MESH_OF_WORLD_NEEDS_STATIC_POSITIVE_SIZES);
  static constexpr std::int64_t known = (std::int64_t{1} * ... * (Axes::static_size == inferred ? 1 : Axes::static_size));
  VERL_STATIC_ASSERT(World > 0 && known > 0 && World % known == 0, WORLD_SIZE_MUST_BE_DIVISIBLE_BY_THE_OTHER_AXES);
  static constexpr std::int64_t inferred_size = known > 0 && World % known == 0 ? World / known : 1;
  using type = Mesh<Axis<Axes::kind, Axes::static_size == inferred ? inferred_size : Axes::static_size>...>;
};

}  // namespace detail

/// The static mesh over World ranks where the axis sized `inferred` takes the remaining factor:
/// `MeshOfWorld<16, TP<4>, DP<inferred>, PP<2>>` is `Mesh<TP<4>, DP<2>, PP<2>>`.
template <std::int64_t World, MeshAxis... Axes>
using MeshOfWorld = typename detail::mesh_of_world<World, Axes...>::type;

}  // namespace verl::parallel
