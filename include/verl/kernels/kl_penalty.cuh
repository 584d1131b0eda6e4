// verl's KL penalties (kl/k1, abs, mse/k2, low_var_kl/k3) as one element-wise CUDA kernel, with the
// gradient w.r.t. logprob, and verl's compute_rewards (KL in the reward) (CPU reference: verl::algo::kl_penalty / kl_penalty_backward). The
// per-element math is kl_penalty.hpp's, shared with the host.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "verl/kernels/detail/device_utils.cuh"
#include "verl/kernels/kl_penalty.hpp"

namespace verl::kernels {

namespace detail {

template <KlType kType>
__global__ void kl_penalty_kernel(const float* __restrict logprob, const float* __restrict ref, std::int64_t n,
                                  const float* __restrict cotangent, float* __restrict kl,
                                  float* __restrict grad_logprob) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const float lp = logprob[i], r = ref[i];
    if (kl != nullptr) kl[i] = kl_value(kType, lp, r);
    if (grad_logprob != nullptr)
      grad_logprob[i] = kl_grad_logprob(kType, lp, r, cotangent != nullptr ? cotangent[i] : 1.0f);
  }
}

VERL_HEADER_KERNEL void kl_rewards_kernel(const float* __restrict scores, const float* __restrict old_log_prob,
                                  const float* __restrict ref_log_prob, std::int64_t n, float ratio,
                                  float* __restrict rewards) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    rewards[i] = add_rn(scores[i], -mul_rn(old_log_prob[i] - ref_log_prob[i], ratio));  // no FMA, as torch
}

}  // namespace detail

/// verl's compute_rewards: scores - (old_log_prob - ref_log_prob) * kl_ratio over n elements
/// (kl_ratio rounded to float32 first, as torch does).
inline void kl_rewards(const float* scores, const float* old_log_prob, const float* ref_log_prob, std::int64_t n,
                       double kl_ratio, float* rewards, cudaStream_t stream = nullptr) {
  VERL_CHECK_ARG(n >= 0, "n: expected >= 0, got {}", n);
  if (n == 0) return;
  detail::kl_rewards_kernel<<<detail::grid_for(n, 256), 256, 0, stream>>>(scores, old_log_prob, ref_log_prob, n,
                                                                          static_cast<float>(kl_ratio), rewards);
  VERL_CUDA_CHECK(cudaGetLastError());
}

/// kl = kl_penalty(logprob, ref) (nullptr: skipped) and grad_logprob = cotangent * d kl / d logprob
/// (cotangent nullptr: ones; grad_logprob nullptr: skipped); d / d ref is -grad_logprob. n elements.
inline void kl_penalty(KlType type, const float* logprob, const float* ref_logprob, std::int64_t n, float* kl,
                       float* grad_logprob = nullptr, const float* cotangent = nullptr, cudaStream_t stream = nullptr) {
  VERL_CHECK_ARG(n >= 0, "n: expected >= 0, got {}", n);
  if (n == 0) return;
  const unsigned grid = detail::grid_for(n, 256);
  switch (type) {
    case KlType::kl:
      detail::kl_penalty_kernel<KlType::kl><<<grid, 256, 0, stream>>>(logprob, ref_logprob, n, cotangent, kl, grad_logprob);
      break;
    case KlType::abs:
      detail::kl_penalty_kernel<KlType::abs><<<grid, 256, 0, stream>>>(logprob, ref_logprob, n, cotangent, kl, grad_logprob);
      break;
    case KlType::mse:
      detail::kl_penalty_kernel<KlType::mse><<<grid, 256, 0, stream>>>(logprob, ref_logprob, n, cotangent, kl, grad_logprob);
      break;
    case KlType::low_var_kl:
      detail::kl_penalty_kernel<KlType::low_var_kl><<<grid, 256, 0, stream>>>(logprob, ref_logprob, n, cotangent, kl,
                                                                              grad_logprob);
      break;
  }
  VERL_CUDA_CHECK(cudaGetLastError());
}

}  // namespace verl::kernels
