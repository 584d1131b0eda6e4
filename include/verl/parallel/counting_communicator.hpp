// CountingCommunicator<C>: any communicator, with a count of the bytes this rank received in its
// collectives, taken in the calls themselves as they happen. The 3D-HybridEngine's reshard
// reports what each rank actually received during the all-gathers (issue 26 wants the
// communicator's count, not the plan's figure copied), and a plan's comm_bytes_per_rank is
// checked against it.
//
// What counts as received, per call (element bytes):
//   all_gather / all_gather_v   recv minus this rank's own block (it does not travel)
//   all_gather_v_in_place       the same: the data minus this rank's own slot
//   broadcast                   the buffer, on every rank but the root
//   all_to_all                  recv minus this rank's own block
//   recv / send_recv            the receive buffer
//   all_reduce / reduce_scatter counted apart (reduced_bytes): what a reduction moves depends on
//                               the library's algorithm (ring, tree, ...), so no "received" figure
//                               is claimed for it.
// Sub-communicators made by split() count on their own.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <type_traits>
#include <utility>

#include "verl/parallel/communicator.hpp"

namespace verl::parallel {

template <Communicator C>
class CountingCommunicator {
 public:
  explicit CountingCommunicator(C inner) : inner_(std::move(inner)) {}

  [[nodiscard]] int rank() const { return inner_.rank(); }
  [[nodiscard]] int size() const { return inner_.size(); }
  [[nodiscard]] C& inner() { return inner_; }

  /// Bytes received by the gathering and point-to-point calls since the last reset.
  [[nodiscard]] std::int64_t received_bytes() const { return received_; }
  /// Bytes handed to all_reduce / reduce_scatter since the last reset (this rank's buffers).
  [[nodiscard]] std::int64_t reduced_bytes() const { return reduced_; }
  void reset_counts() { received_ = reduced_ = 0; }

  template <CommElement T>
  void all_reduce(std::span<T> data, ReduceOp op) {
    reduced_ += bytes(data.size(), sizeof(T));
    inner_.all_reduce(data, op);
  }
  template <CommElement T>
  void all_gather(std::type_identity_t<std::span<const T>> send, std::span<T> recv) {
    inner_.template all_gather<T>(send, recv);
    received_ += bytes(recv.size() - send.size(), sizeof(T));
  }
  template <CommElement T>
  void all_gather_v(std::type_identity_t<std::span<const T>> send, std::span<T> recv, std::span<const std::int64_t> counts) {
    inner_.template all_gather_v<T>(send, recv, counts);
    received_ += bytes(recv.size() - send.size(), sizeof(T));
  }
  /// Received: every slot but this rank's own. Only where the inner communicator gathers in place.
  template <CommElement T>
    requires GathersInPlace<C>
  void all_gather_v_in_place(std::span<T> data, std::span<const std::int64_t> counts) {
    inner_.template all_gather_v_in_place<T>(data, counts);
    received_ += bytes(data.size() - static_cast<std::size_t>(counts[static_cast<std::size_t>(rank())]), sizeof(T));
  }
  template <CommElement T>
  void reduce_scatter(std::type_identity_t<std::span<const T>> send, std::span<T> recv, ReduceOp op) {
    reduced_ += bytes(send.size(), sizeof(T));
    inner_.template reduce_scatter<T>(send, recv, op);
  }
  template <CommElement T>
  void broadcast(std::span<T> data, int root) {
    inner_.broadcast(data, root);
    if (rank() != root) received_ += bytes(data.size(), sizeof(T));
  }
  template <CommElement T>
  void all_to_all(std::type_identity_t<std::span<const T>> send, std::span<T> recv) {
    inner_.template all_to_all<T>(send, recv);
    received_ += bytes(recv.size() - recv.size() / static_cast<std::size_t>(size()), sizeof(T));
  }
  template <class T>
    requires CommElement<std::remove_const_t<T>>
  void send(std::span<T> data, int dest, int tag) {
    inner_.send(data, dest, tag);
  }
  template <CommElement T>
  void recv(std::span<T> data, int source, int tag) {
    inner_.recv(data, source, tag);
    received_ += bytes(data.size(), sizeof(T));
  }
  template <CommElement T>
  void send_recv(std::type_identity_t<std::span<const T>> send_data, int dest, std::span<T> recv_data, int source, int tag) {
    inner_.template send_recv<T>(send_data, dest, recv_data, source, tag);
    received_ += bytes(recv_data.size(), sizeof(T));
  }
  void barrier() { inner_.barrier(); }

  CountingCommunicator split(int color, int key) { return CountingCommunicator(inner_.split(color, key)); }

 private:
  static std::int64_t bytes(std::size_t elements, std::size_t element_size) {
    return static_cast<std::int64_t>(elements * element_size);
  }

  C inner_;
  std::int64_t received_ = 0;
  std::int64_t reduced_ = 0;
};

}  // namespace verl::parallel
