// Next-token sampling from one row of logits: temperature, top-k, top-p and greedy, with the
// semantics of vLLM's sampler (which verl's rollout uses), and the log-probability of the chosen
// token. This is the CPU reference a CUDA sampling kernel mirrors: the random numbers are a pure
// function of (seed, stream, step) (a counter-based generator, like Philox), so a sample does not
// depend on which other sequences share its batch or on the order rows are processed in.
//
//   greedy (temperature 0): the first index of the largest logit.
//   otherwise x = logits / temperature;
//     top-k (k > 0): keep the tokens whose x is >= the k-th largest x (ties at the boundary stay);
//     top-p (p < 1): of those, sorted by decreasing x, keep each token while the probability mass
//       before it (renormalized over the kept set) is < p (vLLM drops the ascending tail whose
//       cumulative mass is <= 1 - p; the most likely token always stays);
//     draw u in [0, 1) and take the first kept token, in index order, whose cumulative
//     probability exceeds u.
//   log-prob: log softmax(x)[token] over the whole vocabulary (before top-k/top-p), i.e. what
//   verl's actor recomputes at the same temperature; log softmax(logits) for greedy.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <utility>
#include <vector>

#include "verl/core/error.hpp"
#include "verl/core/tensor.hpp"

namespace verl::rollout {

using TokenId = std::int64_t;

/// verl's rollout sampling knobs (actor_rollout_ref.rollout.*).
struct SamplingParams {
  float temperature = 1.0f;  ///< 0 = greedy
  std::int64_t top_k = -1;   ///< <= 0: all tokens
  float top_p = 1.0f;        ///< in (0, 1]; 1: all tokens
  std::int64_t n = 1;        ///< samples per prompt
  std::int64_t max_response_length = 16;
  std::vector<TokenId> eos_token_ids = {};   ///< stop after emitting one of these (kept in the response)
  std::vector<TokenId> stop_token_ids = {};  ///< further stop tokens (kept in the response)
  TokenId pad_token_id = 0;             ///< fills responses after they stop
  std::uint64_t seed = 0;

  [[nodiscard]] bool greedy() const { return temperature == 0.0f; }

  void validate() const {
    VERL_CHECK_ARG(std::isfinite(temperature) && temperature >= 0,
                   "temperature: expected a finite value >= 0 (0 = greedy), got {}", temperature);
    VERL_CHECK_ARG(top_p > 0 && top_p <= 1, "top_p: expected a value in (0, 1], got {}", top_p);
    VERL_CHECK_ARG(n >= 1, "n: expected at least 1 sample per prompt, got {}", n);
    VERL_CHECK_ARG(max_response_length >= 1, "max_response_length: expected at least 1, got {}",
                   max_response_length);
  }

  [[nodiscard]] bool is_stop_token(TokenId token) const {
    return std::ranges::find(eos_token_ids, token) != eos_token_ids.end() ||
           std::ranges::find(stop_token_ids, token) != stop_token_ids.end();
  }
};

/// A uniform number in [0, 1) for (seed, stream, step): splitmix64 finalizers over the three
/// words, 53 random bits.
inline double counter_uniform(std::uint64_t seed, std::uint64_t stream, std::uint64_t step) {
  auto mix = [](std::uint64_t z) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  };
  const std::uint64_t bits = mix(mix(mix(seed) ^ stream) ^ (step * 0xD1B54A32D192ED03ull));
  return static_cast<double>(bits >> 11) * 0x1.0p-53;
}

/// The per-prompt seed used when none is given: prompt b of a batch draws from stream
/// derive_seed(seed, b).
inline std::uint64_t derive_seed(std::uint64_t seed, std::uint64_t index) {
  return static_cast<std::uint64_t>(counter_uniform(seed, index, ~std::uint64_t{0}) * 0x1.0p53);
}

struct SampledToken {
  TokenId token = 0;
  float log_prob = 0.0f;
};

/// Buffers reused from token to token (no allocation per sampled token once warm).
struct SamplerScratch {
  std::vector<float> scaled;
  std::vector<std::pair<float, TokenId>> candidates;
};

namespace detail {

inline void require_logits(std::span<const float> logits) {
  VERL_CHECK_ARG(!logits.empty(), "logits: expected at least one vocabulary entry, got none");
}

/// log sum exp over x (in double).
inline double log_sum_exp(std::span<const float> x, float max) {
  double sum = 0;
  for (const float v : x) sum += std::exp(static_cast<double>(v) - max);
  return static_cast<double>(max) + std::log(sum);
}

}  // namespace detail

