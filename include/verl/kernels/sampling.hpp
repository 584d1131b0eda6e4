// Host side of the CUDA rollout sampler (sampling.cuh), and the pieces both sides share.
//
// Semantics are rollout/sampling.hpp's (vLLM's sampler): greedy = first argmax; otherwise
// x = logits / T, top-k keeps x >= the k-th largest (ties at the boundary stay), top-p keeps the
// longest prefix of the survivors sorted by (x descending, index ascending) whose mass before each
// token is < p * (their mass), and the token is the first, in index order, whose cumulative mass
// exceeds u * (kept mass), u = counter_uniform(seed, stream, step) — a pure function of the
// counter, identical on host and device, so a row's token does not depend on the launch shape.
//
// The kernel cannot sort a 152k vocabulary per row cheaply, so it finds the top-k and top-p
// boundaries by radix selection over an order-preserving 32-bit key of x, 8 bits per pass, with
// histograms of counts and masses. Masses are fixed-point integers (exp(x - max) * 2^S, S chosen so
// that a whole row's sum fits 62 bits): integer sums are exact in any order, which makes every
// decision deterministic and independent of the block size, and the exponentials are computed by
// portable_exp, bit-identical on host and device. `sample_token_model` below is the same algorithm
// run sequentially on the host: it returns the kernel's token exactly. Against algo::sample_token
// it differs only where that sampler's rounding (float-lane sums of its vectorized exp, ~1e-5
// relative at V = 152k) puts u on the other side of a cumulative-mass boundary.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#if !defined(__CUDA_ARCH__)
#include <bit>
#endif

#include "verl/config.hpp"
#include "verl/core/error.hpp"
#include "verl/kernels/logprob_entropy.hpp"
#include "verl/algo/logits/sampling.hpp"

namespace verl::kernels {

/// The per-token knobs of algo::SamplingParams (temperature 0 = greedy).
struct SamplingConfig {
  float temperature = 1.0f;
  std::int64_t top_k = -1;  ///< <= 0 or >= V: all tokens
  float top_p = 1.0f;       ///< in (0, 1]

