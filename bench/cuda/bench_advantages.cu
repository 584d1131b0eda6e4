// Advantage / loss kernels on the GPU, llm.c style: validate against the CPU reference
// (verl::algo), then time with cudaEvents next to a device-to-device copy of the kernel's inputs
// measured in the same run.
//
//   grpo   outcome_scalars, 1M responses in groups of 8 (contiguous ids, and shuffled ids through
//          the radix sort): reads scores (4 B) + ids (8 B), writes 4 B per response.
//          Target on an H100 (issue 4): <= 30 us for the contiguous layout.
//   gae    gae_advantages on 4096 x 4096 fp32 (rewards, values, mask in; advantages, returns out,
//          whitened): target within 2x of a copy of its inputs (3 x 64 MiB).
//   ppo    policy_loss on 4096 x 4096 (old/new log-probs, per-token advantages, mask in; grad
//          out): vanilla PPO and cispo (token-mean), gspo and geo_mean (a row pass first, so the
//          log-probs and mask are read twice: their ratio to the copy shows what that costs),
//          clip_cov and kl_cov at verl's default ratios (a selection pass first: batch means, then
//          a compaction and draw, or a radix sort of 64-bit keys).
//   otb    optimal_token_baseline_advantages, both forms, 4096 x 4096 in groups of 8 with IS
//          weights: ratio over a copy of its five inputs.
//
//   cuda_bench_advantages [--responses N] [--group G] [--rows B] [--cols T] [--iters K]
// One JSON line per case on stdout (prefix "JSON ").
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "verl/kernels/detail/cuda_check.cuh"
#include "verl/kernels/advantages.cuh"
#include "verl/kernels/optimal_token_baseline.cuh"
#include "verl/kernels/policy_loss.cuh"

