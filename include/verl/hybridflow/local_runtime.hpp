// LocalRuntime: the HybridFlow runtime's interface in one process, without MPI. A controller
// program written against a runtime (spawn groups, call their registered methods, get futures)
// runs unchanged on it: every pool is the one process, every group has one worker built in place,
// a call runs the method at once and its future holds the result. The results have the shapes the
// MPI runtime's dispatch modes give with one rank (one element per rank for ONE_TO_ALL, ALL_TO_ALL,
// DP_COMPUTE and DP_COMPUTE_METRIC; the value for RANK_ZERO; the DataProto for the DataProto
// modes). This is what the in-process PPOTrainer runs PPOController on.
//
//   hybridflow::LocalRuntime runtime;
//   auto actor = runtime.spawn<ActorWorker>(runtime.whole_world(), std::nullopt, models);  // W(context, models)
//   data::DataProto out = actor.call<&ActorWorker::compute_log_prob>(batch).get();
//   actor.worker();   // the worker object itself, in process
//
// A method's exception propagates from call() itself (nothing runs elsewhere to outlive it).
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "verl/config.hpp"
#include "verl/core/error.hpp"
#include "verl/data/data_proto.hpp"
#include "verl/hybridflow/dispatch.hpp"
#include "verl/hybridflow/resource_pool.hpp"
#include "verl/hybridflow/worker.hpp"
#include "verl/parallel/process_group.hpp"

namespace verl::hybridflow {

/// A call's result, already computed.
template <class T>
class LocalFuture {
 public:
  using value_type = T;
  LocalFuture(std::string label, T value) : label_(std::move(label)), value_(std::move(value)) {}
  T get() {
    VERL_CHECK_ARG(value_.has_value(), "Future::get: the result of {} was already taken", label_);
    T out = std::move(*value_);
    value_.reset();
    return out;
  }
  [[nodiscard]] bool ready() const { return value_.has_value(); }
  [[nodiscard]] const std::string& label() const { return label_; }

 private:
  std::string label_;
  std::optional<T> value_;
};

template <>
class LocalFuture<void> {
 public:
  using value_type = void;
  explicit LocalFuture(std::string label) : label_(std::move(label)) {}
  void get() {
    VERL_CHECK_ARG(!taken_, "Future::get: the result of {} was already taken", label_);
    taken_ = true;
  }
  [[nodiscard]] bool ready() const { return !taken_; }
  [[nodiscard]] const std::string& label() const { return label_; }

 private:
  std::string label_;
  bool taken_ = false;
};

/// One worker of type W in this process, as a group of one.
template <Worker W>
class LocalGroup {
 public:
  template <class... Args>
  LocalGroup(ResourcePool pool, std::optional<GroupMesh> mesh, Args&&... args)
      : pool_(std::move(pool)), mesh_(std::move(mesh)), state_(std::make_unique<State>()) {
    state_->context.mesh = mesh_;
    state_->context.process_group = &state_->process_group;
    state_->worker.emplace(state_->context, std::forward<Args>(args)...);
  }

  [[nodiscard]] int world_size() const { return 1; }
  [[nodiscard]] const ResourcePool& pool() const { return pool_; }
  [[nodiscard]] const std::optional<GroupMesh>& mesh() const { return mesh_; }
  [[nodiscard]] Index dp_size() const { return 1; }

  /// The worker object (in process: its models and optimizers can be inspected).
  [[nodiscard]] W& worker() { return *state_->worker; }
  [[nodiscard]] const W& worker() const { return *state_->worker; }

  /// Calls W's member function F by its registered dispatch mode, now.
  template <auto F, class... Args>
  auto call(Args&&... args) {
    if constexpr (require_registered<W, F>()) {
      using M = method_of<W, F>;
      return dispatch<M>(std::forward<Args>(args)...);
    }
  }

 private:
  struct State {
    WorkerContext context;
    parallel::ProcessGroup process_group;  ///< a group of one
    std::optional<W> worker;
  };

  template <class M>
  static std::string label() {
    return fmt::format("{}.{}", W::name, M::name);
  }

  /// Runs the method on `args` and wraps its result (R, or one element per rank) in a future.
  template <class M, bool PerRank, class... Args>
  auto run(Args&&... args) {
    using R = typename M::result;
    W& worker = *state_->worker;
    if constexpr (std::is_void_v<R>) {
      std::invoke(M::pointer, worker, std::forward<Args>(args)...);
      return LocalFuture<void>(label<M>());
    } else if constexpr (PerRank) {
      std::vector<R> out;
      out.push_back(std::invoke(M::pointer, worker, std::forward<Args>(args)...));
      return LocalFuture<std::vector<R>>(label<M>(), std::move(out));
    } else {
      return LocalFuture<R>(label<M>(), std::invoke(M::pointer, worker, std::forward<Args>(args)...));
    }
  }

  template <class M, class... Args>
  auto dispatch(Args&&... args) {
    constexpr auto mode = M::mode;
    if constexpr (mode == Dispatch::rank_zero || concatenates_results(mode)) {
      return run<M, false>(std::forward<Args>(args)...);
    } else if constexpr (takes_one_argument_per_rank(mode)) {
      // One list per parameter, one element per rank: here, one rank.
      const auto check = [&](std::size_t length) {
        VERL_CHECK_ARG(length == 1, "{}: {} needs one element per rank (1), got {}", label<M>(), to_string(mode), length);
      };
      (check(std::size(args)), ...);
      return run<M, true>(args[0]...);
    } else {
      return run<M, true>(std::forward<Args>(args)...);  // ONE_TO_ALL, DP_COMPUTE_METRIC
    }
  }

  ResourcePool pool_;
  std::optional<GroupMesh> mesh_;
  std::unique_ptr<State> state_;  ///< stable: the worker keeps a reference to its context
};

/// The runtime of one process: every pool is rank 0.
class LocalRuntime {
 public:
  template <Worker W>
  using group_type = LocalGroup<W>;
  template <class T>
  using future_type = LocalFuture<T>;

  [[nodiscard]] int rank() const { return 0; }
  [[nodiscard]] int world_size() const { return 1; }
  [[nodiscard]] bool is_controller() const { return true; }
  [[nodiscard]] ResourcePool pool(int first, int count) const { return ResourcePool::range(first, count, world_size()); }
  [[nodiscard]] ResourcePool whole_world() const { return ResourcePool::range(0, 1, 1); }

  /// Builds W(context, args...) in this process. The pool must be this process (rank 0) and the
  /// mesh, if any, a single rank.
  template <Worker W, class... Args>
  LocalGroup<W> spawn(const ResourcePool& pool, std::optional<GroupMesh> mesh = std::nullopt, Args&&... args) {
    static_assert(check_worker<W>());
    pool.require_within(world_size());
    if (mesh) {
      VERL_CHECK_ARG(mesh->world_size() == 1, "spawn {}: the in-process runtime has one rank; the mesh {} needs {}", W::name,
                     mesh->to_string(), mesh->world_size());
    }
    return LocalGroup<W>(pool, std::move(mesh), std::forward<Args>(args)...);
  }
};

}  // namespace verl::hybridflow
