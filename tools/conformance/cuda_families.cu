// The CUDA path of verl_conformance (declared in cuda_runner.hpp): each function uploads the case's
// tensors, runs the kernels and downloads the results, synchronously. Argument checks that verl
// raises for (shapes, masks) happen on the host in cuda_handlers.cpp before these run.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "cuda_runner.hpp"
#include "verl/kernels/detail/cuda_check.cuh"
#include "verl/kernels/advantages.cuh"
#include "verl/kernels/kl_penalty.cuh"
#include "verl/kernels/logprob_entropy.cuh"
#include "verl/kernels/masked_reductions.cuh"
#include "verl/kernels/policy_loss.cuh"
#include "verl/kernels/rollout_correction.cuh"
#include "verl/kernels/entropy_loss.cuh"
#include "verl/kernels/functional.cuh"
#include "verl/kernels/optimal_token_baseline.cuh"
#include "verl/kernels/value_loss.cuh"

namespace verl::conformance::cuda_path {
namespace {

using verl::kernels::DeviceBuffer;

DeviceBuffer<float> to_device(const MatrixF& m) {
  DeviceBuffer<float> d(static_cast<std::size_t>(m.size()));
  d.upload(m.data());
  return d;
}

MatrixF to_host(const DeviceBuffer<float>& d, Index rows, Index cols) {
  MatrixF m(rows, cols);
  d.download(m.data());
  return m;
}

/// verl's masked_var raises for fewer than 2 valid tokens; the kernels leave NaN and the count.
void require_whitening_count(const DeviceBuffer<kernels::WhitenStats>& stats) {
  const long long valid = stats.download().at(0).count;
  VERL_CHECK_ARG(valid >= 2,
                 "response_mask: whitening needs at least 2 valid tokens in the batch (verl's masked_var raises), "
                 "got {}",
                 valid);
}

}  // namespace

std::string unavailable_reason() {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) return std::string("no usable CUDA device: ") + cudaGetErrorString(status);
  if (count == 0) return "no CUDA device present";
  return {};
}

algo::AdvantageResult outcome_advantages(const kernels::OutcomeParams& params, const MatrixF& rewards,
                                         const MatrixF& mask, const std::vector<std::int64_t>& ids) {
  const Index rows = rewards.rows(), cols = rewards.cols();
  auto d_r = to_device(rewards), d_m = to_device(mask);
  DeviceBuffer<std::int64_t> d_ids(ids.size());
  d_ids.upload(ids.data());
  DeviceBuffer<float> d_adv(static_cast<std::size_t>(rows * cols)), d_ret(static_cast<std::size_t>(rows * cols));
  DeviceBuffer<kernels::WhitenStats> stats(1);
  std::size_t bytes = 0;
  kernels::outcome_advantages(nullptr, bytes, params, kernels::GroupLayout::any, nullptr, nullptr, nullptr, rows, cols,
                              nullptr, nullptr);
  DeviceBuffer<unsigned char> temp(bytes);
  kernels::outcome_advantages(temp.data(), bytes, params, kernels::GroupLayout::any, d_r.data(), d_m.data(), d_ids.data(), rows,
                              cols, d_adv.data(), d_ret.data(), nullptr, stats.data());
  VERL_CUDA_CHECK(cudaDeviceSynchronize());
  if (params.estimator == kernels::OutcomeEstimator::reinforce_plus_plus_baseline && rows > 0 && cols > 0)
    require_whitening_count(stats);
  return {to_host(d_adv, rows, cols), to_host(d_ret, rows, cols)};
}

