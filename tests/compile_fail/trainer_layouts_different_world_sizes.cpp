// expect: TRAIN_AND_GEN_MESHES_MUST_HAVE_THE_SAME_WORLD_SIZE
// Training on 4 ranks, generating on 2: the 3D-HybridEngine reshards over the same ranks.
#include "verl/trainer/layouts.hpp"

using namespace verl::parallel;
using Actor = verl::trainer::Layouts<Mesh<TP<2>, DP<2>>, Mesh<TP<1>, DP<2>>>;
int main() { return static_cast<int>(sizeof(Actor)); }
