// Overhead of the communicator wrappers against the raw calls of the same size, in the same run.
//
// Built twice: from bench/ as a single process (SelfCommunicator against a plain copy), and
// with MPI as bench_parallel_collectives_mpi (MpiCommunicator against MPI_Allreduce,
// MPI_Allgather and MPI_Reduce_scatter_block): run it as
//   mpirun -np 4 build/bench/bench_parallel_collectives_mpi
// (or alone: one rank). Times are the slowest rank's, measured between barriers with fixed
// iteration counts so that every rank runs the same collectives; raw and wrapped calls alternate
// within each benchmark. The summary lists wrapper/raw - 1 per size (medians); the target is <= 5%
// from 1 MiB up.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#ifdef VERL_BENCH_WITH_MPI
#include <mpi.h>

#include "verl/parallel/mpi_communicator.hpp"
#else
#include "verl/parallel/self_communicator.hpp"
#endif

namespace {

using namespace verl::parallel;

#ifdef VERL_BENCH_WITH_MPI
using Comm = MpiCommunicator;
Comm& communicator() {
  static Comm comm = MpiCommunicator::world();
  return comm;
}
double now() { return MPI_Wtime(); }
/// The slowest rank's time, so that every rank reports the same number.
double slowest(double seconds) {
  double result = seconds;
  MPI_Allreduce(&seconds, &result, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return result;
}
void sync() { MPI_Barrier(MPI_COMM_WORLD); }
#else
using Comm = SelfCommunicator;
Comm& communicator() {
  static Comm comm;
  return comm;
}
double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
double slowest(double seconds) { return seconds; }
void sync() {}
#endif

// Median times per call, keyed by (operation, bytes), for the summary.
struct Pair {
  double raw = 0, verl = 0;
};
std::map<std::pair<std::string, std::int64_t>, Pair>& medians() {
  static std::map<std::pair<std::string, std::int64_t>, Pair> times;
  return times;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

/// Times the raw call and the wrapped call alternately (swapping which goes first each
/// iteration), so that both see the same machine state; reports the wrapper's time and both
/// medians.
template <class Raw, class Verl>
void compare(benchmark::State& state, const char* op, Raw&& raw, Verl&& verl) {
  const std::int64_t bytes = state.range(0);
  raw();  // warm-up: connections, buffers
  verl();
  std::vector<double> raw_times, verl_times;
  auto timed = [](auto& call) {
    sync();
    const double start = now();
    call();
    return slowest(now() - start);
  };
  for (auto _ : state) {
    const bool raw_first = raw_times.size() % 2 == 0;
    if (raw_first) raw_times.push_back(timed(raw));
    verl_times.push_back(timed(verl));
    if (!raw_first) raw_times.push_back(timed(raw));
    state.SetIterationTime(verl_times.back());
  }
  const Pair m{median(raw_times), median(verl_times)};
  medians()[{op, bytes}] = m;
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * bytes);
  state.counters["raw_us"] = m.raw * 1e6;
  state.counters["overhead_pct"] = m.raw > 0 ? (m.verl / m.raw - 1.0) * 100.0 : 0.0;
}

std::int64_t floats_of(const benchmark::State& state) { return state.range(0) / static_cast<std::int64_t>(sizeof(float)); }

void BM_AllReduce(benchmark::State& state) {
  Comm& comm = communicator();
  std::vector<float> data(static_cast<std::size_t>(floats_of(state)), 1.0f);
#ifdef VERL_BENCH_WITH_MPI
  MPI_Comm native = comm.native();
  auto raw = [&] { MPI_Allreduce(MPI_IN_PLACE, data.data(), static_cast<int>(data.size()), MPI_FLOAT, MPI_SUM, native); };
#else
  auto raw = [&] { benchmark::DoNotOptimize(data.data()); };
#endif
  compare(state, "all_reduce", raw, [&] { comm.all_reduce(std::span(data), ReduceOp::sum); });
}

void BM_AllGather(benchmark::State& state) {
  Comm& comm = communicator();
  const std::vector<float> send(static_cast<std::size_t>(floats_of(state) / comm.size()), 1.0f);
  std::vector<float> recv(send.size() * static_cast<std::size_t>(comm.size()));
#ifdef VERL_BENCH_WITH_MPI
  MPI_Comm native = comm.native();
  auto raw = [&] {
    MPI_Allgather(send.data(), static_cast<int>(send.size()), MPI_FLOAT, recv.data(), static_cast<int>(send.size()),
                  MPI_FLOAT, native);
  };
#else
  auto raw = [&] { std::copy(send.begin(), send.end(), recv.begin()); };
#endif
  compare(state, "all_gather", raw, [&] { comm.all_gather(std::span(send), std::span(recv)); });
}

void BM_ReduceScatter(benchmark::State& state) {
  Comm& comm = communicator();
  const std::vector<float> send(static_cast<std::size_t>(floats_of(state)), 1.0f);
  std::vector<float> recv(send.size() / static_cast<std::size_t>(comm.size()));
#ifdef VERL_BENCH_WITH_MPI
  MPI_Comm native = comm.native();
  auto raw = [&] {
    MPI_Reduce_scatter_block(send.data(), recv.data(), static_cast<int>(recv.size()), MPI_FLOAT, MPI_SUM, native);
  };
#else
  auto raw = [&] { std::copy_n(send.begin(), recv.size(), recv.begin()); };
#endif
  compare(state, "reduce_scatter", raw, [&] { comm.reduce_scatter(std::span(send), std::span(recv), ReduceOp::sum); });
}

// Sizes in bytes: 4 KiB .. 64 MiB; fixed iterations so that every rank runs the same calls.
void sizes(benchmark::internal::Benchmark* b) {
  for (std::int64_t bytes = 4 << 10; bytes <= (64 << 20); bytes *= 4) {
    b->Arg(bytes)->Iterations(bytes >= (16 << 20) ? 10 : 40)->UseManualTime()->Unit(benchmark::kMicrosecond);
  }
}
BENCHMARK(BM_AllReduce)->Apply(sizes);
BENCHMARK(BM_AllGather)->Apply(sizes);
BENCHMARK(BM_ReduceScatter)->Apply(sizes);

void print_summary(int ranks) {
  std::printf("\nwrapper vs raw call, median of alternating runs (%d rank%s; target <= 5%% from 1 MiB up)\n", ranks,
              ranks == 1 ? "" : "s");
  std::printf("%-16s %12s %12s %12s %10s\n", "operation", "bytes", "raw us", "verl us", "overhead");
  for (const auto& [key, m] : medians()) {
    if (m.raw <= 0) continue;
    std::printf("%-16s %12lld %12.1f %12.1f %9.1f%%\n", key.first.c_str(), static_cast<long long>(key.second),
                m.raw * 1e6, m.verl * 1e6, (m.verl / m.raw - 1.0) * 100.0);
  }
}

/// Reports nothing: the ranks other than 0 run the same collectives silently.
class QuietReporter : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>&) override {}
};

}  // namespace

int main(int argc, char** argv) {
#ifdef VERL_BENCH_WITH_MPI
  MpiEnvironment environment(argc, argv);
  const int rank = communicator().rank();
#else
  const int rank = 0;
#endif
  benchmark::Initialize(&argc, argv);
  if (rank == 0) {
    benchmark::RunSpecifiedBenchmarks();
  } else {
    QuietReporter quiet;  // every rank runs the collectives, rank 0 reports
    benchmark::RunSpecifiedBenchmarks(&quiet);
  }
  if (rank == 0) print_summary(communicator().size());
  benchmark::Shutdown();
  return 0;
}
