// expect: TRAIN_TP_MUST_BE_A_MULTIPLE_OF_GEN_TP
// The actor trains at tp 4 and generates at tp 3: a generation shard is not a union of training shards.
#include "verl/trainer/layouts.hpp"

using namespace verl::parallel;
using Actor = verl::trainer::Layouts<Mesh<TP<4>, DP<>>, Mesh<TP<3>, DP<>>>;
int main() { return static_cast<int>(sizeof(Actor)); }
