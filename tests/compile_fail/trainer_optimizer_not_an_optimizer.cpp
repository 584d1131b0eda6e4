// expect: THE_OPTIMIZER_TYPE_DOES_NOT_SATISFY_THE_OPTIMIZER_CONCEPT
// An optimizer needs a name, step(parameters), lr() and set_lr(lr) for the scheduler to drive it.
#include "verl/optim/optimizer_step.hpp"

struct PlainSgd {
  static constexpr const char* name = "sgd";
  void step(std::span<const verl::optim::ParameterRef>) {}
};

int main() {
  PlainSgd sgd;
  return static_cast<int>(verl::optim::clip_and_step(sgd, {}, 1.0).grad_norm);
}
