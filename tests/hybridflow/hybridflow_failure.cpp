// A job whose worker fails must end, every rank, with the failure named: run under mpirun by ctest
// (tests/hybridflow/CMakeLists.txt), which checks the message and that the job ends within its
// timeout instead of hanging. `method`: the last rank of the group throws while the others wait
// for it in a collective (they would wait forever); `constructor`: the last rank's worker cannot
// be built.
#include <cstdio>
#include <stdexcept>
#include <string>
#include <string_view>

#include "verl/hybridflow/runtime.hpp"

namespace {

using namespace verl;
using namespace verl::hybridflow;

struct Fragile {
  static constexpr std::string_view name = "Fragile";
  explicit Fragile(WorkerContext& context) : context_(context) {}
  void boom() {
    if (context_.rank == context_.world_size - 1) throw std::runtime_error("boom on purpose");
    context_.group->barrier();  // never completes: the last rank is gone
  }
  using methods = TypeList<Method<&Fragile::boom, Dispatch::one_to_all, "boom">>;

 private:
  WorkerContext& context_;
};

struct Unbuildable {
  static constexpr std::string_view name = "Unbuildable";
  explicit Unbuildable(WorkerContext& context) {
    if (context.rank == context.world_size - 1) throw std::runtime_error("no memory on purpose");
  }
  int ping() { return 1; }
  using methods = TypeList<Method<&Unbuildable::ping, Dispatch::one_to_all, "ping">>;
};

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "method";
  return run_controller<Fragile, Unbuildable>(argc, argv, [&](auto& runtime) {
    if (mode == "constructor") {
      auto group = runtime.template spawn<Unbuildable>(runtime.whole_world());
      (void)group.template call<&Unbuildable::ping>().get();
    } else {
      auto group = runtime.template spawn<Fragile>(runtime.whole_world());
      group.template call<&Fragile::boom>().get();
    }
    std::puts("unreachable: the failure was not reported");
  });
}
