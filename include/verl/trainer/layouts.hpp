// The actor's training and generation layouts as types: a pair of parallel::Mesh types with static
// (`TP<2>`) or dynamic (`TP<>`) sizes, and the rules a pair must satisfy for the Megatron actor
// worker (MegatronActorRolloutRefWorker<Models, TrainMesh, GenMesh>), written once:
//
//   - the meshes split tp, dp and pp only, have a tp and a dp axis (DP<> takes the ranks left
//     over), and list their axes longer than one in Megatron's order (tp fastest, then dp, then
//     pp: the worker group's rank layout);
//   - generation pp = 1 (the 3D-HybridEngine gathers every training stage's layers into each
//     generation rank: HybridFlow's pg = 1); training pp may be more (the worker pipelines its
//     layers with 1F1B; the model's layers must split evenly, checked when it is loaded);
//   - the generation tp divides the training tp (HybridFlow's tg | t: a generation shard is the
//     union of t / tg training shards);
//   - both meshes cover the same ranks (the 3D-HybridEngine reshards in place);
//   - each tp fits the model: at most its attention heads, a divisor of them, a divisor or a
//     multiple of its KV heads.
//
// With static sizes each rule is a named static assert (compile-fail tests assert on the names):
//
//   using Checked = Layouts<Mesh<TP<4>, DP<>>, Mesh<TP<2>, DP<>>>;                // fine
//   Layouts<Mesh<TP<4>, DP<>>, Mesh<TP<3>, DP<>>>         // TRAIN_TP_MUST_BE_A_MULTIPLE_OF_GEN_TP
//   using Piped = Layouts<Mesh<TP<2>, DP<>, PP<2>>, Mesh<TP<1>, DP<>>>;         // fine: pp 2 -> pg 1
//   Layouts<Mesh<TP<2>, DP<>>, Mesh<TP<1>, DP<>, PP<2>>>  // PIPELINE_PARALLEL_GENERATION_IS_NOT_BUILT_...
//   Layouts<Mesh<PP<2>, TP<2>, DP<>>, Mesh<TP<1>, DP<>>>  // THE_ACTOR_MESH_AXES_MUST_BE_IN_MEGATRON_ORDER_...
//                                                         // (pp fastest is not the worker group's layout)
//
// The head counts are static when the model type says so: model_heads<Model> reads
// Model::num_attention_heads (and Model::num_key_value_heads, else the same) when it has them as
// constants, and a user may specialise it for a type they cannot edit. Dynamic sizes are checked at
// run time by Layouts::from_sizes against the configuration's numbers, the errors naming the keys
// (actor_rollout_ref.actor.megatron.tensor_model_parallel_size, ...pipeline_model_parallel_size,
// ...rollout.tensor_model_parallel_size, the actor pool's ranks) with the expected and the given values; a static size that the
// configuration contradicts is such an error too.
#pragma once

#include <fmt/format.h>

#include <array>
#include <concepts>
#include <initializer_list>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "verl/config.hpp"
#include "verl/core/error.hpp"
#include "verl/parallel/axis.hpp"
#include "verl/parallel/axis_sizes.hpp"
#include "verl/parallel/mesh.hpp"

