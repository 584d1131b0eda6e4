// Log-prob / entropy kernels on the GPU, llm.c style: validate sampled rows against the CPU
// reference, then time forward and backward with cudaEvents next to a device-to-device copy of
// the same logits in the same run. Reported: achieved bandwidth (forward reads N*V elements,
// backward reads and writes N*V) as a fraction of the copy's (which reads and writes N*V).
// Targets on an H100 (issue 4): forward >= 0.90, backward >= 0.85 at 8192 x 151936 bf16.
//
//   cuda_bench_logprob_entropy [--rows N] [--vocab V] [--iters K] [--dtype bf16|fp32|both]
//                              [--temperature T] [--sampling-rows R]
// Without --rows it runs 8192 and 4096 rows; then the rollout sampler (sampling.cuh) on R rows
// (512 by default, 0 skips it) of fp32 logits, one decode step per configuration. One JSON line per case on stdout (prefix "JSON ").
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "verl/kernels/detail/cuda_check.cuh"
#include "verl/kernels/logprob_entropy.cuh"
#include "verl/kernels/sampling.cuh"

namespace {

using verl::kernels::LogitsShape;

/// Logits in [-8, 8) from a hash of the element index (no host upload of gigabytes).
template <class Scalar>
__global__ void fill_logits(Scalar* out, std::int64_t count, std::uint64_t seed) {
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < count;
       i += std::int64_t{gridDim.x} * blockDim.x) {
    std::uint64_t h = (seed ^ static_cast<std::uint64_t>(i)) * 0x9E3779B97F4A7C15ull;  // a splitmix64 finalizer
    h = (h ^ (h >> 30)) * 0xBF58476D1CE4E5B9ull;
    h = (h ^ (h >> 27)) * 0x94D049BB133111EBull;
    h ^= h >> 31;
    const float v = static_cast<float>(h >> 40) * 0x1.0p-24f * 16.0f - 8.0f;
    out[i] = verl::kernels::detail::float_to<Scalar>(v);
  }
}

using verl::kernels::DeviceBuffer;

template <class F>
float time_ms(F&& f, int iters) {
  cudaEvent_t start, stop;
  VERL_CUDA_CHECK(cudaEventCreate(&start));
  VERL_CUDA_CHECK(cudaEventCreate(&stop));
  f();  // warm-up
  VERL_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> times;
  for (int i = 0; i < iters; ++i) {
    VERL_CUDA_CHECK(cudaEventRecord(start));
    f();
    VERL_CUDA_CHECK(cudaEventRecord(stop));
    VERL_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    VERL_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    times.push_back(ms);
  }
  VERL_CUDA_CHECK(cudaEventDestroy(start));
  VERL_CUDA_CHECK(cudaEventDestroy(stop));
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];  // median
}

template <class Host>
using DeviceOf = std::conditional_t<std::is_same_v<Host, float>, float, __nv_bfloat16>;

