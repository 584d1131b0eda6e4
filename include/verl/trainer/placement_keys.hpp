// The pools of verl's keys: which of a configuration's keys place the roles on ranks
// (hybridflow::place_roles reads them; one MPI rank stands for one device).
#pragma once

#include "verl/hybridflow/placement.hpp"
#include "verl/trainer/config/ppo_config.hpp"

namespace verl::trainer {

/// The placement keys of a configuration (hybridflow::place_roles reads them).
inline hybridflow::PlacementKeys placement_keys(const PPOConfig& config, bool use_critic) {
  hybridflow::PlacementKeys keys;
  keys.nnodes = config.trainer.nnodes;
  keys.n_gpus_per_node = config.trainer.n_gpus_per_node;
  keys.hybrid_engine = config.actor_rollout_ref.hybrid_engine;
  keys.rollout_nnodes = config.actor_rollout_ref.rollout.nnodes;
  keys.rollout_n_gpus_per_node = config.actor_rollout_ref.rollout.n_gpus_per_node.value_or(config.trainer.n_gpus_per_node);
  keys.use_critic = use_critic;
  keys.critic_nnodes = config.critic.nnodes;
  keys.critic_n_gpus_per_node = config.critic.n_gpus_per_node;
  const auto& rm = config.reward.reward_model;
  keys.reward_model = rm.enable;
  keys.reward_enable_resource_pool = rm.enable_resource_pool;
  keys.reward_nnodes = rm.nnodes;
  keys.reward_n_gpus_per_node = rm.n_gpus_per_node;
  return keys;
}

}  // namespace verl::trainer
