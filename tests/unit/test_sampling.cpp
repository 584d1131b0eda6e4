// The CPU reference sampler: greedy, temperature, top-k, top-p (vLLM's semantics), the
// counter-based random numbers and the reported log-probabilities.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "verl/cpu/argmax.hpp"
#include "verl/cpu/softmax.hpp"
#include "verl/rollout/sampling.hpp"

namespace {

using namespace verl::rollout;

std::vector<float> logits_of_probs(const std::vector<double>& probs) {
  std::vector<float> out;
  for (const double p : probs) out.push_back(static_cast<float>(std::log(p)));
  return out;
}

/// Frequencies of each token over a fine grid of u (the inverse CDF makes them exact).
std::map<TokenId, double> frequencies(const std::vector<float>& logits, const SamplingParams& params, int grid = 20000) {
  std::map<TokenId, double> counts;
  SamplerScratch scratch;
  for (int i = 0; i < grid; ++i) counts[sample_token(logits, params, (i + 0.5) / grid, scratch).token] += 1.0 / grid;
  return counts;
}

TEST(Sampling, GreedyTakesTheFirstLargestLogitAndReportsItsLogSoftmax) {
  const std::vector<float> logits = {0.5f, 2.0f, -1.0f, 2.0f};
  const auto sampled = sample_token(logits, {.temperature = 0.0f}, 0.99);
  EXPECT_EQ(sampled.token, 1);
  double z = 0;
  for (float v : logits) z += std::exp(v);
  EXPECT_NEAR(sampled.log_prob, 2.0 - std::log(z), 1e-6);
}

TEST(Sampling, FullDistributionFollowsSoftmaxAtTheTemperature) {
  const std::vector<float> logits = {1.0f, 0.0f, -0.5f, 2.0f, 0.3f};
  const SamplingParams params{.temperature = 0.7f};
  const auto freq = frequencies(logits, params);
  double z = 0;
  for (float v : logits) z += std::exp(v / 0.7);
  for (TokenId i = 0; i < 5; ++i) {
    const double p = std::exp(logits[static_cast<std::size_t>(i)] / 0.7) / z;
    EXPECT_NEAR(freq.count(i) ? freq.at(i) : 0.0, p, 1e-3) << i;
    // The reported log-prob is that of the tempered distribution.
    SamplerScratch scratch;
    for (double u = 0.0005; u < 1; u += 0.01) {
      const auto s = sample_token(logits, params, u, scratch);
      if (s.token == i) {
        EXPECT_NEAR(s.log_prob, std::log(p), 1e-5);
      }
    }
  }
}

TEST(Sampling, TopKKeepsTheKLargestAndTiesAtTheBoundary) {
  const std::vector<float> logits = {0.1f, 3.0f, 1.0f, 2.0f, 1.0f, -4.0f};
  const auto top2 = frequencies(logits, {.temperature = 1.0f, .top_k = 2});
  EXPECT_EQ(top2.size(), 2u);
  EXPECT_NEAR(top2.at(1), std::exp(3.0) / (std::exp(3.0) + std::exp(2.0)), 1e-3);
  EXPECT_NEAR(top2.at(3), std::exp(2.0) / (std::exp(3.0) + std::exp(2.0)), 1e-3);
  // k = 3 hits the tie at 1.0: both tied tokens stay (4 candidates).
  const auto top3 = frequencies(logits, {.temperature = 1.0f, .top_k = 3});
  EXPECT_EQ(top3.size(), 4u);
  EXPECT_FALSE(top3.contains(0));
  // k = 1 is greedy whatever u is.
  for (double u : {0.0, 0.3, 0.9999}) EXPECT_EQ(sample_token(logits, {.top_k = 1}, u).token, 1);
  // The log-prob is still over the whole vocabulary.
  double z = 0;
  for (float v : logits) z += std::exp(v);
  EXPECT_NEAR(sample_token(logits, {.top_k = 1}, 0.5).log_prob, 3.0 - std::log(z), 1e-5);
}

TEST(Sampling, TopPKeepsTheSmallestHeadReachingP) {
  const auto logits = logits_of_probs({0.15, 0.5, 0.05, 0.3});
  // Mass before each token in decreasing order: 0 (0.5), 0.5 (0.3), 0.8 (0.15), 0.95 (0.05).
  const auto p08 = frequencies(logits, {.temperature = 1.0f, .top_p = 0.79f});
  EXPECT_EQ(p08.size(), 2u);
  EXPECT_NEAR(p08.at(1), 0.5 / 0.8, 1e-3);
  EXPECT_NEAR(p08.at(3), 0.3 / 0.8, 1e-3);
  const auto p081 = frequencies(logits, {.temperature = 1.0f, .top_p = 0.81f});
  EXPECT_EQ(p081.size(), 3u);
  // A tiny p keeps the most likely token only.
  const auto tiny = frequencies(logits, {.temperature = 1.0f, .top_p = 1e-6f});
  EXPECT_EQ(tiny.size(), 1u);
  EXPECT_TRUE(tiny.contains(1));
  // top-k first, then top-p over the renormalized survivors (vLLM's order).
  const auto both = frequencies(logits, {.temperature = 1.0f, .top_k = 3, .top_p = 0.6f});
  // Survivors of k=3: 0.5, 0.3, 0.15 (sum 0.95); masses before: 0, 0.526, 0.842 -> keep 2.
  EXPECT_EQ(both.size(), 2u);
}

TEST(Sampling, CounterUniformIsAPureFunctionOfItsCounters) {
  EXPECT_EQ(counter_uniform(1, 2, 3), counter_uniform(1, 2, 3));
  EXPECT_NE(counter_uniform(1, 2, 3), counter_uniform(1, 2, 4));
  EXPECT_NE(counter_uniform(1, 2, 3), counter_uniform(1, 3, 3));
  EXPECT_NE(counter_uniform(1, 2, 3), counter_uniform(2, 2, 3));
  double mean = 0, mean_square = 0;
  const int count = 100000;
  for (int i = 0; i < count; ++i) {
    const double u = counter_uniform(7, static_cast<std::uint64_t>(i % 13), static_cast<std::uint64_t>(i));
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    mean += u / count;
    mean_square += u * u / count;
  }
  EXPECT_NEAR(mean, 0.5, 0.01);
  EXPECT_NEAR(mean_square - mean * mean, 1.0 / 12, 0.01);
}

TEST(Sampling, NegativeInfinityLogitsAreNeverSampled) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> logits = {-inf, 0.0f, -inf, 1.0f};
  const auto freq = frequencies(logits, {.temperature = 1.0f});
  EXPECT_FALSE(freq.contains(0));
  EXPECT_FALSE(freq.contains(2));
  const auto top = frequencies(logits, {.temperature = 1.0f, .top_p = 0.99f});
  EXPECT_FALSE(top.contains(0));
}

