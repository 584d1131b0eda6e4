// expect: REWARD_MODELS_NEED_A_REWARD_MODEL_TYPE_AND_A_STATIC_REWARD_MODEL_BUILDER_FROM_A_PPO_CONFIG
// A reward-model worker's Models type says which model it holds but not how to build it from the
// configuration (no static reward_model(const PPOConfig&)).
#include "verl/model/transformer/reward_model.hpp"
#include "verl/trainer/workers/reward_model_worker.hpp"

struct TypeOnly {
  using reward_model_type = verl::model::TransformerRewardModel;
};

static_assert(verl::trainer::check_reward_models<TypeOnly>());
int main() {}
