// expect: TRAIN_PP_MUST_BE_A_MULTIPLE_OF_GEN_PP
// Generation PP 2 cannot be gathered from 3 training stages.
#include "verl/parallel/reshard_plan.hpp"

using namespace verl::parallel;
constexpr auto plan = make_reshard_plan(Mesh<TP<1>, DP<2>, PP<3>>{}, Mesh<TP<1>, DP<3>, PP<2>>{});
int main() { return static_cast<int>(plan.world_size()); }
