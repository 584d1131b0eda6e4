// The MPI communicator (OpenMPI, host buffers). Each call maps to one MPI call on the
// communicator's own MPI_Comm (a duplicate, so library traffic never matches user messages),
// with MPI_ERRORS_RETURN installed so that failures become CommunicatorError exceptions naming
// the MPI call and the rank. Include only from translation units linked with MPI.
#pragma once

#include <mpi.h>
#include <fmt/format.h>

#include <chrono>
#include <climits>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
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
      : comm_(std::exchange(other.comm_, MPI_COMM_NULL)),
        rank_(other.rank_),
        size_(other.size_),
        timeout_(other.timeout_),
        timed_out_(other.timed_out_) {}
  MpiCommunicator& operator=(MpiCommunicator&& other) noexcept {
    if (this != &other) {
      release();
      comm_ = std::exchange(other.comm_, MPI_COMM_NULL);
      rank_ = other.rank_;
      size_ = other.size_;
      timeout_ = other.timeout_;
      timed_out_ = other.timed_out_;
    }
    return *this;
  }
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;
  ~MpiCommunicator() { release(); }

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }
  MPI_Comm native() const noexcept { return comm_; }

  /// The longest any collective or message may wait for the other ranks (verl's
  /// actor_rollout_ref.nccl_timeout); past it the call throws CommunicatorError instead of
  /// waiting forever for a rank that stopped or is stuck. nullopt (the default): no limit. After
  /// a timeout the communicator is unusable (its operation is still pending).
  void set_timeout(std::optional<std::chrono::milliseconds> timeout) {
    VERL_CHECK_ARG(!timeout || timeout->count() > 0, "timeout: expected a positive duration, got {} ms",
                   timeout ? timeout->count() : 0);
    timeout_ = timeout;
  }
  [[nodiscard]] std::optional<std::chrono::milliseconds> timeout() const noexcept { return timeout_; }

  template <CommElement T>
  void all_reduce(std::span<T> data, ReduceOp op) {
    detail::check_reduce_op<T>("all_reduce", op);
    MPI_Request request = MPI_REQUEST_NULL;
    check(MPI_Iallreduce(MPI_IN_PLACE, data.data(), count("all_reduce", data.size()), detail::mpi_datatype<T>(),
                         detail::mpi_op<T>(op), comm_, &request),
          "MPI_Iallreduce");
    complete(request, "all_reduce");
    if (op == ReduceOp::avg) detail::divide_by(data, size_);
  }

  template <CommElement T>
  void all_gather(std::type_identity_t<std::span<const T>> send, std::span<T> recv) {
    detail::check_all_gather("all_gather", send, recv, size_);
    const int n = count("all_gather", send.size());
    MPI_Request request = MPI_REQUEST_NULL;
    check(MPI_Iallgather(send.data(), n, detail::mpi_datatype<T>(), recv.data(), n, detail::mpi_datatype<T>(), comm_,
                         &request),
          "MPI_Iallgather");
    complete(request, "all_gather");
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
    MPI_Request request = MPI_REQUEST_NULL;
    check(MPI_Iallgatherv(send.data(), count("all_gather_v", send.size()), detail::mpi_datatype<T>(), recv.data(),
                          counts_.data(), displacements_.data(), detail::mpi_datatype<T>(), comm_, &request),
          "MPI_Iallgatherv");
    complete(request, "all_gather_v");
  }

  /// all_gather_v with this rank's block already in its slot of `data` (MPI_IN_PLACE).
  template <CommElement T>
  void all_gather_v_in_place(std::span<T> data, std::span<const std::int64_t> counts) {
    detail::check_all_gather_v_in_place("all_gather_v_in_place", data, counts, size_);
    counts_.resize(static_cast<std::size_t>(size_));
    displacements_.resize(static_cast<std::size_t>(size_));
    std::int64_t offset = 0;
    for (std::size_t i = 0; i < counts.size(); ++i) {
      counts_[i] = count("all_gather_v_in_place", static_cast<std::size_t>(counts[i]));
      displacements_[i] = count("all_gather_v_in_place", static_cast<std::size_t>(offset));
      offset += counts[i];
    }
    MPI_Request request = MPI_REQUEST_NULL;
    check(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, data.data(), counts_.data(), displacements_.data(),
                          detail::mpi_datatype<T>(), comm_, &request),
          "MPI_Iallgatherv");
    complete(request, "all_gather_v_in_place");
  }

  template <CommElement T>
  void reduce_scatter(std::type_identity_t<std::span<const T>> send, std::span<T> recv, ReduceOp op) {
    detail::check_reduce_op<T>("reduce_scatter", op);
    detail::check_reduce_scatter("reduce_scatter", send, recv, size_);
    MPI_Request request = MPI_REQUEST_NULL;
    check(MPI_Ireduce_scatter_block(send.data(), recv.data(), count("reduce_scatter", recv.size()),
                                    detail::mpi_datatype<T>(), detail::mpi_op<T>(op), comm_, &request),
          "MPI_Ireduce_scatter_block");
    complete(request, "reduce_scatter");
    if (op == ReduceOp::avg) detail::divide_by(recv, size_);
  }

  /// reduce_scatter with MPI_IN_PLACE: `data` holds the size() blocks this rank contributes; its
  /// first block receives this rank's reduced block (the rest is left unspecified).
  template <CommElement T>
  void reduce_scatter_in_place(std::span<T> data, ReduceOp op) {
    detail::check_reduce_op<T>("reduce_scatter_in_place", op);
    detail::check_reduce_scatter_in_place("reduce_scatter_in_place", data, size_);
    const std::span<T> block = data.first(data.size() / static_cast<std::size_t>(size_));
    MPI_Request request = MPI_REQUEST_NULL;
    check(MPI_Ireduce_scatter_block(MPI_IN_PLACE, data.data(), count("reduce_scatter_in_place", block.size()),
                                    detail::mpi_datatype<T>(), detail::mpi_op<T>(op), comm_, &request),
          "MPI_Ireduce_scatter_block");
    complete(request, "reduce_scatter_in_place");
    if (op == ReduceOp::avg) detail::divide_by(block, size_);
  }

  template <CommElement T>
  void broadcast(std::span<T> data, int root) {
    detail::check_peer("broadcast", "root", root, size_);
    MPI_Request request = MPI_REQUEST_NULL;
    check(MPI_Ibcast(data.data(), count("broadcast", data.size()), detail::mpi_datatype<T>(), root, comm_, &request),
          "MPI_Ibcast");
    complete(request, "broadcast");
  }

  template <CommElement T>
  void all_to_all(std::type_identity_t<std::span<const T>> send, std::span<T> recv) {
    detail::check_all_to_all("all_to_all", send, recv, size_);
    const int block = count("all_to_all", send.size() / static_cast<std::size_t>(size_));
    MPI_Request request = MPI_REQUEST_NULL;
    check(MPI_Ialltoall(send.data(), block, detail::mpi_datatype<T>(), recv.data(), block, detail::mpi_datatype<T>(),
                        comm_, &request),
          "MPI_Ialltoall");
    complete(request, "all_to_all");
  }

  template <class T>
    requires CommElement<std::remove_const_t<T>>
  void send(std::span<T> data, int dest, int tag) {
    detail::check_peer("send", "dest", dest, size_);
    MPI_Request request = MPI_REQUEST_NULL;
    check(MPI_Isend(data.data(), count("send", data.size()), detail::mpi_datatype<std::remove_const_t<T>>(), dest, tag,
                    comm_, &request),
          "MPI_Isend");
    complete(request, "send");
  }

  template <CommElement T>
  void recv(std::span<T> data, int source, int tag) {
    detail::check_peer("recv", "source", source, size_);
    MPI_Request request = MPI_REQUEST_NULL;
    check(MPI_Irecv(data.data(), count("recv", data.size()), detail::mpi_datatype<T>(), source, tag, comm_, &request),
          "MPI_Irecv");
    const MPI_Status status = complete(request, "recv");
    check_received("recv", status, data.size(), detail::mpi_datatype<T>());
  }

  /// send to `dest` and receive from `source` at once (no deadlock when two ranks exchange).
  template <CommElement T>
  void send_recv(std::type_identity_t<std::span<const T>> send_data, int dest, std::span<T> recv_data, int source,
                 int tag) {
    detail::check_peer("send_recv", "dest", dest, size_);
    detail::check_peer("send_recv", "source", source, size_);
    MPI_Request receiving = MPI_REQUEST_NULL, sending = MPI_REQUEST_NULL;
    check(MPI_Irecv(recv_data.data(), count("send_recv", recv_data.size()), detail::mpi_datatype<T>(), source, tag,
                    comm_, &receiving),
          "MPI_Irecv");
    check(MPI_Isend(send_data.data(), count("send_recv", send_data.size()), detail::mpi_datatype<T>(), dest, tag, comm_,
                    &sending),
          "MPI_Isend");
    const MPI_Status status = complete(receiving, "send_recv");
    complete(sending, "send_recv");
    check_received("send_recv", status, recv_data.size(), detail::mpi_datatype<T>());
  }

  void barrier() {
    MPI_Request request = MPI_REQUEST_NULL;
    check(MPI_Ibarrier(comm_, &request), "MPI_Ibarrier");
    complete(request, "barrier");
  }

  MpiCommunicator split(int color, int key) {
    VERL_CHECK_ARG(color >= 0, "split: color: expected a non-negative colour, got {}", color);
    MPI_Comm sub = MPI_COMM_NULL;
    check(MPI_Comm_split(comm_, color, key, &sub), "MPI_Comm_split");
    return MpiCommunicator(sub);
  }

  /// split() where a rank may stay out (member = false, MPI_UNDEFINED): the members get their
  /// communicator, the others nullopt. Collective over this communicator.
  std::optional<MpiCommunicator> split_members(bool member, int key) {
    MPI_Comm sub = MPI_COMM_NULL;
    check(MPI_Comm_split(comm_, member ? 0 : MPI_UNDEFINED, key, &sub), "MPI_Comm_split");
    if (sub == MPI_COMM_NULL) return std::nullopt;
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
    // After a timeout an operation is still pending on it: freeing could wait for the missing rank.
    if (!finalized && !timed_out_) MPI_Comm_free(&comm_);
    comm_ = MPI_COMM_NULL;
  }

  /// Waits for `request` (an operation this communicator started), within the timeout if one is
  /// set. Polls with MPI_Test: MPI has no timed wait.
  MPI_Status complete(MPI_Request& request, std::string_view call) {
    MPI_Status status{};
    if (!timeout_) {
      check(MPI_Wait(&request, &status), call);
      return status;
    }
    const auto start = std::chrono::steady_clock::now();
    for (std::int64_t polls = 0;; ++polls) {
      int done = 0;
      check(MPI_Test(&request, &done, &status), call);
      if (done) return status;
      const auto waited = std::chrono::steady_clock::now() - start;
      if (waited > *timeout_) {
        timed_out_ = true;
        throw CommunicatorError(fmt::format(
            "{} on rank {} of {}: the other ranks did not answer within {} s (the collective timeout, verl's "
            "actor_rollout_ref.nccl_timeout); a rank has stopped, is stuck, or failed",
            call, rank_, size_, std::chrono::duration<double>(*timeout_).count()));
      }
      // Spin briefly for fast collectives, then sleep so that a long wait costs no CPU.
      if (polls > 1000) std::this_thread::sleep_for(std::chrono::microseconds(polls > 100000 ? 1000 : 50));
    }
  }

  void check(int rc, std::string_view call) const {
    if (timed_out_) {
      throw CommunicatorError(
          fmt::format("{} on rank {} of {}: an earlier operation of this communicator timed out; it cannot be used again",
                      call, rank_, size_));
    }
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
  std::optional<std::chrono::milliseconds> timeout_;
  bool timed_out_ = false;
  std::vector<int> counts_, displacements_;
};

static_assert(Communicator<MpiCommunicator> && GathersInPlace<MpiCommunicator> && ReduceScattersInPlace<MpiCommunicator>);

}  // namespace verl::parallel
