// ProcessGroup: any Communicator behind one type. Code that must not depend on a backend's headers
// (the data-parallel workers, which build with or without MPI) holds a ProcessGroup, and whoever
// creates it picks the backend: a SelfCommunicator in one process, the MPI group the HybridFlow
// runtime made for a worker group. It is itself a Communicator, so the collective algorithms
// written once for the concept (gradient averaging, metric reduction) take it as they are.
//
//   parallel::ProcessGroup one;                                        // a group of one process
//   parallel::ProcessGroup group = parallel::ProcessGroup::borrowing(mpi_group);  // mpi_group outlives it
//   group.all_reduce(std::span<float>(grads), parallel::ReduceOp::sum);
//
// The cost is one virtual call per collective and a variant visit: nothing per element.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <type_traits>
#include <utility>
#include <variant>

#include "verl/core/error.hpp"
#include "verl/parallel/communicator.hpp"
#include "verl/parallel/self_communicator.hpp"

namespace verl::parallel {

class ProcessGroup {
 public:
  /// A group of one process (SelfCommunicator).
  ProcessGroup() : ProcessGroup(owning(SelfCommunicator{})) {}

  /// Takes `comm` over.
  template <Communicator C>
  static ProcessGroup owning(C comm) {
    return ProcessGroup(std::make_unique<Model<C>>(std::move(comm)));
  }
  /// Uses `comm`, which must outlive the group (and the groups split from it are owning).
  template <Communicator C>
  static ProcessGroup borrowing(C& comm) {
    return ProcessGroup(std::make_unique<Model<C&>>(comm));
  }

  [[nodiscard]] int rank() const { return impl_->rank(); }
  [[nodiscard]] int size() const { return impl_->size(); }

  template <CommElement T>
  void all_reduce(std::span<T> data, ReduceOp op) {
    impl_->all_reduce(Mutable(data), op);
  }
  template <CommElement T>
  void all_gather(std::type_identity_t<std::span<const T>> send, std::span<T> recv) {
    impl_->all_gather(Const(send), Mutable(recv));
  }
  template <CommElement T>
  void all_gather_v(std::type_identity_t<std::span<const T>> send, std::span<T> recv, std::span<const std::int64_t> counts) {
    impl_->all_gather_v(Const(send), Mutable(recv), counts);
  }
  template <CommElement T>
  void reduce_scatter(std::type_identity_t<std::span<const T>> send, std::span<T> recv, ReduceOp op) {
    impl_->reduce_scatter(Const(send), Mutable(recv), op);
  }
  template <CommElement T>
  void broadcast(std::span<T> data, int root) {
    impl_->broadcast(Mutable(data), root);
  }
  template <CommElement T>
  void all_to_all(std::type_identity_t<std::span<const T>> send, std::span<T> recv) {
    impl_->all_to_all(Const(send), Mutable(recv));
  }
  template <class T>
    requires CommElement<std::remove_const_t<T>>
  void send(std::span<T> data, int dest, int tag) {
    impl_->send(Const(std::span<const std::remove_const_t<T>>(data)), dest, tag);
  }
  template <CommElement T>
  void recv(std::span<T> data, int source, int tag) {
    impl_->recv(Mutable(data), source, tag);
  }
  template <CommElement T>
  void send_recv(std::type_identity_t<std::span<const T>> send, int dest, std::span<T> recv, int source, int tag) {
    impl_->send_recv(Const(send), dest, Mutable(recv), source, tag);
  }
  void barrier() { impl_->barrier(); }
  /// Collective: the ranks passing the same colour form a new (owning) group, ordered by key.
  [[nodiscard]] ProcessGroup split(int color, int key) { return ProcessGroup(impl_->split(color, key)); }

 private:
  using Mutable = std::variant<std::span<float>, std::span<double>, std::span<std::int32_t>, std::span<std::int64_t>,
                               std::span<bf16>>;
  using Const = std::variant<std::span<const float>, std::span<const double>, std::span<const std::int32_t>,
                             std::span<const std::int64_t>, std::span<const bf16>>;

