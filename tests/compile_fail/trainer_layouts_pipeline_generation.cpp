// expect: PIPELINE_PARALLEL_GENERATION_IS_NOT_BUILT_YET_THE_GENERATION_MESH_NEEDS_PP_1
// Pipeline parallel training is built (Mesh<TP<2>, DP<>, PP<2>> -> Mesh<TP<1>, DP<>> compiles:
// tests/unit/test_layouts.cpp); a generation mesh with stages is not: the 3D-HybridEngine gathers
// every stage's layers into each generation rank (pg = 1).
#include "verl/trainer/layouts.hpp"

using namespace verl::parallel;
using Actor = verl::trainer::Layouts<Mesh<TP<2>, DP<>, PP<2>>, Mesh<TP<1>, DP<>, PP<2>>>;
int main() { return static_cast<int>(sizeof(Actor)); }
