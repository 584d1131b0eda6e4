// expect: KL_PENALTY_LOG_PROBS_MUST_SHARE_ONE_SCALAR_TYPE
// A float logprob against a double ref_logprob would silently round one of them; the caller must
// choose the precision.
#include "verl/algo/kl/penalty.hpp"

int main() {
  verl::MatrixF lp = verl::MatrixF::Zero(2, 3);
  verl::MatrixD ref = verl::MatrixD::Zero(2, 3);
  const auto kl = verl::algo::kl_penalty(lp, ref, verl::algo::KL{});
  return static_cast<int>(kl(0, 0));
}
