// Megatron's distributed optimizer (actor_rollout_ref.actor.megatron.use_distributed_optimizer,
// ZeRO-1) in the Megatron actor worker, on real ranks: the world is cut into jobs of tp x dp ranks
// (tp fastest), each job one worker group driven SPMD (every rank calls the worker's methods, each
// DP group with its chunk of the rows, as MEGATRON_COMPUTE_PROTO sends them). Checked at
// (tp, dp) = (1, 2), (2, 2) and (1, 4) where the world has the ranks, (2, 1) and (1, 1) as the no-op:
//   - three update_actor calls (two mini-batches each, one of them with a non-finite gradient) with
//     the key on give the key off's losses, gradient norms, skipped steps, final weights and moments
//     (1e-5 relative);
//   - each rank keeps AdamW moments for its 1/dp slice of its TP shard only (element counts);
//   - a checkpoint saved with the key on resumes with it on bit for bit (and one saved with it off
//     resumes with it on).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "verl/hybridflow/wire.hpp"
#include "verl/model/hf_config.hpp"
#include "verl/model/transformer/transformer.hpp"
#include "verl/parallel/mpi_communicator.hpp"
#include "megatron_job.hpp"
#include "verl/trainer/workers/megatron_actor_worker.hpp"

namespace {

using namespace verl;
using verl::parallel::MpiCommunicator;
using trainer::RoleState;
using test_support::broadcast_state;

/// A tiny Qwen2 (q/k/v biases) with one KV head, so that at tp = 2 the KV head is copied on both
/// ranks (its gradient counted once in the norm), next to replicated norms and sharded matrices.
struct TinyQwen2 {
  using policy_type = model::Transformer;
  static model::Transformer actor(const trainer::PPOConfig&) {
    const nlohmann::json json = {{"model_type", "qwen2"},       {"hidden_size", 32},        {"intermediate_size", 64},
                                 {"num_hidden_layers", 2},      {"num_attention_heads", 4}, {"num_key_value_heads", 1},
                                 {"vocab_size", 48},            {"rms_norm_eps", 1e-6},     {"max_position_embeddings", 32},
                                 {"eos_token_id", 1},           {"tie_word_embeddings", false}};
    return model::Transformer::random(model::HfModelConfig::from_json(json, "tiny qwen2"),
                                      {.initializer_range = 0.2, .seed = 3}, {.num_threads = 1});
  }
  static model::Transformer reference(const trainer::PPOConfig& config, const model::Transformer&) { return actor(config); }
};
using Worker = trainer::MegatronActorRolloutRefWorker<TinyQwen2>;

constexpr Index rows = 8, prompt = 4, response = 3;

std::vector<std::string> overrides(bool distributed, int tp) {
  return {"data.train_batch_size=8",
          "actor_rollout_ref.rollout.n=1",
          "actor_rollout_ref.actor.ppo_mini_batch_size=4",
          "actor_rollout_ref.actor.optim.lr=0.01",
          // Small enough that every finite step is clipped (the norms here are about 1).
          "actor_rollout_ref.actor.grad_clip=0.2",
          "actor_rollout_ref.actor.strategy=megatron",
          "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=" + std::to_string(tp),
          "actor_rollout_ref.actor.megatron.sequence_parallel=False",
          std::string("actor_rollout_ref.actor.megatron.use_distributed_optimizer=") + (distributed ? "True" : "False"),
          "actor_rollout_ref.rollout.tensor_model_parallel_size=1"};
}

using Job = test_support::MegatronJob;
using test_support::make_job;

/// The rows of update `step`: this DP group's chunk (every TP rank the same), with the worker's
/// own log-probs as old_log_probs. At step 1 one row of the first mini-batch has a NaN advantage
/// (a non-finite gradient: that optimizer step is skipped).
data::DataProto chunk(Worker& worker, int dp_rank, int dp, int step) {
  const Index mine = rows / dp, first = dp_rank * mine;
  MatrixI64 input_ids(mine, prompt + response), position_ids(mine, prompt + response);
  MatrixF attention_mask = MatrixF::Ones(mine, prompt + response), response_mask = MatrixF::Ones(mine, response);
  MatrixF advantages(mine, response);
  for (Index r = 0; r < mine; ++r) {
    const Index global = first + r;
    for (Index c = 0; c < prompt + response; ++c) {
      input_ids(r, c) = (global * 7 + c * 3 + step * 5) % 46 + 2;
      position_ids(r, c) = c;
    }
    if (global % 3 == 1) response_mask(r, response - 1) = 0.0f;
    for (Index c = 0; c < response; ++c)
      advantages(r, c) = static_cast<float>(std::sin(0.7 * static_cast<double>(global * response + c) + step));
  }
  if (step == 1 && first == 0) advantages(0, 0) = std::nanf("");
  data::DataProto batch;
  batch.set(std::string(trainer::keys::input_ids), input_ids);
  batch.set(std::string(trainer::keys::attention_mask), attention_mask);
  batch.set(std::string(trainer::keys::position_ids), position_ids);
  batch.set(std::string(trainer::keys::response_mask), response_mask);
  batch.set(std::string(trainer::keys::advantages), advantages);
  const data::DataProto old = worker.compute_log_prob(batch);
  batch.set(std::string(trainer::keys::old_log_probs), trainer::float_column(old, trainer::keys::old_log_probs));
  return batch;
}

struct TrainingRun {
  std::vector<nlohmann::json> metrics;  ///< per update_actor call
  RoleState final_state;                ///< on the job's first rank
  std::int64_t state_elements = 0;      ///< this rank's moment elements
  bool distributed = false;
};

int dp_rank_of(const Job& job) { return job.context.rank / job.tp; }

TrainingRun train(Job& job, bool distributed, int steps, const RoleState* resume_from = nullptr, int first_step = 0) {
  Worker worker(job.context);
  worker.init_model(overrides(distributed, job.tp), 3);
  if (resume_from != nullptr) worker.load_checkpoint_state(*resume_from);
  TrainingRun run;
  run.distributed = worker.distributed_optimizer();
  for (int s = first_step; s < first_step + steps; ++s) {
    data::DataProto batch = chunk(worker, dp_rank_of(job), job.dp, s);
    const data::DataProto out = worker.update_actor(batch);
    nlohmann::json m = out.meta_info()["metrics"];
    m["nonfinite_updates"] = out.meta_info()["nonfinite_updates"];
    run.metrics.push_back(std::move(m));
  }
  run.state_elements = worker.optimizer_state_elements();
  run.final_state = worker.checkpoint_state();
  return run;
}

std::int64_t tp_shard_elements(Job& job) {
  Worker worker(job.context);
  worker.init_model(overrides(false, job.tp), 3);
  std::int64_t n = 0;
  worker.actor().for_each_parameter([&](const auto& p) { n += static_cast<std::int64_t>(p.value.size()); });
  return n;
}

bool close(double a, double b, double rtol) { return std::abs(a - b) <= rtol * std::max(1.0, std::abs(a)); }

/// Expects a == b within 1e-5 relative element by element; returns the largest relative difference.
double expect_close(const std::vector<float>& a, const std::vector<float>& b, std::string_view what) {
  EXPECT_EQ(a.size(), b.size()) << what;
  if (a.size() != b.size()) return INFINITY;
  std::size_t bad = 0;
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, std::abs(static_cast<double>(a[i]) - b[i]) / std::max(1.0, std::abs(static_cast<double>(a[i]))));
    if (!close(a[i], b[i], 1e-5)) ++bad;
  }
  EXPECT_EQ(bad, 0u) << what << ": worst relative difference " << worst;
  return worst;
}

