// expect: TRAIN_TP_MUST_BE_A_MULTIPLE_OF_GEN_TP
// Generation TP 3 cannot be gathered from training TP 4 shards.
#include "verl/parallel/reshard_plan.hpp"

using namespace verl::parallel;
constexpr auto plan = make_reshard_plan(Mesh<TP<4>, DP<3>, PP<1>>{}, Mesh<TP<3>, DP<4>, PP<1>>{});
int main() { return static_cast<int>(plan.world_size()); }
