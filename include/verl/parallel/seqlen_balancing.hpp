// Sequence-length balancing (verl/utils/seqlen_balancing.py): splitting a batch into k groups
// of near-equal total length or attention workload, for data-parallel ranks and for dynamic
// micro-batches, and putting results back in the original order afterwards.
//
// The partitions are verl's exactly, including their order and the order of the indices inside
// them (Karmarkar-Karp's tie-breaking follows Python's heapq and sort step for step), so a C++
// trainer places every sequence on the same rank and in the same micro-batch as verl would.
#pragma once

#include <algorithm>
#include <array>
#include <climits>
#include <concepts>
#include <cstdint>
#include <functional>
#include <numeric>
#include <optional>
#include <ranges>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>
#include <vector>

#include "verl/config.hpp"
#include "verl/core/error.hpp"
#include "verl/core/metrics.hpp"
#include "verl/core/tensor.hpp"
#include "verl/parallel/detail/heapq.hpp"

namespace verl::parallel {

/// k lists of indices into the balanced sequence list, one list per partition.
using Partitions = std::vector<std::vector<int>>;

namespace detail {

// Python integers never overflow; int64 can, and then we refuse rather than return garbage.
constexpr std::int64_t checked_add(std::int64_t a, std::int64_t b, std::string_view argument) {
  std::int64_t sum = 0;
  if (__builtin_add_overflow(a, b, &sum))
    verl::detail::throw_invalid_argument("{}: expected values whose sums fit in int64, {} + {} overflows", argument, a,
                                         b);
  return sum;
}

constexpr std::int64_t checked_mul(std::int64_t a, std::int64_t b, std::string_view argument) {
  std::int64_t product = 0;
  if (__builtin_mul_overflow(a, b, &product))
    verl::detail::throw_invalid_argument("{}: expected values whose products fit in int64, {} * {} overflows", argument,
                                         a, b);
  return product;
}

inline void require_positive_k(int k_partitions) {
  VERL_CHECK_ARG(k_partitions >= 1, "k_partitions: expected at least 1, got {}", k_partitions);
}

inline void require_indexable(std::size_t n, std::string_view argument) {
  VERL_CHECK_ARG(n <= static_cast<std::size_t>(INT_MAX), "{}: expected at most {} items, got {}", argument, INT_MAX, n);
}

inline void require_divisible_for_equal_size(std::size_t n, int k_partitions) {
  VERL_CHECK_ARG(n % static_cast<std::size_t>(k_partitions) == 0,
                 "seqlen_list: equal_size needs a length divisible by k_partitions={}, got length {}", k_partitions, n);
}

/// Sum of |v| must fit, so every subset sum and every difference of two disjoint subset sums do.
inline void require_bounded_magnitudes(std::span<const std::int64_t> values, std::string_view argument) {
  std::int64_t magnitude = 0;
  for (const auto v : values) {
    VERL_CHECK_ARG(v != INT64_MIN, "{}: expected values above INT64_MIN, got {}", argument, v);
    magnitude = checked_add(magnitude, v < 0 ? -v : v, argument);
  }
}

}  // namespace detail

// ---- integer helpers with Python's floor-division semantics ------------------------------------

/// Python's a // b (rounds towards negative infinity).
constexpr std::int64_t floor_div(std::int64_t a, std::int64_t b) {
  VERL_CHECK_ARG(b != 0, "b: expected a non-zero divisor, got 0");
  VERL_CHECK_ARG(!(a == INT64_MIN && b == -1), "a: {} // -1 overflows int64", a);
  std::int64_t q = a / b;
  if (a % b != 0 && ((a < 0) != (b < 0))) --q;
  return q;
}

/// verl's ceildiv: the smallest integer >= a / b, for either sign of a and b.
constexpr std::int64_t ceildiv(std::int64_t a, std::int64_t b) {
  VERL_CHECK_ARG(b != 0, "b: expected a non-zero divisor, got 0");
  VERL_CHECK_ARG(!(a == INT64_MIN && b == -1), "a: {} / -1 overflows int64", a);
  std::int64_t q = a / b;
  if (a % b != 0 && ((a < 0) == (b < 0))) ++q;
  return q;
}

/// verl's roundup_divisible: ((a + b - 1) // b) * b, the smallest multiple of b >= a for b > 0.
constexpr std::int64_t roundup_divisible(std::int64_t a, std::int64_t b) {
  const std::int64_t shifted = detail::checked_add(detail::checked_add(a, b, "a"), -1, "a");
  return detail::checked_mul(floor_div(shifted, b), b, "a");
}

// ---- workload --------------------------------------------------------------------------------

/// verl's calculate_workload: attention FLOPs of one sequence, up to a constant, for a 7B-sized
/// model (hidden 4096): 24576 * s + s^2. Integer lengths give an int64 workload (as torch's int64
/// tensors), checked for overflow; floating types round each operation as torch does (two
/// products, then the sum) and keep their type.
template <class T>
  requires(std::is_arithmetic_v<T> && !std::is_same_v<T, bool>)
constexpr auto calculate_workload(T seqlen) {
  if constexpr (std::is_integral_v<T>) {
    if constexpr (std::is_unsigned_v<T> && sizeof(T) >= sizeof(std::int64_t))
      VERL_CHECK_ARG(seqlen <= static_cast<T>(INT64_MAX), "seqlen_list: expected lengths that fit in int64, got {}",
                     seqlen);
    const auto s = static_cast<std::int64_t>(seqlen);
    return detail::checked_add(detail::checked_mul(24576, s, "seqlen_list"), detail::checked_mul(s, s, "seqlen_list"),
                               "seqlen_list");
  } else {
    const T linear = T(24576) * seqlen;
    const T square = seqlen * seqlen;
    return linear + square;
  }
}

namespace detail {
template <class T>
std::vector<T> workloads_of(std::span<const T> seqlens) {
  std::vector<T> out(seqlens.size());
  std::transform(seqlens.begin(), seqlens.end(), out.begin(), [](T s) { return calculate_workload(s); });
  return out;
}
}  // namespace detail

/// Element-wise calculate_workload of a list of sequence lengths.
inline std::vector<std::int64_t> calculate_workload(std::span<const std::int64_t> seqlen_list) {
  return detail::workloads_of(seqlen_list);
}
inline std::vector<float> calculate_workload(std::span<const float> seqlen_list) {
  return detail::workloads_of(seqlen_list);
}
inline std::vector<double> calculate_workload(std::span<const double> seqlen_list) {
  return detail::workloads_of(seqlen_list);
}

// ---- partition statistics -------------------------------------------------------------------

/// Sum of `values` over each partition (indices are checked against values.size()).
inline std::vector<std::int64_t> partition_sums(std::span<const std::int64_t> values, const Partitions& partitions) {
  std::vector<std::int64_t> sums;
  sums.reserve(partitions.size());
  for (std::size_t p = 0; p < partitions.size(); ++p) {
    std::int64_t sum = 0;
    for (const int i : partitions[p]) {
      VERL_CHECK_ARG(i >= 0 && static_cast<std::size_t>(i) < values.size(),
                     "partitions: expected indices in [0, {}), got {} in partition {}", values.size(), i, p);
      sum = detail::checked_add(sum, values[static_cast<std::size_t>(i)], "seqlen_list");
    }
    sums.push_back(sum);
  }
  return sums;
}

/// max - min of the partition sums (0 for no partitions).
inline std::int64_t partition_spread(std::span<const std::int64_t> sums) {
  if (sums.empty()) return 0;
  const auto [lo, hi] = std::minmax_element(sums.begin(), sums.end());
  return *hi - *lo;
}

/// Number of indices in each partition.
inline std::vector<std::int64_t> partition_sizes(const Partitions& partitions) {
  std::vector<std::int64_t> sizes;
  sizes.reserve(partitions.size());
  for (const auto& p : partitions) sizes.push_back(static_cast<std::int64_t>(p.size()));
  return sizes;
}

// ---- partitioning algorithms -----------------------------------------------------------------

namespace detail {

/// One of Karmarkar-Karp's subsets: its items form a singly linked list through a solver-wide
/// `next` array (every index lives in exactly one subset), so merging two subsets is O(1)
/// instead of the copy verl makes.
struct KKSubset {
  std::int64_t sum = 0;
  std::int32_t size = 0;
  std::int32_t head = -1;
  std::int32_t tail = -1;
};

/// A state of k subsets in verl's descending order, storing only the non-empty ones. The empty
/// subsets are all alike and sort between the subsets with sum >= 0 and those with sum < 0, so
/// the full order is: subsets[0, nonnegative), k - subsets.size() empty ones, the rest. Early
/// states hold one item, so this keeps memory and merge cost O(items) rather than O(k).
struct KKState {
  std::vector<KKSubset> subsets;
  std::size_t nonnegative = 0;
  std::int64_t spread = 0;  ///< largest minus smallest subset sum, cached for the heap
};

/// Largest differencing method with verl's exact orderings:
/// * subset order: by sum, then size, then the (index, value) item lists lexicographically;
/// * state order for the heapq: larger spread first, then larger first subset first;
/// * a merge pairs the i-th largest subset of one state with the i-th smallest of the other,
///   appending the latter's items, and re-sorts descending.
class KarmarkarKarpSolver {
 public:
  KarmarkarKarpSolver(std::span<const std::int64_t> seqlens, int k_partitions, bool equal_size)
      : seqlens_(seqlens), k_(static_cast<std::size_t>(k_partitions)), equal_size_(equal_size) {}