namespace verl::trainer {

/// Compile-time head counts of a model type: `attention` and `key_value` when known. Read from
/// `Model::num_attention_heads` (and `Model::num_key_value_heads`) constants; specialise it for a
/// type that cannot carry them.
template <class Model>
struct model_heads {};

template <class Model>
  requires requires {
    { std::integral_constant<std::int64_t, Model::num_attention_heads>::value };
  }
struct model_heads<Model> {
  static constexpr std::int64_t attention = Model::num_attention_heads;
  static constexpr std::int64_t key_value = [] {
    if constexpr (requires { std::integral_constant<std::int64_t, Model::num_key_value_heads>::value; }) {
      return std::int64_t{Model::num_key_value_heads};
    } else {
      return std::int64_t{Model::num_attention_heads};
    }
  }();
};

/// A model type whose head counts are known at compile time.
template <class Model>
concept StaticHeads = requires {
  { std::integral_constant<std::int64_t, model_heads<Model>::attention>::value };
  { std::integral_constant<std::int64_t, model_heads<Model>::key_value>::value };
};

/// The sizes the configuration gives the actor (checked against the mesh types by Layouts).
struct LayoutSizes {
  std::int64_t ranks = 1;     ///< the actor pool's ranks (trainer.nnodes x trainer.n_gpus_per_node)
  std::int64_t train_tp = 1;  ///< actor_rollout_ref.actor.megatron.tensor_model_parallel_size
  std::int64_t train_pp = 1;  ///< actor_rollout_ref.actor.megatron.pipeline_model_parallel_size
  std::int64_t gen_tp = 1;    ///< actor_rollout_ref.rollout.tensor_model_parallel_size
};

namespace detail {

inline constexpr std::string_view train_tp_key = "actor_rollout_ref.actor.megatron.tensor_model_parallel_size";
inline constexpr std::string_view train_pp_key = "actor_rollout_ref.actor.megatron.pipeline_model_parallel_size";
inline constexpr std::string_view gen_tp_key = "actor_rollout_ref.rollout.tensor_model_parallel_size";
inline constexpr std::string_view ranks_key = "the actor pool's ranks (trainer.nnodes x trainer.n_gpus_per_node)";

template <class M>
struct mesh_axes;
template <parallel::MeshAxis... Axes>
struct mesh_axes<parallel::Mesh<Axes...>> {
  static constexpr std::size_t count = sizeof...(Axes);
  static constexpr std::array<parallel::AxisKind, count> kinds{Axes::kind...};
  static constexpr std::array<std::int64_t, count> sizes{Axes::static_size...};
};

/// The static size of an axis: 1 when the mesh has none, `dynamic` when given at run time.
template <parallel::MeshType M>
constexpr std::int64_t static_axis_size(parallel::AxisKind kind) {
  using A = mesh_axes<M>;
  for (std::size_t i = 0; i < A::count; ++i) {
    if (A::kinds[i] == kind) return A::sizes[i];
  }
  return 1;
}

template <parallel::MeshType M>
consteval bool splits_only_tp_dp_pp() {
  using A = mesh_axes<M>;
  for (std::size_t i = 0; i < A::count; ++i) {
    const auto k = A::kinds[i];
    if (k != parallel::AxisKind::tp && k != parallel::AxisKind::dp && k != parallel::AxisKind::pp && A::sizes[i] != 1)
      return false;
  }
  return true;
}

/// The axes that may be longer than one (static size not 1) follow Megatron's order tp-cp-ep-dp-pp.
template <parallel::MeshType M>
consteval bool in_megatron_order() {
  using A = mesh_axes<M>;
  std::size_t last = 0;
  for (std::size_t i = 0; i < A::count; ++i) {
    if (A::sizes[i] == 1) continue;
    const auto order = static_cast<std::size_t>(A::kinds[i]);  // AxisKind lists Megatron's order
    if (order < last) return false;
    last = order;
  }
  return true;
}

/// A static tp size against static head counts (a dynamic size passes: checked at run time).
consteval bool tp_within_heads(std::int64_t tp, std::int64_t heads) { return tp == ::verl::dynamic || tp <= heads; }
consteval bool tp_divides_heads(std::int64_t tp, std::int64_t heads) {
  return tp == ::verl::dynamic || tp > heads || heads % tp == 0;
}
consteval bool tp_fits_kv_heads(std::int64_t tp, std::int64_t kv) {
  return tp == ::verl::dynamic || kv % tp == 0 || tp % kv == 0;
}

/// "Mesh<TP<2>, DP<>>".
template <class M>
struct mesh_type_name;
template <parallel::MeshAxis... Axes>
struct mesh_type_name<parallel::Mesh<Axes...>> {
  static std::string get() {
    std::string out = "Mesh<";
    std::size_t i = 0;
    const auto axis = [&](parallel::AxisKind kind, std::int64_t size) {
      std::string name(parallel::axis_name(kind));
      for (char& ch : name) ch = static_cast<char>(ch - 'a' + 'A');
      out += fmt::format("{}{}<{}>", i++ ? ", " : "", name, size == ::verl::dynamic ? std::string() : std::to_string(size));
    };
    (axis(Axes::kind, Axes::static_size), ...);
    return out + ">";
  }
};

}  // namespace detail

/// The rules on a model type's static head counts (a type that declares none, or void: nothing to
/// check) against the static tensor-parallel sizes of the meshes that hold it (a dynamic size is
/// checked at run time): the counts positive, the KV heads dividing the attention heads, and each
/// size within the heads, dividing them and fitting the KV heads. Instantiating it checks them.
template <class Model, std::int64_t... tp_sizes>
struct head_rules {
  static constexpr bool heads_known = StaticHeads<Model>;
  static constexpr std::int64_t heads = [] {
    if constexpr (StaticHeads<Model>) return model_heads<Model>::attention; else return std::int64_t{0};
  }();
  static constexpr std::int64_t kv_heads = [] {
    if constexpr (StaticHeads<Model>) return model_heads<Model>::key_value; else return std::int64_t{0};
  }();
  static constexpr bool counts_ok = !heads_known || (heads > 0 && kv_heads > 0 && heads % kv_heads == 0);
  VERL_STATIC_ASSERT(counts_ok, MODEL_HEADS_NEEDS_POSITIVE_HEAD_COUNTS_WITH_KV_HEADS_DIVIDING_ATTENTION_HEADS);
  // Each rule below is reported only when the counts are valid (one message per mistake).
  static constexpr bool heads_ok = !heads_known || !counts_ok || (detail::tp_within_heads(tp_sizes, heads) && ...);
  VERL_STATIC_ASSERT(heads_ok, TENSOR_PARALLEL_SIZE_MUST_NOT_EXCEED_THE_MODELS_ATTENTION_HEADS);
  static constexpr bool heads_divide_ok =
      !heads_known || !counts_ok || (detail::tp_divides_heads(tp_sizes, heads) && ...);
  VERL_STATIC_ASSERT(heads_divide_ok, TENSOR_PARALLEL_SIZE_MUST_DIVIDE_THE_MODELS_ATTENTION_HEADS);
  static constexpr bool kv_ok =
      !heads_known || !counts_ok || !heads_ok || (detail::tp_fits_kv_heads(tp_sizes, kv_heads) && ...);
  VERL_STATIC_ASSERT(kv_ok, TENSOR_PARALLEL_SIZE_MUST_DIVIDE_OR_BE_A_MULTIPLE_OF_THE_MODELS_KV_HEADS);
  static constexpr bool value = counts_ok && heads_ok && heads_divide_ok && kv_ok;
};

namespace detail {
/// head_rules over the static TP sizes of the meshes given.
template <class Model, parallel::MeshType... Meshes>
using mesh_head_rules = head_rules<Model, static_axis_size<Meshes>(parallel::AxisKind::tp)...>;
}  // namespace detail

/// The rules on a (training, generation) mesh pair with static sizes, for a model type (void: its
/// heads unknown). Instantiating it checks them (the heads' rules as its base); `value` is true
/// when it compiles.
template <parallel::MeshType Train, parallel::MeshType Gen, class Model = void>
struct layout_rules : detail::mesh_head_rules<Model, Train, Gen> {
  using head_checks = detail::mesh_head_rules<Model, Train, Gen>;
  static constexpr std::int64_t t = detail::static_axis_size<Train>(parallel::AxisKind::tp);
  static constexpr std::int64_t p = detail::static_axis_size<Train>(parallel::AxisKind::pp);
  static constexpr std::int64_t tg = detail::static_axis_size<Gen>(parallel::AxisKind::tp);
  static constexpr std::int64_t pg = detail::static_axis_size<Gen>(parallel::AxisKind::pp);

