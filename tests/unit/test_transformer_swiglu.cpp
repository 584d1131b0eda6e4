// SwiGLU's vectorized element-wise kernels against a double-precision reference: values over the
// whole float range (the exp argument is clamped at +-87), NaN, lengths that leave a scalar tail,
// and the gradient against central differences of the reference.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "verl/cpu/swiglu.hpp"

namespace {

using verl::Index;
using namespace verl::cpu;
namespace cpu = verl::cpu;

double sigmoid(double g) { return 1.0 / (1.0 + std::exp(-g)); }
double swiglu_reference(double g, double u) { return g * sigmoid(g) * u; }

std::vector<float> random_values(std::size_t n, unsigned seed, float scale) {
  std::mt19937 engine(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = normal(engine);
  return v;
}

/// Relative error with a floor, so that values near 0 compare absolutely.
void expect_close(float actual, double expected, double tolerance, const char* what, std::size_t i) {
  EXPECT_LE(std::abs(static_cast<double>(actual) - expected), tolerance * std::max(1.0, std::abs(expected)))
      << what << "[" << i << "] = " << actual << ", expected " << expected;
}

TEST(SwiGLU, ForwardAndBackwardMatchADoubleReference) {
  for (const std::size_t n : {1u, 15u, 16u, 37u, 1000u}) {
    auto gate = random_values(n, 1, 4.0f);
    const auto up = random_values(n, 2, 1.0f), d_act = random_values(n, 3, 1.0f);
    if (n > 4) {  // beyond the exp clamp on both sides
      gate[0] = 120.0f;
      gate[1] = -120.0f;
      gate[2] = 87.5f;
      gate[3] = -87.5f;
    }
    std::vector<float> out(n), d_gate(n), d_up(n);
    cpu::swiglu_forward(gate.data(), up.data(), out.data(), static_cast<Index>(n));
    cpu::swiglu_backward(d_act.data(), gate.data(), up.data(), d_gate.data(), d_up.data(), static_cast<Index>(n));
    for (std::size_t i = 0; i < n; ++i) {
      const double g = gate[i], u = up[i], s = sigmoid(g);
      expect_close(out[i], swiglu_reference(g, u), 1e-6, "out", i);
      expect_close(d_up[i], d_act[i] * g * s, 1e-6, "d_up", i);
      expect_close(d_gate[i], d_act[i] * u * s * (1.0 + g * (1.0 - s)), 1e-6, "d_gate", i);
    }
  }
}

TEST(SwiGLU, GradientMatchesCentralDifferences) {
  const std::size_t n = 40;
  const auto gate = random_values(n, 4, 2.0f), up = random_values(n, 5, 1.0f), d_act = random_values(n, 6, 1.0f);
  std::vector<float> d_gate(n), d_up(n);
  cpu::swiglu_backward(d_act.data(), gate.data(), up.data(), d_gate.data(), d_up.data(), static_cast<Index>(n));
  const double h = 1e-4;
  for (std::size_t i = 0; i < n; ++i) {
    const double g = gate[i], u = up[i], da = d_act[i];
    const double fd_gate = da * (swiglu_reference(g + h, u) - swiglu_reference(g - h, u)) / (2 * h);
    const double fd_up = da * (swiglu_reference(g, u + h) - swiglu_reference(g, u - h)) / (2 * h);
    expect_close(d_gate[i], fd_gate, 1e-5, "d_gate", i);
    expect_close(d_up[i], fd_up, 1e-5, "d_up", i);
  }
}

// Data-parallel ranks hold other numbers of rows than one process: an element's result must not
// depend on where it sits in the array (vector body or tail).
TEST(SwiGLU, AnElementsResultDoesNotDependOnItsPosition) {
  const std::size_t n = 53;
  const auto gate = random_values(n, 7, 3.0f), up = random_values(n, 8, 1.0f), d_act = random_values(n, 9, 1.0f);
  std::vector<float> out(n), d_gate(n), d_up(n);
  cpu::swiglu_forward(gate.data(), up.data(), out.data(), static_cast<Index>(n));
  cpu::swiglu_backward(d_act.data(), gate.data(), up.data(), d_gate.data(), d_up.data(), static_cast<Index>(n));
  for (const std::size_t offset : {1u, 5u, 17u, 40u}) {
    const std::size_t m = n - offset;
    std::vector<float> o(m), dg(m), du(m);
    cpu::swiglu_forward(gate.data() + offset, up.data() + offset, o.data(), static_cast<Index>(m));
    cpu::swiglu_backward(d_act.data() + offset, gate.data() + offset, up.data() + offset, dg.data(), du.data(),
                    static_cast<Index>(m));
    for (std::size_t i = 0; i < m; ++i) {
      EXPECT_EQ(o[i], out[offset + i]) << "offset " << offset << " element " << i;
      EXPECT_EQ(dg[i], d_gate[offset + i]) << "offset " << offset << " element " << i;
      EXPECT_EQ(du[i], d_up[offset + i]) << "offset " << offset << " element " << i;
    }
  }
}

TEST(SwiGLU, NaNStaysNaN) {
  std::vector<float> gate(20, 0.5f), up(20, 1.0f), out(20), d_act(20, 1.0f), d_gate(20), d_up(20);
  gate[3] = std::numeric_limits<float>::quiet_NaN();   // a vector lane
  gate[19] = std::numeric_limits<float>::quiet_NaN();  // the scalar tail
  cpu::swiglu_forward(gate.data(), up.data(), out.data(), 20);
  cpu::swiglu_backward(d_act.data(), gate.data(), up.data(), d_gate.data(), d_up.data(), 20);
  for (const std::size_t i : {3u, 19u}) {
    EXPECT_TRUE(std::isnan(out[i])) << i;
    EXPECT_TRUE(std::isnan(d_gate[i])) << i;
    EXPECT_TRUE(std::isnan(d_up[i])) << i;
  }
  EXPECT_FALSE(std::isnan(out[4]));
}

}  // namespace