/// Qwen2's vocabulary: 151936 exponentials, ~9.5k per float lane at AVX-512.
constexpr std::size_t kQwenVocab = 151936;

/// The sampler's full-vocabulary path recomputed in double throughout: x = float(logit / T) as the
/// sampler forms it, exp(x - max) and every sum in double, the same inverse CDF.
class ReferenceSampler {
 public:
  ReferenceSampler(const std::vector<float>& logits, float temperature) : x_(logits.size()), e_(logits.size()) {
    for (std::size_t i = 0; i < x_.size(); ++i) x_[i] = static_cast<double>(logits[i] / temperature);
    max_ = *std::max_element(x_.begin(), x_.end());
    for (std::size_t i = 0; i < x_.size(); ++i) total_ += e_[i] = std::exp(x_[i] - max_);
  }

  [[nodiscard]] SampledToken sample(double uniform) const {
    const double target = uniform * total_;
    double cumulative = 0;
    std::size_t token = 0;
    for (; token + 1 < e_.size(); ++token) {
      cumulative += e_[token];
      if (cumulative > target) break;
    }
    return {static_cast<TokenId>(token), log_prob(static_cast<TokenId>(token))};
  }

  /// Whether `uniform` falls within `tolerance` (relative to the total mass) of the boundary that
  /// separates tokens a and b in the inverse CDF, with no more than that mass between them: the
  /// draws a float-rounded CDF may legitimately send to the neighbouring token.
  [[nodiscard]] bool near_boundary(double uniform, TokenId a, TokenId b, double tolerance) const {
    const auto lo = static_cast<std::size_t>(std::min(a, b)), hi = static_cast<std::size_t>(std::max(a, b));
    double cumulative = 0, between = 0;
    for (std::size_t i = 0; i <= lo; ++i) cumulative += e_[i];
    for (std::size_t i = lo + 1; i < hi; ++i) between += e_[i];
    const double slack = tolerance * total_;
    return std::abs(cumulative - uniform * total_) <= slack && between <= slack;
  }

