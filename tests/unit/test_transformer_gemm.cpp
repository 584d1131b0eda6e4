// The transformer's packed GEMM (run-time AVX-512 / AVX2 kernels) against a double reference, for
// every operand layout the model uses, edge tiles and accumulation.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <initializer_list>
#include <random>
#include <tuple>
#include <vector>

#include "verl/cpu/gemm.hpp"

namespace {

using verl::Index;
using namespace verl::cpu;
namespace cpu = verl::cpu;
using verl::bf16_bits_to_float;
using verl::float_to_bf16_bits;

class GemmTest : public ::testing::TestWithParam<std::tuple<Index, Index, Index>> {};

// Bit-for-bit agreement between paths, and bfloat16 decoding, belong to the packed AVX2/AVX-512
// kernels; below AVX2 (VERL_SIMD=baseline, or such a CPU) products go through Eigen, which sums
// in its own order, and bfloat16 decoding is refused with a message.
#define VERL_SKIP_BELOW_AVX2()                                                                             \
  if (verl::cpu::simd::best_level() < verl::cpu::SimdLevel::avx2) {                                       \
    GTEST_SKIP() << "the packed AVX2/AVX-512 kernels are off (level " << verl::cpu::to_string(verl::cpu::simd::best_level()) << ")"; \
  }

TEST_P(GemmTest, MatchesADoubleReferenceForEveryLayout) {
  const auto [m, n, k] = GetParam();
  std::mt19937 rng(static_cast<unsigned>(m * 1000 + n * 10 + k));
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  auto random = [&](Index size) {
    std::vector<float> v(static_cast<std::size_t>(size));
    for (auto& x : v) x = uniform(rng);
    return v;
  };
  // Padded strides, so that stride and width differ.
  const Index a_pad = 3, b_pad = 5, c_pad = 2;
  const auto a_rows = random(m * (k + a_pad));  // A row-major
  const auto a_cols = random(k * (m + a_pad));  // A column-major (A^T row-major)
  const auto b_rows = random(k * (n + b_pad));
  const auto b_cols = random(n * (k + b_pad));
  for (const bool a_transposed : {false, true}) {
    for (const bool b_transposed : {false, true}) {
      for (const bool accumulate : {false, true}) {
        const cpu::Operand<float> a = a_transposed ? cpu::transpose_of(a_cols.data(), m + a_pad) : cpu::rows_of(a_rows.data(), k + a_pad);
        const cpu::Operand<float> b = b_transposed ? cpu::transpose_of(b_cols.data(), k + b_pad) : cpu::rows_of(b_rows.data(), n + b_pad);
        std::vector<float> c = random(m * (n + c_pad));
        const std::vector<float> before = c;
        cpu::gemm<float>(m, n, k, a, b, c.data(), n + c_pad, accumulate);
        double worst = 0;
        for (Index i = 0; i < m; ++i) {
          for (Index j = 0; j < n; ++j) {
            double expected = accumulate ? before[static_cast<std::size_t>(i * (n + c_pad) + j)] : 0.0;
            for (Index p = 0; p < k; ++p) expected += static_cast<double>(a.at(i, p)) * b.at(p, j);
            worst = std::max(worst, std::abs(expected - c[static_cast<std::size_t>(i * (n + c_pad) + j)]));
          }
          // Padding columns of C are untouched.
          for (Index j = n; j < n + c_pad; ++j) {
            ASSERT_EQ(c[static_cast<std::size_t>(i * (n + c_pad) + j)], before[static_cast<std::size_t>(i * (n + c_pad) + j)]);
          }
        }
        EXPECT_LT(worst, 1e-5 * std::max<double>(1.0, static_cast<double>(k)))
            << "a_transposed " << a_transposed << " b_transposed " << b_transposed << " accumulate " << accumulate;
      }
    }
  }
}

// Shapes around the kernels' tiles (8 x 48, 14 x 32, 8 x 16, 6 x 16; widths that 48 pads more take
// 14 x 32) and blocks (KC up to 288 in equal even blocks: 257 as 2 x 130, 300 as 2 x 150; MC 192, 196
// and 96; NC 480, 512 and 2048; A shared across NC blocks in chunks of 12 row blocks).
INSTANTIATE_TEST_SUITE_P(Shapes, GemmTest,
                         ::testing::Values(std::tuple<Index, Index, Index>{1, 1, 1}, std::tuple<Index, Index, Index>{1, 37, 8},
                                           std::tuple<Index, Index, Index>{7, 5, 300}, std::tuple<Index, Index, Index>{8, 32, 16},
                                           std::tuple<Index, Index, Index>{13, 47, 64}, std::tuple<Index, Index, Index>{14, 32, 31},
                                           std::tuple<Index, Index, Index>{15, 33, 257}, std::tuple<Index, Index, Index>{97, 33, 257},
                                           std::tuple<Index, Index, Index>{197, 513, 20}, std::tuple<Index, Index, Index>{200, 2050, 9},
                                           std::tuple<Index, Index, Index>{2400, 530, 7}, std::tuple<Index, Index, Index>{3, 4, 0}));

TEST(Gemm, ResultsDoNotDependOnTheThreadCount) {
  // Tasks split rows and columns differently with a pool; each element must still be the same
  // chain of multiply-adds (KC blocks in sequence), so training is reproducible across machines
  // with different core counts. Shapes cross the row chunks, NC blocks and KC blocks. Half a row
  // block (96 rows) or more per thread takes one range of tiles per thread (each packing as it
  // goes; the ranges end in the middle of a row panel, in the first or a later NC block): 2400 and
  // 900 rows at every count, 512 and 500 at two and three threads, 250 and 192 (a k/v projection's
  // weight gradient) at two. Fewer rows take the shared row tasks (512 and 500 at eight threads,
  // 250 at three and eight), or, up to a row block, one column range per thread (192 rows at three
  // and eight), 30 rows four; the packing buffers, reused from shape to shape, hold the previous
  // shape's values.
  // A thread done with its range claims the column stripes of the others (ColumnClaims): eight
  // threads on a machine with fewer cores start apart, so most ranges are shared. 4000 x 1200
  // packs A in several chunks per range; at k = 11000 A is too deep to share and each range is
  // its owner's alone.
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (const Index threads : {2, 3, 8}) {
    ThreadPool pool(threads);
    for (const auto& [m, n, k] : {std::tuple<Index, Index, Index>{2400, 600, 300}, std::tuple<Index, Index, Index>{30, 1100, 513},
                                  std::tuple<Index, Index, Index>{500, 40, 700}, std::tuple<Index, Index, Index>{192, 576, 512},
                                  std::tuple<Index, Index, Index>{250, 300, 520},
                                  std::tuple<Index, Index, Index>{900, 1100, 300}, std::tuple<Index, Index, Index>{512, 576, 576},
                                  std::tuple<Index, Index, Index>{4000, 100, 1200}, std::tuple<Index, Index, Index>{400, 40, 11000}}) {
      for (const bool transposed : {false, true}) {
        std::vector<float> a(static_cast<std::size_t>(m * k)), b(static_cast<std::size_t>(k * n));
        for (auto& x : a) x = uniform(rng);
        for (auto& x : b) x = uniform(rng);
        const cpu::Operand<float> a_op = transposed ? cpu::transpose_of(a.data(), m) : cpu::rows_of(a.data(), k);
        const cpu::Operand<float> b_op = transposed ? cpu::transpose_of(b.data(), k) : cpu::rows_of(b.data(), n);
        // Accumulating into C also catches a tile computed by two threads (added twice).
        const bool accumulate = transposed;
        std::vector<float> serial(static_cast<std::size_t>(m * n));
        for (auto& x : serial) x = uniform(rng);
        std::vector<float> parallel = serial;
        cpu::gemm<float>(nullptr, m, n, k, a_op, b_op, serial.data(), n, accumulate);
        cpu::gemm<float>(&pool, m, n, k, a_op, b_op, parallel.data(), n, accumulate);
        for (std::size_t i = 0; i < serial.size(); ++i) {
          ASSERT_EQ(serial[i], parallel[i]) << "threads " << threads << " m " << m << " n " << n << " k " << k
                                            << " transposed " << transposed << " at " << i;
        }
      }
    }
  }
}

TEST(Gemm, WideProductsGiveTheBitsOfTheirRowSlices) {
  VERL_SKIP_BELOW_AVX2();
  // A product whose C outgrows the caches (an LM head's logits) runs its NC blocks outside its KC
  // blocks; a slice of its rows (small C) runs them inside. Each element must be the same chain
  // of multiply-adds either way, so the slices give the same bits, with and without a pool.
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  ThreadPool pool(2);
  const Index m = 300, n = 1100, slice = 50;
  for (const Index k : {513, 600}) {
    for (const bool b_transposed : {false, true}) {
      std::vector<float> a(static_cast<std::size_t>(m * k)), b(static_cast<std::size_t>(k * n));
      for (auto& x : a) x = uniform(rng);
      for (auto& x : b) x = uniform(rng);
      const cpu::Operand<float> b_op = b_transposed ? cpu::transpose_of(b.data(), k) : cpu::rows_of(b.data(), n);
      for (ThreadPool* threads : {static_cast<ThreadPool*>(nullptr), &pool}) {
        std::vector<float> whole(static_cast<std::size_t>(m * n), 0.5f), sliced(whole);
        cpu::gemm<float>(threads, m, n, k, cpu::rows_of(a.data(), k), b_op, whole.data(), n, true);
        for (Index r0 = 0; r0 < m; r0 += slice) {
          cpu::gemm<float>(threads, slice, n, k, cpu::rows_of(a.data() + r0 * k, k), b_op, sliced.data() + r0 * n, n, true);
        }
        for (std::size_t i = 0; i < whole.size(); ++i) {
          ASSERT_EQ(whole[i], sliced[i]) << "k " << k << " b_transposed " << b_transposed << " pool "
                                         << (threads != nullptr) << " at " << i;
        }
      }
    }
  }
}

TEST(Gemm, FewRowsGiveTheBitsOfTheSameRowsInALargerProduct) {
  VERL_SKIP_BELOW_AVX2();
  // Products of fewer than 8 rows (a decode step's attention) skip the blocked path; each element
  // must still be the same chain of multiply-adds, so a row's result never depends on how many
  // other rows the product had (KV-cache decoding = a full forward pass, bit for bit).
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (const Index m : {1, 3, 7}) {
    for (const Index n : {1, 5, 16, 17, 40}) {
      for (const Index k : {1, 16, 256, 300, 600}) {
        for (const bool b_transposed : {false, true}) {
          for (const bool accumulate : {false, true}) {
            const Index big = 21, lda = k + 2, ldb = b_transposed ? k + 3 : n + 3, ldc = n + 1;
            std::vector<float> a(static_cast<std::size_t>(big * lda)), b(static_cast<std::size_t>((b_transposed ? n : k) * ldb));
            for (auto& x : a) x = uniform(rng);
            for (auto& x : b) x = uniform(rng);
            std::vector<float> c_big(static_cast<std::size_t>(big * ldc));
            for (auto& x : c_big) x = uniform(rng);
            const cpu::Operand<float> b_op = b_transposed ? cpu::transpose_of(b.data(), ldb) : cpu::rows_of(b.data(), ldb);
            // The last m rows alone, then all rows (blocked); compare the same rows.
            std::vector<float> c_few(c_big.begin() + (big - m) * ldc, c_big.end());
            cpu::gemm<float>(m, n, k, cpu::rows_of(a.data() + (big - m) * lda, lda), b_op, c_few.data(), ldc, accumulate);
            cpu::gemm<float>(big, n, k, cpu::rows_of(a.data(), lda), b_op, c_big.data(), ldc, accumulate);
            for (Index i = 0; i < m; ++i) {
              for (Index j = 0; j < ldc; ++j) {
                ASSERT_EQ(c_few[static_cast<std::size_t>(i * ldc + j)], c_big[static_cast<std::size_t>((big - m + i) * ldc + j)])
                    << "m " << m << " n " << n << " k " << k << " b_transposed " << b_transposed << " accumulate "
                    << accumulate << " at (" << i << ", " << j << ")";
              }
            }
          }
        }
      }
    }
  }
}

/// Products with W (n x k, row-major, used as B = W^T as the linear layers do) packed at
/// `precision` (without AMX tiles) must equal, bit for bit, the plain float32 product with A and W
/// rounded to that precision, for every row count, width, depth, thread count and accumulation.
void expect_prepacked_products_match(verl::cpu::DecodePrecision precision, unsigned seed,
                                     std::initializer_list<Index> row_counts, std::initializer_list<Index> widths) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  ThreadPool pool(2);
  for (const Index m : row_counts) {
    for (const Index n : widths) {
      for (const Index k : {1, 255, 256, 257, 600}) {
        for (ThreadPool* threads : {static_cast<ThreadPool*>(nullptr), &pool}) {
          for (const bool accumulate : {false, true}) {
            const Index lda = k + 2, ldc = n + 3;
            std::vector<float> a(static_cast<std::size_t>(m * lda)), w(static_cast<std::size_t>(n * k));
            std::vector<float> expected(static_cast<std::size_t>(m * ldc));
            for (auto& x : a) x = uniform(rng);
            for (auto& x : w) x = uniform(rng);
            for (auto& x : expected) x = uniform(rng);
            std::vector<float> actual = expected, rounded = w, rounded_a = a;
            if (precision == verl::cpu::DecodePrecision::bfloat16) {
              for (auto& x : rounded) x = bf16_bits_to_float(float_to_bf16_bits(x));
              for (auto& x : rounded_a) x = bf16_bits_to_float(float_to_bf16_bits(x));
            }
            const PackedMatrix packed =
                PackedMatrix::pack(cpu::transpose_of(w.data(), k), k, n, precision, /*allow_tiles=*/false);
            ASSERT_EQ(packed.precision(), precision);
            ASSERT_EQ(packed.panels().tile_depth, 0);
            cpu::gemm<float>(threads, m, n, k, cpu::rows_of(rounded_a.data(), lda), cpu::transpose_of(rounded.data(), k),
                        expected.data(), ldc, accumulate);
            cpu::gemm(threads, m, n, k, cpu::rows_of(a.data(), lda), cpu::transpose_of(w.data(), k), packed, actual.data(), ldc,
                 accumulate);
            for (std::size_t i = 0; i < actual.size(); ++i) {
              ASSERT_EQ(actual[i], expected[i]) << "m " << m << " n " << n << " k " << k << " threads "
                                                << (threads != nullptr) << " accumulate " << accumulate << " at " << i;
            }
          }
        }
      }
    }
  }
}

