// expect: LOGITS_MUST_BE_FLOAT_OR_BFLOAT16
// The fused logits kernel reads float or bfloat16 logits; double is a misuse named at compile time.
#include <cstdint>
#include <vector>

#include "verl/algo/logits/logprob_entropy.hpp"

int main() {
  const verl::MatrixD logits = verl::MatrixD::Zero(2, 3);
  const std::vector<std::int64_t> labels = {0, 1};
  (void)verl::algo::fused_logprob_entropy(logits, labels);
}
