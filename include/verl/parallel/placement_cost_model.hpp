// The cost model behind the placement search (HybridFlow §6, written our own way): what each
// role of an RL dataflow is (a transformer of a given shape), the batch it processes per step,
// the cluster it runs on, and — for one role on one mesh — its memory per device and the work of
// each of its stages as a `StageWork` vector, turned into seconds by a `DeviceModel`.
//
// Time of a stage (an additive roofline, per device):
//
//   t = flops / (e_c F) + hbm_bytes / (e_m B) + intra_bytes / (e_i L_intra)
//     + inter_bytes / (e_x L_inter) + collectives * lambda + calls * omega
//
// F = peak dense FLOP/s, B = HBM bandwidth, L = per-direction link bandwidth per device, e_* the
// achieved fractions, lambda the fixed latency of one collective and omega the fixed cost of one
// call (a dispatch: the controller's call into a worker group, one model pass, one optimizer
// step; collectives, the TP all-reduces per layer among them, are counted apart, with lambda).
// The sum (rather than the max of compute and memory) over-estimates a balanced stage by at most
// 2x but is linear in (1/e_c, 1/e_m, 1/e_i, 1/e_x, lambda, omega), so the factors can be fitted
// to measured stage times by linear least squares (`calibrate_efficiency`).
//
// FLOPs are charged by the role's head (`Head`): the actor and the reference multiply every
// token by the language-model head (hidden x vocab), the critic, reward and cost models by a
// value head (hidden x 1) instead.
#pragma once

#include <fmt/format.h>

#include <Eigen/Dense>

#include <array>
#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "verl/core/error.hpp"

namespace verl::parallel {

// ---- roles and their models -----------------------------------------------------------------

/// The models of an RL dataflow. The actor carries the rollout (generation) too: HybridFlow's
/// 3D-HybridEngine keeps them on the same devices and reshards between the two layouts.
enum class Role : std::uint8_t { actor, critic, reference, reward, cost };

inline constexpr std::array<std::string_view, 5> role_names{"actor", "critic", "reference", "reward", "cost"};

constexpr std::string_view role_name(Role role) noexcept { return role_names[static_cast<std::size_t>(role)]; }

/// Only the actor and the critic are updated; the others only run forward passes.
constexpr bool role_trains(Role role) noexcept { return role == Role::actor || role == Role::critic; }

/// Whether the role's forward pass produces per-token log-probabilities over the vocabulary
/// (actor, reference) rather than a scalar head (critic, reward, cost).
constexpr bool role_has_lm_head(Role role) noexcept { return role == Role::actor || role == Role::reference; }

/// The output head of a role's model: the language-model head (hidden -> vocab) of the actor
/// (and its rollout) and the reference; a value head (hidden -> 1, one scalar per token, as
/// transformers' *ForTokenClassification with num_labels = 1 that verl's critic and reward
/// models load) of the critic, the reward model and the cost model.
enum class Head : std::uint8_t { language_model, value };

constexpr Head role_head(Role role) noexcept { return role_has_lm_head(role) ? Head::language_model : Head::value; }

/// A decoder-only transformer's shape. Grouped-query attention: `kv_heads` divides `heads`.
struct ModelShape {
  double params = 0;  ///< parameter count
  std::int64_t layers = 0;
  std::int64_t heads = 0;
  std::int64_t kv_heads = 0;
  std::int64_t hidden = 0;
  std::int64_t ffn_hidden = 0;  ///< the MLP's inner size (SwiGLU's gate/up width)
  std::int64_t vocab = 0;

