// CUDA rollout sampler vs its CPU references: the kernel's algorithm run sequentially
// (kernels::sample_token_model) and the rollout sampler (algo::sample_token), with the same
// u = counter_uniform(seed, stream, step). The model computes the kernel's masses bit for bit
// (portable_exp, integer sums), so its token must be the kernel's, exactly, and its log-prob
// within 1e-6 (only log() of a double may differ by an ulp). The rollout sampler sums its masses
// in float lanes (~1e-5 relative at V = 152k); the token is the inverse CDF over the kept tokens
// in index order, nondecreasing in u, so the check there is that the GPU token is what the
// rollout sampler returns for some u' within 1e-4 of u, with log-probs within 1e-4.
// Determinism: the same call twice and a row sampled alone give the same tokens as in the batch.
#include <cuda_bf16.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cuda_test_support.hpp"
#include "verl/kernels/detail/cuda_check.cuh"
#include "verl/kernels/sampling.cuh"

namespace {

using verl::kernels::LogitsShape;
using verl::kernels::SamplingConfig;

using verl::kernels::DeviceBuffer;

struct Batch {
  std::int64_t rows, vocab, stride;
  std::vector<float> logits;  ///< rows x stride, as float (the reference's input)
};

/// Gaussian logits, or small integers (exact ties everywhere); bf16 batches are rounded to bf16
/// first so that both sides see the same values.
Batch make_batch(std::int64_t rows, std::int64_t vocab, std::int64_t stride, std::uint32_t seed, bool ties, bool bf16) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::uniform_int_distribution<int> small(-4, 4);
  Batch b{rows, vocab, stride, std::vector<float>(static_cast<std::size_t>(rows * stride))};
  for (auto& v : b.logits) {
    v = ties ? static_cast<float>(small(rng)) : normal(rng);
    if (bf16) v = __bfloat162float(__float2bfloat16_rn(v));
  }
  return b;
}

struct Result {
  std::vector<std::int64_t> tokens;
  std::vector<float> log_probs;
};

Result run_gpu(const Batch& b, const SamplingConfig& config, const std::vector<std::uint64_t>& seeds,
               const std::vector<std::uint64_t>& streams, std::uint64_t step, bool bf16) {
  const auto n = static_cast<std::size_t>(b.rows);
  DeviceBuffer<std::uint64_t> d_seeds(n), d_streams(n);
  d_seeds.upload(seeds.data());
  d_streams.upload(streams.data());
  DeviceBuffer<std::int64_t> d_tokens(n);
  DeviceBuffer<float> d_lp(n);
  if (bf16) {
    std::vector<__nv_bfloat16> host(b.logits.size());
    for (std::size_t i = 0; i < host.size(); ++i) host[i] = __float2bfloat16_rn(b.logits[i]);
    DeviceBuffer<__nv_bfloat16> d_logits(host.size());
    d_logits.upload(host.data());
    verl::kernels::sample_tokens(d_logits.data(), LogitsShape{b.rows, b.vocab, b.stride}, config, d_seeds.data(),
                                 d_streams.data(), step, d_tokens.data(), d_lp.data());
    VERL_CUDA_CHECK(cudaDeviceSynchronize());
  } else {
    DeviceBuffer<float> d_logits(b.logits.size());
    d_logits.upload(b.logits.data());
    verl::kernels::sample_tokens(d_logits.data(), LogitsShape{b.rows, b.vocab, b.stride}, config, d_seeds.data(),
                                 d_streams.data(), step, d_tokens.data(), d_lp.data());
    VERL_CUDA_CHECK(cudaDeviceSynchronize());
  }
  return {d_tokens.download(), d_lp.download()};
}

/// True when `token` is what `sampler(u')` returns for some u' within `delta` of u (the token
/// is nondecreasing in u, so bracketing suffices).
template <class Sampler>
bool within_draw_rounding(std::int64_t token, double u, double delta, Sampler&& sampler) {
  const double lo = std::max(0.0, u - delta), hi = std::min(std::nextafter(1.0, 0.0), u + delta);
  return sampler(lo) <= token && token <= sampler(hi);
}

std::string describe(const SamplingConfig& c) {
  return " (T=" + std::to_string(c.temperature) + " top_k=" + std::to_string(c.top_k) + " top_p=" +
         std::to_string(c.top_p) + ")";
}

