// The rollout-correction kernels' algorithm (include/verl/kernels/rollout_correction.hpp: the row
// walks the CUDA kernels run, through their sequential host walk, and the host finish) against
// verl::algo::compute_rollout_correction_and_rejection_mask and verl::algo::BypassMode: every IS
// level with and without batch normalisation, each of the 11 rejection options and mixes of them,
// on batches with empty rows, single tokens, full rows, scattered masks, log-ratios past the +-20
// clamp, NaN/inf at padding, widths around the 8-lane chunks. Metrics are compared key by key and
// bit for bit, except the sums verl::algo runs over the whole batch in one pass (see the header).
// Runs with g++ only; tests/cuda/test_rollout_correction.cu compares the kernels themselves.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "../support/rollout_correction_cases.hpp"
#include "verl/algo/policy_losses/bypass_mode.hpp"
#include "verl/algo/rollout_correction.hpp"
#include "verl/kernels/rollout_correction.hpp"

namespace {

using verl::Index;
using verl::MatrixF;
using verl::Metrics;
using verl::algo::GlobalBatchInfo;
using verl::algo::LossAggMode;
namespace k = verl::kernels;
namespace algo = verl::algo;
using verl::test::CorrectionBatch;
using verl::test::correction_batch;
using verl::test::correction_cases;
using verl::test::expect_same_metrics;

/// Keys verl::algo sums in one running double over the whole batch (not reproducible by a
/// row-parallel order; equal up to the float32 rounding of that sum).
std::set<std::string> batch_sum_keys(const algo::RolloutCorrection& s) {
  std::set<std::string> keys{"rollout_corr/kl", "rollout_corr/k3_kl", "rollout_corr/chi2_token"};
  if (s.rollout_is && *s.rollout_is == algo::ImportanceSamplingLevel::token && s.rollout_is_batch_normalize)
    keys.insert("rollout_corr/rollout_is_batch_norm_factor");
  return keys;
}
constexpr double kBatchSumRtol = 2.5e-7;  // 2 float32 ulp

void expect_same_matrix(const MatrixF& actual, const MatrixF& expected, double rtol, const std::string& what) {
  ASSERT_EQ(actual.rows(), expected.rows()) << what;
  ASSERT_EQ(actual.cols(), expected.cols()) << what;
  for (Index i = 0; i < expected.size(); ++i) {
    const float a = actual.data()[i], e = expected.data()[i];
    ASSERT_TRUE(verl::test::same_value(a, e, rtol)) << what << ": element " << i << ": got " << a << ", expected " << e;
  }
}

void check_correction(const CorrectionBatch& b, const verl::test::CorrectionCase& c, const std::string& shape) {
  const std::string what = c.name + " " + shape;
  const auto expected = algo::compute_rollout_correction_and_rejection_mask(b.log_prob, b.rollout_log_prob, b.mask,
                                                                            c.settings);
  const auto params = k::RolloutCorrectionParams::from(c.settings);
  const k::RolloutCorrectionBatch in{b.log_prob.data(), b.rollout_log_prob.data(), b.mask.data(), b.log_prob.rows(),
                                     b.log_prob.cols()};
  MatrixF weights = MatrixF::Constant(b.mask.rows(), b.mask.cols(), -7.0f), mask(b.mask.rows(), b.mask.cols());
  const Metrics metrics = k::detail::rollout_correction_sequential(in, params, weights.data(), mask.data());
  expect_same_metrics(metrics, expected.metrics, what, batch_sum_keys(c.settings), kBatchSumRtol);
  expect_same_matrix(mask, expected.response_mask, 0.0, what + " corrected mask");
  if (expected.rollout_is_weights) {
    const bool token_normalized = batch_sum_keys(c.settings).count("rollout_corr/rollout_is_batch_norm_factor") > 0;
    expect_same_matrix(weights, *expected.rollout_is_weights, token_normalized ? kBatchSumRtol : 0.0,
                       what + " IS weights");
  }
}

struct Shape {
  Index rows, cols;
};
// Widths below, at and around the 8-token chunks of the row walk, and wide rows.
const std::vector<Shape> kShapes = {{1, 1}, {5, 7}, {6, 8}, {13, 9}, {40, 17}, {33, 70}, {16, 301}};

TEST(KernelsRolloutCorrectionHost, MatchesReferenceOnEveryConfiguration) {
  std::uint32_t seed = 1;
  for (const auto& c : correction_cases())
    for (const Shape s : kShapes) {
      const std::string shape = fmt::format("({}, {})", s.rows, s.cols);
      check_correction(correction_batch(s.rows, s.cols, seed++), c, shape);
      check_correction(correction_batch(s.rows, s.cols, seed++, true, true), c, shape + " scattered");
    }
}

TEST(KernelsRolloutCorrectionHost, MatchesReferenceWithGarbageAtPaddingAndWideRatios) {
  std::uint32_t seed = 100;
  for (const auto& c : correction_cases()) {
    check_correction(correction_batch(24, 45, seed++, true, false, true), c, "(24, 45) NaN/inf padding");
    check_correction(correction_batch(24, 45, seed++, true, true, false, 3.0f), c, "(24, 45) spread 3");
  }
}

TEST(KernelsRolloutCorrectionHost, NonFiniteValidLogRatiosPropagateAsInReference) {
  std::uint32_t seed = 200;
  for (const auto& c : correction_cases()) {
    CorrectionBatch b = correction_batch(12, 20, seed++);
    b.mask(4, 3) = b.mask(6, 0) = 1.0f;
    b.log_prob(4, 3) = std::numeric_limits<float>::quiet_NaN();
    b.rollout_log_prob(6, 0) = -std::numeric_limits<float>::infinity();  // log-ratio +inf
    check_correction(b, c, "(12, 20) NaN and +inf log-ratios");
  }
}

TEST(KernelsRolloutCorrectionHost, SingleValidTokenAndFullyMaskedRows) {
  for (const auto& c : correction_cases()) {
    CorrectionBatch b = correction_batch(4, 11, 7);
    b.mask.setZero();
    b.mask(2, 10) = 1.0f;  // the only valid token, in a row's tail
    check_correction(b, c, "(4, 11) one valid token");
    CorrectionBatch one = correction_batch(1, 1, 8);
    one.mask(0, 0) = 1.0f;
    check_correction(one, c, "(1, 1)");
  }
}

// The walk's sums are verl::algo's: lane sums bit-identical to sum_row_terms, column-order sums
// to a plain running sum, on terms spread over 60 binary orders of magnitude (where any other
// order rounds differently, which the test also checks it could see).
TEST(KernelsRolloutCorrectionHost, RowWalkReproducesReferenceSummationOrder) {
  using Terms = k::detail::TokenTerms<1, 1, 0, 0>;
  struct Token {
    const float* values;
    Terms operator()(std::int64_t j) const {
      Terms t = Terms::none();
      t.lane[0] = t.ordered[0] = values[j];
      return t;
    }
  };
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> exponent(-30.0f, 30.0f);
  std::uniform_int_distribution<int> sign(0, 1);
  int order_sensitive = 0;
  for (const Index cols : {1, 7, 8, 9, 15, 16, 17, 63, 64, 65, 1000}) {
    for (int trial = 0; trial < 20; ++trial) {
      std::vector<float> values(static_cast<std::size_t>(cols));
      for (float& v : values) v = (sign(rng) ? 1.0f : -1.0f) * std::exp2(exponent(rng));
      const auto sums = k::detail::walk_row<Terms>(k::detail::SequentialTeam{}, cols, Token{values.data()});
      const double lanes = algo::detail::sum_row_terms(values.data(), cols);
      double running = 0, reversed = 0;
      for (const float v : values) running += static_cast<double>(v);
      for (auto it = values.rbegin(); it != values.rend(); ++it) reversed += static_cast<double>(*it);
      EXPECT_EQ(sums.lane[0], lanes) << "cols " << cols;
      EXPECT_EQ(sums.ordered[0], running) << "cols " << cols;
      order_sensitive += reversed != running || lanes != running;
    }
  }
  EXPECT_GT(order_sensitive, 50) << "the terms should make the summation order visible";
}

TEST(KernelsRolloutCorrectionHost, RaisesWhereReferenceRaises) {
  const auto settings = verl::test::correction_case("token", 2.0, false, "token_k1", 2.0).settings;
  const auto params = k::RolloutCorrectionParams::from(settings);
  CorrectionBatch b = correction_batch(3, 5, 9);
  const k::RolloutCorrectionBatch in{b.log_prob.data(), b.rollout_log_prob.data(), b.mask.data(), 3, 5};
  b.mask.setZero();
  EXPECT_THROW((void)algo::compute_rollout_correction_and_rejection_mask(b.log_prob, b.rollout_log_prob, b.mask,
                                                                         settings),
               std::invalid_argument);
  EXPECT_THROW((void)k::detail::rollout_correction_sequential(in, params, nullptr, nullptr), std::invalid_argument);
  b.mask(1, 1) = 0.5f;
  EXPECT_THROW((void)k::detail::rollout_correction_sequential(in, params, nullptr, nullptr), std::invalid_argument);
  const k::RolloutCorrectionBatch empty{nullptr, nullptr, nullptr, 0, 5};
  EXPECT_THROW((void)k::detail::rollout_correction_sequential(empty, params, nullptr, nullptr), std::invalid_argument);
  // Outputs may not alias an input (the sequence passes re-read the mask after writing).
  b.mask(1, 1) = 1.0f;
  MatrixF weights(3, 5);
  const auto aliased = [&](float* w, float* m) {
    try {
      (void)k::detail::rollout_correction_sequential(in, params, w, m);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(aliased(weights.data(), b.mask.data()).find("corrected_mask: expected an array of its own"),
            std::string::npos);
  EXPECT_NE(aliased(b.log_prob.data(), nullptr).find("rollout_is_weights: expected an array of its own"),
            std::string::npos);
  EXPECT_NE(aliased(weights.data(), weights.data()).find("corrected_mask"), std::string::npos);
  algo::RolloutCorrection twice = settings;
  twice.rollout_rs.push_back(twice.rollout_rs.front());
  EXPECT_THROW((void)k::RolloutCorrectionParams::from(twice), std::invalid_argument);
  algo::RolloutCorrection negative = settings;
  negative.rollout_is_threshold = -1;
  EXPECT_THROW((void)k::RolloutCorrectionParams::from(negative), std::invalid_argument);
}

// ---- bypass_mode end to end ----------------------------------------------------------------------------

void check_bypass(const algo::BypassMode& reference, const CorrectionBatch& b, LossAggMode mode,
                  const GlobalBatchInfo& info, const std::string& what) {
  const algo::PolicyLossBatch batch{b.rollout_log_prob, b.log_prob, b.advantages, b.mask};
  const auto expected = reference.compute(batch, {mode, info});
  k::PolicyLossInputs in;
  in.old_log_prob = b.rollout_log_prob.data();
  in.log_prob = b.log_prob.data();
  in.advantages = b.advantages.data();
  in.response_mask = b.mask.data();
  in.rows = b.mask.rows();
  in.cols = b.mask.cols();
  MatrixF grad(in.rows, in.cols);
  const auto actual = k::detail::bypass_mode_sequential(in, k::kernel_policy_loss(reference), mode, info, grad.data());
  // The losses' own host walks differ from verl::algo in the order of their double sums only.
  EXPECT_TRUE(verl::test::same_value(actual.state.pg_loss, expected.pg_loss, 1e-6, 1e-7))
      << what << " pg_loss: got " << actual.state.pg_loss << ", expected " << expected.pg_loss;
  std::set<std::string> near = batch_sum_keys(reference.rollout_correction);
  near.insert({"actor/ppo_kl", "actor/pg_clipfrac", "actor/pg_clipfrac_lower"});
  // The rollout_corr metrics stay bit-identical (but for the batch sums); the loss's within 1e-6.
  expect_same_metrics(actual.metrics, expected.metrics, what, near, 1e-6, 0.0, 1e-7);
  expect_same_matrix(grad, expected.grad_log_prob, 1e-6, what + " grad");
}

TEST(KernelsRolloutCorrectionHost, BypassModeMatchesReference) {
  GlobalBatchInfo custom;
  custom.dp_size = 2;
  custom.batch_num_tokens = 257;
  custom.global_batch_size = 16;
  custom.loss_scale_factor = 32;
  std::uint32_t seed = 300;
  const auto cases = correction_cases();
  for (std::size_t n = 0; n < cases.size(); n += 3)  // a spread of the configurations, every loss and mode
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
        }
}

TEST(KernelsRolloutCorrectionHost, BypassModeRaisesOnAnEmptyMask) {
  algo::BypassMode reference;
  const auto params = k::kernel_policy_loss(reference);
  CorrectionBatch b = correction_batch(3, 4, 1);
  b.mask.setZero();
  k::PolicyLossInputs in;
  in.old_log_prob = b.rollout_log_prob.data();
  in.log_prob = b.log_prob.data();
  in.advantages = b.advantages.data();
  in.response_mask = b.mask.data();
  in.rows = 3;
  in.cols = 4;
  MatrixF grad(3, 4);
  try {
    (void)k::detail::bypass_mode_sequential(in, params, LossAggMode::token_mean, {}, grad.data());
    ADD_FAILURE() << "an all-zero mask must raise";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("bypass_mode"), std::string::npos) << e.what();
  }
  in.rows = 0;
  EXPECT_THROW((void)k::detail::bypass_mode_sequential(in, params, LossAggMode::token_mean, {}, grad.data()),
               std::invalid_argument);
}

}  // namespace
