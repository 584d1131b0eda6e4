// The HybridFlow runtime: a single controller that calls worker groups (HybridFlow §4, verl's
// single_controller). Every MPI rank stands for one device and serves worker calls; rank 0 also
// runs the controller program, in its main thread, beside its own server thread (as verl's
// driver runs beside its workers, taking no device). The other ranks never run the algorithm.
//
//   int main(int argc, char** argv) {
//     return hybridflow::run_controller<ActorWorker, CriticWorker>(argc, argv, [](auto& runtime) {
//       auto actor = runtime.template spawn<ActorWorker>(runtime.pool(0, 2));   // ranks 0-1
//       auto critic = runtime.template spawn<CriticWorker>(runtime.pool(2, 2));  // ranks 2-3
//       auto log_probs = actor.template call<&ActorWorker::compute_log_prob>(batch);  // a future
//       auto values = critic.template call<&CriticWorker::compute_values>(batch);     // overlaps
//       batch.union_with(log_probs.get()).union_with(values.get());
//     });
//   }
//
// A call sends each rank of the group its share of the arguments (by the method's dispatch mode,
// dispatch.hpp) and returns a Future at once; calls on disjoint pools run at the same time, and
// calls reaching one rank run there in the order they were made (colocated workers share the
// rank's time, as verl's colocated worker classes share a process). Results come back over MPI
// and are collected by the mode.
//
// Failure: an exception in a worker method (or constructor) comes back to the controller as a
// WorkerError naming the rank, the worker and the method, raised by whatever the controller is
// waiting on next (not only the failed call's future). run_controller then ends the whole job
// (MPI_Abort, the one abort path of the library, parallel::abort_every_rank): ranks blocked in a
// collective with the failed one are stopped too, within seconds.
#pragma once

#include <mpi.h>
#include <fmt/format.h>
#if defined(__linux__)
#include <sys/prctl.h>
#endif

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <future>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "verl/core/error.hpp"
#include "verl/core/type_list.hpp"
#include "verl/data/data_proto.hpp"
#include "verl/hybridflow/dispatch.hpp"
#include "verl/hybridflow/resource_pool.hpp"
#include "verl/hybridflow/wire.hpp"
#include "verl/hybridflow/worker.hpp"
#include "verl/parallel/mpi_communicator.hpp"

namespace verl::hybridflow {

/// A worker method (or constructor) failed on a rank, or a rank did not answer in time.
class WorkerError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct RuntimeOptions {
  /// The longest the controller waits for one call's answers; past it the wait is a WorkerError
  /// (and the job ends) instead of a hang on a stuck rank. nullopt: no limit.
  std::optional<std::chrono::milliseconds> call_timeout{};
};

namespace detail {

enum class Command : std::uint8_t { spawn = 1, call = 2, destroy = 3, shutdown = 4 };
enum class ReplyStatus : std::uint8_t { ok = 0, error = 1 };

inline constexpr int command_tag = 7101;
inline constexpr int reply_tag = 7102;

/// Receives the next message with `tag` (any source when source < 0) without spinning a core:
/// MPI_Probe busy-waits in Open MPI, and so would sched_yield loops, which on a machine with fewer
/// cores than busy threads hand the core to another poller for a whole time slice (milliseconds).
/// Polls a few times, then sleeps, 5 us at first and doubling up to 1 ms (with the thread's timer
/// slack lowered so that a short sleep stays short): a message that comes soon is noticed within
/// about as long as it took, one after a long computation within 1 ms. The cap was 100 us: on a
/// machine with fewer cores than busy threads, the controller's and idle servers' ten thousand
/// wake-ups a second took the core and the MPI lock from the rank computing (a two-rank PPO step on
/// two cores, 81 ms against 65 ms with the 1 ms cap; bench/RESULTS.md). `keep_waiting` (when given) is asked
/// between polls and may throw to end the wait.
inline Bytes receive_bytes(MPI_Comm comm, int source, int tag, int& from, const std::function<void()>& keep_waiting = {}) {
#if defined(__linux__)
  thread_local const bool slack_lowered = [] { return ::prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL) == 0; }();
  (void)slack_lowered;
#endif
  MPI_Status status{};
  auto nap = std::chrono::microseconds(5);
  for (std::int64_t polls = 0;; ++polls) {
    int arrived = 0;
    MPI_Iprobe(source < 0 ? MPI_ANY_SOURCE : source, tag, comm, &arrived, &status);
    if (arrived) break;
    if (keep_waiting) keep_waiting();
    if (polls < 16) continue;
    std::this_thread::sleep_for(nap);
    nap = std::min(nap * 2, std::chrono::microseconds(1000));
  }
  int count = 0;
  MPI_Get_count(&status, MPI_BYTE, &count);
  Bytes bytes(static_cast<std::size_t>(count));
  MPI_Recv(bytes.data(), count, MPI_BYTE, status.MPI_SOURCE, tag, comm, MPI_STATUS_IGNORE);
  from = status.MPI_SOURCE;
  return bytes;
}

/// Non-blocking sends whose buffers live until MPI is done with them.
class Outbox {
 public:
  void post(MPI_Comm comm, int dest, int tag, std::shared_ptr<const Bytes> bytes) {
    VERL_CHECK_ARG(bytes->size() <= static_cast<std::size_t>(std::numeric_limits<int>::max()),
                   "message to rank {}: expected at most {} bytes, got {}", dest, std::numeric_limits<int>::max(),
                   bytes->size());
    pending_.push_back({MPI_REQUEST_NULL, std::move(bytes)});
    auto& entry = pending_.back();
    MPI_Isend(entry.bytes->data(), static_cast<int>(entry.bytes->size()), MPI_BYTE, dest, tag, comm, &entry.request);
  }
  /// Releases the buffers of completed sends.
  void reap() {
    for (auto it = pending_.begin(); it != pending_.end();) {
      int done = 0;
      MPI_Test(&it->request, &done, MPI_STATUS_IGNORE);
      it = done ? pending_.erase(it) : std::next(it);
    }
  }
  /// Waits for every send (before shutting down).
  void flush() {
    for (auto& entry : pending_) MPI_Wait(&entry.request, MPI_STATUS_IGNORE);
    pending_.clear();
  }
  [[nodiscard]] bool empty() const { return pending_.empty(); }

