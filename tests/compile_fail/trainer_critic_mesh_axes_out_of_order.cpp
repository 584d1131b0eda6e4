// expect: THE_CRITIC_MESH_AXES_MUST_BE_IN_MEGATRON_ORDER_TP_DP_PP
// needs: mpi
// A user's value model trained with pipeline stages as the worker type: Mesh<PP<2>, TP<2>, DP<>>
// lists pp first, which makes pp the fastest axis, while the worker group's ranks are in
// Megatron's order (tp fastest, then dp, then pp: MEGATRON_COMPUTE_PROTO collects tp rank 0 of
// the last stage by that order). Mesh<TP<2>, DP<>, PP<2>> is the same layout in that order.
#include <cstdint>

#include "verl/model/transformer/critic.hpp"
#include "verl/trainer/workers/megatron_critic_worker.hpp"

using namespace verl::parallel;
struct UserValueModel {
  using critic_type = verl::model::TransformerCritic;
  static constexpr std::int64_t num_attention_heads = 4;
  static constexpr std::int64_t num_key_value_heads = 2;
  static critic_type critic(const verl::trainer::PPOConfig&);
};
using Critic = verl::trainer::MegatronCriticWorker<UserValueModel, Mesh<PP<2>, TP<2>, DP<>>>;
int main() { return static_cast<int>(sizeof(Critic)); }
