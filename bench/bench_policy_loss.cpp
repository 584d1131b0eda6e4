// Policy losses at verl scale (256 x 4096 tokens): vanilla (dual-clip PPO), gspo and sapo, each
// beside a naive reference written the way verl's torch code runs (one full-size temporary per
// operation, then a separate backward pass), computing the same loss, metrics and gradient. Both
// use std::exp per element, so the ratio measures the pass structure, not a different exp. The
// other losses are timed alone. Prints naive / verl-cpp (wall clock: verl-cpp uses threads) for every pair in this run.
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "verl/algo/policy_losses.hpp"

using namespace verl;
using namespace verl::algo;

namespace {

constexpr Index kRows = 256;
constexpr Index kCols = 4096;

using Array = Eigen::Array<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ColumnArray = Eigen::Array<float, Eigen::Dynamic, 1>;

struct Batch {
  MatrixF old_log_prob, log_prob, advantages, mask, weights;
  Batch(Index rows, Index cols)
      : old_log_prob(rows, cols), log_prob(rows, cols), advantages(rows, cols), mask(rows, cols), weights(rows, cols) {
    std::mt19937 gen(1);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::uniform_int_distribution<Index> length(cols / 4, cols);
    for (Index i = 0; i < rows; ++i) {
      const Index len = length(gen);
      const float advantage = u(gen);
      for (Index j = 0; j < cols; ++j) {
        old_log_prob(i, j) = -2.0f + u(gen);
        log_prob(i, j) = old_log_prob(i, j) + 0.3f * u(gen);
        advantages(i, j) = advantage;
        mask(i, j) = j < len ? 1.0f : 0.0f;
        weights(i, j) = 1.0f + 0.5f * u(gen);
      }
    }
  }
  PolicyLossBatch view() const { return PolicyLossBatch{old_log_prob, log_prob, advantages, mask}; }
};

const Batch& batch() {
  static const Batch b(kRows, kCols);
  return b;
}

// ---- naive references --------------------------------------------------------------------------

Array exp_of(const Array& x) { return x.unaryExpr([](float v) { return std::exp(v); }); }
Array select(const Eigen::Array<bool, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>& c, const Array& a, const Array& b) {
  return c.select(a, b);
}
/// torch.maximum's share for its first argument: 1, 0, or 0.5 at a tie.
Array max_share(const Array& a, const Array& b) {
  const Array zeros = Array::Zero(a.rows(), a.cols());
  return (a > b).select(Array::Ones(a.rows(), a.cols()), (a == b).select(Array::Constant(a.rows(), a.cols(), 0.5f), zeros));
}
float masked_mean(const Array& v, const Array& m) { return (v * m).sum() / (m.sum() + 1e-8f); }

/// token-mean agg_loss and its weights, as torch evaluates them.
float naive_token_mean(const Array& loss, const Array& m) { return ((m != 0).select(loss, 0.0f) * m).sum() / m.sum(); }
Array naive_token_mean_weights(const Array& m) { return m / m.sum(); }

/// seq-mean-token-mean, as torch evaluates it.
float naive_seq_mean_token_mean(const Array& loss, const Array& m) {
  const ColumnArray lengths = m.rowwise().sum();
  const ColumnArray seq = (loss * m).rowwise().sum() / (lengths + 1e-8f);
  const ColumnArray seq_mask = (lengths > 0).cast<float>();
  return (seq * seq_mask).sum() / seq_mask.sum();
}
Array naive_seq_mean_token_mean_weights(const Array& m) {
  const ColumnArray lengths = m.rowwise().sum();
  const float nonempty = (lengths > 0).cast<float>().sum();
  return m.colwise() / ((lengths + 1e-8f) * nonempty);
}

struct NaiveResult {
  float loss;
  MatrixF grad;
  float m1, m2, m3;
};

NaiveResult naive_vanilla(const Batch& b, float lo, float hi, float c) {
  const Array old = b.old_log_prob.array(), lp = b.log_prob.array(), a = b.advantages.array(), m = b.mask.array();
  const Array log_ratio = lp - old;
  const Array nk = log_ratio.max(-20.0f).min(20.0f);
  const Array ratio = exp_of(nk);
  const Array neg_a = -a;
  const Array clipped_ratio = ratio.max(lo).min(hi);
  const Array pg1 = neg_a * ratio;
  const Array pg2 = neg_a * clipped_ratio;
  const Array c1 = pg1.max(pg2);
  const Array pg3 = neg_a * c;
  const Array c2 = pg3.min(c1);
  const Array loss_mat = select(a < 0, c2, c1);
  NaiveResult out;
  out.loss = naive_token_mean(loss_mat, m);
  out.m1 = masked_mean((pg2 > pg1).cast<float>(), m);
  out.m2 = masked_mean(-nk, m);
  out.m3 = masked_mean(((c1 > pg3) && (a < 0)).cast<float>(), m);
  // Backward, one temporary per node.
  const Array w = naive_token_mean_weights(m);
  const Array grad_c1 = select(a < 0, w * max_share(pg3, c1), w);  // min(pg3, c1)'s share for c1
  const Array in_range = ((ratio >= lo) && (ratio <= hi)).cast<float>();
  const Array grad_ratio = grad_c1 * max_share(pg1, pg2) * neg_a + grad_c1 * max_share(pg2, pg1) * neg_a * in_range;
  const Array in_clamp = ((log_ratio >= -20.0f) && (log_ratio <= 20.0f)).cast<float>();
  out.grad = (grad_ratio * ratio * in_clamp).matrix();
  return out;
}

NaiveResult naive_gspo(const Batch& b, float lo, float hi) {
  const Array old = b.old_log_prob.array(), lp = b.log_prob.array(), a = b.advantages.array(), m = b.mask.array();
  const Array log_ratio = lp - old;
  const ColumnArray lengths = m.rowwise().sum().max(1.0f);
  const ColumnArray seq_log_ratio = (log_ratio * m).rowwise().sum() / lengths;
  const Array token_log_ratio = (lp - lp).colwise() + seq_log_ratio;
  const Array capped = token_log_ratio.min(10.0f);
  const Array ratio = exp_of(capped);
  const Array neg_a = -a;
  const Array pg1 = neg_a * ratio;
  const Array pg2 = neg_a * ratio.max(lo).min(hi);
  const Array loss_mat = pg1.max(pg2);
  NaiveResult out;
  out.loss = naive_seq_mean_token_mean(loss_mat, m);
  out.m1 = masked_mean((pg2 > pg1).cast<float>(), m);
  out.m2 = masked_mean(-log_ratio, m);
  out.m3 = 0;
  const Array w = naive_seq_mean_token_mean_weights(m);
  const Array in_range = ((ratio >= lo) && (ratio <= hi)).cast<float>();
  const Array grad_ratio = w * max_share(pg1, pg2) * neg_a + w * max_share(pg2, pg1) * neg_a * in_range;
  out.grad = (grad_ratio * ratio * (token_log_ratio <= 10.0f).cast<float>()).matrix();
  return out;
}

NaiveResult naive_sapo(const Batch& b, float tau_pos, float tau_neg) {
  const Array old = b.old_log_prob.array(), lp = b.log_prob.array(), a = b.advantages.array(), m = b.mask.array();
  const Array log_ratio = lp - old;
  const Array nk = log_ratio.max(-20.0f).min(20.0f);
  const Array ratio = exp_of(nk);
  const Array taus = (a > 0).select(Array::Constant(a.rows(), a.cols(), tau_pos), Array::Constant(a.rows(), a.cols(), tau_neg));
  const Array x = taus * (ratio - 1.0f);
  const Array sigmoid = 1.0f / (1.0f + exp_of(-x));
  const Array gates = sigmoid * (4.0f / taus);
  const Array loss_mat = -gates * a;
  NaiveResult out;
  out.loss = naive_seq_mean_token_mean(loss_mat, m);
  out.m1 = 0;
  out.m2 = masked_mean(-nk, m);
  out.m3 = 0;
  const Array w = naive_seq_mean_token_mean_weights(m);
  const Array grad_gates = w * -a;
  const Array grad_sigmoid = grad_gates * (4.0f / taus);
  const Array grad_x = grad_sigmoid * sigmoid * (1.0f - sigmoid);
  const Array grad_ratio = grad_x * taus;
  const Array in_clamp = ((log_ratio >= -20.0f) && (log_ratio <= 20.0f)).cast<float>();
  out.grad = (grad_ratio * ratio * in_clamp).matrix();
  return out;
}

// ---- benchmarks ----------------------------------------------------------------------------------

void set_items(benchmark::State& state) { state.SetItemsProcessed(state.iterations() * kRows * kCols); }

template <class Loss, class Naive>
void bm_pair(benchmark::State& state, Loss loss, AggregationContext context, Naive naive, bool run_naive) {
  const auto& b = batch();
  for (auto _ : state) {
    if (run_naive) {
      auto out = naive(b);
      benchmark::DoNotOptimize(out.grad.data());
    } else {
      auto out = compute_policy_loss(loss, b.view(), context);
      benchmark::DoNotOptimize(out.grad_log_prob.data());
    }
  }
  set_items(state);
}

void bm_alone(benchmark::State& state, AnyPolicyLoss loss, AggregationContext context, bool weighted) {
  const auto& b = batch();
  PolicyLossBatch view = b.view();
  if (weighted) view.rollout_is_weights.emplace(b.weights);
  for (auto _ : state) {
    auto out = compute_policy_loss(loss, view, context);
    benchmark::DoNotOptimize(out.grad_log_prob.data());
  }
  set_items(state);
}

/// Checks, once, that each naive reference computes what the library computes.
void check_references() {
  const auto& b = batch();
  const auto report = [](const char* name, float ours, float naive, const MatrixF& g1, const MatrixF& g2) {
    const float grad_error = (g1 - g2).cwiseAbs().maxCoeff();
    std::printf("%-8s pg_loss %.7g vs naive %.7g, max |grad diff| %.3g\n", name, ours, naive, grad_error);
  };
  const auto vanilla = compute_policy_loss(VanillaPPO{0.2, 0.28, 3.0}, b.view());
  const auto naive_v = naive_vanilla(b, 0.8f, 1.28f, 3.0f);
  report("vanilla", vanilla.pg_loss, naive_v.loss, vanilla.grad_log_prob, naive_v.grad);
  const auto gspo = compute_policy_loss(GSPO{0.2, 0.28}, b.view());
  const auto naive_g = naive_gspo(b, 0.8f, 1.28f);
  report("gspo", gspo.pg_loss, naive_g.loss, gspo.grad_log_prob, naive_g.grad);
  const auto sapo = compute_policy_loss(SAPO{1.0, 1.05}, b.view());
  const auto naive_s = naive_sapo(b, 1.0f, 1.05f);
  report("sapo", sapo.pg_loss, naive_s.loss, sapo.grad_log_prob, naive_s.grad);
}

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
    std::printf("\n%-48s %12s\n", "naive / verl-cpp (same run, wall clock)", "ratio");
    for (const auto& [name, time] : times_) {
      const std::string suffix = "/verl_cpp";
      if (name.size() < suffix.size() || name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) continue;
      const std::string stem = name.substr(0, name.size() - suffix.size());
      const auto naive = times_.find(stem + "/naive");
      if (naive != times_.end()) std::printf("%-48s %11.2fx\n", stem.c_str(), naive->second / time);
    }
  }

 private:
  std::map<std::string, double> times_;
};

}  // namespace

