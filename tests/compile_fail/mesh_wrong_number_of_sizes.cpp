// expect: MESH_NEEDS_ONE_SIZE_PER_DYNAMIC_AXIS
// Two dynamic axes need two sizes.
#include "verl/parallel/mesh.hpp"

using namespace verl::parallel;
int main() { return static_cast<int>(Mesh<TP<>, DP<>>(4).world_size()); }
