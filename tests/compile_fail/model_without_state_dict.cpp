// expect: THE_MODEL_NEEDS_STATE_DICT_AND_LOAD_STATE_DICT
// Checkpoints and weight syncs exchange named tensors.
#include "verl/model/causal_lm.hpp"

struct StatelessModel {
  using scalar_type = double;
  verl::Index vocab_size() const { return 8; }
  verl::model::CausalLMOutput<double> forward(const verl::model::TokenBatch&, const verl::model::ForwardOptions&) {
    return {};
  }
  void backward(const verl::model::CausalLMCotangents<double>&) {}
  template <class Fn>
  void for_each_parameter(Fn&&) {}
  void zero_grad() {}
};

static_assert(verl::model::check_causal_lm<StatelessModel>());
int main() {}
