// The fused logits kernel (verl/algo/logprob_entropy.hpp): forward and backward against a
// double-precision reference on every instruction set this CPU runs, edge cases (-inf / NaN
// logits, ragged vocabularies, temperature, bfloat16), thread-count invariance, in-place
// backward, finite differences and argument errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <algorithm>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "verl/algo/logits/logprob_entropy.hpp"
#include "../support/error_message.hpp"

namespace {

using verl::Index;
using verl::InvalidArgument;
using verl::MatrixD;
using verl::MatrixF;
using verl::VectorF;
using namespace verl::algo;
using verl::test_support::message_of;

constexpr float kInf = std::numeric_limits<float>::infinity();

MatrixF random_logits(Index rows, Index cols, float scale, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  MatrixF m(rows, cols);
  for (Index i = 0; i < m.size(); ++i) m.data()[i] = normal(rng);
  return m;
}

std::vector<std::int64_t> random_labels(Index rows, Index vocab, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<std::int64_t> labels(static_cast<std::size_t>(rows));
  for (auto& l : labels) l = static_cast<std::int64_t>(rng() % static_cast<unsigned>(vocab));
  return labels;
}

VectorF random_cotangent(Index rows, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  VectorF v(rows);
  for (Index i = 0; i < rows; ++i) v[i] = uniform(rng);
  return v;
}

/// Softmax statistics of one row in double, the textbook way.
struct Reference {
  double log_prob = 0, entropy = 0, sum_pi_squared = 0, logsumexp = 0;
  std::vector<double> p, log_p;
};

Reference reference_row(const MatrixF& logits, Index row, std::int64_t label, float temperature) {
  const Index v = logits.cols();
  std::vector<double> x(static_cast<std::size_t>(v));
  for (Index j = 0; j < v; ++j) x[static_cast<std::size_t>(j)] = static_cast<double>(logits(row, j) / temperature);
  double m = -std::numeric_limits<double>::infinity();
  for (double xi : x) m = std::max(m, xi);
  double s = 0;
  for (double xi : x) s += std::exp(xi - m);
  const double lse = m + std::log(s);
  Reference r;
  r.logsumexp = lse;
  r.p.resize(x.size());
  r.log_p.resize(x.size());
  for (std::size_t j = 0; j < x.size(); ++j) {
    r.log_p[j] = x[j] - lse;
    r.p[j] = std::exp(r.log_p[j]);
    if (r.p[j] > 0) r.entropy -= r.p[j] * r.log_p[j];
    r.sum_pi_squared += r.p[j] * r.p[j];
  }
  if (label >= 0) r.log_prob = r.log_p[static_cast<std::size_t>(label)];
  return r;
}

/// d/dlogits of sum_i (a_i logp_i + b_i H_i + c_i Q_i), in double.
MatrixD reference_gradient(const MatrixF& logits, const std::vector<std::int64_t>& labels, const VectorF& a,
                           const VectorF& b, const VectorF& c, float temperature) {
  MatrixD g(logits.rows(), logits.cols());
  for (Index i = 0; i < logits.rows(); ++i) {
    const Reference r = reference_row(logits, i, labels.empty() ? -1 : labels[static_cast<std::size_t>(i)], temperature);
    for (Index j = 0; j < logits.cols(); ++j) {
      const double p = r.p[static_cast<std::size_t>(j)], lp = r.log_p[static_cast<std::size_t>(j)];
      double v = 0;
      if (a.size() != 0) v += a[i] * ((!labels.empty() && labels[static_cast<std::size_t>(i)] == j ? 1.0 : 0.0) - p);
      if (b.size() != 0 && p > 0) v += -b[i] * p * (lp + r.entropy);
      if (c.size() != 0) v += 2.0 * c[i] * p * (p - r.sum_pi_squared);
      g(i, j) = v / temperature;
    }
  }
  return g;
}

std::vector<SimdLevel> supported_levels() {
  std::vector<SimdLevel> levels;
  for (auto level : {SimdLevel::scalar, SimdLevel::baseline, SimdLevel::avx2, SimdLevel::avx512})
    if (detail::simd::cpu_supports(level)) levels.push_back(level);
  return levels;
}

TEST(LogprobEntropy, ConceptAcceptsFloatAndBfloat16Only) {
  static_assert(LogitScalar<float>);
  static_assert(LogitScalar<Eigen::bfloat16>);
  static_assert(!LogitScalar<double>);
  static_assert(!LogitScalar<Eigen::half>);
}

TEST(LogprobEntropy, ForwardMatchesDoubleReferenceOnEveryInstructionSet) {
  // Ragged vocabularies exercise the pack tails and the chunk boundaries (2048).
  for (const Index vocab : {Index{1}, Index{7}, Index{16}, Index{33}, Index{2047}, Index{2048}, Index{2049}, Index{5000}}) {
    const MatrixF logits = random_logits(5, vocab, 4.0f, static_cast<unsigned>(vocab));
    const auto labels = random_labels(5, vocab, 3);
    for (const float temperature : {1.0f, 0.7f}) {
      for (const SimdLevel level : supported_levels()) {
        SCOPED_TRACE(std::string(to_string(level)) + " V=" + std::to_string(vocab) + " T=" + std::to_string(temperature));
        const LogprobEntropy r = fused_logprob_entropy(logits, labels, {.temperature = temperature, .simd = level});
        for (Index i = 0; i < logits.rows(); ++i) {
          const Reference ref = reference_row(logits, i, labels[static_cast<std::size_t>(i)], temperature);
          // float32 results: a few ulp of the value plus float partial sums of 64 terms.
          EXPECT_NEAR(r.log_probs[i], ref.log_prob, 3e-6 + 1e-6 * std::abs(ref.log_prob));
          EXPECT_NEAR(r.entropy[i], ref.entropy, 3e-6 + 1e-6 * std::abs(ref.entropy));
          EXPECT_NEAR(r.sum_pi_squared[i], ref.sum_pi_squared, 3e-6 * ref.sum_pi_squared + 1e-12);
          EXPECT_NEAR(r.logsumexp()[i], ref.logsumexp, 3e-6 + 1e-6 * std::abs(ref.logsumexp));
        }
      }
    }
  }
}

TEST(LogprobEntropy, BackwardMatchesDoubleReferenceOnEveryInstructionSet) {
  for (const Index vocab : {Index{1}, Index{11}, Index{33}, Index{2049}}) {
    const MatrixF logits = random_logits(6, vocab, 3.0f, 11);
    const auto labels = random_labels(6, vocab, 5);
    const VectorF a = random_cotangent(6, 1), b = random_cotangent(6, 2), c = random_cotangent(6, 3);
    for (const float temperature : {1.0f, 1.3f}) {
      const MatrixD want = reference_gradient(logits, labels, a, b, c, temperature);
      for (const SimdLevel level : supported_levels()) {
        SCOPED_TRACE(std::string(to_string(level)) + " V=" + std::to_string(vocab));
        const LogitsKernelOptions options{.temperature = temperature, .simd = level};
        const LogprobEntropy forward = fused_logprob_entropy(logits, labels, options);
        const MatrixF got =
            fused_logprob_entropy_backward(logits, labels, forward, {as_span(a), as_span(b), as_span(c)}, options);
        for (Index k = 0; k < got.size(); ++k) EXPECT_NEAR(got.data()[k], want.data()[k], 2e-6) << "element " << k;
      }
    }
  }
}

TEST(LogprobEntropy, ZeroCotangentRowsGetExactZeros) {
  const MatrixF logits = random_logits(3, 40, 2.0f, 1);
  const auto labels = random_labels(3, 40, 1);
  VectorF a = VectorF::Zero(3);
  a[1] = 0.5f;
  const LogprobEntropy forward = fused_logprob_entropy(logits, labels);
  const MatrixF g = fused_logprob_entropy_backward(logits, labels, forward, {.log_probs = as_span(a)});
  EXPECT_TRUE((g.row(0).array() == 0).all());
  EXPECT_TRUE((g.row(2).array() == 0).all());
  EXPECT_NEAR(g.row(1).sum(), 0.0f, 1e-6);  // onehot - softmax sums to 0
}

TEST(LogprobEntropy, CentralFiniteDifferences) {
  // L = sum_i a_i logp_i + b_i H_i + c_i Q_i is smooth: its gradient is the full derivative.
  const Index rows = 3, vocab = 11;
  const MatrixF logits = random_logits(rows, vocab, 1.5f, 21);
  const auto labels = random_labels(rows, vocab, 22);
  const VectorF a = random_cotangent(rows, 23), b = random_cotangent(rows, 24), c = random_cotangent(rows, 25);
  const auto loss = [&](const MatrixF& x) {
    const LogprobEntropy r = fused_logprob_entropy(x, labels, {.temperature = 0.9f});
    double total = 0;
    for (Index i = 0; i < rows; ++i)
      total += a[i] * static_cast<double>(r.log_probs[i]) + b[i] * static_cast<double>(r.entropy[i]) +
               c[i] * static_cast<double>(r.sum_pi_squared[i]);
    return total;
  };
  const LogprobEntropy forward = fused_logprob_entropy(logits, labels, {.temperature = 0.9f});
  const MatrixF grad =
      fused_logprob_entropy_backward(logits, labels, forward, {as_span(a), as_span(b), as_span(c)}, {.temperature = 0.9f});
  const float h = 1e-2f;
  for (Index k = 0; k < logits.size(); ++k) {
    MatrixF plus = logits, minus = logits;
    plus.data()[k] += h;
    minus.data()[k] -= h;
    const double fd = (loss(plus) - loss(minus)) / (static_cast<double>(plus.data()[k]) - minus.data()[k]);
    EXPECT_NEAR(grad.data()[k], fd, 5e-4) << "element " << k;
  }
}

TEST(LogprobEntropy, ResultsDoNotDependOnTheThreadCount) {
  const MatrixF logits = random_logits(37, 3000, 3.0f, 7);
  const auto labels = random_labels(37, 3000, 8);
  const VectorF a = random_cotangent(37, 9), b = random_cotangent(37, 10);
  const LogprobEntropy one = fused_logprob_entropy(logits, labels, {.num_threads = 1});
  const MatrixF g1 = fused_logprob_entropy_backward(logits, labels, one, {as_span(a), as_span(b)}, {.num_threads = 1});
  for (const unsigned threads : {2u, 3u, 8u}) {
    const LogprobEntropy many = fused_logprob_entropy(logits, labels, {.num_threads = threads});
    EXPECT_EQ(one.log_probs, many.log_probs);
    EXPECT_EQ(one.entropy, many.entropy);
    EXPECT_EQ(one.sum_pi_squared, many.sum_pi_squared);
    const MatrixF g = fused_logprob_entropy_backward(logits, labels, many, {as_span(a), as_span(b)}, {.num_threads = threads});
    EXPECT_EQ(g1, g);
  }
}

TEST(LogprobEntropy, NegativeInfinityLogitsHaveZeroProbability) {
  // A vocabulary masked with -inf behaves like the unmasked sub-vocabulary, and gets exactly zero
  // gradient (torch would give NaN entropy through 0 * -inf).
  MatrixF logits = random_logits(2, 3000, 2.0f, 3);
  MatrixF kept(2, 1500);
  for (Index i = 0; i < 2; ++i)
    for (Index j = 0; j < 3000; ++j) {
      if (j % 2 == 1) {
        logits(i, j) = -kInf;
      } else {
        kept(i, j / 2) = logits(i, j);
      }
    }
  // Also a leading chunk that is entirely -inf.
  for (Index j = 0; j < 2100; ++j) logits(1, j) = -kInf;
  for (Index j = 0; j < 1050; ++j) kept(1, j) = -kInf;
  const std::vector<std::int64_t> labels = {4, 2200};
  const std::vector<std::int64_t> kept_labels = {2, 1100};
  const LogprobEntropy r = fused_logprob_entropy(logits, labels);
  const LogprobEntropy k = fused_logprob_entropy(kept, kept_labels);
  for (Index i = 0; i < 2; ++i) {
    EXPECT_NEAR(r.log_probs[i], k.log_probs[i], 1e-6);
    EXPECT_NEAR(r.entropy[i], k.entropy[i], 1e-6);
    EXPECT_NEAR(r.sum_pi_squared[i], k.sum_pi_squared[i], 1e-7);
    EXPECT_TRUE(std::isfinite(r.entropy[i]));
  }
  const VectorF ones = VectorF::Ones(2);
  const MatrixF g = fused_logprob_entropy_backward(logits, labels, r, {as_span(ones), as_span(ones)});
  for (Index i = 0; i < 2; ++i)
    for (Index j = 0; j < 3000; ++j) {
      if (logits(i, j) == -kInf) {
        EXPECT_EQ(g(i, j), 0.0f);
      } else {
        EXPECT_TRUE(std::isfinite(g(i, j)));
      }
    }
}

TEST(LogprobEntropy, NanLogitPoisonsOnlyItsRow) {
  MatrixF logits = random_logits(3, 100, 1.0f, 4);
  logits(1, 57) = std::numeric_limits<float>::quiet_NaN();
  const std::vector<std::int64_t> labels = {0, 1, 2};
  const LogprobEntropy r = fused_logprob_entropy(logits, labels);
  EXPECT_TRUE(std::isnan(r.entropy[1]));
  EXPECT_TRUE(std::isnan(r.log_probs[1]));
  EXPECT_TRUE(std::isfinite(r.entropy[0]) && std::isfinite(r.entropy[2]));
  // A NaN in an otherwise all -inf leading chunk is not skipped either.
  MatrixF masked = MatrixF::Constant(1, 5000, -kInf);
  masked(0, 10) = std::numeric_limits<float>::quiet_NaN();
  masked(0, 4000) = 1.0f;
  EXPECT_TRUE(std::isnan(fused_logprob_entropy(masked, {}).entropy[0]));
}

TEST(LogprobEntropy, BackwardMayOverwriteTheLogitsInPlace) {
  MatrixF logits = random_logits(4, 1000, 2.0f, 5);
  const auto labels = random_labels(4, 1000, 6);
  const VectorF a = random_cotangent(4, 7), b = random_cotangent(4, 8);
  const LogprobEntropy forward = fused_logprob_entropy(logits, labels);
  const MatrixF separate = fused_logprob_entropy_backward(logits, labels, forward, {as_span(a), as_span(b)});
  fused_logprob_entropy_backward_into<MatrixF, float>(logits, labels, forward, {as_span(a), as_span(b)}, logits);
  EXPECT_EQ(logits, separate);
}

TEST(LogprobEntropy, Bfloat16LogitsComputeInFloat) {
  const MatrixF source = random_logits(3, 700, 3.0f, 12);
  const verl::RowMatrix<Eigen::bfloat16> half = source.cast<Eigen::bfloat16>();
  const MatrixF widened = half.cast<float>();  // exact
  const auto labels = random_labels(3, 700, 13);
  const LogprobEntropy from_half = fused_logprob_entropy(half, labels);
  const LogprobEntropy from_float = fused_logprob_entropy(widened, labels);
  EXPECT_EQ(from_half.log_probs, from_float.log_probs);
  EXPECT_EQ(from_half.entropy, from_float.entropy);
  const VectorF a = random_cotangent(3, 14);
  const verl::RowMatrix<Eigen::bfloat16> g_half = fused_logprob_entropy_backward(half, labels, from_half, {as_span(a)});
  const MatrixF g_float = fused_logprob_entropy_backward(widened, labels, from_float, {as_span(a)});
  for (Index k = 0; k < g_float.size(); ++k)
    EXPECT_EQ(static_cast<float>(g_half.data()[k]), static_cast<float>(Eigen::bfloat16(g_float.data()[k])));
}

template <int W>
double max_relative_exp_error() {
  double worst = 0;
  alignas(64) float in[W];
  for (int i = 0; i < 200000; i += W) {
    for (int k = 0; k < W; ++k) in[k] = -87.0f * static_cast<float>(i + k) / 200000.0f;
    const auto out = detail::simd::exp_nonpositive<W>(detail::simd::load<W>(in));
    for (int k = 0; k < W; ++k) {
      const double want = std::exp(static_cast<double>(in[k]));
      worst = std::max(worst, std::abs(detail::simd::lane<W>(out, k) - want) / want);
    }
  }
  return worst;
}

TEST(LogprobEntropy, VectorisedExpIsWithinAFewUlp) {
  EXPECT_LT(max_relative_exp_error<1>(), 1.5e-7);
#if VERL_HAS_VECTOR_EXTENSIONS
  EXPECT_LT(max_relative_exp_error<4>(), 2.5e-7);
  EXPECT_LT(max_relative_exp_error<8>(), 2.5e-7);
  EXPECT_LT(max_relative_exp_error<16>(), 2.5e-7);
#endif
}

template <int W>
void expect_bfloat16_round_trip_like_eigen(const std::vector<float>& values) {
  for (std::size_t start = 0; start + W <= values.size(); start += W) {
    alignas(64) float in[W];
    alignas(64) std::uint16_t out[W];
    for (int k = 0; k < W; ++k) in[k] = values[start + static_cast<std::size_t>(k)];
    detail::simd::store_bfloat16<W>(out, detail::simd::load<W>(in));
    for (int k = 0; k < W; ++k) {
      const Eigen::bfloat16 want(in[k]);
      EXPECT_EQ(out[k], want.value) << "W=" << W << " value " << in[k];
      Eigen::bfloat16 back;
      back.value = out[k];
      const float widened = detail::simd::lane<W>(detail::simd::load_bfloat16<W>(out), k);
      if (!std::isnan(widened)) {
        EXPECT_EQ(widened, static_cast<float>(back));
      }
    }
  }
}

TEST(LogprobEntropy, Bfloat16ConversionsMatchEigen) {
  std::vector<float> values = {0.0f, -0.0f, 1.0f, -1.0f, kInf, -kInf, std::numeric_limits<float>::quiet_NaN(),
                               -std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::denorm_min(),
                               std::numeric_limits<float>::max(), std::numeric_limits<float>::min(), 3.14159f};
  // Exact ties (low half 0x8000) round to even, both ways.
  for (const std::uint32_t bits : {0x3F808000u, 0x3F818000u, 0xBF808000u, 0x7F7F8000u, 0x3F807FFFu, 0x3F808001u})
    values.push_back(detail::simd::bit_cast<float>(bits));
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 100.0f);
  while (values.size() % 16 != 0 || values.size() < 256) values.push_back(normal(rng));
  expect_bfloat16_round_trip_like_eigen<1>(values);
#if VERL_HAS_VECTOR_EXTENSIONS
  expect_bfloat16_round_trip_like_eigen<4>(values);
  expect_bfloat16_round_trip_like_eigen<8>(values);
  expect_bfloat16_round_trip_like_eigen<16>(values);
#endif
}

