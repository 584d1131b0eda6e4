// A job whose worker fails must end, every rank, with the failure named: run under mpirun by ctest
// (tests/hybridflow/CMakeLists.txt), which checks the message and that the job ends within its
// timeout instead of hanging. `method`: the last rank of the group throws while the others wait
// for it in a collective (they would wait forever); `constructor`: the last rank's worker cannot
// be built; `timeout`: the last rank never answers (it is stuck), and RuntimeOptions::call_timeout
// turns the wait into an error.
#include <chrono>
#include <cstdio>
#include <thread>
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
  /// The last rank is stuck (sleeps far past the controller's patience); the others answer.
  void stall() {
    if (context_.rank == context_.world_size - 1) std::this_thread::sleep_for(std::chrono::seconds(600));
  }
  using methods = TypeList<Method<&Fragile::boom, Dispatch::one_to_all, "boom">,
                           Method<&Fragile::stall, Dispatch::one_to_all, "stall">>;

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
  RuntimeOptions options;
  if (mode == "timeout") options.call_timeout = std::chrono::milliseconds(1500);
  return run_controller<Fragile, Unbuildable>(argc, argv, [&](auto& runtime) {
    if (mode == "timeout") {
      auto group = runtime.template spawn<Fragile>(runtime.whole_world());
      group.template call<&Fragile::stall>().get();
    } else if (mode == "constructor") {
      auto group = runtime.template spawn<Unbuildable>(runtime.whole_world());
      (void)group.template call<&Unbuildable::ping>().get();
    } else {
      auto group = runtime.template spawn<Fragile>(runtime.whole_world());
      group.template call<&Fragile::boom>().get();
    }
    std::puts("unreachable: the failure was not reported");
  }, options);
}
