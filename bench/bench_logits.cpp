// Fused log-prob + entropy over (N, V) logits (verl/algo/logprob_entropy.hpp) against the way
// PyTorch eager computes the same thing in verl (logprobs_from_logits + entropy_from_logits and
// their autograd), each op a full pass over materialised (N, V) tensors:
//   forward : log_softmax -> gather; softmax -> softmax * x -> sum; logsumexp
//   backward: softmax and log_softmax materialised again, then the combined gradient.
// Both sides use the same threads (rows split across them), so the ratio measures the kernel.
// At the Verl shape the naive reference runs 512 of the 4096 rows and its time is scaled to the
// whole batch (linear in rows; keeps the run short and its buffers at 0.3 GiB). The closing lines
// print fused / naive speedups per shape.
//
//   bench_logits                      # 256 x 32000 and 4096 x 151936 (Qwen vocabulary), < 1 min
//   bench_logits --benchmark_filter=Small
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "verl/algo/logits/logprob_entropy.hpp"

namespace {

using verl::Index;
using verl::MatrixF;
using verl::VectorF;
using namespace verl::algo;

struct Shape {
  const char* name;
  Index rows;
  Index vocab;
  /// Rows the naive reference really runs; its time is scaled to `rows` (the cost is linear in
  /// the rows and every buffer is far larger than the caches), which keeps the default run short
  /// and its memory at 2 x 0.3 GiB instead of 2 x 2.4 GiB.
  Index naive_rows;
};
constexpr Shape kSmall{"Small", 256, 32000, 256};
constexpr Shape kVerl{"Verl", 4096, 151936, 512};

unsigned bench_threads() { return detail::logits_thread_count(0, 1 << 20, 1 << 20); }

/// Logits that look like a language model's: a wide spread, a few large values per row.
struct Problem {
  MatrixF logits;
  std::vector<std::int64_t> labels;
  VectorF grad_log_probs, grad_entropy;
};

const Problem& problem(const Shape& shape) {
  static std::map<std::string, std::unique_ptr<Problem>> cache;
  auto& slot = cache[shape.name];
  if (slot) return *slot;
  cache.clear();  // the 2.4 GiB case and the small one are never needed together
  auto& p = cache[shape.name];
  p = std::make_unique<Problem>();
  p->logits.resize(shape.rows, shape.vocab);
  p->labels.resize(static_cast<std::size_t>(shape.rows));
  p->grad_log_probs.resize(shape.rows);
  p->grad_entropy.resize(shape.rows);
  detail::parallel_row_blocks(shape.rows, bench_threads(), [&](Index begin, Index end) {
    for (Index i = begin; i < end; ++i) {
      std::uint64_t state = 0x9E3779B97F4A7C15ull * static_cast<std::uint64_t>(i + 1);
      const auto next = [&state] {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        return static_cast<float>(state >> 40) * (1.0f / 16777216.0f);  // [0, 1)
      };
      float* row = p->logits.data() + i * shape.vocab;
      for (Index j = 0; j < shape.vocab; ++j) {
        const float u = next();
        row[j] = 12.0f * (u + next() + next() - 1.5f) + (u > 0.9995f ? 15.0f : 0.0f);
      }
      p->labels[static_cast<std::size_t>(i)] = static_cast<std::int64_t>(next() * static_cast<float>(shape.vocab));
      p->grad_log_probs[i] = 1.0f / static_cast<float>(shape.rows);
      p->grad_entropy[i] = -0.01f / static_cast<float>(shape.rows);
    }
  });
  return *p;
}

// ---- the naive reference: one full (N, V) pass per eager op ------------------------------------

template <class RowFn>
void each_row(Index rows, const RowFn& fn) {
  detail::parallel_row_blocks(rows, bench_threads(), [&](Index begin, Index end) {
    for (Index i = begin; i < end; ++i) fn(i);
  });
}

struct NaiveBuffers {
  MatrixF a, b;  // the two (N, V) temporaries eager mode holds at once
  VectorF log_probs, entropy, logsumexp;
};

void naive_forward(const Problem& p, NaiveBuffers& buf) {
  const MatrixF& x = p.logits;
  const Index n = buf.a.rows();
  // logprobs_from_logits: log_softmax materialised, then gather.
  each_row(n, [&](Index i) {
    const float m = x.row(i).maxCoeff();
    const float lse = m + std::log((x.row(i).array() - m).exp().sum());
    buf.a.row(i) = x.row(i).array() - lse;
  });
  each_row(n, [&](Index i) { buf.log_probs[i] = buf.a(i, p.labels[static_cast<std::size_t>(i)]); });
  // entropy_from_logits: softmax, softmax * x, sum, logsumexp.
  each_row(n, [&](Index i) {
    const float m = x.row(i).maxCoeff();
    const auto e = (x.row(i).array() - m).exp();
    buf.b.row(i) = e / e.sum();
  });
  each_row(n, [&](Index i) { buf.a.row(i) = buf.b.row(i).array() * x.row(i).array(); });
  each_row(n, [&](Index i) { buf.entropy[i] = buf.a.row(i).sum(); });
  each_row(n, [&](Index i) {
    const float m = x.row(i).maxCoeff();
    buf.logsumexp[i] = m + std::log((x.row(i).array() - m).exp().sum());
  });
  each_row(n, [&](Index i) { buf.entropy[i] = buf.logsumexp[i] - buf.entropy[i]; });
}

/// d/dx of sum(g_lp * logp + g_H * H) with softmax and log_softmax materialised; the gradient
/// overwrites the log_softmax buffer (eager autograd would allocate a third (N, V) tensor).
void naive_backward(const Problem& p, NaiveBuffers& buf) {
  MatrixF& grad = buf.a;
  const MatrixF& x = p.logits;
  const Index n = buf.a.rows();
  each_row(n, [&](Index i) {
    const float m = x.row(i).maxCoeff();
    const auto e = (x.row(i).array() - m).exp();
    buf.b.row(i) = e / e.sum();
  });
  each_row(n, [&](Index i) {
    const float m = x.row(i).maxCoeff();
    buf.a.row(i) = x.row(i).array() - (m + std::log((x.row(i).array() - m).exp().sum()));
  });
  each_row(n, [&](Index i) {
    const float g_lp = p.grad_log_probs[i], g_h = p.grad_entropy[i], h = buf.entropy[i];
    grad.row(i) = -g_lp * buf.b.row(i).array() - g_h * buf.b.row(i).array() * (buf.a.row(i).array() + h);
    grad(i, p.labels[static_cast<std::size_t>(i)]) += g_lp;
  });
}

// ---- benchmarks -------------------------------------------------------------------------------

void set_counters(benchmark::State& state, const Shape& shape) {
  state.SetItemsProcessed(state.iterations() * shape.rows * shape.vocab);
  state.SetBytesProcessed(state.iterations() * shape.rows * shape.vocab * static_cast<std::int64_t>(sizeof(float)));
  state.counters["threads"] = bench_threads();
}

void fused_forward(benchmark::State& state, Shape shape, SimdLevel simd) {
  if (!detail::simd::cpu_supports(simd)) {
    state.SkipWithError("instruction set not supported by this CPU");
    return;
  }
  const Problem& p = problem(shape);
  for (auto _ : state) {
    LogprobEntropy r = fused_logprob_entropy(p.logits, p.labels, {.simd = simd});
    benchmark::DoNotOptimize(r.entropy.data());
  }
  set_counters(state, shape);
}

void fused_backward(benchmark::State& state, Shape shape) {
  const Problem& p = problem(shape);
  const LogprobEntropy forward = fused_logprob_entropy(p.logits, p.labels);
  MatrixF grad = MatrixF::Zero(shape.rows, shape.vocab);  // touched: page faults are not timed
  for (auto _ : state) {
    fused_logprob_entropy_backward_into<MatrixF, float>(
        p.logits, p.labels, forward, {.log_probs = as_span(p.grad_log_probs), .entropy = as_span(p.grad_entropy)}, grad);
    benchmark::DoNotOptimize(grad.data());
  }
  set_counters(state, shape);
}

/// The eager temporaries for `naive_rows` rows, touched once so that page faults are not timed.
NaiveBuffers naive_buffers(const Shape& shape) {
  return {MatrixF::Zero(shape.naive_rows, shape.vocab), MatrixF::Zero(shape.naive_rows, shape.vocab),
          VectorF::Zero(shape.naive_rows), VectorF::Zero(shape.naive_rows), VectorF::Zero(shape.naive_rows)};
}

/// Runs `pass` on naive_rows rows and reports its time scaled to the whole batch.
template <class Pass>
void time_naive(benchmark::State& state, const Shape& shape, const Pass& pass) {
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    pass();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    state.SetIterationTime(seconds * static_cast<double>(shape.rows) / static_cast<double>(shape.naive_rows));
  }
  state.counters["rows_measured"] = static_cast<double>(shape.naive_rows);
}

