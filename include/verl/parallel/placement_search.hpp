// HybridFlow's auto-mapping (§6), our own way: place the roles of an RL dataflow on a cluster,
// choose every role's parallel layout, drop what does not fit in memory, estimate the step time
// with `placement_cost_model.hpp`, and return the fastest placements — exactly, with pruning.
//
// The search space (R roles, N devices; `divisors(N)` the pool sizes):
//  - a placement is a set partition of the roles into groups (Bell(4) = 15 for PPO's actor,
//    critic, reference and reward model — the paper's 15 plans; Bell(5) = 52 with a cost model)
//    and, for each group, a device count n_g in divisors(N) with sum n_g <= N. Pools are
//    disjoint, contiguous and placed largest first, so a pool of n <= devices_per_node devices
//    sits inside a node. The actor and its rollout always share a group (the 3D-HybridEngine).
//  - for each role on its group's n devices, every training (or forward) mesh (pp, tp, dp) with
//    pp * tp * dp = n, pp | layers, tp | heads and tp | kv_heads (Megatron splits the KV heads
//    over TP, so with GQA tp may not exceed kv_heads), with and without full activation
//    recomputation for the roles that train;
//  - for the actor, every generation mesh (pg, tg, dg) the reshard plan accepts: tg | tp,
//    pg | pp, dg = n / (tg pg) (`ReshardGeometry::from_sizes`); its reshard bytes and peak
//    parameter bytes are the plan's (`ReshardPlan<HybridFlow>`).
//
// Memory, per device of a group: the roles' persistent state (parameters, gradients, optimizer)
// is summed — verl keeps colocated models resident — while transient memory (activations, the
// generation weights beyond the training shard, the KV cache) is time-shared, since a group runs
// one stage at a time: peak = sum persistent + max transient <= (1 - reserved) * memory. The KV
// cache takes what is left during generation: the number of sequences in flight per replica is
// what fits (at least one), and generation runs in waves of that size.
//
// Step time, the dataflow of a synchronous PPO step:
//   step = generation + max over groups (forward stages of its roles, one after another)
//                     + max over groups (update stages of its roles, one after another)
// Generation (with the reshard into the generation layout) comes first and runs on the
// actor's group alone; the forward passes (old log-probs, reference, values, rewards, costs)
// need only the responses, so groups on disjoint devices run them at the same time; the updates
// need the advantages, so they start after every forward pass. Groups away from the actor also
// receive the responses (int32 tokens) before their forward passes, and groups that train
// receive one fp32 value per token from each role outside them before their updates.
//
// The result is the k best placements, each represented by its best layouts, ranked by
// (step time, placement key); within a placement layouts are ranked by (step time, layout key).
// Keys are vectors of integers compared lexicographically, so equal times are broken the same
// way every run. `PlacementSearch::rank` prunes with lower bounds (below) and returns exactly
// what ranking every layout of every placement would.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <limits>
#include <numeric>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "verl/core/error.hpp"
#include "verl/parallel/axis.hpp"
#include "verl/parallel/axis_sizes.hpp"
#include "verl/parallel/placement_cost_model.hpp"
#include "verl/parallel/reshard_plan.hpp"