  constexpr std::int64_t head_dim() const noexcept { return hidden / heads; }
  /// Outputs per token of a head: vocab for the language-model head, 1 for a value head.
  constexpr std::int64_t head_outputs(Head head) const noexcept { return head == Head::language_model ? vocab : 1; }
  /// The language-model head's parameters, hidden x vocab. `params` is the causal LM's count,
  /// this head included (once, whether or not it is tied to the embedding).
  constexpr double lm_head_params() const noexcept { return static_cast<double>(hidden) * static_cast<double>(vocab); }
  /// The parameters a token is multiplied by in a forward pass with the given head: `params`
  /// for the language-model head (the shape is the causal LM's), and for a value head `params`
  /// with the hidden x vocab projection replaced by hidden x 1. A forward pass costs
  /// 2 * matmul_params FLOPs per token (the embedding is a lookup: for a tied model `params`
  /// counts it once, as the head; an untied model's embedding is counted too, for both heads).
  constexpr double matmul_params(Head head) const noexcept {
    if (head == Head::language_model) return params;
    return params - lm_head_params() + static_cast<double>(hidden) * static_cast<double>(head_outputs(head));
  }
  friend constexpr bool operator==(const ModelShape&, const ModelShape&) = default;
};

namespace detail {

inline void require_positive(double value, std::string_view name) {
  VERL_CHECK_ARG(std::isfinite(value) && value > 0, "{}: expected a positive finite number, got {}", name, value);
}
inline void require_positive(std::int64_t value, std::string_view name) {
  VERL_CHECK_ARG(value > 0, "{}: expected a positive integer, got {}", name, value);
}
inline void require_fraction(double value, std::string_view name) {
  VERL_CHECK_ARG(std::isfinite(value) && value > 0 && value <= 1, "{}: expected a number in (0, 1], got {}", name,
                 value);
}

}  // namespace detail

/// Refuses a shape that is not a transformer: every size positive, heads | hidden, kv_heads | heads,
/// and more parameters than the language-model head's hidden x vocab (the count includes it).
inline void validate_model_shape(const ModelShape& m, std::string_view name) {
  detail::require_positive(m.params, fmt::format("{}.params", name));
  detail::require_positive(m.layers, fmt::format("{}.layers", name));
  detail::require_positive(m.heads, fmt::format("{}.heads", name));
  detail::require_positive(m.kv_heads, fmt::format("{}.kv_heads", name));
  detail::require_positive(m.hidden, fmt::format("{}.hidden", name));
  detail::require_positive(m.ffn_hidden, fmt::format("{}.ffn_hidden", name));
  detail::require_positive(m.vocab, fmt::format("{}.vocab", name));
  VERL_CHECK_ARG(m.hidden % m.heads == 0, "{}.heads: expected a divisor of hidden {}, got {}", name, m.hidden, m.heads);
  VERL_CHECK_ARG(m.heads % m.kv_heads == 0, "{}.kv_heads: expected a divisor of heads {}, got {}", name, m.heads,
                 m.kv_heads);
  VERL_CHECK_ARG(m.params > m.lm_head_params(),
                 "{}.params: expected more than the language-model head's hidden x vocab = {} x {} = {:.6g} (the "
                 "count includes it), got {:.6g}",
                 name, m.hidden, m.vocab, m.lm_head_params(), m.params);
}

inline constexpr std::array<std::string_view, 3> model_preset_names{"llama-7b", "llama-13b", "llama-70b"};

/// Public Llama-2 shapes: 7B (32 layers, 32 heads, hidden 4096, MLP 11008), 13B (40, 40, 5120,
/// 13824), 70B (80 layers, 64 query heads and 8 KV heads, hidden 8192, MLP 28672); vocab 32000.
inline ModelShape model_preset(std::string_view name) {
  if (name == "llama-7b") return {6.74e9, 32, 32, 32, 4096, 11008, 32000};
  if (name == "llama-13b") return {13.02e9, 40, 40, 40, 5120, 13824, 32000};
  if (name == "llama-70b") return {68.98e9, 80, 64, 8, 8192, 28672, 32000};
  ::verl::detail::throw_invalid_argument("model: expected one of llama-7b, llama-13b, llama-70b, got '{}'", name);
}

// ---- the batch of one RL step ---------------------------------------------------------------

/// What one PPO step processes. Sequences are padded to prompt_length + response_length.
struct BatchShape {
  std::int64_t prompts = 1024;              ///< data.train_batch_size
  std::int64_t responses_per_prompt = 1;    ///< actor_rollout_ref.rollout.n
  std::int64_t prompt_length = 1024;
  std::int64_t response_length = 1024;
  std::int64_t ppo_epochs = 1;
  std::int64_t ppo_mini_batches = 4;        ///< optimizer steps per epoch
  std::int64_t micro_batch_sequences = 4;   ///< sequences per forward/backward per data-parallel rank

