// The communicator concept shared by every backend (SelfCommunicator, MpiCommunicator,
// NcclCommunicator), so that collective algorithms are written once. Buffers are spans of a
// supported element type (host memory for Self and MPI, device memory for NCCL); collectives are
// called by every rank of the communicator in the same order, as in MPI and torch.distributed.
#pragma once

#include <Eigen/Core>
#include <fmt/format.h>

#include <concepts>
#include <cstdint>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>

#include "verl/core/error.hpp"
#include "verl/parallel/mesh.hpp"
#include "verl/parallel/rank_group.hpp"

namespace verl::parallel {

/// bfloat16 as Eigen defines it (same bits as torch.bfloat16).
using bf16 = Eigen::bfloat16;

enum class ReduceOp : std::uint8_t { sum, avg, max, min };

constexpr std::string_view to_string(ReduceOp op) noexcept {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::avg: return "avg";
    case ReduceOp::max: return "max";
    case ReduceOp::min: return "min";
  }
  return "?";
}

/// Element types every backend moves and reduces.
template <class T>
concept CommElement = std::same_as<T, float> || std::same_as<T, double> || std::same_as<T, std::int32_t> ||
                      std::same_as<T, std::int64_t> || std::same_as<T, bf16>;

template <CommElement T>
constexpr std::string_view element_name() noexcept {
  if constexpr (std::same_as<T, float>) return "float32";
  else if constexpr (std::same_as<T, double>) return "float64";
  else if constexpr (std::same_as<T, std::int32_t>) return "int32";
  else if constexpr (std::same_as<T, std::int64_t>) return "int64";
  else return "bfloat16";
}

/// A failure inside the communication library (MPI, NCCL); the message names the call and the
/// rank, e.g. "MPI_Allreduce failed on rank 2 of 4: MPI_ERR_TRUNCATE: message truncated".
class CommunicatorError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A process group that runs collectives. `split(color, key)` is collective: ranks passing the
/// same colour form a new communicator, ordered by key.
template <class C>
concept Communicator =
    std::movable<C> && requires(C& c, const C& cc, std::span<float> out, std::span<const float> in,
                                std::span<std::int64_t> out64, std::span<const std::int64_t> in64,
                                std::span<const std::int64_t> counts, int peer, int tag) {
      { cc.rank() } -> std::same_as<int>;
      { cc.size() } -> std::same_as<int>;
      c.all_reduce(out, ReduceOp::sum);
      c.all_reduce(out64, ReduceOp::max);
      c.all_gather(in, out);
      c.all_gather_v(in, out, counts);
      c.reduce_scatter(in, out, ReduceOp::avg);
      c.broadcast(out, peer);
      c.all_to_all(in64, out64);
      c.send(in, peer, tag);
      c.recv(out, peer, tag);
      c.send_recv(in, peer, out, peer, tag);
      c.barrier();
      { c.split(peer, peer) } -> std::same_as<C>;
    };

/// A communicator that also gathers in place (MPI_IN_PLACE; NCCL's in-place broadcasts):
/// all_gather_v_in_place(data, counts) fills every other rank's slot of `data`, this rank's block
/// being already in its own. The 3D-HybridEngine gathers into the generation buffer this way, so
/// that no staging copy of the training shard exists.
template <class C>
concept GathersInPlace = Communicator<C> && requires(C& c, std::span<float> data, std::span<const std::int64_t> counts) {
  c.all_gather_v_in_place(data, counts);
};

/// A communicator that also reduce-scatters in place (MPI_IN_PLACE): reduce_scatter_in_place(data,
/// op) reduces the ranks' `data` (size() blocks back to back) and leaves this rank's reduced block
/// in the first block of `data`. Megatron's distributed optimizer reduce-scatters its gradient
/// buffer this way, so that no second buffer of the rank's slice exists.
template <class C>
concept ReduceScattersInPlace = Communicator<C> && requires(C& c, std::span<float> data) {
  c.reduce_scatter_in_place(data, ReduceOp::avg);
};