namespace verl::parallel {

/// One model of the dataflow.
struct RoleSpec {
  Role role = Role::actor;
  ModelShape model;
};

/// Everything the search needs.
struct PlacementProblem {
  std::vector<RoleSpec> roles;  ///< distinct roles; the actor is required
  BatchShape batch;
  MemoryModel memory;
  ClusterSpec cluster;
  Efficiency efficiency;
  bool allow_recompute = true;  ///< consider full activation recomputation for training roles
};

/// Refuses a training mesh that does not fit the model: tp must divide the heads and the KV
/// heads, pp the layers.
inline void validate_train_mesh(const ModelShape& model, const TrainMesh& mesh, std::string_view role) {
  VERL_CHECK_ARG(mesh.pp > 0 && mesh.tp > 0 && mesh.dp > 0, "{} mesh: expected positive sizes, got pp={} tp={} dp={}",
                 role, mesh.pp, mesh.tp, mesh.dp);
  VERL_CHECK_ARG(model.heads % mesh.tp == 0 && model.kv_heads % mesh.tp == 0,
                 "{} mesh tp: expected a divisor of heads {} and of kv_heads {}, got {}", role, model.heads,
                 model.kv_heads, mesh.tp);
  VERL_CHECK_ARG(model.layers % mesh.pp == 0, "{} mesh pp: expected a divisor of layers {}, got {}", role,
                 model.layers, mesh.pp);
}

/// The reshard geometry between the actor's training and generation meshes, validated by the
/// reshard plan's own rules (tg | tp, pg | pp, same world size).
inline ReshardGeometry actor_reshard_geometry(const TrainMesh& train, const GenMesh& gen) {
  AxisSizes train_sizes, gen_sizes;
  train_sizes.set(AxisKind::tp, train.tp);
  train_sizes.set(AxisKind::pp, train.pp);
  train_sizes.set(AxisKind::dp, train.dp);
  gen_sizes.set(AxisKind::tp, gen.tp);
  gen_sizes.set(AxisKind::pp, gen.pp);
  gen_sizes.set(AxisKind::dp, gen.dp);
  return ReshardGeometry::from_sizes(train_sizes, gen_sizes);
}

/// One role's layout on a number of devices, with what it costs on its own.
struct RoleOption {
  TrainMesh mesh;
  GenMesh gen;  ///< the actor's generation mesh (unused for other roles)
  double persistent_bytes = 0;
  double transient_bytes = 0;          ///< the larger of the forward and update transients
  double generation_extra_bytes = 0;   ///< actor: generation weights beyond the training shard
  double kv_bytes_per_sequence = 0;    ///< actor: per generation device
  std::int64_t reshard_comm_bytes = 0; ///< actor: the plan's all-gather bytes per rank
  double forward_seconds = 0;
  double update_seconds = 0;
  double reshard_seconds = 0;
  double generation_lower_bound_seconds = 0;  ///< with all memory left by the role itself
};

/// A set partition of the roles (bit i = roles[i]) into groups listed by their lowest role, and
/// each group's device count.
struct Placement {
  std::vector<std::uint32_t> groups;
  std::vector<std::int64_t> devices;
  friend bool operator==(const Placement&, const Placement&) = default;
};

/// The exact score of a placement with one layout per role (`choice[i]` indexes
/// `options(i, devices of i's group)`).
struct StepEstimate {
  double generation_seconds = 0;  ///< including the reshard
  double forward_seconds = 0;     ///< the slowest group's forward stages
  double update_seconds = 0;      ///< the slowest group's updates
  double step_seconds = 0;
  double generation_concurrency = 0;  ///< sequences in flight per generation replica
};

/// A ranked entry: a placement and its best layouts.
struct RankedPlacement {
  Placement placement;
  std::vector<std::size_t> choice;
  StepEstimate estimate;
};

/// Which placements the search may return. `AnyPlacement` takes all of them.
template <class F>
concept PlacementFilter = std::predicate<const F&, const Placement&, const PlacementProblem&>;

struct AnyPlacement {
  constexpr bool operator()(const Placement&, const PlacementProblem&) const noexcept { return true; }
};

/// Placements verl 0.9.1's keys can express: the actor (with its rollout), the reference and
/// the critic share the trainer's pool; the reward model is in it or in its own pool
/// (`reward.reward_model.enable_resource_pool`); verl has no cost-model role, so a cost model
/// must sit in the trainer's pool; every pool is whole nodes or part of one node.
struct VerlExpressible {
  bool operator()(const Placement& p, const PlacementProblem& problem) const noexcept {
    std::uint32_t reward_bit = 0;
    for (std::size_t i = 0; i < problem.roles.size(); ++i) {
      if (problem.roles[i].role == Role::reward) reward_bit = 1u << i;
    }
    const std::uint32_t all = (1u << problem.roles.size()) - 1;
    const std::uint32_t main = all & ~reward_bit;
    bool main_found = false;
    for (std::size_t g = 0; g < p.groups.size(); ++g) {
      const std::int64_t n = p.devices[g];
      const std::int64_t per_node = problem.cluster.devices_per_node;
      if (n > per_node && n % per_node != 0) return false;
      if ((p.groups[g] & main) == main) {
        main_found = true;
      } else if (p.groups[g] != reward_bit) {
        return false;
      }
    }
    return main_found;
  }
};

/// Counts of what the search looked at.
struct SearchStats {
  std::int64_t placements = 0;             ///< partitions x device counts enumerated
  std::int64_t placements_pruned = 0;      ///< dropped by the placement-level bound
  std::int64_t nodes = 0;                  ///< partial layouts visited
  std::int64_t leaves = 0;                 ///< complete layouts scored
};

/// Every set partition of {0..count-1} as bit masks, groups ordered by their lowest element
/// (restricted growth strings, in lexicographic order).
inline std::vector<std::vector<std::uint32_t>> set_partitions(std::size_t count) {
  std::vector<std::vector<std::uint32_t>> out;
  std::vector<std::size_t> label(count, 0);
  auto recurse = [&](auto&& self, std::size_t i, std::size_t blocks) -> void {
    if (i == count) {
      std::vector<std::uint32_t> groups(blocks, 0);
      for (std::size_t j = 0; j < count; ++j) groups[label[j]] |= 1u << j;
      out.push_back(std::move(groups));
      return;
    }
    for (std::size_t b = 0; b <= blocks; ++b) {
      label[i] = b;
      self(self, i + 1, std::max(blocks, b + 1));
    }
  };
  if (count > 0) recurse(recurse, 0, 0);
  return out;
}

inline std::vector<std::int64_t> divisors_of(std::int64_t n) {
  std::vector<std::int64_t> out;
  for (std::int64_t d = 1; d <= n; ++d) {
    if (n % d == 0) out.push_back(d);
  }
  return out;
}

/// The tie-break key of a placement: for each role, the lowest role of its group and the
/// group's device count.
inline std::vector<std::int64_t> placement_key(const Placement& p, std::size_t role_count) {
  std::vector<std::int64_t> key;
  for (std::size_t r = 0; r < role_count; ++r) {
    for (std::size_t g = 0; g < p.groups.size(); ++g) {
      if (p.groups[g] & (1u << r)) {
        key.push_back(std::countr_zero(p.groups[g]));
        key.push_back(p.devices[g]);
      }
    }
  }
  return key;
}

/// (time, key) order, used for both layouts and placements.
inline bool ranks_before(double time_a, std::span<const std::int64_t> key_a, double time_b,
                         std::span<const std::int64_t> key_b) {
  if (time_a != time_b) return time_a < time_b;
  return std::lexicographical_compare(key_a.begin(), key_a.end(), key_b.begin(), key_b.end());
}

/// A stage of a role in a described plan.
struct StageTime {
  std::string_view name;
  double seconds = 0;
};

struct RolePlan {
  Role role = Role::actor;
  std::size_t group = 0;
  TrainMesh mesh;
  std::optional<GenMesh> gen;
  std::vector<StageTime> stages;
  double persistent_bytes = 0;
  double transient_bytes = 0;
};

struct GroupPlan {
  std::vector<Role> roles;
  std::int64_t devices = 0;
  std::int64_t first_device = 0;
  double forward_seconds = 0;   ///< its forward stages plus receiving the responses
  double update_seconds = 0;    ///< its updates plus receiving the advantage inputs
  double peak_memory_bytes = 0; ///< per device: sum persistent + max transient
};

/// A placement with its layouts, stage times and memory, as the tool prints it.
struct PlacementPlan {
  Placement placement;
  std::vector<GroupPlan> groups;
  std::vector<RolePlan> roles;
  StepEstimate estimate;
};

class PlacementSearch {
 public:
  explicit PlacementSearch(PlacementProblem problem) : problem_(std::move(problem)) {
    validate();
    device_model_ = DeviceModel{problem_.cluster, problem_.efficiency};
    budget_ = problem_.cluster.memory_bytes * (1 - problem_.memory.reserved_fraction);
    sizes_ = divisors_of(problem_.cluster.devices);
    const std::size_t roles = problem_.roles.size();
    options_.assign(roles * sizes_.size(), {});
    bounds_.assign(roles * sizes_.size(), {});
    for (std::size_t r = 0; r < roles; ++r) {
      for (std::size_t s = 0; s < sizes_.size(); ++s) build_options(r, s);
    }
    require_each_role_fits();
  }

