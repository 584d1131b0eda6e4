// verl_device_probe: the peak figures of "one device" of this machine as the placement cost
// model sees it — one MPI rank with its threads (VERL_NUM_THREADS) — measured, not guessed:
//
//   flops      the library's float32 GEMM (verl::cpu::gemm) on a square product large enough to
//              be compute-bound, best of several repeats;
//   bandwidth  a STREAM-style copy (read one array, write another; 2 x bytes counted) over
//              arrays far larger than the caches, best of several repeats;
//   link       with two ranks (mpirun -np 2): the bytes per second one rank sends to the other
//              in large MPI_Sendrecv exchanges (both directions at once, per direction), best of
//              several repeats; the shared-memory transport between two cores of one host;
//   latency    with two ranks: the time of one 8-byte MPI_Allreduce, median of many.
//
// Prints one line in the calibration file's `device` syntax (docs/placement_search.md), from
// rank 0:   device flops=... bandwidth=... link=... latency=...
//
//   VERL_NUM_THREADS=1 mpirun -np 2 verl_device_probe [--gemm 1024] [--stream-mb 256]
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "verl/cpu/gemm.hpp"
#include "verl/cpu/thread_pool.hpp"

namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

double gemm_flops(verl::cpu::ThreadPool& pool, verl::Index n, int repeats) {
  std::vector<float> a(static_cast<std::size_t>(n * n)), b(a.size()), c(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    a[i] = static_cast<float>((i * 7 % 13)) * 0.01f;
    b[i] = static_cast<float>((i * 5 % 11)) * 0.01f;
  }
  double best = 1e300;
  for (int r = 0; r < repeats; ++r) {
    const double t0 = now();
    verl::cpu::gemm<float>(&pool, n, n, n, verl::cpu::rows_of(a.data(), n), verl::cpu::rows_of(b.data(), n), c.data(),
                           n, false);
    best = std::min(best, now() - t0);
  }
  volatile float sink = c[static_cast<std::size_t>(n + 1)];
  (void)sink;
  return 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n) / best;
}

double copy_bandwidth(verl::cpu::ThreadPool& pool, std::size_t bytes, int repeats) {
  const std::size_t count = bytes / sizeof(float);
  std::vector<float> src(count, 1.0f), dst(count, 0.0f);
  const verl::Index chunks = static_cast<verl::Index>(pool.size()) * 4;
  double best = 1e300;
  for (int r = 0; r < repeats; ++r) {
    const double t0 = now();
    pool.parallel_for(chunks, [&](verl::Index i) {
      const std::size_t begin = count * static_cast<std::size_t>(i) / static_cast<std::size_t>(chunks);
      const std::size_t end = count * static_cast<std::size_t>(i + 1) / static_cast<std::size_t>(chunks);
      std::memcpy(dst.data() + begin, src.data() + begin, (end - begin) * sizeof(float));
    });
    best = std::min(best, now() - t0);
  }
  volatile float sink = dst[count / 2];
  (void)sink;
  return 2.0 * static_cast<double>(count * sizeof(float)) / best;
}

double link_bandwidth(int rank, std::size_t bytes, int repeats) {
  std::vector<char> out(bytes, static_cast<char>(rank)), in(bytes, 0);
  const int peer = 1 - rank;
  double best = 1e300;
  for (int r = 0; r < repeats; ++r) {
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = now();
    MPI_Sendrecv(out.data(), static_cast<int>(bytes), MPI_CHAR, peer, 0, in.data(), static_cast<int>(bytes), MPI_CHAR,
                 peer, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    double t = now() - t0;
    MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    best = std::min(best, t);
  }
  return static_cast<double>(bytes) / best;
}

double allreduce_latency(int repeats) {
  std::vector<double> times;
  double value = 1;
  for (int r = 0; r < repeats; ++r) {
    const double t0 = now();
    MPI_Allreduce(MPI_IN_PLACE, &value, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    times.push_back(now() - t0);
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  verl::Index n = 1024;
  std::size_t stream_mb = 256;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if ((arg == "--gemm" || arg == "--stream-mb") && i + 1 < argc) {
      const long value = std::atol(argv[++i]);
      if (value <= 0) {
        std::fprintf(stderr, "verl_device_probe: %s: expected a positive integer, got '%s'\n", argv[i - 1], argv[i]);
        MPI_Abort(MPI_COMM_WORLD, 2);
      }
      if (arg == "--gemm") n = value;
      if (arg == "--stream-mb") stream_mb = static_cast<std::size_t>(value);
    } else {
      std::fprintf(stderr, "usage: [mpirun -np 2] verl_device_probe [--gemm N] [--stream-mb MB]\n");
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
  }
  if (size > 2) {
    if (rank == 0) std::fprintf(stderr, "verl_device_probe: expected 1 or 2 ranks, got %d\n", size);
    MPI_Finalize();
    return 2;
  }
  verl::cpu::ThreadPool pool;
  // Every rank measures its own core(s) at the same time, as the trainer's ranks run; the
  // device's figure is the slowest rank's.
  MPI_Barrier(MPI_COMM_WORLD);
  double flops = gemm_flops(pool, n, 5);
  MPI_Barrier(MPI_COMM_WORLD);
  double bandwidth = copy_bandwidth(pool, stream_mb << 20, 5);
  MPI_Allreduce(MPI_IN_PLACE, &flops, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, &bandwidth, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
  char line[256];
  std::snprintf(line, sizeof line, "device flops=%.4g bandwidth=%.4g", flops, bandwidth);
  std::string out = line;
  if (size == 2) {
    const double link = link_bandwidth(rank, std::size_t{64} << 20, 5);
    const double latency = allreduce_latency(2001);
    std::snprintf(line, sizeof line, " link=%.4g latency=%.4g", link, latency);
    out += line;
  }
  if (rank == 0) std::printf("%s\n", out.c_str());
  MPI_Finalize();
  return 0;
}
