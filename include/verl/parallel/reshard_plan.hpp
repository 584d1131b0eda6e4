// The 3D-HybridEngine reshard plan (HybridFlow §5.4) from a training mesh (p, t, d) to a
// generation mesh (pg, tg, dg) over the same ranks, as a layout transformation:
//
//   training TP mode  t:s_tp  divided by t/tg  ->  (t/tg, tg) : (s_tp, (t/tg) s_tp)
//   training PP mode  p:s_pp  divided by p/pg  ->  (p/pg, pg) : (s_pp, (p/pg) s_pp)
//
// The inner modes (t/tg, p/pg) form a micro-DP group — the ranks that all-gather one generation
// shard — and the outer modes are the generation TP and PP coordinates. The generation rank
// layout is (tg, t/tg, p/pg, d, pg) with generation dp = the column-major index of the middle
// three modes. With static meshes everything below is a constant expression and an invalid pair
// is a compile error; with dynamic meshes the same code runs and throws.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>

#include "verl/config.hpp"
#include "verl/core/error.hpp"
#include "verl/core/int_tuple.hpp"
#include "verl/core/layout.hpp"
#include "verl/parallel/axis.hpp"
#include "verl/parallel/axis_sizes.hpp"
#include "verl/parallel/fraction.hpp"
#include "verl/parallel/mesh.hpp"
#include "verl/parallel/param_shard.hpp"
#include "verl/parallel/rank_group.hpp"
#include "verl/parallel/reshard_strategy.hpp"

namespace verl::parallel {

/// Coordinates of a rank in the training mesh (or the generation mesh).
struct ParallelCoords {
  std::int64_t tp = 0;
  std::int64_t pp = 0;
  std::int64_t dp = 0;
  friend constexpr bool operator==(const ParallelCoords&, const ParallelCoords&) = default;
};

/// A box of the model: a range of layers times a range of every parameter's TP-split
/// dimension, both as fractions of the whole. Its volume is the fraction of M it holds.
struct ModelRegion {
  Fraction layer_begin{0};
  Fraction layer_end{1};
  Fraction tp_begin{0};
  Fraction tp_end{1};

  constexpr Fraction volume() const { return (layer_end - layer_begin) * (tp_end - tp_begin); }
  constexpr bool contains(const ModelRegion& other) const {
    return layer_begin <= other.layer_begin && other.layer_end <= layer_end && tp_begin <= other.tp_begin &&
           other.tp_end <= tp_end;
  }
  constexpr bool overlaps(const ModelRegion& other) const {
    return layer_begin < other.layer_end && other.layer_begin < layer_end && tp_begin < other.tp_end &&
           other.tp_begin < tp_end;
  }
  /// The smallest box holding both.
  constexpr ModelRegion hull(const ModelRegion& other) const {
    return {min(layer_begin, other.layer_begin), max(layer_end, other.layer_end), min(tp_begin, other.tp_begin),
            max(tp_end, other.tp_end)};
  }
  friend constexpr bool operator==(const ModelRegion&, const ModelRegion&) = default;
};

/// Per-rank bytes for a model of a given size.
struct ReshardBytes {
  std::int64_t comm_bytes_per_rank = 0;
  std::int64_t peak_param_bytes_per_rank = 0;
  std::int64_t redundant_bytes_per_rank = 0;
  friend constexpr bool operator==(const ReshardBytes&, const ReshardBytes&) = default;
};

/// Per-rank costs as fractions of the model size M (the same for every rank).
struct ReshardCost {
  Fraction comm;       ///< received during the all-gather
  Fraction peak;       ///< parameter memory held for generation
  Fraction redundant;  ///< training weights kept beside the generation weights
  constexpr ReshardBytes bytes(std::int64_t model_bytes) const noexcept {
    return {comm.ceil_of(model_bytes), peak.ceil_of(model_bytes), redundant.ceil_of(model_bytes)};
  }
  friend constexpr bool operator==(const ReshardCost&, const ReshardCost&) = default;
};

/// Sizes of a (training, generation) mesh pair and the training mesh's rank strides.
struct ReshardGeometry {
  std::int64_t train_tp = 1, train_pp = 1, train_dp = 1;
  std::int64_t gen_tp = 1, gen_pp = 1, gen_dp = 1;
  std::int64_t tp_stride = 1, pp_stride = 1, dp_stride = 1;