  const PlacementProblem& problem() const noexcept { return problem_; }
  const DeviceModel& device_model() const noexcept { return device_model_; }
  /// Memory each device may use: (1 - reserved_fraction) * memory.
  double memory_budget() const noexcept { return budget_; }
  /// The pool sizes a group may get: the divisors of N.
  std::span<const std::int64_t> pool_sizes() const noexcept { return sizes_; }

  /// The layouts of roles[role_index] on `devices` devices that fit when the role is alone,
  /// in their canonical order (by mesh, then generation mesh): the order of layout keys.
  std::span<const RoleOption> options(std::size_t role_index, std::int64_t devices) const {
    return options_[slot(role_index, devices)];
  }

  /// The exact estimate, or nothing when a group does not fit in memory. The one function
  /// that scores: the pruned search and any brute force agree bit for bit through it.
  std::optional<StepEstimate> score(const Placement& p, std::span<const std::size_t> choice) const {
    const std::size_t roles = problem_.roles.size();
    VERL_CHECK_ARG(choice.size() == roles, "choice: expected one layout per role ({}), got {}", roles, choice.size());
    StepEstimate e;
    bool first = true;
    for (std::size_t g = 0; g < p.groups.size(); ++g) {
      const std::int64_t n = p.devices[g];
      double persistent = 0;
      for (std::size_t r = 0; r < roles; ++r) {
        if (p.groups[g] & (1u << r)) persistent += option(r, n, choice[r]).persistent_bytes;
      }
      if (persistent > budget_) return std::nullopt;
      double forward = 0, update = 0;
      for (std::size_t r = 0; r < roles; ++r) {
        if (!(p.groups[g] & (1u << r))) continue;
        const RoleOption& o = option(r, n, choice[r]);
        if (persistent + o.transient_bytes > budget_) return std::nullopt;
        forward += o.forward_seconds;
        update += o.update_seconds;
        if (problem_.roles[r].role == Role::actor) {
          const double concurrency = generation_concurrency(o, persistent);
          if (concurrency < 1) return std::nullopt;
          e.generation_concurrency = concurrency;
          e.generation_seconds = generation_seconds(r, o, concurrency) + o.reshard_seconds;
        }
      }
      forward += transfer_in_seconds(p, g);
      update += transfer_update_seconds(p, g);
      e.forward_seconds = first ? forward : std::max(e.forward_seconds, forward);
      e.update_seconds = first ? update : std::max(e.update_seconds, update);
      first = false;
    }
    e.step_seconds = e.generation_seconds + e.forward_seconds + e.update_seconds;
    return e;
  }

