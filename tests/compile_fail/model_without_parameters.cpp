// expect: THE_MODEL_MUST_VISIT_NAMED_PARAMETERS_AND_ZERO_GRADIENTS
// Optimizers and checkpoints reach a model's weights through for_each_parameter.
#include "verl/model/causal_lm.hpp"

struct OpaqueModel {
  using scalar_type = float;
  verl::Index vocab_size() const { return 8; }
  verl::model::CausalLMOutput<float> forward(const verl::model::TokenBatch&, const verl::model::ForwardOptions&) {
    return {};
  }
  void backward(const verl::model::CausalLMCotangents<float>&) {}
  verl::model::StateDict state_dict() const { return {}; }
  void load_state_dict(const verl::model::StateDict&) {}
};

static_assert(verl::model::check_causal_lm<OpaqueModel>());
int main() {}
