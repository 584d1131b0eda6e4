// The placement cost model's measurements file (placement_calibration.hpp): parsing, errors that
// name the file and the line, the cost model's work for each timed stage, and the fit and
// prediction on synthetic times made by a known device.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "../support/error_message.hpp"
#include "verl/parallel/placement_calibration.hpp"

using namespace verl;
using namespace verl::parallel;
using verl::test_support::message_of;

namespace {

const std::string header = "verl-placement-timings 1\n";
const std::string device = "device flops=1e10 bandwidth=5e9 link=2e9 latency=1e-5  # one core\n";
const std::string models =
    "model small params=63000 layers=2 heads=4 kv_heads=2 hidden=32 ffn=64 vocab=1408\n"
    "model large params=1.33e7 layers=4 heads=8 kv_heads=4 hidden=512 ffn=1536 vocab=1408\n";
const std::string batch =
    "prompts=4 responses=4 prompt_length=41 response_length=16 epochs=1 mini_batches=2 micro_batch=8";

std::string run_line(const std::string& name, const std::string& model, int devices, const std::string& set,
                     const std::string& meshes) {
  return "run " + name + " model=" + model + " devices=" + std::to_string(devices) + " set=" + set + " " + batch + " " +
         meshes + "\n";
}

/// Runs of both models at one and two devices, colocated, split and TP2, every stage timed
/// (the seconds are placeholders).
std::string full_file() {
  std::string text = header + "# measured on a shared machine\n" + device + "memory param=4 grad=4 optimizer=8\n" + models;
  const std::string all1 = "actor=1x1x1 gen=1x1x1 ref=1x1x1 critic=1x1x1";
  const std::string all2 = "actor=1x1x2 gen=1x1x2 ref=1x1x2 critic=1x1x2";
  const std::string split = "actor=1x1x1 gen=1x1x1 ref=1x1x1 critic=1x1x1";
  const std::string tp2 = "actor=1x2x1 gen=1x1x2 ref=1x1x2 critic=1x1x2";
  const std::vector<std::tuple<std::string, std::string, int, std::string, std::string>> runs{
      {"small-1-colocated", "small", 1, "fit", all1},   {"small-2-colocated", "small", 2, "fit", all2},
      {"small-2-split", "small", 2, "fit", split},      {"small-2-tp2", "small", 2, "fit", tp2},
      {"large-1-colocated", "large", 1, "fit", all1},   {"large-2-colocated", "large", 2, "predict", all2},
      {"large-2-tp2", "large", 2, "predict", tp2}};
  for (const auto& [name, model, devices, set, meshes] : runs) {
    text += run_line(name, model, devices, set, meshes);
    for (const char* stage : {"gen", "old_log_prob", "ref", "values", "update_actor", "update_critic"}) {
      text += "stage " + name + " " + stage + " 0.5\n";
    }
    if (name.find("tp2") != std::string::npos) text += "stage " + name + " reshard 0.01\n";
  }
  return text;
}

}  // namespace

TEST(PlacementCalibrationFile, ParsesRecords) {
  const CalibrationData data = parse_calibration(full_file(), "timings.txt");
  EXPECT_EQ(data.source, "timings.txt");
  EXPECT_DOUBLE_EQ(data.cluster.peak_flops, 1e10);
  EXPECT_DOUBLE_EQ(data.cluster.hbm_bandwidth, 5e9);
  EXPECT_DOUBLE_EQ(data.cluster.intra_node_bandwidth, 2e9);
  EXPECT_DOUBLE_EQ(data.cluster.inter_node_bandwidth, 2e9);
  EXPECT_DOUBLE_EQ(data.initial.collective_latency, 1e-5);
  EXPECT_EQ(data.cluster.devices, 2);
  EXPECT_EQ(data.cluster.devices_per_node, 2);
  EXPECT_DOUBLE_EQ(data.memory.param_bytes, 4);
  EXPECT_FALSE(data.memory.distributed_optimizer);
  ASSERT_EQ(data.models.size(), 2u);
  EXPECT_EQ(data.model("large").hidden, 512);
  ASSERT_EQ(data.runs.size(), 7u);
  EXPECT_EQ(data.runs[3].actor, (TrainMesh{1, 2, 1, false}));
  EXPECT_EQ(data.runs[3].gen, (GenMesh{1, 1, 2}));
  EXPECT_FALSE(data.runs[5].fit);
  EXPECT_EQ(data.runs[0].batch.sequences(), 16);
  EXPECT_EQ(data.stages.size(), 7u * 6 + 2);
}

