// What `verl_plan --auto` prints for the placement search: a table of the ranked placements with
// their stage times and memory, and the chosen plan as verl 0.9.1's configuration keys.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "verl/core/error.hpp"
#include "verl/parallel/placement_search.hpp"

namespace verl::parallel {

namespace detail {

inline std::string role_set_text(const std::vector<Role>& roles) {
  std::string out;
  for (Role r : roles) out += fmt::format("{}{}", out.empty() ? "" : "+", role_name(r));
  return out;
}

inline std::string mesh_text(const TrainMesh& m) {
  return fmt::format("pp={} tp={} dp={}{}", m.pp, m.tp, m.dp, m.recompute ? " +recompute" : "");
}

}  // namespace detail

/// One line per placement, then its pools and each role's layout and stage times.
inline std::string format_placement_table(const std::vector<PlacementPlan>& plans, const PlacementSearch& search) {
  const PlacementProblem& problem = search.problem();
  std::string out = fmt::format(
      "{} devices ({} per node), {:.1f} GB per device ({:.1f} GB usable), {:.0f} TFLOP/s, {:.0f} GB/s HBM, "
      "{:.3g} ms per call\n"
      "batch: {} prompts x {} responses, {} + {} tokens, {} epoch(s) x {} mini-batches, micro-batch {}\n\n",
      problem.cluster.devices, problem.cluster.devices_per_node, problem.cluster.memory_bytes / 1e9,
      search.memory_budget() / 1e9, problem.cluster.peak_flops / 1e12, problem.cluster.hbm_bandwidth / 1e9,
      problem.efficiency.call_overhead * 1e3,
      problem.batch.prompts, problem.batch.responses_per_prompt, problem.batch.prompt_length,
      problem.batch.response_length, problem.batch.ppo_epochs, problem.batch.ppo_mini_batches,
      problem.batch.micro_batch_sequences);
  out += fmt::format("{:<5}{:>10}{:>12}{:>10}{:>10}  {}\n", "rank", "step s", "generate s", "forward s", "update s",
                     "placement (pool: roles x devices)");
  for (std::size_t i = 0; i < plans.size(); ++i) {
    const PlacementPlan& p = plans[i];
    std::string pools;
    for (const GroupPlan& g : p.groups) {
      pools += fmt::format("{}[{} x {}]", pools.empty() ? "" : " ", detail::role_set_text(g.roles), g.devices);
    }
    out += fmt::format("{:<5}{:>10.2f}{:>12.2f}{:>10.2f}{:>10.2f}  {}\n", i + 1, p.estimate.step_seconds,
                       p.estimate.generation_seconds, p.estimate.forward_seconds, p.estimate.update_seconds, pools);
  }
  for (std::size_t i = 0; i < plans.size(); ++i) {
    const PlacementPlan& p = plans[i];
    out += fmt::format("\n#{}  step {:.2f} s\n", i + 1, p.estimate.step_seconds);
    for (std::size_t g = 0; g < p.groups.size(); ++g) {
      const GroupPlan& group = p.groups[g];
      out += fmt::format("  pool {}: devices {}-{}, {}: peak {:.1f} GB per device, forward {:.2f} s, update {:.2f} s\n", g,
                         group.first_device, group.first_device + group.devices - 1, detail::role_set_text(group.roles),
                         group.peak_memory_bytes / 1e9, group.forward_seconds, group.update_seconds);
      for (const RolePlan& r : p.roles) {
        if (r.group != g) continue;
        std::string stages;
        for (const StageTime& s : r.stages) stages += fmt::format(" {} {:.2f} s", s.name, s.seconds);
        std::string gen;
        if (r.gen) {
          gen = fmt::format(", generation pp={} tp={} dp={} ({:.0f} sequences in flight per replica)", r.gen->pp,
                            r.gen->tp, r.gen->dp, p.estimate.generation_concurrency);
        }
        out += fmt::format("    {:<10} {}{}; {:.1f} GB held + {:.1f} GB transient;{}\n", role_name(r.role),
                           detail::mesh_text(r.mesh), gen, r.persistent_bytes / 1e9, r.transient_bytes / 1e9, stages);
      }
    }
  }
  return out;
}

/// nnodes x n_gpus_per_node for a pool: whole nodes, or part of one node.
inline std::pair<std::int64_t, std::int64_t> pool_nodes(std::int64_t devices, std::int64_t per_node) {
  if (devices <= per_node) return {1, devices};
  VERL_CHECK_ARG(devices % per_node == 0, "pool: expected whole nodes of {} devices or part of one, got {} devices",
                 per_node, devices);
  return {devices / per_node, per_node};
}

/// The plan as verl 0.9.1's keys (key, value), ready for `verl_train key=value ...`: the
/// trainer's pool (actor with its rollout, reference, critic), each role's Megatron TP/PP, the
/// rollout's TP/PP, full recomputation where chosen, the reward model's pool, and the batch the
/// plan was sized for. Throws when verl cannot express the placement (see `VerlExpressible`).
inline std::vector<std::pair<std::string, std::string>> verl_placement_keys(const PlacementPlan& plan,
                                                                             const PlacementProblem& problem) {
  VERL_CHECK_ARG(VerlExpressible{}(plan.placement, problem),
                 "plan: expected a placement verl's keys can express (actor, reference, critic and any cost model in "
                 "one pool, the reward model in it or in its own pool, pools of whole nodes), got {} pools; search "
                 "with --verl-pools",
                 plan.groups.size());
  std::vector<std::pair<std::string, std::string>> keys;
  auto add = [&](std::string key, auto value) { keys.emplace_back(std::move(key), fmt::format("{}", value)); };
  const std::int64_t per_node = problem.cluster.devices_per_node;
  std::size_t main_group = 0;
  for (const RolePlan& r : plan.roles) {
    if (r.role == Role::actor) main_group = r.group;
  }
  const auto [nodes, gpus] = pool_nodes(plan.groups[main_group].devices, per_node);
  add("trainer.nnodes", nodes);
  add("trainer.n_gpus_per_node", gpus);
  add("actor_rollout_ref.hybrid_engine", "true");
  auto megatron = [&](const std::string& prefix, const TrainMesh& m) {
    add(prefix + ".megatron.tensor_model_parallel_size", m.tp);
    add(prefix + ".megatron.pipeline_model_parallel_size", m.pp);
    if (m.recompute) {
      add(prefix + ".megatron.override_transformer_config.recompute_granularity", "full");
      add(prefix + ".megatron.override_transformer_config.recompute_method", "uniform");
      add(prefix + ".megatron.override_transformer_config.recompute_num_layers", 1);
    }
  };
  bool reward_model = false;
  for (const RolePlan& r : plan.roles) {
    switch (r.role) {
      case Role::actor:
        megatron("actor_rollout_ref.actor", r.mesh);
        add("actor_rollout_ref.rollout.tensor_model_parallel_size", r.gen->tp);
        add("actor_rollout_ref.rollout.pipeline_model_parallel_size", r.gen->pp);
        break;
      case Role::reference: megatron("actor_rollout_ref.ref", r.mesh); break;
      case Role::critic: megatron("critic", r.mesh); break;
      case Role::reward: {
        reward_model = true;
        const bool own_pool = r.group != main_group;
        add("reward.reward_model.enable", "true");
        add("reward.reward_model.enable_resource_pool", own_pool ? "true" : "false");
        if (own_pool) {
          const auto [reward_nodes, reward_gpus] = pool_nodes(plan.groups[r.group].devices, per_node);
          add("reward.reward_model.nnodes", reward_nodes);
          add("reward.reward_model.n_gpus_per_node", reward_gpus);
        }
        add("reward.reward_model.rollout.tensor_model_parallel_size", r.mesh.tp);
        add("reward.reward_model.rollout.pipeline_model_parallel_size", r.mesh.pp);
        break;
      }
      case Role::cost: break;  // verl has no cost-model role: nothing to set
    }
  }
  if (!reward_model) add("reward.reward_model.enable", "false");
  const BatchShape& b = problem.batch;
  add("data.train_batch_size", b.prompts);
  add("data.max_prompt_length", b.prompt_length);
  add("data.max_response_length", b.response_length);
  add("actor_rollout_ref.rollout.n", b.responses_per_prompt);
  add("actor_rollout_ref.actor.ppo_epochs", b.ppo_epochs);
  if (b.prompts % b.ppo_mini_batches == 0) add("actor_rollout_ref.actor.ppo_mini_batch_size", b.prompts / b.ppo_mini_batches);
  add("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", b.micro_batch_sequences);
  return keys;
}

}  // namespace verl::parallel
