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
#include "verl/cpu/argmax.hpp"
#include "verl/cpu/softmax.hpp"

namespace verl::algo {

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
  std::vector<float> scaled;  ///< exp(logits / T - max)
  std::vector<std::pair<float, TokenId>> candidates;
};

namespace detail {

inline void require_logits(std::span<const float> logits) {
  VERL_CHECK_ARG(!logits.empty(), "logits: expected at least one vocabulary entry, got none");
}

/// The first index of the largest value (NaN never wins, unless it is the first).
inline TokenId first_argmax(std::span<const float> x) {
  return static_cast<TokenId>(cpu::first_argmax(x.data(), static_cast<Index>(x.size())));
}

}  // namespace detail

/// Samples one token from a row of raw logits with `uniform` in [0, 1) (see the file comment).
/// The exponentials are computed once per row, vectorized, into `scratch`.
inline SampledToken sample_token(std::span<const float> logits, const SamplingParams& params, double uniform,
                                 SamplerScratch& scratch) {
  detail::require_logits(logits);
  const auto vocab = static_cast<TokenId>(logits.size());
  const float temperature = params.greedy() ? 1.0f : params.temperature;
  // e_i = exp(x_i - max) with x = logits / T, and log sum_i exp(x_i). The total is accumulated in
  // double: float lanes of a 152k vocabulary are ~1e-5 relative off, which shifts the inverse
  // CDF's boundaries by as much and takes a neighbouring token on a few % of draws.
  auto& e = scratch.scaled;
  e.resize(logits.size());
  for (std::size_t i = 0; i < e.size(); ++i) e[i] = logits[i] / temperature;
  const TokenId best = detail::first_argmax(e);
  const float max = e[static_cast<std::size_t>(best)];
  const double total = cpu::exp_shifted_row_double_sum(e.data(), vocab, 1.0f, max);
  const double log_normalizer = static_cast<double>(max) + std::log(total);
  auto log_prob_of = [&](TokenId token) {
    return static_cast<float>(static_cast<double>(logits[static_cast<std::size_t>(token)] / temperature) - log_normalizer);
  };
  if (params.greedy()) return {best, log_prob_of(best)};

  const bool use_top_k = params.top_k > 0 && params.top_k < vocab;
  const bool use_top_p = params.top_p < 1.0f;
  if (!use_top_k && !use_top_p) {
    // Inverse CDF over the whole vocabulary in index order.
    const double target = uniform * total;
    double cumulative = 0;
    TokenId last = best;  // the last token with mass, should rounding leave the scan short of u
    for (TokenId i = 0; i < vocab; ++i) {
      const float p = e[static_cast<std::size_t>(i)];
      if (p <= 0) continue;
      cumulative += p;
      last = i;
      if (cumulative > target) return {i, log_prob_of(i)};
    }
    return {last, log_prob_of(last)};
  }

  // Candidates by decreasing value (ties by index), cut by top-k then top-p. The order of e is
  // that of x (exp is monotonic), and e is what the masses are made of.
  auto& kept = scratch.candidates;
  kept.clear();
  for (TokenId i = 0; i < vocab; ++i) kept.emplace_back(logits[static_cast<std::size_t>(i)] / temperature, i);
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
  auto mass = [&](const std::pair<float, TokenId>& c) { return static_cast<double>(e[static_cast<std::size_t>(c.second)]); };
  double kept_mass = 0;
  for (std::size_t i = 0; i < count; ++i) kept_mass += mass(kept[i]);
  if (use_top_p) {
    double before = 0;
    std::size_t cut = 0;
    while (cut < count && (cut == 0 || before < params.top_p * kept_mass)) before += mass(kept[cut++]);
    count = cut;
    kept_mass = before;
  }
  // Inverse CDF over the kept tokens in index order.
  std::sort(kept.begin(), kept.begin() + static_cast<std::ptrdiff_t>(count),
            [](const auto& a, const auto& b) { return a.second < b.second; });
  const double target = uniform * kept_mass;
  double cumulative = 0;
  TokenId last = best;
  for (std::size_t i = 0; i < count; ++i) {
    if (mass(kept[i]) <= 0) continue;
    cumulative += mass(kept[i]);
    last = kept[i].second;
    if (cumulative > target) return {last, log_prob_of(last)};
  }
  return {last, log_prob_of(last)};
}

inline SampledToken sample_token(std::span<const float> logits, const SamplingParams& params, double uniform) {
  SamplerScratch scratch;
  return sample_token(logits, params, uniform, scratch);
}

}  // namespace verl::algo