TEST(PlacementCalibrationFile, WorkIsTheCostModels) {
  const CalibrationData data = parse_calibration(full_file(), "timings.txt");
  const RoleCostModel cm = RoleCostModel::of(Role::actor, data.model("large"), data.runs[6].batch, data.memory, data.cluster);
  const RoleCostModel critic =
      RoleCostModel::of(Role::critic, data.model("large"), data.runs[6].batch, data.memory, data.cluster);
  for (const CalibrationStage& s : data.stages) {
    if (data.runs[s.run].name != "large-2-tp2") continue;
    const StageWork w = calibration_stage_work(data, s);
    if (s.stage == TimedStage::update_actor) {
      const StageWork expected = cm.update_work(TrainMesh{1, 2, 1});
      EXPECT_DOUBLE_EQ(w.flops, expected.flops);
      EXPECT_DOUBLE_EQ(w.intra_node_bytes, expected.intra_node_bytes);
      EXPECT_GT(w.intra_node_bytes, 0);  // TP all-reduces
      // 16 sequences, 2 mini-batches of 8 on one DP rank, micro-batches of 8: 1 + 2 x (1 + 1).
      EXPECT_EQ(w.calls, 5);
    }
    if (s.stage == TimedStage::update_critic || s.stage == TimedStage::values) {
      // The critic (DP=2 here) has a value head: 2 x (1.33e7 - 512 x 1408 + 512) FLOPs per
      // token forward, 6x that in the update, 16 x 57 / 2 tokens per rank.
      const double per_token = 2 * (1.33e7 - 512.0 * 1408 + 512);
      const double tokens = 8 * 57;
      EXPECT_DOUBLE_EQ(w.flops, (s.stage == TimedStage::values ? 1 : 3) * per_token * tokens);
      const StageWork expected = s.stage == TimedStage::values ? critic.forward_work(TrainMesh{1, 1, 2})
                                                               : critic.update_work(TrainMesh{1, 1, 2});
      EXPECT_EQ(w.flops, expected.flops);
      EXPECT_EQ(w.calls, s.stage == TimedStage::values ? 2 : 5);  // 1 + 1 micro-batch; 1 + 2 x (1 + 1)
    }
    if (s.stage == TimedStage::gen) {
      EXPECT_DOUBLE_EQ(w.flops, cm.generation_work(GenMesh{1, 1, 2}, 8).flops);
      EXPECT_EQ(w.calls, 1 + 17);  // one wave of 8 sequences: the prefill and 16 decode steps
    }
    if (s.stage == TimedStage::reshard) {
      // tp=2 -> tg=1: each rank gathers the other half of the fp32 weights.
      EXPECT_NEAR(w.intra_node_bytes, 1.33e7 * 4 / 2, 4);
      EXPECT_EQ(w.collectives, 1);
      EXPECT_EQ(w.calls, 0);
    }
  }
}

TEST(PlacementCalibrationFile, FitRecoversAKnownDeviceAndPredictsTheHeldOutRuns) {
  CalibrationData data = parse_calibration(full_file(), "timings.txt");
  const Efficiency truth{0.6, 0.3, 0.4, 0.7, 2e-5, 2.2e-3};
  const DeviceModel device{data.cluster, truth};
  for (CalibrationStage& s : data.stages) s.seconds = device.seconds(calibration_stage_work(data, s));
  const CalibrationResult r = calibrate_and_predict(data);
  EXPECT_NEAR(r.fitted.compute, truth.compute, 1e-9);
  EXPECT_NEAR(r.fitted.memory, truth.memory, 1e-9);
  EXPECT_NEAR(r.fitted.intra_node, truth.intra_node, 1e-9);
  EXPECT_NEAR(r.fitted.collective_latency, truth.collective_latency, 1e-12);
  EXPECT_NEAR(r.fitted.call_overhead, truth.call_overhead, 1e-9 * truth.call_overhead);
  EXPECT_DOUBLE_EQ(r.fitted.inter_node, data.initial.inter_node);  // no measurement crosses nodes
  std::size_t held_out = 0;
  for (const CalibrationRow& row : r.rows) {
    ASSERT_TRUE(row.modelled) << row.run << " " << row.stage;
    EXPECT_NEAR(row.relative_error(), 0, 1e-9) << row.run << " " << row.stage;
    held_out += row.fit ? 0 : 1;
  }
  EXPECT_EQ(held_out, 13u);
  const std::string table = format_calibration_table(r);
  EXPECT_NE(table.find("large-2-tp2"), std::string::npos);
  EXPECT_NE(table.find("held-out stages (13): 0.0%"), std::string::npos) << table;
  EXPECT_NE(table.find("overhead 0.0022 s per call"), std::string::npos) << table;
}

