// CUDA masked reductions, loss aggregation, the policy, value and entropy losses and KL penalties vs the CPU
// references (verl::algo), on random batches with fully masked rows, single-token rows and garbage
// (inf/NaN) at masked positions, plus host-side checks of the element-wise math the kernels share
// with the host (these run without a GPU).
// Tolerances: sums are in double on both sides but in another order: 1e-5 relative; element-wise
// results use expf on the device (<= 2 ulp): 1e-6 relative + 1e-6 absolute.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "cuda_test_support.hpp"
#include "../support/random_loss_batch.hpp"
#include "verl/algo/kl/rewards.hpp"
#include "verl/kernels/detail/cuda_check.cuh"
#include "verl/kernels/kl_penalty.cuh"
#include "verl/kernels/masked_reductions.cuh"
#include "verl/kernels/policy_loss.cuh"
#include "verl/kernels/entropy_loss.cuh"
#include "verl/kernels/value_loss.cuh"
#include "verl/algo/entropy_loss.hpp"
#include "verl/algo/value_loss.hpp"

namespace {

using verl::Index;
using verl::MatrixF;
namespace k = verl::kernels;
using verl::algo::GlobalBatchInfo;
using verl::algo::LossAggMode;

using verl::kernels::DeviceBuffer;

using verl::testing::upload;

void expect_close(const std::vector<float>& actual, const MatrixF& expected, float atol, float rtol,
                  const std::string& what) {
  ASSERT_EQ(actual.size(), static_cast<std::size_t>(expected.size())) << what;
  for (std::size_t i = 0; i < actual.size(); ++i) {
    const float e = expected.data()[i], a = actual[i];
    if (std::isnan(e) && std::isnan(a)) continue;
    ASSERT_LE(std::abs(a - e), atol + rtol * std::abs(e)) << what << ": element " << i << ": got " << a
                                                          << ", expected " << e;
  }
}

void expect_scalar(double actual, double expected, double rtol, const std::string& what, double atol = 1e-7) {
  if (std::isnan(expected)) {
    EXPECT_TRUE(std::isnan(actual)) << what << ": got " << actual << ", expected NaN";
    return;
  }
  EXPECT_LE(std::abs(actual - expected), atol + rtol * std::abs(expected))
      << what << ": got " << actual << ", expected " << expected;
}

using verl::test::random_mask;
using verl::test::random_matrix;

// ---- host-side checks of the shared element-wise math (no GPU needed) --------------------------

TEST(CudaLossesHost, KlElementMathMatchesReference) {
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 8.0f);  // wide: hits the +-20 and +-10 clamps of k3
  for (const auto type : {k::KlType::kl, k::KlType::abs, k::KlType::mse, k::KlType::low_var_kl}) {
    k::with_reference_estimator(type, [&](const auto& estimator) {
      for (int n = 0; n < 2000; ++n) {
        const float lp = normal(rng), ref = normal(rng), cot = normal(rng);
        EXPECT_EQ(k::kl_value(type, lp, ref), estimator.value(lp, ref));
        EXPECT_EQ(k::kl_grad_logprob(type, lp, ref, cot), estimator.grad_logprob(lp, ref, cot));
      }
      EXPECT_EQ(k::kl_grad_logprob(type, 1.0f, 1.0f, 2.0f), estimator.grad_logprob(1.0f, 1.0f, 2.0f));
      return 0;
    });
  }
  EXPECT_EQ(k::parse_kl_type("k3"), k::KlType::low_var_kl);
  EXPECT_THROW((void)k::parse_kl_type("k3+"), verl::NotImplemented);  // no straight-through kernel gradient yet
  EXPECT_THROW((void)k::parse_kl_type("k4"), verl::InvalidArgument);
}

TEST(CudaLossesHost, AggregationMatchesReference) {
  std::mt19937 rng(2);
  const MatrixF mask = random_mask(37, 11, rng);
  const verl::algo::detail::MaskCounts counts = verl::algo::detail::count_mask("loss_mask", mask);
  GlobalBatchInfo custom;
  custom.dp_size = 4;
  custom.batch_num_tokens = 123;
  custom.global_batch_size = 50;
  custom.loss_scale_factor = 7;
  for (const auto mode : {LossAggMode::token_mean, LossAggMode::seq_mean_token_sum, LossAggMode::seq_mean_token_mean,
                          LossAggMode::seq_mean_token_sum_norm})
    for (const GlobalBatchInfo& info : {GlobalBatchInfo{}, custom}) {
      const auto expected = verl::algo::detail::make_aggregation<float>(mode, counts, info);
      const auto actual = k::make_aggregation(k::AggregationParams::from(mode, info), counts.tokens,
                                              counts.nonempty_rows, counts.cols);
      EXPECT_EQ(actual.scale, expected.scale) << verl::algo::to_string(mode);
      for (Index len : {0, 1, 5, 11}) {
        EXPECT_EQ(actual.drops(len), expected.drops(len));
        EXPECT_EQ(actual.row_weight(len), expected.row_weight(len));
        EXPECT_EQ(actual.gradient_weight(len), expected.gradient_weight(len));
      }
    }
}

