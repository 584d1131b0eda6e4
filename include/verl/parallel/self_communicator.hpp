// The one-process communicator: every collective over a single rank is a copy (or nothing),
// so code written against the Communicator concept runs unchanged without MPI.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <deque>
#include <span>
#include <type_traits>
#include <vector>

#include "verl/core/error.hpp"
#include "verl/parallel/communicator.hpp"

namespace verl::parallel {

class SelfCommunicator {
 public:
  int rank() const noexcept { return 0; }
  int size() const noexcept { return 1; }

  /// Reducing one value with sum, avg, max or min gives the value.
  template <CommElement T>
  void all_reduce(std::span<T> data, ReduceOp op) {
    detail::check_reduce_op<T>("all_reduce", op);
    (void)data;
  }
  template <CommElement T>
  void all_gather(std::type_identity_t<std::span<const T>> send, std::span<T> recv) {
    detail::check_all_gather("all_gather", send, recv, 1);
    copy(send, recv);
  }
  template <CommElement T>
  void all_gather_v(std::type_identity_t<std::span<const T>> send, std::span<T> recv, std::span<const std::int64_t> counts) {
    detail::check_all_gather_v("all_gather_v", send, recv, counts, 0, 1);
    copy(send, recv);
  }
  template <CommElement T>
  void all_gather_v_in_place(std::span<T> data, std::span<const std::int64_t> counts) {
    detail::check_all_gather_v_in_place("all_gather_v_in_place", data, counts, 1);
  }
  template <CommElement T>
  void reduce_scatter(std::type_identity_t<std::span<const T>> send, std::span<T> recv, ReduceOp op) {
    detail::check_reduce_op<T>("reduce_scatter", op);
    detail::check_reduce_scatter("reduce_scatter", send, recv, 1);
    copy(send, recv);
  }
  template <CommElement T>
  void reduce_scatter_in_place(std::span<T> data, ReduceOp op) {
    detail::check_reduce_op<T>("reduce_scatter_in_place", op);
    detail::check_reduce_scatter_in_place("reduce_scatter_in_place", data, 1);
  }
  template <CommElement T>
  void broadcast(std::span<T> data, int root) {
    detail::check_peer("broadcast", "root", root, 1);
    (void)data;
  }
  template <CommElement T>
  void all_to_all(std::type_identity_t<std::span<const T>> send, std::span<T> recv) {
    detail::check_all_to_all("all_to_all", send, recv, 1);
    copy(send, recv);
  }
  /// A message to oneself waits in a mailbox until the matching recv.
  template <class T>
    requires CommElement<std::remove_const_t<T>>
  void send(std::span<T> data, int dest, int tag) {
    detail::check_peer("send", "dest", dest, 1);
    std::vector<std::byte> bytes(data.size_bytes());
    if (!data.empty()) std::memcpy(bytes.data(), data.data(), data.size_bytes());
    mailbox_.push_back({tag, std::move(bytes)});
  }
  template <CommElement T>
  void recv(std::span<T> data, int source, int tag) {
    detail::check_peer("recv", "source", source, 1);
    const auto it = std::find_if(mailbox_.begin(), mailbox_.end(), [&](const Message& m) { return m.tag == tag; });
    VERL_CHECK_ARG(it != mailbox_.end(), "recv: expected a message with tag {} sent before, got none", tag);
    VERL_CHECK_ARG(it->bytes.size() == data.size_bytes(), "recv: data: expected {} bytes (the message), got {}",
                   it->bytes.size(), data.size_bytes());
    if (!data.empty()) std::memcpy(data.data(), it->bytes.data(), data.size_bytes());
    mailbox_.erase(it);
  }
  template <CommElement T>
  void send_recv(std::type_identity_t<std::span<const T>> send_data, int dest, std::span<T> recv_data, int source, int tag) {
    send(send_data, dest, tag);
    recv(recv_data, source, tag);
  }
  void barrier() noexcept {}
  SelfCommunicator split(int color, int key) const {
    (void)color;
    (void)key;
    return {};
  }

 private:
  template <class T>
  static void copy(std::span<const T> from, std::span<T> to) {
    std::copy(from.begin(), from.end(), to.begin());
  }

  struct Message {
    int tag;
    std::vector<std::byte> bytes;
  };
  std::deque<Message> mailbox_;
};

static_assert(Communicator<SelfCommunicator> && GathersInPlace<SelfCommunicator> && ReduceScattersInPlace<SelfCommunicator>);

}  // namespace verl::parallel