  /// The k best placements (each with its best layouts), exactly, by branch and bound:
  ///  - per role and pool size, the minimum over its layouts of persistent memory, forward,
  ///    update and generation time (the generation bound gives the KV cache all the memory the
  ///    role leaves, which can only shrink when others share the group: generation time does
  ///    not increase with the sequences in flight, since every term of it, the calls included,
  ///    is a non-increasing function of the waves ceil(S_r / c));
  ///  - every time above, bound and score alike, is `DeviceModel::seconds` of the same work
  ///    vectors, so each includes its calls' overhead the same way;
  ///  - a partial assignment's bound is the step formula with each unassigned role's minimum;
  ///    the same sums in the same order as `score`, so with round-to-nearest arithmetic
  ///    (monotone) the bound never exceeds the score of any completion;
  ///  - a branch is dropped when its bound is above the placement's best so far or above the
  ///    k-th best placement so far (strictly, so ties reach the key comparison), or when the
  ///    persistent memory bound of a group is above the budget.
  /// Throws when no placement fits, naming each role's smallest need on all N devices.
  template <PlacementFilter Filter = AnyPlacement>
  std::vector<RankedPlacement> rank(std::size_t k, Filter filter = {}, SearchStats* stats = nullptr) const {
    VERL_CHECK_ARG(k > 0, "k: expected at least one placement, got {}", k);
    SearchStats local;
    SearchStats& st = stats ? *stats : local;
    std::vector<RankedPlacement> top;
    const std::size_t roles = problem_.roles.size();
    for (const auto& groups : set_partitions(roles)) {
      Placement p{groups, std::vector<std::int64_t>(groups.size(), 0)};
      auto assign = [&](auto&& self, std::size_t g, std::int64_t used) -> void {
        if (g == groups.size()) {
          ++st.placements;
          if (!filter(std::as_const(p), problem_)) return;
          search_layouts(p, k, top, st);
          return;
        }
        for (std::int64_t n : sizes_) {
          if (used + n > problem_.cluster.devices) break;
          p.devices[g] = n;
          self(self, g + 1, used + n);
        }
      };
      assign(assign, 0, 0);
    }
    if (top.empty()) throw_nothing_fits(std::is_same_v<Filter, AnyPlacement>);
    return top;
  }

  /// Stage times and memory of a ranked placement.
  PlacementPlan describe(const RankedPlacement& ranked) const {
    const Placement& p = ranked.placement;
    PlacementPlan plan{p, {}, {}, ranked.estimate};
    const std::size_t roles = problem_.roles.size();
    // Pools are laid out largest first (by group order among equals), so that they align with
    // nodes.
    std::vector<std::size_t> order(p.groups.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return p.devices[a] > p.devices[b]; });
    std::vector<std::int64_t> first(p.groups.size(), 0);
    std::int64_t offset = 0;
    for (std::size_t g : order) {
      first[g] = offset;
      offset += p.devices[g];
    }
    for (std::size_t g = 0; g < p.groups.size(); ++g) {
      GroupPlan group;
      group.devices = p.devices[g];
      group.first_device = first[g];
      double persistent = 0, transient = 0;
      for (std::size_t r = 0; r < roles; ++r) {
        if (!(p.groups[g] & (1u << r))) continue;
        const RoleOption& o = option(r, p.devices[g], ranked.choice[r]);
        group.roles.push_back(problem_.roles[r].role);
        persistent += o.persistent_bytes;
        transient = std::max(transient, o.transient_bytes);
        group.forward_seconds += o.forward_seconds;
        group.update_seconds += o.update_seconds;
      }
      for (std::size_t r = 0; r < roles; ++r) {
        if (!(p.groups[g] & (1u << r)) || problem_.roles[r].role != Role::actor) continue;
        const RoleOption& o = option(r, p.devices[g], ranked.choice[r]);
        transient = std::max(transient, o.generation_extra_bytes +
                                            ranked.estimate.generation_concurrency * o.kv_bytes_per_sequence);
      }
      group.forward_seconds += transfer_in_seconds(p, g);
      group.update_seconds += transfer_update_seconds(p, g);
      group.peak_memory_bytes = persistent + transient;
      plan.groups.push_back(std::move(group));
    }
    for (std::size_t r = 0; r < roles; ++r) {
      const std::size_t g = group_of(p, r);
      const RoleOption& o = option(r, p.devices[g], ranked.choice[r]);
      RolePlan rp;
      rp.role = problem_.roles[r].role;
      rp.group = g;
      rp.mesh = o.mesh;
      rp.persistent_bytes = o.persistent_bytes;
      rp.transient_bytes = o.transient_bytes;
      switch (rp.role) {
        case Role::actor:
          rp.gen = o.gen;
          rp.stages = {{"generate", ranked.estimate.generation_seconds - o.reshard_seconds},
                       {"reshard", o.reshard_seconds},
                       {"old_log_prob", o.forward_seconds},
                       {"update_actor", o.update_seconds}};
          break;
        case Role::critic: rp.stages = {{"values", o.forward_seconds}, {"update_critic", o.update_seconds}}; break;
        case Role::reference: rp.stages = {{"ref_log_prob", o.forward_seconds}}; break;
        case Role::reward: rp.stages = {{"reward", o.forward_seconds}}; break;
        case Role::cost: rp.stages = {{"cost", o.forward_seconds}}; break;
      }
      plan.roles.push_back(std::move(rp));
    }
    return plan;
  }