namespace {

namespace k = verl::kernels;
using verl::Index;
using verl::MatrixF;

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

/// Time of a D2D copy of `bytes` (the roofline reference of the same run).
float copy_ms(std::size_t bytes, int iters) {
  DeviceBuffer<unsigned char> a(bytes), b(bytes);
  VERL_CUDA_CHECK(cudaMemset(a.data(), 1, bytes));
  return time_ms([&] { VERL_CUDA_CHECK(cudaMemcpyAsync(b.data(), a.data(), bytes, cudaMemcpyDeviceToDevice)); }, iters);
}

/// Largest |actual - expected| - (atol + rtol |expected|) over the elements: <= 0 means valid.
float worst_excess(const std::vector<float>& actual, const float* expected, float atol, float rtol) {
  float worst = -1.0f;
  for (std::size_t i = 0; i < actual.size(); ++i) {
    const float excess = std::abs(actual[i] - expected[i]) - (atol + rtol * std::abs(expected[i]));
    if (!(excess <= worst)) worst = std::isnan(excess) ? INFINITY : excess;
  }
  return worst;
}

void bench_grpo(Index responses, Index group, int iters, bool shuffled) {
  std::mt19937 rng(1);
  std::bernoulli_distribution correct(0.4);
  MatrixF scores(responses, 1);
  for (Index i = 0; i < responses; ++i) scores(i, 0) = correct(rng) ? 1.0f : 0.0f;
  std::vector<std::int64_t> ids(static_cast<std::size_t>(responses));
  for (Index i = 0; i < responses; ++i) ids[static_cast<std::size_t>(i)] = 1000 + i / group;
  if (shuffled) std::shuffle(ids.begin(), ids.end(), rng);
  const k::OutcomeParams params{};
  const MatrixF ones = MatrixF::Ones(responses, 1);
  const auto expected = k::reference_outcome(params, verl::algo::AdvantageBatch{scores, ones, ids});

  DeviceBuffer<float> d_scores(static_cast<std::size_t>(responses)), d_out(static_cast<std::size_t>(responses));
  DeviceBuffer<std::int64_t> d_ids(ids.size());
  d_scores.upload(scores.data());
  d_ids.upload(ids.data());
  const auto layout = shuffled ? k::GroupLayout::any : k::GroupLayout::contiguous;
  std::size_t bytes = 0;
  k::outcome_scalars(nullptr, bytes, params, layout, nullptr, nullptr, nullptr, responses, nullptr);
  DeviceBuffer<unsigned char> temp(bytes);
  const auto run = [&] {
    k::outcome_scalars(temp.data(), bytes, params, layout, d_scores.data(), nullptr, d_ids.data(), responses, d_out.data());
  };
  run();
  VERL_CUDA_CHECK(cudaDeviceSynchronize());
  const bool valid = worst_excess(d_out.download(), expected.advantages.data(), 2e-5f, 2e-5f) <= 0.0f;
  const float ms = time_ms(run, iters);
  const std::size_t moved = static_cast<std::size_t>(responses) * (4 + 8 + 4);
  const float copy = copy_ms(moved / 2, iters);  // a copy reads and writes: same traffic
  std::printf("grpo %lld responses, groups of %lld, %s ids: valid=%s  %.1f us (%.0f GB/s)  copy of the same bytes "
              "%.1f us  -> %.2f of copy\n",
              static_cast<long long>(responses), static_cast<long long>(group), shuffled ? "shuffled" : "contiguous",
              valid ? "yes" : "NO", ms * 1e3, moved / (ms * 1e6), copy * 1e3, copy / ms);
  std::printf("JSON {\"bench\":\"cuda_grpo\",\"responses\":%lld,\"group\":%lld,\"layout\":\"%s\",\"valid\":%s,"
              "\"us\":%.2f,\"copy_us\":%.2f,\"fraction_of_copy\":%.3f}\n",
              static_cast<long long>(responses), static_cast<long long>(group), shuffled ? "any" : "contiguous",
              valid ? "true" : "false", ms * 1e3, copy * 1e3, copy / ms);
}

MatrixF random_matrix(Index rows, Index cols, std::mt19937& rng, float scale) {
  std::normal_distribution<float> normal(0.0f, scale);
  MatrixF m(rows, cols);
  for (Index i = 0; i < m.size(); ++i) m.data()[i] = normal(rng);
  return m;
}

MatrixF prefix_mask(Index rows, Index cols, std::mt19937& rng) {
  std::uniform_int_distribution<Index> length(1, cols);
  MatrixF m = MatrixF::Zero(rows, cols);
  for (Index i = 0; i < rows; ++i) m.row(i).head(length(rng)).setOnes();
  return m;
}

void bench_gae(Index rows, Index cols, int iters) {
  std::mt19937 rng(2);
  const MatrixF rewards = random_matrix(rows, cols, rng, 0.1f), values = random_matrix(rows, cols, rng, 1.0f);
  const MatrixF mask = prefix_mask(rows, cols, rng);
  verl::algo::AdvantageBatch batch{rewards, mask};
  batch.values.emplace(values);
  const auto expected = verl::algo::GAE{.gamma = 0.99, .lam = 0.95}.compute(batch);
  const std::size_t n = static_cast<std::size_t>(rows * cols);
  DeviceBuffer<float> d_r(n), d_v(n), d_m(n), d_adv(n), d_ret(n);
  d_r.upload(rewards.data());
  d_v.upload(values.data());
  d_m.upload(mask.data());
  const auto params = k::GaeParams::from(0.99, 0.95);
  std::size_t bytes = 0;
  k::gae_advantages(nullptr, bytes, params, nullptr, nullptr, nullptr, rows, cols, nullptr, nullptr);
  DeviceBuffer<unsigned char> temp(bytes);
  const auto run = [&] {
    k::gae_advantages(temp.data(), bytes, params, d_r.data(), d_v.data(), d_m.data(), rows, cols, d_adv.data(), d_ret.data());
  };
  run();
  VERL_CUDA_CHECK(cudaDeviceSynchronize());
  const bool valid = worst_excess(d_ret.download(), expected.returns().data(), 1e-4f, 1e-4f) <= 0.0f &&
                     worst_excess(d_adv.download(), expected.advantages.data(), 1e-4f, 1e-4f) <= 0.0f;
  const float ms = time_ms(run, iters);
  const float copy = copy_ms(3 * n * sizeof(float), iters);  // a copy of its inputs
  std::printf("gae %lld x %lld fp32: valid=%s  %.3f ms  copy of inputs %.3f ms  -> %.2fx the copy (target <= 2)\n",
              static_cast<long long>(rows), static_cast<long long>(cols), valid ? "yes" : "NO", ms, copy, ms / copy);
  std::printf("JSON {\"bench\":\"cuda_gae\",\"rows\":%lld,\"cols\":%lld,\"valid\":%s,\"ms\":%.4f,\"copy_inputs_ms\":%.4f,"
              "\"ratio_to_copy\":%.3f}\n",
              static_cast<long long>(rows), static_cast<long long>(cols), valid ? "true" : "false", ms, copy, ms / copy);
}

/// Both optimal-token-baseline forms on (rows, cols) in groups of `group` (contiguous ids), with
/// IS weights: validated against verl::algo, then timed beside a copy of its five inputs.
void bench_optimal_token_baseline(Index rows, Index cols, Index group, bool multi_turn, int iters) {
  std::mt19937 rng(4);
  const MatrixF rewards = random_matrix(rows, cols, rng, 0.1f);
  const MatrixF mask = prefix_mask(rows, cols, rng);
  MatrixF old_log_probs(rows, cols), sum_pi_squared(rows, cols), weights(rows, cols);
  std::uniform_real_distribution<float> prob(0.01f, 1.0f), weight(0.5f, 2.0f);
  for (Index i = 0; i < old_log_probs.size(); ++i) {
    const float p = prob(rng);
    old_log_probs.data()[i] = std::log(p);
    sum_pi_squared.data()[i] = p * p + 0.5f * (1.0f - p * p);
    weights.data()[i] = weight(rng);
  }
  std::vector<std::int64_t> ids(static_cast<std::size_t>(rows));
  for (Index i = 0; i < rows; ++i) ids[static_cast<std::size_t>(i)] = i / group;
  verl::algo::AdvantageBatch batch{rewards, mask, ids};
  batch.old_log_probs.emplace(old_log_probs);
  batch.sum_pi_squared.emplace(sum_pi_squared);
  batch.rollout_is_weights.emplace(weights);
  const auto params = multi_turn ? k::OptimalTokenBaselineParams::multi_turn_form()
                                 : k::OptimalTokenBaselineParams::single_turn();
  const auto expected = k::reference_optimal_token_baseline(params, batch);
  const std::size_t n = static_cast<std::size_t>(rows * cols);
  DeviceBuffer<float> d_r(rewards.data(), n), d_m(mask.data(), n), d_old(old_log_probs.data(), n),
      d_sq(sum_pi_squared.data(), n), d_w(weights.data(), n), d_adv(n), d_ret(n);
  DeviceBuffer<std::int64_t> d_ids(ids.data(), ids.size());
  std::size_t bytes = 0;
  k::optimal_token_baseline_advantages(nullptr, bytes, params, k::GroupLayout::contiguous, nullptr, nullptr, nullptr,
                                       nullptr, nullptr, nullptr, rows, cols, nullptr, nullptr);
  DeviceBuffer<unsigned char> temp(bytes);
  const auto run = [&] {
    k::optimal_token_baseline_advantages(temp.data(), bytes, params, k::GroupLayout::contiguous, d_r.data(),
                                         d_m.data(), d_ids.data(), d_old.data(), d_sq.data(), d_w.data(), rows, cols,
                                         d_adv.data(), d_ret.data());
  };
  run();
  VERL_CUDA_CHECK(cudaDeviceSynchronize());
  const bool valid = worst_excess(d_ret.download(), expected.returns().data(), 1e-5f, 1e-5f) <= 0.0f &&
                     worst_excess(d_adv.download(), expected.advantages.data(), 1e-5f, 1e-5f) <= 0.0f;
  const float ms = time_ms(run, iters);
  const float copy = copy_ms(5 * n * sizeof(float), iters);  // a copy of its five inputs
  const char* name = multi_turn ? "tir_optimal_token_baseline" : "optimal_token_baseline";
  std::printf("%s %lld x %lld fp32, groups of %lld: valid=%s  %.3f ms  copy of inputs %.3f ms  -> %.2fx the copy\n",
              name, static_cast<long long>(rows), static_cast<long long>(cols), static_cast<long long>(group),
              valid ? "yes" : "NO", ms, copy, ms / copy);
  std::printf("JSON {\"bench\":\"cuda_optimal_token_baseline\",\"form\":\"%s\",\"rows\":%lld,\"cols\":%lld,"
              "\"valid\":%s,\"ms\":%.4f,\"copy_inputs_ms\":%.4f,\"ratio_to_copy\":%.3f}\n",
              name, static_cast<long long>(rows), static_cast<long long>(cols), valid ? "true" : "false", ms, copy,
              ms / copy);
}

template <class AlgoLoss>
void bench_policy_loss(const AlgoLoss& reference, Index rows, Index cols, int iters) {
  std::mt19937 rng(3);
  const MatrixF old = random_matrix(rows, cols, rng, 1.0f);
  const MatrixF lp = old + random_matrix(rows, cols, rng, 0.2f);
  const MatrixF adv = random_matrix(rows, cols, rng, 1.0f);
  const MatrixF mask = prefix_mask(rows, cols, rng);
  const auto mode = verl::algo::LossAggMode::token_mean;
  const auto expected = reference.compute({old, lp, adv, mask}, {mode, {}});
  const std::size_t n = static_cast<std::size_t>(rows * cols);
  DeviceBuffer<float> d_old(n), d_lp(n), d_adv(n), d_m(n), d_grad(n);
  DeviceBuffer<k::PolicyLossState> d_state(1);
  d_old.upload(old.data());
  d_lp.upload(lp.data());
  d_adv.upload(adv.data());
  d_m.upload(mask.data());
  k::PolicyLossInputs in;
  in.old_log_prob = d_old.data();
  in.log_prob = d_lp.data();
  in.advantages = d_adv.data();
  in.response_mask = d_m.data();
  in.rows = rows;
  in.cols = cols;
  const auto params = k::kernel_policy_loss(reference);
  std::size_t bytes = 0;
  k::policy_loss(nullptr, bytes, in, params, mode, {}, nullptr, nullptr);
  DeviceBuffer<unsigned char> temp(bytes);
  const auto run = [&] { k::policy_loss(temp.data(), bytes, in, params, mode, {}, d_grad.data(), d_state.data()); };
  run();
  VERL_CUDA_CHECK(cudaDeviceSynchronize());
  const k::PolicyLossState state = d_state.download()[0];
  const bool valid = worst_excess(d_grad.download(), expected.grad_log_prob.data(), 1e-7f, 1e-5f) <= 0.0f &&
                     std::abs(state.pg_loss - expected.pg_loss) <= 1e-5f * (1.0f + std::abs(expected.pg_loss));
  const float ms = time_ms(run, iters);
  const float copy = copy_ms(4 * n * sizeof(float), iters);  // a copy of its four inputs
  const std::string name(AlgoLoss::name);
  std::printf("%s policy loss %lld x %lld fp32: valid=%s  %.3f ms  copy of inputs %.3f ms  -> %.2fx the copy\n",
              name.c_str(), static_cast<long long>(rows), static_cast<long long>(cols), valid ? "yes" : "NO", ms, copy,
              ms / copy);
  std::printf("JSON {\"bench\":\"cuda_policy_loss\",\"loss\":\"%s\",\"rows\":%lld,\"cols\":%lld,\"valid\":%s,"
              "\"ms\":%.4f,\"copy_inputs_ms\":%.4f,\"ratio_to_copy\":%.3f}\n",
              name.c_str(), static_cast<long long>(rows), static_cast<long long>(cols), valid ? "true" : "false", ms,
              copy, ms / copy);
}

}  // namespace