 private:
  struct Entry {
    MPI_Request request;
    std::shared_ptr<const Bytes> bytes;
  };
  std::list<Entry> pending_;  // a list: Isend holds the request's address
};

/// A call in flight: who must answer, and what came back.
struct PendingCall {
  std::uint64_t id = 0;
  std::string label;                     ///< Worker.method, for messages
  std::vector<int> ranks;                ///< global ranks that answer, in group order
  /// A rank's answer: the whole message and where its payload starts (kept as received).
  struct Reply {
    Bytes message;
    std::size_t offset = 0;
    [[nodiscard]] std::span<const std::byte> payload() const { return std::span(message).subspan(offset); }
  };
  std::map<int, Reply> replies;          ///< by global rank
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
  [[nodiscard]] bool complete() const { return replies.size() == ranks.size(); }
};

/// A live worker on a server rank, with its type erased.
struct LiveWorker {
  std::shared_ptr<void> object;
  /// Reads the arguments, calls the method, writes its result (if any) after what `out` holds.
  void (*invoke)(void* worker, std::size_t method, WireReader& arguments, WireWriter& out) = nullptr;
  std::string_view (*method_name)(std::size_t method) = nullptr;
  std::string_view type_name;
  std::unique_ptr<parallel::MpiCommunicator> group;
  std::unique_ptr<parallel::ProcessGroup> process_group;  ///< `group` behind the backend-independent type
  std::unique_ptr<WorkerContext> context;
};

template <Worker W, class M>
void invoke_method(W& worker, WireReader& reader, WireWriter& out) {
  using Arguments = typename M::arguments;
  Arguments arguments = hybridflow::read<Arguments>(reader);
  if constexpr (std::is_void_v<typename M::result>) {
    std::apply([&](auto&... a) { std::invoke(M::pointer, worker, a...); }, arguments);
  } else {
    hybridflow::write(out, std::apply([&](auto&... a) { return std::invoke(M::pointer, worker, a...); }, arguments));
  }
}

template <Worker W, class... Ms>
void invoke_by_index(void* worker, std::size_t method, WireReader& reader, WireWriter& out, TypeList<Ms...>) {
  using Invoker = void (*)(W&, WireReader&, WireWriter&);
  static constexpr Invoker table[] = {&invoke_method<W, Ms>...};
  VERL_CHECK_ARG(method < sizeof...(Ms), "{}: method index {} out of range ({} methods)", W::name, method,
                 sizeof...(Ms));
  table[method](*static_cast<W*>(worker), reader, out);
}

template <Worker W, class... Ms>
std::string_view method_name_by_index(std::size_t method, TypeList<Ms...>) {
  static constexpr std::string_view names[] = {Ms::name...};
  return method < sizeof...(Ms) ? names[method] : std::string_view("?");
}

template <Worker W>
LiveWorker make_live_worker(std::unique_ptr<parallel::MpiCommunicator> group, std::unique_ptr<WorkerContext> context) {
  context->group = group.get();
  LiveWorker live;
  live.process_group = std::make_unique<parallel::ProcessGroup>(parallel::ProcessGroup::borrowing(*group));
  context->process_group = live.process_group.get();
  live.object = std::make_shared<W>(*context);
  live.invoke = [](void* worker, std::size_t method, WireReader& reader, WireWriter& out) {
    invoke_by_index<W>(worker, method, reader, out, typename W::methods{});
  };
  live.method_name = [](std::size_t method) { return method_name_by_index<W>(method, typename W::methods{}); };
  live.type_name = W::name;
  live.group = std::move(group);
  live.context = std::move(context);
  return live;
}

}  // namespace detail