TEST(CudaLossesHost, VanillaTokenMathMatchesReferenceLoss) {
  // One row at a time through verl::algo::VanillaPPO with seq-mean-token-sum-norm (scale 1/T,
  // no dropped rows): the gradient of a single-token batch is the token's own gradient.
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 0.4f);
  const auto params = k::VanillaPPOParams::from(0.2, 0.28, 3.0);
  verl::algo::VanillaPPO reference{.clip_ratio_low = 0.2, .clip_ratio_high = 0.28, .clip_ratio_c = 3.0};
  const verl::algo::AggregationContext context{LossAggMode::seq_mean_token_sum_norm, {}};
  for (int n = 0; n < 500; ++n) {
    MatrixF lp(1, 1), old(1, 1), adv(1, 1), mask = MatrixF::Ones(1, 1);
    lp(0, 0) = normal(rng);
    old(0, 0) = normal(rng);
    adv(0, 0) = 3.0f * normal(rng);
    if (n % 50 == 0) old(0, 0) = lp(0, 0) - 30.0f;  // the +-20 clamp
    const auto expected = reference.compute({old, lp, adv, mask}, context);
    const auto tok = k::vanilla_ppo_token(params, lp(0, 0), old(0, 0), adv(0, 0), 1.0f, 1.0f, 1.0f, false);
    EXPECT_FLOAT_EQ(tok.loss_term, expected.pg_loss);
    EXPECT_FLOAT_EQ(tok.grad, expected.grad_log_prob(0, 0));
    EXPECT_EQ(tok.clipped ? 1.0 : 0.0, std::round(expected.metrics.at("actor/pg_clipfrac")));
    EXPECT_EQ(tok.clipped_lower ? 1.0 : 0.0, std::round(expected.metrics.at("actor/pg_clipfrac_lower")));
  }
  EXPECT_THROW((void)k::VanillaPPOParams::from(0.2, 0.2, 1.0), verl::InvalidArgument);
}

// ---- kernels ---------------------------------------------------------------------------------

TEST(CudaLosses, MaskedStatsAndWhitenMatchReference) {
  VERL_REQUIRE_GPU();
  for (const auto& [rows, cols] : {std::pair<Index, Index>{1, 2}, {37, 11}, {300, 1000}}) {
    std::mt19937 rng(static_cast<std::uint32_t>(rows + cols));
    MatrixF values = random_matrix(rows, cols, rng, 3.0f);
    MatrixF mask = random_mask(rows, cols, rng);
    mask(0, 0) = 1.0f;
    if (cols > 1) mask(0, 1) = 1.0f;  // at least two valid elements
    for (Index i = 0; i < rows; ++i)
      for (Index j = 0; j < cols; ++j)
        if (mask(i, j) == 0.0f && (i + j) % 3 == 0) values(i, j) = std::numeric_limits<float>::infinity();
    auto d_v = upload(values), d_m = upload(mask);
    DeviceBuffer<k::MaskedStats> d_stats(1);
    std::size_t bytes = 0;
    k::masked_stats(nullptr, bytes, nullptr, nullptr, rows, cols, nullptr);
    DeviceBuffer<unsigned char> temp(bytes);
    k::masked_stats(temp.data(), bytes, d_v.data(), d_m.data(), rows, cols, d_stats.data());
    const k::MaskedStats s = d_stats.download().at(0);
    // The reference sums each row in float32 and the rows in double; the kernel sums in double:
    // they differ by float32 rounding of the row sums (|v| ~ 3, up to 1000 terms a row).
    const double rounding = 1e-6 * 3.0 * static_cast<double>(rows * cols);
    expect_scalar(s.sum, verl::algo::masked_sum(values, mask), 1e-6, "masked_sum", rounding);
    expect_scalar(s.mean, verl::algo::masked_mean(values, mask), 1e-6, "masked_mean", rounding / (s.count + 1));
    expect_scalar(s.var, verl::algo::masked_var(values, mask, true), 1e-5, "masked_var");

    // Whitening reads every element: finite values only.
    const MatrixF finite = random_matrix(rows, cols, rng, 3.0f);
    auto d_f = upload(finite);
    DeviceBuffer<float> d_out(static_cast<std::size_t>(rows * cols));
    k::masked_whiten(nullptr, bytes, nullptr, nullptr, rows, cols, nullptr);
    DeviceBuffer<unsigned char> temp2(bytes);
    for (const bool shift_mean : {true, false}) {
      k::masked_whiten(temp2.data(), bytes, d_f.data(), d_m.data(), rows, cols, d_out.data(), shift_mean);
      VERL_CUDA_EXPECT_OK(cudaDeviceSynchronize());
      expect_close(d_out.download(), verl::algo::masked_whiten(finite, mask, shift_mean), 1e-5f, 1e-5f,
                   std::string("masked_whiten") + (shift_mean ? "" : " (shift_mean=False)"));
    }
  }
}