  Partitions solve() {
    const std::size_t n = seqlens_.size();
    std::vector<std::pair<std::int64_t, int>> sorted(n);
    for (std::size_t i = 0; i < n; ++i) sorted[i] = {seqlens_[i], static_cast<int>(i)};
    std::sort(sorted.begin(), sorted.end());  // Python's sorted((seqlen, i))

    // Each initial state holds one item (k items with equal_size), in order of the sorted list.
    const std::size_t items_per_state = equal_size_ ? k_ : 1;
    const std::size_t num_states = n / items_per_state;
    states_.assign(num_states, KKState{});
    next_.assign(n, -1);
    std::vector<HeapEntry> heap;
    heap.reserve(num_states);
    const auto state_less = [this](const HeapEntry& a, const HeapEntry& b) { return state_precedes(a, b); };
    for (std::size_t s = 0; s < num_states; ++s) {
      auto& subsets = states_[s].subsets;
      subsets.reserve(items_per_state);
      for (std::size_t j = 0; j < items_per_state; ++j) {
        const auto [value, index] = sorted[s * items_per_state + j];
        subsets.push_back(KKSubset{value, 1, index, index});
      }
      sort_descending(subsets.begin(), subsets.end());
      update_order_statistics(states_[s]);
      verl::detail::heapq::push(heap, HeapEntry{states_[s].spread, s}, state_less);
    }

    while (heap.size() > 1) {
      const std::size_t largest = verl::detail::heapq::pop(heap, state_less).state;
      const std::size_t second = verl::detail::heapq::pop(heap, state_less).state;
      merge_into(largest, second);
      verl::detail::heapq::push(heap, HeapEntry{states_[largest].spread, largest}, state_less);
    }

    const KKState& final_state = states_[heap.front().state];
    Partitions partitions(k_);
    for (std::size_t p = 0; p < k_; ++p) {
      const KKSubset* subset = at(final_state, p);
      if (subset == nullptr) continue;
      partitions[p].reserve(static_cast<std::size_t>(subset->size));
      for (int i = subset->head; i >= 0; i = next_[static_cast<std::size_t>(i)]) partitions[p].push_back(i);
    }
    return partitions;
  }

