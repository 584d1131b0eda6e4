// verl's trainer metrics: compute_data_metrics, timing and throughput metrics, reduce_metrics.
// Expected values follow verl's metric_utils on the same tensors (float32, checked with torch).
#include <gtest/gtest.h>

#include <cmath>
#include <thread>

#include "verl/trainer/metrics.hpp"

using namespace verl;
using namespace verl::trainer;

namespace {

/// Three samples, prompt width 3, response width 4; sample 2 is aborted (empty response).
struct Batch {
  MatrixF scores{3, 4}, rewards{3, 4}, advantages{3, 4}, returns{3, 4}, values{3, 4};
  MatrixF attention_mask{3, 7}, response_mask{3, 4};
  Batch() {
    scores << 0, 0, 1, 0, 0, 0.5f, 0, 0, 0, 0, 0, 0;
    rewards << 0, -0.1f, 1, 0, 0, 0.5f, -0.2f, 0, 0, 0, 0, 0;
    advantages << 0.5f, 0.25f, -1, 0, 2, -0.5f, 1, 3, 0, 0, 0, 0;
    returns << 1, 0.9f, 1, 0, 0.3f, 0.5f, -0.2f, 7, 0, 0, 0, 0;
    values << 0.8f, 0.7f, 0.9f, 0, 0.1f, 0.6f, 0.0f, 9, 0, 0, 0, 0;
    attention_mask << 0, 1, 1, 1, 1, 1, 0,  //
        1, 1, 1, 1, 1, 1, 1,                //
        0, 0, 1, 0, 0, 0, 0;
    response_mask = attention_mask.rightCols(4);
  }
  DataMetricsInputs inputs(bool with_values) const {
    DataMetricsInputs in{scores, rewards, advantages, returns, attention_mask, response_mask};
    if (with_values) in.values.emplace(values);
    return in;
  }
};

}  // namespace

TEST(DataMetrics, MatchVerl) {
  const Batch b;
  const Metrics m = compute_data_metrics(b.inputs(true));
  EXPECT_DOUBLE_EQ(m.at("critic/score/mean"), 0.75);
  EXPECT_DOUBLE_EQ(m.at("critic/score/max"), 1.0);
  EXPECT_DOUBLE_EQ(m.at("critic/score/min"), 0.5);
  EXPECT_FLOAT_EQ(m.at("critic/rewards/mean"), 0.6f);
  EXPECT_FLOAT_EQ(m.at("critic/rewards/min"), 0.3f);
  // Valid advantages: 0.5, 0.25, -1 (sample 0) and 2, -0.5, 1, 3 (sample 1).
  EXPECT_FLOAT_EQ(m.at("critic/advantages/mean"), 5.25f / 7.0f);
  EXPECT_DOUBLE_EQ(m.at("critic/advantages/max"), 3.0);
  EXPECT_DOUBLE_EQ(m.at("critic/advantages/min"), -1.0);
  EXPECT_DOUBLE_EQ(m.at("critic/returns/max"), 7.0);
  EXPECT_DOUBLE_EQ(m.at("critic/values/max"), 9.0);
  // torch: 1 - var(returns - values) / (var(returns) + 1e-5), unbiased variances.
  EXPECT_NEAR(m.at("critic/vf_explained_var"), 0.8953271508216858, 1e-7);  // torch
  EXPECT_FLOAT_EQ(m.at("response_length/mean"), 7.0f / 3.0f);
  EXPECT_DOUBLE_EQ(m.at("response_length/max"), 4.0);
  EXPECT_DOUBLE_EQ(m.at("response_length/min"), 0.0);
  EXPECT_FLOAT_EQ(m.at("response_length/clip_ratio"), 1.0f / 3.0f);
  EXPECT_DOUBLE_EQ(m.at("response_length_non_aborted/mean"), 3.5);
  EXPECT_DOUBLE_EQ(m.at("response_length_non_aborted/min"), 3.0);
  EXPECT_DOUBLE_EQ(m.at("response_length_non_aborted/clip_ratio"), 0.5);
  EXPECT_FLOAT_EQ(m.at("response/aborted_ratio"), 1.0f / 3.0f);
  EXPECT_FLOAT_EQ(m.at("prompt_length/mean"), 2.0f);
  EXPECT_DOUBLE_EQ(m.at("prompt_length/max"), 3.0);
  EXPECT_FLOAT_EQ(m.at("prompt_length/clip_ratio"), 1.0f / 3.0f);
  EXPECT_FALSE(m.contains("num_turns/mean"));

  const Metrics without_critic = compute_data_metrics(b.inputs(false));
  EXPECT_FALSE(without_critic.contains("critic/values/mean"));
  EXPECT_FALSE(without_critic.contains("critic/vf_explained_var"));
}

