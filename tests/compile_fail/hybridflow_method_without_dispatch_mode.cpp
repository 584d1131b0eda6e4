// expect: WORKER_METHOD_HAS_NO_DISPATCH_MODE_REGISTER_IT_IN_THE_WORKERS_METHODS_LIST
// A worker method the controller calls must be registered with its dispatch mode.
#include "verl/hybridflow/worker.hpp"

using namespace verl::hybridflow;
struct Actor {
  static constexpr std::string_view name = "Actor";
  explicit Actor(WorkerContext&) {}
  int registered() { return 1; }
  int forgotten() { return 2; }
  using methods = verl::TypeList<Method<&Actor::registered, Dispatch::one_to_all, "registered">>;
};
int main() { return require_registered<Actor, &Actor::forgotten>() ? 0 : 1; }