TEST(Gemm, PrepackedWeightsGiveTheBitsOfTheUnpackedProduct) {
  // Decoding multiplies a few rows by weights packed once (PackedMatrix); products of up to 8 rows
  // read three panels at a time, larger ones go through the blocked loops (16-row tiles for 32 and
  // 45 rows, 8-row ones for 20; with a pool, 192 columns or more split over the threads). Every element must be
  // the chain of multiply-adds of the plain product, so that a KV-cache rollout's log-probs are
  // those of a full forward pass.
  expect_prepacked_products_match(verl::cpu::DecodePrecision::float32, 11, {1, 2, 5, 8, 9, 20, 32, 45},
                                  {1, 15, 16, 17, 40, 48, 49, 192, 300, 1000});
}

TEST(Gemm, Bfloat16PrepackedWeightsGiveTheBitsOfTheRoundedOperands) {
  VERL_SKIP_BELOW_AVX2();
  // A bfloat16 rollout packs its weights rounded to nearest-even bfloat16 (stored in 16 bits on
  // AVX-512, through the three-stream kernel for every row count) and rounds the rows it
  // multiplies them with.
  expect_prepacked_products_match(verl::cpu::DecodePrecision::bfloat16, 12, {1, 3, 8, 9, 21},
                                  {1, 16, 17, 49, 300, 1000});
}