  static constexpr bool axes_ok = detail::splits_only_tp_dp_pp<Train>() && detail::splits_only_tp_dp_pp<Gen>();
  VERL_STATIC_ASSERT(axes_ok, THE_ACTOR_MESHES_MAY_ONLY_SPLIT_TP_DP_PP);
  // dp may be DP<> (the ranks left over, as Megatron infers it); the groups are slices along both.
  static constexpr bool tp_dp_ok = Train::has_axis(parallel::AxisKind::tp) && Train::has_axis(parallel::AxisKind::dp) &&
                                   Gen::has_axis(parallel::AxisKind::tp) && Gen::has_axis(parallel::AxisKind::dp);
  VERL_STATIC_ASSERT(tp_dp_ok, THE_ACTOR_MESHES_NEED_A_TP_AND_A_DP_AXIS);
  // Training pp may be anything; generation pp must be 1 (a dynamic PP<> there is checked at run
  // time: from_sizes makes it 1).
  static constexpr bool gen_pp_ok = pg == 1 || pg == ::verl::dynamic;
  VERL_STATIC_ASSERT(gen_pp_ok, PIPELINE_PARALLEL_GENERATION_IS_NOT_BUILT_YET_THE_GENERATION_MESH_NEEDS_PP_1);
  // Reported only when the generation pipeline axis is not refused (one message per mesh pair).
  static constexpr bool order_ok = !gen_pp_ok || (detail::in_megatron_order<Train>() && detail::in_megatron_order<Gen>());
  VERL_STATIC_ASSERT(order_ok, THE_ACTOR_MESH_AXES_MUST_BE_IN_MEGATRON_ORDER_TP_DP_PP);
  static constexpr bool tp_ok = t == ::verl::dynamic || tg == ::verl::dynamic || t % tg == 0;
  VERL_STATIC_ASSERT(tp_ok, TRAIN_TP_MUST_BE_A_MULTIPLE_OF_GEN_TP);
  static constexpr bool world_ok = [] {
    if constexpr (Train::is_static && Gen::is_static) {
      return decltype(Train{}.world_size())::value == decltype(Gen{}.world_size())::value;
    } else {
      return true;
    }
  }();
  VERL_STATIC_ASSERT(world_ok, TRAIN_AND_GEN_MESHES_MUST_HAVE_THE_SAME_WORLD_SIZE);