TEST(DataMetrics, FromADataProtoWithVerlKeys) {
  const Batch b;
  data::DataProto batch;
  batch.set("token_level_scores", b.scores)
      .set("token_level_rewards", b.rewards)
      .set("advantages", b.advantages)
      .set("returns", b.returns)
      .set("values", b.values)
      .set("attention_mask", MatrixI64(b.attention_mask.cast<std::int64_t>()))
      .set("response_mask", b.response_mask)
      .set("responses", MatrixI64::Zero(3, 4));
  batch.set_non_tensor("__num_turns__", std::vector<std::int64_t>{2, 4, 3});
  const Metrics m = compute_data_metrics(batch, true);
  EXPECT_EQ(m, [&] {
    auto expected = compute_data_metrics(b.inputs(true));
    expected["num_turns/min"] = 2;
    expected["num_turns/max"] = 4;
    expected["num_turns/mean"] = 3;
    return expected;
  }());
  batch.pop({"values"});
  EXPECT_THROW(compute_data_metrics(batch, true), InvalidArgument);
  EXPECT_NO_THROW(compute_data_metrics(batch, false));
}

TEST(DataMetrics, BadInput) {
  Batch b;
  b.attention_mask.rightCols(4).setZero();
  b.response_mask.setZero();
  try {
    compute_data_metrics(b.inputs(false));
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_STREQ(e.what(), "batch: all 3 samples are aborted (empty responses); verl refuses such a batch");
  }
  Batch c;
  c.response_mask(0, 0) = 0.5f;
  EXPECT_THROW(compute_data_metrics(c.inputs(false)), InvalidArgument);
  Batch d;
  const MatrixF narrow = MatrixF::Zero(3, 3);
  const DataMetricsInputs in{d.scores, d.rewards, narrow, d.returns, d.attention_mask, d.response_mask};
  try {
    compute_data_metrics(in);
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_STREQ(e.what(), "advantages: expected the shape of token_level_scores (3, 4), got (3, 3)");
  }
}

TEST(TimingMetrics, PerTokenAsVerl) {
  const Batch b;
  const TokenCounts tokens = count_tokens(b.attention_mask, 4);
  EXPECT_DOUBLE_EQ(tokens.prompt, 6.0);
  EXPECT_DOUBLE_EQ(tokens.response, 7.0);
  const TimingRaw timing{{"gen", 0.7}, {"ref", 1.3}, {"reward", 0.1}, {"step", 3.0}, {"update_actor", 2.6}};
  const Metrics m = compute_timing_metrics(tokens, timing);
  EXPECT_DOUBLE_EQ(m.at("timing_s/gen"), 0.7);
  EXPECT_DOUBLE_EQ(m.at("timing_s/reward"), 0.1);
  EXPECT_DOUBLE_EQ(m.at("timing_per_token_ms/gen"), 100.0);
  EXPECT_DOUBLE_EQ(m.at("timing_per_token_ms/ref"), 100.0);
  EXPECT_DOUBLE_EQ(m.at("timing_per_token_ms/update_actor"), 200.0);
  EXPECT_FALSE(m.contains("timing_per_token_ms/reward"));
  EXPECT_FALSE(m.contains("timing_per_token_ms/step"));
}

TEST(ThroughputMetrics, TokensPerSecondPerDevice) {
  const TimingRaw timing{{"step", 2.0}};
  const Metrics m = compute_throughout_metrics(1000.0, timing, 4);
  EXPECT_DOUBLE_EQ(m.at("perf/total_num_tokens"), 1000.0);
  EXPECT_DOUBLE_EQ(m.at("perf/time_per_step"), 2.0);
  EXPECT_DOUBLE_EQ(m.at("perf/throughput"), 125.0);
  EXPECT_THROW(compute_throughout_metrics(1.0, TimingRaw{}, 1), InvalidArgument);
  data::DataProto batch;
  batch.meta_info()["global_token_num"] = {10, 20, 30};
  EXPECT_DOUBLE_EQ(compute_throughout_metrics(batch, timing, 1).at("perf/throughput"), 30.0);
}

TEST(ReduceMetrics, MaxMinOrMeanByName) {
  MetricsAccumulator accumulator;
  accumulator.append({{"actor/pg_loss", 1.0}, {"critic/score/max", 2.0}, {"perf/min_x", 5.0}});
  accumulator.append({{"actor/pg_loss", 2.0}, {"critic/score/max", 7.0}, {"perf/min_x", 3.0}});
  accumulator.append("actor/pg_loss", 6.0);
  const Metrics m = accumulator.reduce();
  EXPECT_DOUBLE_EQ(m.at("actor/pg_loss"), 3.0);
  EXPECT_DOUBLE_EQ(m.at("critic/score/max"), 7.0);
  EXPECT_DOUBLE_EQ(m.at("perf/min_x"), 3.0);
  EXPECT_THROW(reduce_metrics({{"empty", {}}}), InvalidArgument);
}

TEST(Timer, AccumulatesPerPhase) {
  TimingRaw timing;
  {
    ScopedTimer t("gen", timing);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  const double first = timing.at("gen");
  EXPECT_GE(first, 0.004);
  const int answer = timed("gen", timing, [] { return 42; });
  EXPECT_EQ(answer, 42);
  EXPECT_GE(timing.at("gen"), first);
}