algo::AdvantageResult gae(double gamma, double lam, const MatrixF& rewards, const MatrixF& values,
                          const MatrixF& mask) {
  const Index rows = rewards.rows(), cols = rewards.cols();
  auto d_r = to_device(rewards), d_v = to_device(values), d_m = to_device(mask);
  DeviceBuffer<float> d_adv(static_cast<std::size_t>(rows * cols)), d_ret(static_cast<std::size_t>(rows * cols));
  DeviceBuffer<kernels::WhitenStats> stats(1);
  const auto params = kernels::GaeParams::from(gamma, lam);
  std::size_t bytes = 0;
  kernels::gae_advantages(nullptr, bytes, params, nullptr, nullptr, nullptr, rows, cols, nullptr, nullptr);
  DeviceBuffer<unsigned char> temp(bytes);
  kernels::gae_advantages(temp.data(), bytes, params, d_r.data(), d_v.data(), d_m.data(), rows, cols, d_adv.data(), d_ret.data(),
                          nullptr, stats.data());
  VERL_CUDA_CHECK(cudaDeviceSynchronize());
  VERL_CHECK_ARG(rows > 0, "response_mask: whitening needs at least 2 valid tokens in the batch, got an empty batch");
  require_whitening_count(stats);
  return {to_host(d_adv, rows, cols), to_host(d_ret, rows, cols)};
}

algo::AdvantageResult optimal_token_baseline(const kernels::OptimalTokenBaselineParams& params, const MatrixF& rewards,
                                             const MatrixF& mask, const std::vector<std::int64_t>& ids,
                                             const MatrixF& old_log_probs, const MatrixF& sum_pi_squared,
                                             const MatrixF* rollout_is_weights) {
  const Index rows = rewards.rows(), cols = rewards.cols();
  auto d_r = to_device(rewards), d_m = to_device(mask), d_old = to_device(old_log_probs),
       d_sq = to_device(sum_pi_squared);
  DeviceBuffer<float> d_w(rollout_is_weights != nullptr ? static_cast<std::size_t>(rows * cols) : 0);
  if (rollout_is_weights != nullptr) d_w.upload(rollout_is_weights->data());
  DeviceBuffer<std::int64_t> d_ids(ids.data(), ids.size());
  DeviceBuffer<float> d_adv(static_cast<std::size_t>(rows * cols)), d_ret(static_cast<std::size_t>(rows * cols));
  std::size_t bytes = 0;
  kernels::optimal_token_baseline_advantages(nullptr, bytes, params, kernels::GroupLayout::any, nullptr, nullptr,
                                             nullptr, nullptr, nullptr, nullptr, rows, cols, nullptr, nullptr);
  DeviceBuffer<unsigned char> temp(bytes);
  kernels::optimal_token_baseline_advantages(temp.data(), bytes, params, kernels::GroupLayout::any, d_r.data(),
                                             d_m.data(), d_ids.data(), d_old.data(), d_sq.data(),
                                             rollout_is_weights != nullptr ? d_w.data() : nullptr, rows, cols,
                                             d_adv.data(), d_ret.data());
  VERL_CUDA_CHECK(cudaDeviceSynchronize());
  return {to_host(d_adv, rows, cols), to_host(d_ret, rows, cols)};
}

algo::AdvantageResult reinforce_plus_plus(double gamma, const MatrixF& rewards, const MatrixF& mask) {
  const Index rows = rewards.rows(), cols = rewards.cols();
  auto d_r = to_device(rewards), d_m = to_device(mask);
  DeviceBuffer<float> d_adv(static_cast<std::size_t>(rows * cols)), d_ret(static_cast<std::size_t>(rows * cols));
  DeviceBuffer<kernels::WhitenStats> stats(1);
  std::size_t bytes = 0;
  kernels::reinforce_plus_plus_advantages(nullptr, bytes, static_cast<float>(gamma), nullptr, nullptr, rows, cols,
                                          nullptr, nullptr);
  DeviceBuffer<unsigned char> temp(bytes);
  kernels::reinforce_plus_plus_advantages(temp.data(), bytes, static_cast<float>(gamma), d_r.data(), d_m.data(), rows, cols,
                                          d_adv.data(), d_ret.data(), nullptr, stats.data());
  VERL_CUDA_CHECK(cudaDeviceSynchronize());
  VERL_CHECK_ARG(rows > 0, "response_mask: whitening needs at least 2 valid tokens in the batch, got an empty batch");
  require_whitening_count(stats);
  return {to_host(d_adv, rows, cols), to_host(d_ret, rows, cols)};
}