template <class Runtime, class T>
class Future;

template <class Runtime, Worker W>
class WorkerGroup;

/// The runtime of one MPI job: on rank 0 the controller's handle; on every rank the server of
/// worker calls. `Workers` are every worker type the job spawns (all ranks must know them).
template <Worker... Workers>
class Runtime {
 public:
  using worker_types = TypeList<Workers...>;
  /// What spawn and a call return (a controller program written against a runtime names these).
  template <Worker W>
  using group_type = WorkerGroup<Runtime, W>;
  template <class T>
  using future_type = Future<Runtime, T>;

  explicit Runtime(RuntimeOptions options = {})
      : options_(options),
        control_(parallel::MpiCommunicator::world()),
        spawning_(parallel::MpiCommunicator::world()) {
    int provided = 0;
    MPI_Query_thread(&provided);
    VERL_CHECK_ARG(provided >= MPI_THREAD_MULTIPLE,
                   "hybridflow: the runtime needs MPI_THREAD_MULTIPLE (the controller and rank 0's workers are "
                   "threads of one process); MPI was initialised with thread level {}",
                   provided);
  }
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  [[nodiscard]] int rank() const { return control_.rank(); }
  [[nodiscard]] int world_size() const { return control_.size(); }
  [[nodiscard]] bool is_controller() const { return rank() == 0; }
  [[nodiscard]] const RuntimeOptions& options() const { return options_; }

  /// The ranks [first, first + count) as a pool.
  [[nodiscard]] ResourcePool pool(int first, int count) const { return ResourcePool::range(first, count, world_size()); }
  /// Every rank.
  [[nodiscard]] ResourcePool whole_world() const { return ResourcePool::range(0, world_size(), world_size()); }

  // ---- controller ----------------------------------------------------------------------------

  /// Creates a W on every rank of `pool` (W(WorkerContext&)), with the group's (tp, dp, pp) mesh
  /// when it trains Megatron-style. Waits until every rank has built its worker.
  template <Worker W>
  WorkerGroup<Runtime, W> spawn(const ResourcePool& pool, std::optional<GroupMesh> mesh = std::nullopt) {
    VERL_STATIC_ASSERT((contains_v<W, worker_types>), SPAWNED_WORKER_TYPE_IS_NOT_IN_THE_RUNTIMES_WORKER_LIST);
    static_assert(check_worker<W>());
    require_controller("spawn");
    pool.require_within(world_size());
    if (mesh) {
      VERL_CHECK_ARG(static_cast<std::int64_t>(mesh->world_size()) == pool.size(),
                     "spawn {}: mesh: expected tp * dp * pp = the pool's {} ranks, got {} ({})", W::name, pool.size(),
                     static_cast<std::int64_t>(mesh->world_size()), mesh->to_string());
    }
    const std::uint32_t group_id = next_group_id_++;
    WireWriter w;
    w.pod(detail::Command::spawn);
    const std::uint64_t call_id = next_call_id_++;
    w.pod(call_id);
    w.pod(group_id);
    w.pod(static_cast<std::uint32_t>(index_in_v<W, worker_types>));
    hybridflow::write(w, pool.ranks());
    std::optional<std::tuple<std::int64_t, std::int64_t, std::int64_t>> sizes;
    if (mesh) {
      using parallel::AxisKind;
      sizes = std::make_tuple(mesh->size(AxisKind::tp), mesh->size(AxisKind::dp), mesh->size(AxisKind::pp));
    }
    hybridflow::write(w, sizes);
    // Every rank takes part in the communicator split; the members answer.
    post_to_every_rank(std::move(w));
    auto call = track(call_id, fmt::format("{}.__init__", W::name), pool.ranks());
    wait(*call);
    return WorkerGroup<Runtime, W>(*this, group_id, pool, mesh);
  }

  /// Ends the job's serving: every rank's server returns. Waits for calls in flight first.
  void shutdown() {
    require_controller("shutdown");
    if (shut_down_) return;
    while (!in_flight_.empty()) wait(*in_flight_.begin()->second);
    WireWriter w;
    w.pod(detail::Command::shutdown);
    post_to_every_rank(std::move(w));
    outbox_.flush();
    shut_down_ = true;
  }
  [[nodiscard]] bool shut_down() const { return shut_down_; }

  /// After a failure with one rank: tells rank 0's server to stop without waiting for the calls
  /// in flight (the failed one never completes).
  void abandon() {
    if (shut_down_) return;
    WireWriter w;
    w.pod(detail::Command::shutdown);
    outbox_.post(control_.native(), 0, detail::command_tag, std::make_shared<const Bytes>(w.take()));
    outbox_.flush();
    shut_down_ = true;
  }

