// Reshard execution (HybridFlow's micro-DP all-gather) against HybridFlow-V and the full
// all-gather of DeepSpeed-Chat, for the same meshes and model, in the same run.
//
// With MPI (bench_parallel_reshard_mpi, e.g. `mpirun -np 4 build/bench/bench_parallel_reshard_mpi`)
// every rank reshards its own shards: training tp = the world size, generation tp = half of it.
// As a single process (bench/) one rank of an 8-rank plan (train tp=4 pp=2 -> gen tp=2 pp=1) is
// simulated: the all-gather is replaced by copies of the same size, so the numbers are the local
// memory traffic of each strategy, not the network's.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "verl/parallel/resharder.hpp"

#ifdef VERL_BENCH_WITH_MPI
#include <mpi.h>

#include "verl/parallel/mpi_communicator.hpp"
#endif

namespace {

using namespace verl::parallel;

/// A Llama-like layer: hidden 512, intermediate 1408, 8 query heads and 2 kv heads of 64.
ModelSpec bench_model() {
  return {4,
          {ParamSpec::fused_qkv(8, 2, 64, 512), ParamSpec::row_parallel(512, 512), ParamSpec::fused_gate_up(1408, 512),
           ParamSpec::row_parallel(512, 1408), ParamSpec::replicated(512), ParamSpec::replicated(512)}};
}

#ifndef VERL_BENCH_WITH_MPI
/// Stands in for the gather group of one rank: all_gather writes the rank's contribution into
/// every member's slot (the bytes a real all-gather would deliver).
class SimulatedGroup {
 public:
  SimulatedGroup(int rank, int size) : rank_(rank), size_(size) {}
  int rank() const { return rank_; }
  int size() const { return size_; }
  template <CommElement T>
  void all_gather(std::type_identity_t<std::span<const T>> send, std::span<T> recv) {
    for (int r = 0; r < size_; ++r) std::copy(send.begin(), send.end(), recv.begin() + r * send.size());
  }
  // The rest of the concept is not used by the resharder.
  template <CommElement T>
  void all_reduce(std::span<T>, ReduceOp) {}
  template <CommElement T>
  void all_gather_v(std::type_identity_t<std::span<const T>>, std::span<T>, std::span<const std::int64_t>) {}
  template <CommElement T>
  void reduce_scatter(std::type_identity_t<std::span<const T>>, std::span<T>, ReduceOp) {}
  template <CommElement T>
  void broadcast(std::span<T>, int) {}
  template <CommElement T>
  void all_to_all(std::type_identity_t<std::span<const T>>, std::span<T>) {}
  template <class T>
  void send(std::span<T>, int, int) {}
  template <CommElement T>
  void recv(std::span<T>, int, int) {}
  template <CommElement T>
  void send_recv(std::type_identity_t<std::span<const T>>, int, std::span<T>, int, int) {}
  void barrier() {}
  SimulatedGroup split(int, int) { return *this; }

