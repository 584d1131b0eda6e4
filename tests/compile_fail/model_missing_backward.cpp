// expect: THE_MODEL_NEEDS_BACKWARD_FROM_CAUSAL_LM_COTANGENTS
// A policy model must take the cotangents of its outputs back to its parameters.
#include "verl/model/causal_lm.hpp"

struct ForwardOnlyModel {
  using scalar_type = float;
  verl::Index vocab_size() const { return 8; }
  verl::model::CausalLMOutput<float> forward(const verl::model::TokenBatch&, const verl::model::ForwardOptions&) {
    return {};
  }
  template <class Fn>
  void for_each_parameter(Fn&&) {}
  void zero_grad() {}
  verl::model::StateDict state_dict() const { return {}; }
  void load_state_dict(const verl::model::StateDict&) {}
};

static_assert(verl::model::check_causal_lm<ForwardOnlyModel>());
int main() {}