  struct Interface {
    virtual ~Interface() = default;
    [[nodiscard]] virtual int rank() const = 0;
    [[nodiscard]] virtual int size() const = 0;
    virtual void all_reduce(Mutable data, ReduceOp op) = 0;
    virtual void all_gather(Const send, Mutable recv) = 0;
    virtual void all_gather_v(Const send, Mutable recv, std::span<const std::int64_t> counts) = 0;
    virtual void reduce_scatter(Const send, Mutable recv, ReduceOp op) = 0;
    virtual void broadcast(Mutable data, int root) = 0;
    virtual void all_to_all(Const send, Mutable recv) = 0;
    virtual void send(Const data, int dest, int tag) = 0;
    virtual void recv(Mutable data, int source, int tag) = 0;
    virtual void send_recv(Const send, int dest, Mutable recv, int source, int tag) = 0;
    virtual void barrier() = 0;
    virtual std::unique_ptr<Interface> split(int color, int key) = 0;
  };

  /// Calls f(send, recv) when both spans hold the same element type (the typed front end
  /// guarantees it).
  template <class F>
  static void with_pair(const Const& send, const Mutable& recv, F&& f) {
    std::visit(
        [&](auto s, auto r) {
          if constexpr (std::is_same_v<std::remove_const_t<typename decltype(s)::element_type>,
                                       typename decltype(r)::element_type>) {
            f(s, r);
          } else {
            ::verl::detail::throw_invalid_argument("ProcessGroup: send and receive buffers of different element types");
          }
        },
        send, recv);
  }

  /// C is a communicator (owned) or a reference to one (borrowed).
  template <class C>
  struct Model final : Interface {
    explicit Model(C c) : comm(std::forward<C>(c)) {}
    [[nodiscard]] int rank() const override { return comm.rank(); }
    [[nodiscard]] int size() const override { return comm.size(); }
    void all_reduce(Mutable data, ReduceOp op) override {
      std::visit([&](auto d) { comm.all_reduce(d, op); }, data);
    }
    void all_gather(Const send, Mutable recv) override {
      with_pair(send, recv, [&](auto s, auto r) { comm.all_gather(s, r); });
    }
    void all_gather_v(Const send, Mutable recv, std::span<const std::int64_t> counts) override {
      with_pair(send, recv, [&](auto s, auto r) { comm.all_gather_v(s, r, counts); });
    }
    void reduce_scatter(Const send, Mutable recv, ReduceOp op) override {
      with_pair(send, recv, [&](auto s, auto r) { comm.reduce_scatter(s, r, op); });
    }
    void broadcast(Mutable data, int root) override {
      std::visit([&](auto d) { comm.broadcast(d, root); }, data);
    }
    void all_to_all(Const send, Mutable recv) override {
      with_pair(send, recv, [&](auto s, auto r) { comm.all_to_all(s, r); });
    }
    void send(Const data, int dest, int tag) override {
      std::visit([&](auto d) { comm.send(d, dest, tag); }, data);
    }
    void recv(Mutable data, int source, int tag) override {
      std::visit([&](auto d) { comm.recv(d, source, tag); }, data);
    }
    void send_recv(Const send, int dest, Mutable recv, int source, int tag) override {
      with_pair(send, recv, [&](auto s, auto r) { comm.send_recv(s, dest, r, source, tag); });
    }
    void barrier() override { comm.barrier(); }
    std::unique_ptr<Interface> split(int color, int key) override {
      using Owned = std::remove_cvref_t<C>;
      return std::make_unique<Model<Owned>>(comm.split(color, key));
    }
    C comm;
  };

  explicit ProcessGroup(std::unique_ptr<Interface> impl) : impl_(std::move(impl)) {}

  std::unique_ptr<Interface> impl_;
};

static_assert(Communicator<ProcessGroup>);

}  // namespace verl::parallel