 private:
  int rank_, size_;
};
static_assert(Communicator<SimulatedGroup>);
#endif

struct Setup {
  ReshardGeometry geometry;
  std::int64_t rank = 0;
};

Setup bench_setup() {
  AxisSizes train, gen;
#ifdef VERL_BENCH_WITH_MPI
  int world = 1, rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  train.set(AxisKind::tp, world);
  gen.set(AxisKind::tp, world >= 2 ? world / 2 : 1);
  gen.set(AxisKind::dp, world >= 2 ? 2 : 1);
  return {ReshardGeometry::from_sizes(train, gen), rank};
#else
  train.set(AxisKind::tp, 4), train.set(AxisKind::pp, 2);
  gen.set(AxisKind::tp, 2), gen.set(AxisKind::dp, 4);
  return {ReshardGeometry::from_sizes(train, gen), 0};
#endif
}

std::map<std::string, double>& best_times() {
  static std::map<std::string, double> times;
  return times;
}

template <ReshardStrategy S>
void BM_Reshard(benchmark::State& state) {
  const Setup setup = bench_setup();
  const ModelSpec model = bench_model();
  Resharder<S, float> resharder(ReshardPlan<S>(setup.geometry), model, setup.rank);
  const std::vector<float> training(static_cast<std::size_t>(resharder.training_size()), 1.0f);
  std::vector<float> generation(static_cast<std::size_t>(resharder.generation_size()));
#ifdef VERL_BENCH_WITH_MPI
  MpiCommunicator world = MpiCommunicator::world();
  MpiCommunicator group = sub_communicator(world, resharder.gather_group());
  auto now = [] { return MPI_Wtime(); };
  auto slowest = [](double s) {
    double r = s;
    MPI_Allreduce(&s, &r, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return r;
  };
  auto sync = [] { MPI_Barrier(MPI_COMM_WORLD); };
#else
  SimulatedGroup group(static_cast<int>(*resharder.gather_group().index_of(setup.rank)),
                       static_cast<int>(resharder.gather_group().size()));
  auto now = [] { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); };
  auto slowest = [](double s) { return s; };
  auto sync = [] {};
#endif
  resharder.to_generation(group, std::span(training), std::span(generation));  // warm-up
  for (auto _ : state) {
    sync();
    const double start = now();
    resharder.to_generation(group, std::span(training), std::span(generation));
    const double elapsed = slowest(now() - start);
    state.SetIterationTime(elapsed);
    auto& best = best_times()[std::string(S::name)];
    best = best == 0 ? elapsed : std::min(best, elapsed);
  }
  const ReshardCost cost = ReshardPlan<S>(setup.geometry).cost();
  const std::int64_t model_bytes = model.numel() * static_cast<std::int64_t>(sizeof(float));
  state.counters["comm_MB_per_rank"] = static_cast<double>(cost.bytes(model_bytes).comm_bytes_per_rank) / 1e6;
  state.counters["peak_MB_per_rank"] = static_cast<double>(cost.bytes(model_bytes).peak_param_bytes_per_rank) / 1e6;
}

BENCHMARK(BM_Reshard<HybridFlow>)->Name("reshard/hybridflow")->Iterations(20)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Reshard<HybridFlowV>)->Name("reshard/hybridflow_v")->Iterations(20)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Reshard<FullAllGather>)->Name("reshard/full_allgather")->Iterations(20)->UseManualTime()->Unit(benchmark::kMillisecond);

/// Reports nothing: the ranks other than 0 run the same collectives silently.
class QuietReporter : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>&) override {}
};

}  // namespace

int main(int argc, char** argv) {
  int rank = 0;
#ifdef VERL_BENCH_WITH_MPI
  MpiEnvironment environment(argc, argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
#endif
  benchmark::Initialize(&argc, argv);
  if (rank == 0) {
    const Setup setup = bench_setup();
    const auto& g = setup.geometry;
    std::printf("train tp=%lld pp=%lld dp=%lld -> gen tp=%lld pp=%lld dp=%lld, %lld float parameters%s\n",
                static_cast<long long>(g.train_tp), static_cast<long long>(g.train_pp),
                static_cast<long long>(g.train_dp), static_cast<long long>(g.gen_tp), static_cast<long long>(g.gen_pp),
                static_cast<long long>(g.gen_dp), static_cast<long long>(bench_model().numel()),
#ifdef VERL_BENCH_WITH_MPI
                "");
#else
                " (single process: one simulated rank, local copies only)");
#endif
    benchmark::RunSpecifiedBenchmarks();
    const double full = best_times()["full_allgather"];
    if (full > 0) {
      std::printf("\nbest time relative to the full all-gather:\n");
      for (const auto& [name, t] : best_times()) std::printf("  %-16s %8.3f ms  %5.2fx\n", name.c_str(), t * 1e3, t / full);
    }
  } else {
    QuietReporter quiet;  // every rank runs the collectives, rank 0 reports
    benchmark::RunSpecifiedBenchmarks(&quiet);
  }
  benchmark::Shutdown();
  return 0;
}
