// Host-side code shared with the CUDA kernels (include/verl/kernels/*.hpp), tested with g++:
// the counter RNG both sides draw from, the order-preserving keys and fixed-point masses of the
// sampler's radix selection, the sampler's algorithm run sequentially against the rollout's CPU
// sampler, launch shapes and argument checks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "verl/kernels/logprob_entropy.hpp"
#include "verl/kernels/sampling.hpp"

namespace {

namespace kd = verl::kernels::detail;
using verl::kernels::LogitsShape;
using verl::kernels::SamplingConfig;

TEST(KernelsHost, CounterUniformMatchesTheRolloutSampler) {
  std::mt19937_64 rng(7);
  for (int i = 0; i < 10000; ++i) {
    const std::uint64_t seed = rng(), stream = i % 3 == 0 ? rng() : rng() % 16, step = rng() % 4096;
    const double u = kd::counter_uniform(seed, stream, step);
    EXPECT_EQ(u, verl::algo::counter_uniform(seed, stream, step));
    EXPECT_GE(u, 0.0);
    EXPECT_LT(u, 1.0);
  }
}

TEST(KernelsHost, OrderKeyPreservesFloatOrder) {
  constexpr float inf = std::numeric_limits<float>::infinity();
  std::vector<float> values = {-inf, -3.3e38f, -2.0f, -1e-40f, -0.0f, 0.0f, 1e-45f, 1e-40f, 1.0f, 1.0000001f, 3e38f, inf};
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 10.0f);
  for (int i = 0; i < 2000; ++i) values.push_back(normal(rng));
  for (float a : values) {
    for (int k = 0; k < 8; ++k) {
      const float b = values[static_cast<std::size_t>(rng() % values.size())];
      EXPECT_EQ(a < b, kd::order_key(a) < kd::order_key(b)) << a << " vs " << b;
      EXPECT_EQ(a == b, kd::order_key(a) == kd::order_key(b)) << a << " vs " << b;
    }
  }
  EXPECT_EQ(kd::order_key(-0.0f), kd::order_key(0.0f));
}

TEST(KernelsHost, FixedPointMassesFitAndRoundToNearest) {
  EXPECT_EQ(kd::mass_shift(151936), 44);
  EXPECT_EQ(kd::mass_shift(1), 61);
  for (std::int64_t vocab : {1LL, 7LL, 255LL, 256LL, 151936LL, (1LL << 31) - 1}) {
    const int s = kd::mass_shift(vocab);
    // The largest row sum, V masses of 1.0, stays below 2^62.
    EXPECT_LT(static_cast<double>(vocab) * std::ldexp(1.0, s), std::ldexp(1.0, 62)) << vocab;
  }
  EXPECT_EQ(kd::fixed_mass(1.0f, 44), std::uint64_t{1} << 44);
  EXPECT_EQ(kd::fixed_mass(0.5f, 44), std::uint64_t{1} << 43);
  EXPECT_EQ(kd::fixed_mass(0.0f, 44), 0u);
  EXPECT_EQ(kd::fixed_mass(std::ldexp(1.0f, -45), 44), 0u);  // exactly half: to even (0)
  EXPECT_EQ(kd::fixed_mass(std::ldexp(3.0f, -45), 44), 2u);  // 1.5: to even (2)
}

