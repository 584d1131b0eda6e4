// The optimal-token-baseline kernels' algorithm (include/verl/kernels/optimal_token_baseline.hpp:
// the token and group arithmetic the CUDA kernels run, here through the sequential host walk of
// their tiles, chunks, runs and passes) against verl::algo::OptimalTokenBaseline and
// MultiTurnOptimalTokenBaseline: both forms, handle_zero_tail both ways, with and without rollout
// IS weights, contiguous and shuffled group ids, groups of one, fully masked rows, ties for the
// longest response, rows longer than one tile, and the argument checks. Runs with g++ only; the
// CUDA test (tests/cuda/test_optimal_token_baseline.cu) compares the kernels themselves.
// Tolerance: the walk combines its chunk sums in another order than the CPU's single running sum;
// with exact double sums the results are identical, otherwise within a float32 ulp of the returns
// and W, so 1e-6 relative plus 1e-6 of the batch's largest |advantage| (10x tighter than golden).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "verl/algo/advantages/optimal_token_baseline.hpp"
#include "verl/kernels/optimal_token_baseline.hpp"
#include "../support/random_otb_batch.hpp"
#include "../support/error_message.hpp"

using verl::test_support::message_of;

namespace {

using verl::Index;
using verl::MatrixF;
namespace k = verl::kernels;
namespace kd = verl::kernels::detail;

using verl::test::algo_batch;
using verl::test::OtbBatch;

/// Group sizes cycling over 26 rows, so that the masks' 6-row pattern puts empty rows at varying
/// places in the groups.
OtbBatch random_batch(Index rows, Index cols, std::uint32_t seed, bool holes, bool shuffle) {
  return verl::test::random_otb_batch(rows, cols, seed, holes, shuffle, {4, 1, 3, 8, 2, 1, 5, 2});
}

struct Outputs {
  MatrixF advantages, returns;
};

Outputs run_sequential(const k::OptimalTokenBaselineParams& p, k::GroupLayout layout, const OtbBatch& b, bool with_is) {
  const Index rows = b.rewards.rows(), cols = b.rewards.cols();
  Outputs out{MatrixF::Constant(rows, cols, -777.0f), MatrixF::Constant(rows, cols, -777.0f)};
  kd::optimal_token_baseline_sequential(p, layout, b.rewards.data(), b.mask.data(), b.ids.data(),
                                        b.old_log_probs.data(), b.sum_pi_squared.data(),
                                        with_is ? b.is_weights.data() : nullptr, rows, cols, out.advantages.data(),
                                        out.returns.data());
  return out;
}

void expect_close(const MatrixF& actual, const MatrixF& expected, const std::string& what) {
  ASSERT_EQ(actual.rows(), expected.rows()) << what;
  ASSERT_EQ(actual.cols(), expected.cols()) << what;
  const float scale = expected.size() == 0 ? 1.0f : std::max(1.0f, expected.cwiseAbs().maxCoeff());
  for (Index i = 0; i < expected.rows(); ++i)
    for (Index j = 0; j < expected.cols(); ++j) {
      const float e = expected(i, j), a = actual(i, j);
      ASSERT_LE(std::abs(a - e), 1e-6f * scale + 1e-6f * std::abs(e))
          << what << " at (" << i << ", " << j << "): got " << a << ", expected " << e;
    }
}

std::string describe(const k::OptimalTokenBaselineParams& p, k::GroupLayout layout, bool with_is, Index rows,
                     Index cols) {
  return std::string(p.multi_turn ? "multi-turn" : "single-turn") + (p.handle_zero_tail ? " zero-tail" : "") +
         (layout == k::GroupLayout::any ? " shuffled" : " contiguous") + (with_is ? " IS" : "") +
         " B=" + std::to_string(rows) + " T=" + std::to_string(cols);
}

void check_against_reference(bool multi_turn) {
  const std::pair<Index, Index> shapes[] = {{1, 1}, {5, 7}, {37, 33}, {64, 300}, {9, 4500}};
  for (const auto& [rows, cols] : shapes)
    for (const bool zero_tail : {false, true})
      for (const bool with_is : {false, true})
        for (const auto layout : {k::GroupLayout::contiguous, k::GroupLayout::any}) {
          const bool shuffle = layout == k::GroupLayout::any;
          const auto seed = static_cast<std::uint32_t>(rows * 131 + cols);
          const OtbBatch b = random_batch(rows, cols, seed, multi_turn, shuffle);
          const k::OptimalTokenBaselineParams p{multi_turn, zero_tail, 1e-8f};
          const auto expected = k::reference_optimal_token_baseline(p, algo_batch(b, with_is));
          const Outputs got = run_sequential(p, layout, b, with_is);
          const std::string what = describe(p, layout, with_is, rows, cols);
          expect_close(got.returns, expected.returns(), what + " returns");
          expect_close(got.advantages, expected.advantages, what + " advantages");
        }
}

TEST(KernelsOtbHost, SingleTurnSequentialMatchesReference) { check_against_reference(false); }

TEST(KernelsOtbHost, MultiTurnSequentialMatchesReference) { check_against_reference(true); }

TEST(KernelsOtbHost, SingleTurnWithObservationHolesMatchesReference) {
  // The single-turn form on a mask with interior holes (positions, not valid indices, align).
  const OtbBatch b = random_batch(48, 65, 5, /*holes=*/true, /*shuffle=*/true);
  for (const bool zero_tail : {false, true}) {
    const k::OptimalTokenBaselineParams p{false, zero_tail, 1e-8f};
    const auto expected = k::reference_optimal_token_baseline(p, algo_batch(b, true));
    const Outputs got = run_sequential(p, k::GroupLayout::any, b, true);
    expect_close(got.returns, expected.returns(), "holes returns");
    expect_close(got.advantages, expected.advantages, "holes advantages");
  }
}

TEST(KernelsOtbHost, TestBatchesExerciseTheZeroTail) {
  // Guards the tests above: their batches contain groups whose unique longest row loses its
  // baseline on the tail, so a wrong tail rule could not pass unnoticed.
  for (const bool multi_turn : {false, true}) {
    const OtbBatch b = random_batch(37, 33, 37 * 131 + 33, multi_turn, true);
    const auto batch = algo_batch(b, false);
    const auto with_tail = k::reference_optimal_token_baseline({multi_turn, true, 1e-8f}, batch);
    const auto without = k::reference_optimal_token_baseline({multi_turn, false, 1e-8f}, batch);
    EXPECT_GT((with_tail.advantages - without.advantages).cwiseAbs().maxCoeff(), 1e-3f) << multi_turn;
  }
}

TEST(KernelsOtbHost, EdgeBatches) {
  for (const bool multi_turn : {false, true}) {
    for (const bool zero_tail : {false, true}) {
      const k::OptimalTokenBaselineParams p{multi_turn, zero_tail, 1e-8f};
      // One group; every row masked; a single token; every row its own group.
      OtbBatch one_group = random_batch(12, 9, 11, multi_turn, false);
      std::fill(one_group.ids.begin(), one_group.ids.end(), 42);
      OtbBatch all_masked = random_batch(6, 5, 12, multi_turn, false);
      all_masked.mask.setZero();
      OtbBatch single_token = random_batch(7, 1, 13, multi_turn, false);
      OtbBatch singletons = random_batch(5, 20, 14, multi_turn, false);
      for (std::size_t i = 0; i < singletons.ids.size(); ++i) singletons.ids[i] = static_cast<std::int64_t>(i);
      for (const OtbBatch* b : {&one_group, &all_masked, &single_token, &singletons})
        for (const auto layout : {k::GroupLayout::contiguous, k::GroupLayout::any}) {
          const auto expected = k::reference_optimal_token_baseline(p, algo_batch(*b, true));
          const Outputs got = run_sequential(p, layout, *b, true);
          const std::string what = describe(p, layout, true, b->rewards.rows(), b->rewards.cols());
          expect_close(got.returns, expected.returns(), what + " returns");
          expect_close(got.advantages, expected.advantages, what + " advantages");
        }
    }
  }
  // Empty batches: nothing is read or written.
  std::size_t calls = 0;
  for (const auto& [rows, cols] : {std::pair<Index, Index>{0, 5}, {3, 0}, {0, 0}}) {
    const std::vector<std::int64_t> ids(static_cast<std::size_t>(rows), 1);
    kd::optimal_token_baseline_sequential(k::OptimalTokenBaselineParams::single_turn(), k::GroupLayout::any, nullptr,
                                          nullptr, rows > 0 ? ids.data() : nullptr, nullptr, nullptr, nullptr, rows,
                                          cols, nullptr, nullptr);
    ++calls;
  }
  EXPECT_EQ(calls, 3u);
}

TEST(KernelsOtbHost, ChunksCoverEveryTileOnce) {
  for (int width = 0; width <= kd::otb_tile; width += (width < 40 ? 1 : 97)) {
    std::vector<int> forward(static_cast<std::size_t>(width)), reverse(static_cast<std::size_t>(width));
    for (int thread = 0; thread < kd::otb_block_threads; ++thread) {
      const kd::TokenSpan f = kd::forward_chunk(width, thread), r = kd::reverse_chunk(width, thread);
      ASSERT_LE(f.lo, f.hi);
      ASSERT_LE(r.lo, r.hi);
      ASSERT_LE(f.hi - f.lo, kd::otb_items_per_thread);
      for (int j = f.lo; j < f.hi; ++j) ++forward[static_cast<std::size_t>(j)];
      for (int j = r.lo; j < r.hi; ++j) ++reverse[static_cast<std::size_t>(j)];
      if (r.hi > r.lo) {
        EXPECT_EQ(r.hi, width - thread * kd::otb_items_per_thread);  // thread 0 owns the tile's end
      }
    }
    for (int j = 0; j < width; ++j) {
      ASSERT_EQ(forward[static_cast<std::size_t>(j)], 1) << "width " << width << " token " << j;
      ASSERT_EQ(reverse[static_cast<std::size_t>(j)], 1) << "width " << width << " token " << j;
    }
  }
}

TEST(KernelsOtbHost, GroupSummaryFollowsUniqueLongestTail) {
  // Lengths 3, 7, 5: row 11 is strictly longest, its baseline stops at 5.
  kd::OtbGroupSummary g;
  g.add(10, 3, false);
  g.add(11, 7, false);
  g.add(12, 5, false);
  EXPECT_TRUE(g.has_baseline());
  EXPECT_EQ(g.baseline_end(11, true), 5);
  EXPECT_EQ(g.baseline_end(10, true), kd::otb_no_tail);
  EXPECT_EQ(g.baseline_end(11, false), kd::otb_no_tail);
  EXPECT_EQ(g.span(false, 40), 40);
  EXPECT_EQ(g.span(true, 40), 7);
  // A tie for the longest: nobody's tail.
  kd::OtbGroupSummary tie;
  tie.add(0, 4, false);
  tie.add(1, 4, false);
  tie.add(2, 1, false);
  EXPECT_EQ(tie.baseline_end(0, true), kd::otb_no_tail);
  EXPECT_EQ(tie.baseline_end(1, true), kd::otb_no_tail);
  // Multi-turn leaves fully masked rows out: one member left, no baseline and no tail.
  kd::OtbGroupSummary multi;
  multi.add(0, 0, true);
  multi.add(1, 6, true);
  EXPECT_FALSE(multi.has_baseline());
  EXPECT_EQ(multi.baseline_end(1, true), kd::otb_no_tail);
  EXPECT_EQ(multi.span(true, 9), 6);
  // Single-turn keeps them: two members, the non-empty row is the unique longest.
  kd::OtbGroupSummary single;
  single.add(0, 0, false);
  single.add(1, 6, false);
  EXPECT_TRUE(single.has_baseline());
  EXPECT_EQ(single.baseline_end(1, true), 0);
}

TEST(KernelsOtbHost, TokenArithmeticIsTheReferences) {
  const float lp = std::log(0.3f), sq = 0.2f, rho = 1.5f;
  const float w = (1.0f - 2.0f * std::exp(lp)) + sq;
  EXPECT_EQ(kd::path_variance_term(lp, sq, nullptr, 1.0f), w);
  EXPECT_EQ(kd::path_variance_term(lp, sq, &rho, 1.0f), w * (rho * rho));
  EXPECT_EQ(kd::path_variance_term(lp, sq, &rho, 0.0f), 0.0f);
  EXPECT_EQ(kd::otb_baseline(3.0, 4.0, 1e-8f), 3.0f / (4.0f + 1e-8f));
  EXPECT_EQ(kd::otb_baseline(0.0, 0.0, 1e-8f), 0.0f);  // no valid token at t: b = 0
  EXPECT_EQ(kd::single_turn_advantage(2.0f, 0.5f, 1.0f, true), 1.5f);
  EXPECT_EQ(kd::single_turn_advantage(2.0f, 0.5f, 1.0f, false), 2.0f);
  EXPECT_EQ(kd::single_turn_advantage(2.0f, 0.5f, 0.0f, true), 0.0f);
  EXPECT_EQ(kd::multi_turn_advantage(2.0f, 0.5f, true), 1.5f);
  EXPECT_EQ(kd::multi_turn_advantage(2.0f, 0.5f, false), 2.0f);
}

TEST(KernelsOtbHost, ParamsFollowVerlDefaults) {
  constexpr auto single = k::OptimalTokenBaselineParams::single_turn();
  constexpr auto multi = k::OptimalTokenBaselineParams::multi_turn_form();
  EXPECT_FALSE(single.multi_turn);
  EXPECT_TRUE(single.handle_zero_tail);  // verl 0.9.1's default for both forms
  EXPECT_TRUE(multi.multi_turn);
  EXPECT_TRUE(multi.handle_zero_tail);
  const auto from_single = k::OptimalTokenBaselineParams::from(verl::algo::OptimalTokenBaseline{});
  const auto from_multi = k::OptimalTokenBaselineParams::from(verl::algo::MultiTurnOptimalTokenBaseline{});
  EXPECT_EQ(from_single.handle_zero_tail, single.handle_zero_tail);
  EXPECT_EQ(from_multi.handle_zero_tail, multi.handle_zero_tail);
  EXPECT_EQ(from_single.epsilon, 1e-8f);
  EXPECT_EQ(from_multi.epsilon, single.epsilon);
  EXPECT_TRUE(k::OptimalTokenBaselineParams::from(verl::algo::MultiTurnOptimalTokenBaseline{.handle_zero_tail = false})
                  .multi_turn);
}

TEST(KernelsOtbHost, ArgumentChecksNameTheArgument) {
  const OtbBatch b = random_batch(3, 4, 1, false, false);
  MatrixF adv(3, 4), ret(3, 4);
  const auto run = [&](Index rows, Index cols, const std::int64_t* ids, const float* mask, const float* lp,
                       float* advantages) {
    kd::optimal_token_baseline_sequential(k::OptimalTokenBaselineParams::single_turn(), k::GroupLayout::any,
                                          b.rewards.data(), mask, ids, lp, b.sum_pi_squared.data(), nullptr, rows,
                                          cols, advantages, ret.data());
  };
  EXPECT_NE(message_of([&] { run(-1, 4, b.ids.data(), b.mask.data(), b.old_log_probs.data(), adv.data()); })
                .find("rows: expected >= 0, got -1"),
            std::string::npos);
  EXPECT_NE(message_of([&] { run(3, -2, b.ids.data(), b.mask.data(), b.old_log_probs.data(), adv.data()); })
                .find("cols: expected >= 0, got -2"),
            std::string::npos);
  EXPECT_NE(message_of([&] { run(1, Index{1} << 31, b.ids.data(), b.mask.data(), b.old_log_probs.data(), adv.data()); })
                .find("cols: expected < 2^31"),
            std::string::npos);
  EXPECT_NE(message_of([&] { run(3, 4, nullptr, b.mask.data(), b.old_log_probs.data(), adv.data()); })
                .find("ids: expected 3 group ids, got null"),
            std::string::npos);
  EXPECT_NE(message_of([&] { run(3, 4, b.ids.data(), nullptr, b.old_log_probs.data(), adv.data()); })
                .find("response_mask: expected a (3, 4) array, got null"),
            std::string::npos);
  EXPECT_NE(message_of([&] { run(3, 4, b.ids.data(), b.mask.data(), nullptr, adv.data()); })
                .find("old_log_probs: expected a (3, 4) array, got null"),
            std::string::npos);
  EXPECT_NE(message_of([&] { run(3, 4, b.ids.data(), b.mask.data(), b.old_log_probs.data(), nullptr); })
                .find("advantages: expected a (3, 4) array, got null"),
            std::string::npos);
  EXPECT_NO_THROW(run(3, 4, b.ids.data(), b.mask.data(), b.old_log_probs.data(), adv.data()));
}

}  // namespace
