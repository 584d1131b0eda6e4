// What PPOController logs of the metrics a worker returns in meta_info["metrics"]
// (detail::worker_meta_metrics, e.g. the Megatron worker's reshard: timing_s/reshard,
// perf/reshard_bytes_received, perf/peak_param_bytes): one collected rank's object, the dict of
// lists DataProto::concat makes of several ranks' answers (dp > 1: these were dropped), or a list
// of per-rank objects. perf/* figures are per-rank: the max over the ranks; the others the mean.
#include <gtest/gtest.h>

#include <vector>

#include <nlohmann/json.hpp>

#include "verl/data/data_proto.hpp"
#include "verl/trainer/ppo_controller.hpp"

namespace {

using namespace verl;
using trainer::detail::worker_meta_metrics;

data::DataProto answer(double seconds, double received, double peak) {
  data::DataProto part;
  part.meta_info()["metrics"] = {
      {"timing_s/reshard", seconds}, {"perf/reshard_bytes_received", received}, {"perf/peak_param_bytes", peak}};
  return part;
}

TEST(WorkerMetaMetrics, OneCollectedRanksObject) {
  const Metrics m = worker_meta_metrics(answer(0.25, 43008, 130304).meta_info());
  EXPECT_EQ(m.at("timing_s/reshard"), 0.25);
  EXPECT_EQ(m.at("perf/reshard_bytes_received"), 43008);
  EXPECT_EQ(m.at("perf/peak_param_bytes"), 130304);
}

TEST(WorkerMetaMetrics, TheConcatenationOfSeveralRanksKeepsEveryKey) {
  // What the runtime's megatron_compute_proto / dp_compute_proto collect gives at dp = 2.
  const std::vector<data::DataProto> parts = {answer(0.25, 43008, 130304), answer(0.75, 43008, 130304)};
  const data::DataProto joined = data::DataProto::concat(parts);
  ASSERT_TRUE(joined.meta_info().at("metrics").at("perf/reshard_bytes_received").is_array());
  const Metrics m = worker_meta_metrics(joined.meta_info());
  EXPECT_EQ(m.at("perf/reshard_bytes_received"), 43008);  // balanced: every rank's figure
  EXPECT_EQ(m.at("perf/peak_param_bytes"), 130304);
  EXPECT_EQ(m.at("timing_s/reshard"), 0.5);  // the mean
}

TEST(WorkerMetaMetrics, UnbalancedPerRankFiguresLogTheWorstRank) {
  const std::vector<data::DataProto> parts = {answer(1, 100, 900), answer(1, 300, 700), answer(1, 200, 800)};
  const Metrics m = worker_meta_metrics(data::DataProto::concat(parts).meta_info());
  EXPECT_EQ(m.at("perf/reshard_bytes_received"), 300);
  EXPECT_EQ(m.at("perf/peak_param_bytes"), 900);
}

TEST(WorkerMetaMetrics, AListOfPerRankObjects) {
  nlohmann::json meta;
  meta["metrics"] = nlohmann::json::array({{{"perf/peak_param_bytes", 5}, {"timing_s/reshard", 1.0}},
                                           {{"perf/peak_param_bytes", 7}, {"timing_s/reshard", 3.0}}});
  const Metrics m = worker_meta_metrics(meta);
  EXPECT_EQ(m.at("perf/peak_param_bytes"), 7);
  EXPECT_EQ(m.at("timing_s/reshard"), 2.0);
}

TEST(WorkerMetaMetrics, NoMetricsNothingLogged) {
  EXPECT_TRUE(worker_meta_metrics(nlohmann::json::object()).empty());
  EXPECT_TRUE(worker_meta_metrics(data::DataProto().meta_info()).empty());
}

}  // namespace
