// expect: THE_MODEL_MUST_DECLARE_ITS_SCALAR_TYPE
// The model's element type (float, double) names its outputs and cotangents.
#include "verl/model/causal_lm.hpp"

struct UntypedModel {
  verl::Index vocab_size() const { return 8; }
};

static_assert(verl::model::check_causal_lm<UntypedModel>());
int main() {}
