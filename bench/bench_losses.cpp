// agg_loss, agg_loss_weights, compute_value_loss and kl_penalty at verl scale (256 x 4096 losses,
// 16384 x 1024 for the KL-in-reward estimate), each beside a naive multi-pass reference written
// the way verl's torch code runs (one temporary per operation). Prints the time ratio
// naive / verl-cpp (wall clock: the verl-cpp kernels split rows over threads, so their main thread's CPU
// time would understate them; on a shared machine re-run and compare medians) for every pair.
//
// agg_loss and low_var_kl are bound by memory traffic, so each also runs beside a `memory_bound`
// pass that moves the same bytes with the same threads and no arithmetic to speak of (agg_loss:
// one masked sum over loss and mask; low_var_kl: ref - logprob into a fresh matrix on huge pages,
// and for kl_penalty_into into storage reused across iterations),
// and the report prints how close the kernel comes to it.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "verl/cpu/huge_pages.hpp"
#include "verl/algo/detail/parallel_rows.hpp"
#include "verl/algo/kl/penalty.hpp"
#include "verl/algo/loss_aggregation.hpp"
#include "verl/algo/value_loss.hpp"

using namespace verl;
using namespace verl::algo;

namespace {

constexpr Index kLossRows = 256;
constexpr Index kLossCols = 4096;
constexpr Index kKLRows = 16384;
constexpr Index kKLCols = 1024;

struct LossBatch {
  MatrixF loss, mask, vpreds, returns, values;
  explicit LossBatch(Index rows, Index cols) : loss(rows, cols), mask(rows, cols), vpreds(rows, cols), returns(rows, cols), values(rows, cols) {
    std::mt19937 gen(1);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::uniform_int_distribution<Index> length(cols / 4, cols);
    for (Index i = 0; i < rows; ++i) {
      const Index len = length(gen);
      for (Index j = 0; j < cols; ++j) {
        mask(i, j) = j < len ? 1.0f : 0.0f;
        loss(i, j) = u(gen);
        values(i, j) = u(gen);
        returns(i, j) = u(gen);
        vpreds(i, j) = values(i, j) + 0.4f * u(gen);
      }
    }
  }
};

const LossBatch& loss_batch() {
  static const LossBatch batch(kLossRows, kLossCols);
  return batch;
}

// ---- naive references: torch-like, one full-size temporary per operation ----------------------

/// Row-major like the inputs, so the references pay for their extra passes, not for transposes.
using RowArray = Eigen::Array<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

float naive_agg_loss(const MatrixF& loss, const MatrixF& mask, LossAggMode mode) {
  const RowArray m = mask.array();
  switch (mode) {
    case LossAggMode::token_mean: {
      const RowArray valid = (m != 0).select(loss.array(), 0.0f) * m;
      return valid.sum() / m.sum();
    }
    case LossAggMode::token_sum:  // verl 0.9.1: the masked sum (times dp_size, 1 here)
      return ((m != 0).select(loss.array(), 0.0f) * m).sum();
    case LossAggMode::seq_mean_token_sum:
    case LossAggMode::seq_mean_token_mean: {
      const RowArray product = loss.array() * m;
      Eigen::ArrayXf seq = product.rowwise().sum();
      const Eigen::ArrayXf lengths = m.rowwise().sum();
      if (mode == LossAggMode::seq_mean_token_mean) seq = seq / (lengths + 1e-8f);
      const Eigen::ArrayXf seq_mask = (lengths > 0).cast<float>();
      return ((seq_mask != 0).select(seq, 0.0f) * seq_mask).sum() / seq_mask.sum();
    }
    case LossAggMode::seq_mean_token_sum_norm:
      return (loss.array() * m).rowwise().sum().sum() / static_cast<float>(loss.cols());
  }
  return 0;
}

MatrixF naive_agg_loss_weights(const MatrixF& mask, LossAggMode mode) {
  const RowArray m = mask.array();
  const Eigen::ArrayXf lengths = m.rowwise().sum();
  const float nonempty = (lengths > 0).cast<float>().sum();
  switch (mode) {
    case LossAggMode::token_mean: return (m / m.sum()).matrix();
    case LossAggMode::token_sum: return m.matrix();
    case LossAggMode::seq_mean_token_sum: return (m / nonempty).matrix();
    case LossAggMode::seq_mean_token_mean:
      return (m.colwise() / ((lengths + 1e-8f) * nonempty)).matrix();
    case LossAggMode::seq_mean_token_sum_norm: return (m / static_cast<float>(m.cols())).matrix();
  }
  return {};
}

struct NaiveValueLoss {
  float loss;
  float clipfrac;
  MatrixF grad;
};

NaiveValueLoss naive_value_loss(const LossBatch& b, float clip, LossAggMode mode) {
  const RowArray v = b.vpreds.array(), r = b.returns.array(), old = b.values.array(), m = b.mask.array();
  const RowArray upper = old + clip;
  const RowArray lower = old - clip;
  const RowArray vclip = v.min(upper).max(lower);
  const RowArray l1 = (v - r).square();
  const RowArray l2 = (vclip - r).square();
  const RowArray clipped = l1.max(l2);
  NaiveValueLoss out;
  out.loss = 0.5f * naive_agg_loss(clipped.matrix(), b.mask, mode);
  out.clipfrac = ((l2 > l1).cast<float>() * m).sum() / (m.sum() + 1e-8f);
  const RowArray w = 0.5f * naive_agg_loss_weights(b.mask, mode).array();
  const RowArray share1 = (l1 > l2).select(1.0f, (l1 == l2).select(0.5f, RowArray::Zero(v.rows(), v.cols())));
  const RowArray d_min = (upper > v).select(1.0f, (upper == v).select(0.5f, RowArray::Zero(v.rows(), v.cols())));
  const RowArray d_max = (v.min(upper) > lower).select(1.0f, (v.min(upper) == lower).select(0.5f, RowArray::Zero(v.rows(), v.cols())));
  out.grad = (w * (share1 * 2 * (v - r) + (1 - share1) * 2 * (vclip - r) * d_min * d_max)).matrix();
  return out;
}

// ---- benchmarks ------------------------------------------------------------------------------

void set_items(benchmark::State& state, Index elements) { state.SetItemsProcessed(state.iterations() * elements); }

void bm_agg_loss(benchmark::State& state, LossAggMode mode, bool naive) {
  const auto& b = loss_batch();
  for (auto _ : state) {
    float loss = naive ? naive_agg_loss(b.loss, b.mask, mode) : agg_loss(b.loss, b.mask, mode);
    benchmark::DoNotOptimize(loss);
  }
  set_items(state, b.loss.size());
}

void bm_agg_loss_weights(benchmark::State& state, LossAggMode mode, bool naive) {
  const auto& b = loss_batch();
  for (auto _ : state) {
    MatrixF w = naive ? naive_agg_loss_weights(b.mask, mode) : agg_loss_weights(b.mask, mode);
    benchmark::DoNotOptimize(w.data());
  }
  set_items(state, b.loss.size());
}

void bm_value_loss(benchmark::State& state, LossAggMode mode, bool naive) {
  const auto& b = loss_batch();
  for (auto _ : state) {
    if (naive) {
      auto out = naive_value_loss(b, 0.2f, mode);
      benchmark::DoNotOptimize(out.grad.data());
    } else {
      auto out = compute_value_loss(b.vpreds, b.returns, b.values, b.mask, 0.2, mode);
      benchmark::DoNotOptimize(out.grad_vpreds.data());
    }
  }
  set_items(state, b.loss.size());
}

/// The KL benchmarks' log-probs and reference log-probs, (16384, 1024) each, in [-3, -1]; built
/// once and shared by every KL case and its memory-bound pass.
struct KLInputs {
  MatrixF lp, ref;
};
const KLInputs& kl_inputs() {
  static const KLInputs inputs{MatrixF::Random(kKLRows, kKLCols).array() - 2.0f,
                               MatrixF::Random(kKLRows, kKLCols).array() - 2.0f};
  return inputs;
}

void bm_kl_penalty(benchmark::State& state, bool naive) {
  const auto& [lp, ref] = kl_inputs();
  for (auto _ : state) {
    if (naive) {
      const RowArray x = (ref.array() - lp.array()).max(-20.0f).min(20.0f);
      const RowArray ratio = x.exp();
      const RowArray kld = ratio - x - 1.0f;
      MatrixF kl = kld.max(-10.0f).min(10.0f).matrix();
      benchmark::DoNotOptimize(kl.data());
    } else {
      MatrixF kl = kl_penalty(lp, ref, LowVarKL{});
      benchmark::DoNotOptimize(kl.data());
    }
  }
  set_items(state, lp.size());
}

/// low_var_kl into storage reused across iterations (kl_penalty_into), as a trainer keeping its
/// buffer from step to step would call it.
void bm_kl_penalty_into(benchmark::State& state) {
  const auto& [lp, ref] = kl_inputs();
  MatrixF kl;
  kl_penalty_into(kl, lp, ref, LowVarKL{});  // the first call allocates; the timed ones reuse
  for (auto _ : state) {
    kl_penalty_into(kl, lp, ref, LowVarKL{});
    benchmark::DoNotOptimize(kl.data());
  }
  set_items(state, lp.size());
}

// ---- memory-bound passes: the same bytes, the same threads, next to no arithmetic -------------

void bm_agg_loss_memory_bound(benchmark::State& state) {
  const auto& b = loss_batch();
  std::vector<double> row_sums(static_cast<std::size_t>(b.loss.rows()));
  for (auto _ : state) {
    algo::detail::parallel_rows(b.loss.rows(), b.loss.cols(), [&](Index begin, Index end) {
      for (Index i = begin; i < end; ++i)
        row_sums[static_cast<std::size_t>(i)] = (b.loss.row(i).array() * b.mask.row(i).array()).sum();
    });
    double total = 0;
    for (double v : row_sums) total += v;
    benchmark::DoNotOptimize(total);
  }
  set_items(state, b.loss.size());
}

void bm_kl_penalty_memory_bound(benchmark::State& state) {
  const auto& [lp, ref] = kl_inputs();
  for (auto _ : state) {
    MatrixF out(kKLRows, kKLCols);
    cpu::advise_huge_pages(out.data(), static_cast<std::size_t>(out.size()) * sizeof(float));
    algo::detail::parallel_rows(kKLRows, kKLCols, [&](Index begin, Index end) {
      out.middleRows(begin, end - begin) = ref.middleRows(begin, end - begin) - lp.middleRows(begin, end - begin);
    });
    benchmark::DoNotOptimize(out.data());
  }
  set_items(state, lp.size());
}

/// The reused-output counterpart: ref - logprob into storage that lives across iterations.
void bm_kl_penalty_into_memory_bound(benchmark::State& state) {
  const auto& [lp, ref] = kl_inputs();
  MatrixF out = MatrixF::Zero(kKLRows, kKLCols);
  for (auto _ : state) {
    algo::detail::parallel_rows(kKLRows, kKLCols, [&](Index begin, Index end) {
      out.middleRows(begin, end - begin) = ref.middleRows(begin, end - begin) - lp.middleRows(begin, end - begin);
    });
    benchmark::DoNotOptimize(out.data());
  }
  set_items(state, lp.size());
}

/// Console output plus, at the end, naive / verl-cpp for each pair of runs.
/// Each memory-bound kernel's stem and the name of its memory-bound pass.
const std::pair<std::string, std::string> kMemoryBound[] = {
    {"agg_loss/token-mean", "agg_loss/memory_bound"},
    {"agg_loss/seq-mean-token-sum", "agg_loss/memory_bound"},
    {"agg_loss/seq-mean-token-mean", "agg_loss/memory_bound"},
    {"agg_loss/seq-mean-token-sum-norm", "agg_loss/memory_bound"},
    {"kl_penalty/low_var_kl_16384x1024", "kl_penalty/low_var_kl_16384x1024/memory_bound"},
    {"kl_penalty/low_var_kl_16384x1024_into", "kl_penalty/low_var_kl_16384x1024_into/memory_bound"},
};

class RatioReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    // Wall clock (the kernels use threads). A benchmark's runs arrive together, its aggregates
    // after its iterations, so with repetitions the median is the time kept.
    for (const auto& run : runs) {
      if (run.error_occurred) continue;
      if (run.run_type == Run::RT_Iteration || run.aggregate_name == "median")
        times_[run.run_name.str()] = run.GetAdjustedRealTime();
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
    std::printf("\n%-48s %12s\n", "memory-bound pass / verl-cpp (1 = at the bound)", "ratio");
    for (const auto& [stem, bound] : kMemoryBound) {
      const auto ours = times_.find(stem + "/verl_cpp");
      const auto pass = times_.find(bound);
      if (ours != times_.end() && pass != times_.end())
        std::printf("%-48s %11.2f\n", stem.c_str(), pass->second / ours->second);
    }
  }