int main(int argc, char** argv) {
  const std::string shape = std::to_string(kRows) + "x" + std::to_string(kCols);
  for (bool naive : {false, true}) {
    const std::string who = naive ? "/naive" : "/verl_cpp";
    benchmark::RegisterBenchmark(("vanilla/token-mean/" + shape + who).c_str(), bm_pair<VanillaPPO, NaiveResult (*)(const Batch&)>,
                                 VanillaPPO{0.2, 0.28, 3.0}, AggregationContext{},
                                 [](const Batch& b) { return naive_vanilla(b, 0.8f, 1.28f, 3.0f); }, naive)
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(("gspo/seq-mean-token-mean/" + shape + who).c_str(), bm_pair<GSPO, NaiveResult (*)(const Batch&)>,
                                 GSPO{0.2, 0.28}, AggregationContext{},
                                 [](const Batch& b) { return naive_gspo(b, 0.8f, 1.28f); }, naive)
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(("sapo/seq-mean-token-mean/" + shape + who).c_str(), bm_pair<SAPO, NaiveResult (*)(const Batch&)>,
                                 SAPO{1.0, 1.05}, AggregationContext{},
                                 [](const Batch& b) { return naive_sapo(b, 1.0f, 1.05f); }, naive)
        ->Unit(benchmark::kMillisecond);
  }
  PolicyLossConfig config;
  RolloutCorrectionConfig correction;
  correction.loss_type = "reinforce";
  correction.rollout_is = "token";
  correction.rollout_rs = "token_k1,seq_mean_k3";
  correction.rollout_rs_threshold = RejectionThresholdSpec(std::string("0.5_2.0,0.1"));
  config.policy_loss.rollout_correction = correction;
  config.policy_loss.clip_cov_ratio = 0.0002;
  for (const auto name : policy_loss_names()) {
    benchmark::RegisterBenchmark(("alone/" + std::string(name) + "/" + shape).c_str(), bm_alone,
                                 make_policy_loss(name, config), AggregationContext{}, false)
        ->Unit(benchmark::kMillisecond);
  }
  benchmark::RegisterBenchmark(("alone/vanilla+is_weights/" + shape).c_str(), bm_alone,
                               make_policy_loss("vanilla", config), AggregationContext{}, true)
      ->Unit(benchmark::kMillisecond);

  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  check_references();
  RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  reporter.print_ratios();
  benchmark::Shutdown();
  return 0;
}