  constexpr std::int64_t world_size() const noexcept { return train_tp * train_pp * train_dp; }
  /// Ranks of a micro-DP group along training TP (t/tg) and PP (p/pg).
  constexpr std::int64_t micro_dp_tp() const noexcept { return train_tp / gen_tp; }
  constexpr std::int64_t micro_dp_pp() const noexcept { return train_pp / gen_pp; }
  constexpr std::int64_t micro_dp_size() const noexcept { return micro_dp_tp() * micro_dp_pp(); }

  constexpr ParallelCoords train_coords(std::int64_t rank) const {
    VERL_CHECK_ARG(rank >= 0 && rank < world_size(), "rank: expected a rank in [0, {}), got {}", world_size(), rank);
    return {(rank / tp_stride) % train_tp, (rank / pp_stride) % train_pp, (rank / dp_stride) % train_dp};
  }
  constexpr std::int64_t train_rank(const ParallelCoords& c) const noexcept {
    return c.tp * tp_stride + c.pp * pp_stride + c.dp * dp_stride;
  }

  /// Validates a pair of sizes; the training ranks are laid out in Megatron's tp-dp-pp order.
  /// A generation dp that is not given is inferred from the world size.
  static constexpr ReshardGeometry from_sizes(const AxisSizes& train, const AxisSizes& gen) {
    for (AxisKind kind : {AxisKind::cp, AxisKind::ep}) {
      VERL_CHECK_ARG(train[kind] == 1, "train: axis {}: expected size 1 (resharding maps tp, pp and dp), got {}",
                     axis_name(kind), train[kind]);
      VERL_CHECK_ARG(gen[kind] == 1, "gen: axis {}: expected size 1 (resharding maps tp, pp and dp), got {}",
                     axis_name(kind), gen[kind]);
    }
    ReshardGeometry g;
    g.train_tp = train[AxisKind::tp];
    g.train_pp = train[AxisKind::pp];
    g.train_dp = train[AxisKind::dp];
    g.gen_tp = gen[AxisKind::tp];
    g.gen_pp = gen[AxisKind::pp];
    // Generation dp, when not given, takes the ranks left over (like Megatron's dp).
    const std::int64_t gen_model_parallel = g.gen_tp * g.gen_pp;
    g.gen_dp = gen.has(AxisKind::dp) || gen_model_parallel <= 0 || (train.world_size() % gen_model_parallel) != 0
                   ? gen[AxisKind::dp]
                   : train.world_size() / gen_model_parallel;
    g.tp_stride = 1;
    g.dp_stride = g.train_tp;
    g.pp_stride = g.train_tp * g.train_dp;
    g.validate();
    return g;
  }

  constexpr void validate() const {
    VERL_CHECK_ARG(train_tp > 0 && train_pp > 0 && train_dp > 0 && gen_tp > 0 && gen_pp > 0 && gen_dp > 0,
                   "mesh: expected positive sizes, got train tp={} pp={} dp={}, gen tp={} pp={} dp={}", train_tp,
                   train_pp, train_dp, gen_tp, gen_pp, gen_dp);
    VERL_CHECK_ARG(train_tp % gen_tp == 0, "gen: axis tp: expected a divisor of the training tp {}, got {}", train_tp,
                   gen_tp);
    VERL_CHECK_ARG(train_pp % gen_pp == 0, "gen: axis pp: expected a divisor of the training pp {}, got {}", train_pp,
                   gen_pp);
    VERL_CHECK_ARG(gen_tp * gen_pp * gen_dp == world_size(),
                   "gen: expected the training world size {} (tp={} pp={} dp={}), got {} (tp={} pp={} dp={})",
                   world_size(), train_tp, train_pp, train_dp, gen_tp * gen_pp * gen_dp, gen_tp, gen_pp, gen_dp);
  }

