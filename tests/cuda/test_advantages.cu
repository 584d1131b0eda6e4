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
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "cuda_test_support.hpp"
#include "verl/kernels/detail/cuda_check.cuh"
#include "verl/kernels/advantages.cuh"

namespace {

using verl::Index;
using verl::MatrixF;
using verl::VectorF;
namespace k = verl::kernels;

using verl::kernels::DeviceBuffer;

using verl::testing::upload;

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
  // Whitening (GAE, REINFORCE++) needs two valid tokens in the batch, as verl's masked_var.
  if (m.sum() < 2.0f && m.size() >= 2) {
    m.data()[0] = 1.0f;
    m.data()[m.size() - 1] = 1.0f;
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

/// Groups of two or more (grpo_passk needs them; verl raises otherwise), sizes 2..300, with the
/// last group absorbing a leftover row.
std::vector<std::int64_t> passk_group_ids(Index rows, std::mt19937& rng, bool shuffle) {
  const Index sizes[] = {8, 2, 5, 100, 3, 8, 2, 300};
  std::vector<std::int64_t> ids;
  std::int64_t id = 7;
  for (Index s = 0; static_cast<Index>(ids.size()) < rows; ++s) {
    Index n = std::min<Index>(sizes[s % 8], rows - static_cast<Index>(ids.size()));
    if (rows - static_cast<Index>(ids.size()) - n == 1) ++n;  // never leave a group of one behind
    for (Index j = 0; j < n; ++j) ids.push_back(id * 7919);
    id += 1 + static_cast<std::int64_t>(rng() % 3);
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
          {{E::grpo_vectorized, 1e-6f, true, 1.0f}, "grpo_vectorized"},
          {{E::grpo_vectorized, 1e-6f, false, 1.0f}, "grpo_vectorized (no std)"},
          {{E::rloo, 1e-6f, true, 1.0f}, "rloo"},
          {{E::rloo_vectorized, 1e-6f, true, 1.0f}, "rloo_vectorized"},
          {{E::gpg, 1e-6f, true, 2.0f}, "gpg"},
          {{E::opo, 1e-6f, true, 1.0f}, "opo"},
          {{E::reinforce_plus_plus_baseline, 1e-6f, true, 1.0f}, "reinforce_plus_plus_baseline"}};
}

void run_outcome(const OutcomeCase& c, k::GroupLayout layout, Index rows, Index cols, std::uint32_t seed) {
  std::mt19937 rng(seed);
  const MatrixF mask = random_mask(rows, cols, rng, /*holes=*/false);
  const MatrixF rewards = outcome_rewards(mask, rng);
  const bool shuffle = layout == k::GroupLayout::any;
  const auto ids = c.params.estimator == k::OutcomeEstimator::grpo_passk ? passk_group_ids(rows, rng, shuffle)
                                                                          : group_ids(rows, rng, shuffle);
  const verl::algo::AdvantageBatch batch{rewards, mask, ids};
  const auto expected = k::reference_outcome(c.params, batch);

  auto d_rewards = upload(rewards), d_mask = upload(mask);
  DeviceBuffer<std::int64_t> d_ids(ids.size());
  d_ids.upload(ids.data());
  DeviceBuffer<float> d_adv(static_cast<std::size_t>(rows * cols)), d_ret(static_cast<std::size_t>(rows * cols));
  std::size_t bytes = 0;
  k::outcome_advantages(nullptr, bytes, c.params, layout, nullptr, nullptr, nullptr, rows, cols, nullptr, nullptr);
  DeviceBuffer<unsigned char> temp(bytes);
  k::outcome_advantages(temp.data(), bytes, c.params, layout, d_rewards.data(), d_mask.data(), d_ids.data(), rows, cols,
                        d_adv.data(), d_ret.data());
  VERL_CUDA_EXPECT_OK(cudaDeviceSynchronize());
  const std::string what = c.name + (layout == k::GroupLayout::any ? " (shuffled ids)" : " (contiguous ids)") +
                           " B=" + std::to_string(rows) + " T=" + std::to_string(cols);
  const float scale = std::max(1.0f, max_abs(expected.advantages));
  expect_close(d_adv.download(), expected.advantages, 2e-5f * scale, 2e-5f, what + " advantages");
  expect_close(d_ret.download(), expected.returns(), 2e-5f * scale, 2e-5f, what + " returns");
}


// ---- host-side simulation of the reverse scan (runs without a GPU) --------------------------------
// The kernel's decomposition replayed on the host: tiles from the row's end, kThreads "threads" of
// kScanItems tokens each (thread 0 the last tokens), each thread's composed map, the exclusive scan
// of the maps in thread order, the exact recursion inside a thread from the scanned state, and the
// per-row moments merged into the whitening statistics. It checks the map algebra (composition,
// identity, the carry between tiles) and the statistics against verl::algo without a device.
template <class R>
void simulate_reverse_scan(const R& rec, const MatrixF& rewards, const MatrixF* values, const MatrixF& mask,
                           MatrixF& out0, MatrixF& out1, k::detail::Moments& batch_moments) {
  namespace d = k::detail;
  const Index rows = rewards.rows(), cols = rewards.cols();
  out0.resize(rows, cols);
  out1.resize(rows, cols);
  batch_moments = {0, 0, 0};
  for (Index row = 0; row < rows; ++row) {
    typename R::State carry = R::initial();
    std::vector<d::Moments> thread_moments(d::kThreads, d::Moments{0, 0, 0});
    for (Index tile_end = cols; tile_end > 0; tile_end -= d::kScanTile) {
      const Index tile_begin = std::max<Index>(tile_end - d::kScanTile, 0);
      const int width = static_cast<int>(tile_end - tile_begin);
      const auto at = [&](const MatrixF& m, int j) { return m(row, tile_begin + j); };
      std::vector<typename R::Map> own(d::kThreads, R::identity());
      for (int tid = 0; tid < d::kThreads; ++tid) {
        const int hi = width - tid * d::kScanItems, lo = std::max(hi - d::kScanItems, 0);
        for (int j = hi - 1; j >= lo; --j)
          own[tid] = R::then(own[tid], rec.token_map(at(rewards, j), values ? at(*values, j) : 0.0f, at(mask, j)));
      }
      typename R::Map prefix = R::identity();
      for (int tid = 0; tid < d::kThreads; ++tid) {
        typename R::State s = R::apply(prefix, carry);
        const int hi = width - tid * d::kScanItems, lo = std::max(hi - d::kScanItems, 0);
        for (int j = hi - 1; j >= lo; --j) {
          float o0, o1;
          const float m = at(mask, j);
          s = rec.step(s, at(rewards, j), values ? at(*values, j) : 0.0f, m, row, o0, o1);
          if (m != 0.0f) d::add_value(thread_moments[tid], o0);
          out0(row, tile_begin + j) = o0;
          out1(row, tile_begin + j) = o1;
        }
        prefix = R::then(prefix, own[tid]);
      }
      carry = R::apply(prefix, carry);  // prefix now holds the whole tile
    }
    d::Moments row_total{0, 0, 0};
    for (const auto& m : thread_moments) row_total = d::merge(row_total, m);
    batch_moments = d::merge(batch_moments, row_total);
  }
}

MatrixF whiten_with(const k::WhitenStats& st, const MatrixF& values, const MatrixF& mask, bool zero_masked) {
  MatrixF out = ((values.array() - st.mean) * st.inv_std).matrix();
  if (zero_masked) out = out.cwiseProduct(mask);
  return out;
}

TEST(CudaAdvantagesHost, SimulatedGaeScanMatchesReference) {
  for (const auto& [rows, cols, gamma, lam] :
       {std::tuple<Index, Index, double, double>{7, 1, 0.99, 0.95}, {5, 2048, 0.99, 0.95}, {4, 2049, 1.0, 1.0},
        {3, 5000, 0.99, 0.9}, {9, 300, 0.5, 0.0}}) {
    std::mt19937 rng(static_cast<std::uint32_t>(rows * 31 + cols));
    const MatrixF mask = random_mask(rows, cols, rng, /*holes=*/true);
    const MatrixF rewards = random_matrix(rows, cols, rng, 0.5f);
    const MatrixF values = random_matrix(rows, cols, rng, 1.0f);
    verl::algo::AdvantageBatch batch{rewards, mask};
    batch.values.emplace(values);
    const auto expected = verl::algo::GAE{.gamma = gamma, .lam = lam}.compute(batch);
    MatrixF advantages, returns;
    k::detail::Moments moments;
    simulate_reverse_scan(k::detail::GaeRecurrence{k::GaeParams::from(gamma, lam)}, rewards, &values, mask, advantages,
                          returns, moments);
    const std::string what = "simulated gae T=" + std::to_string(cols);
    const float scale = std::max(1.0f, max_abs(expected.returns()));
    std::vector<float> flat(returns.data(), returns.data() + returns.size());
    expect_close(flat, expected.returns(), 2e-5f * scale, 2e-5f, what + " returns");
    const MatrixF whitened = whiten_with(k::detail::whiten_stats_of(moments), advantages, mask, false);
    flat.assign(whitened.data(), whitened.data() + whitened.size());
    expect_close(flat, expected.advantages, 1e-4f, 1e-4f, what + " advantages");
  }
}

TEST(CudaAdvantagesHost, SimulatedReinforceAndRemaxScansMatchReference) {
  std::mt19937 rng(8);
  const Index rows = 6, cols = 4300;
  const MatrixF mask = random_mask(rows, cols, rng, /*holes=*/true);
  const MatrixF rewards = random_matrix(rows, cols, rng, 0.3f);
  const auto expected = verl::algo::ReinforcePlusPlus{.gamma = 0.99}.compute({rewards, mask});
  MatrixF out0, out1;
  k::detail::Moments moments;
  simulate_reverse_scan(k::detail::ReinforceRecurrence{0.99f}, rewards, nullptr, mask, out0, out1, moments);
  std::vector<float> flat(out1.data(), out1.data() + out1.size());
  expect_close(flat, expected.returns(), 2e-5f * std::max(1.0f, max_abs(expected.returns())), 2e-5f, "reinforce++ returns");
  const MatrixF whitened = whiten_with(k::detail::whiten_stats_of(moments), out1, mask, true);
  flat.assign(whitened.data(), whitened.data() + whitened.size());
  expect_close(flat, expected.advantages, 1e-4f, 1e-4f, "reinforce++ advantages");

  const MatrixF outcome_mask = random_mask(rows, cols, rng, /*holes=*/false);
  const MatrixF outcome = outcome_rewards(outcome_mask, rng);
  const VectorF baselines = random_matrix(rows, 1, rng).col(0);
  verl::algo::AdvantageBatch batch{outcome, outcome_mask};
  batch.reward_baselines.emplace(baselines);
  const auto remax = verl::algo::ReMax{}.compute(batch);
  simulate_reverse_scan(k::detail::RemaxRecurrence{baselines.data()}, outcome, nullptr, outcome_mask, out0, out1,
                        moments);
  flat.assign(out1.data(), out1.data() + out1.size());
  expect_close(flat, remax.returns(), 1e-6f, 1e-6f, "remax returns");
  flat.assign(out0.data(), out0.data() + out0.size());
  expect_close(flat, remax.advantages, 1e-6f, 1e-6f, "remax advantages");
}

TEST(CudaAdvantagesHost, OutcomeScalarMatchesReferenceFormulas) {
  // A group of one: GRPO divides by (1 + eps), RLOO keeps the score, the others subtract 0.
  const k::GroupStats single{1, 0.0f, 1.0f, 0.0f};
  k::OutcomeParams p;
  EXPECT_EQ(k::outcome_scalar(p, 2.0f, single, 1.0f), 2.0f / (1.0f + 1e-6f));
  p.estimator = k::OutcomeEstimator::rloo;
  EXPECT_EQ(k::outcome_scalar(p, 2.0f, single, 1.0f), 2.0f);
  const k::GroupStats four{4, 0.5f, 0.25f, 0.75f};
  EXPECT_EQ(k::outcome_scalar(p, 2.0f, four, 1.0f), (2.0f * 4.0f) / 3.0f - (0.5f * 4.0f) / 3.0f);
  p.estimator = k::OutcomeEstimator::opo;
  EXPECT_EQ(k::outcome_scalar(p, 2.0f, four, 1.0f), 2.0f - 0.75f);
  p.estimator = k::OutcomeEstimator::gpg;
  p.f_norm = 2.0f;
  EXPECT_EQ(k::outcome_scalar(p, 2.0f, four, 3.0f), (3.0f * 1.5f) / 2.0f);
  p.estimator = k::OutcomeEstimator::rloo_vectorized;
  const k::GroupStats summed{4, 0.5f, 0.25f, 0.75f, 2.0f};
  EXPECT_EQ(k::outcome_scalar(p, 3.0f, summed, 1.0f), (4.0f * 3.0f - 2.0f) / 3.0f);
  EXPECT_EQ(k::outcome_scalar(p, 3.0f, k::GroupStats{1, 0.0f, 1.0f, 0.0f, 3.0f}, 1.0f), 0.0f);  // a group of one
  // grpo_passk: only the group's best row gets its margin (over std + eps when normalising).
  p.estimator = k::OutcomeEstimator::grpo_passk;
  k::GroupStats passk{4, 0.5f, 0.25f, 0.0f, 0.0f};
  passk.best_row = 7;
  passk.margin = 0.5f;
  EXPECT_EQ(k::outcome_scalar(p, 2.0f, passk, 1.0f, 7), 0.5f / (0.25f + 1e-6f));
  EXPECT_EQ(k::outcome_scalar(p, 2.0f, passk, 1.0f, 6), 0.0f);
  p.norm_adv_by_std_in_grpo = false;
  EXPECT_EQ(k::outcome_scalar(p, 2.0f, passk, 1.0f, 7), 0.5f);
}

TEST(CudaAdvantages, GrpoPassKMatchesReference) {
  VERL_REQUIRE_GPU();
  // Ties among the top scores (every third score is 0 or 1), groups longer than one thread walks.
  for (const bool norm : {true, false}) {
    const OutcomeCase c{{k::OutcomeEstimator::grpo_passk, 1e-6f, norm, 1.0f}, norm ? "grpo_passk" : "grpo_passk (no std)"};
    for (Index rows : {2, 9, 1000, 2500}) {
      run_outcome(c, k::GroupLayout::contiguous, rows, 17, 31u + rows);
      run_outcome(c, k::GroupLayout::any, rows, 5, 37u + rows);
    }
  }
}

TEST(CudaAdvantages, GrpoPassKWithNaNScoresAndBothGroupKernels) {
  VERL_REQUIRE_GPU();
  // Groups of 64 (one thread walks it) and 65 (a block reduces it), each with a NaN inside and one
  // with a NaN first row (never replaced as the best, as verl::algo's scan), through the
  // per-response entry point (T = 1).
  std::mt19937 rng(41);
  std::vector<std::int64_t> ids;
  std::int64_t group = 0;
  for (const Index size : {64, 65, 64, 65, 3}) {  // rows 0-63, 64-128, 129-192, 193-257, 258-260
    for (Index j = 0; j < size; ++j) ids.push_back(group);
    ++group;
  }
  const auto rows = static_cast<Index>(ids.size());
  MatrixF scores = random_matrix(rows, 1, rng);
  scores(10, 0) = scores(70, 0) = std::numeric_limits<float>::quiet_NaN();  // inside a group
  scores(129, 0) = std::numeric_limits<float>::quiet_NaN();                 // first row of a 64-row group
  scores(193, 0) = std::numeric_limits<float>::quiet_NaN();                 // first row of a 65-row group
  const MatrixF ones = MatrixF::Ones(rows, 1);
  for (const bool norm : {true, false}) {
    const k::OutcomeParams p{k::OutcomeEstimator::grpo_passk, 1e-6f, norm, 1.0f};
    const auto expected = k::reference_outcome(p, verl::algo::AdvantageBatch{scores, ones, ids});
    auto d_scores = upload(scores);
    DeviceBuffer<std::int64_t> d_ids(ids.size());
    d_ids.upload(ids.data());
    DeviceBuffer<float> d_out(static_cast<std::size_t>(rows));
    std::size_t bytes = 0;
    k::outcome_scalars(nullptr, bytes, p, k::GroupLayout::contiguous, nullptr, nullptr, nullptr, rows, nullptr);
    DeviceBuffer<unsigned char> temp(bytes);
    k::outcome_scalars(temp.data(), bytes, p, k::GroupLayout::contiguous, d_scores.data(), nullptr, d_ids.data(), rows,
                       d_out.data());
    expect_close(d_out.download(), expected.advantages, 2e-5f, 2e-5f, norm ? "passk with NaN" : "passk with NaN (no std)");
  }
}

TEST(CudaAdvantages, RunsAtTheShortRunLimitAndAcrossBlockBorders) {
  VERL_REQUIRE_GPU();
  // Runs of exactly kSmallGroup rows (one thread's walk) and one more (queued for the block
  // kernel), starting on a block's last position and crossing into the next block, and
  // singletons at a border, contiguous and shuffled.
  namespace d = k::detail;
  const Index tile = d::kThreads, small = d::kSmallGroup;
  const std::vector<Index> sizes = {tile - 1, small, small + 1, 1, 2, tile - small - 5, 1, small, 7, small - 1, 3, tile, 1, 5};
  std::vector<std::int64_t> contiguous;
  for (std::size_t g = 0; g < sizes.size(); ++g)
    for (Index j = 0; j < sizes[g]; ++j) contiguous.push_back(static_cast<std::int64_t>(g) * 37 - 100);
  const auto rows = static_cast<Index>(contiguous.size());
  std::mt19937 rng(77);
  const MatrixF scores = random_matrix(rows, 1, rng);
  const MatrixF lengths_as_mask = MatrixF::Ones(rows, 1);
  std::vector<std::int64_t> shuffled = contiguous;
  std::shuffle(shuffled.begin(), shuffled.end(), rng);
  // (grpo_passk raises for the singletons here; its own test puts runs of 64 and 65 across a border.
  // reinforce_plus_plus_baseline's per-response scalar is s - mean, whitened later over tokens.)
  for (const auto& c : outcome_cases()) {
    if (c.params.estimator == k::OutcomeEstimator::reinforce_plus_plus_baseline) continue;
    for (const auto layout : {k::GroupLayout::contiguous, k::GroupLayout::any}) {
      const auto& ids = layout == k::GroupLayout::contiguous ? contiguous : shuffled;
      const auto expected = k::reference_outcome(c.params, verl::algo::AdvantageBatch{scores, lengths_as_mask, ids});
      auto d_scores = upload(scores);
      DeviceBuffer<std::int64_t> d_ids(ids.size());
      d_ids.upload(ids.data());
      const std::vector<std::int32_t> ones(static_cast<std::size_t>(rows), 1);
      DeviceBuffer<std::int32_t> d_lengths(ones.size());
      d_lengths.upload(ones.data());
      DeviceBuffer<float> d_out(static_cast<std::size_t>(rows));
      std::size_t bytes = 0;
      k::outcome_scalars(nullptr, bytes, c.params, layout, nullptr, d_lengths.data(), nullptr, rows, nullptr);
      DeviceBuffer<unsigned char> temp(bytes);
      k::outcome_scalars(temp.data(), bytes, c.params, layout, d_scores.data(), d_lengths.data(), d_ids.data(), rows,
                         d_out.data());
      VERL_CUDA_EXPECT_OK(cudaDeviceSynchronize());
      expect_close(d_out.download(), expected.advantages, 2e-5f, 2e-5f,
                   c.name + (layout == k::GroupLayout::any ? " (shuffled)" : " (contiguous)") + " at tile borders");
    }
  }
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
    k::outcome_scalars(temp.data(), bytes, p, layout, d_scores.data(), nullptr, d_ids.data(), rows, d_out.data());
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
  EXPECT_NO_THROW(k::outcome_advantages(temp.data(), bytes, p, k::GroupLayout::any, nullptr, nullptr, nullptr, 0, 8,
                                        nullptr, nullptr));
  VERL_CUDA_EXPECT_OK(cudaDeviceSynchronize());
}

TEST(CudaAdvantages, TooSmallTemporaryStorageIsRejected) {
  VERL_REQUIRE_GPU();
  std::size_t bytes = 0;
  k::gae_advantages(nullptr, bytes, {}, nullptr, nullptr, nullptr, 16, 16, nullptr, nullptr);
  DeviceBuffer<unsigned char> temp(bytes);
  std::size_t too_small = bytes - 1;
  EXPECT_THROW(k::gae_advantages(temp.data(), too_small, {}, nullptr, nullptr, nullptr, 16, 16, nullptr, nullptr),
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
  k::gae_advantages(temp.data(), bytes, params, d_r.data(), d_v.data(), d_m.data(), rows, cols, d_adv.data(), d_ret.data());
  VERL_CUDA_EXPECT_OK(cudaDeviceSynchronize());
  const std::string what = "gae B=" + std::to_string(rows) + " T=" + std::to_string(cols) +
                           " gamma=" + std::to_string(gamma) + " lam=" + std::to_string(lam);
  // Long undiscounted rows accumulate: scale the tolerance with the size of the returns.
  const float scale = std::max(1.0f, max_abs(expected.returns()));
  expect_close(d_ret.download(), expected.returns(), 2e-5f * scale, 2e-5f, what + " returns");
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
    k::reinforce_plus_plus_advantages(temp.data(), bytes, static_cast<float>(gamma), d_r.data(), d_m.data(), rows, cols,
                                      d_adv.data(), d_ret.data());
    VERL_CUDA_EXPECT_OK(cudaDeviceSynchronize());
    const float scale = std::max(1.0f, max_abs(expected.returns()));
    expect_close(d_ret.download(), expected.returns(), 2e-5f * scale, 2e-5f, "reinforce++ returns");
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
    k::remax_advantages(d_r.data(), d_m.data(), d_b.data(), rows, cols, d_adv.data(), d_ret.data());
    VERL_CUDA_EXPECT_OK(cudaDeviceSynchronize());
    expect_close(d_ret.download(), expected.returns(), 1e-6f, 1e-6f, "remax returns");
    expect_close(d_adv.download(), expected.advantages, 1e-6f, 1e-6f, "remax advantages");
  }
}

}  // namespace