void check_layout(int tp, int dp) {
  MpiCommunicator world = MpiCommunicator::world();
  if (world.size() < tp * dp) GTEST_SKIP() << "needs " << tp * dp << " ranks";
  Job job;
  make_job(world, tp, dp, job);
  if (job.context.group == nullptr) return;  // this rank is past the last whole job
  MpiCommunicator& group = *job.group;

  const TrainingRun off = train(job, false, 3);
  const TrainingRun on = train(job, true, 3);
  EXPECT_FALSE(off.distributed);
  EXPECT_EQ(on.distributed, dp > 1) << "the key is a no-op at dp = 1";

  // Each rank keeps its 1/dp slice of its TP shard's moments; the DP group's slices cover it once.
  const std::int64_t shard = tp_shard_elements(job);
  EXPECT_EQ(off.state_elements, shard);
  const std::int64_t slice = (shard + dp - 1) / dp, dp_rank = dp_rank_of(job);
  EXPECT_EQ(on.state_elements, std::clamp<std::int64_t>(shard - dp_rank * slice, 0, slice)) << "dp rank " << dp_rank;
  std::int64_t covered = on.state_elements;
  group.all_reduce(std::span<std::int64_t>(&covered, 1), parallel::ReduceOp::sum);
  EXPECT_EQ(covered, shard * tp) << "the job's slices cover every TP shard once";
  ::testing::Test::RecordProperty("tp_shard_moment_elements", std::to_string(shard));
  ::testing::Test::RecordProperty("distributed_moment_elements", std::to_string(on.state_elements));

  double worst = 0;  // the largest relative difference seen, recorded for the report
  ASSERT_EQ(off.metrics.size(), on.metrics.size());
  for (std::size_t s = 0; s < off.metrics.size(); ++s) {
    EXPECT_EQ(off.metrics[s]["nonfinite_updates"], on.metrics[s]["nonfinite_updates"]) << "step " << s;
    EXPECT_EQ(off.metrics[s]["nonfinite_updates"].get<int>(), s == 1 ? 1 : 0) << "step " << s;
    for (const char* key : {"actor/pg_loss", "actor/grad_norm", "actor/pg_clipfrac", "actor/ppo_kl", "actor/lr"}) {
      ASSERT_TRUE(off.metrics[s].contains(key) && on.metrics[s].contains(key)) << key;
      const double a = off.metrics[s][key].get<double>(), b = on.metrics[s][key].get<double>();
      if (std::isnan(a)) {
        EXPECT_TRUE(std::isnan(b)) << key << " at step " << s;
      } else {
        EXPECT_TRUE(close(a, b, 1e-5)) << key << " at step " << s << ": " << a << " vs " << b;
        worst = std::max(worst, std::abs(a - b) / std::max(1.0, std::abs(a)));
      }
    }
  }
  // Clipping acted (the comparison covers the clipped path).
  EXPECT_GT(off.metrics[0]["actor/grad_norm"].get<double>(), 0.2);

  if (group.rank() == 0) {
    ASSERT_EQ(off.final_state.model.size(), on.final_state.model.size());
    for (std::size_t t = 0; t < off.final_state.model.size(); ++t)
      worst = std::max(worst, expect_close(off.final_state.model[t].values, on.final_state.model[t].values,
                                           off.final_state.model[t].name));
    // The checkpoint holds the full moments in the same layout whichever setting ran.
    EXPECT_EQ(off.final_state.optimizer.step, on.final_state.optimizer.step);
    EXPECT_EQ(on.final_state.optimizer.step, 5) << "six optimizer steps, one skipped";
    ASSERT_EQ(off.final_state.optimizer.exp_avg.size(), on.final_state.optimizer.exp_avg.size());
    for (std::size_t t = 0; t < off.final_state.optimizer.exp_avg.size(); ++t) {
      worst = std::max(worst, expect_close(off.final_state.optimizer.exp_avg[t], on.final_state.optimizer.exp_avg[t], "exp_avg"));
      worst = std::max(worst, expect_close(off.final_state.optimizer.exp_avg_sq[t], on.final_state.optimizer.exp_avg_sq[t],
                                           "exp_avg_sq"));
    }
    ::testing::Test::RecordProperty("worst_relative_difference", fmt::format("{:.3g}", worst));
    if (std::getenv("VERL_TEST_VERBOSE") != nullptr) fmt::print("tp={} dp={}: worst relative difference on/off {:.3g}\n", tp, dp, worst);
  }
}