  // ---- server --------------------------------------------------------------------------------

  /// Serves worker calls until the controller's shutdown. Every rank runs it (rank 0 in a thread
  /// beside the controller).
  void serve() {
    detail::Outbox replies;
    std::map<std::uint32_t, detail::LiveWorker> workers;
    for (;;) {
      int from = 0;
      const Bytes message = detail::receive_bytes(control_.native(), 0, detail::command_tag, from, [&] { replies.reap(); });
      WireReader r(message);
      switch (r.pod<detail::Command>("a command")) {
        case detail::Command::spawn: serve_spawn(r, workers, replies); break;
        case detail::Command::call: serve_call(r, workers, replies); break;
        case detail::Command::destroy: workers.erase(r.pod<std::uint32_t>("a group id")); break;
        case detail::Command::shutdown:
          workers.clear();
          replies.flush();
          return;
        default: throw WireError(fmt::format("hybridflow: rank {} received an unknown command", rank()));
      }
      replies.reap();
    }
  }

  // ---- used by WorkerGroup and Future --------------------------------------------------------

  /// Sends one call: messages[i] goes to ranks[i]; `answering` are the ranks that reply.
  std::shared_ptr<detail::PendingCall> post_call(std::string label, std::span<const int> ranks,
                                                 std::span<const std::shared_ptr<const Bytes>> messages,
                                                 std::uint64_t call_id) {
    for (std::size_t i = 0; i < ranks.size(); ++i) outbox_.post(control_.native(), ranks[i], detail::command_tag, messages[i]);
    outbox_.reap();
    return track(call_id, std::move(label), std::vector<int>(ranks.begin(), ranks.end()));
  }
  std::uint64_t next_call_id() { return next_call_id_++; }

  /// Receives answers until `call` has all of its own; any error that arrives ends the wait with
  /// a WorkerError (whichever call it belongs to).
  void wait(detail::PendingCall& call) {
    while (!call.complete()) receive_one_reply(&call);
    in_flight_.erase(call.id);
  }
  /// Receives what has arrived, without blocking. True when `call` is complete.
  bool poll(detail::PendingCall& call) {
    for (;;) {
      int arrived = 0;
      MPI_Iprobe(MPI_ANY_SOURCE, detail::reply_tag, control_.native(), &arrived, MPI_STATUS_IGNORE);
      if (!arrived) break;
      receive_one_reply(nullptr);
    }
    outbox_.reap();
    if (call.complete()) in_flight_.erase(call.id);
    return call.complete();
  }

  void destroy_group(std::uint32_t group_id) {
    if (shut_down_) return;
    WireWriter w;
    w.pod(detail::Command::destroy);
    w.pod(group_id);
    post_to_every_rank(std::move(w));
  }

 private:
  void require_controller(std::string_view what) const {
    VERL_CHECK_ARG(is_controller(), "hybridflow: {} is the controller's (rank 0), called on rank {}", what, rank());
  }

  /// One command to every rank (spawning, destroying and shutting down involve them all).
  void post_to_every_rank(WireWriter&& command) {
    const auto message = std::make_shared<const Bytes>(command.take());
    for (int r = 0; r < world_size(); ++r) outbox_.post(control_.native(), r, detail::command_tag, message);
  }

  std::shared_ptr<detail::PendingCall> track(std::uint64_t id, std::string label, std::vector<int> ranks) {
    auto call = std::make_shared<detail::PendingCall>();
    call->id = id;
    call->label = std::move(label);
    call->ranks = std::move(ranks);
    in_flight_.emplace(id, call);
    return call;
  }

  /// One reply from any rank, routed to its call. `waiting_for` (when given) is the call the
  /// controller waits on: its timeout applies.
  void receive_one_reply(detail::PendingCall* waiting_for) {
    int from = 0;
    const auto keep_waiting = [&] {
      outbox_.reap();
      if (!waiting_for || !options_.call_timeout) return;
      if (std::chrono::steady_clock::now() - waiting_for->started > *options_.call_timeout) {
        std::vector<int> missing;
        for (const int r : waiting_for->ranks)
          if (!waiting_for->replies.contains(r)) missing.push_back(r);
        throw WorkerError(fmt::format("{}: no answer from rank(s) {} within {} s (RuntimeOptions::call_timeout)",
                                      waiting_for->label, fmt::join(missing, ", "),
                                      std::chrono::duration<double>(*options_.call_timeout).count()));
      }
    };
    Bytes reply = detail::receive_bytes(control_.native(), -1, detail::reply_tag, from, keep_waiting);
    WireReader r(reply);
    const auto id = r.pod<std::uint64_t>("a reply's call id");
    const auto status = r.pod<detail::ReplyStatus>("a reply's status");
    const auto found = in_flight_.find(id);
    const std::string label = found != in_flight_.end() ? found->second->label : fmt::format("call {}", id);
    if (status == detail::ReplyStatus::error) {
      const auto text = hybridflow::read<std::string>(r);
      throw WorkerError(fmt::format("{} failed on rank {}: {}", label, from, text));
    }
    if (found == in_flight_.end()) {
      throw WorkerError(fmt::format("hybridflow: rank {} answered call {}, which is not in flight", from, id));
    }
    const std::size_t offset = reply.size() - r.remaining();
    found->second->replies.insert_or_assign(from, detail::PendingCall::Reply{std::move(reply), offset});
  }