  static constexpr bool value =
      axes_ok && tp_dp_ok && gen_pp_ok && order_ok && tp_ok && world_ok && head_checks::value;
};

/// The rules on the Megatron critic's training mesh type (it has no generation mesh), for a
/// model type (void: its heads unknown). Instantiating it checks them (the heads' rules as its base).
template <parallel::MeshType Train, class Model = void>
struct critic_mesh_rules : detail::mesh_head_rules<Model, Train> {
  using head_checks = detail::mesh_head_rules<Model, Train>;
  static constexpr bool axes_ok = detail::splits_only_tp_dp_pp<Train>();
  VERL_STATIC_ASSERT(axes_ok, THE_CRITIC_MESH_MAY_ONLY_SPLIT_TP_DP_PP);
  static constexpr bool tp_dp_ok = Train::has_axis(parallel::AxisKind::tp) && Train::has_axis(parallel::AxisKind::dp);
  VERL_STATIC_ASSERT(tp_dp_ok, THE_CRITIC_MESH_NEEDS_A_TP_AND_A_DP_AXIS);
  static constexpr bool order_ok = !axes_ok || detail::in_megatron_order<Train>();
  VERL_STATIC_ASSERT(order_ok, THE_CRITIC_MESH_AXES_MUST_BE_IN_MEGATRON_ORDER_TP_DP_PP);
  static constexpr bool value = axes_ok && tp_dp_ok && order_ok && head_checks::value;