algo::AdvantageResult remax(const MatrixF& rewards, const MatrixF& mask, const VectorF& baselines) {
  const Index rows = rewards.rows(), cols = rewards.cols();
  auto d_r = to_device(rewards), d_m = to_device(mask);
  DeviceBuffer<float> d_b(static_cast<std::size_t>(baselines.size()));
  d_b.upload(baselines.data());
  DeviceBuffer<float> d_adv(static_cast<std::size_t>(rows * cols)), d_ret(static_cast<std::size_t>(rows * cols));
  kernels::remax_advantages(d_r.data(), d_m.data(), d_b.data(), rows, cols, d_adv.data(), d_ret.data());
  VERL_CUDA_CHECK(cudaDeviceSynchronize());
  return {to_host(d_adv, rows, cols), to_host(d_ret, rows, cols)};
}

AggLossOutput agg_loss(const MatrixF& loss, const MatrixF& mask, algo::LossAggMode mode,
                       const algo::GlobalBatchInfo& info) {
  const Index rows = loss.rows(), cols = loss.cols();
  auto d_l = to_device(loss), d_m = to_device(mask);
  DeviceBuffer<float> d_w(static_cast<std::size_t>(rows * cols));
  DeviceBuffer<kernels::AggLossState> state(1);
  std::size_t bytes = 0;
  kernels::agg_loss(nullptr, bytes, nullptr, nullptr, rows, cols, mode, info, nullptr);
  DeviceBuffer<unsigned char> temp(bytes);
  kernels::agg_loss(temp.data(), bytes, d_l.data(), d_m.data(), rows, cols, mode, info, state.data(), d_w.data());
  VERL_CUDA_CHECK(cudaDeviceSynchronize());
  return {state.download().at(0).loss, to_host(d_w, rows, cols)};
}

KlOutput kl_penalty(kernels::KlType type, const MatrixF& logprob, const MatrixF& ref_logprob,
                    const MatrixF* cotangent) {
  const Index rows = logprob.rows(), cols = logprob.cols();
  auto d_lp = to_device(logprob), d_ref = to_device(ref_logprob);
  DeviceBuffer<float> d_kl(static_cast<std::size_t>(rows * cols)), d_grad(cotangent ? d_kl.size() : 0);
  DeviceBuffer<float> d_cot(cotangent ? d_kl.size() : 0);
  if (cotangent) d_cot.upload(cotangent->data());
  kernels::kl_penalty(type, d_lp.data(), d_ref.data(), rows * cols, d_kl.data(), cotangent ? d_grad.data() : nullptr,
                      cotangent ? d_cot.data() : nullptr);
  VERL_CUDA_CHECK(cudaDeviceSynchronize());
  KlOutput out{to_host(d_kl, rows, cols), {}};
  if (cotangent) out.grad_logprob = to_host(d_grad, rows, cols);
  return out;
}

MatrixF kl_rewards(const MatrixF& scores, const MatrixF& old_log_prob, const MatrixF& ref_log_prob, double kl_ratio) {
  const Index rows = scores.rows(), cols = scores.cols();
  auto d_s = to_device(scores), d_old = to_device(old_log_prob), d_ref = to_device(ref_log_prob);
  DeviceBuffer<float> d_out(static_cast<std::size_t>(rows * cols));
  kernels::kl_rewards(d_s.data(), d_old.data(), d_ref.data(), rows * cols, kl_ratio, d_out.data());
  VERL_CUDA_CHECK(cudaDeviceSynchronize());
  return to_host(d_out, rows, cols);
}

namespace {

template <class Loss>
constexpr bool has_kernel = requires(const Loss& loss) { kernels::kernel_policy_loss(loss); };

/// A policy-loss batch on the device, with its gradient and state buffers and the kernels' inputs.
struct DevicePolicyBatch {
  Index rows, cols;
  DeviceBuffer<float> old_log_prob, log_prob, advantages, mask, weights, grad;
  DeviceBuffer<kernels::PolicyLossState> state{1};
  kernels::PolicyLossInputs inputs;

