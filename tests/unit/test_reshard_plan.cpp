// The 3D-HybridEngine reshard plan: the paper's Table 2 over every valid mesh pair of 1..64
// ranks, CuTe-style exhaustive post-conditions, parameter-level shard layouts, and errors.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "verl/parallel/reshard_plan.hpp"
#include "../support/error_message.hpp"

using namespace verl;
using namespace verl::parallel;
using verl::test_support::message_of;

namespace {

// HybridFlow Table 2, written out independently of the plan: per-rank communication, peak
// parameter memory and redundancy as fractions of M.
template <ReshardStrategy S>
constexpr ReshardCost paper_table2(const ReshardGeometry& g) {
  const std::int64_t t = g.train_tp, p = g.train_pp, d = g.train_dp, tg = g.gen_tp, pg = g.gen_pp;
  if constexpr (std::is_same_v<S, HybridFlow>) {
    return {Fraction{t * p - tg * pg, tg * pg * t * p}, Fraction{1, tg * pg}, Fraction{0}};
  } else if constexpr (std::is_same_v<S, HybridFlowV>) {
    return {Fraction{t * p - 1, t * p}, Fraction{1}, Fraction{1, t * p}};
  } else {
    return {Fraction{t * p * d - 1, t * p * d}, Fraction{1}, Fraction{1, t * p * d}};
  }
}

// ---- compile time: a static pair is a constant expression ------------------------------------
using Train = Mesh<TP<4>, DP<1>, PP<2>>;
using Gen = Mesh<TP<2>, DP<4>, PP<1>>;
constexpr auto kPlan = make_reshard_plan(Train{}, Gen{});
static_assert(kPlan.cost() == ReshardCost{Fraction{3, 8}, Fraction{1, 2}, Fraction{0}});
static_assert(kPlan.cost() == paper_table2<HybridFlow>(kPlan.geometry()));
static_assert(kPlan.micro_dp_group(0) == RankGroup{0, {{1, 2, 2, 1, 1}, {0, 1, 4, 0, 0}}});  // ranks 0, 1, 4, 5
static_assert(kPlan.generation_coords(5) == ParallelCoords{0, 0, 3});
static_assert(kPlan.generation_group(0, AxisKind::tp)[1] == 2);  // strided generation TP group [0, 2]
static_assert(kPlan.training_shard_in_place(7));
static_assert(make_reshard_plan<HybridFlowV>(Train{}, Gen{}).cost() ==
              ReshardCost{Fraction{7, 8}, Fraction{1}, Fraction{1, 8}});
static_assert(make_reshard_plan<FullAllGather>(Train{}, Gen{}).cost() ==
              ReshardCost{Fraction{7, 8}, Fraction{1}, Fraction{1, 8}});
static_assert(ReshardStrategy<HybridFlow> && ReshardStrategy<HybridFlowV> && ReshardStrategy<FullAllGather>);
static_assert(!ReshardStrategy<int>);

// Column-parallel gate/up fused weight: rank 1 of 4 holds rows 2..3 of gate and of up.
constexpr ParamSpec kGateUp = ParamSpec::fused_gate_up(8, 3);
static_assert(tp_shard(kGateUp, 4, 1).num_pieces == 2);
static_assert(tp_shard(kGateUp, 4, 1).pieces[1].offset == (8 + 2) * 3);
static_assert(place_shard(tp_shard(kGateUp, 4, 1), tp_shard(kGateUp, 2, 0)).copies[1] ==
              StridedCopy{6, 12 + 6, 6, 1, 6, 12});

// Every valid pair of small worlds satisfies the paper's figures at compile time.
template <ReshardStrategy S>
constexpr bool table2_holds_for_worlds_up_to(std::int64_t max_world) {
  for (std::int64_t world = 1; world <= max_world; ++world) {
    for (std::int64_t t = 1; t <= world; ++t) {
      for (std::int64_t p = 1; p * t <= world; ++p) {
        if (world % (t * p)) continue;
        for (std::int64_t tg = 1; tg <= t; ++tg) {
          for (std::int64_t pg = 1; pg <= p; ++pg) {
            if (t % tg || p % pg) continue;
            AxisSizes train, gen;
            train.set(AxisKind::tp, t), train.set(AxisKind::pp, p), train.set(AxisKind::dp, world / (t * p));
            gen.set(AxisKind::tp, tg), gen.set(AxisKind::pp, pg), gen.set(AxisKind::dp, world / (tg * pg));
            const ReshardPlan<S> plan(ReshardGeometry::from_sizes(train, gen));
            for (std::int64_t r = 0; r < world; ++r) {
              if (!(plan.cost(r) == paper_table2<S>(plan.geometry()))) return false;
            }
          }
        }
      }
    }
  }
  return true;
}
static_assert(table2_holds_for_worlds_up_to<HybridFlow>(8));
static_assert(table2_holds_for_worlds_up_to<HybridFlowV>(8));
static_assert(table2_holds_for_worlds_up_to<FullAllGather>(8));

struct Pair {
  std::int64_t t, p, d, tg, pg;
};

// Every (p, t, d) x (pg | p, tg | t) with p*t*d = world.
std::vector<Pair> all_valid_pairs(std::int64_t max_world) {
  std::vector<Pair> pairs;
  for (std::int64_t world = 1; world <= max_world; ++world) {
    for (std::int64_t t = 1; t <= world; ++t) {
      for (std::int64_t p = 1; p * t <= world; ++p) {
        if (world % (t * p)) continue;
        for (std::int64_t tg = 1; tg <= t; ++tg) {
          for (std::int64_t pg = 1; pg <= p; ++pg) {
            if (t % tg == 0 && p % pg == 0) pairs.push_back({t, p, world / (t * p), tg, pg});
          }
        }
      }
    }
  }
  return pairs;
}

template <class TrainMesh>
ReshardGeometry geometry_of(const Pair& x) {
  const auto train = TrainMesh::from_sizes(
      [&] {
        Coord<3> sizes{};
        for (std::size_t i = 0; i < 3; ++i) {
          const AxisKind k = TrainMesh::kinds[i];
          sizes[i] = k == AxisKind::tp ? x.t : k == AxisKind::pp ? x.p : x.d;
        }
        return sizes;
      }());
  const Mesh<TP<>, DP<>, PP<>> gen(x.tg, (x.t * x.p * x.d) / (x.tg * x.pg), x.pg);
  return make_reshard_geometry(train, gen);
}

// Regions as cells of the finest grid any plan uses: layers in units of 1/p, the TP-split
// dimension in units of 1/(t*d). Coverage is then counted cell by cell.
struct Grid {
  std::int64_t layers, columns;
  std::vector<std::int64_t> cells(const ModelRegion& r) const {
    auto index = [](Fraction x, std::int64_t units) {
      const Fraction scaled = x * Fraction{units};
      EXPECT_EQ(scaled.den(), 1) << "region off the grid";
      return scaled.num();
    };
    std::vector<std::int64_t> result;
    for (std::int64_t l = index(r.layer_begin, layers); l < index(r.layer_end, layers); ++l) {
      for (std::int64_t c = index(r.tp_begin, columns); c < index(r.tp_end, columns); ++c) result.push_back(l * columns + c);
    }
    return result;
  }
  std::int64_t size() const { return layers * columns; }
};

// The post-conditions, checked exhaustively.
template <ReshardStrategy S>
void check_plan_exhaustively(const ReshardPlan<S>& plan) {
  const ReshardGeometry& g = plan.geometry();
  const std::int64_t world = g.world_size();
  const Grid grid{g.train_pp, g.train_tp * g.train_dp};
  const std::string where = fmt::format("{} t={} p={} d={} tg={} pg={} strides tp={} pp={} dp={}", S::name, g.train_tp,
                                        g.train_pp, g.train_dp, g.gen_tp, g.gen_pp, g.tp_stride, g.pp_stride,
                                        g.dp_stride);
  // The generation rank layout is a permutation of the ranks, and coordinates round-trip.
  ASSERT_TRUE(is_bijection(plan.generation_layout())) << where;
  std::vector<int> coords_seen(static_cast<std::size_t>(world), 0);
  for (std::int64_t r = 0; r < world; ++r) {
    const ParallelCoords c = plan.generation_coords(r);
    ASSERT_TRUE(c.tp < g.gen_tp && c.pp < g.gen_pp && c.dp < g.gen_dp) << where;
    ASSERT_EQ(plan.generation_rank(c), r) << where;
    ++coords_seen[static_cast<std::size_t>(c.tp + g.gen_tp * (c.pp + g.gen_pp * c.dp))];
  }
  for (int n : coords_seen) ASSERT_EQ(n, 1) << where;

  // Gather groups partition the ranks; inside a group the contributions are disjoint and
  // their union is exactly the gathered region.
  std::vector<int> rank_seen(static_cast<std::size_t>(world), 0);
  std::vector<int> cell_hits(static_cast<std::size_t>(grid.size()));
  for (std::int64_t gi = 0; gi < plan.gather_group_count(); ++gi) {
    const RankGroup group = plan.gather_group_at(gi);
    std::fill(cell_hits.begin(), cell_hits.end(), 0);
    ModelRegion hull = plan.contributed_shard(group[0]);
    for (std::int64_t i = 0; i < group.size(); ++i) {
      const std::int64_t r = group[i];
      ++rank_seen[static_cast<std::size_t>(r)];
      ASSERT_EQ(plan.gather_group(r), group) << where;
      ASSERT_EQ(plan.gather_group_index(r), gi) << where;
      hull = hull.hull(plan.contributed_shard(r));
      for (std::int64_t cell : grid.cells(plan.contributed_shard(r))) ++cell_hits[static_cast<std::size_t>(cell)];
    }
    const ModelRegion gathered = plan.gathered_shard(group[0]);
    ASSERT_EQ(hull, gathered) << where;
    std::vector<int> expected(static_cast<std::size_t>(grid.size()), 0);
    for (std::int64_t cell : grid.cells(gathered)) expected[static_cast<std::size_t>(cell)] = 1;
    ASSERT_EQ(cell_hits, expected) << where << " group " << gi;
  }
  for (int n : rank_seen) ASSERT_EQ(n, 1) << where;

  for (std::int64_t r = 0; r < world; ++r) {
    // Micro-DP groups: size (t/tg)(p/pg), hold r, and agree among their members.
    const RankGroup micro = plan.micro_dp_group(r);
    ASSERT_EQ(micro.size(), g.micro_dp_size()) << where;
    ASSERT_TRUE(micro.contains(r)) << where;
    ASSERT_EQ(plan.micro_dp_group(micro[micro.size() - 1]), micro) << where;

    const ModelRegion gen = plan.generation_shard(r);
    ASSERT_TRUE(plan.gathered_shard(r).contains(gen)) << where << " rank " << r;
    ASSERT_EQ(plan.cost(r), plan.cost(0)) << where;
    if constexpr (S::keeps_training_shard_in_place) {
      // HybridFlow: the training shard is a piece of the generation shard (no second copy),
      // and the micro-DP group gathers exactly the generation shard.
      ASSERT_TRUE(plan.training_shard_in_place(r)) << where << " rank " << r;
      ASSERT_EQ(plan.gather_group(r), micro) << where;
    }
    // Generation TP and DP groups are ordered by their coordinate.
    const RankGroup tp_group = plan.generation_group(r, AxisKind::tp);
    ASSERT_EQ(tp_group.size(), g.gen_tp) << where;
    for (std::int64_t i = 0; i < tp_group.size(); ++i) ASSERT_EQ(plan.generation_coords(tp_group[i]).tp, i) << where;
    const RankGroup dp_group = plan.generation_group(r, AxisKind::dp);
    ASSERT_EQ(dp_group.size(), g.gen_dp) << where;
    ASSERT_EQ(plan.generation_coords(dp_group[dp_group.size() - 1]).dp, g.gen_dp - 1) << where;
  }

  // Every generation replica (tp x pp ranks of one generation dp index) covers the model
  // exactly once.
  for (std::int64_t dp = 0; dp < g.gen_dp; ++dp) {
    const RankGroup replica = plan.generation_group(plan.generation_rank({0, 0, dp}), AxisKind::tp | AxisKind::pp);
    ASSERT_EQ(replica.size(), g.gen_tp * g.gen_pp) << where;
    std::fill(cell_hits.begin(), cell_hits.end(), 0);
    for (std::int64_t member : replica) {
      ASSERT_EQ(plan.generation_coords(member).dp, dp) << where;
      for (std::int64_t cell : grid.cells(plan.generation_shard(member))) ++cell_hits[static_cast<std::size_t>(cell)];
    }
    for (int n : cell_hits) ASSERT_EQ(n, 1) << where << " replica " << dp;
  }

  // The paper's figures.
  ASSERT_EQ(plan.cost(), paper_table2<S>(g)) << where;
}

template <ReshardStrategy S, class TrainMesh>
void check_all_pairs() {
  for (const Pair& x : all_valid_pairs(64)) {
    check_plan_exhaustively(ReshardPlan<S>(geometry_of<TrainMesh>(x)));
    if (::testing::Test::HasFatalFailure()) return;
  }
}

}  // namespace

