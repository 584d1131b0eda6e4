// expect: MODEL_HEADS_NEEDS_POSITIVE_HEAD_COUNTS_WITH_KV_HEADS_DIVIDING_ATTENTION_HEADS
// needs: mpi
// A user's value model type that declares 4 attention heads over 3 key/value heads: no grouping
// of query heads exists, whatever the critic's mesh (the actor's mesh pair refuses it the same way).
#include <cstdint>

#include "verl/model/transformer/critic.hpp"
#include "verl/trainer/workers/megatron_critic_worker.hpp"

using namespace verl::parallel;
struct UserValueModel {
  using critic_type = verl::model::TransformerCritic;
  static constexpr std::int64_t num_attention_heads = 4;
  static constexpr std::int64_t num_key_value_heads = 3;
  static critic_type critic(const verl::trainer::PPOConfig&);
};
using Critic = verl::trainer::MegatronCriticWorker<UserValueModel, Mesh<TP<1>, DP<>>>;
int main() { return static_cast<int>(sizeof(Critic)); }
