// The HybridFlow runtime on real MPI ranks (run under mpirun -np 1, 2 and 4): worker groups on
// resource pools, every dispatch mode (even and uneven splits, verl's padding, collection), futures
// and their concurrency on disjoint pools, the group's own communicator, and the compile-time
// registration. Rank 0 runs the tests as the controller; the other ranks only serve worker calls.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "verl/data/data_proto.hpp"
#include "verl/hybridflow/runtime.hpp"

namespace {

using namespace verl;
using namespace verl::hybridflow;
using data::DataProto;
using Clock = std::chrono::steady_clock;

/// A worker exercising each dispatch mode; what it returns says which rank computed what.
struct Echo {
  static constexpr std::string_view name = "Echo";
  explicit Echo(WorkerContext& context) : context_(context) {}

  int rank_of() const { return context_.rank; }
  int global_rank_of() const { return context_.global_rank; }
  std::string greet(const std::string& who) const { return who + " from group rank " + std::to_string(context_.rank); }
  std::int64_t take(std::int64_t value) const { return value * 10 + context_.rank; }
  /// Doubles "x" and records which group rank saw each row.
  DataProto double_it(const DataProto& batch) const {
    DataProto out;
    out.set("x", MatrixF(batch.tensor("x") * 2.0f));
    out.set_non_tensor("rank", std::vector<std::int64_t>(static_cast<std::size_t>(batch.size()), context_.rank));
    return out;
  }
  DataProto scale(double factor, const DataProto& batch) const {
    DataProto out;
    out.set("x", MatrixF(batch.tensor("x") * static_cast<float>(factor)));
    return out;
  }
  std::vector<double> sizes_and_sums(const DataProto& batch) const {
    return {static_cast<double>(batch.size()), static_cast<double>(batch.tensor("x").sum())};
  }
  /// Megatron-style: every rank of a data-parallel group gets the same rows; tags them with the
  /// rank's (dp, tp, pp) coordinates so the test sees who was collected.
  DataProto megatron(const DataProto& batch) const {
    using parallel::AxisKind;
    DataProto out = batch;
    const auto& mesh = *context_.mesh;
    out.set_non_tensor("dp", std::vector<std::int64_t>(static_cast<std::size_t>(batch.size()), mesh.coord(context_.rank, AxisKind::dp)));
    out.set_non_tensor("tp", std::vector<std::int64_t>(static_cast<std::size_t>(batch.size()), mesh.coord(context_.rank, AxisKind::tp)));
    out.set_non_tensor("pp", std::vector<std::int64_t>(static_cast<std::size_t>(batch.size()), mesh.coord(context_.rank, AxisKind::pp)));
    return out;
  }
  /// SPMD inside the group: the sum over its ranks, through the group's own communicator.
  double group_sum(double value) const {
    std::vector<double> buffer{value};
    context_.group->all_reduce(std::span<double>(buffer), parallel::ReduceOp::sum);
    return buffer[0];
  }
  void remember(const std::string& text) { remembered_ += text; }
  std::string remembered() const { return remembered_; }

  using methods = TypeList<Method<&Echo::rank_of, Dispatch::one_to_all, "rank_of">,
                           Method<&Echo::global_rank_of, Dispatch::one_to_all, "global_rank_of">,
                           Method<&Echo::greet, Dispatch::rank_zero, "greet">,
                           Method<&Echo::take, Dispatch::dp_compute, "take">,
                           Method<&Echo::double_it, Dispatch::dp_compute_proto, "double_it">,
                           Method<&Echo::scale, Dispatch::dp_compute_proto_with_func, "scale">,
                           Method<&Echo::sizes_and_sums, Dispatch::dp_compute_metric, "sizes_and_sums">,
                           Method<&Echo::megatron, Dispatch::megatron_compute_proto, "megatron">,
                           Method<&Echo::group_sum, Dispatch::one_to_all, "group_sum">,
                           Method<&Echo::remember, Dispatch::all_to_all, "remember">,
                           Method<&Echo::remembered, Dispatch::one_to_all, "remembered">>;

