// Workers: a worker is a C++ type whose methods the controller calls on every rank of a worker
// group. Its methods are registered, each with its dispatch mode, as compile-time attributes
// (verl's @register(dispatch_mode=...)):
//
//   struct ActorWorker {
//     static constexpr std::string_view name = "ActorWorker";
//     explicit ActorWorker(hybridflow::WorkerContext& context);
//     void init_model(const std::string& config);
//     data::DataProto compute_log_prob(const data::DataProto& batch);
//     using methods = TypeList<hybridflow::Method<&ActorWorker::init_model, Dispatch::one_to_all, "init_model">,
//                              hybridflow::Method<&ActorWorker::compute_log_prob, Dispatch::dp_compute_proto,
//                                                 "compute_log_prob">>;
//   };
//
// Calling an unregistered method, a DataProto mode on a method that takes something else, or an
// argument that cannot cross the wire is a compile error with a named message.
#pragma once

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <tuple>
#include <variant>
#include <type_traits>

#include "verl/config.hpp"
#include "verl/core/type_list.hpp"
#include "verl/data/data_proto.hpp"
#include "verl/hybridflow/dispatch.hpp"
#include "verl/hybridflow/wire.hpp"
#include "verl/parallel/process_group.hpp"

namespace verl::parallel {
class MpiCommunicator;  // parallel/mpi_communicator.hpp (the runtime includes it; workers need only the name)
}  // namespace verl::parallel

namespace verl::hybridflow {

/// A string usable as a template argument (a method's name).
template <std::size_t N>
struct FixedString {
  char value[N]{};
  constexpr FixedString(const char (&text)[N]) { std::copy_n(text, N, value); }  // NOLINT: implicit by design
  [[nodiscard]] constexpr std::string_view view() const { return {value, N - 1}; }
};

/// What a worker knows about its place: its rank in the group, the group's size, the group's
/// communicator (for the SPMD collectives inside the group: gradient all-reduce, TP, ...), its
/// global rank, and the group's (tp, dp, pp) mesh when it has one.
struct WorkerContext {
  int rank = 0;                           ///< in the group
  int world_size = 1;                     ///< of the group
  int global_rank = 0;                    ///< in the job (MPI_COMM_WORLD)
  parallel::MpiCommunicator* group = nullptr;  ///< the group's ranks, in group order (MPI runtime only)
  /// The same group behind the backend-independent type: the data-parallel workers reduce over it,
  /// so they build without MPI (the in-process runtime gives them a group of one).
  parallel::ProcessGroup* process_group = nullptr;
  std::optional<GroupMesh> mesh{};

  [[nodiscard]] int group_size() const { return process_group != nullptr ? process_group->size() : world_size; }
};

namespace detail {

template <class F>
struct member_function;
template <class R, class C, class... Args>
struct member_function<R (C::*)(Args...)> {
  using result = R;
  using owner = C;
  using arguments = std::tuple<std::remove_cvref_t<Args>...>;
  static constexpr std::size_t arity = sizeof...(Args);
};
template <class R, class C, class... Args>
struct member_function<R (C::*)(Args...) const> : member_function<R (C::*)(Args...)> {};
template <class R, class C, class... Args>
struct member_function<R (C::*)(Args...) noexcept> : member_function<R (C::*)(Args...)> {};
template <class R, class C, class... Args>
struct member_function<R (C::*)(Args...) const noexcept> : member_function<R (C::*)(Args...)> {};

template <class T>
inline constexpr bool is_data_proto = std::is_same_v<T, data::DataProto>;

template <class Tuple>
struct all_wire;
template <class... Ts>
struct all_wire<std::tuple<Ts...>> : std::bool_constant<(WireType<Ts> && ...)> {};

template <class Tuple>
struct all_data_proto;
template <class... Ts>
struct all_data_proto<std::tuple<Ts...>> : std::bool_constant<(sizeof...(Ts) > 0) && (is_data_proto<Ts> && ...)> {};

template <class Tuple>
struct data_proto_after_first;
template <class First, class... Rest>
struct data_proto_after_first<std::tuple<First, Rest...>>
    : std::bool_constant<!is_data_proto<First> && (sizeof...(Rest) > 0) && (is_data_proto<Rest> && ...)> {};
template <>
struct data_proto_after_first<std::tuple<>> : std::false_type {};

}  // namespace detail

/// One registered method: the member function, its dispatch mode and its name.
template <auto MemberFunction, Dispatch Mode, FixedString Name>
struct Method {
  using traits = detail::member_function<decltype(MemberFunction)>;
  using owner = typename traits::owner;
  using result = typename traits::result;
  using arguments = typename traits::arguments;
  static constexpr auto pointer = MemberFunction;
  static constexpr Dispatch mode = Mode;
  static constexpr std::string_view name = Name.view();

  static constexpr bool result_is_wire = std::is_void_v<result> || WireType<result>;
  static constexpr bool arguments_are_wire = detail::all_wire<arguments>::value;
  static constexpr bool proto_arguments_fit =
      Mode == Dispatch::dp_compute_proto_with_func ? detail::data_proto_after_first<arguments>::value
      : splits_data_proto(Mode)                    ? detail::all_data_proto<arguments>::value
                                                   : true;
  static constexpr bool proto_result_fits = !concatenates_results(Mode) || detail::is_data_proto<result>;

