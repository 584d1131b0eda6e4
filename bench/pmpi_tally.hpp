// Bytes per collective, counted through MPI's profiling interface (PMPI), for the step-bytes
// benchmarks (bench_megatron_step_bytes.cpp, bench_fsdp_step_bytes.cpp). Include it in exactly one
// translation unit of a program: it defines the non-blocking collectives and point-to-point calls
// MpiCommunicator issues (MPI_Iallreduce, MPI_Ireduce_scatter_block, MPI_Iallgather(v),
// MPI_Ibcast, MPI_Ialltoall, MPI_Irecv), each adding the call's bytes to a tally keyed by (phase,
// collective, axis, ranks, element bytes) before forwarding to its PMPI_ twin. Nothing in the
// library changes and the numerics are untouched (the same calls with the same buffers).
//
// What a call's bytes are (per rank, this rank's buffers, as the counting communicator counts):
//   all-reduce        the buffer (N elements)
//   reduce-scatter    the send buffer (d x block)
//   all-gather(v)     the blocks received (all but this rank's own)
//   broadcast         the buffer, on every rank but the root
//   send/recv         the receive buffers
// The axis of a call is the program's name for its communicator's members (their world ranks):
// tally::axis_namer, set by the program for its mesh.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <tuple>
#include <vector>

namespace tally {

enum class Kind { all_reduce, reduce_scatter, all_gather, all_gather_in_place, broadcast, all_to_all, p2p };
inline constexpr const char* kind_names[] = {"all-reduce", "reduce-scatter", "all-gather", "all-gather (in place)",
                                             "broadcast",  "all-to-all",     "send/recv"};

struct Key {
  std::string phase;  ///< the program's phase (e.g. generate, log_prob, update)
  Kind kind;
  std::string axis;  ///< the mesh axes the communicator's members differ along (axis_namer's name)
  int ranks;         ///< the communicator's size
  int element;       ///< element bytes (4: f32/i32, 8: f64/i64)
  friend bool operator<(const Key& a, const Key& b) {
    return std::tie(a.phase, a.kind, a.axis, a.ranks, a.element) < std::tie(b.phase, b.kind, b.axis, b.ranks, b.element);
  }
  friend bool operator==(const Key& a, const Key& b) = default;
};
using Table = std::map<Key, std::int64_t>;  ///< bytes (see the file's comment)

inline bool enabled = false;
inline std::string phase = "init";
inline Table counts;
/// The axis name of a communicator from its members' world ranks (in its rank order).
inline std::function<std::string(const std::vector<int>&)> axis_namer = [](const std::vector<int>&) { return std::string("?"); };

inline std::string axis_of(MPI_Comm comm) {
  MPI_Group group = MPI_GROUP_NULL, world = MPI_GROUP_NULL;
  MPI_Comm_group(comm, &group);
  MPI_Comm_group(MPI_COMM_WORLD, &world);
  int n = 0;
  MPI_Group_size(group, &n);
  std::vector<int> local(static_cast<std::size_t>(n)), global(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) local[static_cast<std::size_t>(i)] = i;
  MPI_Group_translate_ranks(group, n, local.data(), world, global.data());
  MPI_Group_free(&group);
  MPI_Group_free(&world);
  return axis_namer(global);
}

inline void add(Kind kind, MPI_Comm comm, MPI_Datatype type, std::int64_t elements) {
  if (!enabled || elements == 0) return;
  int size = 0, element = 0;
  PMPI_Comm_size(comm, &size);
  MPI_Type_size(type, &element);
  counts[Key{phase, kind, axis_of(comm), size, element}] += elements * element;
}

/// Bytes moved per rank under ring algorithms: all-reduce 2 (n-1)/n of the buffer, reduce-scatter
/// (n-1)/n of the send buffer, the others as counted (already what the rank receives).
inline double moved(const Key& k, std::int64_t bytes) {
  const double n = k.ranks;
  if (k.kind == Kind::all_reduce) return 2.0 * (n - 1) / n * static_cast<double>(bytes);
  if (k.kind == Kind::reduce_scatter) return (n - 1) / n * static_cast<double>(bytes);
  return static_cast<double>(bytes);
}

}  // namespace tally

extern "C" {

int MPI_Iallreduce(const void* send, void* recv, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm, MPI_Request* request) {
  tally::add(tally::Kind::all_reduce, comm, type, count);
  return PMPI_Iallreduce(send, recv, count, type, op, comm, request);
}
int MPI_Ireduce_scatter_block(const void* send, void* recv, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm,
                              MPI_Request* request) {
  int size = 0;
  PMPI_Comm_size(comm, &size);
  tally::add(tally::Kind::reduce_scatter, comm, type, static_cast<std::int64_t>(count) * size);
  return PMPI_Ireduce_scatter_block(send, recv, count, type, op, comm, request);
}
int MPI_Iallgather(const void* send, int send_count, MPI_Datatype send_type, void* recv, int recv_count, MPI_Datatype recv_type,
                   MPI_Comm comm, MPI_Request* request) {
  int size = 0;
  PMPI_Comm_size(comm, &size);
  tally::add(tally::Kind::all_gather, comm, recv_type, static_cast<std::int64_t>(recv_count) * (size - 1));
  return PMPI_Iallgather(send, send_count, send_type, recv, recv_count, recv_type, comm, request);
}
int MPI_Iallgatherv(const void* send, int send_count, MPI_Datatype send_type, void* recv, const int recv_counts[],
                    const int displacements[], MPI_Datatype recv_type, MPI_Comm comm, MPI_Request* request) {
  int size = 0, rank = 0;
  PMPI_Comm_size(comm, &size);
  PMPI_Comm_rank(comm, &rank);
  std::int64_t others = 0;
  for (int r = 0; r < size; ++r)
    if (r != rank) others += recv_counts[r];
  tally::add(send == MPI_IN_PLACE ? tally::Kind::all_gather_in_place : tally::Kind::all_gather, comm, recv_type, others);
  return PMPI_Iallgatherv(send, send_count, send_type, recv, recv_counts, displacements, recv_type, comm, request);
}
int MPI_Ibcast(void* buffer, int count, MPI_Datatype type, int root, MPI_Comm comm, MPI_Request* request) {
  int rank = 0;
  PMPI_Comm_rank(comm, &rank);
  if (rank != root) tally::add(tally::Kind::broadcast, comm, type, count);
  return PMPI_Ibcast(buffer, count, type, root, comm, request);
}
int MPI_Ialltoall(const void* send, int send_count, MPI_Datatype send_type, void* recv, int recv_count, MPI_Datatype recv_type,
                  MPI_Comm comm, MPI_Request* request) {
  int size = 0;
  PMPI_Comm_size(comm, &size);
  tally::add(tally::Kind::all_to_all, comm, recv_type, static_cast<std::int64_t>(recv_count) * (size - 1));
  return PMPI_Ialltoall(send, send_count, send_type, recv, recv_count, recv_type, comm, request);
}
int MPI_Irecv(void* buffer, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm, MPI_Request* request) {
  tally::add(tally::Kind::p2p, comm, type, count);
  return PMPI_Irecv(buffer, count, type, source, tag, comm, request);
}

}  // extern "C"