TEST(MegatronDistributedOptimizer, Tp1Dp2EqualsTheReplicatedOptimizer) { check_layout(1, 2); }
TEST(MegatronDistributedOptimizer, Tp2Dp2EqualsTheReplicatedOptimizer) { check_layout(2, 2); }
// Four slices of 2 rows' gradients: padded slices, MPI's sums over four ranks.
TEST(MegatronDistributedOptimizer, Tp1Dp4EqualsTheReplicatedOptimizer) { check_layout(1, 4); }
TEST(MegatronDistributedOptimizer, Tp2Dp1IsANoOp) { check_layout(2, 1); }
TEST(MegatronDistributedOptimizer, OneRankIsANoOp) { check_layout(1, 1); }

// A checkpoint saved with the key on (after two updates) resumes with it on: the third update then
// gives the uninterrupted run's weights and moments bit for bit.
TEST(MegatronDistributedOptimizer, CheckpointResumesExactly) {
  MpiCommunicator world = MpiCommunicator::world();
  const int tp = world.size() >= 4 ? 2 : 1, dp = 2;
  if (world.size() < tp * dp) GTEST_SKIP() << "needs " << tp * dp << " ranks";
  Job job;
  make_job(world, tp, dp, job);
  if (job.context.group == nullptr) return;
  MpiCommunicator& group = *job.group;

  const TrainingRun straight = train(job, true, 3);
  const TrainingRun first = train(job, true, 2);
  const RoleState saved = broadcast_state(group, first.final_state);
  const TrainingRun resumed = train(job, true, 1, &saved, 2);
  // A checkpoint saved without the key holds the same layout: it resumes with the key on too.
  const RoleState saved_replicated = broadcast_state(group, train(job, false, 2).final_state);
  const TrainingRun crossed = train(job, true, 1, &saved_replicated, 2);
  ASSERT_TRUE(resumed.distributed && crossed.distributed);
  EXPECT_EQ(resumed.state_elements, straight.state_elements);
  if (group.rank() == 0) {
    ASSERT_EQ(straight.final_state.model.size(), resumed.final_state.model.size());
    for (std::size_t t = 0; t < straight.final_state.model.size(); ++t)
      EXPECT_EQ(straight.final_state.model[t].values, resumed.final_state.model[t].values) << straight.final_state.model[t].name;
    EXPECT_EQ(straight.final_state.optimizer, resumed.final_state.optimizer);
    EXPECT_EQ(straight.final_state.extra, resumed.final_state.extra);
    EXPECT_EQ(straight.metrics.back()["actor/grad_norm"], resumed.metrics.back()["actor/grad_norm"]);
    for (std::size_t t = 0; t < straight.final_state.model.size(); ++t)
      expect_close(straight.final_state.model[t].values, crossed.final_state.model[t].values, "resumed from a run without the key");
    EXPECT_EQ(straight.final_state.optimizer.step, crossed.final_state.optimizer.step);
  }
}

}  // namespace