TEST(LogprobEntropy, Bfloat16BackwardOnEveryInstructionSet) {
  const MatrixF source = random_logits(3, 203, 3.0f, 31);
  const verl::RowMatrix<Eigen::bfloat16> half = source.cast<Eigen::bfloat16>();
  const MatrixF widened = half.cast<float>();
  const auto labels = random_labels(3, 203, 32);
  const VectorF a = random_cotangent(3, 33), b = random_cotangent(3, 34);
  for (const SimdLevel level : supported_levels()) {
    SCOPED_TRACE(std::string(to_string(level)));
    const LogitsKernelOptions options{.temperature = 0.8f, .simd = level};
    const LogprobEntropy fh = fused_logprob_entropy(half, labels, options);
    const LogprobEntropy ff = fused_logprob_entropy(widened, labels, options);
    EXPECT_EQ(fh.entropy, ff.entropy);
    const verl::RowMatrix<Eigen::bfloat16> gh = fused_logprob_entropy_backward(half, labels, fh, {as_span(a), as_span(b)}, options);
    const MatrixF gf = fused_logprob_entropy_backward(widened, labels, ff, {as_span(a), as_span(b)}, options);
    for (Index k = 0; k < gf.size(); ++k) EXPECT_EQ(gh.data()[k].value, Eigen::bfloat16(gf.data()[k]).value) << k;
  }
}

