// Meshes of named axes: Megatron's rank order, groups as slices, static and dynamic sizes
// behaving alike, and named errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "verl/parallel/mesh.hpp"
#include "../support/error_message.hpp"

using namespace verl;
using namespace verl::parallel;
using verl::test_support::message_of;

namespace {

// ---- compile-time checks: a static mesh is a constant expression ------------------------------
using Megatron16 = Mesh<TP<2>, DP<2>, PP<4>>;  // Megatron's docstring example: 16 GPUs, tp=2, pp=4
constexpr Megatron16 kMegatron16{};
static_assert(Megatron16::is_static);
static_assert(std::is_same_v<decltype(kMegatron16.world_size()), const Int<16>> ||
              std::is_same_v<decltype(kMegatron16.world_size()), Int<16>>);
static_assert(kMegatron16.size<AxisKind::tp>() == 2 && kMegatron16.size<AxisKind::cp>() == 1);
static_assert(kMegatron16.rank_of({1, 1, 3}) == 1 + 2 + 12);
static_assert(kMegatron16.coord(13, AxisKind::pp) == 3);
static_assert(kMegatron16.group(5, AxisKind::tp) == RankGroup{4, {{1, 2, 1, 1, 1}, {0, 1, 0, 0, 0}}});
static_assert(kMegatron16.group(5, AxisKind::pp).to_vector().size() == 4);
static_assert(kMegatron16.group(5, AxisKind::pp)[2] == 9);
static_assert(kMegatron16.group_count(AxisKind::dp) == 8);
static_assert(is_bijection(kMegatron16.layout()));
static_assert(std::is_same_v<MeshOfWorld<16, TP<4>, DP<inferred>, PP<2>>, Mesh<TP<4>, DP<2>, PP<2>>>);
static_assert(MeshType<Megatron16> && !MeshType<int>);

// Megatron's generate_masked_orthogonal_rank_groups, written independently as the reference:
// the rank of (group g, member m) for the axes in `mask`.
std::vector<std::vector<std::int64_t>> reference_groups(const std::vector<std::int64_t>& sizes,
                                                        const std::vector<bool>& mask) {
  std::vector<std::int64_t> strides(sizes.size());
  std::int64_t running = 1;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    strides[i] = running;
    running *= sizes[i];
  }
  std::vector<std::int64_t> masked_sizes, masked_strides, other_sizes, other_strides;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    (mask[i] ? masked_sizes : other_sizes).push_back(sizes[i]);
    (mask[i] ? masked_strides : other_strides).push_back(strides[i]);
  }
  auto product = [](const std::vector<std::int64_t>& v) {
    std::int64_t p = 1;
    for (auto x : v) p *= x;
    return p;
  };
  auto inner = [](std::int64_t index, const std::vector<std::int64_t>& shape, const std::vector<std::int64_t>& stride) {
    std::int64_t offset = 0;
    for (std::size_t i = 0; i < shape.size(); ++i) {
      offset += (index % shape[i]) * stride[i];
      index /= shape[i];
    }
    return offset;
  };
  std::vector<std::vector<std::int64_t>> groups;
  for (std::int64_t g = 0; g < product(other_sizes); ++g) {
    std::vector<std::int64_t> ranks;
    for (std::int64_t m = 0; m < product(masked_sizes); ++m) {
      ranks.push_back(inner(g, other_sizes, other_strides) + inner(m, masked_sizes, masked_strides));
    }
    groups.push_back(ranks);
  }
  return groups;
}

template <class M>
void check_mesh_exhaustively(const M& mesh) {
  const std::int64_t world = mesh.world_size();
  ASSERT_TRUE(is_bijection(mesh.layout()));
  for (std::int64_t r = 0; r < world; ++r) ASSERT_EQ(mesh.rank_of(mesh.coords(r)), r);
  std::vector<std::int64_t> sizes(mesh.sizes().begin(), mesh.sizes().end());
  // Every subset of the mesh's axes: groups match the reference and partition the ranks.
  for (unsigned subset = 0; subset < (1u << M::num_axes); ++subset) {
    AxisSet axes;
    std::vector<bool> mask(M::num_axes);
    for (std::size_t i = 0; i < M::num_axes; ++i) {
      mask[i] = (subset >> i) & 1u;
      if (mask[i]) axes = axes | M::kinds[i];
    }
    const auto expected = reference_groups(sizes, mask);
    ASSERT_EQ(mesh.group_count(axes), static_cast<std::int64_t>(expected.size()));
    for (std::int64_t g = 0; g < mesh.group_count(axes); ++g) {
      const RankGroup group = mesh.group_at(axes, g);
      ASSERT_EQ(group.to_vector(), expected[static_cast<std::size_t>(g)]) << mesh.to_string() << " " << axes.to_string();
      for (std::int64_t i = 0; i < group.size(); ++i) {
        const std::int64_t r = group[i];
        ASSERT_EQ(mesh.group_index(r, axes), g);
        ASSERT_EQ(mesh.group(r, axes), group);
        ASSERT_EQ(group.index_of(r), i);
      }
    }
    std::int64_t non_members = 0;
    const RankGroup first = mesh.group_at(axes, 0);
    for (std::int64_t r = 0; r < world; ++r) non_members += first.contains(r) ? 0 : 1;
    ASSERT_EQ(non_members, world - first.size());
  }
}

}  // namespace

