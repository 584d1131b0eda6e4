// The MPI communicator (OpenMPI, host buffers). Each call maps to one MPI call on the
// communicator's own MPI_Comm (a duplicate, so library traffic never matches user messages),
// with MPI_ERRORS_RETURN installed so that failures become CommunicatorError exceptions naming
// the MPI call and the rank. Include only from translation units linked with MPI.
#pragma once

#include <mpi.h>
#include <fmt/format.h>

#include <climits>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "verl/core/error.hpp"
#include "verl/parallel/communicator.hpp"

namespace verl::parallel {

namespace detail {

inline std::string mpi_error_string(int code) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return fmt::format("MPI error {}", code);
  return std::string(text, static_cast<std::size_t>(length));
}

template <CommElement T>
MPI_Datatype mpi_datatype() noexcept {
  if constexpr (std::same_as<T, float>) return MPI_FLOAT;
  else if constexpr (std::same_as<T, double>) return MPI_DOUBLE;
  else if constexpr (std::same_as<T, std::int32_t>) return MPI_INT32_T;
  else if constexpr (std::same_as<T, std::int64_t>) return MPI_INT64_T;
  else return MPI_UINT16_T;  // bf16 moves as its 16 bits; reductions use the ops below
}

/// MPI has no bfloat16: reductions on bf16 go through user-defined ops that compute in float
/// and round once per combine (what NCCL does for its bf16 reductions).
template <class Combine>
void bf16_reduce(void* in, void* inout, int* length, MPI_Datatype*) {
  const auto* a = static_cast<const bf16*>(in);
  auto* b = static_cast<bf16*>(inout);
  for (int i = 0; i < *length; ++i) b[i] = bf16(Combine{}(static_cast<float>(a[i]), static_cast<float>(b[i])));
}
struct FloatSum {
  float operator()(float a, float b) const noexcept { return a + b; }
};
struct FloatMax {
  float operator()(float a, float b) const noexcept { return a > b ? a : b; }
};
struct FloatMin {
  float operator()(float a, float b) const noexcept { return a < b ? a : b; }
};

struct Bf16Ops {
  MPI_Op sum = MPI_OP_NULL, max = MPI_OP_NULL, min = MPI_OP_NULL;
};
/// Created on first use (after MPI_Init); MPI_Finalize releases them.
inline const Bf16Ops& bf16_ops() {
  static const Bf16Ops ops = [] {
    Bf16Ops o;
    MPI_Op_create(&bf16_reduce<FloatSum>, 1, &o.sum);
    MPI_Op_create(&bf16_reduce<FloatMax>, 1, &o.max);
    MPI_Op_create(&bf16_reduce<FloatMin>, 1, &o.min);
    return o;
  }();
  return ops;
}

/// The MPI op computing `op`; avg is a sum followed by a division.
template <CommElement T>
MPI_Op mpi_op(ReduceOp op) {
  if constexpr (std::same_as<T, bf16>) {
    const Bf16Ops& ops = bf16_ops();
    return op == ReduceOp::max ? ops.max : op == ReduceOp::min ? ops.min : ops.sum;
  } else {
    return op == ReduceOp::max ? MPI_MAX : op == ReduceOp::min ? MPI_MIN : MPI_SUM;
  }
}

template <CommElement T>
void divide_by(std::span<T> data, int divisor) {
  if constexpr (std::is_floating_point_v<T>) {
    const T scale = T(1) / static_cast<T>(divisor);
    for (T& x : data) x *= scale;
  } else if constexpr (std::same_as<T, bf16>) {
    for (T& x : data) x = bf16(static_cast<float>(x) / static_cast<float>(divisor));
  }
}

}  // namespace detail

/// The rank of this process in MPI_COMM_WORLD, and how many there are (0 and 1 before MPI_Init).
inline std::pair<int, int> world_rank_and_size() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) return {0, 1};
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return {rank, size};
}

/// The one way a multi-rank program ends on an error: every rank is stopped (MPI_Abort), since
/// the others may be waiting in a collective for the failed one forever. With one rank (or
/// without MPI running) it returns, and the caller exits with `code` as usual.
inline void abort_every_rank(int code) {
  if (world_rank_and_size().second > 1) MPI_Abort(MPI_COMM_WORLD, code);
}

