// How parameters move from the training layout to the generation layout (HybridFlow §5.4,
// Table 2): HybridFlow's 3D-HybridEngine, its vanilla variant HybridFlow-V, and the full
// all-gather of DeepSpeed-Chat. A strategy is a small policy type: which ranks gather together,
// how generation ranks are laid out, and whether the training shard stays in place.
#pragma once

#include <array>
#include <concepts>
#include <string_view>
#include <variant>

#include "verl/core/error.hpp"

namespace verl::parallel {

/// Which ranks all-gather together.
enum class GatherScope : std::uint8_t {
  micro_dp,        ///< the (t/tg)*(p/pg) ranks that form one generation shard
  model_parallel,  ///< the whole training model-parallel group (t*p ranks): all of M
  world,           ///< every rank: all of M
};

/// How generation TP/PP ranks sit inside a training TP/PP group.
enum class GenerationOrder : std::uint8_t {
  micro_dp_fastest,  ///< consecutive training ranks share a generation shard (HybridFlow)
  gen_tp_fastest,    ///< consecutive training ranks are consecutive generation TP ranks (vanilla)
};

/// HybridFlow's 3D-HybridEngine: generation TP/PP groups are strided so that each rank's
/// training shard is a piece of its generation shard; micro-DP groups all-gather exactly the
/// generation shard, with no second copy of the training weights.
struct HybridFlow {
  static constexpr std::string_view name = "hybridflow";
  static constexpr GatherScope gather_scope = GatherScope::micro_dp;
  static constexpr GenerationOrder generation_order = GenerationOrder::micro_dp_fastest;
  static constexpr bool keeps_training_shard_in_place = true;
  static constexpr bool splits_contribution_over_dp = false;
};

/// HybridFlow-V: all-gather the whole model inside each training model-parallel group, then
/// keep the generation shard; the training shard stays allocated beside it.
struct HybridFlowV {
  static constexpr std::string_view name = "hybridflow_v";
  static constexpr GatherScope gather_scope = GatherScope::model_parallel;
  static constexpr GenerationOrder generation_order = GenerationOrder::gen_tp_fastest;
  static constexpr bool keeps_training_shard_in_place = false;
  static constexpr bool splits_contribution_over_dp = false;
};

/// DeepSpeed-Chat: parameters are sharded ZeRO-3 style over all t*p*d ranks and all-gathered
/// over the world for generation.
struct FullAllGather {
  static constexpr std::string_view name = "full_allgather";
  static constexpr GatherScope gather_scope = GatherScope::world;
  static constexpr GenerationOrder generation_order = GenerationOrder::gen_tp_fastest;
  static constexpr bool keeps_training_shard_in_place = false;
  static constexpr bool splits_contribution_over_dp = true;
};

/// A resharding strategy describes itself with compile-time constants.
template <class S>
concept ReshardStrategy = requires {
  { S::name } -> std::convertible_to<std::string_view>;
  { S::gather_scope } -> std::convertible_to<GatherScope>;
  { S::generation_order } -> std::convertible_to<GenerationOrder>;
  { S::keeps_training_shard_in_place } -> std::convertible_to<bool>;
  { S::splits_contribution_over_dp } -> std::convertible_to<bool>;
};

/// One of the strategies, chosen at run time.
using AnyReshardStrategy = std::variant<HybridFlow, HybridFlowV, FullAllGather>;

inline constexpr std::array<std::string_view, 3> reshard_strategy_names{HybridFlow::name, HybridFlowV::name,
                                                                        FullAllGather::name};

/// The strategy registered under `name` ("hybridflow", "hybridflow_v", "full_allgather").
inline AnyReshardStrategy make_reshard_strategy(std::string_view name) {
  if (name == HybridFlow::name) return HybridFlow{};
  if (name == HybridFlowV::name) return HybridFlowV{};
  if (name == FullAllGather::name) return FullAllGather{};
  ::verl::detail::throw_invalid_argument("strategy: expected one of hybridflow, hybridflow_v, full_allgather, got '{}'",
                                         name);
}

}  // namespace verl::parallel
