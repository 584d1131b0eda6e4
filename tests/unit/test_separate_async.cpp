// separate_async's pieces without a runtime: the queue of prompts in flight (order, seeds, drop
// and replace, wait), verl's off-policy metrics and its MetricsAggregator rules.
#include <gtest/gtest.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "verl/trainer/config.hpp"
#include "verl/trainer/separate_async.hpp"

namespace {

using namespace verl;
using namespace verl::trainer;

/// What a send returns here: the call it stands for, and whether it was awaited.
struct FakeAnswer {
  int call = 0;
  int* awaited = nullptr;
  int get() {
    ++*awaited;
    return call;
  }
};

struct Harness {
  std::vector<std::vector<std::int64_t>> sent;  // the prompts of each send
  std::vector<std::pair<std::uint64_t, std::int64_t>> seeds;
  std::int64_t next_prompt = 0;
  int awaited = 0;

  RolloutQueue<FakeAnswer> queue(SeparateAsyncSettings settings) {
    return RolloutQueue<FakeAnswer>(
        settings,
        [this] {
          std::vector<std::int64_t> batch;
          for (int i = 0; i < 4; ++i) batch.push_back(next_prompt++);
          return batch;
        },
        [this](std::span<const std::int64_t> indices, std::uint64_t seed, std::int64_t first) {
          sent.emplace_back(indices.begin(), indices.end());
          seeds.emplace_back(seed, first);
          return FakeAnswer{static_cast<int>(sent.size()), &awaited};
        },
        [](std::int64_t step, std::int64_t k) { return static_cast<std::uint64_t>(step * 100 + k); });
  }
};

SeparateAsyncSettings settings(std::int64_t warmup, std::int64_t threshold, bool drop = true) {
  return {.parameter_sync_step = 2, .num_warmup_batches = warmup, .max_off_policy_threshold = threshold,
          .drop_stale = drop, .mini_batch_prompts = 2};
}

TEST(RolloutQueue, SendsBatchesAsMiniBatchChunksSharingTheBatchSeed) {
  Harness h;
  auto q = h.queue(settings(1, 8));
  q.send_warmup(1, 0);
  q.send_batch(1, 0);
  ASSERT_EQ(h.sent.size(), 4u);
  EXPECT_EQ(h.sent[0], (std::vector<std::int64_t>{0, 1}));
  EXPECT_EQ(h.sent[3], (std::vector<std::int64_t>{6, 7}));
  // A batch's chunks draw from its seed at their positions in it: the synchronous step's draws.
  EXPECT_EQ(h.seeds[0], (std::pair<std::uint64_t, std::int64_t>{101, 0}));
  EXPECT_EQ(h.seeds[1], (std::pair<std::uint64_t, std::int64_t>{101, 2}));
  EXPECT_EQ(h.seeds[2], (std::pair<std::uint64_t, std::int64_t>{102, 0}));
  Evictions evictions;
  const auto first = q.take(1, 0, evictions);
  EXPECT_EQ(first.indices, (std::vector<std::int64_t>{0, 1}));
  EXPECT_EQ(first.sent_at_step, 1);
  EXPECT_EQ(first.span_at(3), 3);
  EXPECT_EQ(q.chunks_in_flight(), 3u);
  EXPECT_EQ(h.awaited, 0);  // taking a chunk does not wait for its answer
}

TEST(RolloutQueue, DropsStaleChunksAndSendsFreshPromptsBehindTheQueue) {
  Harness h;
  auto q = h.queue(settings(2, 2));
  q.send_warmup(1, 0);  // w1, w2 at step 1
  q.send_batch(1, 0);   // b1 at step 1
  Evictions e;
  (void)q.take(1, 0, e);
  (void)q.take(1, 0, e);  // w1
  q.send_batch(2, 1);
  (void)q.take(2, 1, e);
  (void)q.take(2, 1, e);  // w2: span 2
  EXPECT_EQ(e.prompts, 0);
  q.send_batch(3, 2);
  auto c = q.take(3, 2, e);  // b1 spans 3 > 2: both its chunks dropped, b2 taken
  EXPECT_EQ(e.prompts, 4);
  EXPECT_EQ(e.spans, (std::vector<double>{3, 3, 3, 3}));
  EXPECT_EQ(h.awaited, 2);  // the dropped chunks' answers were awaited
  EXPECT_EQ(c.sent_at_step, 2);
  // The replacements went to the back, sent at step 3 with the weights of step 2.
  EXPECT_EQ(q.chunks().back().sent_at_step, 3);
  EXPECT_EQ(q.chunks().back().weight_version, 2);
  EXPECT_EQ(q.chunks().back().first, 0);
  Metrics m;
  e.add_to(m);
  EXPECT_EQ(m.at("training/off_policy/evicted_samples"), 4.0);
  EXPECT_EQ(m.at("training/off_policy/evicted_samples_staleness/mean"), 3.0);
}

TEST(RolloutQueue, WaitNeverDrops) {
  Harness h;
  auto q = h.queue(settings(2, 3, /*drop=*/false));
  q.send_warmup(1, 0);
  q.send_batch(1, 0);
  Evictions e;
  for (std::int64_t step = 1; step <= 5; ++step) {
    if (step > 1) q.send_batch(step, step - 1);
    for (int c = 0; c < 2; ++c) EXPECT_LE(q.take(step, step - 1, e).span_at(step), 3);
  }
  EXPECT_EQ(e.prompts, 0);
}

TEST(RolloutQueue, SettingsComeFromTheKeys) {
  PPOConfig config = load_ppo_config({"trainer.v1.trainer_mode=separate_async", "actor_rollout_ref.hybrid_engine=False",
                                      "actor_rollout_ref.rollout.nnodes=1", "data.train_batch_size=6",
                                      "actor_rollout_ref.actor.ppo_mini_batch_size=2",
                                      "trainer.v1.separate_async.parameter_sync_step=3",
                                      "trainer.v1.sampler.max_off_policy_strategy=wait"});
  const SeparateAsyncSettings s = SeparateAsyncSettings::from_config(config);
  EXPECT_EQ(s.parameter_sync_step, 3);
  EXPECT_EQ(s.mini_batch_prompts, 2);
  EXPECT_FALSE(s.drop_stale);
  config.data.train_batch_size = 8;  // past validation: from_config checks again, naming the keys
  try {
    (void)SeparateAsyncSettings::from_config(config);
    FAIL() << "expected an error";
  } catch (const InvalidArgument& error) {
    EXPECT_NE(std::string(error.what()).find("data.train_batch_size"), std::string::npos) << error.what();
  }
}

TEST(OffPolicyMetrics, StalenessIsCountedFromTheStepsWeights) {
  const std::vector<std::int64_t> versions{0, 1, 1};
  const Metrics m = trajectory_staleness_metrics(versions, versions, 3);  // the trainer holds step 2's weights
  EXPECT_EQ(m.at("training/off_policy/trajectory_staleness/max"), 2.0);
  EXPECT_EQ(m.at("training/off_policy/trajectory_staleness/min"), 1.0);
  EXPECT_NEAR(m.at("training/off_policy/trajectory_staleness/mean"), 4.0 / 3.0, 1e-12);
  EXPECT_EQ(m.at("training/off_policy/trajectory_spans/max"), 1.0);
  EXPECT_THROW((void)trajectory_staleness_metrics({}, {}, 1), InvalidArgument);
}

TEST(MetricsAggregator, FollowsVerlsRules) {
  MetricsAggregator agg;
  agg.add({{"actor/pg_loss", 1.0}, {"actor/lr", 0.1}, {"actor/grad_norm_max", 3.0}, {"global_seqlen/min", 5.0},
           {"training/off_policy/evicted_samples", 2.0}, {"actor/entropy", 2.0}},
          10);
  agg.add({{"actor/pg_loss", 4.0}, {"actor/lr", 0.2}, {"actor/grad_norm_max", 1.0}, {"global_seqlen/min", 2.0},
           {"training/off_policy/evicted_samples", 3.0}, {"actor/entropy", 5.0}},
          30);
  const Metrics m = agg.aggregated();
  EXPECT_DOUBLE_EQ(m.at("actor/pg_loss"), (1.0 * 10 + 4.0 * 30) / 40);  // weighted by samples
  EXPECT_DOUBLE_EQ(m.at("actor/lr"), 0.2);                              // the last
  EXPECT_DOUBLE_EQ(m.at("actor/grad_norm_max"), 3.0);
  EXPECT_DOUBLE_EQ(m.at("global_seqlen/min"), 2.0);
  EXPECT_DOUBLE_EQ(m.at("training/off_policy/evicted_samples"), 5.0);  // summed
  EXPECT_DOUBLE_EQ(m.at("actor/entropy"), (2.0 * 10 + 5.0 * 30) / 40);
}

}  // namespace
