// expect: GAE_NEEDS_A_CRITIC_MODEL
// A trainer without a critic model cannot use GAE: the composition is rejected at compile time.
#include "verl/algo/advantages.hpp"

int main() {
  verl::algo::require_critic<verl::algo::GAE, /*HasCritic=*/false>();
  return 0;
}
