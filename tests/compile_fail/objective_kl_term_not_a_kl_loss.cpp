// expect: THE_KL_TERM_MUST_BE_NoKLLoss_OR_KLLoss_OF_A_KL_ESTIMATOR
// The KL term must be NoKLLoss or KLLoss<E>; a bare estimator is a mistake worth naming.
#include "verl/algo/actor_objective.hpp"
#include "verl/algo/policy_losses.hpp"

int main() {
  verl::algo::ActorObjective<verl::algo::VanillaPPO, verl::algo::LowVarKL> objective;
  (void)objective;
}