  /// `with_weights`: upload batch.rollout_is_weights (when present) as the inputs' IS weights.
  DevicePolicyBatch(const algo::PolicyLossBatch& batch, bool with_weights)
      : rows(batch.log_prob.rows()),
        cols(batch.log_prob.cols()),
        old_log_prob(to_device(batch.old_log_prob)),
        log_prob(to_device(batch.log_prob)),
        advantages(to_device(batch.advantages)),
        mask(to_device(batch.response_mask)),
        weights(with_weights && batch.rollout_is_weights ? static_cast<std::size_t>(rows * cols) : 0),
        grad(static_cast<std::size_t>(rows * cols)) {
    if (weights.size() > 0) weights.upload(MatrixF(*batch.rollout_is_weights).data());
    inputs.old_log_prob = old_log_prob.data();
    inputs.log_prob = log_prob.data();
    inputs.advantages = advantages.data();
    inputs.response_mask = mask.data();
    inputs.rollout_is_weights = weights.size() > 0 ? weights.data() : nullptr;
    inputs.rows = rows;
    inputs.cols = cols;
  }
};

template <class KernelLoss>
algo::PolicyLossResult run_policy_loss(const KernelLoss& loss, std::string_view name,
                                       const algo::PolicyLossBatch& batch, algo::LossAggMode mode,
                                       const algo::GlobalBatchInfo& info) {
  DevicePolicyBatch d(batch, true);
  std::size_t bytes = 0;
  kernels::policy_loss(nullptr, bytes, d.inputs, loss, mode, info, nullptr, nullptr);
  DeviceBuffer<unsigned char> temp(bytes);
  kernels::policy_loss(temp.data(), bytes, d.inputs, loss, mode, info, d.grad.data(), d.state.data());
  VERL_CUDA_CHECK(cudaDeviceSynchronize());
  const kernels::PolicyLossState s = d.state.download().at(0);
  algo::PolicyLossResult result{s.pg_loss, to_host(d.grad, d.rows, d.cols), {}};
  // The metrics verl reports for each loss: none for gpg, ppo_kl only for reinforce and kl_cov,
  // no pg_clipfrac_lower for clip_cov.
  if (name == "gpg") return result;
  result.metrics["actor/ppo_kl"] = s.ppo_kl;
  if (name == "reinforce" || name == "kl_cov") return result;
  result.metrics["actor/pg_clipfrac"] = s.pg_clipfrac;
  if (name == "clip_cov") return result;
  result.metrics["actor/pg_clipfrac_lower"] = s.pg_clipfrac_lower;
  return result;
}

/// bypass_mode through kernels/rollout_correction.cuh: the correction, then the vanilla or
/// REINFORCE kernel; the metrics come back merged (the loss's and every "rollout_corr/..." one).
/// batch.rollout_is_weights is ignored, as in verl.
algo::PolicyLossResult run_bypass_mode(const kernels::BypassModeParams& params, const algo::PolicyLossBatch& batch,
                                       algo::LossAggMode mode, const algo::GlobalBatchInfo& info) {
  DevicePolicyBatch d(batch, false);
  std::size_t bytes = 0;
  (void)kernels::bypass_mode_policy_loss(nullptr, bytes, d.inputs, params, mode, info, nullptr, nullptr);
  DeviceBuffer<unsigned char> temp(bytes);
  auto out = kernels::bypass_mode_policy_loss(temp.data(), bytes, d.inputs, params, mode, info, d.grad.data(),
                                              d.state.data());
  VERL_CUDA_CHECK(cudaDeviceSynchronize());
  return {out.state.pg_loss, to_host(d.grad, d.rows, d.cols), std::move(out.metrics)};
}

}  // namespace

