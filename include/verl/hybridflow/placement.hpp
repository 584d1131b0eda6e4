// Placement of the RL roles on resource pools from verl 0.9.1's keys, one rank standing for one
// GPU (verl's ResourcePoolManager in main_ppo.py, plus the pools verl places in code):
//
//   global pool   trainer.nnodes x trainer.n_gpus_per_node ranks: actor, reference, and the rollout
//                 with actor_rollout_ref.hybrid_engine=True (verl's colocated 3D-HybridEngine); the
//                 critic too unless it has a pool of its own
//   rollout pool  actor_rollout_ref.rollout.nnodes x n_gpus_per_node, only with hybrid_engine=False
//   critic pool   critic.nnodes x critic.n_gpus_per_node: verl-cpp's keys (verl has none; its
//                 split-placement example builds this pool in code); 0 nodes: the global pool
//   reward pool   reward.reward_model.nnodes x n_gpus_per_node with enable_resource_pool=True
//
// The pools take consecutive ranks in that order, and their sizes must add up to the job's ranks
// (mpirun -np); anything else is an error naming the keys and the numbers.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "verl/core/error.hpp"
#include "verl/hybridflow/resource_pool.hpp"

namespace verl::hybridflow {

/// The keys that place the roles, as plain numbers (the trainer reads them from its config).
struct PlacementKeys {
  std::int64_t nnodes = 1;           ///< trainer.nnodes
  std::int64_t n_gpus_per_node = 1;  ///< trainer.n_gpus_per_node
  bool hybrid_engine = true;         ///< actor_rollout_ref.hybrid_engine
  std::int64_t rollout_nnodes = 0;   ///< actor_rollout_ref.rollout.nnodes (0: none of its own)
  std::int64_t rollout_n_gpus_per_node = 0;  ///< actor_rollout_ref.rollout.n_gpus_per_node
  bool use_critic = false;
  std::int64_t critic_nnodes = 0;           ///< critic.nnodes (verl-cpp; 0: the global pool)
  std::int64_t critic_n_gpus_per_node = 0;  ///< critic.n_gpus_per_node (verl-cpp)
  bool reward_model = false;                ///< reward.reward_model.enable
  bool reward_enable_resource_pool = false;  ///< reward.reward_model.enable_resource_pool
  std::int64_t reward_nnodes = 0;            ///< reward.reward_model.nnodes
  std::int64_t reward_n_gpus_per_node = 0;   ///< reward.reward_model.n_gpus_per_node
};

/// Which ranks each role runs on.
struct RolePlacement {
  ResourcePool actor;      ///< actor and reference (and the rollout when colocated)
  ResourcePool rollout;    ///< the actor's pool under the hybrid engine
  std::optional<ResourcePool> critic;
  std::optional<ResourcePool> reward_model;
  int world_size = 0;

