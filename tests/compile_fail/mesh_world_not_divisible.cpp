// expect: WORLD_SIZE_MUST_BE_DIVISIBLE_BY_THE_OTHER_AXES
// 8 ranks cannot host tp=3: dp cannot be inferred.
#include "verl/parallel/mesh.hpp"

using namespace verl::parallel;
int main() { return static_cast<int>(MeshOfWorld<8, TP<3>, DP<inferred>>{}.world_size()); }