TEST(CudaLosses, MaskedWhitenBackwardMatchesReference) {
  VERL_REQUIRE_GPU();
  for (const auto& [rows, cols] : {std::pair<Index, Index>{1, 2}, {37, 11}, {300, 1000}}) {
    std::mt19937 rng(static_cast<std::uint32_t>(5 * rows + cols));
    const MatrixF values = random_matrix(rows, cols, rng, 3.0f);
    MatrixF mask = random_mask(rows, cols, rng);
    mask(0, 0) = 1.0f;
    mask(0, 1) = 1.0f;  // at least two valid elements
    const MatrixF cotangent = random_matrix(rows, cols, rng);
    auto d_v = upload(values), d_m = upload(mask), d_c = upload(cotangent);
    DeviceBuffer<float> d_grad(static_cast<std::size_t>(rows * cols));
    for (const bool shift_mean : {true, false}) {
      std::size_t bytes = 0;
      k::masked_whiten_backward(nullptr, bytes, nullptr, nullptr, nullptr, rows, cols, nullptr, shift_mean);
      DeviceBuffer<unsigned char> temp(bytes);
      k::masked_whiten_backward(temp.data(), bytes, d_v.data(), d_m.data(), d_c.data(), rows, cols, d_grad.data(),
                                shift_mean);
      // The sums of c and c z differ from the reference's by their order: 1e-5 relative.
      expect_close(d_grad.download(), verl::algo::masked_whiten_backward(values, mask, cotangent, shift_mean), 1e-6f,
                   1e-5f, std::string("masked_whiten grad") + (shift_mean ? "" : " (shift_mean=False)"));
    }
  }
}

TEST(CudaLosses, MaskedSumAndMeanAlongAxesMatchReference) {
  VERL_REQUIRE_GPU();
  std::mt19937 rng(17);
  const Index rows = 70, cols = 45;
  const MatrixF values = random_matrix(rows, cols, rng, 2.0f), mask = random_mask(rows, cols, rng);
  auto d_v = upload(values), d_m = upload(mask);
  DeviceBuffer<float> d_grad(static_cast<std::size_t>(rows * cols));
  for (const int axis : {-1, 0})
    for (const bool mean : {false, true}) {
      const Index length = axis == -1 ? rows : cols;
      const std::string what = std::string(mean ? "masked_mean" : "masked_sum") + " axis=" + std::to_string(axis);
      const MatrixF cot = random_matrix(length, 1, rng);
      auto d_cot = upload(cot);
      DeviceBuffer<float> d_out(static_cast<std::size_t>(length));
      k::masked_reduce_axis(d_v.data(), d_m.data(), rows, cols, axis, mean, d_out.data());
      k::masked_reduce_axis_backward(d_m.data(), rows, cols, axis, mean, d_cot.data(), d_grad.data());
      const verl::VectorF expected = mean ? verl::algo::masked_mean(values, mask, axis)
                                          : verl::algo::masked_sum(values, mask, axis);
      expect_close(d_out.download(), MatrixF(expected), 1e-5f, 1e-5f, what);
      const verl::VectorF cot_vector = cot.col(0);
      const MatrixF expected_grad = mean ? verl::algo::masked_mean_backward(mask, cot_vector, axis)
                                         : verl::algo::masked_sum_backward(mask, cot_vector, axis);
      expect_close(d_grad.download(), expected_grad, 0.0f, 0.0f, what + " grad");
    }
  // Whole batch: the gradient of the scalar sum / mean.
  DeviceBuffer<k::MaskedStats> d_stats(1);
  std::size_t bytes = 0;
  k::masked_stats(nullptr, bytes, nullptr, nullptr, rows, cols, nullptr);
  DeviceBuffer<unsigned char> temp(bytes);
  k::masked_stats(temp.data(), bytes, d_v.data(), d_m.data(), rows, cols, d_stats.data());
  k::masked_reduce_backward(d_m.data(), rows, cols, true, d_stats.data(), d_grad.data());
  expect_close(d_grad.download(), verl::algo::masked_mean_backward(mask), 0.0f, 0.0f, "masked_mean grad");
  k::masked_reduce_backward(d_m.data(), rows, cols, false, d_stats.data(), d_grad.data());
  expect_close(d_grad.download(), verl::algo::masked_sum_backward(mask), 0.0f, 0.0f, "masked_sum grad");
  const k::MaskedStats st = d_stats.download().at(0);
  for (const bool unbiased : {true, false}) {
    expect_scalar(unbiased ? st.var : st.var_biased, verl::algo::masked_var(values, mask, unbiased), 1e-5,
                  unbiased ? "masked_var" : "masked_var (biased)");
    k::masked_var_backward(d_v.data(), d_m.data(), rows, cols, unbiased, d_stats.data(), d_grad.data());
    expect_close(d_grad.download(), verl::algo::masked_var_backward(values, mask, unbiased), 1e-7f, 1e-5f,
                 unbiased ? "masked_var grad" : "masked_var (biased) grad");
  }
}