/// Samples every row on the GPU and compares with both references; returns the GPU result.
Result check_batch(const Batch& b, const SamplingConfig& config, std::uint64_t step, bool bf16) {
  std::vector<std::uint64_t> seeds(static_cast<std::size_t>(b.rows)), streams(seeds.size());
  for (std::size_t i = 0; i < seeds.size(); ++i) {
    seeds[i] = verl::algo::derive_seed(99, i / 2);
    streams[i] = i % 2;
  }
  const Result gpu = run_gpu(b, config, seeds, streams, step, bf16);
  verl::algo::SamplingParams params;
  params.temperature = config.temperature;
  params.top_k = config.top_k;
  params.top_p = config.top_p;
  for (std::int64_t r = 0; r < b.rows; ++r) {
    const auto k = static_cast<std::size_t>(r);
    const std::span<const float> row(b.logits.data() + r * b.stride, static_cast<std::size_t>(b.vocab));
    const double u = verl::algo::counter_uniform(seeds[k], streams[k], step);
    const auto model = verl::kernels::sample_token_model(row, config, u);
    const auto reference = verl::algo::sample_token(row, params, u);
    const std::int64_t token = gpu.tokens[k];
    EXPECT_EQ(token, model.token) << "row " << r << describe(config);
    EXPECT_TRUE(within_draw_rounding(token, u, 1e-4, [&](double v) {
      return verl::algo::sample_token(row, params, v).token;
    })) << "row " << r << ": " << token << " vs rollout " << reference.token << describe(config);
    EXPECT_NEAR(gpu.log_probs[k], model.log_prob, 1e-6f + 1e-7f * std::abs(model.log_prob)) << "row " << r;
    if (token == reference.token) {
      EXPECT_NEAR(gpu.log_probs[k], reference.log_prob, 1e-4f) << "row " << r;
    }
  }
  return gpu;
}

const std::vector<SamplingConfig> configs = {
    {0.0f, -1, 1.0f}, {1.0f, -1, 1.0f}, {0.7f, -1, 1.0f}, {1.0f, 1, 1.0f},  {0.8f, 20, 1.0f},
    {1.0f, -1, 0.9f}, {0.6f, -1, 0.3f}, {1.2f, 50, 0.95f}, {1.0f, 5, 0.5f}, {1.0f, -1, 1e-6f},
};

TEST(CudaSampling, Fp32MatchesTheReferences) {
  VERL_REQUIRE_GPU();
  for (const bool ties : {false, true}) {
    const Batch b = make_batch(256, 3001, 3001, ties ? 7 : 8, ties, false);
    for (std::size_t c = 0; c < configs.size(); ++c) check_batch(b, configs[c], 17 + c, false);
  }
}

TEST(CudaSampling, Bf16MatchesTheReferences) {
  VERL_REQUIRE_GPU();
  const Batch b = make_batch(128, 2053, 2056, 9, false, true);
  for (std::size_t c = 0; c < configs.size(); ++c) check_batch(b, configs[c], 5 + c, true);
}

TEST(CudaSampling, EdgeShapes) {
  VERL_REQUIRE_GPU();
  for (const auto& config : configs) {
    const Result one = check_batch(make_batch(3, 1, 1, 1, false, false), config, 0, false);  // V = 1
    for (const auto t : one.tokens) EXPECT_EQ(t, 0);
    check_batch(make_batch(4, 7, 9, 2, false, false), config, 1, false);  // V = 7, stride 9
    check_batch(make_batch(2, 7, 7, 3, true, true), config, 2, true);
  }
}

TEST(CudaSampling, QwenVocabulary) {
  VERL_REQUIRE_GPU();
  const Batch b = make_batch(8, 151936, 151936, 4, false, false);
  for (const auto& config : configs) check_batch(b, config, 3, false);
}

TEST(CudaSampling, DeterministicAndIndependentOfTheBatch) {
  VERL_REQUIRE_GPU();
  const Batch b = make_batch(64, 1500, 1500, 12, false, false);
  const SamplingConfig config{0.9f, 40, 0.9f};
  std::vector<std::uint64_t> seeds(64), streams(64);
  for (std::size_t i = 0; i < 64; ++i) seeds[i] = 1000 + i, streams[i] = i % 3;
  const Result first = run_gpu(b, config, seeds, streams, 4, false);
  const Result second = run_gpu(b, config, seeds, streams, 4, false);
  EXPECT_EQ(first.tokens, second.tokens);
  for (std::size_t r : {0u, 17u, 63u}) {
    Batch single{1, b.vocab, b.vocab,
                 std::vector<float>(b.logits.begin() + static_cast<std::ptrdiff_t>(r * 1500),
                                    b.logits.begin() + static_cast<std::ptrdiff_t>((r + 1) * 1500))};
    const Result alone = run_gpu(single, config, {seeds[r]}, {streams[r]}, 4, false);
    EXPECT_EQ(alone.tokens[0], first.tokens[r]) << "row " << r;
  }
  // Another step draws other tokens for at least some rows.
  const Result later = run_gpu(b, config, seeds, streams, 5, false);
  EXPECT_NE(later.tokens, first.tokens);
}

}  // namespace
