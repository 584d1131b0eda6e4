// What the role workers share: a role's checkpoint state as a value that crosses the wire
// (RoleState), the forward passes over a chunk of rows in micro-batches (log-probs, entropy,
// sum_j pi_j^2; values), the data-parallel reductions inside a group (gradient averaging, metric
// reduction), the sampling settings as JSON (they travel in a request's meta_info) and an update's
// result (metrics and update counts in meta_info, as verl's workers return them).
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

#include "verl/core/error.hpp"
#include "verl/core/finite.hpp"
#include "verl/core/metrics.hpp"
#include "verl/data/data_proto.hpp"
#include "verl/hybridflow/wire.hpp"
#include "verl/model/causal_lm.hpp"
#include "verl/model/value_model.hpp"
#include "verl/optim/adamw.hpp"
#include "verl/optim/clip_grad_norm.hpp"
#include "verl/optim/lr_scheduler.hpp"
#include "verl/parallel/bucketed_all_reduce.hpp"
#include "verl/parallel/communicator.hpp"
#include "verl/rollout/sampling.hpp"
#include "verl/trainer/checkpoint.hpp"
#include "verl/trainer/workers/batch_keys.hpp"

namespace verl::trainer {

/// A role's checkpoint: its weights (name, shape, values), AdamW's moments and step, and extra
/// state (the learning-rate schedule's position).
struct RoleState {
  std::vector<NamedTensor> model;
  optim::AdamW::State optimizer;
  nlohmann::json extra = nlohmann::json::object();