  constexpr std::int64_t sequences() const noexcept { return prompts * responses_per_prompt; }
  constexpr std::int64_t sequence_length() const noexcept { return prompt_length + response_length; }
  double tokens() const noexcept { return static_cast<double>(sequences()) * static_cast<double>(sequence_length()); }
};

inline void validate_batch(const BatchShape& b) {
  detail::require_positive(b.prompts, "batch.prompts");
  detail::require_positive(b.responses_per_prompt, "batch.responses_per_prompt");
  detail::require_positive(b.prompt_length, "batch.prompt_length");
  detail::require_positive(b.response_length, "batch.response_length");
  detail::require_positive(b.ppo_epochs, "batch.ppo_epochs");
  detail::require_positive(b.ppo_mini_batches, "batch.ppo_mini_batches");
  detail::require_positive(b.micro_batch_sequences, "batch.micro_batch_sequences");
}

// ---- bytes per element ----------------------------------------------------------------------

/// Bytes held per parameter and per activation element. The defaults are verl's Megatron
/// engine's: bf16 weights, fp32 gradient buffers, Adam in fp32 (master copy, m, v: 12 bytes),
/// sharded over data parallelism (`use_distributed_optimizer: true`, ZeRO-1).
struct MemoryModel {
  double param_bytes = 2;
  double grad_bytes = 4;
  double optimizer_bytes = 12;
  double activation_bytes = 2;
  double kv_cache_bytes = 2;
  bool distributed_optimizer = true;
  /// Part of each device's memory kept free for the CUDA context, communication buffers and
  /// fragmentation; plans are checked against (1 - reserved_fraction) * memory.
  double reserved_fraction = 0.1;
};

inline void validate_memory_model(const MemoryModel& m) {
  detail::require_positive(m.param_bytes, "memory.param_bytes");
  detail::require_positive(m.grad_bytes, "memory.grad_bytes");
  VERL_CHECK_ARG(std::isfinite(m.optimizer_bytes) && m.optimizer_bytes >= 0,
                 "memory.optimizer_bytes: expected a finite number >= 0, got {}", m.optimizer_bytes);
  detail::require_positive(m.activation_bytes, "memory.activation_bytes");
  detail::require_positive(m.kv_cache_bytes, "memory.kv_cache_bytes");
  VERL_CHECK_ARG(std::isfinite(m.reserved_fraction) && m.reserved_fraction >= 0 && m.reserved_fraction < 1,
                 "memory.reserved_fraction: expected a number in [0, 1), got {}", m.reserved_fraction);
}

// ---- the cluster ----------------------------------------------------------------------------

/// Devices and their peak figures. Link bandwidths are per device and per direction.
struct ClusterSpec {
  std::int64_t devices = 0;
  std::int64_t devices_per_node = 8;
  double memory_bytes = 0;
  double peak_flops = 0;            ///< dense bf16 FLOP/s
  double hbm_bandwidth = 0;         ///< bytes/s
  double intra_node_bandwidth = 0;  ///< bytes/s per device per direction (NVLink)
  double inter_node_bandwidth = 0;  ///< bytes/s per device per direction (InfiniBand)
};

inline void validate_cluster(const ClusterSpec& c) {
  detail::require_positive(c.devices, "cluster.devices");
  detail::require_positive(c.devices_per_node, "cluster.devices_per_node");
  detail::require_positive(c.memory_bytes, "cluster.memory_bytes");
  detail::require_positive(c.peak_flops, "cluster.peak_flops");
  detail::require_positive(c.hbm_bandwidth, "cluster.hbm_bandwidth");
  detail::require_positive(c.intra_node_bandwidth, "cluster.intra_node_bandwidth");
  detail::require_positive(c.inter_node_bandwidth, "cluster.inter_node_bandwidth");
}

inline constexpr std::array<std::string_view, 2> cluster_preset_names{"a100-80gb", "h100-80gb"};

/// Public datasheet figures, 8 devices per node:
///  - a100-80gb (A100 SXM4 80GB, DGX A100): 312 TFLOP/s dense bf16, 2039 GB/s HBM2e, NVLink 3 at
///    600 GB/s bidirectional = 300 GB/s per direction, one 200 Gb/s HDR InfiniBand port per GPU
///    = 25 GB/s; 80 GiB.
///  - h100-80gb (H100 SXM5 80GB, DGX H100): 989 TFLOP/s dense bf16, 3.35 TB/s HBM3, NVLink 4 at
///    900 GB/s bidirectional = 450 GB/s per direction, one 400 Gb/s NDR port per GPU = 50 GB/s;
///    80 GiB.
/// Both are used with `Efficiency`'s defaults, among them 1 ms per call (`call_overhead`).
inline ClusterSpec cluster_preset(std::string_view name, std::int64_t devices) {
  constexpr double gib = 1024.0 * 1024.0 * 1024.0;
  if (name == "a100-80gb") return {devices, 8, 80 * gib, 312e12, 2039e9, 300e9, 25e9};
  if (name == "h100-80gb") return {devices, 8, 80 * gib, 989e12, 3.35e12, 450e9, 50e9};
  ::verl::detail::throw_invalid_argument("cluster: expected one of a100-80gb, h100-80gb, got '{}'", name);
}

// ---- work and time --------------------------------------------------------------------------

/// The work of one stage on one device.
struct StageWork {
  double flops = 0;
  double hbm_bytes = 0;
  double intra_node_bytes = 0;
  double inter_node_bytes = 0;
  double collectives = 0;
  double calls = 0;  ///< dispatches, each with a fixed cost (`Efficiency::call_overhead`)

  constexpr StageWork& operator+=(const StageWork& o) noexcept {
    flops += o.flops;
    hbm_bytes += o.hbm_bytes;
    intra_node_bytes += o.intra_node_bytes;
    inter_node_bytes += o.inter_node_bytes;
    collectives += o.collectives;
    calls += o.calls;
    return *this;
  }
  /// Whether any amount is non-zero (a reshard between identical layouts has none).
  constexpr bool any() const noexcept {
    return flops > 0 || hbm_bytes > 0 || intra_node_bytes > 0 || inter_node_bytes > 0 || collectives > 0 || calls > 0;
  }
  friend constexpr StageWork operator+(StageWork a, const StageWork& b) noexcept { return a += b; }
  /// Bytes over the link a communication group uses: NVLink when it fits in a node.
  constexpr void add_link_bytes(double bytes, bool intra_node) noexcept {
    (intra_node ? intra_node_bytes : inter_node_bytes) += bytes;
  }
};

/// Achieved fractions of the peak figures, the latency of one collective and the fixed cost of
/// one call, in seconds. The defaults are typical of Megatron training on A100/H100 (about half
/// the peak FLOP/s), and are what the presets `a100-80gb` and `h100-80gb` are used with; set
/// them by hand or fit them with `calibrate_efficiency`.
///
/// `call_overhead` (1 ms by default, for both presets: it is spent on the host, not the GPU) is
/// the order of one dispatch of an eager PyTorch/Megatron micro-batch pass or of one decode step
/// of a vLLM-style engine (scheduling, sampling, launches); verl's Ray call into a worker group
/// costs more, but there is one per stage. An assumption, not a measurement on these GPUs; on
/// verl-cpp's HybridFlow runtime an empty worker-group call costs 2.2 ms at two ranks on this
/// repository's 2-core machine (bench/RESULTS.md), and `verl_plan --calibrate` fits it.
struct Efficiency {
  double compute = 0.5;
  double memory = 0.8;
  double intra_node = 0.7;
  double inter_node = 0.7;
  double collective_latency = 10e-6;
  double call_overhead = 1e-3;
};

inline void validate_efficiency(const Efficiency& e) {
  detail::require_fraction(e.compute, "efficiency.compute");
  detail::require_fraction(e.memory, "efficiency.memory");
  detail::require_fraction(e.intra_node, "efficiency.intra_node");
  detail::require_fraction(e.inter_node, "efficiency.inter_node");
  VERL_CHECK_ARG(std::isfinite(e.collective_latency) && e.collective_latency >= 0,
                 "efficiency.collective_latency: expected a finite number of seconds >= 0, got {}",
                 e.collective_latency);
  VERL_CHECK_ARG(std::isfinite(e.call_overhead) && e.call_overhead >= 0,
                 "efficiency.call_overhead: expected a finite number of seconds >= 0, got {}", e.call_overhead);
}

/// Turns work into seconds.
struct DeviceModel {
  ClusterSpec cluster;
  Efficiency efficiency;

