// Advantage estimators at verl scale: 16384 responses x 1024 tokens in prompt groups of 8, with
// contiguous and with shuffled group ids, for grpo, rloo, reinforce_plus_plus and gae. Each runs
// as compute() (fresh output matrices, as verl allocates new tensors) and as compute_into() with
// the previous result reused (a trainer loop's steady state), beside a naive reference written
// plainly the way verl's Python reads (a std::map from uid to a list of scores, one pass per torch
// operation, GAE and REINFORCE++ column by column over the batch, verl::algo::masked_whiten).
// Items are tokens; the closing table prints naive / verl-cpp wall-clock time for every pair measured in
// this run (wall clock: verl-cpp splits rows over threads; on a shared machine re-run and compare medians).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "verl/algo/advantages.hpp"
#include "verl/algo/masked_stats.hpp"

using namespace verl;
using namespace verl::algo;

namespace {

constexpr Index kResponses = 16384;
constexpr Index kTokens = 1024;
constexpr Index kGroupSize = 8;

struct Rollout {
  MatrixF rewards, mask, values;
  std::vector<std::int64_t> contiguous_ids, shuffled_ids;

  Rollout() : rewards(kResponses, kTokens), mask(kResponses, kTokens), values(kResponses, kTokens) {
    std::mt19937 gen(7);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::uniform_int_distribution<Index> length(kTokens / 4, kTokens);
    std::bernoulli_distribution correct(0.4);
    for (Index i = 0; i < kResponses; ++i) {
      const Index len = length(gen);
      for (Index j = 0; j < kTokens; ++j) {
        mask(i, j) = j < len ? 1.0f : 0.0f;
        rewards(i, j) = 0.0f;
        values(i, j) = u(gen);
      }
      rewards(i, len - 1) = correct(gen) ? 1.0f : 0.1f * u(gen);  // outcome reward on the last token
      // REINFORCE++ and GAE see a few dense (process) rewards too.
      rewards(i, len / 2) += 0.05f * u(gen);
    }
    contiguous_ids.resize(kResponses);
    for (Index i = 0; i < kResponses; ++i) contiguous_ids[static_cast<std::size_t>(i)] = 100000 + i / kGroupSize;
    shuffled_ids = contiguous_ids;
    std::shuffle(shuffled_ids.begin(), shuffled_ids.end(), gen);
  }