  /// The role's cost model (its shape and head on this batch, memory model and cluster).
  RoleCostModel cost_model(std::size_t role_index) const {
    const RoleSpec& spec = problem_.roles[role_index];
    return RoleCostModel::of(spec.role, spec.model, problem_.batch, problem_.memory, problem_.cluster);
  }

 private:
  struct Bounds {
    double persistent = std::numeric_limits<double>::infinity();
    double forward = std::numeric_limits<double>::infinity();
    double update = std::numeric_limits<double>::infinity();
    double generation = std::numeric_limits<double>::infinity();
  };

  void validate() const {
    validate_batch(problem_.batch);
    validate_memory_model(problem_.memory);
    validate_cluster(problem_.cluster);
    validate_efficiency(problem_.efficiency);
    VERL_CHECK_ARG(!problem_.roles.empty() && problem_.roles.size() <= role_names.size(),
                   "roles: expected 1 to {} roles, got {}", role_names.size(), problem_.roles.size());
    std::array<bool, role_names.size()> seen{};
    for (const RoleSpec& spec : problem_.roles) {
      const std::size_t index = static_cast<std::size_t>(spec.role);
      VERL_CHECK_ARG(index < role_names.size(), "roles: expected a known role, got {}", index);
      VERL_CHECK_ARG(!seen[index], "roles: expected each role once, got {} twice", role_name(spec.role));
      seen[index] = true;
      validate_model_shape(spec.model, role_name(spec.role));
    }
    VERL_CHECK_ARG(seen[static_cast<std::size_t>(Role::actor)], "roles: expected an actor, got {} roles without one",
                   problem_.roles.size());
  }

  std::size_t size_index(std::int64_t devices) const {
    const auto it = std::lower_bound(sizes_.begin(), sizes_.end(), devices);
    VERL_CHECK_ARG(it != sizes_.end() && *it == devices, "devices: expected a divisor of {}, got {}",
                   problem_.cluster.devices, devices);
    return static_cast<std::size_t>(it - sizes_.begin());
  }
  std::size_t slot(std::size_t role_index, std::int64_t devices) const {
    VERL_CHECK_ARG(role_index < problem_.roles.size(), "role_index: expected an index below {}, got {}",
                   problem_.roles.size(), role_index);
    return role_index * sizes_.size() + size_index(devices);
  }
  const RoleOption& option(std::size_t r, std::int64_t devices, std::size_t index) const {
    const auto& list = options_[slot(r, devices)];
    VERL_CHECK_ARG(index < list.size(), "choice: expected a layout index below {} for {} on {} devices, got {}",
                   list.size(), role_name(problem_.roles[r].role), devices, index);
    return list[index];
  }
  static std::size_t group_of(const Placement& p, std::size_t r) {
    for (std::size_t g = 0; g < p.groups.size(); ++g) {
      if (p.groups[g] & (1u << r)) return g;
    }
    ::verl::detail::throw_invalid_argument("placement: expected role {} in a group, got none", r);
  }