TEST(ReshardPlan, CountsEveryValidPairUpTo64Ranks) {
  // Sanity on the table itself: for 8 ranks, the sum over (t, p) with t*p | 8 of
  // divisors(t) * divisors(p) is 1+2+3+4 + 2+4+6 + 3+6 + 4 = 35.
  std::int64_t pairs_of_8 = 0;
  for (const Pair& x : all_valid_pairs(8)) pairs_of_8 += x.t * x.p * x.d == 8;
  EXPECT_EQ(pairs_of_8, 35);
  EXPECT_EQ(all_valid_pairs(64).size(), 3652u);  // the same sum over 1..64 ranks
}

TEST(ReshardPlan, HybridFlowMeetsTable2OnEveryPairMegatronOrder) { check_all_pairs<HybridFlow, Mesh<TP<>, DP<>, PP<>>>(); }
TEST(ReshardPlan, HybridFlowMeetsTable2OnEveryPairTpPpDpOrder) { check_all_pairs<HybridFlow, Mesh<TP<>, PP<>, DP<>>>(); }
TEST(ReshardPlan, HybridFlowVMeetsTable2OnEveryPair) { check_all_pairs<HybridFlowV, Mesh<TP<>, DP<>, PP<>>>(); }
TEST(ReshardPlan, FullAllGatherMeetsTable2OnEveryPair) { check_all_pairs<FullAllGather, Mesh<TP<>, DP<>, PP<>>>(); }

