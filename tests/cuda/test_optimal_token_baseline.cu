// CUDA optimal-token-baseline estimators (optimal_token_baseline_advantages) vs the CPU reference
// (verl::algo::OptimalTokenBaseline / MultiTurnOptimalTokenBaseline, golden-exact): both forms,
// handle_zero_tail both ways, with and without rollout IS weights, contiguous and shuffled group
// ids, groups of one and groups longer than a block, fully masked rows, ties for the longest
// response, rows longer than one scan tile, 512 x 1024 with shuffled groups of 8, and the edges
// (single token, every row masked, one group, empty batches). Outputs start as a sentinel so that
// an unwritten element fails.
// Tolerance: verl's golden rtol/atol (1e-5), the absolute part scaled by the largest |advantage|:
// the kernels combine their double scan prefixes in a tree and take exp in double, so returns and
// W may sit one float32 ulp from the CPU's; the group sums themselves run in the CPU's order.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <random>
#include <string>
#include <vector>

#include "cuda_test_support.hpp"
#include "verl/kernels/detail/cuda_check.cuh"
#include "verl/kernels/optimal_token_baseline.cuh"
#include "../support/random_otb_batch.hpp"

namespace {

using verl::Index;
using verl::MatrixF;
namespace k = verl::kernels;
using k::DeviceBuffer;

constexpr float kSentinel = -777.0f;

using verl::test::algo_batch;
using verl::test::OtbBatch;

OtbBatch random_batch(Index rows, Index cols, std::uint32_t seed, bool holes, bool shuffle,
                      const std::vector<Index>& sizes = {4, 1, 3, 8, 2, 1, 5, 2, 300}) {
  return verl::test::random_otb_batch(rows, cols, seed, holes, shuffle, sizes);
}

using verl::testing::upload;

struct DeviceResult {
  std::vector<float> advantages, returns;
};

DeviceResult run_device(const k::OptimalTokenBaselineParams& p, k::GroupLayout layout, const OtbBatch& b,
                        bool with_is) {
  const Index rows = b.rewards.rows(), cols = b.rewards.cols();
  const auto cells = static_cast<std::size_t>(rows * cols);
  auto rewards = upload(b.rewards), mask = upload(b.mask), lp = upload(b.old_log_probs), sq = upload(b.sum_pi_squared),
       rho = upload(b.is_weights);
  DeviceBuffer<std::int64_t> ids(b.ids.data(), b.ids.size());
  const std::vector<float> sentinel(cells, kSentinel);
  DeviceBuffer<float> adv(sentinel.data(), cells), ret(sentinel.data(), cells);
  std::size_t bytes = 0;
  k::optimal_token_baseline_advantages(nullptr, bytes, p, layout, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                       rows, cols, nullptr, nullptr);
  DeviceBuffer<unsigned char> temp(bytes);
  k::optimal_token_baseline_advantages(temp.data(), bytes, p, layout, rewards.data(), mask.data(), ids.data(),
                                       lp.data(), sq.data(), with_is ? rho.data() : nullptr, rows, cols, adv.data(),
                                       ret.data());
  const cudaError_t status = cudaDeviceSynchronize();
  if (status != cudaSuccess) ADD_FAILURE() << "cudaDeviceSynchronize: " << cudaGetErrorString(status);
  return {adv.download(), ret.download()};
}

void expect_close(const std::vector<float>& actual, const MatrixF& expected, const std::string& what) {
  ASSERT_EQ(actual.size(), static_cast<std::size_t>(expected.size())) << what;
  const float scale = expected.size() == 0 ? 1.0f : std::max(1.0f, expected.cwiseAbs().maxCoeff());
  const Index cols = std::max<Index>(expected.cols(), 1);
  for (std::size_t i = 0; i < actual.size(); ++i) {
    const float e = expected.data()[i], a = actual[i];
    ASSERT_LE(std::abs(a - e), 1e-5f * scale + 1e-5f * std::abs(e))
        << what << ": element (" << static_cast<Index>(i) / cols << ", " << static_cast<Index>(i) % cols << "): got "
        << a << ", expected " << e;
  }
}

std::string describe(const k::OptimalTokenBaselineParams& p, k::GroupLayout layout, bool with_is, Index rows,
                     Index cols) {
  return std::string(p.multi_turn ? "multi-turn" : "single-turn") + (p.handle_zero_tail ? " zero-tail" : "") +
         (layout == k::GroupLayout::any ? " shuffled" : " contiguous") + (with_is ? " IS" : "") +
         " B=" + std::to_string(rows) + " T=" + std::to_string(cols);
}

void check(const k::OptimalTokenBaselineParams& p, k::GroupLayout layout, const OtbBatch& b, bool with_is) {
  const auto expected = k::reference_optimal_token_baseline(p, algo_batch(b, with_is));
  const DeviceResult got = run_device(p, layout, b, with_is);
  const std::string what = describe(p, layout, with_is, b.rewards.rows(), b.rewards.cols());
  expect_close(got.returns, expected.returns(), what + " returns");
  expect_close(got.advantages, expected.advantages, what + " advantages");
}

void check_form(bool multi_turn) {
  const std::pair<Index, Index> shapes[] = {{1, 1}, {5, 7}, {37, 33}, {64, 300}, {9, 4500}, {700, 40}};
  for (const auto& [rows, cols] : shapes)
    for (const bool zero_tail : {false, true})
      for (const bool with_is : {false, true})
        for (const auto layout : {k::GroupLayout::contiguous, k::GroupLayout::any}) {
          const OtbBatch b = random_batch(rows, cols, static_cast<std::uint32_t>(rows * 131 + cols), multi_turn,
                                          layout == k::GroupLayout::any);
          check({multi_turn, zero_tail, 1e-8f}, layout, b, with_is);
        }
}

TEST(CudaOptimalTokenBaseline, SingleTurnMatchesReference) {
  VERL_REQUIRE_GPU();
  check_form(false);
}

TEST(CudaOptimalTokenBaseline, MultiTurnMatchesReference) {
  VERL_REQUIRE_GPU();
  check_form(true);
}

/// More than 1024 groups (the baseline kernel's grid-stride over runs) and rows longer than the
/// row kernel's 128-block cap over positions.
TEST(CudaOptimalTokenBaseline, ManyGroupsAndLongRows) {
  VERL_REQUIRE_GPU();
  for (const bool multi_turn : {false, true}) {
    const OtbBatch many = random_batch(2500, 6, 41, multi_turn, /*shuffle=*/true, {2, 1, 3});
    check({multi_turn, multi_turn, 1e-8f}, k::GroupLayout::any, many, /*with_is=*/true);
    const OtbBatch long_rows = random_batch(3, 40000, 42, multi_turn, /*shuffle=*/false, {3});
    check({multi_turn, multi_turn, 1e-8f}, k::GroupLayout::contiguous, long_rows, /*with_is=*/false);
  }
}

TEST(CudaOptimalTokenBaseline, LargeBatchWithShuffledGroupsOfEight) {
  VERL_REQUIRE_GPU();
  for (const bool multi_turn : {false, true}) {
    const OtbBatch b = random_batch(512, 1024, 99, multi_turn, /*shuffle=*/true, {8});
    check({multi_turn, multi_turn, 1e-8f}, k::GroupLayout::any, b, /*with_is=*/true);
    check({multi_turn, !multi_turn, 1e-8f}, k::GroupLayout::any, b, /*with_is=*/false);
  }
}

TEST(CudaOptimalTokenBaseline, SingleTurnWithObservationHoles) {
  VERL_REQUIRE_GPU();
  const OtbBatch b = random_batch(48, 65, 5, /*holes=*/true, /*shuffle=*/true);
  for (const bool zero_tail : {false, true}) check({false, zero_tail, 1e-8f}, k::GroupLayout::any, b, true);
}

TEST(CudaOptimalTokenBaseline, EdgeInputs) {
  VERL_REQUIRE_GPU();
  for (const bool multi_turn : {false, true})
    for (const bool zero_tail : {false, true}) {
      const k::OptimalTokenBaselineParams p{multi_turn, zero_tail, 1e-8f};
      OtbBatch one_group = random_batch(300, 9, 11, multi_turn, false);  // longer than a block
      std::fill(one_group.ids.begin(), one_group.ids.end(), 42);
      OtbBatch all_masked = random_batch(6, 5, 12, multi_turn, false);
      all_masked.mask.setZero();
      const OtbBatch single_token = random_batch(7, 1, 13, multi_turn, false);
      const OtbBatch one_row = random_batch(1, 3000, 15, multi_turn, false);
      OtbBatch singletons = random_batch(5, 20, 14, multi_turn, false);
      for (std::size_t i = 0; i < singletons.ids.size(); ++i) singletons.ids[i] = static_cast<std::int64_t>(i);
      const std::initializer_list<const OtbBatch*> batches{&one_group, &all_masked, &single_token, &one_row,
                                                           &singletons};
      for (const OtbBatch* b : batches)
        for (const auto layout : {k::GroupLayout::contiguous, k::GroupLayout::any}) check(p, layout, *b, true);
    }
}

TEST(CudaOptimalTokenBaseline, EmptyBatchesAndDeterminism) {
  VERL_REQUIRE_GPU();
  for (const auto& [rows, cols] : {std::pair<Index, Index>{0, 5}, {3, 0}, {0, 0}})
    for (const bool multi_turn : {false, true}) {
      const OtbBatch b = random_batch(rows, cols, 3, multi_turn, false);
      const DeviceResult got = run_device({multi_turn, true, 1e-8f}, k::GroupLayout::any, b, true);
      EXPECT_EQ(got.advantages.size(), static_cast<std::size_t>(rows * cols));
    }
  // The same batch twice: bit-identical (fixed summation orders, no atomics).
  const OtbBatch b = random_batch(200, 700, 21, true, true);
  for (const bool multi_turn : {false, true}) {
    const DeviceResult first = run_device({multi_turn, true, 1e-8f}, k::GroupLayout::any, b, true);
    const DeviceResult second = run_device({multi_turn, true, 1e-8f}, k::GroupLayout::any, b, true);
    EXPECT_EQ(first.advantages, second.advantages);
    EXPECT_EQ(first.returns, second.returns);
  }
}

TEST(CudaOptimalTokenBaseline, RejectsBadArguments) {
  VERL_REQUIRE_GPU();
  const OtbBatch b = random_batch(4, 6, 2, false, false);
  auto rewards = upload(b.rewards), mask = upload(b.mask), lp = upload(b.old_log_probs), sq = upload(b.sum_pi_squared);
  DeviceBuffer<std::int64_t> ids(b.ids.data(), b.ids.size());
  DeviceBuffer<float> adv(24), ret(24);
  const auto p = k::OptimalTokenBaselineParams::single_turn();
  std::size_t bytes = 0;
  k::optimal_token_baseline_advantages(nullptr, bytes, p, k::GroupLayout::any, nullptr, nullptr, nullptr, nullptr,
                                       nullptr, nullptr, 4, 6, nullptr, nullptr);
  DeviceBuffer<unsigned char> temp(bytes);
  std::size_t too_few = bytes - 1;
  EXPECT_THROW(k::optimal_token_baseline_advantages(temp.data(), too_few, p, k::GroupLayout::any, rewards.data(),
                                                    mask.data(), ids.data(), lp.data(), sq.data(), nullptr, 4, 6,
                                                    adv.data(), ret.data()),
               verl::InvalidArgument);
  EXPECT_THROW(k::optimal_token_baseline_advantages(temp.data(), bytes, p, k::GroupLayout::any, rewards.data(),
                                                    mask.data(), ids.data(), nullptr, sq.data(), nullptr, 4, 6,
                                                    adv.data(), ret.data()),
               verl::InvalidArgument);
  EXPECT_THROW(k::optimal_token_baseline_advantages(nullptr, bytes, p, k::GroupLayout::any, nullptr, nullptr, nullptr,
                                                    nullptr, nullptr, nullptr, -1, 6, nullptr, nullptr),
               verl::InvalidArgument);
}

}  // namespace