  /// Sequences in flight per generation replica when the group's persistent state takes
  /// `persistent` bytes per device: the KV cache gets what the generation weights leave.
  double generation_concurrency(const RoleOption& o, double persistent) const {
    const double free = budget_ - persistent - o.generation_extra_bytes;
    if (free < o.kv_bytes_per_sequence) return 0;
    const double per_replica = std::ceil(static_cast<double>(problem_.batch.sequences()) / static_cast<double>(o.gen.dp));
    return std::min(per_replica, std::floor(free / o.kv_bytes_per_sequence));
  }
  double generation_seconds(std::size_t r, const RoleOption& o, double concurrency) const {
    return device_model_.seconds(cost_model(r).generation_work(o.gen, concurrency));
  }

  /// Pools are disjoint: data between them crosses nodes unless the whole cluster is one node.
  bool pools_intra_node() const noexcept { return problem_.cluster.devices <= problem_.cluster.devices_per_node; }
  double transfer_seconds(double bytes_per_device) const {
    StageWork w;
    w.add_link_bytes(bytes_per_device, pools_intra_node());
    w.collectives = 1;
    return device_model_.seconds(w);
  }
  /// A group without the actor receives the responses (int32 tokens) before its forward passes.
  double transfer_in_seconds(const Placement& p, std::size_t g) const {
    for (std::size_t r = 0; r < problem_.roles.size(); ++r) {
      if ((p.groups[g] & (1u << r)) && problem_.roles[r].role == Role::actor) return 0;
    }
    return transfer_seconds(problem_.batch.tokens() * 4 / static_cast<double>(p.devices[g]));
  }
  /// A group that trains receives one fp32 value per token from each role outside it.
  double transfer_update_seconds(const Placement& p, std::size_t g) const {
    bool trains = false;
    double outside = 0;
    for (std::size_t r = 0; r < problem_.roles.size(); ++r) {
      if (p.groups[g] & (1u << r)) {
        trains = trains || role_trains(problem_.roles[r].role);
      } else {
        outside += 1;
      }
    }
    if (!trains || outside == 0) return 0;
    return transfer_seconds(outside * problem_.batch.tokens() * 4 / static_cast<double>(p.devices[g]));
  }

  void build_options(std::size_t r, std::size_t s) {
    const RoleSpec& spec = problem_.roles[r];
    const std::int64_t n = sizes_[s];
    const bool trains = role_trains(spec.role);
    const RoleCostModel cm = cost_model(r);
    std::vector<RoleOption>& list = options_[r * sizes_.size() + s];
    Bounds& b = bounds_[r * sizes_.size() + s];
    for (std::int64_t pp : divisors_of(n)) {
      if (spec.model.layers % pp != 0) continue;
      for (std::int64_t tp : divisors_of(n / pp)) {
        if (spec.model.heads % tp != 0 || spec.model.kv_heads % tp != 0) continue;
        for (bool recompute : {false, true}) {
          if (recompute && !(trains && problem_.allow_recompute)) continue;
          const TrainMesh mesh{pp, tp, n / (pp * tp), recompute};
          validate_train_mesh(spec.model, mesh, role_name(spec.role));
          RoleOption o;
          o.mesh = mesh;
          o.persistent_bytes = cm.persistent_bytes(mesh, trains);
          o.transient_bytes = cm.forward_transient_bytes(mesh);
          if (trains) o.transient_bytes = std::max(o.transient_bytes, cm.update_transient_bytes(mesh));
          o.forward_seconds = device_model_.seconds(cm.forward_work(mesh));
          o.update_seconds = trains ? device_model_.seconds(cm.update_work(mesh)) : 0.0;
          if (o.persistent_bytes + o.transient_bytes > budget_) continue;
          if (spec.role != Role::actor) {
            add_option(list, b, o);
            continue;
          }
          for (std::int64_t pg : divisors_of(pp)) {
            for (std::int64_t tg : divisors_of(tp)) {
              RoleOption a = o;
              a.gen = GenMesh{pg, tg, n / (pg * tg)};
              const ReshardPlan<HybridFlow> plan(actor_reshard_geometry(mesh, a.gen));
              const std::int64_t model_bytes = static_cast<std::int64_t>(std::ceil(spec.model.params * problem_.memory.param_bytes));
              const ReshardBytes bytes = plan.cost().bytes(model_bytes);
              const std::int64_t training_shard = plan.training_shard(0).volume().ceil_of(model_bytes);
              a.reshard_comm_bytes = bytes.comm_bytes_per_rank;
              a.generation_extra_bytes = static_cast<double>(bytes.peak_param_bytes_per_rank - training_shard +
                                                             bytes.redundant_bytes_per_rank);
              a.kv_bytes_per_sequence = cm.kv_bytes_per_sequence(a.gen);
              a.reshard_seconds = device_model_.seconds(cm.reshard_work(mesh, a.gen, static_cast<double>(a.reshard_comm_bytes)));
              const double concurrency = generation_concurrency(a, a.persistent_bytes);
              if (concurrency < 1) continue;
              a.generation_lower_bound_seconds = generation_seconds(r, a, concurrency) + a.reshard_seconds;
              add_option(list, b, a);
            }
          }
        }
      }
    }
  }
  static void add_option(std::vector<RoleOption>& list, Bounds& b, const RoleOption& o) {
    b.persistent = std::min(b.persistent, o.persistent_bytes);
    b.forward = std::min(b.forward, o.forward_seconds);
    b.update = std::min(b.update, o.update_seconds);
    b.generation = std::min(b.generation, o.generation_lower_bound_seconds);
    list.push_back(o);
  }

