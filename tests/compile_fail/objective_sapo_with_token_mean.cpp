// expect: THE_POLICY_LOSS_OVERRIDES_THE_REQUESTED_AGGREGATION_MODE
// SAPO always aggregates with seq-mean-token-mean; asking for token-mean must not compile.
#include "verl/algo/actor_objective.hpp"
#include "verl/algo/policy_losses.hpp"

int main() {
  verl::MatrixF m = verl::MatrixF::Ones(2, 2);
  verl::algo::ActorObjective<verl::algo::SAPO, verl::algo::NoKLLoss, verl::algo::TokenMean> objective;
  (void)objective.compute({.policy = {.old_log_prob = m, .log_prob = m, .advantages = m, .response_mask = m}});
}
