// Placement of the roles on resource pools from verl's keys (hybridflow/placement.hpp): verl's
// global pool, the separate rollout, critic and reward-model pools, and the errors for pools that
// do not match the job.
#include <gtest/gtest.h>

#include <string>

#include "verl/hybridflow/placement.hpp"
#include "../support/error_message.hpp"

namespace {

using namespace verl::hybridflow;
using verl::test_support::message_of;

std::vector<int> ranks(int first, int count) {
  std::vector<int> out;
  for (int i = 0; i < count; ++i) out.push_back(first + i);
  return out;
}

TEST(HybridFlowPlacement, EverythingColocatedOnTheGlobalPoolByDefault) {
  const RolePlacement p = place_roles({.nnodes = 2, .n_gpus_per_node = 2, .use_critic = true, .reward_model = true}, 4);
  EXPECT_EQ(p.actor.ranks(), ranks(0, 4));
  EXPECT_TRUE(p.rollout_colocated());
  EXPECT_EQ(p.critic, p.actor);
  EXPECT_EQ(p.reward_model, p.actor);
  EXPECT_EQ(p.describe(), "actor+reference+rollout on ranks [0, 1, 2, 3], critic on [0, 1, 2, 3], reward model on [0, 1, 2, 3]");
  const RolePlacement grpo = place_roles({.nnodes = 1, .n_gpus_per_node = 1}, 1);
  EXPECT_FALSE(grpo.critic.has_value());
  EXPECT_FALSE(grpo.reward_model.has_value());
}

TEST(HybridFlowPlacement, SeparatePoolsTakeTheFollowingRanksInOrder) {
  const RolePlacement p = place_roles({.nnodes = 1,
                                       .n_gpus_per_node = 2,
                                       .hybrid_engine = false,
                                       .rollout_nnodes = 1,
                                       .rollout_n_gpus_per_node = 1,
                                       .use_critic = true,
                                       .critic_nnodes = 1,
                                       .critic_n_gpus_per_node = 2,
                                       .reward_model = true,
                                       .reward_enable_resource_pool = true,
                                       .reward_nnodes = 1,
                                       .reward_n_gpus_per_node = 1},
                                      6);
  EXPECT_EQ(p.actor.ranks(), ranks(0, 2));
  EXPECT_EQ(p.rollout.ranks(), ranks(2, 1));
  EXPECT_EQ(p.critic->ranks(), ranks(3, 2));
  EXPECT_EQ(p.reward_model->ranks(), ranks(5, 1));
  EXPECT_FALSE(p.rollout_colocated());
  EXPECT_FALSE(p.actor.overlaps(*p.critic));
}

TEST(HybridFlowPlacement, PoolsThatDoNotMatchTheJobAreNamedErrors) {
  // The sum of the pools against mpirun -np, each pool's keys in the message.
  const std::string sum = message_of([] {
    (void)place_roles({.nnodes = 1, .n_gpus_per_node = 2, .reward_model = true, .reward_enable_resource_pool = true,
                       .reward_nnodes = 1, .reward_n_gpus_per_node = 1},
                      4);
  });
  EXPECT_NE(sum.find("placement: the pools need 3 ranks, 2 (trainer.nnodes x trainer.n_gpus_per_node = 1 x 2) + 1 "
                     "(reward.reward_model.nnodes x n_gpus_per_node = 1 x 1), but the job has 4 (mpirun -np)"),
            std::string::npos)
      << sum;
  EXPECT_NE(message_of([] { (void)place_roles({.nnodes = 0, .n_gpus_per_node = 8}, 1); }).find("trainer.nnodes: expected a number of nodes > 0, got 0"),
            std::string::npos);
  EXPECT_NE(message_of([] { (void)place_roles({.nnodes = 1, .n_gpus_per_node = 1, .hybrid_engine = false}, 1); })
                .find("actor_rollout_ref.rollout.nnodes: expected a number of nodes > 0, got 0"),
            std::string::npos);
  EXPECT_NE(message_of([] { (void)place_roles({.nnodes = 1, .n_gpus_per_node = 1, .rollout_nnodes = 1, .rollout_n_gpus_per_node = 1}, 2); })
                .find("actor_rollout_ref.rollout.nnodes: a rollout pool of its own needs actor_rollout_ref.hybrid_engine=False"),
            std::string::npos);
  EXPECT_NE(message_of([] { (void)place_roles({.nnodes = 1, .n_gpus_per_node = 1, .critic_nnodes = 1, .critic_n_gpus_per_node = 1}, 2); })
                .find("critic.nnodes: a critic pool without a critic"),
            std::string::npos);
  EXPECT_NE(message_of([] {
              (void)place_roles({.nnodes = 1, .n_gpus_per_node = 1, .reward_enable_resource_pool = true, .reward_nnodes = 1,
                                 .reward_n_gpus_per_node = 1},
                                2);
            }).find("reward.reward_model.enable_resource_pool: a pool for the reward model needs reward.reward_model.enable=True"),
            std::string::npos);
  EXPECT_NE(message_of([] { (void)ResourcePool::of_ranks({0, 2, 0}, 3); }).find("rank 0 is listed twice"), std::string::npos);
  EXPECT_NE(message_of([] { (void)ResourcePool::range(2, 3, 4); }).find("ranks [2, 5) do not fit in the job's 4 ranks"),
            std::string::npos);
}

}  // namespace