 private:
  std::map<std::string, double> times_;
};

}  // namespace

int main(int argc, char** argv) {
  for (auto mode : {LossAggMode::token_mean, LossAggMode::token_sum, LossAggMode::seq_mean_token_sum,
                    LossAggMode::seq_mean_token_mean, LossAggMode::seq_mean_token_sum_norm}) {
    const std::string m(to_string(mode));
    for (bool naive : {false, true}) {
      const std::string who = naive ? "naive" : "verl_cpp";
      benchmark::RegisterBenchmark(("agg_loss/" + m + "/" + who).c_str(), bm_agg_loss, mode, naive)
          ->Unit(benchmark::kMicrosecond);
      benchmark::RegisterBenchmark(("agg_loss_weights/" + m + "/" + who).c_str(), bm_agg_loss_weights, mode, naive)
          ->Unit(benchmark::kMicrosecond);
      benchmark::RegisterBenchmark(("value_loss/" + m + "/" + who).c_str(), bm_value_loss, mode, naive)
          ->Unit(benchmark::kMicrosecond);
    }
  }
  for (bool naive : {false, true})
    benchmark::RegisterBenchmark(naive ? "kl_penalty/low_var_kl_16384x1024/naive" : "kl_penalty/low_var_kl_16384x1024/verl_cpp",
                                 bm_kl_penalty, naive)
        ->Unit(benchmark::kMillisecond);

  benchmark::RegisterBenchmark("kl_penalty/low_var_kl_16384x1024_into/verl_cpp", bm_kl_penalty_into)
      ->Unit(benchmark::kMillisecond);

  benchmark::RegisterBenchmark("agg_loss/memory_bound", bm_agg_loss_memory_bound)->Unit(benchmark::kMicrosecond);
  benchmark::RegisterBenchmark("kl_penalty/low_var_kl_16384x1024/memory_bound", bm_kl_penalty_memory_bound)
      ->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("kl_penalty/low_var_kl_16384x1024_into/memory_bound", bm_kl_penalty_into_memory_bound)
      ->Unit(benchmark::kMillisecond);

  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  reporter.print_ratios();
  benchmark::Shutdown();
  return 0;
}