  static SamplingConfig from(const algo::SamplingParams& params) {
    return {params.temperature, params.top_k, params.top_p};
  }
  [[nodiscard]] VERL_HOST_DEVICE bool greedy() const { return temperature == 0.0f; }
};

namespace detail {

inline constexpr int radix_bits = 8;
inline constexpr int radix_bins = 1 << radix_bits;
inline constexpr int radix_passes = 32 / radix_bits;

/// algo::counter_uniform, bit for bit, callable from device code.
VERL_HOST_DEVICE inline std::uint64_t splitmix64(std::uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

VERL_HOST_DEVICE inline double counter_uniform(std::uint64_t seed, std::uint64_t stream, std::uint64_t step) {
  const std::uint64_t bits = splitmix64(splitmix64(splitmix64(seed) ^ stream) ^ (step * 0xD1B54A32D192ED03ull));
  return static_cast<double>(bits >> 11) * 0x1.0p-53;
}

VERL_HOST_DEVICE inline std::uint32_t float_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  return std::bit_cast<std::uint32_t>(x);
#endif
}

/// A key whose unsigned order is the float order of x (-0 and +0 share a key, as they compare
/// equal; NaN is not ordered and not supported by the top-k/top-p paths).
VERL_HOST_DEVICE inline std::uint32_t order_key(float x) {
  const std::uint32_t bits = float_bits(x == 0.0f ? 0.0f : x);
  return (bits & 0x80000000u) != 0 ? ~bits : bits | 0x80000000u;
}

/// Fraction bits of the fixed-point masses for a row of `vocab` tokens: V * 2^S < 2^62.
VERL_HOST_DEVICE inline int mass_shift(std::int64_t vocab) {
  int width = 0;
  for (auto v = static_cast<std::uint64_t>(vocab); v != 0; v >>= 1) ++width;
  return 62 - width;
}

/// e in [0, 1] as round-to-nearest-even(e * 2^shift) (the product is exact in double).
VERL_HOST_DEVICE inline std::uint64_t fixed_mass(float e, int shift) {
  const double scaled = static_cast<double>(e) * static_cast<double>(std::uint64_t{1} << shift);
#if defined(__CUDA_ARCH__)
  return __double2ull_rn(scaled);
#else
  return static_cast<std::uint64_t>(std::nearbyint(scaled));
#endif
}

/// Arguments below this give exp < FLT_MIN: flushed to exactly 0, like the reference's floor.
inline constexpr float portable_exp_floor = -87.0f;

/// exp(d) for d <= 0 from IEEE basic operations, rintf and fmaf only (each correctly rounded on
/// host and device), so the host model and the kernel compute the same bits, hence the same
/// masses and the same token: Cody-Waite reduction d = n ln2 + r, |r| <= ln2/2, a degree-7
/// Taylor polynomial (truncation < 6e-9 relative), times 2^n. About 1-2 ulp from exp(). Needs
/// IEEE denormals and no fast-math on either side (the project's defaults).
VERL_HOST_DEVICE inline float portable_exp(float d) {
  if (d != d) return d;
  if (d < portable_exp_floor) return 0.0f;
  const float n = rintf(d * 1.44269504088896341f);
  float r = fmaf(n, -0.693145751953125f, d);  // ln2's upper bits: n * hi is exact
  r = fmaf(n, -1.42860682030941723e-06f, r);  // ln2 - hi
  float p = 1.0f / 5040.0f;
  p = fmaf(p, r, 1.0f / 720.0f);
  p = fmaf(p, r, 1.0f / 120.0f);
  p = fmaf(p, r, 1.0f / 24.0f);
  p = fmaf(p, r, 1.0f / 6.0f);
  p = fmaf(p, r, 0.5f);
  p = fmaf(p, r, 1.0f);
  p = fmaf(p, r, 1.0f);
  const int exponent = static_cast<int>(n);  // in [-126, 0] for d in [-87, 0]
  const std::uint32_t scale_bits = static_cast<std::uint32_t>(exponent + 127) << 23;
#if defined(__CUDA_ARCH__)
  const float scale = __uint_as_float(scale_bits);
#else
  const float scale = std::bit_cast<float>(scale_bits);
#endif
  return p * scale;
}

/// exp(x - max) as the reference computes it (exp of min(x - max, 0)).
VERL_HOST_DEVICE inline float shifted_exp(float x, float max) {
  const float d = x - max;
  return portable_exp(d < 0.0f ? d : 0.0f);
}

/// Keys sharing `prefix` on the bits above pass `pass` (pass 0 = the top 8 bits).
VERL_HOST_DEVICE inline bool in_radix_prefix(std::uint32_t key, std::uint32_t prefix, int pass) {
  if (pass == 0) return true;
  const std::uint32_t high_mask = ~std::uint32_t{0} << (32 - radix_bits * pass);
  return (key & high_mask) == (prefix & high_mask);
}

VERL_HOST_DEVICE inline int radix_bin(std::uint32_t key, int pass) {
  return static_cast<int>((key >> (32 - radix_bits * (pass + 1))) & (radix_bins - 1));
}

/// Scanning the bins from the largest key down, the bin holding the `remaining`-th key
/// (1-based); `remaining` and `mass_above` are updated by the bins above it.
VERL_HOST_DEVICE inline int choose_bin_by_count(const std::uint32_t* counts, const std::uint64_t* masses,
                                                std::uint64_t& remaining, std::uint64_t& mass_above) {
  int lowest = 0;
  for (int b = radix_bins - 1; b >= 0; --b) {
    if (counts[b] == 0) continue;
    lowest = b;
    if (remaining <= counts[b]) return b;
    remaining -= counts[b];
    mass_above += masses[b];
  }
  return lowest;  // unreachable when remaining <= the keys histogrammed
}

/// Scanning the bins from the largest key down, the first bin whose cumulative mass (with
/// `mass_above` before it) reaches `target`; `mass_above` is updated by the bins above it.
VERL_HOST_DEVICE inline int choose_bin_by_mass(const std::uint32_t* counts, const std::uint64_t* masses,
                                               double target, std::uint64_t& mass_above) {
  int lowest = 0;
  for (int b = radix_bins - 1; b >= 0; --b) {
    if (counts[b] == 0) continue;
    lowest = b;
    if (static_cast<double>(mass_above + masses[b]) >= target) return b;
    mass_above += masses[b];
  }
  return lowest;  // only reached if rounding kept every bin below the target: keep them all
}

/// How many of `ties` tokens of equal mass `each`, following `mass_before`, top-p keeps: the
/// first always (mass_before < target by construction), then each whose mass before it is
/// < target, as the reference's sequential scan does.
VERL_HOST_DEVICE inline std::uint64_t tie_inclusion(std::uint64_t mass_before, std::uint64_t each, std::uint64_t ties,
                                                    double target) {
  if (each == 0) return ties;
  const double room = (target - static_cast<double>(mass_before)) / static_cast<double>(each);
  std::uint64_t n = room <= 1.0 ? 1 : (room >= static_cast<double>(ties) ? ties : static_cast<std::uint64_t>(ceil(room)));
  while (n < ties && static_cast<double>(mass_before + n * each) < target) ++n;
  while (n > 1 && static_cast<double>(mass_before + (n - 1) * each) >= target) --n;
  return n;
}

/// The kept set after top-k / top-p: keys above `key`, and the first `ties` keys equal to it
/// (in index order); `mass` is the kept tokens' total.
struct KeptSet {
  std::uint32_t key = 0;
  std::uint64_t ties = std::numeric_limits<std::uint64_t>::max();
  std::uint64_t mass = 0;
};

inline void check_sampling_config(const SamplingConfig& config) {
  VERL_CHECK_ARG(std::isfinite(config.temperature) && config.temperature >= 0,
                 "temperature: expected a finite value >= 0 (0 = greedy), got {}", config.temperature);
  VERL_CHECK_ARG(config.top_p > 0 && config.top_p <= 1, "top_p: expected a value in (0, 1], got {}", config.top_p);
}

inline void check_sampling_args(const void* logits, const LogitsShape& shape, const SamplingConfig& config,
                                const std::uint64_t* seeds, const std::int64_t* tokens) {
  check_logits_shape(shape);
  check_sampling_config(config);
  VERL_CHECK_ARG(shape.vocab <= (std::int64_t{1} << 31) - 1, "vocab: expected < 2^31, got {}", shape.vocab);
  if (shape.rows == 0) return;
  VERL_CHECK_ARG(logits != nullptr, "logits: expected a device pointer, got null");
  VERL_CHECK_ARG(tokens != nullptr, "tokens: expected a device pointer, got null");
  VERL_CHECK_ARG(config.greedy() || seeds != nullptr,
                 "seeds: expected a device pointer (one seed per row) when sampling, got null");
}

}  // namespace detail

/// The kernel's algorithm, sequential on the host (the same shared decisions): the model the
/// unit tests compare with algo::sample_token and the CUDA tests compare the kernel with.
inline algo::SampledToken sample_token_model(std::span<const float> logits, const SamplingConfig& config,
                                                double uniform) {
  using namespace detail;
  VERL_CHECK_ARG(!logits.empty(), "logits: expected at least one vocabulary entry, got none");
  check_sampling_config(config);
  const auto vocab = static_cast<std::int64_t>(logits.size());
  const float temperature = config.greedy() ? 1.0f : config.temperature;
  std::vector<float> xs(logits.size());
  for (std::size_t i = 0; i < xs.size(); ++i) xs[i] = logits[i] / temperature;
  auto x_at = [&](std::int64_t i) { return xs[static_cast<std::size_t>(i)]; };
  std::int64_t best = 0;
  for (std::int64_t i = 1; i < vocab; ++i)
    if (x_at(i) > x_at(best)) best = i;
  const float max = x_at(best);
  const int shift = mass_shift(vocab);
  std::vector<std::uint64_t> ms(logits.size());
  for (std::size_t i = 0; i < ms.size(); ++i) ms[i] = fixed_mass(shifted_exp(xs[i], max), shift);
  auto mass_at = [&](std::int64_t i) { return ms[static_cast<std::size_t>(i)]; };
  std::uint64_t total = 0;
  for (std::int64_t i = 0; i < vocab; ++i) total += mass_at(i);
  const double log_normalizer = static_cast<double>(max) + std::log(std::ldexp(static_cast<double>(total), -shift));
  auto result = [&](std::int64_t token) {
    return algo::SampledToken{token, static_cast<float>(static_cast<double>(x_at(token)) - log_normalizer)};
  };
  if (config.greedy()) return result(best);

  KeptSet kept;
  kept.mass = total;
  std::uint32_t counts[radix_bins];
  std::uint64_t masses[radix_bins];
  auto histogram = [&](std::uint32_t prefix, int pass, std::uint32_t key_floor) {
    for (int b = 0; b < radix_bins; ++b) counts[b] = 0, masses[b] = 0;
    for (std::int64_t i = 0; i < vocab; ++i) {
      const std::uint32_t key = order_key(x_at(i));
      if (key < key_floor || !in_radix_prefix(key, prefix, pass)) continue;
      ++counts[radix_bin(key, pass)];
      masses[radix_bin(key, pass)] += mass_at(i);
    }
  };
  if (config.top_k > 0 && config.top_k < vocab) {
    std::uint32_t prefix = 0;
    std::uint64_t remaining = static_cast<std::uint64_t>(config.top_k), above = 0;
    int bin = 0;
    for (int pass = 0; pass < radix_passes; ++pass) {
      histogram(prefix, pass, 0);
      bin = choose_bin_by_count(counts, masses, remaining, above);
      prefix |= static_cast<std::uint32_t>(bin) << (32 - radix_bits * (pass + 1));
    }
    kept = {prefix, std::numeric_limits<std::uint64_t>::max(), above + masses[bin]};
  }
  if (config.top_p < 1.0f) {
    const double target = static_cast<double>(config.top_p) * static_cast<double>(kept.mass);
    std::uint32_t prefix = 0;
    std::uint64_t above = 0;
    int bin = 0;
    for (int pass = 0; pass < radix_passes; ++pass) {
      histogram(prefix, pass, kept.key);
      bin = choose_bin_by_mass(counts, masses, target, above);
      prefix |= static_cast<std::uint32_t>(bin) << (32 - radix_bits * (pass + 1));
    }
    const std::uint64_t each = masses[bin] / counts[bin];  // ties share x, hence their mass
    const std::uint64_t ties = tie_inclusion(above, each, counts[bin], target);
    kept = {prefix, ties, above + ties * each};
  }
  const double target = uniform * static_cast<double>(kept.mass);
  std::uint64_t cumulative = 0, rank = 0;
  std::int64_t last = best;
  for (std::int64_t i = 0; i < vocab; ++i) {
    const std::uint32_t key = order_key(x_at(i));
    const bool keep = key > kept.key || (key == kept.key && rank++ < kept.ties);
    const std::uint64_t m = mass_at(i);
    if (!keep || m == 0) continue;
    cumulative += m;
    last = i;
    if (static_cast<double>(cumulative) > target) return result(i);
  }
  return result(last);
}

}  // namespace verl::kernels