  static WireWriter reply_header(std::uint64_t call_id, detail::ReplyStatus status) {
    WireWriter w;
    w.pod(call_id);
    w.pod(status);
    return w;
  }
  void reply(detail::Outbox& replies, WireWriter&& message) {
    replies.post(control_.native(), 0, detail::reply_tag, std::make_shared<const Bytes>(message.take()));
  }
  void reply(detail::Outbox& replies, std::uint64_t call_id, detail::ReplyStatus status, const Bytes& payload) {
    WireWriter w = reply_header(call_id, status);
    w.raw(payload.data(), payload.size());
    reply(replies, std::move(w));
  }
  void reply_error(detail::Outbox& replies, std::uint64_t call_id, const std::string& what) {
    reply(replies, call_id, detail::ReplyStatus::error, to_bytes(what));
  }

  void serve_spawn(WireReader& r, std::map<std::uint32_t, detail::LiveWorker>& workers, detail::Outbox& replies) {
    const auto call_id = r.pod<std::uint64_t>("a call id");
    const auto group_id = r.pod<std::uint32_t>("a group id");
    const auto type = r.pod<std::uint32_t>("a worker type");
    const auto ranks = hybridflow::read<std::vector<int>>(r);
    const auto sizes = hybridflow::read<std::optional<std::tuple<std::int64_t, std::int64_t, std::int64_t>>>(r);
    const auto position = std::find(ranks.begin(), ranks.end(), rank());
    const bool member = position != ranks.end();
    const int group_rank = member ? static_cast<int>(position - ranks.begin()) : 0;
    auto group = spawning_.split_members(member, group_rank);
    if (!member) return;
    auto context = std::make_unique<WorkerContext>();
    context->rank = group_rank;
    context->world_size = static_cast<int>(ranks.size());
    context->global_rank = rank();
    if (sizes) context->mesh = GroupMesh(std::get<0>(*sizes), std::get<1>(*sizes), std::get<2>(*sizes));
    static constexpr std::string_view type_names[] = {Workers::name...};
    const std::string_view type_name = type < sizeof...(Workers) ? type_names[type] : std::string_view("?");
    try {
      VERL_CHECK_ARG(type < sizeof...(Workers), "hybridflow: unknown worker type {}", type);
      using Maker = detail::LiveWorker (*)(std::unique_ptr<parallel::MpiCommunicator>, std::unique_ptr<WorkerContext>);
      static constexpr Maker makers[] = {&detail::make_live_worker<Workers>...};
      workers.insert_or_assign(
          group_id, makers[type](std::make_unique<parallel::MpiCommunicator>(std::move(*group)), std::move(context)));
      reply(replies, call_id, detail::ReplyStatus::ok, {});
    } catch (const std::exception& error) {
      reply_error(replies, call_id,
                  fmt::format("{} (constructing {}, group rank {} of {})", error.what(), type_name, group_rank, ranks.size()));
    }
  }

  void serve_call(WireReader& r, std::map<std::uint32_t, detail::LiveWorker>& workers, detail::Outbox& replies) {
    const auto call_id = r.pod<std::uint64_t>("a call id");
    const auto group_id = r.pod<std::uint32_t>("a group id");
    const auto method = r.pod<std::uint32_t>("a method index");
    const bool wanted = r.pod<std::uint8_t>("a reply flag") != 0;
    const auto found = workers.find(group_id);
    if (found == workers.end()) {
      reply_error(replies, call_id, fmt::format("no worker of group {} lives on rank {}", group_id, rank()));
      return;
    }
    auto& live = found->second;
    try {
      WireWriter answer = reply_header(call_id, detail::ReplyStatus::ok);
      const std::size_t header = answer.buffer().size();
      live.invoke(live.object.get(), method, r, answer);
      if (!wanted) answer.buffer().resize(header);  // a rank whose result is not collected
      reply(replies, std::move(answer));
    } catch (const std::exception& error) {
      reply_error(replies, call_id,
                  fmt::format("{}.{} (group rank {} of {}): {}", live.type_name, live.method_name(method),
                              live.context->rank, live.context->world_size, error.what()));
    }
  }

