// The optimizer layer against torch (tests/data/optim/optim_golden.json, written by
// tools/scripts/make_optim_golden.py): AdamW trajectories, clip_grad_norm_, verl's schedules.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "verl/optim/adamw.hpp"
#include "verl/optim/clip_grad_norm.hpp"
#include "verl/optim/lr_scheduler.hpp"
#include "verl/optim/optimizer_step.hpp"
#include "verl/optim/schedules.hpp"

using namespace verl;
using namespace verl::optim;
namespace fs = std::filesystem;

namespace {

const nlohmann::json& golden() {
  static const nlohmann::json data = [] {
    std::ifstream in(fs::path(VERL_GOLDEN_DIR) / ".." / "optim" / "optim_golden.json");
    return nlohmann::json::parse(in);
  }();
  return data;
}

float decode(const nlohmann::json& value) {
  if (value.is_string()) {
    const auto text = value.get<std::string>();
    if (text == "inf") return std::numeric_limits<float>::infinity();
    if (text == "-inf") return -std::numeric_limits<float>::infinity();
    return std::numeric_limits<float>::quiet_NaN();
  }
  return value.get<float>();
}

std::vector<float> decode_all(const nlohmann::json& values) {
  std::vector<float> out;
  for (const auto& v : values) out.push_back(decode(v));
  return out;
}

/// Distance in units in the last place between two finite floats.
std::int64_t ulp_distance(float a, float b) {
  auto key = [](float x) {
    std::int32_t bits;
    std::memcpy(&bits, &x, sizeof bits);
    return bits < 0 ? std::int64_t{std::numeric_limits<std::int32_t>::min()} - bits : std::int64_t{bits};
  };
  return std::llabs(key(a) - key(b));
}

std::vector<ParameterRef> refs(std::vector<std::vector<float>>& values, std::vector<std::vector<float>>& grads) {
  std::vector<ParameterRef> out;
  for (std::size_t k = 0; k < values.size(); ++k) out.push_back({values[k], grads[k]});
  return out;
}

}  // namespace

static_assert(Optimizer<AdamW>);
static_assert(LrSchedule<ConstantWithWarmup> && LrSchedule<CosineWithWarmup>);

TEST(AdamW, MatchesTorchTrajectories) {
  for (const auto& c : golden()["adamw"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    std::vector<std::vector<float>> values;
    for (const auto& v : c["initial"]) values.push_back(v.get<std::vector<float>>());
    AdamW adamw(AdamWConfig{c["lr_per_step"][0].get<double>(), c["betas"][0].get<double>(),
                            c["betas"][1].get<double>(), c["eps"].get<double>(), c["weight_decay"].get<double>()});
    const auto& lrs = c["lr_per_step"];
    for (std::size_t step = 0; step < c["grads"].size(); ++step) {
      std::vector<std::vector<float>> grads;
      for (const auto& g : c["grads"][step]) grads.push_back(g.get<std::vector<float>>());
      adamw.set_lr(lrs[step].get<double>());
      const auto parameters = refs(values, grads);
      adamw.step(parameters);
    }
    std::int64_t worst = 0;
    for (std::size_t k = 0; k < values.size(); ++k) {
      const auto expected = c["final"][k].get<std::vector<float>>();
      const auto exp_avg = c["exp_avg"][k].get<std::vector<float>>();
      const auto exp_avg_sq = c["exp_avg_sq"][k].get<std::vector<float>>();
      ASSERT_EQ(values[k].size(), expected.size());
      for (std::size_t i = 0; i < expected.size(); ++i) {
        worst = std::max(worst, ulp_distance(values[k][i], expected[i]));
        EXPECT_LE(ulp_distance(adamw.state().exp_avg[k][i], exp_avg[i]), 1) << "exp_avg " << k << "," << i;
        EXPECT_LE(ulp_distance(adamw.state().exp_avg_sq[k][i], exp_avg_sq[i]), 1) << "exp_avg_sq " << k << "," << i;
      }
    }
    // torch's vectorized kernels may fuse differently in the last place; parameters move by
    // lr-sized steps, so a few ulps of the parameter is far below one step.
    // Bit-exact in a default build; one ulp of slack for builds that contract a * b + c into FMAs.
    EXPECT_LE(worst, 1);
    RecordProperty("worst_ulps_" + c["name"].get<std::string>(), static_cast<int>(worst));
    std::printf("%s: worst parameter difference %lld ulp\n", c["name"].get<std::string>().c_str(),
                static_cast<long long>(worst));
  }
}

TEST(AdamW, StateRoundTripContinuesTheSameTrajectory) {
  const std::vector<std::vector<float>> start = {{1.0f, -2.0f, 0.5f}, {0.25f}};
  const auto gradients_at = [](int step) {
    return std::vector<std::vector<float>>{{0.3f * step, -0.1f, 0.7f - step}, {0.05f * step}};
  };
  const AdamWConfig config{1e-2, 0.9, 0.99, 1e-8, 0.1};
  // Uninterrupted: six steps.
  auto straight = start;
  AdamW uninterrupted(config);
  for (int s = 0; s < 6; ++s) {
    auto g = gradients_at(s);
    uninterrupted.step(refs(straight, g));
  }
  // Interrupted after three steps; a fresh optimizer resumes from the saved state.
  auto resumed_values = start;
  AdamW before(config);
  for (int s = 0; s < 3; ++s) {
    auto g = gradients_at(s);
    before.step(refs(resumed_values, g));
  }
  AdamW after(config);
  after.load_state(before.state());
  for (int s = 3; s < 6; ++s) {
    auto g = gradients_at(s);
    after.step(refs(resumed_values, g));
  }
  EXPECT_EQ(resumed_values, straight);
  EXPECT_EQ(after.state(), uninterrupted.state());
}

TEST(AdamW, RejectsBadInput) {
  std::vector<float> value(3, 0.0f), grad(2, 0.0f);
  AdamW adamw;
  const ParameterRef bad[] = {{value, grad, "w"}};
  try {
    adamw.step(bad);
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("parameters[0] ('w'): expected a gradient of 3 elements"), std::string::npos)
        << e.what();
  }
  std::vector<float> grad3(3, 0.0f);
  const ParameterRef good[] = {{value, grad3, "w"}};
  adamw.step(good);
  std::vector<float> other(4, 0.0f), other_grad(4, 0.0f);
  const ParameterRef changed[] = {{other, other_grad, "w"}};
  EXPECT_THROW(adamw.step(changed), InvalidArgument);
  const ParameterRef two[] = {{value, grad3}, {value, grad3}};
  EXPECT_THROW(adamw.step(two), InvalidArgument);
  EXPECT_THROW(AdamW(AdamWConfig{1e-3, 1.0, 0.999, 1e-8, 0.0}), InvalidArgument);
  EXPECT_THROW(AdamW(AdamWConfig{-1.0, 0.9, 0.999, 1e-8, 0.0}), InvalidArgument);
  EXPECT_THROW(adamw.set_lr(-1e-3), InvalidArgument);
}