  /// The checkpoint writer's view of it (spans into this object, which must outlive the view).
  [[nodiscard]] RoleSnapshot snapshot() const {
    RoleSnapshot role;
    for (const auto& t : model) role.model.push_back(TensorRef{t.name, t.shape, std::span<const float>(t.values)});
    role.optimizer = &optimizer;
    role.extra = extra;
    return role;
  }
  static RoleState from(const LoadedRole& loaded, std::string_view role_name) {
    // The trainer always saves the optimizer's moments: fresh ones would silently change the run.
    VERL_CHECK_ARG(loaded.optimizer.has_value(),
                   "checkpoint role '{}': no optimizer state (optim.safetensors); a damaged checkpoint is not resumed",
                   role_name);
    return RoleState{loaded.model, *loaded.optimizer, loaded.extra};
  }
};

/// A policy's weights (name, shape, values), as the actor hands them to a rollout of its own.
struct PolicyWeights {
  std::vector<NamedTensor> tensors;
};

template <class M>
PolicyWeights weights_of(const M& model) {
  PolicyWeights out;
  const_cast<M&>(model).for_each_parameter([&](const auto& p) {
    out.tensors.push_back(NamedTensor{std::string(p.name), std::vector<std::int64_t>(p.shape.begin(), p.shape.end()),
                                      std::vector<float>(p.value.begin(), p.value.end())});
  });
  return out;
}

/// Sets every parameter of `model` from `weights` (each must be there, with its shape, finite);
/// `role` names the receiver in errors.
template <class M>
void load_weights(M& model, const PolicyWeights& weights, std::string_view role) {
  LoadedRole loaded;
  loaded.model = weights.tensors;
  model.for_each_parameter([&](const auto& p) {
    loaded.tensor(p.name).copy_to(p.value, p.shape);
    using Scalar = std::remove_cvref_t<decltype(p.value[0])>;
    if (const auto bad = first_non_finite(std::span<const Scalar>(p.value.data(), p.value.size())))
      ::verl::detail::throw_invalid_argument("{}: weights: tensor '{}': expected finite values, got {} at index {}", role,
                                             p.name, p.value[*bad], *bad);
  });
}

template <class M>
std::vector<optim::ParameterRef> parameter_refs(M& model) {
  std::vector<optim::ParameterRef> refs;
  model.for_each_parameter([&](const auto& p) { refs.push_back({p.value, p.grad, p.name}); });
  return refs;
}

template <class M>
RoleState role_state_of(const M& model, const optim::AdamW& optimizer, const optim::LrScheduler<>& scheduler) {
  RoleState state;
  const_cast<M&>(model).for_each_parameter([&](const auto& p) {
    state.model.push_back(NamedTensor{std::string(p.name), std::vector<std::int64_t>(p.shape.begin(), p.shape.end()),
                                      std::vector<float>(p.value.begin(), p.value.end())});
  });
  state.optimizer = optimizer.state();
  state.extra = {{"lr_scheduler_last_epoch", scheduler.last_epoch()}};
  return state;
}

/// Restores weights (refusing non-finite ones: a damaged checkpoint is never resumed quietly),
/// the optimizer's moments and the schedule's position.
template <class M>
void restore_role_state(const RoleState& state, M& model, optim::AdamW& optimizer, optim::LrScheduler<>& scheduler,
                        std::string_view role_name) {
  LoadedRole loaded;
  loaded.model = state.model;
  model.for_each_parameter([&](const auto& p) {
    loaded.tensor(p.name).copy_to(p.value, p.shape);
    using Scalar = std::remove_cvref_t<decltype(p.value[0])>;
    if (const auto bad = first_non_finite(std::span<const Scalar>(p.value.data(), p.value.size())))
      ::verl::detail::throw_invalid_argument(
          "checkpoint role '{}': tensor '{}': expected finite weights, got {} at index {} (a damaged checkpoint is "
          "not resumed)",
          role_name, p.name, p.value[*bad], *bad);
  });
  optimizer.load_state(state.optimizer);
  VERL_CHECK_ARG(state.extra.contains("lr_scheduler_last_epoch"),
                 "checkpoint role '{}': extra_state.json has no lr_scheduler_last_epoch", role_name);
  scheduler.set_last_epoch(state.extra["lr_scheduler_last_epoch"].template get<std::int64_t>());
}

/// A forward pass's micro-batch size on one rank: the per-GPU key, else the global key over the
/// data-parallel ranks, else every row at once.
inline Index forward_micro_batch_size(std::optional<std::int64_t> per_gpu, std::optional<std::int64_t> global, Index dp,
                                      Index rows) {
  if (per_gpu) return *per_gpu;
  if (global) return std::max<std::int64_t>(1, *global / dp);
  return std::max<Index>(rows, 1);
}

/// What a log-prob pass computes besides the log-probs.
struct StatisticsWanted {
  bool entropy = false;
  bool sum_pi_squared = false;
};
/// Per response token: log-probs (masked), and the entropy and sum_j pi_j^2 when asked (else empty).
struct ResponseStatistics {
  MatrixF log_probs, entropy, sum_pi_squared;
};

/// Log-probs (and what `wanted` adds) of every row's response under `model` at `temperature`, in
/// micro-batches of `micro` rows.
template <class M>
ResponseStatistics response_statistics(M& model, const data::DataProto& batch, StatisticsWanted wanted, Index micro,
                                       float temperature) {
  const MatrixF& response_mask = float_column(batch, keys::response_mask);
  const Index rows = batch.size(), width = response_mask.cols();
  ResponseStatistics result;
  result.log_probs = MatrixF(rows, width);
  if (wanted.entropy) result.entropy = MatrixF::Zero(rows, width);
  if (wanted.sum_pi_squared) result.sum_pi_squared = MatrixF::Zero(rows, width);
  for (Index b = 0; b < rows; b += micro) {
    const Index e = std::min(rows, b + micro);
    const auto tokens = token_batch(batch, b, e);
    const MatrixI64 targets = model::next_token_targets(tokens);
    const auto out = model.forward(tokens, {.targets = std::span<const std::int64_t>(targets.data(), static_cast<std::size_t>(targets.size())),
                                            .return_entropy = wanted.entropy,
                                            .return_sum_pi_squared = wanted.sum_pi_squared,
                                            .temperature = temperature});
    const auto mask = response_mask.middleRows(b, e - b);
    result.log_probs.middleRows(b, e - b) = response_block(out.log_probs, width).cwiseProduct(mask);
    if (wanted.entropy) result.entropy.middleRows(b, e - b) = response_block(out.entropy, width);
    if (wanted.sum_pi_squared) {
      VERL_CHECK_ARG(out.sum_pi_squared.rows() == out.log_probs.rows() && out.sum_pi_squared.cols() == out.log_probs.cols(),
                     "actor_rollout_ref.actor.calculate_sum_pi_squared: the actor model returned no sum_pi_squared "
                     "(its forward must honour ForwardOptions::return_sum_pi_squared)");
      result.sum_pi_squared.middleRows(b, e - b) = response_block(out.sum_pi_squared, width).cwiseProduct(mask);
    }
  }
  return result;
}

/// The value model's estimate at every response token (masked), in micro-batches of `micro` rows.
template <class Critic>
MatrixF response_values(Critic& critic, const data::DataProto& batch, Index micro) {
  const MatrixF& response_mask = float_column(batch, keys::response_mask);
  const Index rows = batch.size(), width = response_mask.cols();
  MatrixF values(rows, width);
  for (Index b = 0; b < rows; b += micro) {
    const Index e = std::min(rows, b + micro);
    const auto out = critic.forward(token_batch(batch, b, e), model::ValueForwardOptions{});
    values.middleRows(b, e - b) = response_block(out.values, width).cwiseProduct(response_mask.middleRows(b, e - b));
  }
  return values;
}

/// The data-parallel gradient reduce's bucket size (torch DDP's default bucket_cap_mb = 25).
inline constexpr std::int64_t gradient_bucket_bytes = std::int64_t{25} << 20;

/// Averages gradients over the group's ranks (the data-parallel gradient reduce), in buckets of
/// about gradient_bucket_bytes as DDP and Megatron's DDP reduce them: the many small tensors
/// (norms, biases) go in a few large all-reduces instead of one latency-bound call each; every
/// element is the same sum as a per-tensor all-reduce's.
template <parallel::Communicator C>
void average_gradients(C& group, std::vector<optim::ParameterRef>& refs) {
  std::vector<std::int64_t> numels;
  std::vector<std::span<float>> gradients;
  numels.reserve(refs.size());
  gradients.reserve(refs.size());
  for (auto& p : refs) {
    numels.push_back(static_cast<std::int64_t>(p.grad.size()));
    gradients.push_back(p.grad);
  }
  parallel::BucketedAllReduce<float> reduce(numels, gradient_bucket_bytes);
  reduce(group, std::span<const std::span<float>>(gradients), parallel::ReduceOp::sum);
  const float scale = 1.0f / static_cast<float>(group.size());
  for (auto& p : refs)
    for (float& g : p.grad) g *= scale;
}

/// Mean over the group's ranks of per-rank metrics (max / min for names that say so), as verl
/// gathers them; every rank ends with the same values.
template <parallel::Communicator C>
void reduce_metrics_over_ranks(C& group, Metrics& metrics) {
  std::vector<double> sums, maxes, mins;
  for (const auto& [k, v] : metrics) {
    (k.find("max") != std::string::npos ? maxes : k.find("min") != std::string::npos ? mins : sums).push_back(v);
  }
  group.all_reduce(std::span<double>(sums), parallel::ReduceOp::sum);
  group.all_reduce(std::span<double>(maxes), parallel::ReduceOp::max);
  group.all_reduce(std::span<double>(mins), parallel::ReduceOp::min);
  std::size_t s = 0, x = 0, m = 0;
  for (auto& [k, v] : metrics) {
    if (k.find("max") != std::string::npos) v = maxes[x++];
    else if (k.find("min") != std::string::npos) v = mins[m++];
    else v = sums[s++] / static_cast<double>(group.size());
  }
}

/// An update's result as verl's workers return it: a DataProto with no rows whose meta_info holds
/// "metrics" and, for the controller's non-finite-step accounting, "updates" and
/// "nonfinite_updates".
inline data::DataProto update_result(const Metrics& metrics, std::int64_t updates, std::int64_t nonfinite) {
  data::DataProto out;
  nlohmann::json m = nlohmann::json::object();
  for (const auto& [k, v] : metrics) m[k] = v;
  out.meta_info()["metrics"] = std::move(m);
  out.meta_info()["updates"] = updates;
  out.meta_info()["nonfinite_updates"] = nonfinite;
  return out;
}

/// Sampling settings as JSON, for a generation request's meta_info.
inline nlohmann::json sampling_params_to_json(const rollout::SamplingParams& p) {
  return {{"temperature", p.temperature}, {"top_k", p.top_k},
          {"top_p", p.top_p},             {"n", p.n},
          {"max_response_length", p.max_response_length},
          {"eos_token_ids", p.eos_token_ids},
          {"stop_token_ids", p.stop_token_ids},
          {"pad_token_id", p.pad_token_id},
          {"seed", p.seed}};
}

inline rollout::SamplingParams sampling_params_from_json(const nlohmann::json& j) {
  rollout::SamplingParams p;
  p.temperature = j.at("temperature").get<float>();
  p.top_k = j.at("top_k").get<std::int64_t>();
  p.top_p = j.at("top_p").get<float>();
  p.n = j.at("n").get<std::int64_t>();
  p.max_response_length = j.at("max_response_length").get<std::int64_t>();
  p.eos_token_ids = j.at("eos_token_ids").get<std::vector<model::TokenId>>();
  p.stop_token_ids = j.at("stop_token_ids").get<std::vector<model::TokenId>>();
  p.pad_token_id = j.at("pad_token_id").get<model::TokenId>();
  p.seed = j.at("seed").get<std::uint64_t>();
  return p;
}

}  // namespace verl::trainer