  friend constexpr bool operator==(const ReshardGeometry&, const ReshardGeometry&) = default;
};

namespace detail {

template <class I>
constexpr std::int64_t static_value_or(std::int64_t fallback) {
  if constexpr (StaticInt<I>) {
    return std::remove_cvref_t<I>::value;
  } else {
    return fallback;
  }
}

}  // namespace detail

/// The geometry of a mesh pair. Static sizes are checked at compile time (named static
/// asserts), dynamic ones at run time.
template <MeshType Train, MeshType Gen>
constexpr ReshardGeometry make_reshard_geometry(const Train& train, const Gen& gen) {
  using TrainTp = decltype(train.template size<AxisKind::tp>());
  using GenTp = decltype(gen.template size<AxisKind::tp>());
  using TrainPp = decltype(train.template size<AxisKind::pp>());
  using GenPp = decltype(gen.template size<AxisKind::pp>());
  if constexpr (StaticInt<TrainTp> && StaticInt<GenTp>) {
    VERL_STATIC_ASSERT(TrainTp::value % GenTp::value == 0, TRAIN_TP_MUST_BE_A_MULTIPLE_OF_GEN_TP);
  }
  if constexpr (StaticInt<TrainPp> && StaticInt<GenPp>) {
    VERL_STATIC_ASSERT(TrainPp::value % GenPp::value == 0, TRAIN_PP_MUST_BE_A_MULTIPLE_OF_GEN_PP);
  }
  if constexpr (Train::is_static && Gen::is_static) {
    VERL_STATIC_ASSERT(decltype(train.world_size())::value == decltype(gen.world_size())::value,
                       RESHARD_MESHES_MUST_HAVE_THE_SAME_WORLD_SIZE);
  }
  VERL_STATIC_ASSERT((detail::static_value_or<decltype(train.template size<AxisKind::cp>())>(1) == 1 &&
                      detail::static_value_or<decltype(train.template size<AxisKind::ep>())>(1) == 1 &&
                      detail::static_value_or<decltype(gen.template size<AxisKind::cp>())>(1) == 1 &&
                      detail::static_value_or<decltype(gen.template size<AxisKind::ep>())>(1) == 1),
                     RESHARD_MESHES_MAY_ONLY_SPLIT_TP_PP_DP);

  AxisSizes train_sizes, gen_sizes;
  for (AxisKind kind : megatron_axis_order) {
    train_sizes.set(kind, train.size(kind));
    gen_sizes.set(kind, gen.size(kind));
  }
  ReshardGeometry g = ReshardGeometry::from_sizes(train_sizes, gen_sizes);
  // The training mesh's own order decides which ranks are neighbours.
  g.tp_stride = train.has_axis(AxisKind::tp) ? train.stride(AxisKind::tp) : 1;
  g.pp_stride = train.has_axis(AxisKind::pp) ? train.stride(AxisKind::pp) : 1;
  g.dp_stride = train.has_axis(AxisKind::dp) ? train.stride(AxisKind::dp) : 1;
  return g;
}

/// The reshard plan of one strategy: groups, coordinates, shards and costs, per rank.
template <ReshardStrategy S = HybridFlow>
class ReshardPlan {
 public:
  using Strategy = S;
  static constexpr std::string_view strategy_name = S::name;

  /// Modes of the generation rank layout.
  enum Mode : std::size_t { gen_tp_mode = 0, micro_tp_mode = 1, micro_pp_mode = 2, train_dp_mode = 3, gen_pp_mode = 4 };

  constexpr explicit ReshardPlan(const ReshardGeometry& geometry) : g_(geometry) { g_.validate(); }

  constexpr const ReshardGeometry& geometry() const noexcept { return g_; }
  constexpr std::int64_t world_size() const noexcept { return g_.world_size(); }

  // ---- the generation mesh over the ranks ----------------------------------------------------
  /// rank = layout(gen tp, micro tp, micro pp, train dp, gen pp): the training TP and PP modes
  /// divided into (micro-DP part, generation part), ordered as the strategy lays them out.
  constexpr Layout<5> generation_layout() const noexcept {
    const std::int64_t kt = g_.micro_dp_tp(), kp = g_.micro_dp_pp();
    Layout<5> layout{{g_.gen_tp, kt, kp, g_.train_dp, g_.gen_pp}, {}};
    if constexpr (S::generation_order == GenerationOrder::micro_dp_fastest) {
      // divide(t:s, t/tg): the micro-DP part is the inner (fast) mode.
      layout.stride = {kt * g_.tp_stride, g_.tp_stride, g_.pp_stride, g_.dp_stride, kp * g_.pp_stride};
    } else {
      // consecutive training ranks are consecutive generation ranks.
      layout.stride = {g_.tp_stride, g_.gen_tp * g_.tp_stride, g_.gen_pp * g_.pp_stride, g_.dp_stride, g_.pp_stride};
    }
    return layout;
  }

  constexpr ParallelCoords generation_coords(std::int64_t rank) const {
    const Coord<5> c = generation_coord(rank);
    return {c[gen_tp_mode], c[gen_pp_mode],
            c[micro_tp_mode] + g_.micro_dp_tp() * (c[micro_pp_mode] + g_.micro_dp_pp() * c[train_dp_mode])};
  }