  double seconds(const StageWork& w) const noexcept {
    return w.flops / (efficiency.compute * cluster.peak_flops) + w.hbm_bytes / (efficiency.memory * cluster.hbm_bandwidth) +
           w.intra_node_bytes / (efficiency.intra_node * cluster.intra_node_bandwidth) +
           w.inter_node_bytes / (efficiency.inter_node * cluster.inter_node_bandwidth) +
           w.collectives * efficiency.collective_latency + w.calls * efficiency.call_overhead;
  }
};

// ---- calibration ----------------------------------------------------------------------------

/// One measured stage: its work (from the cost model, for the layout it ran under) and its time.
struct StageMeasurement {
  StageWork work;
  double seconds = 0;
};

/// The unknowns of a fit, in order: x = (1/e_c, 1/e_m, 1/e_i, 1/e_x, lambda, omega), named by
/// the `Efficiency` member each one sets.
inline constexpr std::size_t efficiency_unknowns = 6;
inline constexpr std::array<std::string_view, efficiency_unknowns> efficiency_unknown_names{
    "compute", "memory", "intra_node", "inter_node", "collective_latency", "call_overhead"};

namespace detail {

/// A stage's row of the fit: the time each unknown multiplies,
/// (flops/F, hbm/B, intra/L_intra, inter/L_inter, collectives, calls).
inline std::array<double, efficiency_unknowns> fit_columns(const ClusterSpec& cluster, const StageWork& w) noexcept {
  return {w.flops / cluster.peak_flops,
          w.hbm_bytes / cluster.hbm_bandwidth,
          w.intra_node_bytes / cluster.intra_node_bandwidth,
          w.inter_node_bytes / cluster.inter_node_bandwidth,
          w.collectives,
          w.calls};
}

/// Checks the measurements (finite non-negative work, positive finite times) and returns which
/// unknowns any of them exercises (a non-zero column).
inline std::array<bool, efficiency_unknowns> exercised_unknowns(const ClusterSpec& cluster,
                                                                std::span<const StageMeasurement> measurements) {
  std::array<bool, efficiency_unknowns> used{};
  for (std::size_t i = 0; i < measurements.size(); ++i) {
    const StageMeasurement& m = measurements[i];
    const std::array<double, efficiency_unknowns> a = fit_columns(cluster, m.work);
    for (std::size_t k = 0; k < efficiency_unknowns; ++k) {
      VERL_CHECK_ARG(std::isfinite(a[k]) && a[k] >= 0,
                     "measurements[{}].work: expected finite non-negative amounts, got {} for {}", i, a[k],
                     efficiency_unknown_names[k]);
      used[k] = used[k] || a[k] > 0;
    }
    VERL_CHECK_ARG(std::isfinite(m.seconds) && m.seconds > 0,
                   "measurements[{}].seconds: expected a positive finite time, got {}", i, m.seconds);
  }
  return used;
}

}  // namespace detail

/// Fits the efficiency factors to measured stage times by linear least squares on the
/// unknowns x = (1/e_c, 1/e_m, 1/e_i, 1/e_x, lambda, omega): each measurement gives one
/// equation seconds = sum_k a_k x_k with a = (flops/F, hbm/B, intra/L_intra, inter/L_inter,
/// collectives, calls). Factors that no measurement exercises (their column is zero) keep their
/// value in `initial`. Throws when there are fewer measurements than factors to fit, when they
/// do not determine the factors (rank-deficient), or when a fitted factor is not a fraction in
/// (0, 1] (lambda, omega >= 0).
inline Efficiency calibrate_efficiency(const ClusterSpec& cluster, std::span<const StageMeasurement> measurements,
                                       const Efficiency& initial = {}) {
  validate_cluster(cluster);
  validate_efficiency(initial);
  const std::array<bool, efficiency_unknowns> used = detail::exercised_unknowns(cluster, measurements);
  std::vector<std::size_t> free;
  for (std::size_t k = 0; k < efficiency_unknowns; ++k) {
    if (used[k]) free.push_back(k);
  }
  VERL_CHECK_ARG(!free.empty(), "measurements: expected at least one with non-zero work, got {}", measurements.size());
  VERL_CHECK_ARG(measurements.size() >= free.size(),
                 "measurements: expected at least {} (one per factor exercised), got {}", free.size(),
                 measurements.size());
  // Rows are scaled by 1/seconds so that the fit minimises relative errors: a long stage does
  // not drown the short ones.
  Eigen::MatrixXd a(static_cast<Eigen::Index>(measurements.size()), static_cast<Eigen::Index>(free.size()));
  Eigen::VectorXd b(static_cast<Eigen::Index>(measurements.size()));
  for (std::size_t i = 0; i < measurements.size(); ++i) {
    const std::array<double, efficiency_unknowns> row = detail::fit_columns(cluster, measurements[i].work);
    for (std::size_t j = 0; j < free.size(); ++j) {
      a(static_cast<Eigen::Index>(i), static_cast<Eigen::Index>(j)) = row[free[j]] / measurements[i].seconds;
    }
    b(static_cast<Eigen::Index>(i)) = 1.0;
  }
  // Columns are scaled to unit norm so that the rank test compares like with like.
  Eigen::VectorXd norms = a.colwise().norm().transpose();
  for (Eigen::Index j = 0; j < a.cols(); ++j) a.col(j) /= norms(j);
  const Eigen::ColPivHouseholderQR<Eigen::MatrixXd> qr(a);
  VERL_CHECK_ARG(qr.rank() == a.cols(),
                 "measurements: expected work vectors that determine the {} factors exercised, got rank {} "
                 "(vary the stages' mix of compute, memory and communication)",
                 a.cols(), qr.rank());
  const Eigen::VectorXd x = qr.solve(b).cwiseQuotient(norms);
  // Factors not fitted keep their initial value exactly (no round trip through 1/x).
  Efficiency fitted = initial;
  std::array<double*, 4> factors{&fitted.compute, &fitted.memory, &fitted.intra_node, &fitted.inter_node};
  for (std::size_t j = 0; j < free.size(); ++j) {
    const double v = x(static_cast<Eigen::Index>(j));
    if (free[j] < 4) {
      *factors[free[j]] = 1 / v;
    } else if (free[j] == 4) {
      fitted.collective_latency = v;
    } else {
      fitted.call_overhead = v;
    }
  }
  for (std::size_t k = 0; k < 4; ++k) {
    const double factor = *factors[k];
    VERL_CHECK_ARG(std::isfinite(factor) && factor > 0 && factor <= 1 + 1e-9,
                   "measurements: the fitted efficiency.{} is {}, expected a fraction in (0, 1] (are the work "
                   "vectors and the cluster's peak figures consistent?)",
                   efficiency_unknown_names[k], factor);
  }
  VERL_CHECK_ARG(fitted.collective_latency >= -1e-12,
                 "measurements: the fitted efficiency.collective_latency is {} s, expected >= 0",
                 fitted.collective_latency);
  VERL_CHECK_ARG(fitted.call_overhead >= -1e-12, "measurements: the fitted efficiency.call_overhead is {} s, expected >= 0",
                 fitted.call_overhead);
  fitted.collective_latency = std::max(fitted.collective_latency, 0.0);
  fitted.call_overhead = std::max(fitted.call_overhead, 0.0);
  return fitted;
}

// ---- one role on one mesh -------------------------------------------------------------------

/// A role's training (or forward) layout: pp * tp * dp devices, with full activation
/// recomputation or without.
struct TrainMesh {
  std::int64_t pp = 1, tp = 1, dp = 1;
  bool recompute = false;
  constexpr std::int64_t devices() const noexcept { return pp * tp * dp; }
  friend constexpr auto operator<=>(const TrainMesh&, const TrainMesh&) = default;
};

/// The actor's generation layout over the same devices (HybridFlow §5.4: tg | tp, pg | pp).
struct GenMesh {
  std::int64_t pp = 1, tp = 1, dp = 1;
  friend constexpr auto operator<=>(const GenMesh&, const GenMesh&) = default;
};

/// The cost model's formulas for one role of a given shape, on a batch, under a memory model,
/// on a cluster, with the role's output head. Everything is per device. Notation: P parameters,
/// L layers, h hidden, f MLP width, V vocabulary, H the head's outputs per token (V for the
/// language-model head, 1 for a value head), P_H = P - h V + h H the parameters a token is
/// multiplied by (`ModelShape::matmul_params`), S sequences of length T = prompt + response,
/// mb sequences per micro-batch, a activation bytes.
struct RoleCostModel {
  ModelShape model;
  BatchShape batch;
  MemoryModel memory;
  ClusterSpec cluster;
  Head head = Head::language_model;  ///< `role_head(role)`

