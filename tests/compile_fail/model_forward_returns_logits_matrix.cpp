// expect: THE_MODEL_NEEDS_FORWARD_OF_A_TOKEN_BATCH_RETURNING_CAUSAL_LM_OUTPUT
// forward() must return CausalLMOutput (logits, log-probs, entropy), not a bare matrix.
#include "verl/model/causal_lm.hpp"

struct LogitsOnlyModel {
  using scalar_type = float;
  verl::Index vocab_size() const { return 8; }
  verl::MatrixF forward(const verl::model::TokenBatch&, const verl::model::ForwardOptions&) { return {}; }
  void backward(const verl::model::CausalLMCotangents<float>&) {}
  template <class Fn>
  void for_each_parameter(Fn&&) {}
  void zero_grad() {}
  verl::model::StateDict state_dict() const { return {}; }
  void load_state_dict(const verl::model::StateDict&) {}
};

static_assert(verl::model::check_causal_lm<LogitsOnlyModel>());
int main() {}
