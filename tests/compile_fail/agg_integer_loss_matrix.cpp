// expect: AGG_LOSS_NEEDS_A_FLOATING_POINT_LOSS_MATRIX
// agg_loss reduces a float or double loss; an integer loss matrix is a caller bug (verl's losses
// are float tensors), caught at compile time.
#include "verl/algo/loss_aggregation.hpp"

int main() {
  verl::RowMatrix<int> loss = verl::RowMatrix<int>::Ones(2, 3);
  verl::MatrixF mask = verl::MatrixF::Ones(2, 3);
  return static_cast<int>(verl::algo::agg_loss(loss, mask, verl::algo::LossAggMode::token_mean));
}
