#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "verl/parallel/detail/heapq.hpp"
#include "verl/parallel/seqlen_balancing.hpp"

using namespace verl;
using namespace verl::parallel;

namespace {

using I64s = std::vector<std::int64_t>;

/// Expects `call` to throw InvalidArgument whose message contains every fragment.
template <class Call>
void expect_invalid(Call&& call, std::initializer_list<std::string> fragments) {
  try {
    call();
    ADD_FAILURE() << "expected verl::InvalidArgument";
  } catch (const InvalidArgument& e) {
    for (const auto& f : fragments) EXPECT_NE(std::string(e.what()).find(f), std::string::npos) << e.what();
  }
}

/// Every index in [0, n) exactly once across exactly k partitions.
void expect_valid_partition(const Partitions& partitions, std::size_t n, int k) {
  ASSERT_EQ(partitions.size(), static_cast<std::size_t>(k));
  std::vector<int> seen(n, 0);
  for (const auto& p : partitions)
    for (const int i : p) {
      ASSERT_GE(i, 0);
      ASSERT_LT(static_cast<std::size_t>(i), n);
      ++seen[static_cast<std::size_t>(i)];
    }
  for (std::size_t i = 0; i < n; ++i) EXPECT_EQ(seen[i], 1) << "index " << i;
}

I64s random_lengths(std::mt19937_64& rng, std::size_t n, std::int64_t lo, std::int64_t hi) {
  std::uniform_int_distribution<std::int64_t> dist(lo, hi);
  I64s v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// A partitioning algorithm must be callable and named; these are not.
struct Unnamed {
  Partitions operator()(std::span<const std::int64_t>, int) const { return {}; }
};
struct WrongResult {
  static constexpr std::string_view name = "wrong";
  int operator()(std::span<const std::int64_t>, int) const { return 0; }
};

}  // namespace

// ---- policies and registry --------------------------------------------------------------------

TEST(SeqlenBalancing, PoliciesSatisfyTheConcept) {
  static_assert(PartitionAlgorithm<KarmarkarKarp>);
  static_assert(PartitionAlgorithm<GreedyPartition>);
  static_assert(!PartitionAlgorithm<Unnamed>);
  static_assert(!PartitionAlgorithm<WrongResult>);
  EXPECT_EQ(KarmarkarKarp::name, "karmarkar_karp");
  EXPECT_EQ(GreedyPartition::name, "greedy_partition");
}

TEST(SeqlenBalancing, RegistryFindsVerlNames) {
  const I64s lens{5, 5, 5, 5, 1, 1};
  for (const auto name : partition_algorithm_names) {
    const auto algorithm = make_partition_algorithm(name, true);
    EXPECT_EQ(name_of(algorithm), name);
  }
  EXPECT_EQ(partition(make_partition_algorithm("karmarkar_karp", true), lens, 3), karmarkar_karp(lens, 3, true));
  EXPECT_EQ(partition(make_partition_algorithm("greedy_partition", true), lens, 3), greedy_partition(lens, 3, true));
}

TEST(SeqlenBalancing, UnknownAlgorithmNameListsTheValidOnes) {
  expect_invalid([] { (void)make_partition_algorithm("first_fit"); },
                 {"partition_algorithm", "first_fit", "karmarkar_karp", "greedy_partition"});
}

// ---- Python heapq emulation ------------------------------------------------------------------

TEST(SeqlenBalancing, HeapqBreaksTiesExactlyLikePython) {
  // Keys pushed in this order into Python's heapq (items compare by key only), then popped:
  // the label order is what CPython 3 printed.
  const std::vector<int> keys{2, 2, 0, 3, 1, 0, 1, 0, 2, 3, 1, 3, 0, 1, 0, 1, 3, 2, 1, 3};
  const std::vector<int> python_pop_order{2, 5, 14, 12, 7, 6, 13, 10, 4, 18, 15, 17, 0, 1, 8, 3, 16, 19, 9, 11};
  std::vector<int> heap;
  const auto less = [&](int a, int b) { return keys[static_cast<std::size_t>(a)] < keys[static_cast<std::size_t>(b)]; };
  for (int i = 0; i < static_cast<int>(keys.size()); ++i) verl::detail::heapq::push(heap, i, less);
  std::vector<int> popped;
  while (!heap.empty()) popped.push_back(verl::detail::heapq::pop(heap, less));
  EXPECT_EQ(popped, python_pop_order);
}

// ---- Karmarkar-Karp and greedy ---------------------------------------------------------------

TEST(SeqlenBalancing, KarmarkarKarpMatchesVerlOnSmallInputs) {
  // Outputs of verl's karmarkar_karp / greedy_partition (Python) for these inputs.
  EXPECT_EQ(karmarkar_karp(I64s{3, 1, 2, 2}, 2, false), (Partitions{{2, 3}, {0, 1}}));
  EXPECT_EQ(karmarkar_karp(I64s{5, 5, 5, 5, 1, 1}, 3, true), (Partitions{{0, 1}, {5, 2}, {4, 3}}));
  EXPECT_EQ(karmarkar_karp(I64s{7, 1, 1, 1}, 3, false), (Partitions{{0}, {2, 1}, {3}}));
  EXPECT_EQ(greedy_partition(I64s{5, 5, 5, 5, 1, 1}, 3, true), (Partitions{{0, 3}, {1, 4}, {2, 5}}));
}

TEST(SeqlenBalancing, KarmarkarKarpGivesValidPartitions) {
  std::mt19937_64 rng(7);
  for (const std::size_t n : {1u, 2u, 5u, 16u, 64u, 257u})
    for (const int k : {1, 2, 3, 8, 40}) {
      const I64s lens = random_lengths(rng, n, 0, 50);  // many ties and zeros
      expect_valid_partition(karmarkar_karp(lens, k, false), n, k);
      if (n % static_cast<std::size_t>(k) == 0) {
        const auto parts = karmarkar_karp(lens, k, true);
        expect_valid_partition(parts, n, k);
        for (const auto& p : parts) EXPECT_EQ(p.size() * static_cast<std::size_t>(k), n);
      }
    }
}

TEST(SeqlenBalancing, KarmarkarKarpOrdersPartitionsBySumDescending) {
  std::mt19937_64 rng(3);
  const I64s lens = random_lengths(rng, 200, 1, 4096);
  const auto sums = partition_sums(lens, karmarkar_karp(lens, 8, false));
  EXPECT_TRUE(std::is_sorted(sums.rbegin(), sums.rend()));
  // The differencing method balances far better than the naive split: 200 values up to 4096
  // into 8 partitions end within a few items' worth of each other.
  EXPECT_LT(partition_spread(sums), 4096);
}

TEST(SeqlenBalancing, KarmarkarKarpHandlesMorePartitionsThanItems) {
  const auto parts = karmarkar_karp(I64s{4, 9}, 5, false);
  expect_valid_partition(parts, 2, 5);
  EXPECT_EQ(parts[0], std::vector<int>{1});
  EXPECT_EQ(parts[1], std::vector<int>{0});
}

TEST(SeqlenBalancing, PartitioningRejectsBadArguments) {
  const I64s lens{1, 2, 3};
  expect_invalid([&] { (void)karmarkar_karp(lens, 0, false); }, {"k_partitions", "0"});
  expect_invalid([&] { (void)greedy_partition(lens, -1, false); }, {"k_partitions", "-1"});
  expect_invalid([&] { (void)karmarkar_karp(I64s{}, 2, false); }, {"seqlen_list", "empty"});
  expect_invalid([&] { (void)karmarkar_karp(lens, 2, true); }, {"seqlen_list", "divisible", "3"});
  expect_invalid([&] { (void)greedy_partition(lens, 2, true); }, {"seqlen_list", "divisible", "3"});
  expect_invalid([] { (void)karmarkar_karp(I64s{INT64_MAX, 1}, 2, false); }, {"seqlen_list", "overflow"});
  expect_invalid(
      [] {
        (void)greedy_partition(I64s{INT64_MAX / 2, INT64_MAX / 2}, 2, true);
      },
      {"seqlen_list", "overflow"});
}

TEST(SeqlenBalancing, GreedyTakesItemsInOrderToTheFirstSmallestPartition) {
  EXPECT_EQ(greedy_partition(I64s{3, 3, 1, 1, 1}, 2, false), (Partitions{{0, 2, 4}, {1, 3}}));
  // Empty input is fine for the greedy algorithm (verl returns k empty lists).
  EXPECT_EQ(greedy_partition(I64s{}, 2, false), (Partitions{{}, {}}));
}

TEST(SeqlenBalancing, BalancedPartitionsAreSortedAndNonEmpty) {
  std::mt19937_64 rng(11);
  const I64s lens = random_lengths(rng, 48, 1, 1000);
  const auto parts = get_seqlen_balanced_partitions(lens, 6, false);
  expect_valid_partition(parts, lens.size(), 6);
  for (const auto& p : parts) {
    EXPECT_FALSE(p.empty());
    EXPECT_TRUE(std::is_sorted(p.begin(), p.end()));
  }
  // Same partitions as Karmarkar-Karp, in the same order, indices sorted inside.
  auto raw = karmarkar_karp(lens, 6, false);
  for (auto& p : raw) std::sort(p.begin(), p.end());
  EXPECT_EQ(parts, raw);
  // Any algorithm works through the same checks.
  expect_valid_partition(get_seqlen_balanced_partitions(GreedyPartition{}, lens, 6), lens.size(), 6);
}

TEST(SeqlenBalancing, BalancedPartitionsRejectTooFewItemsAndEmptyResults) {
  expect_invalid(
      [] {
        (void)get_seqlen_balanced_partitions(I64s{1, 2}, 3, false);
      },
      {"seqlen_list", "k_partitions=3", "2"});
  // verl: karmarkar_karp([-2, 1, 1], 2) leaves the second partition empty, and verl asserts.
  EXPECT_EQ(karmarkar_karp(I64s{-2, 1, 1}, 2, false), (Partitions{{1, 0, 2}, {}}));
  expect_invalid([] { (void)get_seqlen_balanced_partitions(I64s{-2, 1, 1}, 2, false); }, {"partition 1", "empty"});
}

// ---- integer helpers -------------------------------------------------------------------------

TEST(SeqlenBalancing, IntegerHelpersUsePythonFloorDivision) {
  EXPECT_EQ(floor_div(-7, 2), -4);
  EXPECT_EQ(floor_div(7, -2), -4);
  EXPECT_EQ(floor_div(-7, -2), 3);
  EXPECT_EQ(ceildiv(7, 3), 3);
  EXPECT_EQ(ceildiv(6, 3), 2);
  EXPECT_EQ(ceildiv(-7, 3), -2);
  EXPECT_EQ(ceildiv(7, -3), -2);
  EXPECT_EQ(ceildiv(-7, -3), 3);
  EXPECT_EQ(ceildiv(0, 5), 0);
  EXPECT_EQ(roundup_divisible(7, 4), 8);
  EXPECT_EQ(roundup_divisible(8, 4), 8);
  EXPECT_EQ(roundup_divisible(-7, 3), -6);
  EXPECT_EQ(roundup_divisible(7, -3), 3);  // ((7 - 3 - 1) // -3) * -3, as Python computes it
  static_assert(ceildiv(1023, 512) == 2 && roundup_divisible(1023, 512) == 1024);
  expect_invalid([] { (void)ceildiv(1, 0); }, {"b", "0"});
  expect_invalid([] { (void)roundup_divisible(1, 0); }, {"b", "0"});
  expect_invalid([] { (void)ceildiv(INT64_MIN, -1); }, {"overflows"});
}

TEST(SeqlenBalancing, WorkloadIsVerlsAttentionEstimate) {
  EXPECT_EQ(calculate_workload(std::int64_t{8193}), 268476417);
  // Narrow integer lengths give an int64 workload instead of wrapping in their own type.
  static_assert(std::is_same_v<decltype(calculate_workload(100000)), std::int64_t>);
  EXPECT_EQ(calculate_workload(100000), 24576LL * 100000 + 100000LL * 100000);
  EXPECT_EQ(calculate_workload(I64s{0, 1, 1024}), (I64s{0, 24577, 24576 * 1024 + 1024 * 1024}));
  // float32 rounds each operation like torch: 24576*s and s*s in float, then their sum.
  const float s = 2791.7f;
  EXPECT_EQ(calculate_workload(s), 76402410.0f);
  expect_invalid([] { (void)calculate_workload(std::int64_t{4'000'000'000}); }, {"seqlen_list", "overflows"});
}

// ---- reverse index and restoring order -------------------------------------------------------

TEST(SeqlenBalancing, ReverseIndexInvertsAPermutation) {
  EXPECT_EQ(get_reverse_idx(I64s{2, 0, 1, 4, 3}), (I64s{1, 2, 0, 4, 3}));
  EXPECT_EQ(get_reverse_idx(std::vector<int>{1, 3, 8, 4, 0, 2, 5, 6, 7}),
            (std::vector<int>{4, 0, 5, 1, 3, 6, 7, 8, 2}));
  EXPECT_TRUE(get_reverse_idx(I64s{}).empty());
  expect_invalid([] { (void)get_reverse_idx(I64s{0, 3, 1}); }, {"idx_map", "permutation", "3"});
  expect_invalid([] { (void)get_reverse_idx(I64s{0, 0}); }, {"idx_map", "twice"});
  expect_invalid([] { (void)get_reverse_idx(I64s{-1, 0}); }, {"idx_map", "-1"});
}

TEST(SeqlenBalancing, RestoreDynamicBatchUndoesTheMicroBatchSplit) {
  MatrixF data(6, 3);
  for (Index i = 0; i < data.rows(); ++i)
    for (Index j = 0; j < data.cols(); ++j) data(i, j) = static_cast<float>(10 * i + j);
  const Partitions micro{{4, 1}, {0, 5, 2}, {3}};
  // Micro-batches as the trainer runs them, their outputs concatenated in micro-batch order.
  const MatrixF concatenated = index_select_rows(data, flatten_partitions(micro));
  EXPECT_EQ(concatenated.row(0), data.row(4));
  EXPECT_EQ(restore_dynamic_batch(concatenated, micro), data);

  const std::vector<std::string> names{"e", "b", "a", "f", "c", "d"};  // micro-batch order
  EXPECT_EQ(restore_dynamic_batch(names, micro), (std::vector<std::string>{"a", "b", "c", "d", "e", "f"}));

  expect_invalid([&] { (void)restore_dynamic_batch(concatenated, Partitions{{0, 1}}); }, {"batch_idx_list", "6", "2"});
  expect_invalid(
      [&] {
        (void)restore_dynamic_batch(concatenated, Partitions{{0, 1, 2}, {3, 4, 4}});
      },
      {"idx_map", "twice"});
  expect_invalid([&] { (void)index_select_rows(data, std::vector<int>{6}); }, {"rows", "6"});
}

// ---- metrics ---------------------------------------------------------------------------------

TEST(SeqlenBalancing, LogSeqlenUnbalanceUsesVerlsKeys) {
  const I64s lens{773, 24, 561, 1987, 1889, 910, 1207, 600, 1527, 1365, 1995, 1749, 1140, 1186, 500, 663};
  const Partitions parts{{3, 5, 13, 14}, {0, 2, 6, 10}, {4, 7, 9, 15}, {1, 8, 11, 12}};
  const Metrics m = log_seqlen_unbalance(lens, parts, "global_seqlen");
  const Metrics expected{{"global_seqlen/min", 3345},          {"global_seqlen/max", 6636},
                         {"global_seqlen/minmax_diff", 3291},  {"global_seqlen/balanced_min", 4440},
                         {"global_seqlen/balanced_max", 4583}, {"global_seqlen/mean", 4519.0}};
  EXPECT_EQ(m, expected);
  // mean is Python's true division of the total.
  const Metrics uneven = log_seqlen_unbalance(I64s{1, 1, 2}, Partitions{{0}, {1}, {2}}, "p");
  EXPECT_DOUBLE_EQ(uneven.at("p/mean"), 4.0 / 3.0);

  expect_invalid([&] { (void)log_seqlen_unbalance(lens, Partitions{}, "p"); }, {"partitions"});
  expect_invalid([&] { (void)log_seqlen_unbalance(I64s{1}, Partitions{{0}, {}}, "p"); }, {"seqlen_list"});
  expect_invalid([&] { (void)log_seqlen_unbalance(lens, Partitions{{0, 16}}, "p"); }, {"partitions", "16"});
}

// ---- groups ----------------------------------------------------------------------------------

TEST(SeqlenBalancing, GroupBalancedPartitionsKeepUidGroupsTogether) {
  std::mt19937_64 rng(5);
  const I64s lens = random_lengths(rng, 24, 100, 4000);
  std::vector<std::string> uids;
  for (int g = 0; g < 12; ++g) uids.insert(uids.end(), 2, "uid-" + std::to_string(g));
  const auto parts = get_group_balanced_partitions(lens, uids, 4);
  expect_valid_partition(parts, lens.size(), 4);
  for (const auto& p : parts) {
    EXPECT_EQ(p.size(), 6u);  // 3 groups of 2 each
    EXPECT_TRUE(std::is_sorted(p.begin(), p.end()));
    for (const int i : p) EXPECT_NE(std::find(p.begin(), p.end(), i ^ 1), p.end()) << "group of " << i << " split";
  }
  // Integer group ids work the same way.
  std::vector<std::int64_t> ids(24);
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int64_t>(i / 2);
  EXPECT_EQ(get_group_balanced_partitions(lens, ids, 4), parts);
}

TEST(SeqlenBalancing, GroupBalancedPartitionsRejectBadGroups) {
  const I64s lens{1, 2, 3, 4};
  expect_invalid([&] { (void)get_group_balanced_partitions(lens, I64s{0, 0, 1}, 2); }, {"uid_list", "4", "3"});
  expect_invalid(
      [&] {
        (void)get_group_balanced_partitions(lens, I64s{0, 0, 0, 0}, 2);
      },
      {"uid_list", "k_partitions=2", "1"});
  expect_invalid(
      [&] {
        (void)get_group_balanced_partitions(lens, I64s{0, 1, 2, 2}, 2);
      },
      {"uid_list", "divisible", "3"});
}

// ---- dynamic micro-batches -------------------------------------------------------------------

namespace {
MatrixF mask_of(const I64s& lengths, Index width) {
  MatrixF mask = MatrixF::Zero(static_cast<Index>(lengths.size()), width);
  for (std::size_t i = 0; i < lengths.size(); ++i) mask.row(static_cast<Index>(i)).head(lengths[i]).setOnes();
  return mask;
}
}  // namespace

TEST(SeqlenBalancing, MicroBatchesRespectTheTokenBudgetCount) {
  std::mt19937_64 rng(9);
  const I64s lens = random_lengths(rng, 40, 1, 64);
  MicroBatchOptions options;
  options.max_token_len = 128;
  const auto plan = rearrange_micro_batches(mask_of(lens, 64), options);
  std::int64_t total = 0;
  for (const auto l : lens) total += l;
  // verl 0.9.1: from ceil(tokens / budget) up, until every micro-batch fits the budget.
  EXPECT_GE(plan.num_micro_batches(), ceildiv(total, 128));
  expect_valid_partition(plan.micro_bsz_idx, lens.size(), plan.num_micro_batches());
  for (const auto& micro : plan.micro_bsz_idx) {
    std::int64_t tokens = 0;
    for (const int i : micro) tokens += lens[static_cast<std::size_t>(i)];
    EXPECT_LE(tokens, 128);
  }
  const auto workloads = calculate_workload(lens);
  EXPECT_EQ(plan.micro_batch_workloads, partition_sums(workloads, plan.micro_bsz_idx));
  // Balanced ordering: the heaviest micro-batch sits in the middle, the lightest at an end.
  const auto& w = plan.micro_batch_workloads;
  const auto heaviest = std::max_element(w.begin(), w.end()) - w.begin();
  EXPECT_EQ(heaviest, static_cast<std::ptrdiff_t>((w.size() - 1) / 2));
  const auto lightest = *std::min_element(w.begin(), w.end());
  EXPECT_TRUE(w.front() == lightest || w.back() == lightest);
}

TEST(SeqlenBalancing, MicroBatchCountFollowsVerlsRoundingRules) {
  const I64s lens(12, 10);  // 120 tokens
  MicroBatchOptions options;
  options.max_token_len = 50;  // ceil(120/50) = 3
  EXPECT_EQ(plan_micro_batches(lens, 16, options).num_micro_batches(), 3);
  options.min_num_micro_batch = 5;
  EXPECT_EQ(plan_micro_batches(lens, 16, options).num_micro_batches(), 5);
  options.num_batches_divided_by = 4;
  EXPECT_EQ(plan_micro_batches(lens, 16, options).num_micro_batches(), 8);
  options.reduce_num_micro_batches = [](std::int64_t local) { return local + 4; };  // another rank needs more
  EXPECT_EQ(plan_micro_batches(lens, 16, options).num_micro_batches(), 12);
  // Without balancing the partitions keep Karmarkar-Karp's order.
  MicroBatchOptions plain;
  plain.max_token_len = 50;
  plain.use_dynamic_bsz_balance = false;
  EXPECT_EQ(plan_micro_batches(lens, 16, plain).micro_bsz_idx,
            get_seqlen_balanced_partitions(calculate_workload(lens), 3, false));
}

TEST(SeqlenBalancing, MicroBatchCountGrowsUntilEveryMicroBatchFitsTheBudget) {
  // 4 x 60 tokens under a budget of 100: ceil(240 / 100) = 3, but no 3-way split of four
  // 60-token samples fits, so the count grows to 4 (and with num_batches_divided_by = 3, to 6 > 4
  // samples: an error naming the counts).
  const I64s lens(4, 60);
  MicroBatchOptions options;
  options.max_token_len = 100;
  EXPECT_EQ(plan_micro_batches(lens, 64, options).num_micro_batches(), 4);
  options.num_batches_divided_by = 3;
  expect_invalid([&] { (void)plan_micro_batches(lens, 64, options); }, {"at most 4 micro-batches", "got 6"});
}

TEST(SeqlenBalancing, ForcedGroupsStayInOneMicroBatch) {
  std::mt19937_64 rng(17);
  for (const std::int64_t group : {1, 2, 3, 4}) {
    const I64s lens = random_lengths(rng, 12 * group, 1, 32);
    MicroBatchOptions options;
    options.max_token_len = 32 * group;
    options.force_group_size = group;
    const auto plan = plan_micro_batches(lens, 32, options);
    expect_valid_partition(plan.micro_bsz_idx, lens.size(), plan.num_micro_batches());
    for (const auto& micro : plan.micro_bsz_idx) {
      std::int64_t tokens = 0;
      for (const int i : micro) tokens += lens[static_cast<std::size_t>(i)];
      EXPECT_LE(tokens, options.max_token_len);
      // Whole groups, each in order: sample i sits with every sample of its group.
      std::set<std::int64_t> members(micro.begin(), micro.end());
      for (const int i : micro)
        for (std::int64_t k = 0; k < group; ++k) EXPECT_TRUE(members.count(i / group * group + k)) << "group " << group;
    }
  }
  MicroBatchOptions options;
  options.max_token_len = 16;
  options.force_group_size = 2;
  expect_invalid([&] { (void)plan_micro_batches(I64s{4, 4, 4}, 8, options); }, {"force_group_size", "3", "2"});
  expect_invalid([&] { (void)plan_micro_batches(I64s{8, 9, 1, 1}, 16, options); },
                 {"max_token_len", "17 tokens", "cannot be split"});
}

TEST(SeqlenBalancing, MicroBatchesRejectBadArguments) {
  const MatrixF mask = mask_of(I64s{3, 5, 2, 8}, 8);
  MicroBatchOptions options;
  options.max_token_len = 7;
  expect_invalid([&] { (void)rearrange_micro_batches(mask, options); }, {"max_token_len", "8", "7"});
  options.max_token_len = 0;
  expect_invalid([&] { (void)rearrange_micro_batches(mask, options); }, {"max_token_len", "0"});
  options.max_token_len = 8;
  options.min_num_micro_batch = 5;
  expect_invalid([&] { (void)rearrange_micro_batches(mask, options); }, {"min_num_micro_batch", "4", "5"});
  options.min_num_micro_batch.reset();
  options.num_batches_divided_by = 0;
  expect_invalid([&] { (void)rearrange_micro_batches(mask, options); }, {"num_batches_divided_by", "0"});
  options.num_batches_divided_by.reset();
  MatrixF not_binary = mask;
  not_binary(1, 1) = 0.5f;
  expect_invalid([&] { (void)rearrange_micro_batches(not_binary, options); }, {"attention_mask", "0/1"});
  expect_invalid([&] { (void)rearrange_micro_batches(MatrixF::Zero(4, 8), options); }, {"seq_len_effective"});
}
