// CUDA rollout correction and bypass_mode (include/verl/kernels/rollout_correction.cuh) vs the CPU
// references verl::algo::compute_rollout_correction_and_rejection_mask and verl::algo::BypassMode,
// and vs the kernels' own sequential host walk, on the configurations and batches of
// tests/support/rollout_correction_cases.hpp (every IS level with and without normalisation, each
// rejection option and mixes, empty / single-token / full rows, scattered masks, +-25 and +100
// log-ratios, NaN/inf at padding), plus large batches (many rows; long rows) and the errors.
//
// Tolerances. Against the host walk (same row code, same order, same finish) everything is exact
// except what goes through exp: the device's exp is correctly rounded and glibc's expf is within
// 0.502 ulp, so a weight or a k3 term may differ by 1 ulp (rtol 2.5e-7 on weights; metrics 1e-6).
// Against verl::algo the batch-sum keys (kl, k3_kl, chi2_token, token-level batch-norm factor)
// add their own <= 1-ulp rounding. The corrected mask is compared exactly. bypass_mode's loss and
// gradient use the policy-loss kernels' tolerances (1e-5 relative, as tests/cuda/test_losses.cu).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "../support/rollout_correction_cases.hpp"
#include "cuda_test_support.hpp"
#include "verl/algo/policy_losses/bypass_mode.hpp"
#include "verl/kernels/detail/cuda_check.cuh"
#include "verl/kernels/rollout_correction.cuh"