  /// The cost model of `role`: its head is the role's (`role_head`).
  static RoleCostModel of(Role role, const ModelShape& model, const BatchShape& batch, const MemoryModel& memory,
                          const ClusterSpec& cluster) {
    return {model, batch, memory, cluster, role_head(role)};
  }

  static double ceil_div(double a, double b) noexcept { return std::ceil(a / b); }
  double seq_len() const noexcept { return static_cast<double>(batch.sequence_length()); }
  double layers() const noexcept { return static_cast<double>(model.layers); }
  double hidden() const noexcept { return static_cast<double>(model.hidden); }
  /// A group of `span` consecutive devices talks over NVLink when it fits in one node (pools
  /// are placed on node boundaries).
  bool intra_node(std::int64_t span) const noexcept { return span <= cluster.devices_per_node; }
  double ring_factor(std::int64_t n) const noexcept { return 2.0 * static_cast<double>(n - 1) / static_cast<double>(n); }

  // ---- memory ----
  /// Bytes of the weights a training (or forward) device holds: P * param_bytes / (tp * pp).
  double weight_shard_bytes(const TrainMesh& m) const noexcept {
    return model.params * memory.param_bytes / static_cast<double>(m.tp * m.pp);
  }
  /// Parameters, gradients and optimizer state held for the whole step:
  ///   trains:  P/(tp pp) * (param_bytes + grad_bytes + optimizer_bytes / (distributed ? dp : 1))
  ///   forward: P/(tp pp) * param_bytes
  double persistent_bytes(const TrainMesh& m, bool trains) const noexcept {
    const double shard = model.params / static_cast<double>(m.tp * m.pp);
    if (!trains) return shard * memory.param_bytes;
    const double optimizer_shards = memory.distributed_optimizer ? static_cast<double>(m.dp) : 1.0;
    return shard * (memory.param_bytes + memory.grad_bytes + memory.optimizer_bytes / optimizer_shards);
  }
  /// Activations a decoder layer keeps for backward, per token (pre-norm, flash attention, so
  /// no T x T scores; SwiGLU MLP; sequence parallel shards them over tp):
  ///   a * (6 h + 2 kv_heads head_dim + 3 f) / tp
  /// (norm inputs 2h, QKV input h, Q h, K and V 2 kv head_dim, attention output h, MLP input h,
  /// gate and up 2f, their product f).
  double activation_bytes_per_token_layer(std::int64_t tp) const noexcept {
    const double kv_width = 2.0 * static_cast<double>(model.kv_heads * model.head_dim());
    return memory.activation_bytes * (6 * hidden() + kv_width + 3 * static_cast<double>(model.ffn_hidden)) /
           static_cast<double>(tp);
  }
  /// The head's fp32 outputs (and their gradient when training) of one micro-batch:
  /// mb T H 4 (x2) bytes, the language-model head's logits split over tp (vocabulary parallel),
  /// a value head's one value per token whole on every tp rank.
  double logits_bytes(const TrainMesh& m, bool trains) const noexcept {
    const double tokens = static_cast<double>(batch.micro_batch_sequences) * seq_len();
    const double outputs = head == Head::language_model
                               ? static_cast<double>(model.vocab) / static_cast<double>(m.tp)
                               : static_cast<double>(model.head_outputs(head));
    return tokens * outputs * 4.0 * (trains ? 2.0 : 1.0);
  }
  std::int64_t update_micro_batches(const TrainMesh& m) const noexcept {
    const double per_rank = ceil_div(static_cast<double>(batch.sequences()),
                                     static_cast<double>(batch.ppo_mini_batches * m.dp));
    return static_cast<std::int64_t>(ceil_div(per_rank, static_cast<double>(batch.micro_batch_sequences)));
  }
  std::int64_t forward_micro_batches(const TrainMesh& m) const noexcept {
    const double per_rank = ceil_div(static_cast<double>(batch.sequences()), static_cast<double>(m.dp));
    return static_cast<std::int64_t>(ceil_div(per_rank, static_cast<double>(batch.micro_batch_sequences)));
  }
  /// Forward only: one layer's activations of one micro-batch, plus its head's outputs.
  double forward_transient_bytes(const TrainMesh& m) const noexcept {
    const double tokens = static_cast<double>(batch.micro_batch_sequences) * seq_len();
    return tokens * activation_bytes_per_token_layer(m.tp) + logits_bytes(m, false);
  }
  /// Update (1F1B): the first stage holds k = min(pp, micro-batches) micro-batches of its L/pp
  /// layers. Without recompute each keeps every layer's activations; with full recompute only
  /// each layer's input (a h / tp per token), plus one layer recomputed during backward.
  double update_transient_bytes(const TrainMesh& m) const noexcept {
    const double tokens = static_cast<double>(batch.micro_batch_sequences) * seq_len();
    const double in_flight = static_cast<double>(std::min(m.pp, update_micro_batches(m)));
    const double stage_layers = layers() / static_cast<double>(m.pp);
    const double per_layer = activation_bytes_per_token_layer(m.tp);
    const double kept = m.recompute ? in_flight * tokens * stage_layers * memory.activation_bytes * hidden() /
                                              static_cast<double>(m.tp) +
                                          tokens * per_layer
                                    : in_flight * tokens * stage_layers * per_layer;
    return kept + logits_bytes(m, true);
  }
  /// KV cache of one sequence on one generation device: T * (L / pg) * 2 * ceil(kv_heads / tg)
  /// * head_dim * kv_bytes (KV heads are replicated when tg exceeds them).
  double kv_bytes_per_sequence(const GenMesh& g) const noexcept {
    return seq_len() * kv_bytes_per_token(g);
  }
  double kv_bytes_per_token(const GenMesh& g) const noexcept {
    const double kv_heads_per_device = std::ceil(static_cast<double>(model.kv_heads) / static_cast<double>(g.tp));
    return layers() / static_cast<double>(g.pp) * 2.0 * kv_heads_per_device * static_cast<double>(model.head_dim()) *
           memory.kv_cache_bytes;
  }

