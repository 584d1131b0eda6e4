// expect: PIPELINE_PARALLEL_TRAINING_IS_NOT_BUILT_YET_THE_TRAINING_MESH_NEEDS_PP_1
// The layout pair, PP<2> x TP<2> training with TP<1> generation: refused until the
// trainer implements pipeline parallelism (examples/mesh_types.cpp runs TP<2> -> TP<1>).
#include "verl/trainer/layouts.hpp"

using namespace verl::parallel;
using Actor = verl::trainer::Layouts<Mesh<PP<2>, TP<2>, DP<>>, Mesh<TP<1>, DP<>>>;
int main() { return static_cast<int>(sizeof(Actor)); }