TEST(Mesh, MegatronDocstringGroups) {
  // Megatron's parallel_state docstring: 16 GPUs, tp=2, pp=4 (dp=2).
  const Megatron16 mesh;
  EXPECT_EQ(mesh.group_at(AxisKind::tp, 0).to_vector(), (std::vector<std::int64_t>{0, 1}));
  EXPECT_EQ(mesh.group_at(AxisKind::tp, 7).to_vector(), (std::vector<std::int64_t>{14, 15}));
  EXPECT_EQ(mesh.group_at(AxisKind::dp, 0).to_vector(), (std::vector<std::int64_t>{0, 2}));
  EXPECT_EQ(mesh.group_at(AxisKind::dp, 1).to_vector(), (std::vector<std::int64_t>{1, 3}));
  EXPECT_EQ(mesh.group_at(AxisKind::dp, 2).to_vector(), (std::vector<std::int64_t>{4, 6}));
  EXPECT_EQ(mesh.group_at(AxisKind::pp, 0).to_vector(), (std::vector<std::int64_t>{0, 4, 8, 12}));
  EXPECT_EQ(mesh.group_at(AxisKind::pp, 3).to_vector(), (std::vector<std::int64_t>{3, 7, 11, 15}));
  EXPECT_EQ(mesh.group(6, AxisKind::tp | AxisKind::dp).to_vector(), (std::vector<std::int64_t>{4, 5, 6, 7}));
}

TEST(Mesh, StaticAndDynamicSizesBehaveAlike) {
  const Mesh<TP<2>, DP<2>, PP<4>> fixed;
  const Mesh<TP<>, DP<>, PP<>> runtime(2, 2, 4);
  const Mesh<TP<2>, DP<>, PP<4>> mixed(2);
  EXPECT_EQ(runtime.world_size(), 16);
  EXPECT_EQ(mixed.world_size(), 16);
  static_assert(std::is_same_v<decltype(mixed.size<AxisKind::tp>()), Int<2>>);
  static_assert(std::is_same_v<decltype(mixed.size<AxisKind::dp>()), std::int64_t>);
  for (std::int64_t r = 0; r < 16; ++r) {
    EXPECT_EQ(fixed.coords(r), runtime.coords(r));
    EXPECT_EQ(fixed.coords(r), mixed.coords(r));
    for (AxisSet axes : {AxisSet(AxisKind::tp), AxisSet(AxisKind::dp), AxisSet(AxisKind::pp),
                         AxisKind::tp | AxisKind::pp}) {
      EXPECT_EQ(fixed.group(r, axes), runtime.group(r, axes));
      EXPECT_EQ(fixed.group(r, axes), mixed.group(r, axes));
    }
  }
  EXPECT_EQ((Mesh<TP<>, DP<>, PP<>>::from_sizes({2, 2, 4})), runtime);
}

TEST(Mesh, EveryThreeAxisMeshUpTo64RanksMatchesTheReference) {
  for (std::int64_t world = 1; world <= 64; ++world) {
    for (std::int64_t tp = 1; tp <= world; ++tp) {
      if (world % tp) continue;
      for (std::int64_t pp = 1; pp <= world / tp; ++pp) {
        if ((world / tp) % pp) continue;
        const Mesh<TP<>, DP<>, PP<>> mesh = Mesh<TP<>, DP<>, PP<>>::of_world(world, tp, inferred, pp);
        ASSERT_EQ(mesh.size(AxisKind::dp) * tp * pp, world);
        check_mesh_exhaustively(mesh);
        if (HasFatalFailure()) return;
      }
    }
  }
}

TEST(Mesh, FullMegatronOrderMeshes) {
  // Every factorisation of 24 and 32 ranks over tp-cp-ep-dp-pp.
  for (std::int64_t world : {24, 32}) {
    for (std::int64_t tp = 1; tp <= world; ++tp) {
      for (std::int64_t cp = 1; cp <= world; ++cp) {
        for (std::int64_t ep = 1; ep <= world; ++ep) {
          for (std::int64_t pp = 1; pp <= world; ++pp) {
            if (world % (tp * cp * ep * pp)) continue;
            const auto mesh = MegatronMesh::of_world(world, tp, cp, ep, inferred, pp);
            check_mesh_exhaustively(mesh);
            if (HasFatalFailure()) return;
          }
        }
      }
    }
  }
}