TEST(CudaLosses, MaskedVarOfFewerThanTwoTokensIsNaN) {
  VERL_REQUIRE_GPU();
  MatrixF values = MatrixF::Ones(2, 3), mask = MatrixF::Zero(2, 3);
  mask(1, 2) = 1.0f;
  auto d_v = upload(values), d_m = upload(mask);
  DeviceBuffer<k::MaskedStats> d_stats(1);
  std::size_t bytes = 0;
  k::masked_stats(nullptr, bytes, nullptr, nullptr, 2, 3, nullptr);
  DeviceBuffer<unsigned char> temp(bytes);
  k::masked_stats(temp.data(), bytes, d_v.data(), d_m.data(), 2, 3, d_stats.data());
  const k::MaskedStats s = d_stats.download().at(0);
  EXPECT_EQ(s.count, 1.0);
  EXPECT_TRUE(std::isnan(s.var));  // verl raises; the CPU reference throws
  EXPECT_THROW((void)verl::algo::masked_var(values, mask, true), verl::InvalidArgument);
}

TEST(CudaLosses, AggLossAndWeightsMatchReference) {
  VERL_REQUIRE_GPU();
  GlobalBatchInfo custom;
  custom.dp_size = 2;
  custom.batch_num_tokens = 500;
  custom.global_batch_size = 64;
  custom.loss_scale_factor = 100;
  for (const auto& [rows, cols] : {std::pair<Index, Index>{1, 1}, {45, 13}, {256, 700}}) {
    std::mt19937 rng(static_cast<std::uint32_t>(7 * rows + cols));
    MatrixF loss = random_matrix(rows, cols, rng);
    const MatrixF mask = random_mask(rows, cols, rng);
    // NaN at a masked position: token-mean ignores it (where), the seq-mean modes do not (L * m).
    if (rows > 5 && cols > 3 && mask(5, 3) == 0.0f) loss(5, 3) = std::numeric_limits<float>::quiet_NaN();
    auto d_l = upload(loss), d_m = upload(mask);
    for (const auto mode : {LossAggMode::token_mean, LossAggMode::seq_mean_token_sum,
                            LossAggMode::seq_mean_token_mean, LossAggMode::seq_mean_token_sum_norm})
      for (const GlobalBatchInfo& info : {GlobalBatchInfo{}, custom}) {
        const std::string what = std::string(verl::algo::to_string(mode)) + " B=" + std::to_string(rows);
        DeviceBuffer<k::AggLossState> d_state(1);
        DeviceBuffer<float> d_w(static_cast<std::size_t>(rows * cols));
        std::size_t bytes = 0;
        k::agg_loss(nullptr, bytes, nullptr, nullptr, rows, cols, mode, info, nullptr);
        DeviceBuffer<unsigned char> temp(bytes);
        k::agg_loss(temp.data(), bytes, d_l.data(), d_m.data(), rows, cols, mode, info, d_state.data(), d_w.data());
        const k::AggLossState state = d_state.download().at(0);
        expect_scalar(state.loss, verl::algo::agg_loss(loss, mask, mode, info), 1e-6, what + " loss");
        expect_close(d_w.download(), verl::algo::agg_loss_weights(mask, mode, info), 0.0f, 0.0f, what + " weights");
      }
  }
}

/// The kernel's pg_loss, metrics and gradient of one policy loss (a KernelPolicyLoss) on host
/// matrices. `advantages` is (B, T), or (B, 1) read per row when `per_row_advantages`; `weights`
/// may be null.
struct DevicePolicyLoss {
  k::PolicyLossState state;
  std::vector<float> grad;
};