TEST(LogprobEntropy, NonContiguousInputsAreAccepted) {
  const MatrixF logits = random_logits(6, 50, 2.0f, 15);
  const Eigen::MatrixXf column_major = logits;  // converted to row-major internally
  const auto labels = random_labels(6, 50, 16);
  EXPECT_EQ(fused_logprob_entropy(column_major, labels).log_probs, fused_logprob_entropy(logits, labels).log_probs);
  // A block of rows of a wider matrix: strided rows, no copy.
  MatrixF wide = random_logits(6, 80, 2.0f, 17);
  wide.leftCols(50) = logits;
  const LogprobEntropy r = fused_logprob_entropy(wide.leftCols(50), labels);
  EXPECT_EQ(r.entropy, fused_logprob_entropy(logits, labels).entropy);
}

TEST(LogprobEntropy, EmptyBatch) {
  const MatrixF logits(0, 10);
  const LogprobEntropy r = fused_logprob_entropy(logits, {});
  EXPECT_EQ(r.entropy.size(), 0);
  EXPECT_EQ(fused_logprob_entropy_backward(logits, {}, r, {}).rows(), 0);
}

TEST(LogprobEntropy, ErrorsNameTheArgument) {
  const MatrixF logits = random_logits(2, 5, 1.0f, 1);
  const std::vector<std::int64_t> out_of_range = {0, 5};
  EXPECT_EQ(message_of([&] { fused_logprob_entropy(logits, out_of_range); }),
            "labels: expected values in [0, 5) (vocab size V), got 5 at 1");
  const std::vector<std::int64_t> negative = {-1, 0};
  EXPECT_NE(message_of([&] { fused_logprob_entropy(logits, negative); }).find("got -1 at 0"), std::string::npos);
  const std::vector<std::int64_t> short_labels = {0};
  EXPECT_EQ(message_of([&] { fused_logprob_entropy(logits, short_labels); }),
            "labels: expected length 2 (rows of logits), got 1");
  EXPECT_EQ(message_of([&] { fused_logprob_entropy(logits, {}, {.temperature = 0.0f}); }),
            "temperature: expected a finite value > 0, got 0");
  EXPECT_NE(message_of([&] { fused_logprob_entropy(MatrixF(3, 0), {}); }).find("logits: expected at least one column"),
            std::string::npos);
  const LogprobEntropy forward = fused_logprob_entropy(logits, {});
  const VectorF three = VectorF::Ones(3);
  EXPECT_EQ(message_of([&] { fused_logprob_entropy_backward(logits, {}, forward, {.entropy = as_span(three)}); }),
            "cotangents.entropy: expected length 2 (rows of logits) or empty, got 3");
  MatrixF wrong(3, 5);
  EXPECT_EQ(message_of([&] {
              fused_logprob_entropy_backward_into<MatrixF, float>(logits, {}, forward, {}, wrong);
            }),
            "grad_logits: expected the shape of logits (2, 5), got (3, 5)");
  if (!detail::simd::cpu_supports(SimdLevel::avx512)) {
    EXPECT_NE(message_of([&] { fused_logprob_entropy(logits, {}, {.simd = SimdLevel::avx512}); }).find("simd:"),
              std::string::npos);
  }
}

}  // namespace

