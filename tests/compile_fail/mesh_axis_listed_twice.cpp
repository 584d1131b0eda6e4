// expect: MESH_AXIS_LISTED_TWICE
// A mesh names each axis once: two tp axes would make the rank layout ambiguous.
#include "verl/parallel/mesh.hpp"

using namespace verl::parallel;
int main() { return static_cast<int>(Mesh<TP<2>, DP<2>, TP<4>>{}.world_size()); }
