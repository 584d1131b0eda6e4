// kernels/functional.cuh vs verl::algo's gather_from_labels, clip_by_value and get_response_mask:
// random and edge inputs (labels outside the vocabulary, NaN bounds, EOS at the first and last
// position, rows without EOS, several EOS ids, rows longer than a warp's 32 tokens).
#include <cuda_bf16.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "cuda_test_support.hpp"
#include "verl/algo/functional.hpp"
#include "verl/kernels/detail/cuda_check.cuh"
#include "verl/kernels/functional.cuh"

namespace {

using verl::Index;
using verl::MatrixF;
using verl::kernels::DeviceBuffer;
namespace k = verl::kernels;

TEST(CudaFunctional, GatherFromLabelsMatchesReference) {
  VERL_REQUIRE_GPU();
  for (const auto& [rows, vocab] : {std::pair<Index, Index>{1, 1}, {37, 11}, {300, 151937}}) {
    std::mt19937 rng(static_cast<std::uint32_t>(rows + vocab));
    std::normal_distribution<float> normal;
    std::uniform_int_distribution<std::int64_t> label(0, vocab - 1);
    MatrixF data(rows, vocab);
    for (Index i = 0; i < data.size(); ++i) data.data()[i] = normal(rng);
    std::vector<std::int64_t> labels(static_cast<std::size_t>(rows));
    for (auto& l : labels) l = label(rng);
    labels.back() = vocab - 1;
    const verl::VectorF expected = verl::algo::gather_from_labels(data, labels);

    DeviceBuffer<float> d_data(data.data(), static_cast<std::size_t>(data.size()));
    DeviceBuffer<std::int64_t> d_labels(labels.data(), labels.size());
    DeviceBuffer<float> d_out(labels.size());
    k::gather_from_labels(d_data.data(), rows, vocab, d_labels.data(), d_out.data());
    const std::vector<float> got = d_out.download();
    for (Index i = 0; i < rows; ++i) ASSERT_EQ(got[static_cast<std::size_t>(i)], expected[i]) << "row " << i;

    // bfloat16 data: the gathered value widened exactly.
    std::vector<__nv_bfloat16> half(static_cast<std::size_t>(data.size()));
    for (std::size_t i = 0; i < half.size(); ++i) half[i] = __float2bfloat16(data.data()[i]);
    DeviceBuffer<__nv_bfloat16> d_half(half.data(), half.size());
    k::gather_from_labels(d_half.data(), rows, vocab, d_labels.data(), d_out.data());
    const std::vector<float> got_half = d_out.download();
    for (Index i = 0; i < rows; ++i)
      ASSERT_EQ(got_half[static_cast<std::size_t>(i)],
                __bfloat162float(half[static_cast<std::size_t>(i * vocab + labels[static_cast<std::size_t>(i)])]))
          << "bf16 row " << i;
  }
}

TEST(CudaFunctional, GatherOfALabelOutsideTheVocabularyIsNaN) {
  VERL_REQUIRE_GPU();
  const std::vector<float> data{1, 2, 3, 4, 5, 6};
  const std::vector<std::int64_t> labels{-1, 3};
  DeviceBuffer<float> d_data(data.data(), data.size());
  DeviceBuffer<std::int64_t> d_labels(labels.data(), labels.size());
  DeviceBuffer<float> d_out(2);
  k::gather_from_labels(d_data.data(), 2, 3, d_labels.data(), d_out.data());
  const std::vector<float> got = d_out.download();
  EXPECT_TRUE(std::isnan(got[0]));
  EXPECT_TRUE(std::isnan(got[1]));
}

TEST(CudaFunctional, ClipByValueMatchesReferenceWithNaN) {
  VERL_REQUIRE_GPU();
  const Index rows = 33, cols = 70;
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  MatrixF x(rows, cols), lower(rows, cols), upper(rows, cols);
  for (Index i = 0; i < x.size(); ++i) {
    x.data()[i] = normal(rng);
    lower.data()[i] = normal(rng) - 1.0f;
    upper.data()[i] = lower.data()[i] + std::abs(normal(rng));
  }
  const float nan = std::numeric_limits<float>::quiet_NaN();
  x(0, 0) = nan;
  lower(0, 1) = nan;
  upper(0, 2) = nan;
  lower(0, 3) = 2.0f;  // lower above upper: torch's max(min(x, hi), lo) gives lo
  upper(0, 3) = 1.0f;
  const auto expected = verl::algo::clip_by_value(x, lower, upper);
  DeviceBuffer<float> d_x(x.data(), static_cast<std::size_t>(x.size())),
      d_lo(lower.data(), static_cast<std::size_t>(x.size())), d_hi(upper.data(), static_cast<std::size_t>(x.size()));
  DeviceBuffer<float> d_out(static_cast<std::size_t>(x.size()));
  k::clip_by_value(d_x.data(), d_lo.data(), d_hi.data(), x.size(), d_out.data());
  const std::vector<float> got = d_out.download();
  for (Index i = 0; i < x.size(); ++i) {
    const float e = expected.data()[i], g = got[static_cast<std::size_t>(i)];
    if (std::isnan(e)) {
      EXPECT_TRUE(std::isnan(g)) << "element " << i;
    } else {
      EXPECT_EQ(g, e) << "element " << i;
    }
  }
}

TEST(CudaFunctional, ResponseMaskMatchesReference) {
  VERL_REQUIRE_GPU();
  for (const auto& [rows, cols] : {std::pair<Index, Index>{1, 1}, {9, 5}, {64, 33}, {200, 1000}}) {
    std::mt19937 rng(static_cast<std::uint32_t>(rows * cols));
    // Few EOS-like ids among many: most rows end somewhere, some never do.
    std::uniform_int_distribution<std::int64_t> token(0, 4 * cols + 3);
    verl::RowMatrix<std::int64_t> ids(rows, cols);
    for (Index i = 0; i < ids.size(); ++i) ids.data()[i] = token(rng);
    if (rows > 2) {
      ids(0, 0) = 2;         // EOS first: only that token kept
      ids(1, cols - 1) = 7;  // EOS last
    }
    for (const std::vector<std::int64_t>& eos : {std::vector<std::int64_t>{2}, std::vector<std::int64_t>{2, 7, 11}}) {
      const auto expected = verl::algo::get_response_mask(ids, std::span<const std::int64_t>(eos));
      DeviceBuffer<std::int64_t> d_ids(ids.data(), static_cast<std::size_t>(ids.size()));
      DeviceBuffer<std::int64_t> d_eos(eos.data(), eos.size());
      DeviceBuffer<std::int64_t> d_mask(static_cast<std::size_t>(ids.size()));
      k::response_mask(d_ids.data(), rows, cols, d_eos.data(), static_cast<int>(eos.size()), d_mask.data());
      const std::vector<std::int64_t> got = d_mask.download();
      for (Index i = 0; i < ids.size(); ++i)
        ASSERT_EQ(got[static_cast<std::size_t>(i)], expected.data()[i])
            << "(" << rows << ", " << cols << ") with " << eos.size() << " EOS ids, element " << i;
      // A float mask for the losses: the same 0/1 values.
      DeviceBuffer<float> d_float_mask(static_cast<std::size_t>(ids.size()));
      k::response_mask(d_ids.data(), rows, cols, d_eos.data(), static_cast<int>(eos.size()), d_float_mask.data());
      const std::vector<float> got_float = d_float_mask.download();
      for (Index i = 0; i < ids.size(); ++i)
        ASSERT_EQ(got_float[static_cast<std::size_t>(i)], static_cast<float>(expected.data()[i])) << "element " << i;
    }
  }
}

TEST(CudaFunctional, BadArgumentsAreNamed) {
  // Host-side checks: no device needed.
  try {
    k::response_mask<std::int64_t>(nullptr, 2, 3, nullptr, 0, nullptr);
    FAIL() << "expected an error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("eos_count: expected at least one EOS id, got 0"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(k::gather_from_labels<float>(nullptr, 2, 0, nullptr, nullptr), std::invalid_argument);
  EXPECT_THROW(k::clip_by_value(nullptr, nullptr, nullptr, -1, nullptr), std::invalid_argument);
}

}  // namespace