TEST(PlacementCalibrationFile, TheOverheadIsReadFittedOrHeld) {
  // device overhead= sets the initial value; held out of the fit (--fit without overhead) it
  // stays, and the other factors are fitted on the times less its calls' share.
  std::string text = full_file();
  text.replace(text.find("latency=1e-5"), 12, "latency=1e-5 overhead=3e-3");
  CalibrationData data = parse_calibration(text, "timings.txt");
  EXPECT_DOUBLE_EQ(data.initial.call_overhead, 3e-3);
  const Efficiency truth{0.6, 0.3, 0.4, 0.7, 2e-5, 3e-3};
  const DeviceModel device{data.cluster, truth};
  for (CalibrationStage& s : data.stages) s.seconds = device.seconds(calibration_stage_work(data, s));
  CalibrationFactors factors;
  factors.call_overhead = false;
  const CalibrationResult held = calibrate_and_predict(data, factors);
  EXPECT_EQ(held.fitted.call_overhead, 3e-3);
  EXPECT_NEAR(held.fitted.compute, 0.6, 1e-9);
  EXPECT_NEAR(held.fitted.collective_latency, 2e-5, 1e-12);
  // Fitted from a wrong start, it is recovered.
  data.initial.call_overhead = 0;
  EXPECT_NEAR(calibrate_and_predict(data).fitted.call_overhead, 3e-3, 3e-12);
  // Strict: the same.
  factors = {};
  factors.strict = true;
  EXPECT_NEAR(calibrate_and_predict(data, factors).fitted.call_overhead, 3e-3, 3e-12);
}

TEST(PlacementCalibrationFile, FactorsHeldFixedKeepTheirValue) {
  CalibrationData data = parse_calibration(full_file(), "timings.txt");
  const Efficiency truth{0.6, 0.8, 0.4, 0.7, 2e-5};  // memory at its default
  const DeviceModel device{data.cluster, truth};
  for (CalibrationStage& s : data.stages) s.seconds = device.seconds(calibration_stage_work(data, s));
  CalibrationFactors factors;
  factors.memory = false;
  const CalibrationResult r = calibrate_and_predict(data, factors);
  EXPECT_DOUBLE_EQ(r.fitted.memory, 0.8);
  EXPECT_NEAR(r.fitted.compute, 0.6, 1e-9);
  EXPECT_NEAR(r.fitted.intra_node, 0.4, 1e-9);
}

TEST(PlacementCalibrationFile, AReshardThatMovesNothingIsReportedNotFitted) {
  const std::string text = header + device + models + run_line("r", "small", 2, "fit", "actor=1x1x2 gen=1x1x2") +
                           "stage r reshard 0.001\nstage r gen 1\nstage r old_log_prob 1\nstage r update_actor 1\n";
  CalibrationData data = parse_calibration(text, "t");
  EXPECT_EQ(calibration_stage_work(data, data.stages[0]).intra_node_bytes, 0);
  const DeviceModel truth{data.cluster, Efficiency{0.5, 0.5, 0.7, 0.7, 1e-5, 1e-3}};
  for (std::size_t i = 1; i < data.stages.size(); ++i) {
    data.stages[i].seconds = truth.seconds(calibration_stage_work(data, data.stages[i]));
  }
  CalibrationFactors factors;  // three measurements: fit compute and memory only
  factors.intra_node = factors.collective_latency = factors.call_overhead = false;
  const CalibrationResult r = calibrate_and_predict(data, factors);
  EXPECT_FALSE(r.rows[0].modelled);
  EXPECT_EQ(r.fit_measurements, 3u);
  EXPECT_NEAR(r.fitted.compute, 0.5, 1e-9);
  EXPECT_NE(format_calibration_table(r).find("no work"), std::string::npos);
}