  constexpr std::int64_t generation_rank(const ParallelCoords& gen) const {
    VERL_CHECK_ARG(gen.tp >= 0 && gen.tp < g_.gen_tp && gen.pp >= 0 && gen.pp < g_.gen_pp && gen.dp >= 0 &&
                       gen.dp < g_.gen_dp,
                   "gen: expected coordinates below tp={} pp={} dp={}, got tp={} pp={} dp={}", g_.gen_tp, g_.gen_pp,
                   g_.gen_dp, gen.tp, gen.pp, gen.dp);
    const std::int64_t kt = g_.micro_dp_tp(), kp = g_.micro_dp_pp();
    return generation_layout()(Coord<5>{gen.tp, gen.dp % kt, (gen.dp / kt) % kp, gen.dp / (kt * kp), gen.pp});
  }

  /// The generation group of `rank` along generation axes (tp, pp, dp or a union), ordered
  /// like a Megatron tp-dp-pp mesh.
  constexpr RankGroup generation_group(std::int64_t rank, AxisSet axes) const {
    VERL_CHECK_ARG(!axes.contains(AxisKind::cp) && !axes.contains(AxisKind::ep),
                   "axes: expected generation axes among tp, dp, pp, got {}", axes.to_string());
    std::array<bool, 5> modes{axes.contains(AxisKind::tp), axes.contains(AxisKind::dp), axes.contains(AxisKind::dp),
                              axes.contains(AxisKind::dp), axes.contains(AxisKind::pp)};
    return slice(rank, modes);
  }

  // ---- who gathers with whom ------------------------------------------------------------------
  /// HybridFlow's micro-DP group: the ranks whose training shards make up `rank`'s generation
  /// shard (same generation tp, pp and training dp), ordered by generation dp.
  constexpr RankGroup micro_dp_group(std::int64_t rank) const {
    return slice(rank, {false, true, true, false, false});
  }

  /// The ranks `rank` all-gathers with under this strategy.
  constexpr RankGroup gather_group(std::int64_t rank) const { return slice(rank, gather_modes()); }

  constexpr std::int64_t gather_group_count() const noexcept {
    return world_size() / gather_group(0).size();
  }
  /// Groups in column-major order of the modes they do not span.
  constexpr RankGroup gather_group_at(std::int64_t index) const {
    VERL_CHECK_ARG(index >= 0 && index < gather_group_count(), "index: expected a group index in [0, {}), got {}",
                   gather_group_count(), index);
    const Layout<5> layout = generation_layout();
    const std::array<bool, 5> modes = gather_modes();
    Coord<5> c{};
    for (std::size_t i = 0; i < 5; ++i) {
      if (modes[i]) continue;
      c[i] = index % layout.shape[i];
      index /= layout.shape[i];
    }
    return gather_group(layout(c));
  }
  constexpr std::int64_t gather_group_index(std::int64_t rank) const {
    const Layout<5> layout = generation_layout();
    const std::array<bool, 5> modes = gather_modes();
    const Coord<5> c = generation_coord(rank);
    std::int64_t index = 0;
    for (std::size_t i = 5; i-- > 0;) {
      if (!modes[i]) index = index * layout.shape[i] + c[i];
    }
    return index;
  }

  // ---- what each rank holds -------------------------------------------------------------------
  /// Training: layers of stage pp (of p), TP shard tp (of t).
  constexpr ModelRegion training_shard(std::int64_t rank) const {
    const ParallelCoords c = g_.train_coords(rank);
    return {{c.pp, g_.train_pp}, {c.pp + 1, g_.train_pp}, {c.tp, g_.train_tp}, {c.tp + 1, g_.train_tp}};
  }
  /// What `rank` puts into the all-gather: its training shard, or a 1/d part of it when the
  /// strategy shards the weights over data parallelism too (ZeRO-3).
  constexpr ModelRegion contributed_shard(std::int64_t rank) const {
    ModelRegion region = training_shard(rank);
    if constexpr (S::splits_contribution_over_dp) {
      const ParallelCoords c = g_.train_coords(rank);
      const Fraction width = Fraction{1, g_.train_tp * g_.train_dp};
      region.tp_begin = region.tp_begin + width * Fraction{c.dp};
      region.tp_end = region.tp_begin + width;
    }
    return region;
  }
  /// What `rank` holds after the all-gather: the union of its group's contributions — the
  /// generation shard for a micro-DP gather, the whole model otherwise (the tests check this
  /// against the contributions member by member).
  constexpr ModelRegion gathered_shard(std::int64_t rank) const {
    if constexpr (S::gather_scope == GatherScope::micro_dp) {
      return generation_shard(rank);
    } else {
      (void)generation_coord(rank);  // validates the rank
      return ModelRegion{};
    }
  }
  /// Generation: layers of stage pp (of pg), TP shard tp (of tg).
  constexpr ModelRegion generation_shard(std::int64_t rank) const {
    const ParallelCoords c = generation_coords(rank);
    return {{c.pp, g_.gen_pp}, {c.pp + 1, g_.gen_pp}, {c.tp, g_.gen_tp}, {c.tp + 1, g_.gen_tp}};
  }
  /// True when the training shard is a piece of the generation shard, so that the generation
  /// buffer can hold it and no second copy is needed.
  constexpr bool training_shard_in_place(std::int64_t rank) const {
    return S::keeps_training_shard_in_place && generation_shard(rank).contains(training_shard(rank));
  }