  RuntimeOptions options_;
  parallel::MpiCommunicator control_;   ///< commands and replies
  parallel::MpiCommunicator spawning_;  ///< the splits that make the groups' communicators (server threads only)
  detail::Outbox outbox_;               ///< the controller's sends
  std::map<std::uint64_t, std::shared_ptr<detail::PendingCall>> in_flight_;
  std::uint64_t next_call_id_ = 1;
  std::uint32_t next_group_id_ = 1;
  bool shut_down_ = false;
};

/// The result of a call, when it comes.
template <class Runtime, class T>
class Future {
 public:
  using value_type = T;
  Future(Runtime& runtime, std::shared_ptr<detail::PendingCall> call,
         std::function<T(const detail::PendingCall&)> collect)
      : runtime_(&runtime), call_(std::move(call)), collect_(std::move(collect)) {}

  /// Waits for every answer of the call and collects them (once). A failure anywhere in the job
  /// that arrives meanwhile is thrown here as a WorkerError.
  T get() {
    VERL_CHECK_ARG(call_ != nullptr, "Future::get: the result was already taken");
    runtime_->wait(*call_);
    auto call = std::move(call_);
    if constexpr (std::is_void_v<T>) {
      collect_(*call);
    } else {
      return collect_(*call);
    }
  }
  /// True once every answer is in (receives what has arrived, never blocks).
  [[nodiscard]] bool ready() { return call_ != nullptr && runtime_->poll(*call_); }
  [[nodiscard]] const std::string& label() const { return call_->label; }

 private:
  Runtime* runtime_;
  std::shared_ptr<detail::PendingCall> call_;
  std::function<T(const detail::PendingCall&)> collect_;
};

/// The workers of one type on the ranks of a pool (verl's WorkerGroup): calling a registered
/// method returns a Future of its collected result.
template <class Runtime, Worker W>
class WorkerGroup {
 public:
  WorkerGroup(Runtime& runtime, std::uint32_t id, ResourcePool pool, std::optional<GroupMesh> mesh)
      : runtime_(&runtime), id_(id), pool_(std::move(pool)), mesh_(std::move(mesh)) {}
  WorkerGroup(WorkerGroup&& other) noexcept
      : runtime_(std::exchange(other.runtime_, nullptr)), id_(other.id_), pool_(std::move(other.pool_)),
        mesh_(std::move(other.mesh_)) {}
  WorkerGroup& operator=(WorkerGroup&& other) noexcept {
    if (this != &other) {
      release();
      runtime_ = std::exchange(other.runtime_, nullptr);
      id_ = other.id_;
      pool_ = std::move(other.pool_);
      mesh_ = std::move(other.mesh_);
    }
    return *this;
  }
  WorkerGroup(const WorkerGroup&) = delete;
  WorkerGroup& operator=(const WorkerGroup&) = delete;
  ~WorkerGroup() { release(); }

  [[nodiscard]] int world_size() const { return static_cast<int>(pool_.size()); }
  [[nodiscard]] const ResourcePool& pool() const { return pool_; }
  [[nodiscard]] const std::optional<GroupMesh>& mesh() const { return mesh_; }
  /// The number of data-parallel shares a batch is split into.
  [[nodiscard]] Index dp_size() const {
    return mesh_ ? static_cast<Index>(mesh_->size(parallel::AxisKind::dp)) : static_cast<Index>(world_size());
  }

  /// Calls W's member function F on the group's ranks, by its registered dispatch mode.
  template <auto F, class... Args>
  auto call(Args&&... args) {
    if constexpr (require_registered<W, F>()) {
      using M = method_of<W, F>;
      return dispatch<M>(std::forward<Args>(args)...);
    }
  }

 private:
  void release() {
    if (runtime_ != nullptr) runtime_->destroy_group(id_);
    runtime_ = nullptr;
  }

  /// A call's message: the header, then what `write_arguments(writer)` appends (no extra copy).
  template <class WriteArguments>
  std::shared_ptr<const Bytes> message(std::uint64_t call_id, std::uint32_t method, bool reply_wanted,
                                       WriteArguments&& write_arguments) const {
    WireWriter w;
    w.pod(detail::Command::call);
    w.pod(call_id);
    w.pod(id_);
    w.pod(method);
    w.pod(static_cast<std::uint8_t>(reply_wanted));
    write_arguments(w);
    return std::make_shared<const Bytes>(w.take());
  }

  template <class M>
  std::string label() const {
    return fmt::format("{}.{}", W::name, M::name);
  }

  template <class R>
  static R decode(const detail::PendingCall::Reply& reply) {
    return from_bytes<R>(reply.payload());
  }

  /// One result per rank of `ranks`, in that order.
  template <class R>
  static auto per_rank(const detail::PendingCall& call) {
    if constexpr (std::is_void_v<R>) {
      return;
    } else {
      std::vector<R> out;
      out.reserve(call.ranks.size());
      for (const int r : call.ranks) out.push_back(decode<R>(call.replies.at(r)));
      return out;
    }
  }