TEST(Mesh, OtherAxisOrdersAreOtherLayouts) {
  // Order is part of the type: tp-pp-dp puts pipeline stages before data replicas.
  const Mesh<TP<2>, PP<2>, DP<2>> mesh;
  EXPECT_EQ(mesh.group(0, AxisKind::dp).to_vector(), (std::vector<std::int64_t>{0, 4}));
  EXPECT_EQ(mesh.group(0, AxisKind::pp).to_vector(), (std::vector<std::int64_t>{0, 2}));
  EXPECT_EQ(mesh.stride(AxisKind::dp), 4);
  EXPECT_EQ(mesh.stride(AxisKind::ep), 0);
  EXPECT_EQ(mesh.to_string(), "tp=2,pp=2,dp=2");
}

TEST(Mesh, InvalidDynamicMeshesNameTheValues) {
  using M = Mesh<TP<>, DP<>, PP<>>;
  EXPECT_EQ(message_of([] { M(2, 0, 4); }), "mesh: axis dp: expected a positive size, got 0");
  EXPECT_EQ(message_of([] { (void)M::of_world(8, 3, inferred, 1); }),
            "world_size: expected a multiple of the other axes' product 3 to infer axis dp, got 8");
  EXPECT_EQ(message_of([] { (void)M::of_world(8, 2, 2, 1); }),
            "world_size: expected the product of the axis sizes 4, got 8");
  EXPECT_EQ(message_of([] { (void)M::of_world(8, inferred, inferred, 1); }),
            "mesh: expected at most one inferred axis, got tp and dp");
  EXPECT_EQ(message_of([] { (void)Mesh<TP<4>, DP<>>::from_sizes({2, 2}); }),
            "mesh: axis tp: expected the static size 4, got 2");
  EXPECT_EQ(message_of([] { (void)M(2, 2, 2).coords(8); }), "rank: expected a rank in [0, 8), got 8");
  EXPECT_EQ(message_of([] { (void)M(2, 2, 2).group(0, AxisKind::cp); }),
            "axes: expected axes of the mesh (tp-dp-pp), got cp");
  EXPECT_EQ(message_of([] { (void)M(2, 2, 2).rank_of({0, 2, 0}); }),
            "coords: axis dp: expected a coordinate in [0, 2), got 2");
  EXPECT_EQ(message_of([] { (void)M::from_axis_sizes(parse_axis_sizes("tp=2,ep=2"), "--train"); }),
            "--train: axis ep: expected size 1 (the mesh has axes tp-dp-pp), got 2");
}

TEST(AxisSizes, ParsesAndRejectsWithNamedMessages) {
  const AxisSizes sizes = parse_axis_sizes("pp=2,tp=4,dp=1");
  EXPECT_EQ(sizes[AxisKind::pp], 2);
  EXPECT_EQ(sizes[AxisKind::tp], 4);
  EXPECT_EQ(sizes[AxisKind::cp], 1);
  EXPECT_EQ(sizes.world_size(), 8);
  EXPECT_EQ(parse_axis_sizes("sp=4")[AxisKind::cp], 4);
  const auto mesh = Mesh<TP<>, DP<>, PP<>>::from_axis_sizes(sizes);
  EXPECT_EQ(mesh.to_string(), "tp=4,dp=1,pp=2");

  auto message_of = [](std::string_view text) -> std::string {
    try {
      (void)parse_axis_sizes(text, "--gen");
    } catch (const InvalidArgument& e) {
      return e.what();
    }
    return "no exception";
  };
  EXPECT_EQ(message_of("tp=2,tp=4"), "--gen: expected each axis at most once, got tp twice in 'tp=2,tp=4'");
  EXPECT_EQ(message_of("tp=0"), "--gen: axis tp: expected a positive size, got 0");
  EXPECT_EQ(message_of("xp=2"), "--gen: expected axis names among tp, cp, sp, ep, dp, pp, got 'xp' in 'xp=2'");
  EXPECT_EQ(message_of("tp=two"), "--gen: axis tp: expected an integer size, got 'two'");
  EXPECT_EQ(message_of("tp=2,"), "--gen: expected items like 'tp=4', got '' in 'tp=2,'");
  EXPECT_EQ(message_of(""), "--gen: expected axis sizes like 'pp=2,tp=4,dp=1', got an empty string");
}

TEST(Layout, DivideAndInverse) {
  constexpr Layout<1> tp{{8}, {1}};
  constexpr Layout<2> divided = divide_mode(tp, 0, 2);
  static_assert(divided == Layout<2>{{2, 4}, {1, 2}});
  static_assert(divided.index_of(5) == 5);
  constexpr Layout<2> strided{{2, 2}, {4, 1}};
  static_assert(strided.index_of(5) == 3 && !strided.index_of(2).has_value());
  static_assert(make_row_major(Coord<2>{3, 4}) == Layout<2>{{3, 4}, {4, 1}});
  static_assert(!is_bijection(Layout<2>{{2, 2}, {1, 1}}));
  EXPECT_EQ(to_string(divided), "(2,4):(1,2)");
  EXPECT_THROW((void)divide_mode(tp, 0, 3), InvalidArgument);
}