WhitenOutput masked_whiten(const MatrixF& values, const MatrixF& mask, const MatrixF* cotangent, bool shift_mean) {
  const Index rows = values.rows(), cols = values.cols();
  auto d_v = to_device(values), d_m = to_device(mask);
  DeviceBuffer<float> d_out(static_cast<std::size_t>(rows * cols));
  std::size_t bytes = 0;
  kernels::masked_whiten(nullptr, bytes, nullptr, nullptr, rows, cols, nullptr);
  DeviceBuffer<unsigned char> temp(bytes);
  kernels::masked_whiten(temp.data(), bytes, d_v.data(), d_m.data(), rows, cols, d_out.data(), shift_mean);
  WhitenOutput out;
  out.result = to_host(d_out, rows, cols);
  if (cotangent != nullptr) {
    auto d_c = to_device(*cotangent);
    kernels::masked_whiten_backward(nullptr, bytes, nullptr, nullptr, nullptr, rows, cols, nullptr);
    DeviceBuffer<unsigned char> temp_backward(bytes);
    kernels::masked_whiten_backward(temp_backward.data(), bytes, d_v.data(), d_m.data(), d_c.data(), rows, cols,
                                    d_out.data(), shift_mean);
    out.grad = to_host(d_out, rows, cols);
  }
  return out;
}

VectorF gather_from_labels(const MatrixF& data, const std::vector<std::int64_t>& labels) {
  auto d_data = to_device(data);
  DeviceBuffer<std::int64_t> d_labels(labels.data(), labels.size());
  DeviceBuffer<float> d_out(labels.size());
  kernels::gather_from_labels(d_data.data(), data.rows(), data.cols(), d_labels.data(), d_out.data());
  VectorF out(static_cast<Index>(labels.size()));
  d_out.download(out.data());
  return out;
}

MatrixF clip_by_value(const MatrixF& x, const MatrixF& tensor_min, const MatrixF& tensor_max) {
  auto d_x = to_device(x), d_lo = to_device(tensor_min), d_hi = to_device(tensor_max);
  DeviceBuffer<float> d_out(static_cast<std::size_t>(x.size()));
  kernels::clip_by_value(d_x.data(), d_lo.data(), d_hi.data(), x.size(), d_out.data());
  return to_host(d_out, x.rows(), x.cols());
}

RowMatrix<std::int64_t> response_mask(const RowMatrix<std::int64_t>& response_ids, const std::vector<std::int64_t>& eos) {
  const Index rows = response_ids.rows(), cols = response_ids.cols();
  DeviceBuffer<std::int64_t> d_ids(response_ids.data(), static_cast<std::size_t>(response_ids.size()));
  DeviceBuffer<std::int64_t> d_eos(eos.data(), eos.size());
  DeviceBuffer<std::int64_t> d_mask(static_cast<std::size_t>(response_ids.size()));
  kernels::response_mask(d_ids.data(), rows, cols, d_eos.data(), static_cast<int>(eos.size()), d_mask.data());
  RowMatrix<std::int64_t> out(rows, cols);
  d_mask.download(out.data());
  return out;
}

algo::ValueLoss<float> value_loss(const MatrixF& vpreds, const MatrixF& returns, const MatrixF& values,
                                  const MatrixF& mask, double cliprange_value, algo::LossAggMode mode) {
  const Index rows = vpreds.rows(), cols = vpreds.cols();
  auto d_v = to_device(vpreds), d_r = to_device(returns), d_o = to_device(values), d_m = to_device(mask);
  DeviceBuffer<float> d_grad(static_cast<std::size_t>(rows * cols));
  DeviceBuffer<kernels::ValueLossState> state(1);
  const kernels::ValueLossInputs in{d_v.data(), d_r.data(), d_o.data(), d_m.data(), rows, cols};
  std::size_t bytes = 0;
  kernels::value_loss(nullptr, bytes, in, cliprange_value, mode, {}, nullptr, nullptr);
  DeviceBuffer<unsigned char> temp(bytes);
  kernels::value_loss(temp.data(), bytes, in, cliprange_value, mode, {}, d_grad.data(), state.data());
  VERL_CUDA_CHECK(cudaDeviceSynchronize());
  const kernels::ValueLossState s = state.download().at(0);
  algo::ValueLoss<float> out;
  out.vf_loss = s.vf_loss;
  out.vf_clipfrac = s.vf_clipfrac;
  out.grad_vpreds = to_host(d_grad, rows, cols);
  out.metrics["critic/vf_loss"] = s.vf_loss;
  out.metrics["critic/vf_clipfrac"] = s.vf_clipfrac;
  out.metrics["critic/vpred_mean"] = s.vpred_mean;
  return out;
}

