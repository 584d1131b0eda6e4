// A downstream project's program: includes verl-cpp's umbrella header and computes a loss.
#include <verl/verl.hpp>

#include <cmath>
#include <cstdio>

int main() {
  verl::MatrixF loss(2, 3);
  loss << 1, 2, 3, 4, 5, 6;
  verl::MatrixF mask(2, 3);
  mask << 1, 1, 0, 1, 0, 0;
  const float token_mean = verl::algo::agg_loss<verl::algo::TokenMean>(loss, mask);
  const double mean = verl::algo::masked_mean(loss, mask);
  std::printf("verl %s: token-mean %.4f masked_mean %.4f\n", verl::version_string, token_mean, mean);
  return std::abs(token_mean - 7.0f / 3.0f) < 1e-6f && std::abs(mean - 7.0 / 3.0) < 1e-6 ? 0 : 1;
}