template <class Params>
DevicePolicyLoss policy_loss_on_device(const Params& params, const MatrixF& old, const MatrixF& lp,
                                       const MatrixF& advantages, bool per_row_advantages, const MatrixF& mask,
                                       const MatrixF* weights, LossAggMode mode, const GlobalBatchInfo& info) {
  const Index rows = old.rows(), cols = old.cols();
  auto d_old = upload(old), d_lp = upload(lp), d_adv = upload(advantages), d_mask = upload(mask);
  DeviceBuffer<float> d_w(weights != nullptr ? static_cast<std::size_t>(weights->size()) : 0);
  if (weights != nullptr) d_w.upload(weights->data());
  DeviceBuffer<float> d_grad(static_cast<std::size_t>(rows * cols));
  DeviceBuffer<k::PolicyLossState> d_state(1);
  k::PolicyLossInputs in;
  in.old_log_prob = d_old.data();
  in.log_prob = d_lp.data();
  in.advantages = d_adv.data();
  in.advantages_per_row = per_row_advantages;
  in.response_mask = d_mask.data();
  in.rollout_is_weights = weights != nullptr ? d_w.data() : nullptr;
  in.rows = rows;
  in.cols = cols;
  std::size_t bytes = 0;
  k::policy_loss(nullptr, bytes, in, params, mode, info, nullptr, nullptr);
  DeviceBuffer<unsigned char> temp(bytes);
  k::policy_loss(temp.data(), bytes, in, params, mode, info, d_grad.data(), d_state.data());
  return {d_state.download().at(0), d_grad.download()};
}

/// One policy loss through the kernel vs its verl::algo reference, on a batch with empty rows,
/// single tokens, full rows and log-ratios past the +-20 clamp.
template <class AlgoLoss>
void run_policy_loss(const AlgoLoss& reference, Index rows, Index cols, LossAggMode mode, bool per_row_advantages,
                     bool weights, std::uint32_t seed, bool outlier = true) {
  std::mt19937 rng(seed);
  const MatrixF old = random_matrix(rows, cols, rng, 1.0f);
  MatrixF lp = old + random_matrix(rows, cols, rng, 0.3f);
  if (outlier && rows > 2 && cols > 2) lp(2, 2) = old(2, 2) + 25.0f;  // beyond the +-20 clamp
  const MatrixF mask = random_mask(rows, cols, rng);
  const MatrixF per_row = random_matrix(rows, 1, rng, 2.0f);
  MatrixF advantages = random_matrix(rows, cols, rng, 2.0f);
  if (per_row_advantages) advantages = per_row.replicate(1, cols);
  MatrixF is_weights = random_matrix(rows, cols, rng, 0.2f).array().abs() + 0.5f;
  verl::algo::PolicyLossBatch batch{old, lp, advantages, mask};
  if (weights) batch.rollout_is_weights.emplace(is_weights);
  GlobalBatchInfo info;
  const auto expected = reference.compute(batch, {mode, info});

  const auto device = policy_loss_on_device(k::kernel_policy_loss(reference), old, lp,
                                            per_row_advantages ? per_row : advantages, per_row_advantages, mask,
                                            weights ? &is_weights : nullptr, mode, info);
  const k::PolicyLossState& s = device.state;
  const std::string what = std::string(AlgoLoss::name) + " " + std::string(verl::algo::to_string(mode)) +
                           (per_row_advantages ? " per-row A" : "") + (weights ? " IS weights" : "") + " (" +
                           std::to_string(rows) + ", " + std::to_string(cols) + ")";
  expect_scalar(s.pg_loss, expected.pg_loss, 1e-5, what + " pg_loss");
  const auto metric = [&](const char* key, double actual, double rtol) {
    if (const auto it = expected.metrics.find(key); it != expected.metrics.end())
      expect_scalar(actual, it->second, rtol, what + " " + key);
  };
  metric("actor/pg_clipfrac", s.pg_clipfrac, 1e-6);
  metric("actor/ppo_kl", s.ppo_kl, 1e-5);
  metric("actor/pg_clipfrac_lower", s.pg_clipfrac_lower, 1e-6);
  expect_close(device.grad, expected.grad_log_prob, 1e-7f, 1e-5f, what + " grad");
}

/// `outlier`: include the exp(25) ratio (it dominates pg_loss of the losses without the clamp,
/// clip_cov and kl_cov, which are therefore run both ways).
template <class AlgoLoss>
void run_policy_loss_everywhere(const AlgoLoss& reference, bool outlier = true) {
  std::uint32_t seed = 1;
  for (const auto mode : {LossAggMode::token_mean, LossAggMode::seq_mean_token_sum, LossAggMode::seq_mean_token_mean,
                          LossAggMode::seq_mean_token_sum_norm})
    for (const bool per_row : {false, true})
      for (const bool weights : {false, true}) {
        run_policy_loss(reference, 1, 1, mode, per_row, weights, seed++, outlier);
        run_policy_loss(reference, 33, 70, mode, per_row, weights, seed++, outlier);
        run_policy_loss(reference, 128, 1024, mode, per_row, weights, seed++, outlier);
      }
}

TEST(CudaLosses, VanillaPolicyLossMatchesReference) {
  VERL_REQUIRE_GPU();
  run_policy_loss_everywhere(verl::algo::VanillaPPO{.clip_ratio_low = 0.2, .clip_ratio_high = 0.28, .clip_ratio_c = 3.0});
}

