// expect: TENSOR_PARALLEL_SIZE_MUST_NOT_EXCEED_THE_MODELS_ATTENTION_HEADS
// needs: mpi
// The worker type checks its meshes against its model type's static heads: 4 heads at TP<8>.
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
using Actor = verl::trainer::MegatronActorRolloutRefWorker<UserModel, Mesh<TP<8>, DP<>>, Mesh<TP<1>, DP<>>>;
int main() { return static_cast<int>(sizeof(Actor)); }