  [[nodiscard]] float log_prob(TokenId token) const {
    return static_cast<float>(x_[static_cast<std::size_t>(token)] - max_ - std::log(total_));
  }

 private:
  std::vector<double> x_, e_;
  double max_ = 0, total_ = 0;
};

// With the exponentials' sum added in float lanes the total was ~1e-5 relative off at this
// vocabulary, which moves every inverse-CDF boundary by as much: ~2-4% of the draws below took a
// neighbouring token (18 of these 600) and log-probs were up to 1.4e-5 off. The double sum agrees
// on every draw but those within float rounding (1e-6 of the mass) of a boundary: which side such
// a draw lands on depends on the float exponentials of the SIMD path (AVX-512 here, AVX2 on
// another host: one of the 600 on an AMD EPYC).
TEST(Sampling, FullVocabularyDrawsMatchADoublePrecisionReferenceAtQwenVocabulary) {
  std::mt19937_64 generator(20261121);
  std::vector<float> logits(kQwenVocab);
  SamplerScratch scratch;
  int draws = 0, mismatches = 0, at_a_boundary = 0;
  double worst_log_prob_error = 0;
  for (const float spread : {0.1f, 1.0f, 3.0f}) {  // near-uniform to peaked rows
    std::normal_distribution<float> normal(0.0f, spread);
    for (float& v : logits) v = normal(generator);
    for (const float temperature : {1.0f, 0.7f}) {
      const SamplingParams params{.temperature = temperature};
      const ReferenceSampler reference(logits, temperature);
      for (std::uint64_t step = 0; step < 100; ++step) {
        const double u = counter_uniform(5, static_cast<std::uint64_t>(spread * 10), step);
        const auto got = sample_token(logits, params, u, scratch);
        const auto want = reference.sample(u);
        ++draws;
        if (got.token != want.token) {
          if (reference.near_boundary(u, got.token, want.token, 1e-6)) {
            ++at_a_boundary;
          } else {
            ++mismatches;
          }
        }
        // The log-prob of the token taken, whichever it is.
        worst_log_prob_error =
            std::max(worst_log_prob_error, std::abs(static_cast<double>(got.log_prob - reference.log_prob(got.token))));
      }
    }
  }
  EXPECT_EQ(draws, 600);
  EXPECT_EQ(mismatches, 0) << "of " << draws << " draws";
  EXPECT_LE(at_a_boundary, 3) << "of " << draws << " draws";  // the float-lane sum moved 18
  EXPECT_LT(worst_log_prob_error, 2e-6);
}

// The sampler's exponentials are the attention kernel's, bit for bit; only their sum differs: at
// the vocabulary size it is within 2e-8 of a sequential double sum of the floats written (the
// float-lane sum is 1e-7 to 1e-5 off there, the more the row is peaked).
TEST(Sampling, DoubleSumKernelWritesTheSameExponentialsAndSumsThemInDouble) {
  std::mt19937_64 generator(7);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  for (const std::size_t n : {std::size_t{1}, std::size_t{13}, std::size_t{64}, std::size_t{1000}, kQwenVocab}) {
    std::vector<float> a(n);
    for (float& v : a) v = normal(generator);
    const float max = *std::max_element(a.begin(), a.end());
    std::vector<float> b = a;
    const auto count = static_cast<verl::Index>(n);
    verl::cpu::exp_shifted_row<float>(a.data(), count, 1.0f, max);
    const double total = verl::cpu::exp_shifted_row_double_sum(b.data(), count, 1.0f, max);
    double sequential = 0;
    for (std::size_t i = 0; i < n; ++i) {
      ASSERT_EQ(a[i], b[i]) << "n " << n << " index " << i;
      sequential += b[i];
    }
    // Below 4 packs a group is at most 4 floats added in float (~1 float ulp of the total).
    EXPECT_NEAR(total, sequential, (n == kQwenVocab ? 2e-8 : 1.2e-7) * sequential) << "n " << n;
  }
}

