// The NCCL communicator: the Communicator concept on device buffers. Its unique id is created
// by rank 0 and broadcast over MPI, so the ranks of an MpiCommunicator become one NCCL clique,
// one GPU each. Every operation is enqueued on the communicator's CUDA stream and returns
// without waiting (NCCL's semantics): call synchronize() before reading results on the host.
// Failures become CommunicatorError naming the NCCL or CUDA call and the rank.
//
// Include from translation units compiled by nvcc and linked with NCCL, CUDA and MPI.
#pragma once

#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>
#include <fmt/format.h>

#include <cstdint>
#include <span>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "verl/core/error.hpp"
#include "verl/parallel/communicator.hpp"
#include "verl/parallel/mpi_communicator.hpp"

namespace verl::parallel {

namespace detail {

template <CommElement T>
ncclDataType_t nccl_datatype() noexcept {
  if constexpr (std::same_as<T, float>) return ncclFloat32;
  else if constexpr (std::same_as<T, double>) return ncclFloat64;
  else if constexpr (std::same_as<T, std::int32_t>) return ncclInt32;
  else if constexpr (std::same_as<T, std::int64_t>) return ncclInt64;
  else return ncclBfloat16;  // Eigen::bfloat16 has the bits of __nv_bfloat16
}

inline ncclRedOp_t nccl_op(ReduceOp op) noexcept {
  switch (op) {
    case ReduceOp::sum: return ncclSum;
    case ReduceOp::avg: return ncclAvg;
    case ReduceOp::max: return ncclMax;
    case ReduceOp::min: return ncclMin;
  }
  return ncclSum;
}

}  // namespace detail

class NcclCommunicator {
 public:
  /// Collective over `bootstrap`: joins its ranks into an NCCL communicator on `device`, with
  /// operations enqueued on `stream` (a new non-blocking stream when null; owned then).
  static NcclCommunicator bootstrap(MpiCommunicator& bootstrap, int device, cudaStream_t stream = nullptr) {
    ncclUniqueId id{};
    if (bootstrap.rank() == 0) check_static(ncclGetUniqueId(&id), "ncclGetUniqueId", 0, bootstrap.size());
    const int rc = MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, bootstrap.native());
    if (rc != MPI_SUCCESS) {
      throw CommunicatorError(fmt::format("MPI_Bcast of the NCCL unique id failed on rank {} of {}: {}",
                                          bootstrap.rank(), bootstrap.size(), detail::mpi_error_string(rc)));
    }
    check_cuda_static(cudaSetDevice(device), "cudaSetDevice", bootstrap.rank(), bootstrap.size());
    bool owns_stream = false;
    if (stream == nullptr) {
      check_cuda_static(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags",
                        bootstrap.rank(), bootstrap.size());
      owns_stream = true;
    }
    ncclComm_t comm = nullptr;
    check_static(ncclCommInitRank(&comm, bootstrap.size(), id, bootstrap.rank()), "ncclCommInitRank", bootstrap.rank(),
                 bootstrap.size());
    return NcclCommunicator(comm, device, stream, owns_stream);
  }

