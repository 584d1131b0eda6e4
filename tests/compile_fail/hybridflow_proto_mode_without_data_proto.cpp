// expect: DATA_PROTO_DISPATCH_NEEDS_DATAPROTO_ARGUMENTS
// DP_COMPUTE_PROTO chunks DataProto arguments over the ranks: a method taking an int cannot use it.
#include "verl/hybridflow/worker.hpp"

using namespace verl::hybridflow;
struct Actor {
  static constexpr std::string_view name = "Actor";
  explicit Actor(WorkerContext&) {}
  verl::data::DataProto compute(int rows) { return {}; }
  using methods = verl::TypeList<Method<&Actor::compute, Dispatch::dp_compute_proto, "compute">>;
};
int main() { return check_worker<Actor>() ? 0 : 1; }