TEST(CudaLosses, TokenwisePolicyLossesMatchReference) {
  VERL_REQUIRE_GPU();
  run_policy_loss_everywhere(verl::algo::GPGLoss{});
  run_policy_loss_everywhere(verl::algo::ReinforceLoss{});
  run_policy_loss_everywhere(verl::algo::CISPO{.clip_ratio_low = 0.2, .clip_ratio_high = 0.28});
  run_policy_loss_everywhere(verl::algo::SAPO{.tau_pos = 1.0, .tau_neg = 1.05});
}

TEST(CudaLosses, SequencePolicyLossesMatchReference) {
  VERL_REQUIRE_GPU();
  run_policy_loss_everywhere(verl::algo::GSPO{.clip_ratio_low = 3e-4, .clip_ratio_high = 4e-4});
  run_policy_loss_everywhere(verl::algo::GeoMean{.clip_ratio_low = 0.4, .clip_ratio_high = 0.4});
}

TEST(CudaLosses, CovariancePolicyLossesMatchReference) {
  VERL_REQUIRE_GPU();
  for (const bool outlier : {true, false}) {
    run_policy_loss_everywhere(verl::algo::ClipCov{}, outlier);
    run_policy_loss_everywhere(
        verl::algo::ClipCov{.clip_cov_ratio = 0.1, .clip_cov_lb = -10.0, .clip_cov_ub = 10.0, .seed = 7}, outlier);
    run_policy_loss_everywhere(
        verl::algo::ClipCov{.clip_cov_ratio = 0.5, .clip_cov_lb = 0.0, .clip_cov_ub = 5.0, .seed = 3}, outlier);
    run_policy_loss_everywhere(verl::algo::KLCov{}, outlier);
    run_policy_loss_everywhere(verl::algo::KLCov{.kl_cov_ratio = 0.2, .ppo_kl_coef = 0.1}, outlier);
  }
}

/// One policy loss on given host matrices vs verl::algo (token-mean).
template <class AlgoLoss>
void run_policy_loss_on(const AlgoLoss& reference, const MatrixF& old, const MatrixF& lp, const MatrixF& adv,
                        const MatrixF& mask, const std::string& what) {
  const auto expected = reference.compute(verl::algo::PolicyLossBatch{old, lp, adv, mask}, {LossAggMode::token_mean, {}});
  const auto device = policy_loss_on_device(k::kernel_policy_loss(reference), old, lp, adv, false, mask, nullptr,
                                            LossAggMode::token_mean, {});
  expect_scalar(device.state.pg_loss, expected.pg_loss, 1e-5, what + " pg_loss");
  expect_close(device.grad, expected.grad_log_prob, 1e-7f, 1e-5f, what + " grad");
}

/// Every cov ties (one advantage everywhere): the kernel penalises the earliest valid tokens, as
/// its sequential host walk does (torch's CPU topk may choose others among equal keys).
TEST(CudaLosses, KLCovTiesGoToTheEarliestTokens) {
  VERL_REQUIRE_GPU();
  const Index rows = 40, cols = 300;
  std::mt19937 rng(5);
  const MatrixF old = random_matrix(rows, cols, rng, 1.0f);
  const MatrixF lp = old + random_matrix(rows, cols, rng, 0.3f);
  const MatrixF mask = random_mask(rows, cols, rng);
  const MatrixF advantages = MatrixF::Constant(rows, cols, 0.75f);
  const auto params = k::KLCovParams{.kl_cov_ratio = 0.3, .coef = 0.5f};
  k::PolicyLossInputs host;
  host.old_log_prob = old.data();
  host.log_prob = lp.data();
  host.advantages = advantages.data();
  host.response_mask = mask.data();
  host.rows = rows;
  host.cols = cols;
  MatrixF expected_grad(rows, cols);
  const auto expected = k::detail::policy_loss_sequential(host, params, LossAggMode::token_mean, {}, expected_grad.data());

  const auto device =
      policy_loss_on_device(params, old, lp, advantages, false, mask, nullptr, LossAggMode::token_mean, {});
  const k::PolicyLossState& s = device.state;
  expect_scalar(s.pg_loss, expected.pg_loss, 1e-5, "kl_cov with tied cov: pg_loss");
  expect_close(device.grad, expected_grad, 1e-7f, 1e-5f, "kl_cov with tied cov: grad");
}