/// Initialises MPI for the lifetime of the object (and finalises it unless someone else had
/// initialised it first).
class MpiEnvironment {
 public:
  MpiEnvironment(int& argc, char**& argv, int required_thread_level = MPI_THREAD_FUNNELED) {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (initialized) return;
    int provided = 0;
    const int rc = MPI_Init_thread(&argc, &argv, required_thread_level, &provided);
    if (rc != MPI_SUCCESS) {
      throw CommunicatorError(fmt::format("MPI_Init_thread failed: {}", detail::mpi_error_string(rc)));
    }
    owns_ = true;
  }
  MpiEnvironment(const MpiEnvironment&) = delete;
  MpiEnvironment& operator=(const MpiEnvironment&) = delete;
  ~MpiEnvironment() {
    if (owns_) MPI_Finalize();
  }

 private:
  bool owns_ = false;
};

class MpiCommunicator {
 public:
  /// A duplicate of MPI_COMM_WORLD.
  static MpiCommunicator world() { return duplicate(MPI_COMM_WORLD); }

  /// A communicator owning a duplicate of `comm` (the caller keeps `comm`).
  static MpiCommunicator duplicate(MPI_Comm comm) {
    MPI_Comm dup = MPI_COMM_NULL;
    const int rc = MPI_Comm_dup(comm, &dup);
    if (rc != MPI_SUCCESS) throw CommunicatorError(fmt::format("MPI_Comm_dup failed: {}", detail::mpi_error_string(rc)));
    return MpiCommunicator(dup);
  }