/// Compares three rows (first, middle, last) of the GPU results with the CPU reference, with the
/// tolerances of tests/cuda/test_logprob_entropy.cu; true when all are within them.
template <class Host>
bool validate(const DeviceOf<Host>* d_logits, const DeviceOf<Host>* d_grad, std::int64_t rows, std::int64_t vocab,
              const std::vector<std::int64_t>& labels, const std::vector<float>& g_lp, const std::vector<float>& g_h,
              const float* d_lp, const float* d_h, float temperature) {
  const std::vector<std::int64_t> check_rows = {0, rows / 2, rows - 1};
  verl::RowMatrix<Host> x(static_cast<Eigen::Index>(check_rows.size()), vocab);
  verl::RowMatrix<Host> grad(x.rows(), vocab);
  std::vector<std::int64_t> sub_labels;
  std::vector<float> sub_lp, sub_h, sub_glp, sub_gh;
  for (std::size_t k = 0; k < check_rows.size(); ++k) {
    const std::int64_t r = check_rows[k];
    VERL_CUDA_CHECK(cudaMemcpy(x.row(static_cast<Eigen::Index>(k)).data(), d_logits + r * vocab, vocab * sizeof(Host),
                               cudaMemcpyDeviceToHost));
    VERL_CUDA_CHECK(cudaMemcpy(grad.row(static_cast<Eigen::Index>(k)).data(), d_grad + r * vocab, vocab * sizeof(Host),
                               cudaMemcpyDeviceToHost));
    float lp = 0, h = 0;
    VERL_CUDA_CHECK(cudaMemcpy(&lp, d_lp + r, sizeof(float), cudaMemcpyDeviceToHost));
    VERL_CUDA_CHECK(cudaMemcpy(&h, d_h + r, sizeof(float), cudaMemcpyDeviceToHost));
    sub_labels.push_back(labels[static_cast<std::size_t>(r)]);
    sub_lp.push_back(lp);
    sub_h.push_back(h);
    sub_glp.push_back(g_lp[static_cast<std::size_t>(r)]);
    sub_gh.push_back(g_h[static_cast<std::size_t>(r)]);
  }
  const auto ref = verl::kernels::logprob_entropy_reference(x, sub_labels, temperature);
  const verl::algo::LogprobEntropyCotangents cot{sub_glp, sub_gh, {}};
  const auto ref_grad = verl::kernels::logprob_entropy_backward_reference(x, sub_labels, ref, cot, temperature);
  bool ok = true;
  const float bf16_slack = std::is_same_v<Host, float> ? 0.0f : 0x1.0p-7f;
  for (std::size_t k = 0; k < check_rows.size(); ++k) {
    const auto i = static_cast<Eigen::Index>(k);
    ok &= std::abs(sub_lp[k] - ref.log_probs[i]) <= 2e-5f + 2e-5f * std::abs(ref.log_probs[i]);
    ok &= std::abs(sub_h[k] - ref.entropy[i]) <= 2e-5f + 2e-5f * std::abs(ref.entropy[i]);
    float scale = 0;
    for (Eigen::Index j = 0; j < vocab; ++j) scale = std::max(scale, std::abs(static_cast<float>(ref_grad(i, j))));
    for (Eigen::Index j = 0; j < vocab; ++j) {
      const float a = static_cast<float>(grad(i, j)), e = static_cast<float>(ref_grad(i, j));
      ok &= std::abs(a - e) <= 1e-5f * scale + (1e-4f + bf16_slack) * std::abs(e);
    }
  }
  return ok;
}

