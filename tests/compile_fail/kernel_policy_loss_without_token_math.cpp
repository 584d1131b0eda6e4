// expect: POLICY_LOSS_KERNEL_NEEDS_A_KERNEL_POLICY_LOSS_WITH_ROW_TYPE_FLAGS_AND_TOKEN_MATH
// A verl::algo loss is not a kernel loss: the fused kernel needs the parameter struct with its
// per-token math (kernel_policy_loss(algo_loss) gives it).
#include <vector>

#include "verl/kernels/policy_loss.hpp"

int main() {
  std::vector<float> data(4, 0.0f), grad(4);
  verl::kernels::PolicyLossInputs in{data.data(), data.data(), data.data(), false, data.data(), nullptr, 2, 2};
  const auto state = verl::kernels::detail::policy_loss_sequential(in, verl::algo::CISPO{},
                                                                   verl::algo::LossAggMode::token_mean, {}, grad.data());
  return static_cast<int>(state.pg_loss);
}
