// CUDA advantage estimators vs the CPU reference (verl::algo, golden-exact): outcome estimators on
// contiguous and shuffled group ids (groups of 1, short groups, groups longer than one thread
// walks), GAE / REINFORCE++ / ReMax on rows shorter and longer than one scan tile, masks with empty
// rows, single tokens and holes (verl's mask skipping).
// Tolerances: the kernels sum in double and combine scan prefixes in another order than the
// reference's sequential float32 recursion, so results agree to float32 rounding of the
// intermediate quantities: 2e-5 relative + 2e-5 absolute (scaled by the size of the values).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cuda_test_support.hpp"
#include "verl/kernels/advantages.cuh"

namespace {

using verl::Index;
using verl::MatrixF;
using verl::VectorF;
namespace k = verl::kernels;

template <class T>
struct DeviceBuffer {
  T* data = nullptr;
  std::size_t size = 0;
  explicit DeviceBuffer(std::size_t n) : size(n) {
    if (n > 0) VERL_CUDA_CHECK(cudaMalloc(&data, n * sizeof(T)));
  }
  DeviceBuffer(DeviceBuffer&& other) noexcept : data(other.data), size(other.size) { other.data = nullptr; }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { cudaFree(data); }
  void upload(const T* host) {
    if (size > 0) VERL_CUDA_CHECK(cudaMemcpy(data, host, size * sizeof(T), cudaMemcpyHostToDevice));
  }
  std::vector<T> download() const {
    std::vector<T> out(size);
    if (size > 0) VERL_CUDA_CHECK(cudaMemcpy(out.data(), data, size * sizeof(T), cudaMemcpyDeviceToHost));
    return out;
  }
};

DeviceBuffer<float> upload(const MatrixF& m) {
  DeviceBuffer<float> d(static_cast<std::size_t>(m.size()));
  d.upload(m.data());
  return d;
}

/// Elements agree within atol + rtol * |expected| (NaN matches NaN); reports the first mismatch.
void expect_close(const std::vector<float>& actual, const MatrixF& expected, float atol, float rtol,
                  const std::string& what) {
  ASSERT_EQ(actual.size(), static_cast<std::size_t>(expected.size())) << what;
  for (std::size_t i = 0; i < actual.size(); ++i) {
    const float e = expected.data()[i], a = actual[i];
    if (std::isnan(e) && std::isnan(a)) continue;
    ASSERT_LE(std::abs(a - e), atol + rtol * std::abs(e))
        << what << ": element " << i << " (row " << i / std::max<Index>(expected.cols(), 1) << ", col "
        << i % std::max<Index>(expected.cols(), 1) << "): got " << a << ", expected " << e;
  }
}

float max_abs(const MatrixF& m) { return m.size() == 0 ? 0.0f : m.cwiseAbs().maxCoeff(); }

/// A 0/1 response mask: random lengths including 0, 1 and T; `holes` also masks random interior
/// tokens (verl's GAE skips them).
MatrixF random_mask(Index rows, Index cols, std::mt19937& rng, bool holes) {
  MatrixF m = MatrixF::Zero(rows, cols);
  std::uniform_int_distribution<Index> length(0, cols);
  std::bernoulli_distribution hole(0.1);
  for (Index i = 0; i < rows; ++i) {
    Index n = length(rng);
    if (i % 7 == 1) n = std::min<Index>(1, cols);
    if (i % 7 == 2) n = 0;
    if (i % 7 == 3) n = cols;
    for (Index j = 0; j < n; ++j) m(i, j) = (holes && hole(rng)) ? 0.0f : 1.0f;
  }
  return m;
}

MatrixF random_matrix(Index rows, Index cols, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> normal(0.0f, scale);
  MatrixF m(rows, cols);
  for (Index i = 0; i < m.size(); ++i) m.data()[i] = normal(rng);
  return m;
}

/// Outcome rewards as verl builds them: the score at the last valid token, 0 elsewhere; some rows
/// also carry a reward on padding (the score sums the whole row, padding included).
MatrixF outcome_rewards(const MatrixF& mask, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::bernoulli_distribution binary(0.5);
  MatrixF r = MatrixF::Zero(mask.rows(), mask.cols());
  for (Index i = 0; i < mask.rows(); ++i) {
    Index last = -1;
    for (Index j = 0; j < mask.cols(); ++j)
      if (mask(i, j) != 0.0f) last = j;
    const float score = (i % 3 == 0) ? (binary(rng) ? 1.0f : 0.0f) : normal(rng);
    if (last >= 0) r(i, last) = score;
    else if (mask.cols() > 0 && i % 2 == 0) r(i, mask.cols() - 1) = score;
  }
  return r;
}

/// Group ids: runs of mixed sizes (1, 2, 5, 8, 100: longer than one thread walks), optionally
/// shuffled so that groups are not contiguous; ids are arbitrary (negative, large).
std::vector<std::int64_t> group_ids(Index rows, std::mt19937& rng, bool shuffle) {
  const Index sizes[] = {8, 1, 5, 100, 2, 8, 1, 300};
  std::vector<std::int64_t> ids;
  std::int64_t id = -5;
  for (Index s = 0; static_cast<Index>(ids.size()) < rows; ++s) {
    const Index n = sizes[s % 8];
    for (Index j = 0; j < n && static_cast<Index>(ids.size()) < rows; ++j) ids.push_back(id * 1000003);
    id += 1 + static_cast<std::int64_t>(rng() % 5);
  }
  if (shuffle) std::shuffle(ids.begin(), ids.end(), rng);
  return ids;
}

struct OutcomeCase {
  k::OutcomeParams params;
  std::string name;
};

std::vector<OutcomeCase> outcome_cases() {
  using E = k::OutcomeEstimator;
  return {{{E::grpo, 1e-6f, true, 1.0f}, "grpo"},
          {{E::grpo, 1e-6f, false, 1.0f}, "dr_grpo"},
          {{E::rloo, 1e-6f, true, 1.0f}, "rloo"},
          {{E::gpg, 1e-6f, true, 2.0f}, "gpg"},
          {{E::opo, 1e-6f, true, 1.0f}, "opo"},
          {{E::reinforce_plus_plus_baseline, 1e-6f, true, 1.0f}, "reinforce_plus_plus_baseline"}};
}

void run_outcome(const OutcomeCase& c, k::GroupLayout layout, Index rows, Index cols, std::uint32_t seed) {
  std::mt19937 rng(seed);
  const MatrixF mask = random_mask(rows, cols, rng, /*holes=*/false);
  const MatrixF rewards = outcome_rewards(mask, rng);
  const auto ids = group_ids(rows, rng, layout == k::GroupLayout::any);
  const verl::algo::AdvantageBatch batch{rewards, mask, ids};
  const auto expected = k::reference_outcome(c.params, batch);

  auto d_rewards = upload(rewards), d_mask = upload(mask);
  DeviceBuffer<std::int64_t> d_ids(ids.size());
  d_ids.upload(ids.data());
  DeviceBuffer<float> d_adv(static_cast<std::size_t>(rows * cols)), d_ret(static_cast<std::size_t>(rows * cols));
  std::size_t bytes = 0;
  k::outcome_advantages(nullptr, bytes, c.params, layout, nullptr, nullptr, nullptr, rows, cols, nullptr, nullptr);
  DeviceBuffer<unsigned char> temp(bytes);
  k::outcome_advantages(temp.data, bytes, c.params, layout, d_rewards.data, d_mask.data, d_ids.data, rows, cols,
                        d_adv.data, d_ret.data);
  VERL_CUDA_EXPECT_OK(cudaDeviceSynchronize());
  const std::string what = c.name + (layout == k::GroupLayout::any ? " (shuffled ids)" : " (contiguous ids)") +
                           " B=" + std::to_string(rows) + " T=" + std::to_string(cols);
  const float scale = std::max(1.0f, max_abs(expected.advantages));
  expect_close(d_adv.download(), expected.advantages, 2e-5f * scale, 2e-5f, what + " advantages");
  expect_close(d_ret.download(), expected.returns, 2e-5f * scale, 2e-5f, what + " returns");
}

TEST(CudaAdvantages, OutcomeEstimatorsMatchReferenceOnContiguousGroups) {
  VERL_REQUIRE_GPU();
  for (const auto& c : outcome_cases())
    for (Index rows : {1, 2, 9, 1000}) run_outcome(c, k::GroupLayout::contiguous, rows, 17, 11u + rows);
}

TEST(CudaAdvantages, OutcomeEstimatorsMatchReferenceOnShuffledGroups) {
  VERL_REQUIRE_GPU();
  for (const auto& c : outcome_cases())
    for (Index rows : {1, 3, 700, 2500}) run_outcome(c, k::GroupLayout::any, rows, 5, 23u + rows);
}

TEST(CudaAdvantages, SingleTokenResponses) {
  VERL_REQUIRE_GPU();
  for (const auto& c : outcome_cases()) run_outcome(c, k::GroupLayout::any, 64, 1, 5u);
}

TEST(CudaAdvantages, OutcomeScalarsFromScores) {
  VERL_REQUIRE_GPU();
  // The per-response entry point (what a fused policy loss reads) equals the T = 1 batch.
  std::mt19937 rng(3);
  const Index rows = 4096;
  const MatrixF scores = random_matrix(rows, 1, rng);
  const MatrixF ones = MatrixF::Ones(rows, 1);
  for (const bool shuffle : {false, true}) {
    const auto ids = group_ids(rows, rng, shuffle);
    const k::OutcomeParams p{k::OutcomeEstimator::grpo, 1e-6f, true, 1.0f};
    const auto expected = k::reference_outcome(p, verl::algo::AdvantageBatch{scores, ones, ids});
    auto d_scores = upload(scores);
    DeviceBuffer<std::int64_t> d_ids(ids.size());
    d_ids.upload(ids.data());
    DeviceBuffer<float> d_out(rows);
    const auto layout = shuffle ? k::GroupLayout::any : k::GroupLayout::contiguous;
    std::size_t bytes = 0;
    k::outcome_scalars(nullptr, bytes, p, layout, nullptr, nullptr, nullptr, rows, nullptr);
    DeviceBuffer<unsigned char> temp(bytes);
    k::outcome_scalars(temp.data, bytes, p, layout, d_scores.data, nullptr, d_ids.data, rows, d_out.data);
    VERL_CUDA_EXPECT_OK(cudaDeviceSynchronize());
    expect_close(d_out.download(), expected.advantages, 2e-5f, 2e-5f, shuffle ? "shuffled" : "contiguous");
  }
}

TEST(CudaAdvantages, EmptyBatchIsANoOp) {
  VERL_REQUIRE_GPU();
  std::size_t bytes = 0;
  const k::OutcomeParams p{};
  k::outcome_advantages(nullptr, bytes, p, k::GroupLayout::any, nullptr, nullptr, nullptr, 0, 8, nullptr, nullptr);
  DeviceBuffer<unsigned char> temp(std::max<std::size_t>(bytes, 1));
  EXPECT_NO_THROW(k::outcome_advantages(temp.data, bytes, p, k::GroupLayout::any, nullptr, nullptr, nullptr, 0, 8,
                                        nullptr, nullptr));
  VERL_CUDA_EXPECT_OK(cudaDeviceSynchronize());
}

TEST(CudaAdvantages, TooSmallTemporaryStorageIsRejected) {
  VERL_REQUIRE_GPU();
  std::size_t bytes = 0;
  k::gae_advantages(nullptr, bytes, {}, nullptr, nullptr, nullptr, 16, 16, nullptr, nullptr);
  DeviceBuffer<unsigned char> temp(bytes);
  std::size_t too_small = bytes - 1;
  EXPECT_THROW(k::gae_advantages(temp.data, too_small, {}, nullptr, nullptr, nullptr, 16, 16, nullptr, nullptr),
               verl::InvalidArgument);
}

void run_gae(Index rows, Index cols, double gamma, double lam, bool holes, std::uint32_t seed) {
  std::mt19937 rng(seed);
  const MatrixF mask = random_mask(rows, cols, rng, holes);
  const MatrixF rewards = random_matrix(rows, cols, rng, 0.5f);
  const MatrixF values = random_matrix(rows, cols, rng, 1.0f);
  verl::algo::AdvantageBatch batch{rewards, mask};
  batch.values.emplace(values);
  const auto expected = verl::algo::GAE{.gamma = gamma, .lam = lam}.compute(batch);

  auto d_r = upload(rewards), d_v = upload(values), d_m = upload(mask);
  DeviceBuffer<float> d_adv(static_cast<std::size_t>(rows * cols)), d_ret(static_cast<std::size_t>(rows * cols));
  std::size_t bytes = 0;
  const auto params = k::GaeParams::from(gamma, lam);
  k::gae_advantages(nullptr, bytes, params, nullptr, nullptr, nullptr, rows, cols, nullptr, nullptr);
  DeviceBuffer<unsigned char> temp(bytes);
  k::gae_advantages(temp.data, bytes, params, d_r.data, d_v.data, d_m.data, rows, cols, d_adv.data, d_ret.data);
  VERL_CUDA_EXPECT_OK(cudaDeviceSynchronize());
  const std::string what = "gae B=" + std::to_string(rows) + " T=" + std::to_string(cols) +
                           " gamma=" + std::to_string(gamma) + " lam=" + std::to_string(lam);
  // Long undiscounted rows accumulate: scale the tolerance with the size of the returns.
  const float scale = std::max(1.0f, max_abs(expected.returns));
  expect_close(d_ret.download(), expected.returns, 2e-5f * scale, 2e-5f, what + " returns");
  expect_close(d_adv.download(), expected.advantages, 1e-4f, 1e-4f, what + " advantages (whitened)");
}

TEST(CudaAdvantages, GaeMatchesReference) {
  VERL_REQUIRE_GPU();
  run_gae(7, 1, 0.99, 0.95, false, 1);
  run_gae(33, 29, 1.0, 1.0, false, 2);
  run_gae(33, 29, 0.99, 0.95, true, 3);
  run_gae(20, 2048, 0.99, 0.95, true, 4);   // exactly one tile
  run_gae(20, 2049, 0.99, 0.95, true, 5);   // one token into a second tile
  run_gae(9, 5000, 1.0, 0.9, true, 6);      // three tiles
  run_gae(64, 300, 0.5, 0.0, true, 7);      // lam = 0: one-step TD
}

TEST(CudaAdvantages, ReinforcePlusPlusMatchesReference) {
  VERL_REQUIRE_GPU();
  for (const auto& [rows, cols, gamma] : {std::tuple<Index, Index, double>{5, 1, 0.9}, {40, 100, 1.0}, {12, 4100, 0.99}}) {
    std::mt19937 rng(static_cast<std::uint32_t>(rows + cols));
    const MatrixF mask = random_mask(rows, cols, rng, /*holes=*/true);
    const MatrixF rewards = random_matrix(rows, cols, rng, 0.3f);
    const auto expected = verl::algo::ReinforcePlusPlus{.gamma = gamma}.compute({rewards, mask});
    auto d_r = upload(rewards), d_m = upload(mask);
    DeviceBuffer<float> d_adv(static_cast<std::size_t>(rows * cols)), d_ret(static_cast<std::size_t>(rows * cols));
    std::size_t bytes = 0;
    k::reinforce_plus_plus_advantages(nullptr, bytes, static_cast<float>(gamma), nullptr, nullptr, rows, cols, nullptr,
                                      nullptr);
    DeviceBuffer<unsigned char> temp(bytes);
    k::reinforce_plus_plus_advantages(temp.data, bytes, static_cast<float>(gamma), d_r.data, d_m.data, rows, cols,
                                      d_adv.data, d_ret.data);
    VERL_CUDA_EXPECT_OK(cudaDeviceSynchronize());
    const float scale = std::max(1.0f, max_abs(expected.returns));
    expect_close(d_ret.download(), expected.returns, 2e-5f * scale, 2e-5f, "reinforce++ returns");
    expect_close(d_adv.download(), expected.advantages, 1e-4f, 1e-4f, "reinforce++ advantages");
  }
}

TEST(CudaAdvantages, RemaxMatchesReference) {
  VERL_REQUIRE_GPU();
  for (const auto& [rows, cols] : {std::pair<Index, Index>{3, 1}, {50, 77}, {6, 4500}}) {
    std::mt19937 rng(static_cast<std::uint32_t>(rows * cols));
    const MatrixF mask = random_mask(rows, cols, rng, /*holes=*/false);
    const MatrixF rewards = outcome_rewards(mask, rng);
    const MatrixF baselines = random_matrix(rows, 1, rng);
    verl::algo::AdvantageBatch batch{rewards, mask};
    const VectorF baseline_vector = Eigen::Map<const VectorF>(baselines.data(), rows);
    batch.reward_baselines.emplace(baseline_vector);
    const auto expected = verl::algo::ReMax{}.compute(batch);
    auto d_r = upload(rewards), d_m = upload(mask), d_b = upload(baselines);
    DeviceBuffer<float> d_adv(static_cast<std::size_t>(rows * cols)), d_ret(static_cast<std::size_t>(rows * cols));
    k::remax_advantages(d_r.data, d_m.data, d_b.data, rows, cols, d_adv.data, d_ret.data);
    VERL_CUDA_EXPECT_OK(cudaDeviceSynchronize());
    expect_close(d_ret.download(), expected.returns, 1e-6f, 1e-6f, "remax returns");
    expect_close(d_adv.download(), expected.advantages, 1e-6f, 1e-6f, "remax advantages");
  }
}

}  // namespace