TEST(PlacementCalibrationFile, ErrorsNameTheFileAndTheLine) {
  const std::string base = header + device + models;  // lines 1-4
  const std::string run = run_line("r", "small", 1, "fit", "actor=1x1x1 gen=1x1x1");  // line 5
  auto error = [](const std::string& text) {
    return message_of<InvalidArgument>([&] { (void)parse_calibration(text, "m.txt"); });
  };
  EXPECT_EQ(error("device flops=1\n"), "m.txt:1: expected the header 'verl-placement-timings 1' first, got 'device flops=1'");
  EXPECT_EQ(error(""), "m.txt:0: expected the header 'verl-placement-timings 1', got an empty file");
  EXPECT_EQ(error(base + run + "stage r gen nan\n"), "m.txt:6: stage seconds: expected a finite number, got 'nan'");
  EXPECT_EQ(error(base + run + "stage r gen inf\n"), "m.txt:6: stage seconds: expected a finite number, got 'inf'");
  EXPECT_EQ(error(base + run + "stage r gen -1\n"), "m.txt:6: stage seconds: expected a positive number, got '-1'");
  EXPECT_EQ(error(base + run + "stage r gen 0.5s\n"), "m.txt:6: stage seconds: expected a number, got '0.5s'");
  EXPECT_EQ(error(base + run + "stage r adv 0.5\n"),
            "m.txt:6: stage: expected one of gen, reshard, old_log_prob, ref, values, update_actor, update_critic, got "
            "'adv'");
  EXPECT_EQ(error(base + run + "stage q gen 0.5\n"), "m.txt:6: stage run: expected a run defined above, got 'q'");
  EXPECT_EQ(error(base + run + "stage r values 0.5\n"),
            "m.txt:6: stage values: expected a run with the role it times, got run 'r' without it");
  EXPECT_EQ(error(base + run + "stage r gen 0.5\nstage r gen 0.6\n"),
            "m.txt:7: stage: expected one time per run and stage, got gen of 'r' twice (line 6)");
  EXPECT_EQ(error(header + "device flops=inf bandwidth=1 link=1\n"),
            "m.txt:2: device flops: expected a finite number, got 'inf'");
  EXPECT_EQ(error(header + "device flops=1 link=1\n"), "m.txt:2: device: expected bandwidth=, got none");
  EXPECT_EQ(error(header + "device flops=1 bandwidth=1 link=1 speed=3\n"),
            "m.txt:2: device: expected keys among flops, bandwidth, link, internode, latency, overhead, memory, "
            "devices_per_node, got 'speed'");
  EXPECT_EQ(error(header + "device flops=1 bandwidth=1 link=1 overhead=nan\n"),
            "m.txt:2: device overhead: expected a finite number, got 'nan'");
  EXPECT_EQ(error(header + "device flops=1 bandwidth=1 link=1 overhead=-2e-3\n"),
            "m.txt:2: device overhead: expected a number >= 0, got '-2e-3'");
  EXPECT_EQ(error(header + device + "model m params=1 layers=1 heads=3 kv_heads=1 hidden=32 ffn=1 vocab=1\n"),
            "m.txt:3: m.heads: expected a divisor of hidden 32, got 3");
  EXPECT_EQ(error(base + run_line("r", "small", 2, "fit", "actor=1x2 gen=1x1x2")),
            "m.txt:5: run actor: expected sizes PPxTPxDP like 1x2x1, got '1x2'");
  EXPECT_EQ(error(base + run_line("r", "small", 2, "fit", "actor=1x1x4 gen=1x1x4")),
            "m.txt:5: run actor: expected at most the run's 2 devices, got 4");
  EXPECT_EQ(error(base + run_line("r", "small", 1, "train", "actor=1x1x1 gen=1x1x1")),
            "m.txt:5: run set: expected fit or predict, got 'train'");
  EXPECT_EQ(error(base + run_line("r", "huge", 1, "fit", "actor=1x1x1 gen=1x1x1")),
            "m.txt:5: run model: expected a model defined above, got 'huge'");
  EXPECT_NE(error(base + run_line("r", "small", 2, "fit", "actor=1x1x2 gen=1x2x1")).find("m.txt:5: run gen: "),
            std::string::npos);
  EXPECT_EQ(error(base + run + run), "m.txt:6: run: expected each name once, got 'r' twice (line 5)");
  EXPECT_EQ(error(header + models), "m.txt:3: expected a device record, got none");
  EXPECT_EQ(error(base + run), "m.txt:5: expected stage records, got none");
  EXPECT_EQ(error(base + "pool x\n"), "m.txt:5: expected a record device, memory, model, run or stage, got 'pool'");
  EXPECT_EQ(message_of<InvalidArgument>([] { (void)read_calibration_file("/nonexistent/t.txt"); }),
            "/nonexistent/t.txt: expected a readable measurements file, got none");
}

