// Seeded permutations that are the same on every platform: std::shuffle and
// std::uniform_int_distribution are implementation-defined, so a checkpointed data order would
// not survive a change of standard library. We draw from std::mt19937_64 (fully specified) with
// unbiased bounded integers (masked rejection) and a Fisher-Yates shuffle.
#pragma once

#include <bit>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "verl/core/error.hpp"

namespace verl::data {

/// A uniform integer in [0, bound) from `engine`, without modulo bias: draws masked to the
/// next power of two are rejected until one falls below the bound (under two draws on average).
inline std::uint64_t uniform_below(std::mt19937_64& engine, std::uint64_t bound) {
  VERL_CHECK_ARG(bound > 0, "bound: expected a positive bound, got 0");
  // All bits below the highest bit of bound - 1.
  std::uint64_t mask = bound - 1;
  mask = mask == 0 ? 0 : (~std::uint64_t{0} >> std::countl_zero(mask));
  while (true) {
    const std::uint64_t x = engine() & mask;
    if (x < bound) return x;
  }
}

/// A permutation of 0..n-1 drawn from `engine`.
inline std::vector<std::int64_t> random_permutation(std::int64_t n, std::mt19937_64& engine) {
  VERL_CHECK_ARG(n >= 0, "n: expected a size >= 0, got {}", n);
  std::vector<std::int64_t> order(static_cast<std::size_t>(n));
  std::iota(order.begin(), order.end(), std::int64_t{0});
  for (std::int64_t i = n - 1; i > 0; --i) {
    const auto j = static_cast<std::int64_t>(uniform_below(engine, static_cast<std::uint64_t>(i) + 1));
    std::swap(order[static_cast<std::size_t>(i)], order[static_cast<std::size_t>(j)]);
  }
  return order;
}

/// The engine for (seed, stream): independent, reproducible streams (e.g. one per epoch).
inline std::mt19937_64 seeded_engine(std::uint64_t seed, std::uint64_t stream = 0) {
  std::seed_seq sequence{static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32),
                         static_cast<std::uint32_t>(stream), static_cast<std::uint32_t>(stream >> 32)};
  return std::mt19937_64(sequence);
}

}  // namespace verl::data
