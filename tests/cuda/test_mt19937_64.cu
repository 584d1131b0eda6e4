// The device Mersenne Twister (kernels/detail/mt19937_64.hpp) against std::mt19937_64, and the
// device partial Fisher-Yates against verl::algo::detail::choose_front: clip_cov's kernel draw is
// exactly the CPU's only if both hold on the device, with its shared-memory engine state.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "cuda_test_support.hpp"
#include "verl/algo/policy_losses/clip_cov.hpp"
#include "verl/kernels/detail/cuda_check.cuh"
#include "verl/kernels/detail/mt19937_64.hpp"

namespace {

using verl::kernels::DeviceBuffer;
namespace kd = verl::kernels::detail;

__global__ void draw_kernel(std::uint64_t seed, int count, std::uint64_t* out) {
  __shared__ std::uint64_t state[kd::Mt19937_64::kStateSize];
  kd::Mt19937_64 engine(state, seed);
  for (int i = 0; i < count; ++i) out[i] = engine();
}

__global__ void choose_front_kernel(std::int64_t* items, std::int64_t size, std::int64_t count, std::uint64_t seed) {
  __shared__ std::uint64_t state[kd::Mt19937_64::kStateSize];
  kd::choose_front(items, size, count, seed, state);
}

TEST(CudaMt19937_64, DrawsTheStandardSequence) {
  VERL_REQUIRE_GPU();
  const int count = 2000;  // several twists of the 312-word state
  for (const std::uint64_t seed : {0ULL, 5489ULL, 12345678901234ULL, ~0ULL}) {
    DeviceBuffer<std::uint64_t> d_out(count);
    draw_kernel<<<1, 1>>>(seed, count, d_out.data());
    VERL_CUDA_EXPECT_OK(cudaGetLastError());
    const std::vector<std::uint64_t> got = d_out.download();
    std::mt19937_64 reference(seed);
    for (int i = 0; i < count; ++i) ASSERT_EQ(got[static_cast<std::size_t>(i)], reference()) << "seed " << seed << " draw " << i;
  }
}

TEST(CudaMt19937_64, ChoosesTheCpuFront) {
  VERL_REQUIRE_GPU();
  for (const std::int64_t size : {1, 2, 17, 5000})
    for (const std::int64_t count : {std::int64_t{1}, size / 3, size}) {
      std::vector<std::int64_t> items(static_cast<std::size_t>(size));
      for (std::int64_t i = 0; i < size; ++i) items[static_cast<std::size_t>(i)] = 7 * i;
      DeviceBuffer<std::int64_t> d_items(items.data(), items.size());
      choose_front_kernel<<<1, 1>>>(d_items.data(), size, count, 42);
      VERL_CUDA_EXPECT_OK(cudaGetLastError());
      verl::algo::detail::choose_front(items, static_cast<std::size_t>(count), 42);
      EXPECT_EQ(d_items.download(), items) << "size " << size << " count " << count;
    }
}

}  // namespace