namespace {

using verl::Index;
using verl::MatrixF;
using verl::Metrics;
using verl::algo::GlobalBatchInfo;
using verl::algo::LossAggMode;
using verl::kernels::DeviceBuffer;
namespace k = verl::kernels;
namespace algo = verl::algo;
using verl::test::CorrectionBatch;
using verl::test::correction_batch;
using verl::test::correction_cases;
using verl::test::expect_same_metrics;

using verl::testing::download;
using verl::testing::upload;


void expect_matrix(const MatrixF& actual, const MatrixF& expected, double rtol, double atol, const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  int shown = 0;
  for (Index i = 0; i < expected.size(); ++i) {
    const float a = actual.data()[i], e = expected.data()[i];
    if (!verl::test::same_value(a, e, rtol, atol) && shown++ < 5)
      ADD_FAILURE() << what << ": element " << i << ": got " << a << ", expected " << e;
  }
}

struct DeviceCorrection {
  Metrics metrics;
  MatrixF weights, mask;
};

DeviceCorrection correction_on_device(const CorrectionBatch& b, const k::RolloutCorrectionParams& params) {
  const Index rows = b.mask.rows(), cols = b.mask.cols();
  auto d_lp = upload(b.log_prob), d_ro = upload(b.rollout_log_prob), d_m = upload(b.mask);
  DeviceBuffer<float> d_w(static_cast<std::size_t>(rows * cols)), d_out(static_cast<std::size_t>(rows * cols));
  const k::RolloutCorrectionBatch in{d_lp.data(), d_ro.data(), d_m.data(), rows, cols};
  std::size_t bytes = 0;
  (void)k::rollout_correction(nullptr, bytes, in, params, nullptr, nullptr);
  DeviceBuffer<unsigned char> temp(bytes);
  DeviceCorrection out;
  out.metrics = k::rollout_correction(temp.data(), bytes, in, params, d_w.data(), d_out.data());
  VERL_CUDA_CHECK(cudaDeviceSynchronize());
  out.weights = download(d_w, rows, cols);
  out.mask = download(d_out, rows, cols);
  return out;
}

std::set<std::string> batch_sum_keys() {
  return {"rollout_corr/kl", "rollout_corr/k3_kl", "rollout_corr/chi2_token",
          "rollout_corr/rollout_is_batch_norm_factor"};
}

void check_correction(const CorrectionBatch& b, const verl::test::CorrectionCase& c, const std::string& shape) {
  const std::string what = c.name + " " + shape;
  const auto params = k::RolloutCorrectionParams::from(c.settings);
  const auto device = correction_on_device(b, params);
  // The host walk: the same code in the same order; only exp differs.
  const Index rows = b.mask.rows(), cols = b.mask.cols();
  const k::RolloutCorrectionBatch host_in{b.log_prob.data(), b.rollout_log_prob.data(), b.mask.data(), rows, cols};
  MatrixF host_weights(rows, cols), host_mask(rows, cols);
  const Metrics host = k::detail::rollout_correction_sequential(host_in, params, host_weights.data(), host_mask.data());
  // k3_kl and chi2_token average exp-based terms that cancel near 0: 1e-7 absolute besides. A
  // 1-ulp exp difference moves a single token's k3 (its extremes: exp(x) - 1 - x near 0) by up
  // to ~2.4e-7 absolute, more than 1e-6 relative: 5e-7 absolute on every key.
  constexpr double kExpUlpAtol = 5e-7;
  expect_same_metrics(device.metrics, host, what + " vs host walk", batch_sum_keys(), 1e-6, 1e-6, 1e-7, kExpUlpAtol);
  // verl::algo.
  const auto expected =
      algo::compute_rollout_correction_and_rejection_mask(b.log_prob, b.rollout_log_prob, b.mask, c.settings);
  expect_same_metrics(device.metrics, expected.metrics, what + " vs verl::algo", batch_sum_keys(), 1e-6, 1e-6, 1e-7,
                      kExpUlpAtol);
  expect_matrix(device.mask, expected.response_mask, 0.0, 0.0, what + " corrected mask");
  if (expected.rollout_is_weights)
    expect_matrix(device.weights, *expected.rollout_is_weights, 5e-7, 0.0, what + " IS weights");
}

TEST(CudaRolloutCorrection, MatchesReferenceOnEveryConfiguration) {
  VERL_REQUIRE_GPU();
  std::uint32_t seed = 1;
  for (const auto& c : correction_cases())
    for (const auto [rows, cols] : {std::pair<Index, Index>{1, 1}, {5, 7}, {6, 8}, {13, 9}, {40, 17}, {33, 70}, {16, 301}}) {
      const std::string shape = "(" + std::to_string(rows) + ", " + std::to_string(cols) + ")";
      check_correction(correction_batch(rows, cols, seed++), c, shape);
      check_correction(correction_batch(rows, cols, seed++, true, true), c, shape + " scattered");
      check_correction(correction_batch(rows, cols, seed++, true, false, true), c, shape + " NaN/inf padding");
    }
}

TEST(CudaRolloutCorrection, LargeBatches) {
  VERL_REQUIRE_GPU();
  // Many rows (many blocks, a ragged last warp) and long rows (thousands of chunks per team).
  const auto token_level = verl::test::correction_case("token", 2.0, true, "token_k1,token_k3,seq_mean_k3,seq_max_k2",
                                                       std::string("0.5_2,0.04,0.05,0.2"));
  const auto sequence_level = verl::test::correction_case("sequence", 3.0, true, "token_k2,seq_sum_k1,seq_mean_k1",
                                                          std::string("0.04,0.3_3,0.9_1.1"));
  check_correction(correction_batch(20001, 13, 11), token_level, "(20001, 13)");
  check_correction(correction_batch(20001, 13, 12, true, true), sequence_level, "(20001, 13) scattered");
  check_correction(correction_batch(7, 40000, 13), token_level, "(7, 40000)");
  check_correction(correction_batch(7, 40000, 14), sequence_level, "(7, 40000)");
}

TEST(CudaRolloutCorrection, RaisesWhereReferenceRaises) {
  VERL_REQUIRE_GPU();
  const auto settings = verl::test::correction_case("token", 2.0, false, "token_k1", 2.0).settings;
  const auto params = k::RolloutCorrectionParams::from(settings);
  CorrectionBatch b = correction_batch(3, 5, 9);
  b.mask.setZero();
  EXPECT_THROW((void)correction_on_device(b, params), std::invalid_argument);
  b.mask(1, 1) = 0.5f;
  EXPECT_THROW((void)correction_on_device(b, params), std::invalid_argument);
  std::size_t bytes = 0;
  const k::RolloutCorrectionBatch empty{nullptr, nullptr, nullptr, 0, 5};
  (void)k::rollout_correction(nullptr, bytes, empty, params, nullptr, nullptr);
  DeviceBuffer<unsigned char> temp(bytes);
  EXPECT_THROW((void)k::rollout_correction(temp.data(), bytes, empty, params, nullptr, nullptr), std::invalid_argument);
}

// ---- bypass_mode end to end ----------------------------------------------------------------------------

struct DeviceBypass {
  k::BypassModeResult result;
  k::PolicyLossState stored;  ///< what the kernel left in its device `state`
  MatrixF grad;
};

DeviceBypass bypass_on_device(const algo::BypassMode& reference, const CorrectionBatch& b, LossAggMode mode,
                              const GlobalBatchInfo& info) {
  const Index rows = b.mask.rows(), cols = b.mask.cols();
  auto d_old = upload(b.rollout_log_prob), d_lp = upload(b.log_prob), d_adv = upload(b.advantages),
       d_m = upload(b.mask);
  DeviceBuffer<float> d_grad(static_cast<std::size_t>(rows * cols));
  DeviceBuffer<k::PolicyLossState> d_state(1);
  k::PolicyLossInputs in;
  in.old_log_prob = d_old.data();
  in.log_prob = d_lp.data();
  in.advantages = d_adv.data();
  in.response_mask = d_m.data();
  in.rows = rows;
  in.cols = cols;
  const auto params = k::kernel_policy_loss(reference);
  std::size_t bytes = 0;
  (void)k::bypass_mode_policy_loss(nullptr, bytes, in, params, mode, info, nullptr, nullptr);
  DeviceBuffer<unsigned char> temp(bytes);
  DeviceBypass out;
  out.result = k::bypass_mode_policy_loss(temp.data(), bytes, in, params, mode, info, d_grad.data(), d_state.data());
  out.grad = download(d_grad, rows, cols);
  out.stored = d_state.download().at(0);
  return out;
}

void check_bypass(const algo::BypassMode& reference, const CorrectionBatch& b, LossAggMode mode,
                  const GlobalBatchInfo& info, const std::string& what) {
  const algo::PolicyLossBatch batch{b.rollout_log_prob, b.log_prob, b.advantages, b.mask};
  const auto expected = reference.compute(batch, {mode, info});
  const DeviceBypass device = bypass_on_device(reference, b, mode, info);
  const k::PolicyLossState& s = device.result.state;
  // The state written to the device and the one returned are the same bits (NaN included: a
  // batch whose every token is rejected, or NaN inputs, give verl's NaN loss).
  EXPECT_TRUE(verl::test::same_value(device.stored.pg_loss, s.pg_loss, 0.0)) << what;
  EXPECT_TRUE(verl::test::same_value(s.pg_loss, expected.pg_loss, 1e-5, 1e-7))
      << what << " pg_loss: got " << s.pg_loss << ", expected " << expected.pg_loss;
  expect_same_metrics(device.result.metrics, expected.metrics, what, {}, 0.0, 1e-5, 0.0, 5e-7);
  expect_matrix(device.grad, expected.grad_log_prob, 1e-5, 1e-7, what + " grad");
}

TEST(CudaRolloutCorrection, BypassModeMatchesReference) {
  VERL_REQUIRE_GPU();
  GlobalBatchInfo custom;
  custom.dp_size = 2;
  custom.batch_num_tokens = 257;
  custom.global_batch_size = 16;
  custom.loss_scale_factor = 32;
  std::uint32_t seed = 300;
  const auto cases = correction_cases();
  for (std::size_t n = 0; n < cases.size(); n += 3)
    for (const auto loss_type : {algo::BypassLossType::ppo_clip, algo::BypassLossType::reinforce})
      for (const auto mode : {LossAggMode::token_mean, LossAggMode::seq_mean_token_sum,
                              LossAggMode::seq_mean_token_mean, LossAggMode::seq_mean_token_sum_norm})
        for (const GlobalBatchInfo& info : {GlobalBatchInfo{}, custom}) {
          algo::BypassMode reference;
          reference.loss_type = loss_type;
          reference.ppo_clip = algo::VanillaPPO{.clip_ratio_low = 0.2, .clip_ratio_high = 0.28, .clip_ratio_c = 3.0};
          reference.rollout_correction = cases[n].settings;
          const std::string what = std::string(algo::to_string(loss_type)) + " " +
                                   std::string(algo::to_string(mode)) + " " + cases[n].name;
          check_bypass(reference, correction_batch(21, 37, seed++, true, n % 2 == 1), mode, info, what);
          check_bypass(reference, correction_batch(24, 45, seed++, true, false, true), mode, info, what + " garbage");
          check_bypass(reference, correction_batch(130, 300, seed++), mode, info, what + " (130, 300)");
        }
}

TEST(CudaRolloutCorrection, BypassModeRaisesOnAnEmptyMask) {
  VERL_REQUIRE_GPU();
  CorrectionBatch b = correction_batch(3, 4, 1);
  b.mask.setZero();
  algo::BypassMode reference;
  try {
    (void)bypass_on_device(reference, b, LossAggMode::token_mean, {});
    ADD_FAILURE() << "an all-zero mask must raise";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("bypass_mode"), std::string::npos) << e.what();
  }
}

}  // namespace
