// expect: AGG_LOSS_NEEDS_A_FLOATING_POINT_LOSS_MATRIX
// The gradient W of agg_loss holds fractions such as 1/len: an integer result type is a bug.
#include "verl/algo/loss_aggregation.hpp"

int main() {
  verl::MatrixF mask = verl::MatrixF::Ones(2, 3);
  const auto w = verl::algo::agg_loss_weights<int>(mask, verl::algo::LossAggMode::token_mean);
  return w(0, 0);
}