TEST(Gemm, Bfloat16TilesSumTheRoundedProductsInFloat32) {
#if VERL_HAS_AMX_DISPATCH
  if (!verl::cpu::gemm_detail::amx_bf16_usable()) GTEST_SKIP() << "this CPU (or kernel) has no AMX bfloat16 tiles";
#else
  GTEST_SKIP() << "AMX tiles are not built for this platform";
#endif
  // With AMX the tiles sum the products of the rounded operands in their own order: each element
  // must be within float32 summation error of the exact sum (double), for row counts around a
  // tile's 16 rows, widths around its 16 columns and depths around its 32.
  std::mt19937 rng(13);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  ThreadPool pool(2);
  const auto round = [](float x) { return bf16_bits_to_float(float_to_bf16_bits(x)); };
  for (const Index m : {1, 3, 8, 16, 17, 40}) {
    for (const Index n : {1, 16, 17, 97, 300}) {
      for (const Index k : {1, 31, 32, 33, 600}) {
        for (ThreadPool* threads : {static_cast<ThreadPool*>(nullptr), &pool}) {
          for (const bool accumulate : {false, true}) {
            const Index lda = k + 1, ldc = n + 2;
            std::vector<float> a(static_cast<std::size_t>(m * lda)), w(static_cast<std::size_t>(n * k));
            std::vector<float> c(static_cast<std::size_t>(m * ldc));
            for (auto& x : a) x = uniform(rng);
            for (auto& x : w) x = uniform(rng);
            for (auto& x : c) x = uniform(rng);
            const std::vector<float> before = c;
            const PackedMatrix packed =
                PackedMatrix::pack(cpu::transpose_of(w.data(), k), k, n, verl::cpu::DecodePrecision::bfloat16);
            ASSERT_EQ(packed.panels().tile_depth, (k + 31) / 32 * 32);
            cpu::gemm(threads, m, n, k, cpu::rows_of(a.data(), lda), cpu::transpose_of(w.data(), k), packed, c.data(), ldc, accumulate);
            for (Index i = 0; i < m; ++i) {
              for (Index j = 0; j < ldc; ++j) {
                const auto at = static_cast<std::size_t>(i * ldc + j);
                if (j >= n) {
                  ASSERT_EQ(c[at], before[at]) << "wrote past column " << n;
                  continue;
                }
                double exact = accumulate ? before[at] : 0.0, magnitude = std::abs(exact);
                for (Index p = 0; p < k; ++p) {
                  const double term = static_cast<double>(round(a[static_cast<std::size_t>(i * lda + p)])) *
                                      round(w[static_cast<std::size_t>(j * k + p)]);
                  exact += term;
                  magnitude += std::abs(term);
                }
                const double bound = static_cast<double>(k + 2) * std::ldexp(1.0, -23) * magnitude;
                ASSERT_NEAR(c[at], exact, bound) << "m " << m << " n " << n << " k " << k << " at (" << i << ", "
                                                 << j << ") accumulate " << accumulate;
              }
            }
          }
        }
      }
    }
  }
}