 private:
  static constexpr std::size_t none = static_cast<std::size_t>(-1);

  /// The spread is copied into the heap so that most comparisons need not touch the state.
  struct HeapEntry {
    std::int64_t spread;
    std::size_t state;
  };

  std::size_t empty_count(const KKState& s) const { return k_ - s.subsets.size(); }

  /// Index into s.subsets of the subset at `position` in the full order, or `none` if empty.
  std::size_t stored_index(const KKState& s, std::size_t position) const {
    if (position < s.nonnegative) return position;
    const std::size_t empties = empty_count(s);
    if (position < s.nonnegative + empties) return none;
    return position - empties;
  }
  /// Position in the full order of s.subsets[index].
  std::size_t position_of(const KKState& s, std::size_t index) const {
    return index < s.nonnegative ? index : index + empty_count(s);
  }
  const KKSubset* at(const KKState& s, std::size_t position) const {
    const std::size_t i = stored_index(s, position);
    return i == none ? nullptr : &s.subsets[i];
  }

  bool subset_less(const KKSubset& a, const KKSubset& b) const {
    if (a.sum != b.sum) return a.sum < b.sum;
    if (a.size != b.size) return a.size < b.size;
    // Item tuples start with the (unique) index, so the first differing index decides.
    for (int i = a.head, j = b.head;; i = next_[static_cast<std::size_t>(i)], j = next_[static_cast<std::size_t>(j)]) {
      if (i < 0 || j < 0) return i < 0 && j >= 0;
      if (i != j) return i < j;
    }
  }

  /// Non-empty subsets hold distinct items, so no two compare equal and an unstable sort gives
  /// Python's sorted(reverse=True) order.
  template <class It>
  void sort_descending(It first, It last) const {
    std::sort(first, last, [this](const KKSubset& a, const KKSubset& b) { return subset_less(b, a); });
  }

  /// Recomputes `nonnegative` and `spread` after s.subsets was re-sorted.
  void update_order_statistics(KKState& s) const {
    const auto it =
        std::partition_point(s.subsets.begin(), s.subsets.end(), [](const KKSubset& x) { return x.sum >= 0; });
    s.nonnegative = static_cast<std::size_t>(it - s.subsets.begin());
    const KKSubset* top = at(s, 0);
    const KKSubset* bottom = at(s, k_ - 1);
    s.spread = (top ? top->sum : 0) - (bottom ? bottom->sum : 0);
  }

  /// verl's State.__lt__: the heapq pops the largest spread first, then the largest top subset.
  bool state_precedes(const HeapEntry& a, const HeapEntry& b) const {
    if (a.spread != b.spread) return a.spread > b.spread;
    const KKState& sa = states_[a.state];
    const KKState& sb = states_[b.state];
    static const KKSubset empty{};
    const KKSubset* top_a = at(sa, 0);
    const KKSubset* top_b = at(sb, 0);
    return subset_less(top_b ? *top_b : empty, top_a ? *top_a : empty);
  }

  /// Pairs the subset at position i of `into` with the one at position k-1-i of `from`. Only
  /// `from`'s non-empty subsets change anything; the untouched subsets of `into` stay sorted, so
  /// the new order is a merge of them with the few changed ones.
  void merge_into(std::size_t into, std::size_t from) {
    KKState& dst = states_[into];
    KKState& src = states_[from];
    changed_.assign(dst.subsets.size(), 0);
    touched_.clear();
    for (std::size_t j = 0; j < src.subsets.size(); ++j) {
      const KKSubset& b = src.subsets[j];
      const std::size_t i = stored_index(dst, k_ - 1 - position_of(src, j));
      if (i == none) {
        touched_.push_back(b);  // lands in an empty subset
        continue;
      }
      KKSubset& a = dst.subsets[i];
      next_[static_cast<std::size_t>(a.tail)] = b.head;
      a.tail = b.tail;
      a.size += b.size;
      a.sum += b.sum;
      changed_[i] = 1;
    }
    untouched_.clear();
    for (std::size_t i = 0; i < dst.subsets.size(); ++i)
      (changed_[i] ? touched_ : untouched_).push_back(dst.subsets[i]);
    sort_descending(touched_.begin(), touched_.end());
    dst.subsets.resize(untouched_.size() + touched_.size());
    std::merge(untouched_.begin(), untouched_.end(), touched_.begin(), touched_.end(), dst.subsets.begin(),
               [this](const KKSubset& a, const KKSubset& b) { return subset_less(b, a); });
    update_order_statistics(dst);
    std::vector<KKSubset>().swap(src.subsets);  // `from` is gone, as in verl
  }