TEST(ReshardPlan, PaperFigureGroups) {
  // HybridFlow Fig. 8: t=4 training ranks, tg=2. Vanilla generation TP groups are consecutive
  // ([0,1], [2,3]); HybridFlow's are strided ([0,2], [1,3]) so that micro-DP groups [0,1] and
  // [2,3] each gather one generation shard that contains both members' training shards.
  const Mesh<TP<4>, DP<1>, PP<1>> train;
  const Mesh<TP<2>, DP<2>, PP<1>> gen;
  const auto hybridflow = make_reshard_plan<HybridFlow>(train, gen);
  const auto vanilla = make_reshard_plan<HybridFlowV>(train, gen);
  EXPECT_EQ(hybridflow.generation_group(0, AxisKind::tp).to_vector(), (std::vector<std::int64_t>{0, 2}));
  EXPECT_EQ(hybridflow.micro_dp_group(0).to_vector(), (std::vector<std::int64_t>{0, 1}));
  EXPECT_EQ(vanilla.generation_group(0, AxisKind::tp).to_vector(), (std::vector<std::int64_t>{0, 1}));
  EXPECT_EQ(vanilla.micro_dp_group(0).to_vector(), (std::vector<std::int64_t>{0, 2}));
  EXPECT_EQ(vanilla.gather_group(0).to_vector(), (std::vector<std::int64_t>{0, 1, 2, 3}));
  for (std::int64_t r = 0; r < 4; ++r) EXPECT_TRUE(hybridflow.training_shard_in_place(r));
  EXPECT_FALSE(vanilla.training_shard_in_place(1));
}

