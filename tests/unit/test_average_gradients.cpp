// The data-parallel gradient reduce (trainer::average_gradients) in buckets: many small gradients
// in one all-reduce, a gradient larger than a bucket alone, and every element the mean over the
// ranks. A two-rank group of identical replicas is simulated in process (each all-reduce doubles
// the values, as the sum of two equal ranks does).
#include <gtest/gtest.h>

#include <cstdint>
#include <span>
#include <vector>

#include "verl/parallel/communicator.hpp"
#include "verl/parallel/self_communicator.hpp"
#include "verl/trainer/workers/role_state.hpp"

namespace {

using namespace verl;

/// Two ranks holding the same values: an all-reduce sum doubles them. Counts the calls and the
/// elements of each.
struct TwoEqualRanks : parallel::SelfCommunicator {
  std::vector<std::size_t> all_reduce_sizes;
  [[nodiscard]] int size() const noexcept { return 2; }
  template <parallel::CommElement T>
  void all_reduce(std::span<T> data, parallel::ReduceOp op) {
    EXPECT_EQ(op, parallel::ReduceOp::sum);
    all_reduce_sizes.push_back(data.size());
    for (T& x : data) x += x;
  }
  [[nodiscard]] TwoEqualRanks split(int, int) const { return {}; }
};
static_assert(parallel::Communicator<TwoEqualRanks>);

TEST(AverageGradients, SmallGradientsShareABucketALargeOneIsReducedAlone) {
  // 50 small tensors, one larger than a bucket, 10 small ones: three all-reduces instead of 61.
  const std::int64_t large = trainer::gradient_bucket_bytes / static_cast<std::int64_t>(sizeof(float)) + 16;
  std::vector<std::vector<float>> values, grads;
  for (int i = 0; i < 61; ++i) {
    const std::size_t n = i == 50 ? static_cast<std::size_t>(large) : 10 + static_cast<std::size_t>(i % 7);
    values.emplace_back(n, 0.0f);
    std::vector<float> g(n);
    for (std::size_t j = 0; j < n; ++j) g[j] = static_cast<float>(i) + 0.25f * static_cast<float>(j % 5);
    grads.push_back(std::move(g));
  }
  const std::vector<std::vector<float>> expected = grads;  // the mean of two equal replicas
  std::vector<optim::ParameterRef> refs;
  for (std::size_t i = 0; i < grads.size(); ++i) refs.push_back({values[i], grads[i], "p"});
  TwoEqualRanks group;
  trainer::average_gradients(group, refs);
  std::size_t first_bucket = 0, last_bucket = 0;
  for (int i = 0; i < 50; ++i) first_bucket += expected[static_cast<std::size_t>(i)].size();
  for (int i = 51; i < 61; ++i) last_bucket += expected[static_cast<std::size_t>(i)].size();
  EXPECT_EQ(group.all_reduce_sizes, (std::vector<std::size_t>{first_bucket, static_cast<std::size_t>(large), last_bucket}));
  EXPECT_EQ(grads, expected);
}

}  // namespace