TEST(PlacementCalibrationFile, ImpossibleFitsAreRefused) {
  // Every run held out: nothing to fit.
  const std::string text = header + device + models + run_line("r", "small", 1, "predict", "actor=1x1x1 gen=1x1x1") +
                           "stage r gen 0.5\n";
  EXPECT_EQ(message_of<InvalidArgument>([&] { (void)calibrate_and_predict(parse_calibration(text, "t")); }),
            "t: expected stages of runs with set=fit that the cost model gives work, got none");
}

TEST(PlacementCalibrationFile, NonNegativeFitAcceptsFactorsAbovePeakAndStrictRefusesThem) {
  CalibrationData data = parse_calibration(full_file(), "timings.txt");
  // The stages ran 1.5x faster than the given peak FLOP/s (a peak measured on a busy machine).
  const Efficiency truth{1.5, 0.3, 0.4, 0.7, 2e-5};
  const DeviceModel device{data.cluster, truth};
  for (CalibrationStage& s : data.stages) s.seconds = device.seconds(calibration_stage_work(data, s));
  const CalibrationResult r = calibrate_and_predict(data);
  EXPECT_NEAR(r.fitted.compute, 1.5, 1e-9);
  EXPECT_NEAR(r.fitted.memory, 0.3, 1e-9);
  CalibrationFactors strict;
  strict.strict = true;
  EXPECT_NE(message_of<InvalidArgument>([&] { (void)calibrate_and_predict(data, strict); })
                .find("the fitted efficiency.compute is 1.5"),
            std::string::npos);
}

TEST(PlacementCalibrationFile, NonNegativeFitDropsATermTheDataGiveNoTime) {
  // Times that fall as the memory traffic grows: the unconstrained fit gives the memory term a
  // negative unknown (efficiency -2), which calibrate_efficiency refuses; the constrained fit
  // gives that term no time (inf) and fits compute on the rest.
  ClusterSpec cluster = cluster_preset("a100-80gb", 1);
  std::vector<StageMeasurement> m;
  for (int i = 1; i <= 6; ++i) {
    StageWork w;
    w.flops = 1e12 * i;
    w.hbm_bytes = 1e9 * (7 - i);
    m.push_back({w, w.flops / (0.5 * cluster.peak_flops) - 0.5 * w.hbm_bytes / cluster.hbm_bandwidth});
  }
  EXPECT_NE(message_of<InvalidArgument>([&] { (void)calibrate_efficiency(cluster, m); }).find("efficiency.memory"),
            std::string::npos);
  const Efficiency e = calibrate_efficiency_nonnegative(cluster, m);
  EXPECT_TRUE(std::isinf(e.memory));
  EXPECT_GT(e.compute, 0.5);  // the compute term absorbs what the negative memory term took off
  EXPECT_LT(e.compute, 0.7);
  for (const StageMeasurement& x : m) {
    const double predicted = DeviceModel{cluster, e}.seconds(x.work);
    EXPECT_TRUE(std::isfinite(predicted));
    EXPECT_NEAR(predicted / x.seconds, 1, 0.25);
  }
}
