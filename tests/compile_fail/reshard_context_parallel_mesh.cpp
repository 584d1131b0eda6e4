// expect: RESHARD_MESHES_MAY_ONLY_SPLIT_TP_PP_DP
// The 3D-HybridEngine maps tp, pp and dp; a cp axis of size 2 has no place in the plan.
#include "verl/parallel/reshard_plan.hpp"

using namespace verl::parallel;
constexpr auto plan = make_reshard_plan(Mesh<TP<2>, CP<2>, DP<1>>{}, Mesh<TP<2>, DP<2>>{});
int main() { return static_cast<int>(plan.world_size()); }