TEST(CudaLosses, PolicyLossOfAnEmptyBatch) {
  VERL_REQUIRE_GPU();
  k::PolicyLossInputs in;  // (0, 0): the state is still written
  DeviceBuffer<k::PolicyLossState> d_state(1);
  std::size_t bytes = 0;
  k::policy_loss(nullptr, bytes, in, k::GPGParams{}, LossAggMode::seq_mean_token_sum, {}, nullptr, nullptr);
  DeviceBuffer<unsigned char> temp(bytes);
  k::policy_loss(temp.data(), bytes, in, k::GPGParams{}, LossAggMode::seq_mean_token_sum, {}, nullptr, d_state.data());
  const k::PolicyLossState s = d_state.download().at(0);
  EXPECT_EQ(s.pg_clipfrac, 0.0f);
  EXPECT_EQ(s.ppo_kl, 0.0f);
  // The losses with a selection pass, at (0, 0), (B, 0) and with every token masked.
  for (const auto& [rows, cols] : {std::pair<Index, Index>{0, 0}, {3, 0}}) {
    k::PolicyLossInputs empty;
    empty.rows = rows;
    empty.cols = cols;
    for (const auto mode : {LossAggMode::token_mean, LossAggMode::seq_mean_token_mean}) {
      bytes = 0;
      k::policy_loss(nullptr, bytes, empty, k::ClipCovParams{}, mode, {}, nullptr, nullptr);
      DeviceBuffer<unsigned char> t1(bytes);
      k::policy_loss(t1.data(), bytes, empty, k::ClipCovParams{}, mode, {}, nullptr, d_state.data());
      EXPECT_EQ(d_state.download().at(0).pg_clipfrac, 0.0f);
      k::policy_loss(nullptr, bytes, empty, k::KLCovParams{}, mode, {}, nullptr, nullptr);
      DeviceBuffer<unsigned char> t2(bytes);
      k::policy_loss(t2.data(), bytes, empty, k::KLCovParams{}, mode, {}, nullptr, d_state.data());
      EXPECT_EQ(d_state.download().at(0).ppo_kl, 0.0f);
    }
  }
  const Index rows = 4, cols = 40;
  std::mt19937 rng(9);
  const MatrixF old = random_matrix(rows, cols, rng), lp = random_matrix(rows, cols, rng),
                adv = random_matrix(rows, cols, rng), none = MatrixF::Zero(rows, cols);
  run_policy_loss_on(verl::algo::ClipCov{.clip_cov_ratio = 0.5, .clip_cov_lb = -10, .clip_cov_ub = 10}, old, lp, adv,
                     none, "clip_cov, every token masked");
  run_policy_loss_on(verl::algo::KLCov{.kl_cov_ratio = 0.5}, old, lp, adv, none, "kl_cov, every token masked");
}

TEST(CudaLosses, ValueLossMatchesReference) {
  VERL_REQUIRE_GPU();
  GlobalBatchInfo custom;
  custom.dp_size = 2;
  custom.batch_num_tokens = 500;
  custom.global_batch_size = 64;
  custom.loss_scale_factor = 100;
  for (const auto& [rows, cols] : {std::pair<Index, Index>{1, 1}, {45, 13}, {256, 700}}) {
    std::mt19937 rng(static_cast<std::uint32_t>(3 * rows + cols));
    const MatrixF values = random_matrix(rows, cols, rng);
    const MatrixF returns = values + random_matrix(rows, cols, rng, 0.5f);
    MatrixF vpreds = values + random_matrix(rows, cols, rng, 0.6f);
    const float clip = 0.5f;
    for (Index i = 0; i < vpreds.size(); i += 3) vpreds.data()[i] = values.data()[i] + clip;  // on the bound
    const MatrixF mask = random_mask(rows, cols, rng);
    auto d_v = upload(vpreds), d_r = upload(returns), d_o = upload(values), d_m = upload(mask);
    DeviceBuffer<float> d_grad(static_cast<std::size_t>(rows * cols));
    DeviceBuffer<k::ValueLossState> d_state(1);
    const k::ValueLossInputs in{d_v.data(), d_r.data(), d_o.data(), d_m.data(), rows, cols};
    for (const auto mode : {LossAggMode::token_mean, LossAggMode::seq_mean_token_sum,
                            LossAggMode::seq_mean_token_mean, LossAggMode::seq_mean_token_sum_norm})
      for (const GlobalBatchInfo& info : {GlobalBatchInfo{}, custom}) {
        const std::string what = std::string(verl::algo::to_string(mode)) + " B=" + std::to_string(rows);
        std::size_t bytes = 0;
        k::value_loss(nullptr, bytes, in, clip, mode, info, nullptr, nullptr);
        DeviceBuffer<unsigned char> temp(bytes);
        k::value_loss(temp.data(), bytes, in, clip, mode, info, d_grad.data(), d_state.data());
        const k::ValueLossState s = d_state.download().at(0);
        const auto expected = verl::algo::compute_value_loss(vpreds, returns, values, mask, clip, mode, info);
        expect_scalar(s.vf_loss, expected.vf_loss, 1e-5, what + " vf_loss");
        expect_scalar(s.vf_clipfrac, expected.vf_clipfrac, 1e-6, what + " vf_clipfrac");
        expect_scalar(s.vpred_mean, expected.metrics.at("critic/vpred_mean"), 1e-5, what + " vpred_mean");
        // Same float operations in the same order (no FMA): bit for bit.
        expect_close(d_grad.download(), expected.grad_vpreds, 0.0f, 0.0f, what + " grad");
      }
  }
}