 private:
  WorkerContext& context_;
  std::string remembered_;
};

/// A test-only worker whose method waits a known time (no CPU used).
struct Sleeper {
  static constexpr std::string_view name = "Sleeper";
  explicit Sleeper(WorkerContext&) {}
  double sleep_for(double seconds) {
    const auto start = Clock::now();
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
    return std::chrono::duration<double>(Clock::now() - start).count();
  }
  using methods = TypeList<Method<&Sleeper::sleep_for, Dispatch::one_to_all, "sleep_for">>;
};

static_assert(check_worker<Echo>() && check_worker<Sleeper>());
static_assert(Method<&Echo::double_it, Dispatch::dp_compute_proto, "double_it">::mode == Dispatch::dp_compute_proto);
static_assert(method_index_v<Echo, &Echo::greet> == 2);
static_assert(method_index_v<Sleeper, &Echo::greet> == Sleeper::methods::size);  // not Sleeper's

using TestRuntime = Runtime<Echo, Sleeper>;
TestRuntime* runtime = nullptr;

DataProto rows(Index n, bool padded = false) {
  MatrixF x(n, 2);
  for (Index i = 0; i < n; ++i) x.row(i) << static_cast<float>(i), static_cast<float>(100 + i);
  DataProto batch;
  batch.set("x", x);
  if (padded) batch.meta_info()["_verl_auto_padding"] = true;
  return batch;
}

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

TEST(HybridFlowRuntime, OneToAllReachesEveryRankAndRankZeroOnlyTheFirst) {
  const int n = runtime->world_size();
  auto group = runtime->spawn<Echo>(runtime->whole_world());
  std::vector<int> expected(static_cast<std::size_t>(n));
  std::iota(expected.begin(), expected.end(), 0);
  EXPECT_EQ(group.call<&Echo::rank_of>().get(), expected);
  EXPECT_EQ(group.call<&Echo::global_rank_of>().get(), expected);
  EXPECT_EQ(group.call<&Echo::greet>(std::string("hello")).get(), "hello from group rank 0");
  // The group's communicator: an all-reduce among its own ranks.
  const std::vector<double> sums = group.call<&Echo::group_sum>(1.5).get();
  EXPECT_EQ(sums, std::vector<double>(static_cast<std::size_t>(n), 1.5 * n));
}

TEST(HybridFlowRuntime, PerRankArgumentsGoToTheirRanks) {
  const int n = runtime->world_size();
  auto group = runtime->spawn<Echo>(runtime->whole_world());
  std::vector<std::int64_t> values(static_cast<std::size_t>(n));
  std::iota(values.begin(), values.end(), 5);
  const std::vector<std::int64_t> taken = group.call<&Echo::take>(values).get();
  for (int r = 0; r < n; ++r) EXPECT_EQ(taken[static_cast<std::size_t>(r)], (5 + r) * 10 + r);
  std::vector<std::string> texts;
  for (int r = 0; r < n; ++r) texts.push_back("t" + std::to_string(r));
  group.call<&Echo::remember>(texts).get();
  group.call<&Echo::remember>(texts).get();  // a worker keeps its state between calls
  const auto remembered = group.call<&Echo::remembered>().get();
  for (int r = 0; r < n; ++r) EXPECT_EQ(remembered[static_cast<std::size_t>(r)], texts[static_cast<std::size_t>(r)] + texts[static_cast<std::size_t>(r)]);
  // A list of the wrong length names the method, the mode and the lengths.
  try {
    (void)group.call<&Echo::take>(std::vector<std::int64_t>(static_cast<std::size_t>(n + 1), 0));
    ADD_FAILURE() << "expected an error";
  } catch (const InvalidArgument& error) {
    EXPECT_NE(std::string(error.what()).find("Echo.take: argument 0: DP_COMPUTE needs one element per rank"), std::string::npos)
        << error.what();
  }
}

TEST(HybridFlowRuntime, DataProtoIsChunkedOverTheRanksAndConcatenatedBack) {
  const int n = runtime->world_size();
  auto group = runtime->spawn<Echo>(runtime->whole_world());
  const DataProto batch = rows(3 * n);
  const DataProto doubled = group.call<&Echo::double_it>(batch).get();
  ASSERT_EQ(doubled.size(), 3 * n);
  EXPECT_EQ(doubled.tensor("x"), MatrixF(batch.tensor("x") * 2.0f));
  const auto& who = doubled.non_tensor<std::int64_t>("rank");
  for (Index i = 0; i < 3 * n; ++i) EXPECT_EQ(who[static_cast<std::size_t>(i)], i / 3) << i;  // contiguous chunks in rank order
  const DataProto scaled = group.call<&Echo::scale>(0.5, batch).get();
  EXPECT_EQ(scaled.tensor("x"), MatrixF(batch.tensor("x") * 0.5f));
  const auto metrics = group.call<&Echo::sizes_and_sums>(batch).get();
  ASSERT_EQ(metrics.size(), static_cast<std::size_t>(n));
  double total = 0;
  for (const auto& m : metrics) {
    EXPECT_EQ(m[0], 3.0);
    total += m[1];
  }
  EXPECT_EQ(total, batch.tensor("x").sum());
}

TEST(HybridFlowRuntime, UnevenBatchesArePaddedAsVerlDoesOrRefused) {
  const int n = runtime->world_size();
  auto group = runtime->spawn<Echo>(runtime->whole_world());
  const Index size = 2 * n + 1;  // never divisible by n > 1
  const DataProto padded = group.call<&Echo::double_it>(rows(size, /*padded=*/true)).get();
  ASSERT_EQ(padded.size(), size);  // the padding rows were cut from the result
  EXPECT_EQ(padded.tensor("x"), MatrixF(rows(size).tensor("x") * 2.0f));
  if (n > 1) {
    try {
      (void)group.call<&Echo::double_it>(rows(size));
      ADD_FAILURE() << "expected an error";
    } catch (const InvalidArgument& error) {
      EXPECT_NE(std::string(error.what()).find("Echo.double_it: argument 0: a batch of " + std::to_string(size) +
                                               " rows does not split over " + std::to_string(n) + " ranks"),
                std::string::npos)
          << error.what();
    }
  }
}

TEST(HybridFlowRuntime, MegatronModeSendsToDataParallelGroupsAndCollectsFromTheirLastStage) {
  const int n = runtime->world_size();
  // Every (tp, dp, pp) factorisation of the world.
  for (std::int64_t tp = 1; tp <= n; ++tp) {
    for (std::int64_t pp = 1; tp * pp <= n; ++pp) {
      if (n % (tp * pp) != 0) continue;
      const std::int64_t dp = n / (tp * pp);
      auto group = runtime->spawn<Echo>(runtime->whole_world(), GroupMesh(tp, dp, pp));
      EXPECT_EQ(group.dp_size(), dp);
      const DataProto batch = rows(2 * dp + (dp > 1 ? 1 : 0), /*padded=*/true);
      const DataProto out = group.call<&Echo::megatron>(batch).get();
      ASSERT_EQ(out.size(), batch.size()) << tp << " " << dp << " " << pp;
      EXPECT_EQ(out.tensor("x"), batch.tensor("x"));
      const Index per_share = (batch.size() + dp - 1) / dp;
      for (Index i = 0; i < out.size(); ++i) {
        const auto k = static_cast<std::size_t>(i);
        EXPECT_EQ(out.non_tensor<std::int64_t>("dp")[k], i / per_share);
        EXPECT_EQ(out.non_tensor<std::int64_t>("tp")[k], 0);
        EXPECT_EQ(out.non_tensor<std::int64_t>("pp")[k], pp - 1);
      }
    }
  }
  // Without a mesh the mode is refused by name.
  auto flat = runtime->spawn<Echo>(runtime->whole_world());
  try {
    (void)flat.call<&Echo::megatron>(rows(n));
    ADD_FAILURE() << "expected an error";
  } catch (const InvalidArgument& error) {
    EXPECT_NE(std::string(error.what()).find("MEGATRON_COMPUTE_PROTO sends to data-parallel groups"), std::string::npos);
  }
}

TEST(HybridFlowRuntime, GroupsOnPoolsOfTheirOwnAndColocatedGroupsShareRanks) {
  const int n = runtime->world_size();
  if (n < 2) GTEST_SKIP() << "needs two ranks";
  auto first = runtime->spawn<Echo>(runtime->pool(0, n / 2));
  auto second = runtime->spawn<Echo>(runtime->pool(n / 2, n - n / 2));
  auto colocated = runtime->spawn<Sleeper>(runtime->pool(0, n / 2));
  std::vector<int> first_ranks(static_cast<std::size_t>(n / 2)), second_ranks(static_cast<std::size_t>(n - n / 2));
  std::iota(first_ranks.begin(), first_ranks.end(), 0);
  std::iota(second_ranks.begin(), second_ranks.end(), n / 2);
  EXPECT_EQ(first.call<&Echo::global_rank_of>().get(), first_ranks);
  EXPECT_EQ(second.call<&Echo::global_rank_of>().get(), second_ranks);
  // The group communicator spans the pool only.
  EXPECT_EQ(second.call<&Echo::group_sum>(1.0).get(), std::vector<double>(second_ranks.size(), static_cast<double>(second_ranks.size())));
  EXPECT_EQ(colocated.call<&Sleeper::sleep_for>(0.0).get().size(), first_ranks.size());
}

TEST(HybridFlowRuntime, CallsOnDisjointPoolsOverlap) {
  const int n = runtime->world_size();
  if (n < 2) GTEST_SKIP() << "needs two ranks";
  auto actor = runtime->spawn<Sleeper>(runtime->pool(0, 1));
  auto critic = runtime->spawn<Sleeper>(runtime->pool(1, 1));
  // Two calls issued together finish in about the longer one, not the sum.
  const auto start = Clock::now();
  auto a = actor.call<&Sleeper::sleep_for>(0.4);
  auto b = critic.call<&Sleeper::sleep_for>(0.6);
  EXPECT_LT(seconds_since(start), 0.2);  // issuing does not wait
  const auto [slept_a, slept_b] = wait_all(a, b);
  const double both = seconds_since(start);
  EXPECT_GE(slept_a[0], 0.4);
  EXPECT_GE(slept_b[0], 0.6);
  EXPECT_LT(both, 0.9) << "the calls ran one after the other (sum 1.0 s)";
  // A slow critic does not hold up the actor's next calls.
  const auto slow_start = Clock::now();
  auto slow = critic.call<&Sleeper::sleep_for>(1.0);
  for (int i = 0; i < 3; ++i) (void)actor.call<&Sleeper::sleep_for>(0.1).get();
  EXPECT_LT(seconds_since(slow_start), 0.8);
  EXPECT_FALSE(slow.ready());
  (void)slow.get();
  // Calls reaching one rank run there in order (colocated workers share its time).
  auto same_rank = runtime->spawn<Sleeper>(runtime->pool(0, 1));
  const auto serial_start = Clock::now();
  auto c = actor.call<&Sleeper::sleep_for>(0.3);
  auto d = same_rank.call<&Sleeper::sleep_for>(0.3);
  (void)wait_all(c, d);
  EXPECT_GE(seconds_since(serial_start), 0.6);
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  return run_controller<Echo, Sleeper>(argc, argv, [](TestRuntime& r) {
    runtime = &r;
    return RUN_ALL_TESTS();
  });
}