  std::span<const std::int64_t> seqlens_;
  std::size_t k_;
  bool equal_size_;
  std::vector<KKState> states_;
  std::vector<int> next_;
  // Scratch buffers reused by every merge.
  std::vector<char> changed_;
  std::vector<KKSubset> touched_;
  std::vector<KKSubset> untouched_;
};

}  // namespace detail

/// verl's karmarkar_karp (largest differencing method). Partitions come in the final state's
/// order (largest sum first); indices inside a partition are in merge order, not sorted.
/// `equal_size` gives every partition len / k items (the length must be divisible by k).
/// Partitions may be empty when there are fewer items than partitions.
struct KarmarkarKarp {
  static constexpr std::string_view name = "karmarkar_karp";
  bool equal_size = false;

  Partitions operator()(std::span<const std::int64_t> seqlen_list, int k_partitions) const {
    detail::require_positive_k(k_partitions);
    VERL_CHECK_ARG(!seqlen_list.empty(), "seqlen_list: expected at least one item, got an empty list");
    detail::require_indexable(seqlen_list.size(), "seqlen_list");
    if (equal_size) detail::require_divisible_for_equal_size(seqlen_list.size(), k_partitions);
    detail::require_bounded_magnitudes(seqlen_list, "seqlen_list");
    return detail::KarmarkarKarpSolver(seqlen_list, k_partitions, equal_size).solve();
  }
};

/// verl's greedy_partition: items in input order, each to the first partition with the smallest
/// running sum. `equal_size` adds sum(seqlen_list) + 1 to every item, so that item counts are
/// balanced before lengths.
struct GreedyPartition {
  static constexpr std::string_view name = "greedy_partition";
  bool equal_size = false;

