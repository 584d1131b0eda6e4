// expect: THE_ACTOR_MESH_AXES_MUST_BE_IN_MEGATRON_ORDER_TP_DP_PP
// needs: mpi
// A user's model trained with pipeline stages as the worker type: Mesh<PP<2>, TP<2>, DP<>> lists
// pp first, which makes pp the fastest axis (a mesh lays its first axis out fastest), while the
// worker group's ranks are in Megatron's order (tp fastest, then dp, then pp: the dispatch of
// MEGATRON_COMPUTE_PROTO collects tp rank 0 of the last stage by that order). The same layout in
// Megatron's order, Mesh<TP<2>, DP<>, PP<2>>, is what examples/mesh_types.cpp trains.
#include <cstdint>

#include "verl/model/transformer/transformer.hpp"
#include "verl/trainer/workers/megatron_actor_worker.hpp"

using namespace verl::parallel;
struct UserModel {
  using policy_type = verl::model::Transformer;
  static constexpr std::int64_t num_attention_heads = 4;
  static constexpr std::int64_t num_key_value_heads = 2;
  static policy_type actor(const verl::trainer::PPOConfig&);
  static policy_type reference(const verl::trainer::PPOConfig&, const policy_type&);
};
using Actor = verl::trainer::MegatronActorRolloutRefWorker<UserModel, Mesh<PP<2>, TP<2>, DP<>>, Mesh<TP<1>, DP<>>>;
int main() { return static_cast<int>(sizeof(Actor)); }