  AdvantageBatch batch(bool shuffled) const {
    return {.token_level_rewards = rewards,
            .response_mask = mask,
            .index = shuffled ? shuffled_ids : contiguous_ids,
            .values = values};
  }
};

const Rollout& rollout() {
  static const Rollout r;
  return r;
}

void set_items(benchmark::State& state) { state.SetItemsProcessed(state.iterations() * kResponses * kTokens); }

// ---- naive references ----------------------------------------------------------------------------

std::pair<MatrixF, MatrixF> broadcast(const VectorF& scalars, const MatrixF& mask) {
  MatrixF advantages = (mask.array().colwise() * scalars.array()).matrix();
  MatrixF returns = advantages;
  return {advantages, returns};
}

std::pair<MatrixF, MatrixF> naive_grpo(const MatrixF& rewards, const MatrixF& mask, const std::vector<std::int64_t>& index,
                                       float epsilon) {
  VectorF scores = rewards.rowwise().sum();
  std::map<std::int64_t, std::vector<float>> id2score;
  for (Index i = 0; i < scores.size(); ++i) id2score[index[static_cast<std::size_t>(i)]].push_back(scores[i]);
  std::map<std::int64_t, float> id2mean, id2std;
  for (const auto& [id, group] : id2score) {
    if (group.size() == 1) {
      id2mean[id] = 0.0f;
      id2std[id] = 1.0f;
      continue;
    }
    double sum = 0;
    for (float s : group) sum += s;
    const double mean = sum / static_cast<double>(group.size());
    double squares = 0;
    for (float s : group) squares += (s - mean) * (s - mean);
    id2mean[id] = static_cast<float>(mean);
    id2std[id] = static_cast<float>(std::sqrt(squares / static_cast<double>(group.size() - 1)));
  }
  for (Index i = 0; i < scores.size(); ++i) {
    const auto id = index[static_cast<std::size_t>(i)];
    scores[i] = (scores[i] - id2mean[id]) / (id2std[id] + epsilon);
  }
  return broadcast(scores, mask);
}

std::pair<MatrixF, MatrixF> naive_rloo(const MatrixF& rewards, const MatrixF& mask, const std::vector<std::int64_t>& index) {
  VectorF scores = rewards.rowwise().sum();
  std::map<std::int64_t, std::vector<float>> id2score;
  for (Index i = 0; i < scores.size(); ++i) id2score[index[static_cast<std::size_t>(i)]].push_back(scores[i]);
  std::map<std::int64_t, float> id2mean;
  for (const auto& [id, group] : id2score)
    id2mean[id] = group.size() == 1 ? 0.0f
                                    : std::accumulate(group.begin(), group.end(), 0.0f) / static_cast<float>(group.size());
  for (Index i = 0; i < scores.size(); ++i) {
    const auto id = index[static_cast<std::size_t>(i)];
    const auto n = static_cast<float>(id2score[id].size());
    if (n > 1) scores[i] = scores[i] * n / (n - 1) - id2mean[id] * n / (n - 1);
  }
  return broadcast(scores, mask);
}

std::pair<MatrixF, MatrixF> naive_reinforce_plus_plus(const MatrixF& rewards, const MatrixF& mask, float gamma) {
  MatrixF returns(rewards.rows(), rewards.cols());
  VectorF running = VectorF::Zero(rewards.rows());
  for (Index t = rewards.cols() - 1; t >= 0; --t) {  // column by column, as verl's loop over t
    running = rewards.col(t) + gamma * running;
    returns.col(t) = running;
    running = running.cwiseProduct(mask.col(t));
  }
  MatrixF advantages = masked_whiten(returns, mask).cwiseProduct(mask);
  return {advantages, returns};
}

std::pair<MatrixF, MatrixF> naive_gae(const MatrixF& rewards, const MatrixF& values, const MatrixF& mask, float gamma,
                                      float lam) {
  const Index rows = rewards.rows(), cols = rewards.cols();
  MatrixF advantages(rows, cols);
  VectorF next_values = VectorF::Zero(rows), last = VectorF::Zero(rows);
  for (Index t = cols - 1; t >= 0; --t) {
    const VectorF delta = rewards.col(t) + gamma * next_values - values.col(t);
    const VectorF candidate = delta + gamma * lam * last;
    const VectorF m = mask.col(t);
    const VectorF not_m = VectorF::Ones(rows) - m;
    next_values = values.col(t).cwiseProduct(m) + not_m.cwiseProduct(next_values);
    last = candidate.cwiseProduct(m) + not_m.cwiseProduct(last);
    advantages.col(t) = last;
  }
  MatrixF returns = advantages + values;
  return {masked_whiten(advantages, mask), returns};
}

// ---- benchmarks ----------------------------------------------------------------------------------

/// compute(): fresh output matrices every call, as verl allocates new tensors.
template <class Estimator>
void bm_estimator(benchmark::State& state, Estimator estimator, bool shuffled) {
  const AdvantageBatch batch = rollout().batch(shuffled);
  for (auto _ : state) {
    AdvantageResult out = estimator.compute(batch);
    benchmark::DoNotOptimize(out.advantages.data());
    benchmark::DoNotOptimize(out.returns().data());
  }
  set_items(state);
}

/// compute_into(): the previous step's result is reused (a trainer loop's steady state).
template <class Estimator>
void bm_estimator_reused_output(benchmark::State& state, Estimator estimator, bool shuffled) {
  const AdvantageBatch batch = rollout().batch(shuffled);
  AdvantageResult out = estimator.compute(batch);
  for (auto _ : state) {
    estimator.compute_into(batch, out);
    benchmark::DoNotOptimize(out.advantages.data());
    benchmark::DoNotOptimize(out.returns().data());
  }
  set_items(state);
}

void bm_naive_grpo(benchmark::State& state, bool shuffled) {
  const auto& r = rollout();
  for (auto _ : state) {
    auto out = naive_grpo(r.rewards, r.mask, shuffled ? r.shuffled_ids : r.contiguous_ids, 1e-6f);
    benchmark::DoNotOptimize(out.first.data());
  }
  set_items(state);
}

void bm_naive_rloo(benchmark::State& state, bool shuffled) {
  const auto& r = rollout();
  for (auto _ : state) {
    auto out = naive_rloo(r.rewards, r.mask, shuffled ? r.shuffled_ids : r.contiguous_ids);
    benchmark::DoNotOptimize(out.first.data());
  }
  set_items(state);
}

void bm_naive_reinforce_plus_plus(benchmark::State& state) {
  const auto& r = rollout();
  for (auto _ : state) {
    auto out = naive_reinforce_plus_plus(r.rewards, r.mask, 0.99f);
    benchmark::DoNotOptimize(out.first.data());
  }
  set_items(state);
}

void bm_naive_gae(benchmark::State& state) {
  const auto& r = rollout();
  for (auto _ : state) {
    auto out = naive_gae(r.rewards, r.values, r.mask, 0.99f, 0.95f);
    benchmark::DoNotOptimize(out.first.data());
  }
  set_items(state);
}

/// Console output plus, at the end, naive / verl-cpp for each pair of runs.
class RatioReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const auto& run : runs) {
      if (run.run_type != Run::RT_Iteration || run.error_occurred) continue;
      times_[run.benchmark_name()] = run.GetAdjustedRealTime();  // wall: the kernels use threads
    }
    ConsoleReporter::ReportRuns(runs);
  }
  void print_ratios() const {
    std::printf("\n%-66s %12s %12s\n", "naive / verl-cpp (same run, wall clock)", "verl-cpp ms", "ratio");
    for (const auto& [name, time] : times_) {
      for (const std::string suffix : {"/verl_cpp", "/verl_cpp_reused_output"}) {
        if (name.size() < suffix.size() || name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
          continue;
        const std::string stem = name.substr(0, name.size() - suffix.size());
        const auto naive = times_.find(stem + "/naive");
        if (naive != times_.end())
          std::printf("%-66s %12.2f %11.2fx\n", name.c_str(), time, naive->second / time);
      }
    }
  }

 private:
  std::map<std::string, double> times_;
};

}  // namespace