void naive_forward_bench(benchmark::State& state, Shape shape) {
  const Problem& p = problem(shape);
  NaiveBuffers buf = naive_buffers(shape);
  time_naive(state, shape, [&] {
    naive_forward(p, buf);
    benchmark::DoNotOptimize(buf.entropy.data());
  });
  // Accuracy of both against a double-precision computation of the first rows.
  const LogprobEntropy fused = fused_logprob_entropy(p.logits, p.labels);
  double fused_error = 0, naive_error = 0;
  for (Index i = 0; i < std::min<Index>(8, shape.naive_rows); ++i) {
    const Eigen::ArrayXd x = p.logits.row(i).cast<double>().transpose().array();
    const Eigen::ArrayXd e = (x - x.maxCoeff()).exp();
    const double lse = x.maxCoeff() + std::log(e.sum());
    const double entropy = lse - (e * x).sum() / e.sum();
    const double log_prob = x[p.labels[static_cast<std::size_t>(i)]] - lse;
    fused_error = std::max({fused_error, std::abs(fused.entropy[i] - entropy), std::abs(fused.log_probs[i] - log_prob)});
    naive_error = std::max({naive_error, std::abs(buf.entropy[i] - entropy), std::abs(buf.log_probs[i] - log_prob)});
  }
  state.counters["fused_max_abs_err"] = fused_error;
  state.counters["naive_max_abs_err"] = naive_error;
  set_counters(state, shape);
}