  /// The (tp, dp, pp) sizes the critic's keys give over `ranks` ranks against the mesh type's
  /// static ones (and its static world size): an error naming the key, the mesh type and both numbers.
  static void check_sizes(std::int64_t ranks, std::int64_t tp, std::int64_t dp, std::int64_t pp) {
    const std::string type = detail::mesh_type_name<Train>::get();
    if constexpr (Train::is_static) {
      VERL_CHECK_ARG(decltype(Train{}.world_size())::value == ranks,
                     "the critic's ranks: the worker's training mesh {} fixes the world size: expected {}, got {}", type,
                     decltype(Train{}.world_size())::value, ranks);
    }
    const std::pair<parallel::AxisKind, std::pair<std::int64_t, std::string_view>> given[] = {
        {parallel::AxisKind::tp, {tp, "critic.megatron.tensor_model_parallel_size"}},
        {parallel::AxisKind::dp, {dp, "the critic's data parallel size (ranks / (tp pp))"}},
        {parallel::AxisKind::pp, {pp, "critic.megatron.pipeline_model_parallel_size"}}};
    for (const auto& [kind, value_and_key] : given) {
      const std::int64_t fixed = detail::static_axis_size<Train>(kind);
      if (fixed == ::verl::dynamic) continue;
      VERL_CHECK_ARG(fixed == value_and_key.first, "{}: the worker's training mesh {} fixes {}: expected {}, got {}",
                     value_and_key.second, type, parallel::axis_name(kind), fixed, value_and_key.first);
    }
  }
};

/// The actor's training and generation meshes: the types (checked by layout_rules, with Model's
/// static heads when it has them, when this is instantiated) and, once the configuration is read,
/// the meshes themselves.
template <parallel::MeshType TrainMesh = parallel::Mesh<parallel::TP<>, parallel::DP<>, parallel::PP<>>,
          parallel::MeshType GenMesh = parallel::Mesh<parallel::TP<>, parallel::DP<>>, class Model = void>
struct Layouts {
  using rules = layout_rules<TrainMesh, GenMesh, Model>;
  static_assert(sizeof(rules) > 0, "instantiating the rules checks them (their own messages name a broken one)");
  using train_mesh_type = TrainMesh;
  using generation_mesh_type = GenMesh;

  TrainMesh train;       ///< Megatron's (tp, dp, pp) layout of the actor's ranks
  GenMesh generation;    ///< the 3D-HybridEngine's generation layout (tg, dg = ranks / tg)

  /// "Mesh<TP<2>, DP<>> -> Mesh<TP<1>, DP<>>".
  static std::string describe() {
    return detail::mesh_type_name<TrainMesh>::get() + " -> " + detail::mesh_type_name<GenMesh>::get();
  }

