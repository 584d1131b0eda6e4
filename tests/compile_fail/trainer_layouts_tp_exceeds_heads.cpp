// expect: TENSOR_PARALLEL_SIZE_MUST_NOT_EXCEED_THE_MODELS_ATTENTION_HEADS
// A model type with 4 attention heads (static, read by model_heads) cannot train at tp 8.
#include <cstdint>

#include "verl/trainer/layouts.hpp"

using namespace verl::parallel;
struct FourHeads {
  static constexpr std::int64_t num_attention_heads = 4;
  static constexpr std::int64_t num_key_value_heads = 2;
};
constexpr bool ok = verl::trainer::layout_rules<Mesh<TP<8>, DP<>>, Mesh<TP<1>, DP<>>, FourHeads>::value;
int main() { return ok ? 0 : 1; }