namespace verl::hybridflow {

namespace detail {
inline void write_tensors(WireWriter& w, const std::vector<trainer::NamedTensor>& tensors) {
  w.size(tensors.size());
  for (const auto& t : tensors) {
    hybridflow::write(w, t.name);
    hybridflow::write(w, t.shape);
    hybridflow::write(w, t.values);
  }
}
inline std::vector<trainer::NamedTensor> read_tensors(WireReader& r, std::string_view what) {
  std::vector<trainer::NamedTensor> out;
  const std::size_t tensors = r.size(what);
  for (std::size_t i = 0; i < tensors; ++i) {
    trainer::NamedTensor t;
    t.name = hybridflow::read<std::string>(r);
    t.shape = hybridflow::read<std::vector<std::int64_t>>(r);
    t.values = hybridflow::read<std::vector<float>>(r);
    out.push_back(std::move(t));
  }
  return out;
}
}  // namespace detail

template <>
struct WireCodec<trainer::PolicyWeights> {
  static void write(WireWriter& w, const trainer::PolicyWeights& weights) { detail::write_tensors(w, weights.tensors); }
  static trainer::PolicyWeights read(WireReader& r) {
    return trainer::PolicyWeights{detail::read_tensors(r, "PolicyWeights' tensor count")};
  }
};

template <>
struct WireCodec<trainer::RoleState> {
  static void write(WireWriter& w, const trainer::RoleState& state) {
    detail::write_tensors(w, state.model);
    hybridflow::write(w, state.optimizer.step);
    hybridflow::write(w, state.optimizer.exp_avg);
    hybridflow::write(w, state.optimizer.exp_avg_sq);
    hybridflow::write(w, state.extra);
  }
  static trainer::RoleState read(WireReader& r) {
    trainer::RoleState state;
    state.model = detail::read_tensors(r, "RoleState's tensor count");
    state.optimizer.step = hybridflow::read<std::int64_t>(r);
    state.optimizer.exp_avg = hybridflow::read<std::vector<std::vector<float>>>(r);
    state.optimizer.exp_avg_sq = hybridflow::read<std::vector<std::vector<float>>>(r);
    state.extra = hybridflow::read<nlohmann::json>(r);
    return state;
  }
};

}  // namespace verl::hybridflow