namespace detail {

/// Argument checks shared by the backends, so that every backend rejects the same misuse with
/// the same message (the call, the argument, expected and actual sizes).
template <class T>
void check_all_gather(std::string_view call, std::span<const T> send, std::span<T> recv, int size) {
  VERL_CHECK_ARG(static_cast<std::int64_t>(recv.size()) == static_cast<std::int64_t>(send.size()) * size,
                 "{}: recv: expected length {} (send {} x {} ranks), got {}", call,
                 static_cast<std::int64_t>(send.size()) * size, send.size(), size, recv.size());
}

template <class T>
void check_all_gather_v(std::string_view call, std::span<const T> send, std::span<T> recv,
                        std::span<const std::int64_t> counts, int rank, int size) {
  VERL_CHECK_ARG(static_cast<int>(counts.size()) == size, "{}: counts: expected one count per rank ({}), got {}", call,
                 size, counts.size());
  std::int64_t total = 0;
  for (std::size_t i = 0; i < counts.size(); ++i) {
    VERL_CHECK_ARG(counts[i] >= 0, "{}: counts: expected non-negative counts, got {} for rank {}", call, counts[i], i);
    total += counts[i];
  }
  VERL_CHECK_ARG(counts[static_cast<std::size_t>(rank)] == static_cast<std::int64_t>(send.size()),
                 "{}: send: expected length counts[{}] = {}, got {}", call, rank, counts[static_cast<std::size_t>(rank)],
                 send.size());
  VERL_CHECK_ARG(static_cast<std::int64_t>(recv.size()) == total, "{}: recv: expected length {} (the sum of counts), got {}",
                 call, total, recv.size());
}

/// all_gather_v_in_place: `data` holds every rank's block back to back (counts[r] elements each)
/// and this rank's block is already in its slot.
template <class T>
void check_all_gather_v_in_place(std::string_view call, std::span<T> data, std::span<const std::int64_t> counts,
                                 int size) {
  VERL_CHECK_ARG(static_cast<int>(counts.size()) == size, "{}: counts: expected one count per rank ({}), got {}", call,
                 size, counts.size());
  std::int64_t total = 0;
  for (std::size_t i = 0; i < counts.size(); ++i) {
    VERL_CHECK_ARG(counts[i] >= 0, "{}: counts: expected non-negative counts, got {} for rank {}", call, counts[i], i);
    total += counts[i];
  }
  VERL_CHECK_ARG(static_cast<std::int64_t>(data.size()) == total, "{}: data: expected length {} (the sum of counts), got {}",
                 call, total, data.size());
}

/// reduce_scatter_in_place: `data` holds one block per rank (its length a multiple of the size).
template <class T>
void check_reduce_scatter_in_place(std::string_view call, std::span<T> data, int size) {
  VERL_CHECK_ARG(data.size() % static_cast<std::size_t>(size) == 0,
                 "{}: data: expected a length divisible by the {} ranks (one block each), got {}", call, size, data.size());
}

template <class T>
void check_reduce_scatter(std::string_view call, std::span<const T> send, std::span<T> recv, int size) {
  VERL_CHECK_ARG(static_cast<std::int64_t>(send.size()) == static_cast<std::int64_t>(recv.size()) * size,
                 "{}: send: expected length {} (recv {} x {} ranks), got {}", call,
                 static_cast<std::int64_t>(recv.size()) * size, recv.size(), size, send.size());
}

template <class T>
void check_all_to_all(std::string_view call, std::span<const T> send, std::span<T> recv, int size) {
  VERL_CHECK_ARG(send.size() % static_cast<std::size_t>(size) == 0,
                 "{}: send: expected a length divisible by the {} ranks, got {}", call, size, send.size());
  VERL_CHECK_ARG(recv.size() == send.size(), "{}: recv: expected the length of send {}, got {}", call, send.size(),
                 recv.size());
}

inline void check_peer(std::string_view call, std::string_view argument, int peer, int size) {
  VERL_CHECK_ARG(peer >= 0 && peer < size, "{}: {}: expected a rank in [0, {}), got {}", call, argument, size, peer);
}

template <CommElement T>
void check_reduce_op(std::string_view call, ReduceOp op) {
  VERL_CHECK_ARG(op != ReduceOp::avg || !std::is_integral_v<T>,
                 "{}: op: expected sum, max or min for {} (avg needs a floating-point type), got avg", call,
                 element_name<T>());
}

}  // namespace detail

/// The communicator of the group `group` that contains this rank: a collective call on
/// `parent` (every rank passes its own group; the groups must partition parent's ranks).
template <Communicator C>
C sub_communicator(C& parent, const RankGroup& group) {
  const auto index = group.index_of(parent.rank());
  VERL_CHECK_ARG(index.has_value(), "group: expected a group containing rank {}, got {}", parent.rank(), to_string(group));
  return parent.split(static_cast<int>(group.leader()), static_cast<int>(*index));
}

/// The communicator of this rank's slice of `mesh` along `axes` (e.g. its TP group).
template <Communicator C, MeshType M>
C sub_communicator(C& parent, const M& mesh, AxisSet axes) {
  VERL_CHECK_ARG(parent.size() == static_cast<int>(mesh.world_size()),
                 "mesh: expected a mesh over the communicator's {} ranks, got {} ranks ({})", parent.size(),
                 static_cast<std::int64_t>(mesh.world_size()), mesh.to_string());
  return sub_communicator(parent, mesh.group(parent.rank(), axes));
}

}  // namespace verl::parallel
