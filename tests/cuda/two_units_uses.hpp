// Every kernel header used from more than one .cu file of one program (two_units_a.cu and
// two_units_b.cu each instantiate this): the program must link, i.e. no kernel defined in a header
// may be a strong symbol of each translation unit. Nothing here runs on a device.
#pragma once

#include <cstddef>

#include "verl/kernels/advantages.cuh"
#include "verl/kernels/entropy_loss.cuh"
#include "verl/kernels/functional.cuh"
#include "verl/kernels/kl_penalty.cuh"
#include "verl/kernels/logprob_entropy.cuh"
#include "verl/kernels/masked_reductions.cuh"
#include "verl/kernels/optimal_token_baseline.cuh"
#include "verl/kernels/policy_loss.cuh"
#include "verl/kernels/rollout_correction.cuh"
#include "verl/kernels/sampling.cuh"
#include "verl/kernels/value_loss.cuh"

/// Calls every kernel family's launcher when `launch` (never, in the test): the calls make each
/// translation unit instantiate the kernels. Returns `Unit`.
template <int Unit>
int use_every_kernel_header(bool launch) {
  namespace k = verl::kernels;
  if (!launch) return Unit;
  std::size_t bytes = 0;
  const auto mode = verl::algo::LossAggMode::token_mean;
  k::masked_stats(nullptr, bytes, nullptr, nullptr, 0, 0, nullptr);
  k::masked_whiten(nullptr, bytes, nullptr, nullptr, 0, 0, nullptr);
  k::masked_whiten_backward(nullptr, bytes, nullptr, nullptr, nullptr, 0, 0, nullptr);
  k::agg_loss(nullptr, bytes, nullptr, nullptr, 0, 0, mode, {}, nullptr);
  k::policy_loss(nullptr, bytes, k::PolicyLossInputs{}, k::GSPOParams{}, mode, {}, nullptr, nullptr);
  k::policy_loss(nullptr, bytes, k::PolicyLossInputs{}, k::ClipCovParams{}, mode, {}, nullptr, nullptr);
  k::policy_loss(nullptr, bytes, k::PolicyLossInputs{}, k::KLCovParams{}, mode, {}, nullptr, nullptr);
  (void)k::bypass_mode_policy_loss(nullptr, bytes, k::PolicyLossInputs{}, k::BypassModeParams{}, mode, {}, nullptr,
                                   nullptr);
  (void)k::rollout_correction(nullptr, bytes, k::RolloutCorrectionBatch{}, k::RolloutCorrectionParams{}, nullptr,
                              nullptr);
  k::value_loss(nullptr, bytes, k::ValueLossInputs{}, 0.2, mode, {}, nullptr, nullptr);
  k::entropy_loss<float>(nullptr, bytes, nullptr, k::LogitsShape{}, nullptr, 0, 0, mode, {}, nullptr);
  k::outcome_advantages(nullptr, bytes, k::OutcomeParams{}, k::GroupLayout::any, nullptr, nullptr, nullptr, 0, 0,
                        nullptr, nullptr);
  k::optimal_token_baseline_advantages(nullptr, bytes, k::OptimalTokenBaselineParams{}, k::GroupLayout::any, nullptr,
                                       nullptr, nullptr, nullptr, nullptr, nullptr, 0, 0, nullptr, nullptr);
  k::gae_advantages(nullptr, bytes, k::GaeParams{}, nullptr, nullptr, nullptr, 0, 0, nullptr, nullptr);
  k::kl_penalty(k::KlType::low_var_kl, nullptr, nullptr, 0, nullptr);
  k::gather_from_labels<float>(nullptr, 0, 0, nullptr, nullptr);
  k::clip_by_value(nullptr, nullptr, nullptr, 0, nullptr);
  k::response_mask<std::int64_t>(nullptr, 0, 0, nullptr, 1, nullptr);
  k::sample_tokens<float>(nullptr, k::LogitsShape{}, k::SamplingConfig{}, nullptr, nullptr, 0, nullptr, nullptr);
  return Unit;
}