  VERL_STATIC_ASSERT(result_is_wire, WORKER_METHOD_RESULT_MUST_BE_VOID_OR_A_WIRE_TYPE);
  VERL_STATIC_ASSERT(arguments_are_wire, WORKER_METHOD_ARGUMENTS_MUST_BE_WIRE_TYPES);
  VERL_STATIC_ASSERT(proto_arguments_fit, DATA_PROTO_DISPATCH_NEEDS_DATAPROTO_ARGUMENTS);
  VERL_STATIC_ASSERT(proto_result_fits, DATA_PROTO_DISPATCH_NEEDS_A_DATAPROTO_RESULT);
  /// Reading it instantiates the checks above (check_worker does, for every registered method).
  static constexpr bool well_formed = result_is_wire && arguments_are_wire && proto_arguments_fit && proto_result_fits;
};

template <class T>
struct is_method : std::false_type {};
template <auto F, Dispatch M, FixedString N>
struct is_method<Method<F, M, N>> : std::true_type {};

template <class List>
struct all_methods : std::false_type {};
template <class... Ms>
struct all_methods<TypeList<Ms...>> : std::bool_constant<(is_method<Ms>::value && ...)> {};

namespace detail {
template <class W>
concept names_itself = requires {
  { W::name } -> std::convertible_to<std::string_view>;
};
template <class W>
concept lists_methods = requires { typename W::methods; } && all_methods<typename W::methods>::value;
template <class W>
concept built_from_context = std::constructible_from<W, WorkerContext&>;
}  // namespace detail

/// A worker: `W::name`, constructible from a WorkerContext&, and `W::methods`, a TypeList of
/// Method<...> of its member functions.
template <class W>
concept Worker = detail::names_itself<W> && detail::lists_methods<W> && detail::built_from_context<W>;

namespace detail {
template <class... Ms>
consteval bool methods_well_formed(TypeList<Ms...>) {
  return (Ms::well_formed && ...);
}
}  // namespace detail

/// Named diagnostics for a type meant to be a Worker: one static assertion per missing part, and
/// each registered method's own checks (wire types, the DataProto modes' signatures).
template <class W>
consteval bool check_worker() {
  VERL_STATIC_ASSERT(detail::names_itself<W>, WORKER_NEEDS_A_STATIC_NAME);
  VERL_STATIC_ASSERT(detail::lists_methods<W>, WORKER_NEEDS_A_METHODS_TYPE_LIST_OF_HYBRIDFLOW_METHOD);
  VERL_STATIC_ASSERT(detail::built_from_context<W>, WORKER_MUST_BE_CONSTRUCTIBLE_FROM_A_WORKER_CONTEXT);
  if constexpr (detail::lists_methods<W>) {
    return detail::methods_well_formed(typename W::methods{});
  } else {
    return false;
  }
}

namespace detail {
template <auto F, class List>
struct method_index;
template <auto F, class... Ms>
struct method_index<F, TypeList<Ms...>> {
  static constexpr std::size_t value = [] {
    constexpr bool same[] = {[] {
      if constexpr (std::is_same_v<std::remove_cv_t<decltype(Ms::pointer)>, std::remove_cv_t<decltype(F)>>) {
        return Ms::pointer == F;
      } else {
        return false;
      }
    }()..., false};
    std::size_t i = 0;
    while (i < sizeof...(Ms) && !same[i]) ++i;
    return i;
  }();
};

template <std::size_t I, class List>
struct method_at;
template <std::size_t I, class... Ms>
struct method_at<I, TypeList<Ms...>> {
  using type = std::tuple_element_t<I, std::tuple<Ms...>>;
};
}  // namespace detail

/// The position of member function F among W's registered methods (W::methods::size if absent).
template <class W, auto F>
inline constexpr std::size_t method_index_v = detail::method_index<F, typename W::methods>::value;

/// Compile-time check that F is one of W's registered methods (a call of an unregistered method
/// has no dispatch mode).
template <class W, auto F>
consteval bool require_registered() {
  VERL_STATIC_ASSERT((method_index_v<W, F> < W::methods::size),
                     WORKER_METHOD_HAS_NO_DISPATCH_MODE_REGISTER_IT_IN_THE_WORKERS_METHODS_LIST);
  return method_index_v<W, F> < W::methods::size;
}

/// The Method<...> registered for F.
template <class W, auto F>
  requires(method_index_v<W, F> < W::methods::size)
using method_of = typename detail::method_at<method_index_v<W, F>, typename W::methods>::type;

/// Waits for several futures (of any runtime); their results as a tuple (void results are std::monostate).
template <class... Futures>
auto wait_all(Futures&... futures) {
  const auto take = [](auto& future) {
    using T = typename std::remove_reference_t<decltype(future)>::value_type;
    if constexpr (std::is_void_v<T>) {
      future.get();
      return std::monostate{};
    } else {
      return future.get();
    }
  };
  return std::tuple{take(futures)...};
}

}  // namespace verl::hybridflow
