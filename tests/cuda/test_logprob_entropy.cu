// CUDA log-prob / entropy forward and backward vs the CPU reference (algo/logprob_entropy.hpp).
// Tolerances (the kernels accumulate in float with ex2.approx; the reference in double):
//   row_max: exact; log_normalizer, entropy, log_probs: 2e-5 absolute + 2e-5 relative;
//   sum_pi_squared: 1e-4 relative; gradients: 1e-4 relative + 1e-5 of the row's largest |grad|
//   (fp32), one bf16 rounding step (2^-7 relative) more for bf16 outputs.
#include <cuda_bf16.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "cuda_test_support.hpp"
#include "verl/kernels/detail/cuda_check.cuh"
#include "verl/kernels/logprob_entropy.cuh"

namespace {

using verl::Index;
using verl::kernels::LogitsShape;

using verl::kernels::DeviceBuffer;

/// Host element type (Eigen) and device element type (CUDA) of the same bits.
template <class Host>
using DeviceOf = std::conditional_t<std::is_same_v<Host, float>, float, __nv_bfloat16>;

template <class Host>
verl::RowMatrix<Host> random_logits(Index rows, Index stride, std::uint32_t seed, float scale = 4.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  verl::RowMatrix<Host> m(rows, stride);
  for (Index i = 0; i < rows; ++i)
    for (Index j = 0; j < stride; ++j) m(i, j) = Host(normal(rng));
  return m;
}

std::vector<std::int64_t> random_labels(Index rows, Index vocab, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<std::int64_t> pick(0, vocab - 1);
  std::vector<std::int64_t> labels(static_cast<std::size_t>(rows));
  for (auto& l : labels) l = pick(rng);
  return labels;
}

std::vector<float> random_cotangent(Index rows, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(static_cast<std::size_t>(rows));
  for (auto& x : v) x = u(rng);
  return v;
}

void expect_close(float actual, float expected, float atol, float rtol, const char* what, Index row) {
  if (std::isnan(expected)) {
    EXPECT_TRUE(std::isnan(actual)) << what << " row " << row;
    return;
  }
  if (std::isinf(expected)) {
    EXPECT_EQ(actual, expected) << what << " row " << row;
    return;
  }
  EXPECT_NEAR(actual, expected, atol + rtol * std::abs(expected)) << what << " row " << row;
}

struct Case {
  Index rows, vocab, stride;
  float temperature;
};

/// Runs forward and backward on the GPU and compares with the CPU reference. The logits are
/// the first `vocab` columns of a (rows, stride) matrix, so rows start at any element offset.
template <class Host>
void check_case(const Case& c, std::uint32_t seed, bool in_place = false, bool mask_some = false) {
  using Device = DeviceOf<Host>;
  verl::RowMatrix<Host> full = random_logits<Host>(c.rows, c.stride, seed);
  if (mask_some) {
    // A vocabulary masked with -inf (and one row entirely -inf but one entry).
    for (Index i = 0; i < c.rows; ++i)
      for (Index j = 0; j < c.vocab; j += 3) full(i, j) = Host(-std::numeric_limits<float>::infinity());
    for (Index j = 1; j < c.vocab; ++j) full(0, j) = Host(-std::numeric_limits<float>::infinity());
  }
  const verl::RowMatrix<Host> logits = full.leftCols(c.vocab);
  std::vector<std::int64_t> labels = random_labels(c.rows, c.vocab, seed + 1);
  if (mask_some) {
    for (Index i = 0; i < c.rows; ++i)
      if (labels[static_cast<std::size_t>(i)] % 3 == 0) labels[static_cast<std::size_t>(i)] = (c.vocab > 1 && i > 0) ? 1 : 0;
    labels[0] = 0;
  }
  const auto ref = verl::kernels::logprob_entropy_reference(logits, labels, c.temperature);

  const auto n = static_cast<std::size_t>(c.rows);
  DeviceBuffer<Device> d_logits(n * static_cast<std::size_t>(c.stride));
  d_logits.upload(full.data());
  DeviceBuffer<std::int64_t> d_labels(n);
  d_labels.upload(labels.data());
  DeviceBuffer<float> d_lp(n), d_h(n), d_q(n), d_max(n), d_ln(n);
  const LogitsShape shape{c.rows, c.vocab, c.stride};
  verl::kernels::logprob_entropy_forward(d_logits.data(), shape, d_labels.data(), c.temperature,
                                         {d_lp.data(), d_h.data(), d_q.data(), d_max.data(), d_ln.data()});
  VERL_CUDA_CHECK(cudaDeviceSynchronize());
  const auto lp = d_lp.download(), h = d_h.download(), q = d_q.download(), mx = d_max.download(),
             ln = d_ln.download();
  for (Index i = 0; i < c.rows; ++i) {
    const auto k = static_cast<std::size_t>(i);
    EXPECT_EQ(mx[k], ref.row_max[i]) << "row_max row " << i;
    expect_close(ln[k], ref.log_normalizer[i], 2e-5f, 2e-5f, "log_normalizer", i);
    expect_close(h[k], ref.entropy[i], 2e-5f, 2e-5f, "entropy", i);
    expect_close(lp[k], ref.log_probs[i], 2e-5f, 2e-5f, "log_probs", i);
    expect_close(q[k], ref.sum_pi_squared[i], 1e-7f, 1e-4f, "sum_pi_squared", i);
  }

  // Backward with all three cotangents; row 1 (when present) gets all-zero cotangents.
  std::vector<float> g_lp = random_cotangent(c.rows, seed + 2), g_h = random_cotangent(c.rows, seed + 3),
                     g_q = random_cotangent(c.rows, seed + 4);
  if (c.rows > 1) g_lp[1] = g_h[1] = g_q[1] = 0.0f;
  const verl::algo::LogprobEntropyCotangents cot{g_lp, g_h, g_q};
  const auto ref_grad = verl::kernels::logprob_entropy_backward_reference(logits, labels, ref, cot, c.temperature);
  DeviceBuffer<float> d_glp(n), d_gh(n), d_gq(n);
  d_glp.upload(g_lp.data());
  d_gh.upload(g_h.data());
  d_gq.upload(g_q.data());
  DeviceBuffer<Device> d_grad(in_place ? 0 : n * static_cast<std::size_t>(c.stride));
  Device* grad = in_place ? d_logits.data() : d_grad.data();
  verl::kernels::logprob_entropy_backward(d_logits.data(), shape, d_labels.data(), c.temperature,
                                          {d_max.data(), d_ln.data(), d_h.data(), d_q.data()},
                                          {d_glp.data(), d_gh.data(), d_gq.data()}, grad, c.stride);
  VERL_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<Device> got = in_place ? d_logits.download() : d_grad.download();
  const float bf16_slack = std::is_same_v<Host, float> ? 0.0f : 0x1.0p-7f;
  for (Index i = 0; i < c.rows; ++i) {
    float row_scale = 0;
    for (Index j = 0; j < c.vocab; ++j) row_scale = std::max(row_scale, std::abs(static_cast<float>(ref_grad(i, j))));
    int failures = 0;
    for (Index j = 0; j < c.vocab && failures < 5; ++j) {
      Host value;
      std::memcpy(&value, &got[static_cast<std::size_t>(i * c.stride + j)], sizeof(Host));
      const float actual = static_cast<float>(value), expected = static_cast<float>(ref_grad(i, j));
      // A row with -inf logits has NaN gradients (0 * -inf in the entropy, as in PyTorch's
      // autograd of verl's formula): both sides must then be NaN.
      if (std::isnan(expected) || std::isnan(actual)) {
        if (std::isnan(expected) != std::isnan(actual)) {
          ++failures;
          ADD_FAILURE() << "grad(" << i << ", " << j << "): " << actual << " vs " << expected;
        }
        continue;
      }
      const float tol = 1e-5f * (std::isfinite(row_scale) ? row_scale : 0.0f) + (1e-4f + bf16_slack) * std::abs(expected);
      if (!(std::abs(actual - expected) <= tol)) {
        ++failures;
        ADD_FAILURE() << "grad(" << i << ", " << j << "): " << actual << " vs " << expected << " (tol " << tol << ")";
      }
    }
  }
}

TEST(CudaLogprobEntropy, Fp32Random) {
  VERL_REQUIRE_GPU();
  check_case<float>({8, 1000, 1000, 1.0f}, 11);
  check_case<float>({5, 4099, 4099, 0.7f}, 12);
}

TEST(CudaLogprobEntropy, Bf16Random) {
  VERL_REQUIRE_GPU();
  check_case<Eigen::bfloat16>({8, 1000, 1000, 1.0f}, 21);
  check_case<Eigen::bfloat16>({5, 4099, 4099, 1.3f}, 22);
}

TEST(CudaLogprobEntropy, EdgeShapes) {
  VERL_REQUIRE_GPU();
  check_case<float>({1, 1, 1, 1.0f}, 31);              // V = 1: log-prob 0, entropy 0
  check_case<Eigen::bfloat16>({3, 1, 1, 0.5f}, 32);
  check_case<float>({4, 7, 7, 1.0f}, 33);              // V = 7: every row misaligned, all tail
  check_case<Eigen::bfloat16>({4, 7, 9, 2.0f}, 34);    // stride != V
  check_case<float>({3, 1037, 1041, 0.9f}, 35);        // heads, vectors and tails in one row
  check_case<Eigen::bfloat16>({3, 1037, 1043, 1.0f}, 36);
}

TEST(CudaLogprobEntropy, QwenVocabulary) {
  VERL_REQUIRE_GPU();
  check_case<float>({1, 151936, 151936, 1.0f}, 41);  // a single row
  check_case<Eigen::bfloat16>({3, 151936, 151936, 0.6f}, 42);
}

TEST(CudaLogprobEntropy, MaskedVocabulary) {
  VERL_REQUIRE_GPU();
  check_case<float>({4, 300, 300, 1.0f}, 51, false, true);
  check_case<Eigen::bfloat16>({4, 301, 301, 0.8f}, 52, false, true);
}

TEST(CudaLogprobEntropy, BackwardInPlace) {
  VERL_REQUIRE_GPU();
  check_case<float>({4, 2053, 2053, 1.0f}, 61, true);
  check_case<Eigen::bfloat16>({4, 2053, 2055, 0.75f}, 62, true);
}

TEST(CudaLogprobEntropy, LabelOutOfRangeIsNaN) {
  VERL_REQUIRE_GPU();
  const std::vector<float> logits = {0.0f, 1.0f, 2.0f};
  const std::vector<std::int64_t> labels = {3};
  DeviceBuffer<float> d_logits(3), d_out(5);
  d_logits.upload(logits.data());
  DeviceBuffer<std::int64_t> d_labels(1);
  d_labels.upload(labels.data());
  verl::kernels::logprob_entropy_forward(d_logits.data(), LogitsShape{1, 3, 3}, d_labels.data(), 1.0f,
                                         {d_out.data(), d_out.data() + 1, nullptr, d_out.data() + 3, d_out.data() + 4});
  VERL_CUDA_CHECK(cudaDeviceSynchronize());
  const auto out = d_out.download();
  EXPECT_TRUE(std::isnan(out[0]));
  EXPECT_EQ(out[3], 2.0f);
}

TEST(CudaLogprobEntropy, NoRowsLaunchesNothing) {
  VERL_REQUIRE_GPU();
  EXPECT_NO_THROW(verl::kernels::logprob_entropy_forward<float>(nullptr, LogitsShape{0, 5, 5}, nullptr, 1.0f, {}));
}

TEST(CudaLogprobEntropy, HostConveniencesMatchTheReference) {
  VERL_REQUIRE_GPU();
  // A block of a wider matrix: rows are strided on the host and copied packed.
  const verl::RowMatrix<float> wide = random_logits<float>(6, 523, 71);
  const auto logits = wide.leftCols(517);
  const std::vector<std::int64_t> labels = random_labels(6, 517, 72);
  const auto ref = verl::kernels::logprob_entropy_reference(logits, labels, 0.9f);
  const auto got = verl::kernels::logprob_entropy_on_device(logits, labels, 0.9f);
  for (Index i = 0; i < 6; ++i) {
    expect_close(got.log_probs[i], ref.log_probs[i], 2e-5f, 2e-5f, "log_probs", i);
    expect_close(got.entropy[i], ref.entropy[i], 2e-5f, 2e-5f, "entropy", i);
    EXPECT_EQ(got.row_max[i], ref.row_max[i]);
  }
  const std::vector<float> g_lp = random_cotangent(6, 73);
  const verl::algo::LogprobEntropyCotangents cot{g_lp, {}, {}};  // log-probs only, as verl's functional case
  const auto ref_grad = verl::kernels::logprob_entropy_backward_reference(logits, labels, ref, cot, 0.9f);
  const auto grad = verl::kernels::logprob_entropy_backward_on_device(logits, labels, cot, 0.9f);
  ASSERT_EQ(grad.rows(), 6);
  ASSERT_EQ(grad.cols(), 517);
  for (Index i = 0; i < 6; ++i)
    for (Index j = 0; j < 517; ++j) EXPECT_NEAR(grad(i, j), ref_grad(i, j), 1e-6f + 1e-4f * std::abs(ref_grad(i, j)));
  EXPECT_THROW(verl::kernels::logprob_entropy_on_device(logits, std::vector<std::int64_t>(6, 517), 1.0f),
               verl::InvalidArgument);
}

}  // namespace
