// Calibration of the placement cost model: least squares recovers known efficiency factors from
// synthetic stage times (the strict fit and the non-negative one, the per-call overhead among
// them), and refuses measurements that cannot determine them.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "../support/error_message.hpp"
#include "verl/parallel/placement_calibration.hpp"
#include "verl/parallel/placement_cost_model.hpp"

using namespace verl;
using namespace verl::parallel;
using verl::test_support::message_of;

namespace {

/// Stage work of real layouts: forward, update, generation and reshard of a 7B model on a few
/// meshes, so that the columns mix as they do in practice.
std::vector<StageWork> stage_works(const ClusterSpec& cluster) {
  const RoleCostModel cm =
      RoleCostModel::of(Role::actor, model_preset("llama-7b"), BatchShape{64, 2, 256, 256, 1, 2, 2}, MemoryModel{}, cluster);
  std::vector<StageWork> works;
  for (const TrainMesh mesh : {TrainMesh{1, 1, 16}, TrainMesh{2, 4, 2}, TrainMesh{1, 8, 2}, TrainMesh{4, 2, 2, true},
                               TrainMesh{1, 16, 1}}) {
    if (mesh.tp > 8) continue;
    works.push_back(cm.forward_work(mesh));
    works.push_back(cm.update_work(mesh));
  }
  works.push_back(cm.generation_work(GenMesh{1, 4, 4}, 8));
  works.push_back(cm.generation_work(GenMesh{2, 2, 4}, 32));
  works.push_back(cm.reshard_work(TrainMesh{2, 4, 2}, GenMesh{1, 2, 8}, 5.25e9));
  return works;
}

}  // namespace

TEST(PlacementCalibration, RecoversKnownEfficiencyFromSyntheticMeasurements) {
  ClusterSpec cluster = cluster_preset("a100-80gb", 16);
  cluster.devices_per_node = 4;  // some groups cross nodes: every factor is exercised
  const Efficiency truth{0.42, 0.66, 0.81, 0.37, 23e-6, 3.7e-3};
  const DeviceModel device{cluster, truth};
  std::vector<StageMeasurement> measurements;
  for (const StageWork& w : stage_works(cluster)) measurements.push_back({w, device.seconds(w)});
  const Efficiency fitted = calibrate_efficiency(cluster, measurements);
  EXPECT_NEAR(fitted.compute, truth.compute, 1e-9);
  EXPECT_NEAR(fitted.memory, truth.memory, 1e-9);
  EXPECT_NEAR(fitted.intra_node, truth.intra_node, 1e-9);
  EXPECT_NEAR(fitted.inter_node, truth.inter_node, 1e-9);
  EXPECT_NEAR(fitted.collective_latency, truth.collective_latency, 1e-12);
  EXPECT_NEAR(fitted.call_overhead, truth.call_overhead, 1e-9 * truth.call_overhead);
}

TEST(PlacementCalibration, BothFitsRecoverAKnownCallOverheadExactly) {
  // Synthetic times from the model itself, with a per-call overhead the size of the runtime's
  // (2.2 ms) and one a thousand times smaller: both fits give it back to 1e-9 relative, with the
  // other factors.
  ClusterSpec cluster = cluster_preset("h100-80gb", 16);
  cluster.devices_per_node = 4;
  for (const double overhead : {2.2e-3, 2.2e-6}) {
    const Efficiency truth{0.47, 0.71, 0.63, 0.29, 15e-6, overhead};
    const DeviceModel device{cluster, truth};
    std::vector<StageMeasurement> measurements;
    for (const StageWork& w : stage_works(cluster)) measurements.push_back({w, device.seconds(w)});
    // Every stage but the reshard makes calls (the reshard has none of its own).
    for (const StageMeasurement& m : measurements) EXPECT_TRUE(m.work.calls > 0 || m.work.flops == 0);
    const Efficiency initial{0.5, 0.5, 0.5, 0.5, 1e-5, 0.5};
    for (const Efficiency& fitted :
         {calibrate_efficiency(cluster, measurements, initial), calibrate_efficiency_nonnegative(cluster, measurements, initial)}) {
      EXPECT_NEAR(fitted.call_overhead, overhead, 1e-9 * overhead);
      EXPECT_NEAR(fitted.compute, truth.compute, 1e-9 * truth.compute);
      EXPECT_NEAR(fitted.memory, truth.memory, 1e-9 * truth.memory);
      EXPECT_NEAR(fitted.collective_latency, truth.collective_latency, 1e-9 * truth.collective_latency);
    }
  }
  // Without any call in the measurements the overhead is not exercised: it keeps its initial value.
  const std::vector<StageMeasurement> no_calls{{{1e15, 0, 0, 0, 0, 0}, 2.0}, {{0, 1e12, 0, 0, 0, 0}, 1.0}};
  Efficiency initial;
  initial.call_overhead = 4.2e-3;
  EXPECT_EQ(calibrate_efficiency(cluster, no_calls, initial).call_overhead, 4.2e-3);
  EXPECT_EQ(calibrate_efficiency_nonnegative(cluster, no_calls, initial).call_overhead, 4.2e-3);
  // A negative fitted overhead (times that fall as the calls grow) is refused by the strict fit,
  // and dropped (0, no time) by the non-negative one.
  std::vector<StageMeasurement> falling;
  for (int i = 1; i <= 4; ++i) {
    falling.push_back({{1e14 * i, 0, 0, 0, 0, 10.0 * (5 - i)}, 1e14 * i / (0.5 * cluster.peak_flops) - 1e-4 * (5 - i)});
  }
  const std::string refused = message_of<InvalidArgument>([&] { (void)calibrate_efficiency(cluster, falling); });
  EXPECT_NE(refused.find("the fitted efficiency.call_overhead is -"), std::string::npos) << refused;  // about -1e-5
  EXPECT_NE(refused.find(" s, expected >= 0"), std::string::npos) << refused;
  EXPECT_EQ(calibrate_efficiency_nonnegative(cluster, falling).call_overhead, 0);
  // A non-finite call count is refused by name.
  const std::vector<StageMeasurement> bad{{{1e15, 0, 0, 0, 0, std::nan("")}, 1.0}};
  EXPECT_EQ(message_of<InvalidArgument>([&] { (void)calibrate_efficiency_nonnegative(cluster, bad); }),
            "measurements[0].work: expected finite non-negative amounts, got nan for call_overhead");
}