TEST(Sampling, VectorizedArgmaxIsTheScalarScanForEveryLevelAndRow) {
  // Greedy sampling's argmax runs vectorized; each compiled width must give the scalar scan's
  // answer (the first largest, NaN skipped unless it is first) on rows with ties, NaN, infinities,
  // signed zeros and every tail length.
  auto scalar = [](const std::vector<float>& x) {
    std::size_t best = 0;
    for (std::size_t i = 1; i < x.size(); ++i) {
      if (x[i] > x[best]) best = i;
    }
    return static_cast<verl::Index>(best);
  };
  std::vector<std::pair<std::string, verl::Index (*)(const float*, verl::Index)>> kernels = {
      {"baseline", &verl::cpu::argmax_detail::first_argmax_baseline}};
#if VERL_HAS_X86_DISPATCH
  if (verl::cpu::simd::cpu_supports(verl::cpu::SimdLevel::avx2)) kernels.emplace_back("avx2", &verl::cpu::argmax_detail::first_argmax_avx2);
  if (verl::cpu::simd::cpu_supports(verl::cpu::SimdLevel::avx512)) {
    kernels.emplace_back("avx512", &verl::cpu::argmax_detail::first_argmax_avx512);
  }
#endif
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const std::vector<float> specials = {nan, inf, -inf, 0.0f, -0.0f, 1.0f, 1.0f, -1.0f};
  std::mt19937_64 generator(11);
  std::uniform_int_distribution<int> pick(0, 9);
  for (int trial = 0; trial < 4000; ++trial) {
    const std::size_t n = trial < 100 ? static_cast<std::size_t>(trial) : 1 + generator() % 300;
    std::vector<float> x(n);
    for (float& v : x) {
      const int kind = pick(generator);
      // Few distinct values, so that ties of the largest are common.
      v = kind < 8 ? static_cast<float>(static_cast<int>(generator() % 7) - 3) : specials[generator() % specials.size()];
    }
    for (const auto& [name, kernel] : kernels) {
      ASSERT_EQ(kernel(x.data(), static_cast<verl::Index>(n)), scalar(x)) << name << " n " << n << " trial " << trial;
    }
  }
  EXPECT_EQ(verl::cpu::first_argmax(nullptr, 0), 0);
  std::vector<float> vocabulary(kQwenVocab, -2.0f);
  vocabulary[kQwenVocab - 1] = 5.0f;
  vocabulary[kQwenVocab - 7] = 5.0f;
  EXPECT_EQ(verl::cpu::first_argmax(vocabulary.data(), static_cast<verl::Index>(kQwenVocab)), static_cast<verl::Index>(kQwenVocab - 7));
}

TEST(Sampling, InvalidParametersNameTheKnob) {
  auto message = [](const SamplingParams& params) {
    try {
      params.validate();
    } catch (const verl::InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message({.temperature = -1.0f}).find("temperature"), std::string::npos);
  EXPECT_NE(message({.top_p = 0.0f}).find("top_p: expected a value in (0, 1]"), std::string::npos);
  EXPECT_NE(message({.n = 0}).find("n: expected at least 1"), std::string::npos);
  EXPECT_NE(message({.max_response_length = 0}).find("max_response_length"), std::string::npos);
  EXPECT_THROW(sample_token(std::vector<float>{}, {}, 0.5), verl::InvalidArgument);
}

}  // namespace
