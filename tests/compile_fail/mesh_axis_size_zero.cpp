// expect: MESH_AXIS_SIZE_MUST_BE_POSITIVE
// An axis of size 0 has no ranks.
#include "verl/parallel/mesh.hpp"

using namespace verl::parallel;
int main() { return static_cast<int>(Mesh<TP<0>, DP<2>>{}.world_size()); }
