// expect: DATA_PROTO_DISPATCH_NEEDS_A_DATAPROTO_RESULT
// DP_COMPUTE_PROTO concatenates the ranks' DataProtos: a method returning a number cannot use it.
#include "verl/hybridflow/worker.hpp"

using namespace verl::hybridflow;
struct Actor {
  static constexpr std::string_view name = "Actor";
  explicit Actor(WorkerContext&) {}
  double loss(const verl::data::DataProto&) { return 0.0; }
  using methods = verl::TypeList<Method<&Actor::loss, Dispatch::dp_compute_proto, "loss">>;
};
int main() { return check_worker<Actor>() ? 0 : 1; }