TEST(LogprobEntropy, SimdLevelFromTheEnvironment) {
  // VERL_SIMD picks the level (replaying a run recorded on a narrower CPU); unset or empty leaves
  // the choice to the CPU; a name that is not a level, or a level the CPU lacks, names the variable.
  using verl::cpu::simd::level_from_environment;
  const char* saved = std::getenv("VERL_SIMD");
  const std::string restore = saved != nullptr ? saved : "";
  ::unsetenv("VERL_SIMD");
  EXPECT_EQ(level_from_environment(), SimdLevel::automatic);
  ::setenv("VERL_SIMD", "", 1);
  EXPECT_EQ(level_from_environment(), SimdLevel::automatic);
  ::setenv("VERL_SIMD", "baseline", 1);
  EXPECT_EQ(level_from_environment(), SimdLevel::baseline);
  for (const SimdLevel level : {SimdLevel::avx2, SimdLevel::avx512}) {
    ::setenv("VERL_SIMD", std::string(verl::cpu::to_string(level)).c_str(), 1);
    if (verl::cpu::simd::cpu_supports(level)) {
      EXPECT_EQ(level_from_environment(), level);
    } else {
      EXPECT_THROW(
          {
            try {
              (void)level_from_environment();
            } catch (const verl::InvalidArgument& error) {
              EXPECT_NE(std::string(error.what()).find("VERL_SIMD: this CPU cannot run"), std::string::npos) << error.what();
              throw;
            }
          },
          verl::InvalidArgument);
    }
  }
  ::setenv("VERL_SIMD", "avx9", 1);
  try {
    (void)level_from_environment();
    ADD_FAILURE() << "VERL_SIMD=avx9 was accepted";
  } catch (const verl::InvalidArgument& error) {
    EXPECT_EQ(std::string(error.what()), "VERL_SIMD: expected baseline, avx2 or avx512 (or unset), got 'avx9'");
  }
  if (saved != nullptr) {
    ::setenv("VERL_SIMD", restore.c_str(), 1);
  } else {
    ::unsetenv("VERL_SIMD");
  }
}