  /// The smallest memory a role needs on all N devices, over every mesh, and the mesh.
  std::pair<double, TrainMesh> minimum_need(std::size_t r) const {
    const RoleSpec& spec = problem_.roles[r];
    const RoleCostModel cm = cost_model(r);
    const std::int64_t n = problem_.cluster.devices;
    double best = std::numeric_limits<double>::infinity();
    TrainMesh best_mesh;
    for (std::int64_t pp : divisors_of(n)) {
      if (spec.model.layers % pp != 0) continue;
      for (std::int64_t tp : divisors_of(n / pp)) {
        if (spec.model.heads % tp != 0 || spec.model.kv_heads % tp != 0) continue;
        const TrainMesh mesh{pp, tp, n / (pp * tp), role_trains(spec.role) && problem_.allow_recompute};
        double need = cm.persistent_bytes(mesh, role_trains(spec.role)) +
                      std::max(cm.forward_transient_bytes(mesh),
                               role_trains(spec.role) ? cm.update_transient_bytes(mesh) : 0.0);
        if (spec.role == Role::actor) {
          // The cheapest generation layout keeps the training one: no extra weights, one sequence.
          need = std::max(need, cm.persistent_bytes(mesh, true) + cm.kv_bytes_per_sequence(GenMesh{pp, tp, mesh.dp}));
        }
        if (need < best) {
          best = need;
          best_mesh = mesh;
        }
      }
    }
    return {best, best_mesh};
  }

  std::string budget_text() const {
    return fmt::format("the budget per device is {:.1f} GB ({:.1f} GB less {:.0f}% reserved)", budget_ / 1e9,
                       problem_.cluster.memory_bytes / 1e9, problem_.memory.reserved_fraction * 100);
  }
  std::string need_text(std::size_t r) const {
    const auto [need, mesh] = minimum_need(r);
    return fmt::format("{} ({:.3g} parameters) needs at least {:.1f} GB per device on all {} devices (pp={} tp={} dp={})",
                       role_name(problem_.roles[r].role), problem_.roles[r].model.params, need / 1e9,
                       problem_.cluster.devices, mesh.pp, mesh.tp, mesh.dp);
  }

  void require_each_role_fits() const {
    for (std::size_t r = 0; r < problem_.roles.size(); ++r) {
      if (options_[r * sizes_.size() + sizes_.size() - 1].empty()) {
        ::verl::detail::throw_invalid_argument("roles[{}]: {}, but {}; it fits nowhere on this cluster", r,
                                               need_text(r), budget_text());
      }
    }
  }
  [[noreturn]] void throw_nothing_fits(bool unfiltered) const {
    std::string needs;
    for (std::size_t r = 0; r < problem_.roles.size(); ++r) needs += fmt::format("; {}", need_text(r));
    ::verl::detail::throw_invalid_argument(
        "placement: expected at least one placement{} that fits in memory, got none: {}{}",
        unfiltered ? "" : " of the requested kind", budget_text(), needs);
  }

  // ---- branch and bound over one placement's layouts ----
  struct LayoutSearch {
    const Placement* placement;
    std::vector<std::size_t> group;      ///< per role
    std::vector<std::size_t> choice;     ///< per role, canonical option index
    std::vector<bool> chosen;
    std::vector<double> transfer_in, transfer_update;
    std::optional<RankedPlacement> best;
    std::vector<std::int64_t> best_key;
  };