TEST(Gemm, Bfloat16PackingRoundsToNearestEvenAndKeepsSpecialValues) {
  VERL_SKIP_BELOW_AVX2();
  // Values on and around rounding ties, and infinities and NaN.
  const std::vector<float> w = {1.0f,
                                std::bit_cast<float>(0x3f808000u),  // tie, rounds down to even
                                std::bit_cast<float>(0x3f818000u),  // tie, rounds up to even
                                std::bit_cast<float>(0x3f808001u),  // above the tie
                                -2.5f,
                                std::numeric_limits<float>::infinity(),
                                -std::numeric_limits<float>::infinity(),
                                std::numeric_limits<float>::quiet_NaN()};
  // Each value alone (a 1 x 1 weight: with others, 0 x infinity would make every product NaN).
  for (std::size_t i = 0; i < w.size(); ++i) {
    const PackedMatrix packed = PackedMatrix::pack(cpu::transpose_of(&w[i], 1), 1, 1, verl::cpu::DecodePrecision::bfloat16);
    const float one = 1.0f;
    float c = 0.0f;
    cpu::gemm(nullptr, 1, 1, 1, cpu::rows_of(&one, 1), cpu::transpose_of(&w[i], 1), packed, &c, 1, false);
    const float expected = bf16_bits_to_float(float_to_bf16_bits(w[i]));
    if (std::isnan(expected)) {
      EXPECT_TRUE(std::isnan(c)) << i;
    } else {
      EXPECT_EQ(c, expected) << i;
    }
  }
  EXPECT_EQ(bf16_bits_to_float(float_to_bf16_bits(w[1])), 1.0f);
  EXPECT_EQ(float_to_bf16_bits(w[2]), 0x3f82u);
  EXPECT_EQ(float_to_bf16_bits(w[3]), 0x3f81u);
}