  Partitions operator()(std::span<const std::int64_t> seqlen_list, int k_partitions) const {
    detail::require_positive_k(k_partitions);
    detail::require_indexable(seqlen_list.size(), "seqlen_list");
    if (equal_size) detail::require_divisible_for_equal_size(seqlen_list.size(), k_partitions);
    std::int64_t bias = 0;
    if (equal_size) {
      for (const auto v : seqlen_list) bias = detail::checked_add(bias, v, "seqlen_list");
      bias = detail::checked_add(bias, 1, "seqlen_list");
    }
    const auto k = static_cast<std::size_t>(k_partitions);
    Partitions partitions(k);
    std::vector<std::int64_t> sums(k, 0);
    for (std::size_t i = 0; i < seqlen_list.size(); ++i) {
      std::size_t smallest = 0;
      for (std::size_t j = 1; j < k; ++j)
        if (sums[j] < sums[smallest]) smallest = j;
      partitions[smallest].push_back(static_cast<int>(i));
      sums[smallest] =
          detail::checked_add(sums[smallest], detail::checked_add(seqlen_list[i], bias, "seqlen_list"), "seqlen_list");
    }
    if (equal_size) {
      // Negative lengths can defeat the bias; verl asserts on the outcome.
      for (std::size_t p = 0; p < k; ++p)
        VERL_CHECK_ARG(partitions[p].size() * k == seqlen_list.size(),
                       "seqlen_list: equal_size expected {} items in every partition, partition {} got {}",
                       seqlen_list.size() / k, p, partitions[p].size());
    }
    return partitions;
  }
};

/// A partitioning algorithm: verl's name, and a call (seqlen_list, k_partitions) -> Partitions.
template <class A>
concept PartitionAlgorithm = requires(const A& algorithm, std::span<const std::int64_t> seqlens, int k) {
  { A::name } -> std::convertible_to<std::string_view>;
  { algorithm(seqlens, k) } -> std::same_as<Partitions>;
};

static_assert(PartitionAlgorithm<KarmarkarKarp>);
static_assert(PartitionAlgorithm<GreedyPartition>);

/// verl's karmarkar_karp(seqlen_list, k_partitions, equal_size).
inline Partitions karmarkar_karp(std::span<const std::int64_t> seqlen_list, int k_partitions, bool equal_size) {
  return KarmarkarKarp{equal_size}(seqlen_list, k_partitions);
}

/// verl's greedy_partition(seqlen_list, k_partitions, equal_size).
inline Partitions greedy_partition(std::span<const std::int64_t> seqlen_list, int k_partitions, bool equal_size) {
  return GreedyPartition{equal_size}(seqlen_list, k_partitions);
}

// ---- registry --------------------------------------------------------------------------------

/// Any partitioning algorithm chosen at run time.
using AnyPartitionAlgorithm = std::variant<KarmarkarKarp, GreedyPartition>;

inline constexpr std::array<std::string_view, 2> partition_algorithm_names{KarmarkarKarp::name, GreedyPartition::name};

/// The algorithm named like verl's function ("karmarkar_karp", "greedy_partition").
inline AnyPartitionAlgorithm make_partition_algorithm(std::string_view name, bool equal_size = false) {
  if (name == KarmarkarKarp::name) return KarmarkarKarp{equal_size};
  if (name == GreedyPartition::name) return GreedyPartition{equal_size};
  verl::detail::throw_invalid_argument("partition_algorithm: expected one of {}, {}, got '{}'",
                                       partition_algorithm_names[0], partition_algorithm_names[1], name);
}

inline std::string_view name_of(const AnyPartitionAlgorithm& algorithm) {
  return std::visit([](const auto& a) { return std::string_view(a.name); }, algorithm);
}

/// Runs whichever algorithm `algorithm` holds.
inline Partitions partition(const AnyPartitionAlgorithm& algorithm, std::span<const std::int64_t> seqlen_list,
                            int k_partitions) {
  return std::visit([&](const auto& a) { return a(seqlen_list, k_partitions); }, algorithm);
}

// ---- balanced partitions as verl's trainer uses them -----------------------------------------

/// verl's get_seqlen_balanced_partitions with any algorithm: needs len >= k, rejects a result
/// with an empty partition, and sorts the indices inside each partition (the partition order is
/// the algorithm's).
template <class Algorithm>
Partitions get_seqlen_balanced_partitions(const Algorithm& algorithm, std::span<const std::int64_t> seqlen_list,
                                          int k_partitions) {
  VERL_STATIC_ASSERT(PartitionAlgorithm<Algorithm> || (std::same_as<Algorithm, AnyPartitionAlgorithm>),
                     ALGORITHM_MUST_MAP_SEQLENS_AND_K_TO_PARTITIONS_AND_HAVE_A_NAME);
  detail::require_positive_k(k_partitions);
  VERL_CHECK_ARG(seqlen_list.size() >= static_cast<std::size_t>(k_partitions),
                 "seqlen_list: expected at least k_partitions={} items, got {}", k_partitions, seqlen_list.size());
  Partitions partitions;
  if constexpr (std::same_as<Algorithm, AnyPartitionAlgorithm>) {
    partitions = partition(algorithm, seqlen_list, k_partitions);
  } else {
    partitions = algorithm(seqlen_list, k_partitions);
  }
  for (std::size_t p = 0; p < partitions.size(); ++p) {
    VERL_CHECK_ARG(!partitions[p].empty(), "seqlen_list: partition {} of k_partitions={} came out empty ({} items)", p,
                   k_partitions, seqlen_list.size());
    std::sort(partitions[p].begin(), partitions[p].end());
  }
  return partitions;
}

/// verl's get_seqlen_balanced_partitions(seqlen_list, k_partitions, equal_size): Karmarkar-Karp.
inline Partitions get_seqlen_balanced_partitions(std::span<const std::int64_t> seqlen_list, int k_partitions,
                                                 bool equal_size) {
  return get_seqlen_balanced_partitions(KarmarkarKarp{equal_size}, seqlen_list, k_partitions);
}

/// verl's get_group_balanced_partitions: samples sharing a uid (contiguous runs of equal uids)
/// stay together; the groups are balanced on summed workload with equal group counts per
/// partition. Returns each partition's sample indices sorted. `uid_list` is any random-access
/// range of equality-comparable ids (strings, integers).
template <std::ranges::random_access_range Uids>
  requires std::equality_comparable<std::ranges::range_value_t<Uids>>
Partitions get_group_balanced_partitions(std::span<const std::int64_t> seqlen_list, const Uids& uid_list,
                                         int k_partitions) {
  const auto n = seqlen_list.size();
  VERL_CHECK_ARG(static_cast<std::size_t>(std::ranges::size(uid_list)) == n,
                 "uid_list: expected the length of seqlen_list ({}), got {}", n, std::ranges::size(uid_list));
  detail::require_positive_k(k_partitions);
  detail::require_indexable(n, "seqlen_list");

  // group g covers samples [starts[g], starts[g + 1]).
  std::vector<int> starts;
  std::vector<std::int64_t> group_workloads;
  auto uid = std::ranges::begin(uid_list);
  for (std::size_t i = 0; i < n; ++i) {
    if (i == 0 || !(uid[static_cast<std::ptrdiff_t>(i)] == uid[static_cast<std::ptrdiff_t>(i - 1)])) {
      starts.push_back(static_cast<int>(i));
      group_workloads.push_back(0);
    }
    group_workloads.back() =
        detail::checked_add(group_workloads.back(), calculate_workload(seqlen_list[i]), "seqlen_list");
  }
  starts.push_back(static_cast<int>(n));
  const int num_groups = static_cast<int>(group_workloads.size());
  VERL_CHECK_ARG(num_groups >= k_partitions,
                 "uid_list: expected at least k_partitions={} uid groups (contiguous runs of equal uids), got {}",
                 k_partitions, num_groups);
  VERL_CHECK_ARG(num_groups % k_partitions == 0,
                 "uid_list: expected a number of uid groups divisible by k_partitions={}, got {}", k_partitions,
                 num_groups);

  const Partitions group_partitions = get_seqlen_balanced_partitions(group_workloads, k_partitions, true);
  Partitions samples(group_partitions.size());
  for (std::size_t p = 0; p < group_partitions.size(); ++p) {
    // Groups are contiguous and the group indices sorted, so the samples come out sorted.
    for (const int g : group_partitions[p])
      for (int i = starts[static_cast<std::size_t>(g)]; i < starts[static_cast<std::size_t>(g) + 1]; ++i)
        samples[p].push_back(i);
  }
  return samples;
}

// ---- metrics ---------------------------------------------------------------------------------

/// verl's log_seqlen_unbalance: `{prefix}/min`, `/max`, `/minmax_diff` over the naive split into
/// consecutive chunks of len // k items, `/balanced_min`, `/balanced_max` over `partitions`, and
/// `/mean` = total / k (a double, as Python's true division).
inline Metrics log_seqlen_unbalance(std::span<const std::int64_t> seqlen_list, const Partitions& partitions,
                                    std::string_view prefix) {
  VERL_CHECK_ARG(!partitions.empty(), "partitions: expected at least one partition, got none");
  const std::size_t chunk = seqlen_list.size() / partitions.size();
  VERL_CHECK_ARG(chunk > 0, "seqlen_list: expected at least as many items as partitions ({}), got {}",
                 partitions.size(), seqlen_list.size());
  std::int64_t naive_min = 0, naive_max = 0, total = 0;
  for (std::size_t offset = 0; offset < seqlen_list.size(); offset += chunk) {
    std::int64_t sum = 0;
    const std::size_t end = std::min(offset + chunk, seqlen_list.size());
    for (std::size_t i = offset; i < end; ++i) sum = detail::checked_add(sum, seqlen_list[i], "seqlen_list");
    naive_min = offset == 0 ? sum : std::min(naive_min, sum);
    naive_max = offset == 0 ? sum : std::max(naive_max, sum);
    total = detail::checked_add(total, sum, "seqlen_list");
  }
  const auto balanced = partition_sums(seqlen_list, partitions);
  const auto [balanced_min, balanced_max] = std::minmax_element(balanced.begin(), balanced.end());
  const std::string p(prefix);
  return Metrics{
      {p + "/min", static_cast<double>(naive_min)},
      {p + "/max", static_cast<double>(naive_max)},
      {p + "/minmax_diff", static_cast<double>(naive_max - naive_min)},
      {p + "/balanced_min", static_cast<double>(*balanced_min)},
      {p + "/balanced_max", static_cast<double>(*balanced_max)},
      {p + "/mean", static_cast<double>(total) / static_cast<double>(partitions.size())},
  };
}

// ---- dynamic micro-batches -------------------------------------------------------------------

/// rearrange_micro_batches' knobs, under verl's names.
struct MicroBatchOptions {
  std::int64_t max_token_len = 0;                      ///< token budget per micro-batch (>= the sequence length)
  std::optional<std::int64_t> num_batches_divided_by;  ///< round the count up to a multiple (virtual PP size)
  std::optional<std::int64_t> min_num_micro_batch;     ///< at least this many micro-batches (PP)
  bool use_dynamic_bsz_balance = true;                 ///< order micro-batches to shrink pipeline bubbles
  /// verl's same_micro_num_in_dp: an all-reduce MAX of the count over the data-parallel group,
  /// applied before num_batches_divided_by. Empty for a single process (verl without torch.distributed).
  std::function<std::int64_t(std::int64_t)> reduce_num_micro_batches;
  /// verl 0.9.1's force_group_size: consecutive samples [g k, (g + 1) k) stay in one micro-batch
  /// (the batch size must be a multiple of k).
  std::int64_t force_group_size = 1;
};

/// How a batch is split into micro-batches.
struct MicroBatchPlan {
  Partitions micro_bsz_idx;                         ///< sample indices of each micro-batch, sorted
  std::vector<std::int64_t> micro_batch_workloads;  ///< summed calculate_workload of each micro-batch