  NcclCommunicator(NcclCommunicator&& other) noexcept
      : comm_(std::exchange(other.comm_, nullptr)),
        device_(other.device_),
        stream_(std::exchange(other.stream_, nullptr)),
        owns_stream_(std::exchange(other.owns_stream_, false)),
        rank_(other.rank_),
        size_(other.size_),
        scratch_(std::exchange(other.scratch_, nullptr)) {}
  NcclCommunicator& operator=(NcclCommunicator&& other) noexcept {
    if (this != &other) {
      release();
      comm_ = std::exchange(other.comm_, nullptr);
      device_ = other.device_;
      stream_ = std::exchange(other.stream_, nullptr);
      owns_stream_ = std::exchange(other.owns_stream_, false);
      rank_ = other.rank_;
      size_ = other.size_;
      scratch_ = std::exchange(other.scratch_, nullptr);
    }
    return *this;
  }
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;
  ~NcclCommunicator() { release(); }

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }
  int device() const noexcept { return device_; }
  cudaStream_t stream() const noexcept { return stream_; }
  ncclComm_t native() const noexcept { return comm_; }

  /// Waits for every enqueued operation.
  void synchronize() { check_cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"); }

  template <CommElement T>
  void all_reduce(std::span<T> data, ReduceOp op) {
    detail::check_reduce_op<T>("all_reduce", op);
    check(ncclAllReduce(data.data(), data.data(), data.size(), detail::nccl_datatype<T>(), detail::nccl_op(op), comm_,
                        stream_),
          "ncclAllReduce");
  }

  template <CommElement T>
  void all_gather(std::type_identity_t<std::span<const T>> send, std::span<T> recv) {
    detail::check_all_gather("all_gather", send, recv, size_);
    check(ncclAllGather(send.data(), recv.data(), send.size(), detail::nccl_datatype<T>(), comm_, stream_),
          "ncclAllGather");
  }

  /// NCCL has no all-gather-v: one broadcast per rank into its slot, fused in a group.
  template <CommElement T>
  void all_gather_v(std::type_identity_t<std::span<const T>> send, std::span<T> recv,
                    std::span<const std::int64_t> counts) {
    detail::check_all_gather_v("all_gather_v", send, recv, counts, rank_, size_);
    check(ncclGroupStart(), "ncclGroupStart");
    std::int64_t offset = 0;
    for (int r = 0; r < size_; ++r) {
      const auto n = static_cast<std::size_t>(counts[static_cast<std::size_t>(r)]);
      const void* from = r == rank_ ? static_cast<const void*>(send.data()) : nullptr;
      check(ncclBroadcast(from, recv.data() + offset, n, detail::nccl_datatype<T>(), r, comm_, stream_),
            "ncclBroadcast");
      offset += static_cast<std::int64_t>(n);
    }
    check(ncclGroupEnd(), "ncclGroupEnd");
  }

  /// In place: rank r's broadcast reads and writes its own slot (NCCL allows sendbuff == recvbuff).
  template <CommElement T>
  void all_gather_v_in_place(std::span<T> data, std::span<const std::int64_t> counts) {
    detail::check_all_gather_v_in_place("all_gather_v_in_place", data, counts, size_);
    check(ncclGroupStart(), "ncclGroupStart");
    std::int64_t offset = 0;
    for (int r = 0; r < size_; ++r) {
      const auto n = static_cast<std::size_t>(counts[static_cast<std::size_t>(r)]);
      check(ncclBroadcast(data.data() + offset, data.data() + offset, n, detail::nccl_datatype<T>(), r, comm_, stream_),
            "ncclBroadcast");
      offset += static_cast<std::int64_t>(n);
    }
    check(ncclGroupEnd(), "ncclGroupEnd");
  }

  template <CommElement T>
  void reduce_scatter(std::type_identity_t<std::span<const T>> send, std::span<T> recv, ReduceOp op) {
    detail::check_reduce_op<T>("reduce_scatter", op);
    detail::check_reduce_scatter("reduce_scatter", send, recv, size_);
    check(ncclReduceScatter(send.data(), recv.data(), recv.size(), detail::nccl_datatype<T>(), detail::nccl_op(op),
                            comm_, stream_),
          "ncclReduceScatter");
  }

  template <CommElement T>
  void broadcast(std::span<T> data, int root) {
    detail::check_peer("broadcast", "root", root, size_);
    check(ncclBroadcast(data.data(), data.data(), data.size(), detail::nccl_datatype<T>(), root, comm_, stream_),
          "ncclBroadcast");
  }

  /// Equal blocks to and from every rank, as grouped point-to-point calls.
  template <CommElement T>
  void all_to_all(std::type_identity_t<std::span<const T>> send, std::span<T> recv) {
    detail::check_all_to_all("all_to_all", send, recv, size_);
    const std::size_t block = send.size() / static_cast<std::size_t>(size_);
    check(ncclGroupStart(), "ncclGroupStart");
    for (int r = 0; r < size_; ++r) {
      check(ncclSend(send.data() + r * block, block, detail::nccl_datatype<T>(), r, comm_, stream_), "ncclSend");
      check(ncclRecv(recv.data() + r * block, block, detail::nccl_datatype<T>(), r, comm_, stream_), "ncclRecv");
    }
    check(ncclGroupEnd(), "ncclGroupEnd");
  }

  /// NCCL matches point-to-point calls by order, not by tag; `tag` is accepted for the concept.
  template <class T>
    requires CommElement<std::remove_const_t<T>>
  void send(std::span<T> data, int dest, int tag) {
    (void)tag;
    detail::check_peer("send", "dest", dest, size_);
    check(ncclSend(data.data(), data.size(), detail::nccl_datatype<std::remove_const_t<T>>(), dest, comm_, stream_),
          "ncclSend");
  }

  template <CommElement T>
  void recv(std::span<T> data, int source, int tag) {
    (void)tag;
    detail::check_peer("recv", "source", source, size_);
    check(ncclRecv(data.data(), data.size(), detail::nccl_datatype<T>(), source, comm_, stream_), "ncclRecv");
  }

  template <CommElement T>
  void send_recv(std::type_identity_t<std::span<const T>> send_data, int dest, std::span<T> recv_data, int source,
                 int tag) {
    (void)tag;
    detail::check_peer("send_recv", "dest", dest, size_);
    detail::check_peer("send_recv", "source", source, size_);
    check(ncclGroupStart(), "ncclGroupStart");
    check(ncclSend(send_data.data(), send_data.size(), detail::nccl_datatype<T>(), dest, comm_, stream_), "ncclSend");
    check(ncclRecv(recv_data.data(), recv_data.size(), detail::nccl_datatype<T>(), source, comm_, stream_), "ncclRecv");
    check(ncclGroupEnd(), "ncclGroupEnd");
  }

  /// Every rank reaches this point and its enqueued work is done: an all-reduce of one
  /// integer, then a stream synchronisation.
  void barrier() {
    if (scratch_ == nullptr) check_cuda(cudaMalloc(&scratch_, sizeof(std::int32_t)), "cudaMalloc");
    check(ncclAllReduce(scratch_, scratch_, 1, ncclInt32, ncclSum, comm_, stream_), "ncclAllReduce");
    synchronize();
  }

  /// Collective: ranks with the same colour form a new communicator ordered by key (same
  /// device and stream).
  NcclCommunicator split(int color, int key) {
    VERL_CHECK_ARG(color >= 0, "split: color: expected a non-negative colour, got {}", color);
    ncclComm_t sub = nullptr;
    check(ncclCommSplit(comm_, color, key, &sub, nullptr), "ncclCommSplit");
    return NcclCommunicator(sub, device_, stream_, false);
  }

 private:
  NcclCommunicator(ncclComm_t comm, int device, cudaStream_t stream, bool owns_stream)
      : comm_(comm), device_(device), stream_(stream), owns_stream_(owns_stream) {
    check(ncclCommUserRank(comm_, &rank_), "ncclCommUserRank");
    check(ncclCommCount(comm_, &size_), "ncclCommCount");
  }

  void release() noexcept {
    if (scratch_ != nullptr) cudaFree(scratch_);
    if (comm_ != nullptr) ncclCommDestroy(comm_);
    if (owns_stream_ && stream_ != nullptr) cudaStreamDestroy(stream_);
    scratch_ = nullptr;
    comm_ = nullptr;
    stream_ = nullptr;
    owns_stream_ = false;
  }

  static void check_static(ncclResult_t rc, std::string_view call, int rank, int size) {
    if (rc == ncclSuccess) return;
    throw CommunicatorError(fmt::format("{} failed on rank {} of {}: {}", call, rank, size, ncclGetErrorString(rc)));
  }
  static void check_cuda_static(cudaError_t rc, std::string_view call, int rank, int size) {
    if (rc == cudaSuccess) return;
    throw CommunicatorError(fmt::format("{} failed on rank {} of {}: {}", call, rank, size, cudaGetErrorString(rc)));
  }
  void check(ncclResult_t rc, std::string_view call) const {
    if (rc == ncclSuccess) return;
    const char* last = comm_ != nullptr ? ncclGetLastError(comm_) : "";
    throw CommunicatorError(fmt::format("{} failed on rank {} of {}: {}{}{}", call, rank_, size_, ncclGetErrorString(rc),
                                        last && *last ? ": " : "", last ? last : ""));
  }
  void check_cuda(cudaError_t rc, std::string_view call) const { check_cuda_static(rc, call, rank_, size_); }

  ncclComm_t comm_ = nullptr;
  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  bool owns_stream_ = false;
  int rank_ = 0;
  int size_ = 1;
  std::int32_t* scratch_ = nullptr;
};

static_assert(Communicator<NcclCommunicator>);

}  // namespace verl::parallel