  MpiCommunicator(MpiCommunicator&& other) noexcept
      : comm_(std::exchange(other.comm_, MPI_COMM_NULL)), rank_(other.rank_), size_(other.size_) {}
  MpiCommunicator& operator=(MpiCommunicator&& other) noexcept {
    if (this != &other) {
      release();
      comm_ = std::exchange(other.comm_, MPI_COMM_NULL);
      rank_ = other.rank_;
      size_ = other.size_;
    }
    return *this;
  }
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;
  ~MpiCommunicator() { release(); }

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }
  MPI_Comm native() const noexcept { return comm_; }

  template <CommElement T>
  void all_reduce(std::span<T> data, ReduceOp op) {
    detail::check_reduce_op<T>("all_reduce", op);
    check(MPI_Allreduce(MPI_IN_PLACE, data.data(), count("all_reduce", data.size()), detail::mpi_datatype<T>(),
                        detail::mpi_op<T>(op), comm_),
          "MPI_Allreduce");
    if (op == ReduceOp::avg) detail::divide_by(data, size_);
  }

  template <CommElement T>
  void all_gather(std::type_identity_t<std::span<const T>> send, std::span<T> recv) {
    detail::check_all_gather("all_gather", send, recv, size_);
    const int n = count("all_gather", send.size());
    check(MPI_Allgather(send.data(), n, detail::mpi_datatype<T>(), recv.data(), n, detail::mpi_datatype<T>(), comm_),
          "MPI_Allgather");
  }

  template <CommElement T>
  void all_gather_v(std::type_identity_t<std::span<const T>> send, std::span<T> recv,
                    std::span<const std::int64_t> counts) {
    detail::check_all_gather_v("all_gather_v", send, recv, counts, rank_, size_);
    counts_.resize(static_cast<std::size_t>(size_));
    displacements_.resize(static_cast<std::size_t>(size_));
    std::int64_t offset = 0;
    for (std::size_t i = 0; i < counts.size(); ++i) {
      counts_[i] = count("all_gather_v", static_cast<std::size_t>(counts[i]));
      displacements_[i] = count("all_gather_v", static_cast<std::size_t>(offset));
      offset += counts[i];
    }
    check(MPI_Allgatherv(send.data(), count("all_gather_v", send.size()), detail::mpi_datatype<T>(), recv.data(),
                         counts_.data(), displacements_.data(), detail::mpi_datatype<T>(), comm_),
          "MPI_Allgatherv");
  }

  template <CommElement T>
  void reduce_scatter(std::type_identity_t<std::span<const T>> send, std::span<T> recv, ReduceOp op) {
    detail::check_reduce_op<T>("reduce_scatter", op);
    detail::check_reduce_scatter("reduce_scatter", send, recv, size_);
    check(MPI_Reduce_scatter_block(send.data(), recv.data(), count("reduce_scatter", recv.size()),
                                   detail::mpi_datatype<T>(), detail::mpi_op<T>(op), comm_),
          "MPI_Reduce_scatter_block");
    if (op == ReduceOp::avg) detail::divide_by(recv, size_);
  }

  template <CommElement T>
  void broadcast(std::span<T> data, int root) {
    detail::check_peer("broadcast", "root", root, size_);
    check(MPI_Bcast(data.data(), count("broadcast", data.size()), detail::mpi_datatype<T>(), root, comm_), "MPI_Bcast");
  }

  template <CommElement T>
  void all_to_all(std::type_identity_t<std::span<const T>> send, std::span<T> recv) {
    detail::check_all_to_all("all_to_all", send, recv, size_);
    const int block = count("all_to_all", send.size() / static_cast<std::size_t>(size_));
    check(MPI_Alltoall(send.data(), block, detail::mpi_datatype<T>(), recv.data(), block, detail::mpi_datatype<T>(),
                       comm_),
          "MPI_Alltoall");
  }

  template <class T>
    requires CommElement<std::remove_const_t<T>>
  void send(std::span<T> data, int dest, int tag) {
    detail::check_peer("send", "dest", dest, size_);
    check(MPI_Send(data.data(), count("send", data.size()), detail::mpi_datatype<std::remove_const_t<T>>(), dest, tag,
                   comm_),
          "MPI_Send");
  }

  template <CommElement T>
  void recv(std::span<T> data, int source, int tag) {
    detail::check_peer("recv", "source", source, size_);
    MPI_Status status;
    check(MPI_Recv(data.data(), count("recv", data.size()), detail::mpi_datatype<T>(), source, tag, comm_, &status),
          "MPI_Recv");
    check_received("recv", status, data.size(), detail::mpi_datatype<T>());
  }

  /// send to `dest` and receive from `source` at once (no deadlock when two ranks exchange).
  template <CommElement T>
  void send_recv(std::type_identity_t<std::span<const T>> send_data, int dest, std::span<T> recv_data, int source,
                 int tag) {
    detail::check_peer("send_recv", "dest", dest, size_);
    detail::check_peer("send_recv", "source", source, size_);
    MPI_Status status;
    check(MPI_Sendrecv(send_data.data(), count("send_recv", send_data.size()), detail::mpi_datatype<T>(), dest, tag,
                       recv_data.data(), count("send_recv", recv_data.size()), detail::mpi_datatype<T>(), source, tag,
                       comm_, &status),
          "MPI_Sendrecv");
    check_received("send_recv", status, recv_data.size(), detail::mpi_datatype<T>());
  }

  void barrier() { check(MPI_Barrier(comm_), "MPI_Barrier"); }

  MpiCommunicator split(int color, int key) {
    VERL_CHECK_ARG(color >= 0, "split: color: expected a non-negative colour, got {}", color);
    MPI_Comm sub = MPI_COMM_NULL;
    check(MPI_Comm_split(comm_, color, key, &sub), "MPI_Comm_split");
    return MpiCommunicator(sub);
  }

 private:
  explicit MpiCommunicator(MPI_Comm comm) : comm_(comm) {
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }

  void release() noexcept {
    if (comm_ == MPI_COMM_NULL) return;
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Comm_free(&comm_);
    comm_ = MPI_COMM_NULL;
  }

  void check(int rc, std::string_view call) const {
    if (rc == MPI_SUCCESS) return;
    throw CommunicatorError(
        fmt::format("{} failed on rank {} of {}: {}", call, rank_, size_, detail::mpi_error_string(rc)));
  }

  void check_received(std::string_view call, const MPI_Status& status, std::size_t expected, MPI_Datatype type) const {
    int received = 0;
    MPI_Get_count(&status, type, &received);
    if (static_cast<std::size_t>(received) != expected) {
      throw CommunicatorError(fmt::format("{} on rank {} of {}: expected {} elements from rank {}, received {}", call,
                                          rank_, size_, expected, status.MPI_SOURCE, received));
    }
  }

  /// MPI counts are ints: larger buffers must be split by the caller.
  int count(std::string_view call, std::size_t n) const {
    VERL_CHECK_ARG(n <= static_cast<std::size_t>(INT_MAX), "{}: expected at most {} elements per MPI call, got {}", call,
                   INT_MAX, n);
    return static_cast<int>(n);
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
  std::vector<int> counts_, displacements_;
};

static_assert(Communicator<MpiCommunicator>);

}  // namespace verl::parallel