  int num_micro_batches() const { return static_cast<int>(micro_bsz_idx.size()); }
};

/// rearrange_micro_batches from the effective (unpadded) lengths, as verl 0.9.1: samples in
/// groups of force_group_size (1: each alone) balanced on their summed workloads, starting from
/// min(#groups, ceil(tokens / max_token_len)) micro-batches (then min_num_micro_batch, the
/// cross-rank maximum, num_batches_divided_by), and growing the count by num_batches_divided_by
/// (or 1) until no micro-batch holds more than max_token_len tokens. `max_seq_len` is what verl
/// checks against max_token_len: the padded width for a padded batch, the longest sequence for
/// a nested (packed) one.
///
/// With reduce_num_micro_batches (several ranks), each rank grows its own count and the count
/// used is the maximum over the ranks; a rank whose partition at that count breaks the token
/// budget raises (the ranks never exchange more than the one count).
inline MicroBatchPlan plan_micro_batches(std::span<const std::int64_t> seq_len_effective, std::int64_t max_seq_len,
                                         const MicroBatchOptions& options) {
  VERL_CHECK_ARG(options.max_token_len >= 1, "max_token_len: expected a positive token budget, got {}",
                 options.max_token_len);
  VERL_CHECK_ARG(!options.num_batches_divided_by || *options.num_batches_divided_by >= 1,
                 "num_batches_divided_by: expected a positive count, got {}",
                 options.num_batches_divided_by.value_or(0));
  VERL_CHECK_ARG(options.max_token_len >= max_seq_len,
                 "max_token_len: expected at least the sequence length {}, got {}", max_seq_len, options.max_token_len);
  const auto batch_size = static_cast<std::int64_t>(seq_len_effective.size());
  const std::int64_t group_size = options.force_group_size;
  VERL_CHECK_ARG(group_size >= 1 && batch_size % group_size == 0,
                 "force_group_size: expected a positive divisor of the batch size {} (verl asserts), got {}", batch_size,
                 group_size);
  const std::int64_t groups = batch_size / group_size;
  std::int64_t total = 0;
  for (const auto len : seq_len_effective) total = detail::checked_add(total, len, "seq_len_effective");
  const std::vector<std::int64_t> workloads = calculate_workload(seq_len_effective);
  std::vector<std::int64_t> group_tokens(static_cast<std::size_t>(groups), 0), group_workloads(group_tokens);
  for (std::int64_t i = 0; i < batch_size; ++i) {
    const auto g = static_cast<std::size_t>(i / group_size);
    group_tokens[g] += seq_len_effective[static_cast<std::size_t>(i)];
    group_workloads[g] = detail::checked_add(group_workloads[g], workloads[static_cast<std::size_t>(i)], "workload");
  }
  const std::int64_t largest_group = groups > 0 ? *std::max_element(group_tokens.begin(), group_tokens.end()) : 0;
  VERL_CHECK_ARG(largest_group <= options.max_token_len,
                 "max_token_len: a forced group of {} samples holds {} tokens, more than max_token_len {}, and cannot "
                 "be split",
                 group_size, largest_group, options.max_token_len);

  std::int64_t count = std::min(groups, ceildiv(total, options.max_token_len));
  if (options.min_num_micro_batch) count = std::max(*options.min_num_micro_batch, count);
  VERL_CHECK_ARG(count >= 1, "seq_len_effective: expected a batch with tokens, got {} sequences totalling {} tokens",
                 batch_size, total);
  const std::int64_t step = options.num_batches_divided_by.value_or(1);
  if (options.num_batches_divided_by) count = roundup_divisible(count, step);
  const auto require_enough_groups = [&](std::int64_t wanted) {
    VERL_CHECK_ARG(wanted <= groups,
                   "min_num_micro_batch / num_batches_divided_by / max_token_len: expected at most {} micro-batches "
                   "(one per forced group of {}; batch size {}), got {}",
                   groups, group_size, batch_size, wanted);
  };
  const auto fits = [&](const Partitions& parts) {
    for (const auto& part : parts) {
      std::int64_t tokens = 0;
      for (const auto g : part) tokens += group_tokens[static_cast<std::size_t>(g)];
      if (tokens > options.max_token_len) return false;
    }
    return true;
  };
  Partitions group_parts;
  for (;; count += step) {
    require_enough_groups(count);
    group_parts = get_seqlen_balanced_partitions(group_workloads, static_cast<int>(count), false);
    if (fits(group_parts)) break;
  }
  if (options.reduce_num_micro_batches) {
    std::int64_t common = options.reduce_num_micro_batches(count);
    if (options.num_batches_divided_by) common = roundup_divisible(common, step);
    if (common != count) {
      require_enough_groups(common);
      count = common;
      group_parts = get_seqlen_balanced_partitions(group_workloads, static_cast<int>(count), false);
      VERL_CHECK_ARG(fits(group_parts),
                     "max_token_len: the micro-batch count {} shared with the other ranks leaves a micro-batch over "
                     "{} tokens on this rank",
                     count, options.max_token_len);
    }
  }

  // Back from groups to samples, each group's samples in order.
  Partitions parts;
  parts.reserve(group_parts.size());
  for (const auto& group_part : group_parts) {
    std::vector<int> samples;
    samples.reserve(group_part.size() * static_cast<std::size_t>(group_size));
    for (const int g : group_part)
      for (std::int64_t k = 0; k < group_size; ++k) samples.push_back(static_cast<int>(g * group_size + k));
    parts.push_back(std::move(samples));
  }
  std::vector<std::int64_t> sums = partition_sums(workloads, parts);

  MicroBatchPlan plan;
  if (options.use_dynamic_bsz_balance) {
    // Heaviest first (ties by first index, descending), then the even positions reversed followed
    // by the odd ones: light micro-batches at both ends of the pipeline.
    std::vector<std::size_t> by_weight(parts.size());
    std::iota(by_weight.begin(), by_weight.end(), std::size_t{0});
    std::sort(by_weight.begin(), by_weight.end(), [&](std::size_t a, std::size_t b) {
      if (sums[a] != sums[b]) return sums[a] > sums[b];
      return parts[a].front() > parts[b].front();
    });
    std::vector<std::size_t> order;
    order.reserve(parts.size());
    for (std::size_t i = by_weight.size(); i-- > 0;)
      if (i % 2 == 0) order.push_back(by_weight[i]);
    for (std::size_t i = 1; i < by_weight.size(); i += 2) order.push_back(by_weight[i]);
    for (const auto i : order) {
      plan.micro_bsz_idx.push_back(std::move(parts[i]));
      plan.micro_batch_workloads.push_back(sums[i]);
    }
  } else {
    plan.micro_bsz_idx = std::move(parts);
    plan.micro_batch_workloads = std::move(sums);
  }
  return plan;
}

/// verl's rearrange_micro_batches for a padded batch: `attention_mask` is (B, S) 0/1, each row's
/// sum is its effective length and S must fit in max_token_len.
template <class Derived>
MicroBatchPlan rearrange_micro_batches(const Eigen::MatrixBase<Derived>& attention_mask,
                                       const MicroBatchOptions& options) {
  verl::detail::require_binary_mask("attention_mask", attention_mask);
  std::vector<std::int64_t> lengths(static_cast<std::size_t>(attention_mask.rows()));
  for (Index i = 0; i < attention_mask.rows(); ++i) {
    std::int64_t len = 0;
    for (Index j = 0; j < attention_mask.cols(); ++j) len += attention_mask(i, j) != 0 ? 1 : 0;
    lengths[static_cast<std::size_t>(i)] = len;
  }
  return plan_micro_batches(lengths, static_cast<std::int64_t>(attention_mask.cols()), options);
}

// ---- restoring the original order ------------------------------------------------------------

namespace detail {
template <class T>
std::vector<T> reverse_index(std::span<const T> idx_map) {
  const auto n = idx_map.size();
  std::vector<T> reverse(n);
  std::vector<bool> seen(n, false);
  for (std::size_t i = 0; i < n; ++i) {
    const T target = idx_map[i];
    VERL_CHECK_ARG(target >= 0 && static_cast<std::size_t>(target) < n,
                   "idx_map: expected a permutation of 0..{}, got {} at position {}", n == 0 ? 0 : n - 1, target, i);
    VERL_CHECK_ARG(!seen[static_cast<std::size_t>(target)],
                   "idx_map: expected a permutation, got {} twice (again at position {})", target, i);
    seen[static_cast<std::size_t>(target)] = true;
    reverse[static_cast<std::size_t>(target)] = static_cast<T>(i);
  }
  return reverse;
}
}  // namespace detail

/// verl's get_reverse_idx: the inverse permutation, out[idx_map[i]] = i. A map that is not a
/// permutation of 0..n-1 is an error (verl would return a silently wrong map or raise).
inline std::vector<std::int64_t> get_reverse_idx(std::span<const std::int64_t> idx_map) {
  return detail::reverse_index(idx_map);
}
inline std::vector<int> get_reverse_idx(std::span<const int> idx_map) { return detail::reverse_index(idx_map); }

/// The micro-batch order of the samples: the partitions concatenated (itertools.chain).
inline std::vector<int> flatten_partitions(const Partitions& partitions) {
  std::vector<int> flat;
  std::size_t total = 0;
  for (const auto& p : partitions) total += p.size();
  flat.reserve(total);
  for (const auto& p : partitions) flat.insert(flat.end(), p.begin(), p.end());
  return flat;
}

/// Rows `rows` of `data`, in that order (how verl slices a micro-batch out of the batch).
template <class Derived>
RowMatrix<typename Derived::Scalar> index_select_rows(const Eigen::MatrixBase<Derived>& data,
                                                      std::span<const int> rows) {
  RowMatrix<typename Derived::Scalar> out(static_cast<Index>(rows.size()), data.cols());
  for (std::size_t r = 0; r < rows.size(); ++r) {
    VERL_CHECK_ARG(rows[r] >= 0 && rows[r] < data.rows(), "rows: expected indices in [0, {}), got {} at position {}",
                   data.rows(), rows[r], r);
    out.row(static_cast<Index>(r)) = data.row(rows[r]);
  }
  return out;
}

/// verl's restore_dynamic_batch: `data` holds the micro-batch outputs concatenated in
/// micro-batch order (row p belongs to sample flatten_partitions(batch_idx_list)[p]); returns
/// the rows in the original sample order.
template <class Derived>
RowMatrix<typename Derived::Scalar> restore_dynamic_batch(const Eigen::MatrixBase<Derived>& data,
                                                          const Partitions& batch_idx_list) {
  const std::vector<int> order = flatten_partitions(batch_idx_list);
  verl::detail::require_length("batch_idx_list (total indices)", static_cast<Index>(order.size()), data.rows());
  const std::vector<int> source_row = get_reverse_idx(order);
  return index_select_rows(data, source_row);
}

/// restore_dynamic_batch for one value per sample (a std::vector, std::span, ... of any type).
template <std::ranges::random_access_range Values>
  requires(!std::is_base_of_v<Eigen::EigenBase<std::remove_cvref_t<Values>>, std::remove_cvref_t<Values>>)
std::vector<std::ranges::range_value_t<Values>> restore_dynamic_batch(const Values& data,
                                                                      const Partitions& batch_idx_list) {
  const std::vector<int> order = flatten_partitions(batch_idx_list);
  const auto n = static_cast<Index>(std::ranges::size(data));
  verl::detail::require_length("batch_idx_list (total indices)", static_cast<Index>(order.size()), n);
  const std::vector<int> source_row = get_reverse_idx(order);
  std::vector<std::ranges::range_value_t<Values>> out;
  out.reserve(source_row.size());
  const auto first = std::ranges::begin(data);
  for (const int r : source_row) out.push_back(first[r]);
  return out;
}

}  // namespace verl::parallel
