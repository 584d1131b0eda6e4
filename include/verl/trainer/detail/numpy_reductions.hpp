// numpy's float64 reductions, to the last bit: np.sum / np.mean use pairwise summation (blocks of
// eight partial sums, halving above 128 elements), np.std is the population standard deviation
// computed from that mean; and numpy's legacy np.random.seed(s) + choice(n, size, replace=True)
// (MT19937 seeded with init_genrand, 32-bit draws masked to the next power of two and rejected
// above n - 1). verl's validation metrics are built from these.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace verl::trainer::detail {

/// numpy's pairwise_sum over `values`.
inline double pairwise_sum(std::span<const double> values) {
  constexpr std::size_t block = 128;
  const std::size_t n = values.size();
  if (n < 8) {
    double sum = 0.0;
    for (const double v : values) sum += v;
    return sum;
  }
  if (n <= block) {
    double r[8];
    for (std::size_t j = 0; j < 8; ++j) r[j] = values[j];
    std::size_t i = 8;
    for (; i < n - (n % 8); i += 8)
      for (std::size_t j = 0; j < 8; ++j) r[j] += values[i + j];
    double sum = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    for (; i < n; ++i) sum += values[i];
    return sum;
  }
  std::size_t half = n / 2;
  half -= half % 8;
  return pairwise_sum(values.first(half)) + pairwise_sum(values.subspan(half));
}

/// np.add.reduce: the identity 0 plus the pairwise sum of all elements.
inline double numpy_sum(std::span<const double> values) { return 0.0 + pairwise_sum(values); }

inline double numpy_mean(std::span<const double> values) {
  return numpy_sum(values) / static_cast<double>(values.size());
}

/// np.std (ddof = 0).
inline double numpy_std(std::span<const double> values) {
  const double mean = numpy_mean(values);
  std::vector<double> squares(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) squares[i] = (values[i] - mean) * (values[i] - mean);
  return std::sqrt(numpy_sum(squares) / static_cast<double>(values.size()));
}

/// np.random.seed(seed); np.random.choice(n, size=count, replace=True), flattened row-major.
inline std::vector<std::size_t> numpy_legacy_choice(std::uint32_t seed, std::size_t n, std::size_t count) {
  std::vector<std::size_t> out(count, 0);
  if (n <= 1) return out;
  std::mt19937 engine(seed);  // numpy's legacy seeding of an integer is MT19937's init_genrand
  const auto max = static_cast<std::uint32_t>(n - 1);
  std::uint32_t mask = max;
  for (int shift = 1; shift < 32; shift <<= 1) mask |= mask >> shift;
  for (auto& index : out) {
    std::uint32_t value;
    do {
      value = static_cast<std::uint32_t>(engine()) & mask;
    } while (value > max);
    index = value;
  }
  return out;
}

}  // namespace verl::trainer::detail