  void search_layouts(const Placement& p, std::size_t k, std::vector<RankedPlacement>& top, SearchStats& st) const {
    const std::size_t roles = problem_.roles.size();
    LayoutSearch ls;
    ls.placement = &p;
    ls.group.resize(roles);
    ls.choice.assign(roles, 0);
    ls.chosen.assign(roles, false);
    for (std::size_t r = 0; r < roles; ++r) {
      ls.group[r] = group_of(p, r);
      if (options_[slot(r, p.devices[ls.group[r]])].empty()) {
        ++st.placements_pruned;
        return;
      }
    }
    for (std::size_t g = 0; g < p.groups.size(); ++g) {
      ls.transfer_in.push_back(transfer_in_seconds(p, g));
      ls.transfer_update.push_back(transfer_update_seconds(p, g));
    }
    if (!bound_allows(ls, top, k)) {
      ++st.placements_pruned;
      return;
    }
    // Try each role's layouts fastest first (by its own stage times), so that good plans are
    // found early and the bound bites; the canonical index still decides ties.
    std::vector<std::vector<std::size_t>> order(roles);
    for (std::size_t r = 0; r < roles; ++r) {
      const auto& list = options_[slot(r, p.devices[ls.group[r]])];
      order[r].resize(list.size());
      std::iota(order[r].begin(), order[r].end(), 0);
      auto own = [&](std::size_t i) {
        return list[i].generation_lower_bound_seconds + list[i].forward_seconds + list[i].update_seconds;
      };
      std::stable_sort(order[r].begin(), order[r].end(), [&](std::size_t a, std::size_t b) { return own(a) < own(b); });
    }
    auto dfs = [&](auto&& self, std::size_t r) -> void {
      ++st.nodes;
      if (r == roles) {
        ++st.leaves;
        const std::optional<StepEstimate> e = score(p, ls.choice);
        if (!e) return;
        std::vector<std::int64_t> key(ls.choice.begin(), ls.choice.end());
        if (!ls.best || ranks_before(e->step_seconds, key, ls.best->estimate.step_seconds, ls.best_key)) {
          ls.best = RankedPlacement{p, ls.choice, *e};
          ls.best_key = std::move(key);
        }
        return;
      }
      ls.chosen[r] = true;
      for (std::size_t i : order[r]) {
        ls.choice[r] = i;
        if (bound_allows(ls, top, k)) self(self, r + 1);
      }
      ls.chosen[r] = false;
      ls.choice[r] = 0;
    };
    dfs(dfs, 0);
    if (!ls.best) return;
    insert_ranked(top, k, std::move(*ls.best));
  }

  /// The bound test of the docs above: memory per group, then the step-time bound against the
  /// placement's best and the k-th best placement.
  bool bound_allows(const LayoutSearch& ls, const std::vector<RankedPlacement>& top, std::size_t k) const {
    const Placement& p = *ls.placement;
    const std::size_t roles = problem_.roles.size();
    double generation = 0, forward_max = 0, update_max = 0;
    for (std::size_t g = 0; g < p.groups.size(); ++g) {
      const std::int64_t n = p.devices[g];
      double persistent = 0;
      for (std::size_t r = 0; r < roles; ++r) {
        if (!(p.groups[g] & (1u << r))) continue;
        persistent += ls.chosen[r] ? option(r, n, ls.choice[r]).persistent_bytes : bound(r, n).persistent;
      }
      if (persistent > budget_) return false;
      double forward = 0, update = 0;
      for (std::size_t r = 0; r < roles; ++r) {
        if (!(p.groups[g] & (1u << r))) continue;
        if (ls.chosen[r]) {
          const RoleOption& o = option(r, n, ls.choice[r]);
          if (persistent + o.transient_bytes > budget_) return false;
          forward += o.forward_seconds;
          update += o.update_seconds;
          if (problem_.roles[r].role == Role::actor) generation = o.generation_lower_bound_seconds;
        } else {
          const Bounds& b = bound(r, n);
          forward += b.forward;
          update += b.update;
          if (problem_.roles[r].role == Role::actor) generation = b.generation;
        }
      }
      forward += ls.transfer_in[g];
      update += ls.transfer_update[g];
      forward_max = g == 0 ? forward : std::max(forward_max, forward);
      update_max = g == 0 ? update : std::max(update_max, update);
    }
    const double step = generation + forward_max + update_max;
    if (ls.best && step > ls.best->estimate.step_seconds) return false;
    if (top.size() == k && step > top.back().estimate.step_seconds) return false;
    return true;
  }
  const Bounds& bound(std::size_t r, std::int64_t n) const { return bounds_[slot(r, n)]; }

  void insert_ranked(std::vector<RankedPlacement>& top, std::size_t k, RankedPlacement entry) const {
    const std::size_t roles = problem_.roles.size();
    const std::vector<std::int64_t> key = placement_key(entry.placement, roles);
    auto before = [&](const RankedPlacement& a, const std::vector<std::int64_t>& a_key) {
      return ranks_before(a.estimate.step_seconds, a_key, entry.estimate.step_seconds, key);
    };
    auto it = top.begin();
    while (it != top.end() && before(*it, placement_key(it->placement, roles))) ++it;
    if (static_cast<std::size_t>(it - top.begin()) >= k) return;
    top.insert(it, std::move(entry));
    if (top.size() > k) top.pop_back();
  }

  PlacementProblem problem_;
  DeviceModel device_model_;
  double budget_ = 0;
  std::vector<std::int64_t> sizes_;
  std::vector<std::vector<RoleOption>> options_;  ///< [role][size]
  std::vector<Bounds> bounds_;
};

}  // namespace verl::parallel
