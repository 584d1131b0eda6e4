// expect: rank: expected a rank in [0, {}), got {}
// With static sizes, a rank outside the mesh is a compile error in a constant expression.
#include "verl/parallel/mesh.hpp"

using namespace verl::parallel;
constexpr auto coords = Mesh<TP<2>, DP<2>>{}.coords(4);
int main() { return static_cast<int>(coords[0]); }
