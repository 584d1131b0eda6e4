// expect: WORKER_METHOD_ARGUMENTS_MUST_BE_WIRE_TYPES
// Arguments travel over MPI: a type without a WireCodec cannot be a worker method's argument.
#include "verl/hybridflow/worker.hpp"

using namespace verl::hybridflow;
struct Handle {
  void* pointer;
};
struct Actor {
  static constexpr std::string_view name = "Actor";
  explicit Actor(WorkerContext&) {}
  void take(const Handle&) {}
  using methods = verl::TypeList<Method<&Actor::take, Dispatch::one_to_all, "take">>;
};
int main() { return check_worker<Actor>() ? 0 : 1; }