  // ---- work ----
  /// A forward pass over the whole batch (log-probs, reference, values, rewards): per device
  ///   flops = 2 P_H (S/dp) T / (tp pp) * (m + pp - 1) / m    (m micro-batches, the PP bubble)
  ///   hbm   = P param_bytes / (tp pp) * (m + pp - 1)           (weights read per micro-step)
  ///   TP    = 2 all-reduces per layer of (S/dp) T h a bytes, ring: 2 (tp-1)/tp of it
  ///   PP    = the stage's output, (S/dp) T h a / tp bytes, once
  ///   calls = 1 + (m + pp - 1): the controller's call into the worker group, and one pass per
  ///           micro-step (the bubble's idle micro-steps wait out a pass, as the other terms
  ///           charge them); `forward_calls`
  StageWork forward_work(const TrainMesh& m) const noexcept {
    const double seqs = ceil_div(static_cast<double>(batch.sequences()), static_cast<double>(m.dp));
    const double micro = static_cast<double>(forward_micro_batches(m));
    StageWork w = pass_work(m, seqs, micro, 2.0, 1.0, 2.0);
    w.calls = forward_calls(m);
    return w;
  }
  /// The calls of a forward stage: 1 + forward micro-batches + pp - 1.
  double forward_calls(const TrainMesh& m) const noexcept {
    return 1 + static_cast<double>(forward_micro_batches(m) + m.pp - 1);
  }
  /// The calls of an update stage: 1 + epochs * mini-batches * (update micro-batches + pp - 1
  /// passes + 1 optimizer step).
  double update_calls(const TrainMesh& m) const noexcept {
    return 1 + static_cast<double>(batch.ppo_epochs * batch.ppo_mini_batches) *
                   static_cast<double>(update_micro_batches(m) + m.pp - 1 + 1);
  }
  /// The calls of generation with `concurrency` sequences in flight per replica:
  /// 1 + waves * (response + 1) * pg (the prefill and every decode step of each wave, once per
  /// pipeline micro-batch in flight).
  double generation_calls(const GenMesh& g, double concurrency) const noexcept {
    const double seqs = ceil_div(static_cast<double>(batch.sequences()), static_cast<double>(g.dp));
    const double waves = ceil_div(seqs, concurrency);
    return 1 + waves * (static_cast<double>(batch.response_length) + 1) * static_cast<double>(g.pp);
  }
  /// The PPO update of a training role, for every epoch and mini-batch: per mini-batch
  ///   flops = (6 or 8 with recompute) P_H (S/(mb dp)) T / (tp pp) * bubble
  ///   hbm   = weights read (3 or 4 times) per micro-step + the optimizer step's state traffic
  ///           P/(tp pp) * (2 param + grad + 2 optimizer / shards) bytes
  ///   TP    = 4 (6 with recompute) all-reduces per layer; PP: forward and backward boundaries
  ///   DP    = gradients: reduce-scatter + parameter all-gather (distributed optimizer), or an
  ///           all-reduce: (dp-1)/dp (grad + param) or 2 (dp-1)/dp grad bytes of P/(tp pp)
  ///   calls = a pass per micro-step (m + pp - 1) and the optimizer step; plus, once, the
  ///           controller's call into the worker group (`update_calls`)
  StageWork update_work(const TrainMesh& m) const noexcept {
    const double steps = static_cast<double>(batch.ppo_epochs * batch.ppo_mini_batches);
    const double seqs = ceil_div(static_cast<double>(batch.sequences()),
                                 static_cast<double>(batch.ppo_mini_batches * m.dp));
    const double micro = static_cast<double>(update_micro_batches(m));
    StageWork mini = pass_work(m, seqs, micro, m.recompute ? 8.0 : 6.0, m.recompute ? 4.0 : 3.0,
                               m.recompute ? 6.0 : 4.0);
    const double shard = model.params / static_cast<double>(m.tp * m.pp);
    const double optimizer_shards = memory.distributed_optimizer ? static_cast<double>(m.dp) : 1.0;
    mini.hbm_bytes += shard * (2 * memory.param_bytes + memory.grad_bytes + 2 * memory.optimizer_bytes / optimizer_shards);
    if (m.dp > 1) {
      const double dp = static_cast<double>(m.dp);
      const double bytes = memory.distributed_optimizer ? (dp - 1) / dp * (memory.grad_bytes + memory.param_bytes) * shard
                                                        : ring_factor(m.dp) * memory.grad_bytes * shard;
      mini.add_link_bytes(bytes, intra_node(m.tp * m.dp));
      mini.collectives += 2;
    }
    StageWork total;
    total.flops = mini.flops * steps;
    total.hbm_bytes = mini.hbm_bytes * steps;
    total.intra_node_bytes = mini.intra_node_bytes * steps;
    total.inter_node_bytes = mini.inter_node_bytes * steps;
    total.collectives = mini.collectives * steps;
    total.calls = update_calls(m);
    return total;
  }
  /// Generation on the actor's generation mesh (pg, tg, dg) with `concurrency` sequences in
  /// flight per replica (the KV cache that fits), in waves of that size. Each replica serves
  /// S_r = ceil(S / dg) sequences in w = ceil(S_r / c) waves:
  ///   prefill flops 2 P S_r prompt / (tg pg); decode flops 2 P S_r response / (tg pg)
  ///   hbm: every decode step of a wave reads the device's weights once per pipeline
  ///        micro-batch, pg of them in flight: w (response + 1) P param_bytes / tg; plus the KV
  ///        cache read, S_r response (prompt + (response + 1)/2) * kv bytes per token per device
  ///   TP: 2 all-reduces per layer per token (S_r T tokens), latency 2 L per wave step
  ///   PP: the stage's output per token, latency pg per wave step
  ///   calls: the controller's call, and a pass per wave step and pipeline micro-batch,
  ///          1 + w (response + 1) pg (`generation_calls`).
  /// Decode reads the weights per step, so it is bandwidth-bound and prefers tg and dg to pg.
  /// Generation is the actor's: the language-model head, 2 P FLOPs per token.
  StageWork generation_work(const GenMesh& g, double concurrency) const noexcept {
    const double replicas = static_cast<double>(g.dp);
    const double seqs = ceil_div(static_cast<double>(batch.sequences()), replicas);
    const double waves = ceil_div(seqs, concurrency);
    const double prompt = static_cast<double>(batch.prompt_length);
    const double response = static_cast<double>(batch.response_length);
    const double model_parallel = static_cast<double>(g.tp * g.pp);
    StageWork w;
    w.flops = 2 * model.params * seqs * (prompt + response) / model_parallel;
    w.hbm_bytes = waves * (response + 1) * model.params * memory.param_bytes / static_cast<double>(g.tp) +
                  seqs * response * (prompt + (response + 1) / 2) * kv_bytes_per_token(g);
    const double tokens = seqs * seq_len();
    const double wave_steps = waves * (response + 1);
    if (g.tp > 1) {
      w.add_link_bytes(2 * layers() / static_cast<double>(g.pp) * ring_factor(g.tp) * tokens * hidden() *
                           memory.activation_bytes,
                       intra_node(g.tp));
      w.collectives += wave_steps * 2 * layers();
    }
    if (g.pp > 1) {
      w.add_link_bytes(tokens * hidden() * memory.activation_bytes, intra_node(g.tp * g.pp * g.dp));
      w.collectives += wave_steps * static_cast<double>(g.pp);
    }
    w.calls = generation_calls(g, concurrency);
    return w;
  }
  /// The 3D-HybridEngine's all-gather of `comm_bytes` per rank (from the reshard plan) inside
  /// micro-DP groups: (tp/tg) neighbouring TP ranks, spanning PP stages when pg < pp. One
  /// collective and no call of its own: it runs inside generate_sequences' call.
  StageWork reshard_work(const TrainMesh& m, const GenMesh& g, double comm_bytes) const noexcept {
    StageWork w;
    if (comm_bytes <= 0) return w;
    const std::int64_t span = m.pp / g.pp > 1 ? m.devices() : m.tp;
    w.add_link_bytes(comm_bytes, intra_node(span));
    w.collectives = 1;
    return w;
  }

