// expect: THE_VALUE_MODEL_NEEDS_BACKWARD_FROM_VALUE_COTANGENTS
// A critic is trained: it must take the value loss's cotangents back to its parameters.
#include "verl/model/value_model.hpp"

struct FrozenCritic {
  using scalar_type = float;
  verl::model::ValueOutput<float> forward(const verl::model::TokenBatch&, const verl::model::ValueForwardOptions&) {
    return {};
  }
  template <class Fn>
  void for_each_parameter(Fn&&) {}
  void zero_grad() {}
  verl::model::StateDict state_dict() const { return {}; }
  void load_state_dict(const verl::model::StateDict&) {}
};

static_assert(verl::model::check_value_model<FrozenCritic>());
int main() {}