int main(int argc, char** argv) {
  Index responses = Index{1} << 20, group = 8, rows = 4096, cols = 4096;
  int iters = 50;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--responses") responses = std::stoll(argv[i + 1]);
    else if (flag == "--group") group = std::stoll(argv[i + 1]);
    else if (flag == "--rows") rows = std::stoll(argv[i + 1]);
    else if (flag == "--cols") cols = std::stoll(argv[i + 1]);
    else if (flag == "--iters") iters = std::stoi(argv[i + 1]);
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
  bench_grpo(responses, group, iters, /*shuffled=*/false);
  bench_grpo(responses, group, iters, /*shuffled=*/true);
  bench_gae(rows, cols, iters);
  bench_policy_loss(verl::algo::VanillaPPO{}, rows, cols, iters);
  bench_policy_loss(verl::algo::CISPO{}, rows, cols, iters);
  bench_policy_loss(verl::algo::GSPO{}, rows, cols, iters);
  bench_policy_loss(verl::algo::GeoMean{}, rows, cols, iters);
  bench_policy_loss(verl::algo::ClipCov{}, rows, cols, iters);  // verl's defaults: ratio 2e-4
  bench_policy_loss(verl::algo::KLCov{}, rows, cols, iters);
  bench_optimal_token_baseline(rows, cols, group, /*multi_turn=*/false, iters);
  bench_optimal_token_baseline(rows, cols, group, /*multi_turn=*/true, iters);
  return 0;
}