void naive_backward_bench(benchmark::State& state, Shape shape) {
  const Problem& p = problem(shape);
  NaiveBuffers buf = naive_buffers(shape);
  buf.entropy = fused_logprob_entropy(p.logits, p.labels).entropy.head(shape.naive_rows);
  time_naive(state, shape, [&] {
    naive_backward(p, buf);
    benchmark::DoNotOptimize(buf.a.data());
  });
  set_counters(state, shape);
}

void bf16_forward(benchmark::State& state, Shape shape) {
  const Problem& p = problem(shape);
  const verl::RowMatrix<Eigen::bfloat16> half = p.logits.cast<Eigen::bfloat16>();
  for (auto _ : state) {
    LogprobEntropy r = fused_logprob_entropy(half, p.labels);
    benchmark::DoNotOptimize(r.entropy.data());
  }
  set_counters(state, shape);
}

/// Console output plus, at the end, fused/naive speedups from the same run.
class SpeedupReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const auto& run : runs)
      if (!run.error_occurred) seconds_[run.benchmark_name()] = run.GetAdjustedRealTime() / 1e3;  // ms -> s
    ConsoleReporter::ReportRuns(runs);
  }
  void Finalize() override {
    ConsoleReporter::Finalize();
    std::printf("\nspeedup (naive time / fused time, same threads, same run):\n");
    for (const char* shape : {kSmall.name, kVerl.name}) {
      for (const char* pass : {"Forward", "Backward"}) {
        const std::string fused = std::string("Fused") + pass + "/" + shape;
        const std::string naive = std::string("Naive") + pass + "/" + shape;
        const auto f = find(fused), n = find(naive);
        if (f > 0 && n > 0)
          std::printf("  %-8s %-8s fused %9.4f s  naive %9.4f s  speedup %6.1fx\n", shape, pass, f, n, n / f);
      }
    }
  }

 private:
  double find(const std::string& prefix) const {
    for (const auto& [name, seconds] : seconds_)
      if (name.rfind(prefix, 0) == 0) return seconds;
    return -1;
  }
  std::map<std::string, double> seconds_;
};

void register_all() {
  for (const Shape& shape : {kSmall, kVerl}) {
    const bool big = shape.rows * shape.vocab > (Index{1} << 28);
    const auto tune = [big](benchmark::internal::Benchmark* b) {
      b->Unit(benchmark::kMillisecond)->UseRealTime();
      if (big) b->Iterations(2);  // ~0.1-0.5 s per iteration, 2.4 GiB per buffer
      return b;
    };
    const auto tune_naive = [big](benchmark::internal::Benchmark* b) {
      b->Unit(benchmark::kMillisecond)->UseManualTime();
      if (big) b->Iterations(1);
    };
    const std::string s = shape.name;
    tune(benchmark::RegisterBenchmark(("FusedForward/" + s).c_str(), fused_forward, shape, SimdLevel::automatic));
    tune_naive(benchmark::RegisterBenchmark(("NaiveForward/" + s).c_str(), naive_forward_bench, shape));
    tune(benchmark::RegisterBenchmark(("FusedBackward/" + s).c_str(), fused_backward, shape));
    tune_naive(benchmark::RegisterBenchmark(("NaiveBackward/" + s).c_str(), naive_backward_bench, shape));
    if (!big) {
      for (const SimdLevel level : {SimdLevel::baseline, SimdLevel::avx2, SimdLevel::avx512})
        tune(benchmark::RegisterBenchmark(("FusedForwardSimd/" + s + "/" + std::string(to_string(level))).c_str(),
                                          fused_forward, shape, level));
      tune(benchmark::RegisterBenchmark(("FusedForwardBf16/" + s).c_str(), bf16_forward, shape));
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  register_all();
  SpeedupReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return 0;
}
