// expect: RESHARD_MESHES_MUST_HAVE_THE_SAME_WORLD_SIZE
// Training on 8 ranks, generating on 4: the engine reshards over the same ranks.
#include "verl/parallel/reshard_plan.hpp"

using namespace verl::parallel;
constexpr auto plan = make_reshard_plan(Mesh<TP<4>, DP<2>, PP<1>>{}, Mesh<TP<2>, DP<2>, PP<1>>{});
int main() { return static_cast<int>(plan.world_size()); }
