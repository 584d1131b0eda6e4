// The host-side pieces of the HybridFlow trainer that need no MPI: the row order that hands each
// data-parallel rank its share of every mini-batch, the worker's local mini-batches, and the values
// that cross the wire (sampling settings, a reward function's result, a role's checkpoint state).
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "verl/hybridflow/wire.hpp"
#include "verl/trainer/workers/batch_keys.hpp"
#include "verl/trainer/workers/role_state.hpp"

namespace {

using namespace verl;
using namespace verl::trainer;

/// What DP_COMPUTE_PROTO gives rank `rank` of `dp` after `order`: its contiguous chunk.
std::vector<Index> chunk_of(const std::vector<Index>& order, Index dp, Index rank) {
  const Index share = static_cast<Index>(order.size()) / dp;
  return {order.begin() + rank * share, order.begin() + (rank + 1) * share};
}

TEST(MiniBatchMajorOrder, EachRanksLocalMiniBatchIsItsShareOfTheGlobalOne) {
  for (const Index dp : {1, 2, 3, 4}) {
    for (const Index mini : {dp, 2 * dp, 3 * dp}) {
      for (const Index rows : {mini, 2 * mini, 3 * mini + dp, 5 * mini + 2 * dp}) {
        const auto order = mini_batch_major_order(rows, mini, dp, "key");
        // A permutation of the rows.
        std::vector<Index> sorted = order;
        std::sort(sorted.begin(), sorted.end());
        std::vector<Index> all(static_cast<std::size_t>(rows));
        std::iota(all.begin(), all.end(), 0);
        ASSERT_EQ(sorted, all) << "rows " << rows << " mini " << mini << " dp " << dp;
        const auto global = mini_batch_bounds(rows, mini);
        const auto local = local_mini_batch_bounds(rows / dp, mini, dp);
        ASSERT_EQ(local.size(), global.size());
        for (std::size_t m = 0; m < global.size(); ++m) {
          // The ranks' local mini-batch m together are exactly the global mini-batch m, and
          // rank r holds the r-th contiguous share of it (as the in-process trainer split it).
          const auto [g0, g1] = global[m];
          const Index share = (g1 - g0) / dp;
          for (Index rank = 0; rank < dp; ++rank) {
            const auto chunk = chunk_of(order, dp, rank);
            const auto [l0, l1] = local[m];
            ASSERT_EQ(l1 - l0, share);
            for (Index i = 0; i < share; ++i) EXPECT_EQ(chunk[static_cast<std::size_t>(l0 + i)], g0 + rank * share + i);
          }
        }
      }
    }
  }
}

TEST(MiniBatchMajorOrder, OneRankKeepsTheOrder) {
  const auto order = mini_batch_major_order(10, 4, 1, "key");
  std::vector<Index> expected(10);
  std::iota(expected.begin(), expected.end(), 0);
  EXPECT_EQ(order, expected);
}

TEST(MiniBatchMajorOrder, AMiniBatchThatDoesNotSplitIsNamed) {
  // 10 rows in mini-batches of 4: the last has 2 rows, which do not split over 4 ranks.
  try {
    (void)mini_batch_major_order(10, 4, 4, "actor_rollout_ref.actor.ppo_mini_batch_size");
    FAIL() << "expected an error";
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find("actor_rollout_ref.actor.ppo_mini_batch_size: a mini-batch of 2 rows does "
                                             "not split over 4 data-parallel ranks"),
              std::string::npos)
        << error.what();
  }
  EXPECT_THROW((void)mini_batch_bounds(4, 0), std::invalid_argument);
}

TEST(WorkerValues, SamplingSettingsSurviveJson) {
  rollout::SamplingParams p;
  p.temperature = 0.7f;
  p.top_k = 50;
  p.top_p = 0.95f;
  p.n = 8;
  p.max_response_length = 33;
  p.eos_token_ids = {2, 7};
  p.stop_token_ids = {11};
  p.pad_token_id = 3;
  p.seed = 0xfedcba9876543210ULL;
  const rollout::SamplingParams q = sampling_params_from_json(nlohmann::json::parse(sampling_params_to_json(p).dump()));
  EXPECT_EQ(q.temperature, p.temperature);
  EXPECT_EQ(q.top_k, p.top_k);
  EXPECT_EQ(q.top_p, p.top_p);
  EXPECT_EQ(q.n, p.n);
  EXPECT_EQ(q.max_response_length, p.max_response_length);
  EXPECT_EQ(q.eos_token_ids, p.eos_token_ids);
  EXPECT_EQ(q.stop_token_ids, p.stop_token_ids);
  EXPECT_EQ(q.pad_token_id, p.pad_token_id);
  EXPECT_EQ(q.seed, p.seed);
}

TEST(WorkerValues, RewardOutputSurvivesJson) {
  reward::RewardOutput out;
  out.score = -0.25;
  out.acc = true;
  out.pred = "42";
  out.components = {{"format", 1.0}, {"length", -0.125}};
  EXPECT_EQ(reward_output_from_json(nlohmann::json::parse(to_json(out).dump())), out);
  reward::RewardOutput plain;
  plain.score = 1.0;
  EXPECT_EQ(reward_output_from_json(to_json(plain)), plain);
}

TEST(WorkerValues, RoleStateCrossesTheWire) {
  RoleState state;
  state.model.push_back(NamedTensor{"w", {2, 3}, {1, 2, 3, 4, 5, 6}});
  state.model.push_back(NamedTensor{"b", {3}, {-1, 0.5f, 7}});
  state.optimizer.step = 12;
  state.optimizer.exp_avg = {{0.1f, 0.2f}, {0.3f}};
  state.optimizer.exp_avg_sq = {{0.01f, 0.02f}, {0.03f}};
  state.extra = {{"lr_scheduler_last_epoch", 5}};
  const RoleState back = hybridflow::from_bytes<RoleState>(hybridflow::to_bytes(state));
  ASSERT_EQ(back.model.size(), 2u);
  EXPECT_EQ(back.model[1].name, "b");
  EXPECT_EQ(back.model[0].shape, (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ(back.model[0].values, state.model[0].values);
  EXPECT_EQ(back.optimizer, state.optimizer);
  EXPECT_EQ(back.extra, state.extra);
  // The checkpoint writer's view points into the state.
  const RoleSnapshot view = back.snapshot();
  ASSERT_EQ(view.model.size(), 2u);
  EXPECT_EQ(view.model[0].values.data(), back.model[0].values.data());
  EXPECT_EQ(view.optimizer, &back.optimizer);
}

TEST(WorkerValues, ACheckpointWithoutOptimizerStateIsNotResumed) {
  LoadedRole loaded;
  loaded.model.push_back(NamedTensor{"w", {1}, {1}});
  try {
    (void)RoleState::from(loaded, "actor");
    FAIL() << "expected an error";
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find("checkpoint role 'actor': no optimizer state"), std::string::npos) << error.what();
  }
}

}  // namespace