TEST(PlacementCalibration, NoisyMeasurementsGiveCloseFactors) {
  ClusterSpec cluster = cluster_preset("h100-80gb", 16);
  cluster.devices_per_node = 4;
  const Efficiency truth{0.55, 0.75, 0.6, 0.5, 8e-6};
  const DeviceModel device{cluster, truth};
  std::mt19937_64 rng(3);
  std::normal_distribution<double> noise(0.0, 0.01);  // 1% timing noise
  std::vector<StageMeasurement> measurements;
  for (int repeat = 0; repeat < 20; ++repeat) {
    for (const StageWork& w : stage_works(cluster)) measurements.push_back({w, device.seconds(w) * (1 + noise(rng))});
  }
  const Efficiency fitted = calibrate_efficiency(cluster, measurements);
  EXPECT_NEAR(fitted.compute, truth.compute, 0.02 * truth.compute);
  EXPECT_NEAR(fitted.memory, truth.memory, 0.05 * truth.memory);
  EXPECT_NEAR(fitted.intra_node, truth.intra_node, 0.1 * truth.intra_node);
  EXPECT_NEAR(fitted.inter_node, truth.inter_node, 0.1 * truth.inter_node);
}

TEST(PlacementCalibration, FactorsNoMeasurementExercisesKeepTheirValue) {
  const ClusterSpec cluster = cluster_preset("a100-80gb", 8);
  const Efficiency truth{0.3, 0.9, 0.7, 0.7, 0};
  const DeviceModel device{cluster, truth};
  // Pure compute and pure memory stages only.
  std::vector<StageMeasurement> m{{{1e15, 0, 0, 0, 0}, 0}, {{0, 1e12, 0, 0, 0}, 0}, {{2e15, 3e12, 0, 0, 0}, 0}};
  for (auto& x : m) x.seconds = device.seconds(x.work);
  const Efficiency initial{0.5, 0.5, 0.123, 0.456, 7e-6};
  const Efficiency fitted = calibrate_efficiency(cluster, m, initial);
  EXPECT_NEAR(fitted.compute, 0.3, 1e-12);
  EXPECT_NEAR(fitted.memory, 0.9, 1e-12);
  EXPECT_EQ(fitted.intra_node, 0.123);
  EXPECT_EQ(fitted.inter_node, 0.456);
  EXPECT_EQ(fitted.collective_latency, 7e-6);
}

TEST(PlacementCalibration, UndeterminedOrInconsistentMeasurementsAreRefused) {
  const ClusterSpec cluster = cluster_preset("a100-80gb", 8);
  // Two stages with the same mix cannot separate compute from memory.
  const std::vector<StageMeasurement> collinear{{{1e15, 1e12, 0, 0, 0}, 1.0}, {{2e15, 2e12, 0, 0, 0}, 2.0}};
  EXPECT_NE(message_of<InvalidArgument>([&] { (void)calibrate_efficiency(cluster, collinear); })
                .find("expected work vectors that determine the 2 factors exercised, got rank 1"),
            std::string::npos);
  const std::vector<StageMeasurement> one{{{1e15, 1e12, 0, 0, 0}, 1.0}};
  EXPECT_NE(message_of<InvalidArgument>([&] { (void)calibrate_efficiency(cluster, one); })
                .find("measurements: expected at least 2 (one per factor exercised), got 1"),
            std::string::npos);
  // Faster than the peak: the fitted compute efficiency would exceed 1.
  const std::vector<StageMeasurement> too_fast{{{312e12, 0, 0, 0, 0}, 0.5}};
  EXPECT_NE(message_of<InvalidArgument>([&] { (void)calibrate_efficiency(cluster, too_fast); })
                .find("the fitted efficiency.compute is 2"),
            std::string::npos);
  const std::vector<StageMeasurement> bad_time{{{1e15, 0, 0, 0, 0}, std::nan("")}};
  EXPECT_NE(message_of<InvalidArgument>([&] { (void)calibrate_efficiency(cluster, bad_time); })
                .find("measurements[0].seconds: expected a positive finite time, got nan"),
            std::string::npos);
}
