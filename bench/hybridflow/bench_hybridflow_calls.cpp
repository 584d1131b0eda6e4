// The HybridFlow runtime's overhead per call against a raw MPI round trip in the same run:
//   mpirun -np 2 build/bench/bench_hybridflow_calls [iterations]
// Raw: rank 0 sends a message to the last rank, which sends it back (MPI_Send/MPI_Recv), for an
// empty message and for a 1 MiB one. Runtime: a worker group on the last rank answers an empty
// ONE_TO_ALL call and a DP_COMPUTE_PROTO call carrying a 1 MiB DataProto (a float32 tensor), which
// it returns (dispatch, serialisation, the round trip, collection and concatenation). With one
// rank both sides talk to rank 0 itself. Prints microseconds per call (medians of 5 repeats) and
// the runtime's extra time over raw MPI.
#include <mpi.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "verl/data/data_proto.hpp"
#include "verl/hybridflow/runtime.hpp"

namespace {

using namespace verl;
using namespace verl::hybridflow;
using data::DataProto;

struct Echo {
  static constexpr std::string_view name = "Echo";
  explicit Echo(WorkerContext&) {}
  void nothing() {}
  DataProto identity(const DataProto& batch) { return batch; }
  using methods = TypeList<Method<&Echo::nothing, Dispatch::one_to_all, "nothing">,
                           Method<&Echo::identity, Dispatch::dp_compute_proto, "identity">>;
};

constexpr std::size_t mebibyte = 1 << 20;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

/// Microseconds per raw round trip of `bytes` between rank 0 and `peer` (every rank calls it).
double raw_round_trip_us(std::size_t bytes, int iterations, int peer) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::vector<char> buffer(std::max<std::size_t>(bytes, 1));
  const int count = static_cast<int>(bytes);
  MPI_Barrier(MPI_COMM_WORLD);
  const double start = MPI_Wtime();
  for (int i = 0; i < iterations; ++i) {
    if (peer == 0) {  // one rank: to itself and back
      std::vector<char> back(buffer.size());
      MPI_Sendrecv(buffer.data(), count, MPI_BYTE, 0, 1, back.data(), count, MPI_BYTE, 0, 1, MPI_COMM_WORLD,
                   MPI_STATUS_IGNORE);
      MPI_Sendrecv(back.data(), count, MPI_BYTE, 0, 2, buffer.data(), count, MPI_BYTE, 0, 2, MPI_COMM_WORLD,
                   MPI_STATUS_IGNORE);
    } else if (rank == 0) {
      MPI_Send(buffer.data(), count, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
      MPI_Recv(buffer.data(), count, MPI_BYTE, peer, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else if (rank == peer) {
      MPI_Recv(buffer.data(), count, MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      MPI_Send(buffer.data(), count, MPI_BYTE, 0, 2, MPI_COMM_WORLD);
    }
  }
  const double seconds = MPI_Wtime() - start;
  MPI_Barrier(MPI_COMM_WORLD);
  return seconds / iterations * 1e6;
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  const int iterations = argc > 1 ? std::atoi(argv[1]) : 200;
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const int peer = size - 1;
  std::array<std::vector<double>, 2> raw;
  for (int repeat = 0; repeat < 5; ++repeat) {
    raw[0].push_back(raw_round_trip_us(0, iterations, peer));
    raw[1].push_back(raw_round_trip_us(mebibyte, iterations / 4 + 1, peer));
  }
  const int code = run_controller<Echo>(argc, argv, [&](Runtime<Echo>& runtime) {
    auto group = runtime.spawn<Echo>(runtime.pool(peer, 1));
    DataProto batch;
    batch.set("x", MatrixF::Constant(static_cast<Index>(mebibyte / sizeof(float) / 256), 256, 1.0f));
    std::array<std::vector<double>, 2> calls;
    using Clock = std::chrono::steady_clock;
    for (int repeat = 0; repeat < 5; ++repeat) {
      auto start = Clock::now();
      for (int i = 0; i < iterations; ++i) group.call<&Echo::nothing>().get();
      calls[0].push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count() / iterations);
      const int big = iterations / 4 + 1;
      start = Clock::now();
      for (int i = 0; i < big; ++i) (void)group.call<&Echo::identity>(batch).get();
      calls[1].push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count() / big);
    }
    std::printf("hybridflow call overhead, %d rank(s), worker on rank %d (median of 5 repeats)\n", runtime.world_size(), peer);
    std::printf("%-28s %12s %12s %12s\n", "payload", "raw MPI us", "runtime us", "extra us");
    const char* names[] = {"empty (ONE_TO_ALL)", "1 MiB DataProto (DP_PROTO)"};
    for (int k = 0; k < 2; ++k) {
      const double r = median(raw[static_cast<std::size_t>(k)]), c = median(calls[static_cast<std::size_t>(k)]);
      std::printf("%-28s %12.1f %12.1f %12.1f\n", names[k], r, c, c - r);
    }
  });
  MPI_Finalize();
  return code;
}