  template <class M, class... Args>
  auto dispatch(Args&&... args) {
    using Arguments = typename M::arguments;
    using R = typename M::result;
    constexpr auto mode = M::mode;
    constexpr auto method = static_cast<std::uint32_t>(method_index_v<W, M::pointer>);
    VERL_CHECK_ARG(runtime_ != nullptr, "{}: the worker group was moved from or destroyed", label<M>());
    const std::uint64_t call_id = runtime_->next_call_id();
    const auto& ranks = pool_.ranks();
    const auto n = static_cast<std::size_t>(ranks.size());
    std::vector<std::shared_ptr<const Bytes>> messages;

    if constexpr (mode == Dispatch::one_to_all || mode == Dispatch::rank_zero) {
      VERL_STATIC_ASSERT((std::is_constructible_v<Arguments, Args&&...>), CALL_ARGUMENTS_DO_NOT_MATCH_THE_METHODS_PARAMETERS);
      const auto shared = message(call_id, method, true, [&](WireWriter& w) {
        hybridflow::write(w, Arguments(std::forward<Args>(args)...));
      });
      if constexpr (mode == Dispatch::rank_zero) {
        const int first = ranks.front();
        auto call = runtime_->post_call(label<M>(), std::span<const int>(&first, 1), std::span(&shared, 1), call_id);
        return Future<Runtime, R>(*runtime_, call, [](const detail::PendingCall& c) {
          if constexpr (!std::is_void_v<R>) return decode<R>(c.replies.at(c.ranks.front()));
        });
      } else {
        messages.assign(n, shared);
        auto call = runtime_->post_call(label<M>(), ranks, messages, call_id);
        return make_future<std::conditional_t<std::is_void_v<R>, void, std::vector<R>>>(
            call, [](const detail::PendingCall& c) { return per_rank<R>(c); });
      }
    } else if constexpr (takes_one_argument_per_rank(mode)) {
      VERL_STATIC_ASSERT((sizeof...(Args) == std::tuple_size_v<Arguments>), CALL_NEEDS_ONE_LIST_PER_METHOD_PARAMETER);
      const auto lists = std::forward_as_tuple(args...);
      check_lengths<M>(lists, std::make_index_sequence<sizeof...(Args)>{}, n);
      for (std::size_t i = 0; i < n; ++i) {
        messages.push_back(message(call_id, method, true, [&](WireWriter& w) {
          hybridflow::write(w, element_tuple<Arguments>(lists, i, std::make_index_sequence<sizeof...(Args)>{}));
        }));
      }
      auto call = runtime_->post_call(label<M>(), ranks, messages, call_id);
      return make_future<std::conditional_t<std::is_void_v<R>, void, std::vector<R>>>(
          call, [](const detail::PendingCall& c) { return per_rank<R>(c); });
    } else {
      // The DataProto modes.
      constexpr bool with_func = mode == Dispatch::dp_compute_proto_with_func;
      constexpr std::size_t first_proto = with_func ? 1 : 0;
      VERL_STATIC_ASSERT((sizeof...(Args) == std::tuple_size_v<Arguments>), CALL_ARGUMENTS_DO_NOT_MATCH_THE_METHODS_PARAMETERS);
      const auto all = std::forward_as_tuple(args...);
      std::vector<data::DataProto> protos;
      collect_protos<first_proto>(all, protos, std::make_index_sequence<sizeof...(Args)>{});
      const Index shares = mode == Dispatch::megatron_compute_proto ? require_mesh<M>() : static_cast<Index>(n);
      ChunkedProtos chunked = chunk_protos(protos, shares, label<M>());
      std::vector<RankRole> roles(n);
      for (std::size_t i = 0; i < n; ++i) {
        roles[i] = mode == Dispatch::megatron_compute_proto ? megatron_role(*mesh_, static_cast<std::int64_t>(i))
                                                              : RankRole{.dp_rank = static_cast<Index>(i), .collect = true};
        messages.push_back(message(call_id, method, roles[i].collect, [&](WireWriter& w) {
          if constexpr (with_func) hybridflow::write(w, static_cast<const std::tuple_element_t<0, Arguments>&>(std::get<0>(all)));
          for (auto& argument : chunked.chunks) hybridflow::write(w, argument[static_cast<std::size_t>(roles[i].dp_rank)]);
        }));
      }
      auto call = runtime_->post_call(label<M>(), ranks, messages, call_id);
      if constexpr (mode == Dispatch::dp_compute_metric) {
        return make_future<std::conditional_t<std::is_void_v<R>, void, std::vector<R>>>(
            call, [](const detail::PendingCall& c) { return per_rank<R>(c); });
      } else {
        const Index padding = chunked.padding;
        return make_future<data::DataProto>(call, [roles, padding, shares](const detail::PendingCall& c) {
          std::vector<data::DataProto> parts(static_cast<std::size_t>(shares));
          for (std::size_t i = 0; i < roles.size(); ++i)
            if (roles[i].collect) parts[static_cast<std::size_t>(roles[i].dp_rank)] = decode<data::DataProto>(c.replies.at(c.ranks[i]));
          return concat_and_unpad(std::move(parts), padding);
        });
      }
    }
  }