  /// The meshes over `sizes.ranks` ranks: dp = ranks / (tp pp) for training, ranks / tg for generation.
  /// Throws verl::InvalidArgument naming the key (and the mesh type when it fixes the size) when
  /// the numbers break a rule or contradict a static size.
  static Layouts from_sizes(const LayoutSizes& sizes) {
    using parallel::AxisKind;
    VERL_CHECK_ARG(sizes.ranks >= 1, "{}: expected at least 1, got {}", detail::ranks_key, sizes.ranks);
    VERL_CHECK_ARG(sizes.train_pp >= 1 && sizes.ranks % sizes.train_pp == 0,
                   "{}: expected a divisor of the actor pool's {} ranks (trainer.nnodes x trainer.n_gpus_per_node), got {}",
                   detail::train_pp_key, sizes.ranks, sizes.train_pp);
    VERL_CHECK_ARG(sizes.train_pp > 1 || (sizes.train_tp >= 1 && sizes.ranks % sizes.train_tp == 0),
                   "{}: expected a divisor of the actor pool's {} ranks (trainer.nnodes x trainer.n_gpus_per_node; data "
                   "parallel size = ranks / tp), got {}",
                   detail::train_tp_key, sizes.ranks, sizes.train_tp);
    VERL_CHECK_ARG(sizes.train_tp >= 1 && (sizes.ranks / sizes.train_pp) % sizes.train_tp == 0,
                   "{}: expected a divisor of the actor pool's {} ranks over {} = {} pipeline stages "
                   "(trainer.nnodes x trainer.n_gpus_per_node; data parallel size = ranks / (tp pp)), got {}",
                   detail::train_tp_key, sizes.ranks, detail::train_pp_key, sizes.train_pp, sizes.train_tp);
    VERL_CHECK_ARG(sizes.gen_tp >= 1 && sizes.train_tp % sizes.gen_tp == 0, "{}: expected a divisor of {} = {}, got {}",
                   detail::gen_tp_key, detail::train_tp_key, sizes.train_tp, sizes.gen_tp);
    const std::int64_t dp = sizes.ranks / (sizes.train_tp * sizes.train_pp), dg = sizes.ranks / sizes.gen_tp;
    check_static<TrainMesh>("training", sizes.ranks, {{AxisKind::tp, sizes.train_tp, detail::train_tp_key},
                                                      {AxisKind::dp, dp, "the training data parallel size (ranks / (tp pp))"},
                                                      {AxisKind::pp, sizes.train_pp, detail::train_pp_key}});
    check_static<GenMesh>("generation", sizes.ranks,
                          {{AxisKind::tp, sizes.gen_tp, detail::gen_tp_key},
                           {AxisKind::dp, dg, "the generation data parallel size (ranks / rollout tp)"},
                           {AxisKind::pp, 1, "the generation pipeline size (always 1)"}});
    parallel::AxisSizes train, gen;
    train.set(AxisKind::tp, sizes.train_tp);
    train.set(AxisKind::dp, dp);
    train.set(AxisKind::pp, sizes.train_pp);
    gen.set(AxisKind::tp, sizes.gen_tp);
    gen.set(AxisKind::dp, dg);
    return {TrainMesh::from_axis_sizes(train, "the actor's training mesh"),
            GenMesh::from_axis_sizes(gen, "the actor's generation mesh")};
  }

  /// The actor pool's rank count against a static mesh's world size (a dynamic mesh takes any).
  static void check_ranks(std::int64_t ranks) {
    check_static<TrainMesh>("training", ranks, {});
    check_static<GenMesh>("generation", ranks, {});
  }

  /// The loaded model's head counts against the model type's static ones (model_heads), when it
  /// declares them. (The sizes against the heads are check_tensor_parallel_fits'.)
  static void check_model_heads(std::int64_t attention, std::int64_t key_value, std::string_view source) {
    if constexpr (StaticHeads<Model>) {
      VERL_CHECK_ARG(attention == model_heads<Model>::attention && key_value == model_heads<Model>::key_value,
                     "{}: the model type declares num_attention_heads = {} and num_key_value_heads = {} (model_heads, "
                     "checked against the meshes {} at compile time), the loaded model has {} and {}",
                     source, model_heads<Model>::attention, model_heads<Model>::key_value, describe(), attention,
                     key_value);
    }
  }

 private:
  struct Given {
    parallel::AxisKind kind;
    std::int64_t size;
    std::string_view key;
  };

  template <class M>
  static void check_static(std::string_view which, std::int64_t ranks, std::initializer_list<Given> given) {
    const std::string type = detail::mesh_type_name<M>::get();
    if constexpr (M::is_static) {
      VERL_CHECK_ARG(decltype(M{}.world_size())::value == ranks,
                     "{}: the worker's {} mesh {} fixes the world size: expected {}, got {}", detail::ranks_key,
                     which, type, decltype(M{}.world_size())::value, ranks);
    }
    for (const Given& g : given) {
      const std::int64_t fixed = detail::static_axis_size<M>(g.kind);
      if (fixed == ::verl::dynamic) continue;
      VERL_CHECK_ARG(fixed == g.size, "{}: the worker's {} mesh {} fixes {}: expected {}, got {}", g.key, which, type,
                     parallel::axis_name(g.kind), fixed, g.size);
    }
  }
};

}  // namespace verl::trainer