  /// The elements of `param` that `rank` holds for training / for generation.
  constexpr ParamShard training_param_shard(std::int64_t rank, const ParamSpec& param) const {
    return tp_shard(param, g_.train_tp, g_.train_coords(rank).tp);
  }
  constexpr ParamShard generation_param_shard(std::int64_t rank, const ParamSpec& param) const {
    return tp_shard(param, g_.gen_tp, generation_coords(rank).tp);
  }

  // ---- costs ------------------------------------------------------------------------------------
  /// Fractions of M, equal for every rank (checked exhaustively in the tests).
  constexpr ReshardCost cost(std::int64_t rank = 0) const {
    const Fraction contributed = contributed_shard(rank).volume();
    const Fraction gathered = gathered_shard(rank).volume();
    return {gathered - contributed, gathered, S::keeps_training_shard_in_place ? Fraction{0} : contributed};
  }

 private:
  static constexpr std::array<bool, 5> gather_modes() noexcept {
    switch (S::gather_scope) {
      case GatherScope::micro_dp: return {false, true, true, false, false};
      case GatherScope::model_parallel: return {true, true, true, false, true};
      case GatherScope::world: return {true, true, true, true, true};
    }
    return {};
  }

  /// Coordinates in the generation layout, straight from the training coordinates (the
  /// inverse of generation_layout(), without searching it).
  constexpr Coord<5> generation_coord(std::int64_t rank) const {
    const ParallelCoords c = g_.train_coords(rank);
    if constexpr (S::generation_order == GenerationOrder::micro_dp_fastest) {
      const std::int64_t kt = g_.micro_dp_tp(), kp = g_.micro_dp_pp();
      return {c.tp / kt, c.tp % kt, c.pp % kp, c.dp, c.pp / kp};
    } else {
      return {c.tp % g_.gen_tp, c.tp / g_.gen_tp, c.pp / g_.gen_pp, c.dp, c.pp % g_.gen_pp};
    }
  }

  /// The slice of the generation layout through `rank` along the selected modes.
  constexpr RankGroup slice(std::int64_t rank, const std::array<bool, 5>& modes) const {
    const Layout<5> layout = generation_layout();
    const Coord<5> c = generation_coord(rank);
    RankGroup group;
    for (std::size_t i = 0; i < 5; ++i) {
      if (modes[i]) {
        group.layout.shape[i] = layout.shape[i];
        group.layout.stride[i] = layout.stride[i];
      } else {
        group.layout.shape[i] = 1;
        group.layout.stride[i] = 0;
        group.offset += c[i] * layout.stride[i];
      }
    }
    return group;
  }

  ReshardGeometry g_;
};

/// The plan between two meshes; static meshes give a constant expression.
template <ReshardStrategy S = HybridFlow, MeshType Train, MeshType Gen>
constexpr ReshardPlan<S> make_reshard_plan(const Train& train, const Gen& gen) {
  return ReshardPlan<S>(make_reshard_geometry(train, gen));
}

/// A plan whose strategy is chosen at run time.
using AnyReshardPlan = std::variant<ReshardPlan<HybridFlow>, ReshardPlan<HybridFlowV>, ReshardPlan<FullAllGather>>;

inline AnyReshardPlan make_reshard_plan(std::string_view strategy, const ReshardGeometry& geometry) {
  return std::visit([&](auto s) -> AnyReshardPlan { return ReshardPlan<decltype(s)>(geometry); },
                    make_reshard_strategy(strategy));
}

}  // namespace verl::parallel
