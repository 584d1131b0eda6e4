// expect: PIPELINE_PARALLEL_TRAINING_IS_NOT_BUILT_YET_THE_TRAINING_MESH_NEEDS_PP_1
// needs: mpi
// The example as a worker type: a user's model trained on Mesh<PP<2>, TP<2>, DP<>> and
// generating on Mesh<TP<1>, DP<>>. The Megatron actor worker does not pipeline yet, so naming the
// type is a compile error (examples/mesh_types.cpp runs the supported TP<2> -> TP<1> pair).
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