  [[nodiscard]] bool rollout_colocated() const { return rollout == actor; }
  [[nodiscard]] std::string describe() const {
    std::string out = fmt::format("actor+reference{} on ranks {}", rollout_colocated() ? "+rollout" : "", actor.to_string());
    if (!rollout_colocated()) out += fmt::format(", rollout on {}", rollout.to_string());
    if (critic) out += fmt::format(", critic on {}", critic->to_string());
    if (reward_model) out += fmt::format(", reward model on {}", reward_model->to_string());
    return out;
  }
};

namespace detail {
inline void require_pool_keys(std::string_view nodes_key, std::int64_t nodes, std::string_view gpus_key, std::int64_t gpus) {
  VERL_CHECK_ARG(nodes > 0, "{}: expected a number of nodes > 0, got {}", nodes_key, nodes);
  VERL_CHECK_ARG(gpus > 0, "{}: expected a number of devices per node > 0, got {}", gpus_key, gpus);
}
}  // namespace detail

/// The pools of a job of `world_size` ranks.
inline RolePlacement place_roles(const PlacementKeys& keys, int world_size) {
  detail::require_pool_keys("trainer.nnodes", keys.nnodes, "trainer.n_gpus_per_node", keys.n_gpus_per_node);
  struct Pool {
    std::string what;
    std::int64_t ranks;
  };
  std::vector<Pool> pools{{fmt::format("trainer.nnodes x trainer.n_gpus_per_node = {} x {}", keys.nnodes, keys.n_gpus_per_node),
                           keys.nnodes * keys.n_gpus_per_node}};
  const bool separate_rollout = !keys.hybrid_engine;
  if (separate_rollout) {
    detail::require_pool_keys("actor_rollout_ref.rollout.nnodes", keys.rollout_nnodes,
                              "actor_rollout_ref.rollout.n_gpus_per_node", keys.rollout_n_gpus_per_node);
    pools.push_back({fmt::format("actor_rollout_ref.rollout.nnodes x n_gpus_per_node = {} x {}", keys.rollout_nnodes,
                                 keys.rollout_n_gpus_per_node),
                     keys.rollout_nnodes * keys.rollout_n_gpus_per_node});
  } else {
    VERL_CHECK_ARG(keys.rollout_nnodes == 0,
                   "actor_rollout_ref.rollout.nnodes: a rollout pool of its own needs actor_rollout_ref.hybrid_engine="
                   "False; with the hybrid engine the rollout shares the actor's ranks (expected 0, got {})",
                   keys.rollout_nnodes);
  }
  const bool separate_critic = keys.critic_nnodes > 0;
  if (separate_critic) {
    VERL_CHECK_ARG(keys.use_critic, "critic.nnodes: a critic pool without a critic (the estimator needs none); expected 0, got {}",
                   keys.critic_nnodes);
    detail::require_pool_keys("critic.nnodes", keys.critic_nnodes, "critic.n_gpus_per_node", keys.critic_n_gpus_per_node);
    pools.push_back({fmt::format("critic.nnodes x critic.n_gpus_per_node = {} x {}", keys.critic_nnodes,
                                 keys.critic_n_gpus_per_node),
                     keys.critic_nnodes * keys.critic_n_gpus_per_node});
  } else {
    VERL_CHECK_ARG(keys.critic_nnodes == 0, "critic.nnodes: expected a number of nodes >= 0, got {}", keys.critic_nnodes);
  }
  const bool separate_reward = keys.reward_enable_resource_pool;
  if (separate_reward) {
    VERL_CHECK_ARG(keys.reward_model,
                   "reward.reward_model.enable_resource_pool: a pool for the reward model needs "
                   "reward.reward_model.enable=True, got False");
    detail::require_pool_keys("reward.reward_model.nnodes", keys.reward_nnodes, "reward.reward_model.n_gpus_per_node",
                              keys.reward_n_gpus_per_node);
    pools.push_back({fmt::format("reward.reward_model.nnodes x n_gpus_per_node = {} x {}", keys.reward_nnodes,
                                 keys.reward_n_gpus_per_node),
                     keys.reward_nnodes * keys.reward_n_gpus_per_node});
  }
  std::int64_t total = 0;
  std::string sum;
  for (const auto& p : pools) {
    total += p.ranks;
    sum += (sum.empty() ? "" : " + ") + fmt::format("{} ({})", p.ranks, p.what);
  }
  VERL_CHECK_ARG(total == world_size,
                 "placement: the pools need {} ranks, {}, but the job has {} (mpirun -np); one rank stands for one device",
                 total, sum, world_size);

  int next = 0;
  const auto take = [&](std::int64_t count) {
    ResourcePool pool = ResourcePool::range(next, static_cast<int>(count), world_size);
    next += static_cast<int>(count);
    return pool;
  };
  RolePlacement out;
  out.world_size = world_size;
  std::size_t k = 0;
  out.actor = take(pools[k++].ranks);
  out.rollout = separate_rollout ? take(pools[k++].ranks) : out.actor;
  if (keys.use_critic) out.critic = separate_critic ? take(pools[k++].ranks) : out.actor;
  if (keys.reward_model) out.reward_model = separate_reward ? take(pools[k++].ranks) : out.actor;
  return out;
}

}  // namespace verl::hybridflow