template <class Host>
void run_case(std::int64_t rows, std::int64_t vocab, int iters, float temperature) {
  using Device = DeviceOf<Host>;
  const std::size_t count = static_cast<std::size_t>(rows * vocab);
  const double bytes = static_cast<double>(count) * sizeof(Device);
  DeviceBuffer<Device> logits(count), grad(count), copy(count);
  fill_logits<<<4096, 256>>>(logits.data(), static_cast<std::int64_t>(count), 42);
  VERL_CUDA_CHECK_LAUNCH();
  std::mt19937 rng(1);
  std::uniform_int_distribution<std::int64_t> pick(0, vocab - 1);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  std::vector<std::int64_t> labels(static_cast<std::size_t>(rows));
  std::vector<float> g_lp(labels.size()), g_h(labels.size());
  for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = pick(rng), g_lp[i] = unit(rng), g_h[i] = unit(rng);
  DeviceBuffer<std::int64_t> d_labels(labels.size());
  DeviceBuffer<float> lp(labels.size()), h(labels.size()), mx(labels.size()), ln(labels.size()), dlp(labels.size()),
      dh(labels.size());
  VERL_CUDA_CHECK(cudaMemcpy(d_labels.data(), labels.data(), labels.size() * sizeof(std::int64_t), cudaMemcpyHostToDevice));
  VERL_CUDA_CHECK(cudaMemcpy(dlp.data(), g_lp.data(), g_lp.size() * sizeof(float), cudaMemcpyHostToDevice));
  VERL_CUDA_CHECK(cudaMemcpy(dh.data(), g_h.data(), g_h.size() * sizeof(float), cudaMemcpyHostToDevice));
  const LogitsShape shape{rows, vocab, vocab};
  auto forward = [&] {
    verl::kernels::logprob_entropy_forward(logits.data(), shape, d_labels.data(), temperature,
                                           {lp.data(), h.data(), nullptr, mx.data(), ln.data()});
  };
  auto backward = [&] {
    verl::kernels::logprob_entropy_backward(logits.data(), shape, d_labels.data(), temperature,
                                            {mx.data(), ln.data(), h.data(), nullptr}, {dlp.data(), dh.data(), nullptr},
                                            grad.data(), vocab);
  };
  forward();
  backward();
  VERL_CUDA_CHECK(cudaDeviceSynchronize());
  const bool valid = validate<Host>(logits.data(), grad.data(), rows, vocab, labels, g_lp, g_h, lp.data(), h.data(), temperature);

  const float copy_ms =
      time_ms([&] { VERL_CUDA_CHECK(cudaMemcpyAsync(copy.data(), logits.data(), count * sizeof(Device), cudaMemcpyDeviceToDevice)); },
              iters);
  const float forward_ms = time_ms(forward, iters);
  const float backward_ms = time_ms(backward, iters);
  const double copy_gbps = 2.0 * bytes / (copy_ms * 1e6);
  const double forward_gbps = bytes / (forward_ms * 1e6);
  const double backward_gbps = 2.0 * bytes / (backward_ms * 1e6);
  const char* dtype = std::is_same_v<Host, float> ? "fp32" : "bf16";
  std::printf("%s %lld x %lld T=%.2f: valid=%s  copy %.3f ms (%.0f GB/s)  forward %.3f ms (%.0f GB/s, %.2f of copy)  "
              "backward %.3f ms (%.0f GB/s, %.2f of copy)\n",
              dtype, static_cast<long long>(rows), static_cast<long long>(vocab), temperature, valid ? "yes" : "NO",
              copy_ms, copy_gbps, forward_ms, forward_gbps, forward_gbps / copy_gbps, backward_ms, backward_gbps,
              backward_gbps / copy_gbps);
  std::printf("JSON {\"bench\":\"cuda_logprob_entropy\",\"dtype\":\"%s\",\"rows\":%lld,\"vocab\":%lld,\"temperature\":%g,"
              "\"valid\":%s,\"copy_ms\":%.4f,\"copy_gbps\":%.1f,\"forward_ms\":%.4f,\"forward_gbps\":%.1f,"
              "\"forward_fraction_of_copy\":%.3f,\"backward_ms\":%.4f,\"backward_gbps\":%.1f,"
              "\"backward_fraction_of_copy\":%.3f}\n",
              dtype, static_cast<long long>(rows), static_cast<long long>(vocab), temperature, valid ? "true" : "false",
              copy_ms, copy_gbps, forward_ms, forward_gbps, forward_gbps / copy_gbps, backward_ms, backward_gbps,
              backward_gbps / copy_gbps);
  std::fflush(stdout);
}