TEST(ReshardPlan, BytesForA7BModel) {
  // The example: train pp=2,tp=4,dp=1 -> gen pp=1,tp=2,dp=4, 7e9 bf16 parameters.
  const auto plan = make_reshard_plan(Mesh<TP<>, DP<>, PP<>>(4, 1, 2), Mesh<TP<>, DP<>, PP<>>(2, 4, 1));
  const std::int64_t model_bytes = 7'000'000'000LL * 2;
  EXPECT_EQ(plan.cost().bytes(model_bytes), (ReshardBytes{5'250'000'000LL, 7'000'000'000LL, 0}));
  EXPECT_EQ(ReshardPlan<FullAllGather>(plan.geometry()).cost().bytes(model_bytes),
            (ReshardBytes{12'250'000'000LL, 14'000'000'000LL, 1'750'000'000LL}));
}

TEST(ReshardPlan, RuntimeStrategyRegistry) {
  const ReshardGeometry g = make_reshard_geometry(Mesh<TP<>, DP<>, PP<>>(4, 2, 1), Mesh<TP<>, DP<>, PP<>>(1, 8, 1));
  for (std::string_view name : reshard_strategy_names) {
    const AnyReshardPlan plan = make_reshard_plan(name, g);
    std::visit([&](const auto& p) { EXPECT_EQ(p.strategy_name, name); }, plan);
  }
  try {
    (void)make_reshard_plan("deepspeed", g);
    FAIL() << "expected an exception";
  } catch (const InvalidArgument& e) {
    EXPECT_STREQ(e.what(), "strategy: expected one of hybridflow, hybridflow_v, full_allgather, got 'deepspeed'");
  }
}

TEST(ReshardPlan, InvalidDynamicPairsNameTheValues) {
  using M = Mesh<TP<>, DP<>, PP<>>;
  EXPECT_EQ(message_of([] { (void)make_reshard_plan(M(4, 2, 1), M(3, 1, 1)); }),
            "gen: axis tp: expected a divisor of the training tp 4, got 3");
  EXPECT_EQ(message_of([] { (void)make_reshard_plan(M(1, 1, 4), M(1, 1, 3)); }),
            "gen: axis pp: expected a divisor of the training pp 4, got 3");
  EXPECT_EQ(message_of([] { (void)make_reshard_plan(M(4, 2, 1), M(2, 2, 1)); }),
            "gen: expected the training world size 8 (tp=4 pp=1 dp=2), got 4 (tp=2 pp=1 dp=2)");
  EXPECT_EQ(message_of([] { (void)make_reshard_plan(Mesh<TP<>, CP<>, DP<>>(2, 2, 1), M(2, 2, 1)); }),
            "train: axis cp: expected size 1 (resharding maps tp, pp and dp), got 2");
  EXPECT_EQ(message_of([] { (void)make_reshard_plan(M(2, 1, 1), M(2, 1, 1)).generation_coords(2); }),
            "rank: expected a rank in [0, 2), got 2");
}

// ---- parameter-level layouts ----------------------------------------------------------------------
namespace {

std::vector<ParamSpec> parameter_zoo() {
  return {
      ParamSpec::column_parallel(48, 5),              // q_proj-like
      ParamSpec::column_parallel(48),                 // its bias
      ParamSpec::row_parallel(7, 48),                 // o_proj / down_proj
      ParamSpec::fused_gate_up(48, 3),                // interleaved gate/up
      ParamSpec::fused_qkv(48, 16, 1, 2),             // GQA qkv, blocks of different sizes
      ParamSpec::interleaved_qkv(48, 3, 2, 2),        // Megatron's per-group interleaved qkv
      ParamSpec::replicated(11),                      // layer norm
  };
}

}  // namespace

TEST(ParamShard, MicroDpShardsTileTheGenerationShardElementByElement) {
  for (const ParamSpec& param : parameter_zoo()) {
    for (std::int64_t t : {1, 2, 4, 8, 16}) {
      for (std::int64_t tg = 1; tg <= t; ++tg) {
        if (t % tg) continue;
        const std::int64_t k = t / tg;
        for (std::int64_t b = 0; b < tg; ++b) {
          const ParamShard gen = tp_shard(param, tg, b);
          std::vector<int> hits(static_cast<std::size_t>(gen.size()), 0);
          // HybridFlow's micro-DP group of generation TP rank b: training TP ranks b*k + a.
          for (std::int64_t a = 0; a < k; ++a) {
            const ParamShard train = tp_shard(param, t, b * k + a);
            const ShardPlacement placement = place_shard(train, gen);
            std::vector<std::int64_t> inner(static_cast<std::size_t>(train.size()));
            for (std::int64_t i = 0; i < train.size(); ++i) inner[static_cast<std::size_t>(i)] = train.global_index(i);
            std::vector<std::int64_t> outer(static_cast<std::size_t>(gen.size()), -1);
            placement.apply(inner.data(), outer.data());
            for (std::int64_t i = 0; i < gen.size(); ++i) {
              if (outer[static_cast<std::size_t>(i)] < 0) continue;
              ASSERT_EQ(outer[static_cast<std::size_t>(i)], gen.global_index(i));
              ++hits[static_cast<std::size_t>(i)];
            }
            std::vector<std::int64_t> back(inner.size(), -1);
            placement.extract(outer.data(), back.data());
            ASSERT_EQ(back, inner);
          }
          const bool replicated = param.split == TensorParallelSplit::replicated;
          for (int h : hits) ASSERT_EQ(h, replicated ? k : 1) << to_string(param.split) << " t=" << t << " tg=" << tg;
        }
      }
    }
  }
}

TEST(ParamShard, ShardsOfOneSizePartitionTheParameter) {
  for (const ParamSpec& param : parameter_zoo()) {
    if (param.split == TensorParallelSplit::replicated) continue;
    for (std::int64_t n : {1, 2, 4, 8, 16}) {
      std::vector<int> hits(static_cast<std::size_t>(param.numel()), 0);
      for (std::int64_t i = 0; i < n; ++i) {
        const ParamShard shard = tp_shard(param, n, i);
        ASSERT_EQ(shard.size() * n, param.numel());
        for (std::int64_t j = 0; j < shard.size(); ++j) ++hits[static_cast<std::size_t>(shard.global_index(j))];
      }
      for (int h : hits) ASSERT_EQ(h, 1);
    }
  }
}

TEST(ParamShard, LayoutsMatchMegatron) {
  // Row-parallel [rows=2, cols=8] over 4 ranks: rank 1 holds columns 2..3 of both rows.
  const ParamShard row = tp_shard(ParamSpec::row_parallel(2, 8), 4, 1);
  EXPECT_EQ(row.pieces[0], (ShardPiece{2, {{2, 2}, {1, 8}}}));
  // gate/up over 2 ranks, concatenated in rank order: [gate0 up0 gate1 up1] (interleaved).
  const ParamSpec gate_up = ParamSpec::fused_gate_up(4, 1);
  std::vector<std::int64_t> concatenated;
  for (std::int64_t r = 0; r < 2; ++r) {
    const ParamShard s = tp_shard(gate_up, 2, r);
    for (std::int64_t j = 0; j < s.size(); ++j) concatenated.push_back(s.global_index(j));
  }
  EXPECT_EQ(concatenated, (std::vector<std::int64_t>{0, 1, 4, 5, 2, 3, 6, 7}));
  // Megatron's qkv with 4 query groups of (2 q + k + v) heads of dim 1 splits whole groups.
  EXPECT_EQ(tp_shard(ParamSpec::interleaved_qkv(4, 2, 1, 1), 2, 1).pieces[0].offset, 8);
}

TEST(ParamShard, ErrorsNameTheSizes) {
  EXPECT_EQ(message_of([] { (void)tp_shard(ParamSpec::row_parallel(2, 6), 4, 0); }),
            "param: expected the tensor-parallel size 4 to divide the 6 columns of a row-parallel weight");
  EXPECT_EQ(message_of([] { (void)tp_shard(ParamSpec::interleaved_qkv(4, 2, 1, 1), 8, 0); }),
            "param: expected the tensor-parallel size 8 to divide the 16 rows of block 0 in units of 4");
  EXPECT_EQ(message_of([] {
              const ParamSpec p = ParamSpec::column_parallel(8, 2);
              (void)place_shard(tp_shard(p, 4, 2), tp_shard(p, 2, 0));
            }),
            "inner: expected piece 0 (offset 8, 1 runs of 4) inside outer's (offset 0, 1 runs of 8)");
  EXPECT_EQ(message_of([] { (void)ParamSpec::column_parallel(0, 2); }), "param: expected a positive shape, got [0, 2]");
}
