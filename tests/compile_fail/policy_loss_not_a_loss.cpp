// expect: THE_LOSS_TYPE_DOES_NOT_SATISFY_THE_POLICY_LOSS_CONCEPT
// A type without verl's name, an aggregation rule and compute() is not a policy loss.
#include "verl/algo/policy_losses.hpp"

struct ClippedButNameless {
  double clip_ratio = 0.2;
};

int main() {
  verl::MatrixF m = verl::MatrixF::Ones(2, 2);
  const verl::algo::PolicyLossBatch batch{m, m, m, m};
  return static_cast<int>(verl::algo::compute_policy_loss(ClippedButNameless{}, batch).pg_loss);
}