algo::EntropyLoss entropy_loss(const MatrixF& logits, const MatrixF& mask, algo::LossAggMode mode) {
  const Index batch = mask.rows(), length = mask.cols();
  auto d_logits = to_device(logits), d_m = to_device(mask);
  DeviceBuffer<float> d_grad(static_cast<std::size_t>(logits.size()));
  DeviceBuffer<kernels::AggLossState> state(1);
  const kernels::LogitsShape shape{logits.rows(), logits.cols(), logits.cols()};
  std::size_t bytes = 0;
  kernels::entropy_loss<float>(nullptr, bytes, nullptr, shape, nullptr, batch, length, mode, {}, nullptr);
  DeviceBuffer<unsigned char> temp(bytes);
  kernels::entropy_loss(temp.data(), bytes, d_logits.data(), shape, d_m.data(), batch, length, mode, {},
                        state.data(), d_grad.data());
  VERL_CUDA_CHECK(cudaDeviceSynchronize());
  algo::EntropyLoss out;
  out.entropy_loss = state.download().at(0).loss;
  out.grad_logits = to_host(d_grad, logits.rows(), logits.cols());
  return out;
}

bool has_policy_loss_kernel(const algo::AnyPolicyLoss& loss) {
  return std::visit([](const auto& l) { return has_kernel<std::decay_t<decltype(l)>>; }, loss.variant());
}

algo::PolicyLossResult policy_loss(const algo::AnyPolicyLoss& loss, const algo::PolicyLossBatch& batch,
                                   algo::LossAggMode mode, const algo::GlobalBatchInfo& info) {
  return std::visit(
      [&](const auto& l) -> algo::PolicyLossResult {
        using Loss = std::decay_t<decltype(l)>;
        if constexpr (std::is_same_v<Loss, algo::BypassMode>) {
          return run_bypass_mode(kernels::kernel_policy_loss(l), batch, mode, info);
        } else if constexpr (has_kernel<Loss>) {
          return run_policy_loss(kernels::kernel_policy_loss(l), Loss::name, batch, mode, info);
        } else {
          verl::detail::throw_invalid_argument("loss_mode: no CUDA kernel for policy loss '{}'", Loss::name);
        }
      },
      loss.variant());
}

LogitsOutput logprob_entropy(const MatrixF& logits, const std::vector<std::int64_t>* labels,
                             const VectorF* log_prob_cotangent, const VectorF* entropy_cotangent) {
  const Index rows = logits.rows(), vocab = logits.cols();
  const auto n = static_cast<std::size_t>(rows);
  auto d_logits = to_device(logits);
  DeviceBuffer<std::int64_t> d_labels(labels ? labels->size() : 0);
  if (labels) d_labels.upload(labels->data());
  DeviceBuffer<float> d_lp(n), d_h(n), d_q(n), d_max(n), d_lse(n), d_cot_lp(n), d_cot_h(n);
  const kernels::LogitsShape shape{rows, vocab, vocab};
  kernels::LogprobEntropyOutputs outputs;
  outputs.log_probs = labels ? d_lp.data() : nullptr;
  outputs.entropy = d_h.data();
  outputs.sum_pi_squared = d_q.data();
  outputs.row_max = d_max.data();
  outputs.log_normalizer = d_lse.data();
  const std::int64_t* label_ptr = labels ? d_labels.data() : nullptr;
  kernels::logprob_entropy_forward(d_logits.data(), shape, label_ptr, 1.0f, outputs);
  LogitsOutput out;
  out.log_probs.resize(rows);
  out.entropy.resize(rows);
  out.sum_pi_squared.resize(rows);
  VERL_CUDA_CHECK(cudaDeviceSynchronize());
  if (labels) d_lp.download(out.log_probs.data());
  d_h.download(out.entropy.data());
  d_q.download(out.sum_pi_squared.data());
  if (log_prob_cotangent || entropy_cotangent) {
    kernels::LogprobEntropyCotangentPointers cotangents;
    if (log_prob_cotangent) {
      d_cot_lp.upload(log_prob_cotangent->data());
      cotangents.log_probs = d_cot_lp.data();
    }
    if (entropy_cotangent) {
      d_cot_h.upload(entropy_cotangent->data());
      cotangents.entropy = d_cot_h.data();
    }
    const kernels::LogprobEntropySaved saved{d_max.data(), d_lse.data(), d_h.data(), d_q.data()};
    DeviceBuffer<float> d_grad(static_cast<std::size_t>(rows * vocab));
    kernels::logprob_entropy_backward(d_logits.data(), shape, label_ptr, 1.0f, saved, cotangents, d_grad.data(), vocab);
    VERL_CUDA_CHECK(cudaDeviceSynchronize());
    out.grad_logits = to_host(d_grad, rows, vocab);
  }
  return out;
}

