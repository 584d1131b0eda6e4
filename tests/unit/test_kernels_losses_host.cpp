// The loss kernels' algorithms (include/verl/kernels/policy_loss.hpp and value_loss.hpp: the token
// and row math the CUDA kernels run, here through their sequential host walks) against
// verl::algo: every policy loss the kernel has and the clipped value loss, every aggregation mode,
// per-token and per-row advantages, with and without rollout IS weights, on batches with empty
// rows, single tokens, full rows, log-ratios past the +-20 clamp and values on the clip bounds.
// Runs with g++ only; the CUDA tests compare the kernels themselves.
#include <gtest/gtest.h>

#include <cmath>
#include <algorithm>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "verl/algo/policy_losses.hpp"
#include "verl/kernels/policy_loss.hpp"
#include "../support/random_loss_batch.hpp"
#include "verl/kernels/value_loss.hpp"

namespace {

using verl::Index;
using verl::MatrixF;
using verl::algo::GlobalBatchInfo;
using verl::algo::LossAggMode;
namespace k = verl::kernels;

using verl::test::random_mask;
using verl::test::random_matrix;

struct Batch {
  MatrixF old, lp, advantages, per_row, mask, weights;
};

/// `outliers`: two log-ratios of +-25 (past verl's +-20 clamp). Losses without the clamp (clip_cov,
/// kl_cov) then have an exp(25) ratio that dominates pg_loss, so they are also run without.
Batch random_batch(Index rows, Index cols, std::uint32_t seed, bool outliers = true) {
  std::mt19937 rng(seed);
  Batch b;
  b.old = random_matrix(rows, cols, rng, 1.0f);
  b.lp = b.old + random_matrix(rows, cols, rng, 0.3f);
  if (outliers && rows > 2 && cols > 2) b.lp(2, 2) = b.old(2, 2) + 25.0f;  // beyond the +-20 clamp
  if (outliers && rows > 3 && cols > 1) b.lp(3, 1) = b.old(3, 1) - 25.0f;
  b.mask = random_mask(rows, cols, rng);
  b.per_row = random_matrix(rows, 1, rng, 2.0f);
  if (rows > 4) b.per_row(4, 0) = 0.0f;  // A = 0: sign 0, tau_neg
  b.advantages = random_matrix(rows, cols, rng, 2.0f);
  b.weights = random_matrix(rows, cols, rng, 0.2f).array().abs() + 0.5f;
  return b;
}

void expect_near_value(double actual, double expected, const std::string& what) {
  if (std::isnan(expected)) {
    EXPECT_TRUE(std::isnan(actual)) << what << ": got " << actual << ", expected NaN";
    return;
  }
  EXPECT_LE(std::abs(actual - expected), 1e-7 + 1e-6 * std::abs(expected))
      << what << ": got " << actual << ", expected " << expected;
}

template <class AlgoLoss>
void check_loss(const AlgoLoss& reference, Index rows, Index cols, std::uint32_t seed, bool outliers = true) {
  const auto params = k::kernel_policy_loss(reference);
  const Batch b = random_batch(rows, cols, seed, outliers);
  for (const auto mode : {LossAggMode::token_mean, LossAggMode::seq_mean_token_sum, LossAggMode::seq_mean_token_mean,
                          LossAggMode::seq_mean_token_sum_norm})
    for (const bool per_row : {false, true})
      for (const bool weights : {false, true}) {
        const MatrixF advantages = per_row ? MatrixF(b.per_row.replicate(1, cols)) : b.advantages;
        verl::algo::PolicyLossBatch batch{b.old, b.lp, advantages, b.mask};
        if (weights) batch.rollout_is_weights.emplace(b.weights);
        const auto expected = reference.compute(batch, {mode, GlobalBatchInfo{}});

        k::PolicyLossInputs in;
        in.old_log_prob = b.old.data();
        in.log_prob = b.lp.data();
        in.advantages = per_row ? b.per_row.data() : advantages.data();
        in.advantages_per_row = per_row;
        in.response_mask = b.mask.data();
        in.rollout_is_weights = weights ? b.weights.data() : nullptr;
        in.rows = rows;
        in.cols = cols;
        MatrixF grad(rows, cols);
        const k::PolicyLossState s = k::detail::policy_loss_sequential(in, params, mode, {}, grad.data());

        const std::string what = std::string(AlgoLoss::name) + " " + std::string(verl::algo::to_string(mode)) +
                                 " (" + std::to_string(rows) + ", " + std::to_string(cols) + ")" +
                                 (per_row ? " per-row A" : "") + (weights ? " IS weights" : "");
        expect_near_value(s.pg_loss, expected.pg_loss, what + " pg_loss");
        const auto metric = [&](const char* key, float actual) {
          if (const auto it = expected.metrics.find(key); it != expected.metrics.end())
            expect_near_value(actual, it->second, what + " " + key);
        };
        metric("actor/pg_clipfrac", s.pg_clipfrac);
        metric("actor/ppo_kl", s.ppo_kl);
        metric("actor/pg_clipfrac_lower", s.pg_clipfrac_lower);
        for (Index i = 0; i < grad.size(); ++i) {
          const float e = expected.grad_log_prob.data()[i], a = grad.data()[i];
          if (std::isnan(e) && std::isnan(a)) continue;
          ASSERT_LE(std::abs(a - e), 1e-6f * std::abs(e)) << what << " grad element " << i << ": got " << a
                                                          << ", expected " << e;
        }
      }
}

template <class AlgoLoss>
void check_shapes(const AlgoLoss& reference, bool outliers = true) {
  check_loss(reference, 1, 1, 11, outliers);
  check_loss(reference, 7, 3, 12, outliers);
  check_loss(reference, 33, 70, 13, outliers);
  check_loss(reference, 64, 300, 14, outliers);
}

template <class AlgoLoss>
void check_shapes_with_and_without_outliers(const AlgoLoss& reference) {
  check_shapes(reference, true);
  check_shapes(reference, false);
}

TEST(KernelsPolicyLossHost, VanillaMatchesReference) {
  check_shapes(verl::algo::VanillaPPO{.clip_ratio_low = 0.2, .clip_ratio_high = 0.28, .clip_ratio_c = 3.0});
  check_shapes(verl::algo::VanillaPPO{.clip_ratio_low = 0.1, .clip_ratio_high = 0.1, .clip_ratio_c = 1.5});
}

TEST(KernelsPolicyLossHost, GPGMatchesReference) { check_shapes(verl::algo::GPGLoss{}); }

TEST(KernelsPolicyLossHost, ReinforceMatchesReference) { check_shapes(verl::algo::ReinforceLoss{}); }

TEST(KernelsPolicyLossHost, CISPOMatchesReference) {
  check_shapes(verl::algo::CISPO{.clip_ratio_low = 0.2, .clip_ratio_high = 0.28});
}

TEST(KernelsPolicyLossHost, SAPOMatchesReference) {
  check_shapes(verl::algo::SAPO{});
  check_shapes(verl::algo::SAPO{.tau_pos = 2.0, .tau_neg = 0.5});
}

TEST(KernelsPolicyLossHost, GSPOMatchesReference) {
  check_shapes(verl::algo::GSPO{.clip_ratio_low = 3e-4, .clip_ratio_high = 4e-4});
  check_shapes(verl::algo::GSPO{.clip_ratio_low = 0.2, .clip_ratio_high = 0.2});
}

TEST(KernelsPolicyLossHost, GeoMeanMatchesReference) {
  check_shapes(verl::algo::GeoMean{.clip_ratio_low = 0.4, .clip_ratio_high = 0.4});
  check_shapes(verl::algo::GeoMean{.clip_ratio_low = 0.05, .clip_ratio_high = 0.1});
}

TEST(KernelsPolicyLossHost, ClipCovMatchesReference) {
  check_shapes_with_and_without_outliers(verl::algo::ClipCov{});
  check_shapes_with_and_without_outliers(
      verl::algo::ClipCov{.clip_cov_ratio = 0.1, .clip_cov_lb = -10.0, .clip_cov_ub = 10.0, .seed = 7});
  check_shapes_with_and_without_outliers(
      verl::algo::ClipCov{.clip_cov_ratio = 0.5, .clip_cov_lb = 0.0, .clip_cov_ub = 5.0, .seed = 3});
}

TEST(KernelsPolicyLossHost, KLCovMatchesReference) {
  check_shapes_with_and_without_outliers(verl::algo::KLCov{});
  check_shapes_with_and_without_outliers(verl::algo::KLCov{.kl_cov_ratio = 0.2, .ppo_kl_coef = 0.1});
  check_shapes_with_and_without_outliers(verl::algo::KLCov{.kl_cov_ratio = 1.0, .ppo_kl_coef = 2.0});
}

/// The selection pass really picks tokens in the configurations above (else the comparisons
/// would not exercise the zeroed and penalised tokens).
TEST(KernelsPolicyLossHost, CovSelectionsPickTokens) {
  const Batch b = random_batch(64, 300, 14);
  k::PolicyLossInputs in;
  in.old_log_prob = b.old.data();
  in.log_prob = b.lp.data();
  in.advantages = b.advantages.data();
  in.response_mask = b.mask.data();
  in.rows = 64;
  in.cols = 300;
  const std::int64_t valid = static_cast<std::int64_t>((b.mask.array() != 0.0f).count());
  std::vector<std::uint8_t> chosen(64 * 300);
  const auto count = [&] { return std::count(chosen.begin(), chosen.end(), std::uint8_t{1}); };

  const auto clip = k::kernel_policy_loss(
      verl::algo::ClipCov{.clip_cov_ratio = 0.1, .clip_cov_lb = -10.0, .clip_cov_ub = 10.0, .seed = 7});
  k::detail::select_tokens_sequential(clip, in, valid, chosen.data());
  EXPECT_EQ(count(), static_cast<std::int64_t>(0.1 * static_cast<double>(valid)));
  std::vector<std::uint8_t> other_seed(chosen.size());
  auto reseeded = clip;
  reseeded.seed = 8;
  k::detail::select_tokens_sequential(reseeded, in, valid, other_seed.data());
  EXPECT_NE(chosen, other_seed);

  const auto kl = k::kernel_policy_loss(verl::algo::KLCov{.kl_cov_ratio = 0.2, .ppo_kl_coef = 0.1});
  k::detail::select_tokens_sequential(kl, in, valid, chosen.data());
  EXPECT_EQ(count(), static_cast<std::int64_t>(0.2 * static_cast<double>(valid)));
  for (std::size_t i = 0; i < chosen.size(); ++i) {
    if (chosen[i] != 0) {
      ASSERT_NE(b.mask.data()[i], 0.0f) << "a masked token was chosen at " << i;
    }
  }
}

TEST(KernelsPolicyLossHost, CovarianceRankKeyOrdersAsTopk) {
  const float inf = std::numeric_limits<float>::infinity();
  const float ranked[] = {std::numeric_limits<float>::quiet_NaN(), inf, 3.5f, 1e-30f, 0.0f, -1e-30f, -2.0f, -inf};
  for (std::size_t i = 0; i + 1 < std::size(ranked); ++i)
    EXPECT_GT(k::detail::covariance_rank_key(ranked[i], true), k::detail::covariance_rank_key(ranked[i + 1], true))
        << ranked[i] << " should rank above " << ranked[i + 1];
  EXPECT_EQ(k::detail::covariance_rank_key(0.0f, true), k::detail::covariance_rank_key(-0.0f, true));
  EXPECT_LT(k::detail::covariance_rank_key(0.0f, false), k::detail::covariance_rank_key(-inf, true));
}

TEST(KernelsPolicyLossHost, MersenneTwisterIsTheStandardOne) {
  std::vector<std::uint64_t> state(k::detail::Mt19937_64::kStateSize);
  k::detail::Mt19937_64 standard_seed(state.data(), 5489);
  std::uint64_t draw = 0;
  for (int i = 0; i < 10000; ++i) draw = standard_seed();
  EXPECT_EQ(draw, 9981545732273789042ULL);  // the value the C++ standard specifies
  for (const std::uint64_t seed : {0ULL, 1ULL, 12345678901234ULL, ~0ULL}) {
    k::detail::Mt19937_64 ours(state.data(), seed);
    std::mt19937_64 reference(seed);
    for (int i = 0; i < 2000; ++i) ASSERT_EQ(ours(), reference()) << "seed " << seed << " draw " << i;
  }
  for (const std::int64_t size : {1, 2, 17, 1000})
    for (const std::int64_t count : {0L, 1L, size / 2, size}) {
      std::vector<std::int64_t> ours(static_cast<std::size_t>(size)), reference(ours.size());
      for (std::int64_t i = 0; i < size; ++i) ours[static_cast<std::size_t>(i)] = reference[static_cast<std::size_t>(i)] = i;
      k::detail::choose_front(ours.data(), size, count, 99, state.data());
      verl::algo::detail::choose_front(reference, static_cast<std::size_t>(count), 99);
      EXPECT_EQ(ours, reference) << "size " << size << " count " << count;
    }
}

TEST(KernelsPolicyLossHost, CovParametersAreChecked) {
  try {
    (void)k::kernel_policy_loss(verl::algo::KLCov{.kl_cov_ratio = 1.5});
    FAIL() << "expected an error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("kl_cov_ratio: expected a value in (0, 1], got 1.5"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW((void)k::kernel_policy_loss(verl::algo::ClipCov{.clip_cov_ratio = 0.0}), std::invalid_argument);
  EXPECT_THROW((void)k::kernel_policy_loss(verl::algo::ClipCov{.clip_cov_ratio = std::numeric_limits<double>::infinity()}),
               std::invalid_argument);
  // A ratio past 1 zeroes every candidate (the budget is capped at the valid tokens, no overflow).
  const auto greedy = k::kernel_policy_loss(verl::algo::ClipCov{.clip_cov_ratio = 1e300});
  EXPECT_EQ(greedy.budget(1000), 1000);
  EXPECT_EQ(greedy.budget(0), 1);
}

TEST(KernelsPolicyLossHost, GarbageAtMaskedPositionsFollowsVerl) {
  // inf at masked positions: token-mean drops it (where), the seq-mean modes give NaN (L * m).
  Batch b = random_batch(9, 6, 21);
  for (Index i = 0; i < b.lp.rows(); ++i)
    for (Index j = 0; j < b.lp.cols(); ++j)
      if (b.mask(i, j) == 0.0f) b.advantages(i, j) = std::numeric_limits<float>::infinity();
  const verl::algo::CISPO reference{};
  for (const auto mode : {LossAggMode::token_mean, LossAggMode::seq_mean_token_sum}) {
    const auto expected = reference.compute({b.old, b.lp, b.advantages, b.mask}, {mode, GlobalBatchInfo{}});
    k::PolicyLossInputs in{b.old.data(), b.lp.data(), b.advantages.data(), false, b.mask.data(), nullptr,
                           b.lp.rows(), b.lp.cols()};
    MatrixF grad(b.lp.rows(), b.lp.cols());
    const auto s = k::detail::policy_loss_sequential(in, k::kernel_policy_loss(reference), mode, {}, grad.data());
    EXPECT_EQ(std::isnan(s.pg_loss), mode != LossAggMode::token_mean);
    expect_near_value(s.pg_loss, expected.pg_loss, "cispo with inf advantages at masked positions");
  }
}

TEST(KernelsPolicyLossHost, BadInputIsNamed) {
  k::PolicyLossInputs in;
  in.rows = 2;
  in.cols = 3;
  std::vector<float> data(6, 0.0f), grad(6);
  in.log_prob = data.data();
  in.advantages = data.data();
  in.response_mask = data.data();
  try {
    (void)k::detail::policy_loss_sequential(in, k::VanillaPPOParams{}, LossAggMode::token_mean, {}, grad.data());
    FAIL() << "expected an error naming old_log_prob";
  } catch (const verl::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("old_log_prob"), std::string::npos) << e.what();
  }
  // gpg does not read old_log_prob.
  EXPECT_NO_THROW((void)k::detail::policy_loss_sequential(in, k::GPGParams{}, LossAggMode::token_mean, {}, grad.data()));
  in.rows = -1;
  EXPECT_THROW((void)k::detail::policy_loss_sequential(in, k::GPGParams{}, LossAggMode::token_mean, {}, grad.data()),
               verl::InvalidArgument);
  EXPECT_THROW((void)k::VanillaPPOParams::from(0.2, 0.2, 1.0), verl::InvalidArgument);
}

TEST(KernelsValueLossHost, MatchesReference) {
  for (const auto& [rows, cols] : {std::pair<Index, Index>{1, 1}, {9, 4}, {40, 130}}) {
    std::mt19937 rng(static_cast<std::uint32_t>(rows * 31 + cols));
    const MatrixF values = random_matrix(rows, cols, rng, 1.0f);
    const MatrixF returns = values + random_matrix(rows, cols, rng, 0.5f);
    MatrixF vpreds = values + random_matrix(rows, cols, rng, 0.6f);
    const MatrixF mask = random_mask(rows, cols, rng);
    const float clip = 0.5f;
    // On the clip bounds (torch's min/max split the gradient there) and on the centre.
    for (Index i = 0; i < vpreds.size(); i += 3) vpreds.data()[i] = values.data()[i] + clip;
    for (Index i = 1; i < vpreds.size(); i += 7) vpreds.data()[i] = values.data()[i] - clip;
    for (Index i = 2; i < vpreds.size(); i += 11) vpreds.data()[i] = values.data()[i];
    GlobalBatchInfo custom;
    custom.dp_size = 2;
    custom.batch_num_tokens = 77;
    custom.global_batch_size = 13;
    custom.loss_scale_factor = 9;
    for (const auto mode : {LossAggMode::token_mean, LossAggMode::seq_mean_token_sum,
                            LossAggMode::seq_mean_token_mean, LossAggMode::seq_mean_token_sum_norm})
      for (const GlobalBatchInfo& info : {GlobalBatchInfo{}, custom}) {
        const auto expected = verl::algo::compute_value_loss(vpreds, returns, values, mask, clip, mode, info);
        const k::ValueLossInputs in{vpreds.data(), returns.data(), values.data(), mask.data(), rows, cols};
        MatrixF grad(rows, cols);
        const k::ValueLossState s = k::detail::value_loss_sequential(in, clip, mode, info, grad.data());
        const std::string what = std::string(verl::algo::to_string(mode)) + " (" + std::to_string(rows) + ", " +
                                 std::to_string(cols) + ")" + (info.batch_num_tokens ? " custom info" : "");
        expect_near_value(s.vf_loss, expected.vf_loss, what + " vf_loss");
        expect_near_value(s.vf_clipfrac, expected.metrics.at("critic/vf_clipfrac"), what + " vf_clipfrac");
        expect_near_value(s.vpred_mean, expected.metrics.at("critic/vpred_mean"), what + " vpred_mean");
        for (Index i = 0; i < grad.size(); ++i)
          ASSERT_EQ(grad.data()[i], expected.grad_vpreds.data()[i]) << what << " grad element " << i;
      }
  }
}

TEST(KernelsValueLossHost, BadInputIsNamed) {
  std::vector<float> data(6, 0.0f), grad(6);
  k::ValueLossInputs in{data.data(), nullptr, data.data(), data.data(), 2, 3};
  try {
    (void)k::detail::value_loss_sequential(in, 0.5, LossAggMode::token_mean, {}, grad.data());
    FAIL() << "expected an error naming returns";
  } catch (const verl::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("returns"), std::string::npos) << e.what();
  }
}

}  // namespace