TEST(KernelsHost, PortableExpIsAccurate) {
  // Within 2 ulp of exp over [-87, 0] (relative 2.4e-7), exact at 0, flushed to 0 below -87.
  float worst = 0;
  for (float d = 0.0f; d >= -87.0f; d -= 0.000731f) {
    const double exact = std::exp(static_cast<double>(d));
    const float got = kd::portable_exp(d);
    worst = std::max(worst, static_cast<float>(std::abs(got - exact) / exact));
  }
  EXPECT_LT(worst, 2.4e-7f);
  EXPECT_EQ(kd::portable_exp(0.0f), 1.0f);
  EXPECT_EQ(kd::portable_exp(-87.5f), 0.0f);
  EXPECT_EQ(kd::portable_exp(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_TRUE(std::isnan(kd::portable_exp(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_EQ(kd::shifted_exp(3.0f, 3.0f), 1.0f);
  EXPECT_EQ(kd::shifted_exp(4.0f, 3.0f), 1.0f);  // min(x - max, 0)
}

TEST(KernelsHost, TieInclusionMatchesASequentialScan) {
  std::mt19937_64 rng(11);
  for (int i = 0; i < 20000; ++i) {
    const std::uint64_t each = 1 + rng() % 1000, ties = 1 + rng() % 50, before = rng() % 100000;
    const double target = static_cast<double>(before) + 1.0 + static_cast<double>(rng() % (each * ties + 5));
    std::uint64_t expected = 0;
    while (expected < ties && (expected == 0 || static_cast<double>(before + expected * each) < target)) ++expected;
    EXPECT_EQ(kd::tie_inclusion(before, each, ties, target), expected) << before << " " << each << " " << ties;
  }
}

TEST(KernelsHost, RadixBinsWalkTheKeyFromTheTop) {
  const std::uint32_t key = 0xA1B2C3D4u;
  EXPECT_EQ(kd::radix_bin(key, 0), 0xA1);
  EXPECT_EQ(kd::radix_bin(key, 3), 0xD4);
  EXPECT_TRUE(kd::in_radix_prefix(key, 0, 0));
  EXPECT_TRUE(kd::in_radix_prefix(key, 0xA1B20000u, 2));
  EXPECT_FALSE(kd::in_radix_prefix(key, 0xA1B30000u, 2));
}

/// Rows of logits to sample from: Gaussian, or small integers (many exact ties).
std::vector<float> sampling_row(std::int64_t vocab, std::uint32_t seed, bool ties) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::uniform_int_distribution<int> small(-3, 3);
  std::vector<float> row(static_cast<std::size_t>(vocab));
  for (auto& v : row) v = ties ? static_cast<float>(small(rng)) : normal(rng);
  return row;
}

TEST(KernelsHost, SamplerModelMatchesTheRolloutSampler) {
  int draws = 0, mismatches = 0;
  for (const std::int64_t vocab : {1LL, 2LL, 7LL, 100LL, 1000LL, 5003LL}) {
    for (const bool ties : {false, true}) {
      for (const float temperature : {0.0f, 0.6f, 1.0f, 1.7f}) {
        for (const std::int64_t top_k : std::vector<std::int64_t>{-1, 1, 5, 50, vocab}) {
          for (const float top_p : {1.0f, 0.95f, 0.5f, 0.05f}) {
            verl::algo::SamplingParams params;
            params.temperature = temperature;
            params.top_k = top_k;
            params.top_p = top_p;
            const SamplingConfig config = SamplingConfig::from(params);
            for (std::uint64_t row = 0; row < 3; ++row) {
              const auto logits = sampling_row(vocab, static_cast<std::uint32_t>(vocab * 31 + row), ties);
              const double u = kd::counter_uniform(1234, row, static_cast<std::uint64_t>(top_k + 7));
              const auto expected = verl::algo::sample_token(logits, params, u);
              const auto actual = verl::kernels::sample_token_model(logits, config, u);
              ++draws;
              if (actual.token != expected.token) {
                ++mismatches;
                ADD_FAILURE() << "V=" << vocab << " T=" << temperature << " k=" << top_k << " p=" << top_p
                              << " row " << row << ": " << actual.token << " vs " << expected.token;
                continue;
              }
              EXPECT_NEAR(actual.log_prob, expected.log_prob, 1e-5f + 1e-6f * std::abs(expected.log_prob));
            }
          }
        }
      }
    }
  }
  EXPECT_EQ(mismatches, 0) << "of " << draws << " draws";
}

/// True when `token` is what `sampler(u')` returns for some u' within `delta` of u: the token
/// is the inverse CDF over the kept tokens in index order, nondecreasing in u, so it suffices to
/// bracket it between the draws at u - delta and u + delta.
template <class Sampler>
bool within_draw_rounding(std::int64_t token, double u, double delta, Sampler&& sampler) {
  const double lo = std::max(0.0, u - delta), hi = std::min(std::nextafter(1.0, 0.0), u + delta);
  return sampler(lo) <= token && token <= sampler(hi);
}

TEST(KernelsHost, SamplerModelMatchesTheRolloutSamplerAtQwenVocabulary) {
  // V = 151936. The rollout sampler sums exp() in float lanes (about 10k terms each here), so its
  // total mass is off by ~1e-5 relative and with token masses ~1/V its draw can land a few tokens
  // away from an exact inverse CDF; the model's sums are exact integers. So the model's token must
  // be the reference's for some u' within 1e-4 of u, and the log-probs agree to 1e-4.
  const std::int64_t vocab = 151936;
  const std::vector<SamplingConfig> configs = {{1.0f, -1, 1.0f}, {0.7f, 50, 1.0f}, {1.0f, -1, 0.9f}, {0.6f, 1000, 0.95f}};
  int exact = 0, draws = 0;
  for (std::uint64_t row = 0; row < 2; ++row) {
    const auto logits = sampling_row(vocab, static_cast<std::uint32_t>(100 + row), row == 1);
    for (std::size_t c = 0; c < configs.size(); ++c) {
      verl::algo::SamplingParams params;
      params.temperature = configs[c].temperature;
      params.top_k = configs[c].top_k;
      params.top_p = configs[c].top_p;
      const double u = kd::counter_uniform(77, row, c);
      const auto expected = verl::algo::sample_token(logits, params, u);
      const auto actual = verl::kernels::sample_token_model(logits, configs[c], u);
      EXPECT_TRUE(within_draw_rounding(actual.token, u, 1e-4, [&](double v) {
        return verl::algo::sample_token(logits, params, v).token;
      })) << "config " << c << " row " << row << ": " << actual.token << " vs " << expected.token;
      if (actual.token == expected.token) {
        EXPECT_NEAR(actual.log_prob, expected.log_prob, 1e-4f);
      }
      exact += actual.token == expected.token;
      ++draws;
    }
  }
  // Top-k / top-p draws (fewer, heavier tokens) match exactly.
  EXPECT_GE(exact, draws / 2);
}

TEST(KernelsHost, SamplerModelTopKOneIsGreedy) {
  const auto logits = sampling_row(4000, 5, false);
  const auto greedy = verl::kernels::sample_token_model(logits, {0.0f, -1, 1.0f}, 0.5);
  for (double u : {0.0, 0.3, 0.999999}) {
    EXPECT_EQ(verl::kernels::sample_token_model(logits, {0.8f, 1, 1.0f}, u).token, greedy.token);
    EXPECT_EQ(verl::kernels::sample_token_model(logits, {1.2f, -1, 1e-6f}, u).token, greedy.token);
  }
}

TEST(KernelsHost, LogitsLaunchShape) {
  EXPECT_EQ(kd::logits_block_threads(151936, 2), kd::logits_max_threads);
  EXPECT_EQ(kd::logits_block_threads(151936, 4), kd::logits_max_threads);
  EXPECT_EQ(kd::logits_block_threads(1, 4), 32);
  EXPECT_EQ(kd::logits_block_threads(7, 2), 32);
  for (std::int64_t v = 1; v < 100000; v = v * 3 + 1) {
    const int t = kd::logits_block_threads(v, 2);
    EXPECT_EQ(t % 32, 0);
    EXPECT_GE(t, 32);
    EXPECT_LE(t, kd::logits_max_threads);
  }
  EXPECT_EQ(kd::misaligned_head(0x1000, 4, 100), 0);
  EXPECT_EQ(kd::misaligned_head(0x1004, 4, 100), 3);
  EXPECT_EQ(kd::misaligned_head(0x1002, 2, 100), 7);
  EXPECT_EQ(kd::misaligned_head(0x1002, 2, 5), 5);
  EXPECT_EQ(kd::ceil_div(10, 4), 3);
}

template <class F>
std::string invalid_argument_message(F&& f) {
  try {
    f();
  } catch (const verl::InvalidArgument& e) {
    return e.what();
  }
  return "(no exception)";
}

TEST(KernelsHost, ForwardAndBackwardArgumentChecks) {
  float dummy = 0;
  const verl::kernels::LogprobEntropyOutputs out{&dummy, &dummy, nullptr, &dummy, &dummy};
  const std::int64_t label = 0;
  EXPECT_NO_THROW(kd::check_forward_args(&dummy, LogitsShape{2, 3, 3}, &label, 1.0f, out));
  EXPECT_NE(invalid_argument_message([&] { kd::check_forward_args(&dummy, {2, 0, 3}, nullptr, 1.0f, out); }).find("vocab"),
            std::string::npos);
  EXPECT_NE(invalid_argument_message([&] { kd::check_forward_args(&dummy, {2, 4, 3}, nullptr, 1.0f, out); }).find("stride"),
            std::string::npos);
  EXPECT_NE(invalid_argument_message([&] { kd::check_forward_args(&dummy, {2, 3, 3}, nullptr, 0.0f, out); })
                .find("temperature"),
            std::string::npos);
  verl::kernels::LogprobEntropyOutputs missing = out;
  missing.entropy = nullptr;
  EXPECT_NE(invalid_argument_message([&] { kd::check_forward_args(&dummy, {2, 3, 3}, nullptr, 1.0f, missing); })
                .find("out.entropy"),
            std::string::npos);
  missing = out;
  missing.log_probs = nullptr;
  EXPECT_NE(invalid_argument_message([&] { kd::check_forward_args(&dummy, {2, 3, 3}, &label, 1.0f, missing); })
                .find("out.log_probs"),
            std::string::npos);
  EXPECT_NO_THROW(kd::check_forward_args(nullptr, {0, 3, 3}, nullptr, 1.0f, {}));  // no rows: nothing to read

  const verl::kernels::LogprobEntropySaved saved{&dummy, &dummy, nullptr, nullptr};
  EXPECT_NO_THROW(kd::check_backward_args(&dummy, {2, 3, 3}, &label, 1.0f, saved, {&dummy, nullptr, nullptr}, &dummy, 3));
  EXPECT_NE(invalid_argument_message([&] {
              kd::check_backward_args(&dummy, {2, 3, 3}, nullptr, 1.0f, saved, {&dummy, nullptr, nullptr}, &dummy, 3);
            }).find("labels"),
            std::string::npos);
  EXPECT_NE(invalid_argument_message([&] {
              kd::check_backward_args(&dummy, {2, 3, 3}, &label, 1.0f, saved, {nullptr, &dummy, nullptr}, &dummy, 3);
            }).find("saved.entropy"),
            std::string::npos);
  EXPECT_NE(invalid_argument_message([&] {
              kd::check_backward_args(&dummy, {2, 3, 3}, &label, 1.0f, saved, {}, &dummy, 2);
            }).find("grad_stride"),
            std::string::npos);
}

TEST(KernelsHost, SamplingArgumentChecks) {
  float dummy = 0;
  std::int64_t token = 0;
  const std::uint64_t seed = 1;
  EXPECT_NO_THROW(kd::check_sampling_args(&dummy, {1, 1, 1}, {0.7f, 5, 0.9f}, &seed, &token));
  EXPECT_NO_THROW(kd::check_sampling_args(&dummy, {1, 1, 1}, {0.0f, -1, 1.0f}, nullptr, &token));  // greedy: no seeds
  EXPECT_NE(invalid_argument_message([&] { kd::check_sampling_args(&dummy, {1, 1, 1}, {1.0f, -1, 1.0f}, nullptr, &token); })
                .find("seeds"),
            std::string::npos);
  EXPECT_NE(invalid_argument_message([&] { kd::check_sampling_args(&dummy, {1, 1, 1}, {1.0f, -1, 0.0f}, &seed, &token); })
                .find("top_p"),
            std::string::npos);
  EXPECT_NE(invalid_argument_message([&] { kd::check_sampling_args(&dummy, {1, 1, 1}, {-1.0f, -1, 1.0f}, &seed, &token); })
                .find("temperature"),
            std::string::npos);
}

}  // namespace