TEST(Gemm, Bfloat16ProductsRoundTheRowsTheyMultiplyAsTheScalarRoundingDoes) {
  VERL_SKIP_BELOW_AVX2();
  // The rows of A are rounded 16 at a time where the CPU allows, the rest one by one: a value
  // on a tie, around it, infinite or NaN must round the same at every position of a row. A is
  // zero but for one value, and W is all ones, so the product is that value rounded.
  const std::vector<float> values = {std::bit_cast<float>(0x3f808000u), std::bit_cast<float>(0x3f818000u),
                                     std::bit_cast<float>(0x3f808001u), std::bit_cast<float>(0xbf7fffffu),
                                     std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                                     std::numeric_limits<float>::quiet_NaN(), std::bit_cast<float>(0x7f800001u)};
  constexpr Index k = 40;
  const std::vector<float> ones(k, 1.0f);
  const PackedMatrix packed = PackedMatrix::pack(cpu::transpose_of(ones.data(), k), k, 1, verl::cpu::DecodePrecision::bfloat16,
                                                 /*allow_tiles=*/false);
  for (const float value : values) {
    const float expected = bf16_bits_to_float(float_to_bf16_bits(value));
    for (const Index at : {0, 5, 15, 16, 31, 32, 39}) {
      std::vector<float> a(k, 0.0f);
      a[static_cast<std::size_t>(at)] = value;
      // Contiguous (the vector path) and as a column of a transposed operand (one at a time).
      std::vector<float> column(static_cast<std::size_t>(k * 3), 0.0f);
      for (Index j = 0; j < k; ++j) column[static_cast<std::size_t>(j * 3)] = a[static_cast<std::size_t>(j)];
      for (const auto operand : {cpu::rows_of(a.data(), k), cpu::Operand<float>{column.data(), 1, 3}}) {
        float c = 0.0f;
        cpu::gemm(nullptr, 1, 1, k, operand, cpu::transpose_of(ones.data(), k), packed, &c, 1, false);
        if (std::isnan(expected)) {
          EXPECT_TRUE(std::isnan(c)) << std::bit_cast<std::uint32_t>(value) << " at " << at;
        } else {
          EXPECT_EQ(c, expected) << std::bit_cast<std::uint32_t>(value) << " at " << at;
        }
      }
    }
  }
}

TEST(Gemm, DoubleUsesEigenWithTheSameLayouts) {
  const std::vector<double> a = {1, 2, 3, 4, 5, 6};  // 2 x 3 row-major
  const std::vector<double> b = {1, 0, 0, 1, 1, 1};  // 3 x 2 row-major
  std::vector<double> c(4, 0.0);
  cpu::gemm<double>(2, 2, 3, cpu::rows_of(a.data(), 3), cpu::rows_of(b.data(), 2), c.data(), 2, false);
  EXPECT_EQ(c, (std::vector<double>{4, 5, 10, 11}));
  // A^T (3 x 2, the column view of `a`) times the first two rows of B.
  std::vector<double> d(6, 0.0);
  cpu::gemm<double>(3, 2, 2, cpu::transpose_of(a.data(), 3), cpu::rows_of(b.data(), 2), d.data(), 2, false);
  EXPECT_EQ(d, (std::vector<double>{1, 4, 2, 5, 3, 6}));
}

}  // namespace