MaskedReduceOutput masked_reduce(const MatrixF& values, const MatrixF& mask, const int* axis, bool mean,
                                 const VectorF* cotangent) {
  const Index rows = values.rows(), cols = values.cols();
  auto d_v = to_device(values), d_m = to_device(mask);
  MaskedReduceOutput out;
  DeviceBuffer<float> d_grad(static_cast<std::size_t>(rows * cols));
  if (axis == nullptr) {
    DeviceBuffer<kernels::MaskedStats> stats(1);
    std::size_t bytes = 0;
    kernels::masked_stats(nullptr, bytes, nullptr, nullptr, rows, cols, nullptr);
    DeviceBuffer<unsigned char> temp(bytes);
    kernels::masked_stats(temp.data(), bytes, d_v.data(), d_m.data(), rows, cols, stats.data());
    kernels::masked_reduce_backward(d_m.data(), rows, cols, mean, stats.data(), d_grad.data());
    VERL_CUDA_CHECK(cudaDeviceSynchronize());
    const kernels::MaskedStats s = stats.download().at(0);
    out.scalar = mean ? s.mean : s.sum;
    out.grad = to_host(d_grad, rows, cols);
    return out;
  }
  const bool by_rows = algo::detail::reduces_rows(*axis);
  const Index length = by_rows ? rows : cols;
  DeviceBuffer<float> d_out(static_cast<std::size_t>(length));
  kernels::masked_reduce_axis(d_v.data(), d_m.data(), rows, cols, *axis, mean, d_out.data());
  if (cotangent) {
    DeviceBuffer<float> d_cot(static_cast<std::size_t>(length));
    d_cot.upload(cotangent->data());
    kernels::masked_reduce_axis_backward(d_m.data(), rows, cols, *axis, mean, d_cot.data(), d_grad.data());
    VERL_CUDA_CHECK(cudaDeviceSynchronize());
    out.grad = to_host(d_grad, rows, cols);
  }
  VERL_CUDA_CHECK(cudaDeviceSynchronize());
  out.along_axis.resize(length);
  d_out.download(out.along_axis.data());
  return out;
}

MaskedVarOutput masked_var(const MatrixF& values, const MatrixF& mask, bool unbiased) {
  const Index rows = values.rows(), cols = values.cols();
  auto d_v = to_device(values), d_m = to_device(mask);
  DeviceBuffer<float> d_grad(static_cast<std::size_t>(rows * cols));
  DeviceBuffer<kernels::MaskedStats> stats(1);
  std::size_t bytes = 0;
  kernels::masked_stats(nullptr, bytes, nullptr, nullptr, rows, cols, nullptr);
  DeviceBuffer<unsigned char> temp(bytes);
  kernels::masked_stats(temp.data(), bytes, d_v.data(), d_m.data(), rows, cols, stats.data());
  kernels::masked_var_backward(d_v.data(), d_m.data(), rows, cols, unbiased, stats.data(), d_grad.data());
  VERL_CUDA_CHECK(cudaDeviceSynchronize());
  const kernels::MaskedStats s = stats.download().at(0);
  return {unbiased ? s.var : s.var_biased, s.count, to_host(d_grad, rows, cols)};
}

}  // namespace verl::conformance::cuda_path