TEST(ClipGradNorm, MatchesTorch) {
  for (const auto& c : golden()["clip_grad_norm"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    std::vector<std::vector<float>> grads, values;
    for (const auto& g : c["grads"]) {
      grads.push_back(decode_all(g));
      values.emplace_back(grads.back().size(), 0.0f);
    }
    const double norm_type = decode(c["norm_type"]);
    const float total = clip_grad_norm(refs(values, grads), c["max_norm"].get<double>(), norm_type);
    const float expected_total = decode(c["total_norm"]);
    if (std::isnan(expected_total)) {
      EXPECT_TRUE(std::isnan(total));
    } else if (std::isinf(expected_total)) {
      EXPECT_EQ(total, expected_total);
    } else {
      // torch accumulates each tensor's norm in float32 (in its own order); ours accumulates in
      // double, so the two may differ in the last place or two.
      EXPECT_LE(ulp_distance(total, expected_total), 2) << total << " vs " << expected_total;
    }
    for (std::size_t k = 0; k < grads.size(); ++k) {
      const auto expected = decode_all(c["clipped"][k]);
      for (std::size_t i = 0; i < expected.size(); ++i) {
        if (std::isnan(expected[i])) {
          EXPECT_TRUE(std::isnan(grads[k][i]));
        } else {
          EXPECT_LE(ulp_distance(grads[k][i], expected[i]), 4) << k << "," << i;
        }
      }
    }
  }
}

TEST(ClipGradNorm, EmptyAndBadArguments) {
  EXPECT_EQ(clip_grad_norm({}, 1.0), 0.0f);
  std::vector<float> value(2), grad(2, 1.0f);
  const ParameterRef parameters[] = {{value, grad}};
  EXPECT_THROW(clip_grad_norm(parameters, -1.0), InvalidArgument);
  EXPECT_THROW(clip_grad_norm(parameters, 1.0, -2.0), InvalidArgument);
}

TEST(OptimizerStep, SkipsTheUpdateWhenTheNormIsNotFinite) {
  std::vector<std::vector<float>> values = {{1.0f, 2.0f}}, grads = {{std::nanf(""), 1.0f}};
  AdamW adamw;
  const auto result = clip_and_step(adamw, refs(values, grads), 1.0);
  EXPECT_FALSE(result.stepped);
  EXPECT_TRUE(std::isnan(result.grad_norm));
  EXPECT_EQ(values[0], (std::vector<float>{1.0f, 2.0f}));
  EXPECT_EQ(grads[0], (std::vector<float>{0.0f, 0.0f}));
  EXPECT_EQ(adamw.state().step, 0);

  grads = {{3.0f, 4.0f}};
  const auto ok = clip_and_step(adamw, refs(values, grads), 1.0);
  EXPECT_TRUE(ok.stepped);
  EXPECT_FLOAT_EQ(ok.grad_norm, 5.0);
  EXPECT_NEAR(grads[0][0], 0.6f, 1e-6f);  // clipped to norm 1
  EXPECT_EQ(adamw.state().step, 1);
}

TEST(Schedules, MatchTorchLambdaLR) {
  for (const auto& c : golden()["schedules"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    const auto& p = c["params"];
    LrScheduleConfig config;
    const std::string type = c["type"].get<std::string>();
    config.lr_scheduler_type = type;
    config.lr_warmup_steps = p["num_warmup_steps"].get<std::int64_t>();
    config.total_training_steps = p.value("num_training_steps", std::int64_t{0});
    config.min_lr_ratio = p.value("min_lr_ratio", 0.0);
    config.num_cycles = p.value("num_cycles", 0.5);
    if (config.lr_warmup_steps == 0) config.lr_warmup_steps = -1;  // verl: <= 0 defers to the ratio (0)
    LrScheduler<> scheduler(c["base_lr"].get<double>(), make_lr_schedule(config));
    const auto lrs = c["lrs"].get<std::vector<double>>();
    for (std::size_t k = 0; k < lrs.size(); ++k) {
      EXPECT_DOUBLE_EQ(scheduler.get_last_lr(), lrs[k]) << "step " << k;
      scheduler.step();
    }
  }
}

TEST(Schedules, CosineCountsStepsFromOneWhenNotZeroIndexed) {
  // verl 0.9.1's zero_indexed_step=False: the multiplier of step s is the zero-indexed one of s + 1.
  for (const std::int64_t warmup : {0, 3}) {
    CosineWithWarmup zero_indexed(warmup, 20, 0.1, 0.5, 0.2), one_indexed = zero_indexed;
    one_indexed.zero_indexed_step = false;
    for (std::int64_t step = 0; step < 25; ++step)
      EXPECT_EQ(one_indexed.multiplier(step), zero_indexed.multiplier(step + 1)) << "warmup " << warmup << " step " << step;
    EXPECT_EQ(zero_indexed.multiplier(0), warmup > 0 ? 0.2 : 1.0);  // init_lr_ratio, or the cosine's top
  }
}

TEST(Schedules, WarmupStepsFollowVerl) {
  EXPECT_EQ(resolve_warmup_steps(10, 0.5, 100), 10);
  EXPECT_EQ(resolve_warmup_steps(-1, 0.0, 100), 0);
  EXPECT_EQ(resolve_warmup_steps(-1, 0.05, 90), 4);  // int(4.5)
  EXPECT_EQ(resolve_warmup_steps(0, 0.1, 100), 10);
  EXPECT_THROW(resolve_warmup_steps(-1, 1.5, 100), InvalidArgument);
}

TEST(Schedules, RegistryNamesTheArgumentAndTheChoices) {
  LrScheduleConfig config;
  config.lr_scheduler_type = "linear";
  try {
    make_lr_schedule(config);
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_STREQ(e.what(), "lr_scheduler_type: expected one of constant, cosine, got 'linear'");
  }
  config.lr_scheduler_type = "cosine";
  config.total_training_steps = 10;
  config.min_lr_ratio = 2.0;
  EXPECT_THROW(make_lr_schedule(config), InvalidArgument);
  EXPECT_EQ(schedule_name(make_lr_schedule({"constant"})), "constant");
}

TEST(Schedules, CompileTimeSchedulerDrivesTheOptimizer) {
  LrScheduler<ConstantWithWarmup> scheduler(1e-3, ConstantWithWarmup{4});
  AdamW adamw;
  std::vector<double> seen;
  for (int k = 0; k < 6; ++k) {
    scheduler.apply(adamw);
    seen.push_back(adamw.lr());
    scheduler.step();
  }
  EXPECT_EQ(seen, (std::vector<double>{0.0, 2.5e-4, 5e-4, 7.5e-4, 1e-3, 1e-3}));
  scheduler.set_last_epoch(2);
  EXPECT_DOUBLE_EQ(scheduler.get_last_lr(), 5e-4);
}