template <class Estimator>
void register_estimator(const std::string& stem, Estimator estimator, bool shuffled) {
  benchmark::RegisterBenchmark((stem + "/verl_cpp").c_str(), bm_estimator<Estimator>, estimator, shuffled)
      ->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark((stem + "/verl_cpp_reused_output").c_str(), bm_estimator_reused_output<Estimator>,
                               estimator, shuffled)
      ->Unit(benchmark::kMillisecond);
}

int main(int argc, char** argv) {
  const std::string shape = "/16384x1024";
  for (bool shuffled : {false, true}) {
    const std::string ids = shuffled ? "/shuffled_ids" : "/contiguous_ids";
    register_estimator("grpo" + shape + ids, GRPO{}, shuffled);
    benchmark::RegisterBenchmark(("grpo" + shape + ids + "/naive").c_str(), bm_naive_grpo, shuffled)
        ->Unit(benchmark::kMillisecond);
    register_estimator("rloo" + shape + ids, RLOO{}, shuffled);
    benchmark::RegisterBenchmark(("rloo" + shape + ids + "/naive").c_str(), bm_naive_rloo, shuffled)
        ->Unit(benchmark::kMillisecond);
  }
  register_estimator("reinforce_plus_plus" + shape, ReinforcePlusPlus{.gamma = 0.99}, false);
  benchmark::RegisterBenchmark(("reinforce_plus_plus" + shape + "/naive").c_str(), bm_naive_reinforce_plus_plus)
      ->Unit(benchmark::kMillisecond);
  register_estimator("gae" + shape, GAE{.gamma = 0.99, .lam = 0.95}, false);
  benchmark::RegisterBenchmark(("gae" + shape + "/naive").c_str(), bm_naive_gae)->Unit(benchmark::kMillisecond);

  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  reporter.print_ratios();
  benchmark::Shutdown();
  return 0;
}
