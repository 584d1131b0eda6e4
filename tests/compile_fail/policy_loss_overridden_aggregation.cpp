// expect: THE_POLICY_LOSS_OVERRIDES_THE_REQUESTED_AGGREGATION_MODE
// SAPO always aggregates with seq-mean-token-mean (GSPO follows the mode since verl 0.9.1); asking
// for token-mean at compile time would be silently ignored at runtime, so it is an error here.
#include "verl/algo/policy_losses.hpp"

int main() {
  verl::MatrixF m = verl::MatrixF::Ones(2, 2);
  const verl::algo::PolicyLossBatch batch{m, m, m, m};
  return static_cast<int>(verl::algo::compute_policy_loss<verl::algo::TokenMean>(verl::algo::SAPO{}, batch).pg_loss);
}
