// expect: KL_PENALTY_NEEDS_FLOATING_POINT_LOG_PROBS
// Log-probabilities are real numbers; integer matrices cannot be KL inputs.
#include "verl/algo/kl/penalty.hpp"

int main() {
  verl::RowMatrix<int> lp = verl::RowMatrix<int>::Zero(2, 3);
  const auto kl = verl::algo::kl_penalty(lp, lp, verl::algo::K3{});
  return kl(0, 0);
}