 private:
  /// A pipelined pass over `seqs` sequences per data-parallel rank in `micro` micro-batches:
  /// `flop_factor` P_H flops per token, `weight_reads` reads of the weights per micro-step,
  /// `tp_all_reduces` activation all-reduces per layer. Its calls are the caller's to count.
  StageWork pass_work(const TrainMesh& m, double seqs, double micro, double flop_factor, double weight_reads,
                      double tp_all_reduces) const noexcept {
    const double bubble = (micro + static_cast<double>(m.pp) - 1) / micro;
    const double model_parallel = static_cast<double>(m.tp * m.pp);
    const double tokens = seqs * seq_len();
    StageWork w;
    w.flops = flop_factor * model.matmul_params(head) * tokens / model_parallel * bubble;
    w.hbm_bytes = weight_reads * weight_shard_bytes(m) * (micro + static_cast<double>(m.pp) - 1);
    if (m.tp > 1) {
      w.add_link_bytes(tp_all_reduces * layers() / static_cast<double>(m.pp) * ring_factor(m.tp) * tokens * hidden() *
                           memory.activation_bytes,
                       intra_node(m.tp));
      w.collectives += tp_all_reduces * layers() / static_cast<double>(m.pp) * micro;
    }
    if (m.pp > 1) {
      w.add_link_bytes(tp_all_reduces / 2 * tokens * hidden() * memory.activation_bytes / static_cast<double>(m.tp),
                       intra_node(m.devices()));
      w.collectives += tp_all_reduces / 2 * micro;
    }
    return w;
  }
};

}  // namespace verl::parallel