/// The rollout sampler on `rows` x `vocab` fp32 logits for a few configurations: tokens of the
/// first rows checked against the kernel's sequential model, then timed (one decode step).
void run_sampling(std::int64_t rows, std::int64_t vocab, int iters) {
  const std::size_t count = static_cast<std::size_t>(rows * vocab);
  DeviceBuffer<float> logits(count);
  fill_logits<<<4096, 256>>>(logits.data(), static_cast<std::int64_t>(count), 7);
  VERL_CUDA_CHECK_LAUNCH();
  std::vector<std::uint64_t> seeds(static_cast<std::size_t>(rows)), streams(seeds.size(), 0);
  for (std::size_t i = 0; i < seeds.size(); ++i) seeds[i] = verl::algo::derive_seed(5, i);
  DeviceBuffer<std::uint64_t> d_seeds(seeds.size()), d_streams(seeds.size());
  VERL_CUDA_CHECK(cudaMemcpy(d_seeds.data(), seeds.data(), seeds.size() * 8, cudaMemcpyHostToDevice));
  VERL_CUDA_CHECK(cudaMemcpy(d_streams.data(), streams.data(), streams.size() * 8, cudaMemcpyHostToDevice));
  DeviceBuffer<std::int64_t> tokens(seeds.size());
  DeviceBuffer<float> log_probs(seeds.size());
  const verl::kernels::SamplingConfig configs[] = {{0.0f, -1, 1.0f}, {1.0f, -1, 1.0f}, {0.7f, 50, 1.0f}, {1.0f, -1, 0.9f},
                                                   {0.7f, 50, 0.95f}};
  for (const auto& config : configs) {
    auto sample = [&] {
      verl::kernels::sample_tokens(logits.data(), LogitsShape{rows, vocab, vocab}, config, d_seeds.data(), d_streams.data(), 3,
                                   tokens.data(), log_probs.data());
    };
    sample();
    VERL_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<std::int64_t> got(seeds.size());
    VERL_CUDA_CHECK(cudaMemcpy(got.data(), tokens.data(), got.size() * 8, cudaMemcpyDeviceToHost));
    int matches = 0;
    const int checked = static_cast<int>(std::min<std::int64_t>(rows, 4));
    std::vector<float> row(static_cast<std::size_t>(vocab));
    for (int r = 0; r < checked; ++r) {
      VERL_CUDA_CHECK(cudaMemcpy(row.data(), logits.data() + r * vocab, vocab * sizeof(float), cudaMemcpyDeviceToHost));
      const double u = verl::kernels::detail::counter_uniform(seeds[static_cast<std::size_t>(r)], 0, 3);
      matches += verl::kernels::sample_token_model(row, config, u).token == got[static_cast<std::size_t>(r)];
    }
    const float ms = time_ms(sample, iters);
    std::printf("sampling %lld x %lld T=%.1f top_k=%lld top_p=%.2f: %d/%d rows match the model, %.3f ms\n",
                static_cast<long long>(rows), static_cast<long long>(vocab), config.temperature,
                static_cast<long long>(config.top_k), config.top_p, matches, checked, ms);
    std::printf("JSON {\"bench\":\"cuda_sampling\",\"rows\":%lld,\"vocab\":%lld,\"temperature\":%g,\"top_k\":%lld,"
                "\"top_p\":%g,\"valid\":%s,\"ms\":%.4f}\n",
                static_cast<long long>(rows), static_cast<long long>(vocab), config.temperature,
                static_cast<long long>(config.top_k), config.top_p, matches == checked ? "true" : "false", ms);
    std::fflush(stdout);
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::int64_t> row_counts = {8192, 4096};
  std::int64_t vocab = 151936;
  int iters = 20;
  std::string dtype = "both";
  float temperature = 1.0f;
  std::int64_t sampling_rows = 512;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--rows") row_counts = {std::stoll(argv[i + 1])};
    else if (flag == "--vocab") vocab = std::stoll(argv[i + 1]);
    else if (flag == "--iters") iters = std::stoi(argv[i + 1]);
    else if (flag == "--dtype") dtype = argv[i + 1];
    else if (flag == "--temperature") temperature = std::stof(argv[i + 1]);
    else if (flag == "--sampling-rows") sampling_rows = std::stoll(argv[i + 1]);  // 0: skip
    else {
      std::fprintf(stderr, "unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("no CUDA device: nothing to benchmark\n");
    return 0;
  }
  cudaDeviceProp prop{};
  VERL_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, %d SMs\n", prop.name, prop.multiProcessorCount);
  for (const std::int64_t rows : row_counts) {
    if (dtype == "bf16" || dtype == "both") run_case<Eigen::bfloat16>(rows, vocab, iters, temperature);
    if (dtype == "fp32" || dtype == "both") run_case<float>(rows, vocab, iters, temperature);
  }
  if (sampling_rows > 0) run_sampling(sampling_rows, vocab, iters);
  return 0;
}
