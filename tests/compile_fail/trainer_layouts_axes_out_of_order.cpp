// expect: THE_ACTOR_MESH_AXES_MUST_BE_IN_MEGATRON_ORDER_TP_DP_PP
// dp listed before tp would put the TP groups on strided ranks: the worker group lays its ranks
// out in Megatron's order (tp fastest), as the dispatch of MEGATRON_COMPUTE_PROTO does.
#include "verl/trainer/layouts.hpp"

using namespace verl::parallel;
using Actor = verl::trainer::Layouts<Mesh<DP<2>, TP<2>>, Mesh<TP<1>, DP<4>>>;
int main() { return static_cast<int>(sizeof(Actor)); }