/// Samples one token from a row of raw logits with `uniform` in [0, 1) (see the file comment).
inline SampledToken sample_token(std::span<const float> logits, const SamplingParams& params, double uniform,
                                 SamplerScratch& scratch) {
  detail::require_logits(logits);
  const auto vocab = static_cast<TokenId>(logits.size());
  if (params.greedy()) {
    const auto best = std::ranges::max_element(logits) - logits.begin();  // first of equal maxima
    const float max = logits[static_cast<std::size_t>(best)];
    return {best, static_cast<float>(static_cast<double>(max) - detail::log_sum_exp(logits, max))};
  }
  auto& x = scratch.scaled;
  x.resize(logits.size());
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = logits[i] / params.temperature;
  const float max = *std::ranges::max_element(x);
  const double log_normalizer = detail::log_sum_exp(x, max);
  auto log_prob_of = [&](TokenId token) {
    return static_cast<float>(static_cast<double>(x[static_cast<std::size_t>(token)]) - log_normalizer);
  };

  const bool use_top_k = params.top_k > 0 && params.top_k < vocab;
  const bool use_top_p = params.top_p < 1.0f;
  if (!use_top_k && !use_top_p) {
    // Inverse CDF over the whole vocabulary in index order.
    double total = 0;
    for (const float v : x) total += std::exp(static_cast<double>(v) - max);
    const double target = uniform * total;
    double cumulative = 0;
    for (TokenId i = 0; i < vocab; ++i) {
      const float v = x[static_cast<std::size_t>(i)];
      if (v == -std::numeric_limits<float>::infinity()) continue;
      cumulative += std::exp(static_cast<double>(v) - max);
      if (cumulative > target) return {i, log_prob_of(i)};
    }
    const auto last = static_cast<TokenId>(std::ranges::max_element(x) - x.begin());
    return {last, log_prob_of(last)};
  }

  // Candidates by decreasing value (ties by index), cut by top-k then top-p.
  auto& kept = scratch.candidates;
  kept.clear();
  for (TokenId i = 0; i < vocab; ++i) kept.emplace_back(x[static_cast<std::size_t>(i)], i);
  auto by_value = [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); };
  std::size_t count = kept.size();
  if (use_top_k) {
    const auto k = static_cast<std::size_t>(params.top_k);
    std::nth_element(kept.begin(), kept.begin() + static_cast<std::ptrdiff_t>(k - 1), kept.end(), by_value);
    const float threshold = kept[k - 1].first;
    // Everything tied with the k-th value stays too.
    const auto end = std::partition(kept.begin(), kept.end(), [&](const auto& c) { return c.first >= threshold; });
    count = static_cast<std::size_t>(end - kept.begin());
  }
  std::sort(kept.begin(), kept.begin() + static_cast<std::ptrdiff_t>(count), by_value);
  double kept_mass = 0;
  for (std::size_t i = 0; i < count; ++i) kept_mass += std::exp(static_cast<double>(kept[i].first) - max);
  if (use_top_p) {
    double before = 0;
    std::size_t cut = 0;
    while (cut < count && (cut == 0 || before < params.top_p * kept_mass)) {
      before += std::exp(static_cast<double>(kept[cut].first) - max);
      ++cut;
    }
    count = cut;
    kept_mass = before;
  }
  // Inverse CDF over the kept tokens in index order.
  std::sort(kept.begin(), kept.begin() + static_cast<std::ptrdiff_t>(count),
            [](const auto& a, const auto& b) { return a.second < b.second; });
  const double target = uniform * kept_mass;
  double cumulative = 0;
  for (std::size_t i = 0; i < count; ++i) {
    cumulative += std::exp(static_cast<double>(kept[i].first) - max);
    if (cumulative > target) return {kept[i].second, log_prob_of(kept[i].second)};
  }
  return {kept[count - 1].second, log_prob_of(kept[count - 1].second)};
}

inline SampledToken sample_token(std::span<const float> logits, const SamplingParams& params, double uniform) {
  SamplerScratch scratch;
  return sample_token(logits, params, uniform, scratch);
}

}  // namespace verl::rollout