  template <class T, class Collect>
  Future<Runtime, T> make_future(std::shared_ptr<detail::PendingCall> call, Collect collect) {
    return Future<Runtime, T>(*runtime_, std::move(call), std::function<T(const detail::PendingCall&)>(std::move(collect)));
  }

  template <class M>
  Index require_mesh() const {
    VERL_CHECK_ARG(mesh_.has_value(),
                   "{}: {} sends to data-parallel groups and needs the group's (tp, dp, pp) mesh; spawn the group "
                   "with one",
                   label<M>(), to_string(M::mode));
    return static_cast<Index>(mesh_->size(parallel::AxisKind::dp));
  }

  template <class M, class Lists, std::size_t... I>
  void check_lengths(const Lists& lists, std::index_sequence<I...>, std::size_t n) const {
    const auto check = [&](std::size_t argument, std::size_t length) {
      VERL_CHECK_ARG(length == n, "{}: argument {}: {} needs one element per rank ({}), got {}", label<M>(), argument,
                     to_string(M::mode), n, length);
    };
    (check(I, std::size(std::get<I>(lists))), ...);
  }

  template <class Arguments, class Lists, std::size_t... I>
  static Arguments element_tuple(const Lists& lists, std::size_t i, std::index_sequence<I...>) {
    return Arguments(std::get<I>(lists)[i]...);
  }

  template <std::size_t First, class All, std::size_t... I>
  static void collect_protos(const All& all, std::vector<data::DataProto>& out, std::index_sequence<I...>) {
    (
        [&] {
          if constexpr (I >= First) out.push_back(static_cast<const data::DataProto&>(std::get<I>(all)));
        }(),
        ...);
  }

  Runtime* runtime_;
  std::uint32_t id_;
  ResourcePool pool_;
  std::optional<GroupMesh> mesh_;
};

/// Runs a HybridFlow job: MPI with MPI_THREAD_MULTIPLE, a Runtime<Workers...> on every rank, the
/// controller program `program(runtime)` on rank 0 (beside rank 0's server thread), worker
/// serving on the others. Returns the program's exit code on rank 0 (0 when it returns void) and
/// 0 elsewhere. Any exception ends the job: printed, then every rank is aborted (one rank: the
/// exit code is 1).
template <Worker... Workers, class Program>
int run_controller(int& argc, char**& argv, Program&& program, RuntimeOptions options = {}) {
  parallel::MpiEnvironment environment(argc, argv, MPI_THREAD_MULTIPLE);
  const auto fail = [](std::string_view where, const std::exception& error) {
    std::fprintf(stderr, "verl: error (%.*s): %s\n", static_cast<int>(where.size()), where.data(), error.what());
    std::fflush(stderr);
    parallel::abort_every_rank(1);  // returns only with one rank
  };
  std::optional<Runtime<Workers...>> runtime;
  try {
    runtime.emplace(options);
  } catch (const std::exception& error) {
    fail("hybridflow runtime", error);
    return 1;
  }
  if (!runtime->is_controller()) {
    try {
      runtime->serve();
    } catch (const std::exception& error) {
      fail(fmt::format("worker server on rank {}", runtime->rank()), error);
      return 1;
    }
    return 0;
  }
  std::exception_ptr server_failure;
  std::promise<void> server_stopped;
  std::future<void> stopped = server_stopped.get_future();
  std::thread server([&] {
    try {
      runtime->serve();
    } catch (...) {
      server_failure = std::current_exception();
    }
    server_stopped.set_value();
  });
  int code = 0;
  try {
    if constexpr (std::is_void_v<std::invoke_result_t<Program&, Runtime<Workers...>&>>) {
      program(*runtime);
    } else {
      code = static_cast<int>(program(*runtime));
    }
    runtime->shutdown();
  } catch (const std::exception& error) {
    fail("controller", error);
    // One rank: stop rank 0's server and report. A server stuck in a worker method (the call that
    // timed out) cannot be joined: the process ends without it.
    runtime->abandon();
    if (stopped.wait_for(std::chrono::seconds(2)) != std::future_status::ready) {
      std::fprintf(stderr, "verl: rank 0's worker thread is still busy; ending the process\n");
      std::fflush(stderr);
      std::_Exit(1);
    }
    server.join();
    return 1;
  }
  server.join();
  if (server_failure) {
    try {
      std::rethrow_exception(server_failure);
    } catch (const std::exception& error) {
      fail("worker server on rank 0", error);
    }
    return 1;
  }
  return code;
}

}  // namespace verl::hybridflow
