// expect: PIPELINE_PARALLEL_GENERATION_IS_NOT_BUILT_YET_THE_GENERATION_MESH_NEEDS_PP_1
// needs: mpi
// The worker type with pipeline stages in its generation mesh: refused (the generation gathers
// every stage's layers, pg = 1), while the training mesh's stages are accepted.
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
using Actor =
    verl::trainer::MegatronActorRolloutRefWorker<UserModel, Mesh<TP<2>, DP<>, PP<2>>, Mesh<TP<1>, DP<>, PP<2>>>;
int main() { return static_cast<int>(sizeof(Actor)); }