TEST(CudaLosses, EntropyLossMatchesReference) {
  VERL_REQUIRE_GPU();
  for (const auto& [batch, length, vocab] :
       {std::tuple<Index, Index, Index>{1, 1, 1}, {4, 7, 11}, {6, 33, 1037}, {2, 9, 151936}}) {
    std::mt19937 rng(static_cast<std::uint32_t>(batch * length + vocab));
    const MatrixF logits = random_matrix(batch * length, vocab, rng, 2.0f);
    const MatrixF mask = random_mask(batch, length, rng);
    auto d_logits = upload(logits), d_m = upload(mask);
    DeviceBuffer<float> d_grad(static_cast<std::size_t>(logits.size()));
    DeviceBuffer<k::AggLossState> d_state(1);
    const k::LogitsShape shape{batch * length, vocab, vocab};
    for (const auto mode : {LossAggMode::token_mean, LossAggMode::seq_mean_token_mean}) {
      const std::string what = std::string(verl::algo::to_string(mode)) + " V=" + std::to_string(vocab);
      std::size_t bytes = 0;
      k::entropy_loss<float>(nullptr, bytes, nullptr, shape, nullptr, batch, length, mode, {}, nullptr);
      DeviceBuffer<unsigned char> temp(bytes);
      k::entropy_loss(temp.data(), bytes, d_logits.data(), shape, d_m.data(), batch, length, mode, {},
                      d_state.data(), d_grad.data());
      const auto expected = verl::algo::compute_entropy_loss(logits, mask, mode);
      expect_scalar(d_state.download().at(0).loss, expected.entropy_loss, 1e-5, what + " entropy_loss");
      // As the logits kernels' own tests: 1e-4 relative + 1e-5 of the row's largest |grad|.
      const std::vector<float> grad = d_grad.download();
      for (Index i = 0; i < expected.grad_logits.rows(); ++i) {
        const float row_scale = expected.grad_logits.row(i).cwiseAbs().maxCoeff();
        for (Index j = 0; j < vocab; ++j) {
          const float e = expected.grad_logits(i, j), a = grad[static_cast<std::size_t>(i * vocab + j)];
          ASSERT_LE(std::abs(a - e), 1e-5f * row_scale + 1e-4f * std::abs(e))
              << what << " grad_logits(" << i << ", " << j << "): got " << a << ", expected " << e;
        }
      }
    }
  }
}

TEST(CudaLosses, KlRewardsMatchReferenceExactly) {
  VERL_REQUIRE_GPU();
  std::mt19937 rng(12);
  const Index rows = 19, cols = 257;
  const MatrixF scores = random_matrix(rows, cols, rng), old = random_matrix(rows, cols, rng, 3.0f);
  const MatrixF ref = random_matrix(rows, cols, rng, 3.0f);
  auto d_s = upload(scores), d_old = upload(old), d_ref = upload(ref);
  DeviceBuffer<float> d_out(static_cast<std::size_t>(rows * cols));
  k::kl_rewards(d_s.data(), d_old.data(), d_ref.data(), rows * cols, 0.1, d_out.data());
  // Every step rounded as torch's (no FMA): bit-exact.
  expect_close(d_out.download(), verl::algo::compute_rewards(scores, old, ref, 0.1), 0.0f, 0.0f, "compute_rewards");
}

TEST(CudaLosses, KlPenaltyMatchesReference) {
  VERL_REQUIRE_GPU();
  std::mt19937 rng(9);
  const Index rows = 61, cols = 333;
  const MatrixF lp = random_matrix(rows, cols, rng, 8.0f), ref = random_matrix(rows, cols, rng, 8.0f);
  const MatrixF cot = random_matrix(rows, cols, rng);
  auto d_lp = upload(lp), d_ref = upload(ref), d_cot = upload(cot);
  DeviceBuffer<float> d_kl(static_cast<std::size_t>(rows * cols)), d_grad(static_cast<std::size_t>(rows * cols));
  for (const auto type : {k::KlType::kl, k::KlType::abs, k::KlType::mse, k::KlType::low_var_kl}) {
    k::kl_penalty(type, d_lp.data(), d_ref.data(), rows * cols, d_kl.data(), d_grad.data(), d_cot.data());
    k::with_reference_estimator(type, [&](const auto& estimator) {
      expect_close(d_kl.download(), verl::algo::kl_penalty(lp, ref, estimator), 1e-6f, 1e-6f, "kl");
      expect_close(d_grad.download(), verl::algo::kl_penalty_backward(lp, ref, cot, estimator).logprob, 1e-6f, 1e-6f,
                   "kl grad");
      return 0;
    });
  }
}

}  // namespace
