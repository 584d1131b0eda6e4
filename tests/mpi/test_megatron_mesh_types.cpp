// The Megatron actor worker with its meshes as types (MegatronActorRolloutRefWorker<Models,
// TrainMesh, GenMesh>), on real ranks. A job of tp x dp ranks (tp fastest) runs the same calls
// with the default dynamic meshes and with static ones, Mesh<TP<2>, DP<>> -> Mesh<TP<1>, DP<>> (the
// dense generation) and, at 4 ranks, Mesh<TP<4>, DP<1>> -> Mesh<TP<2>, DP<2>> (TP-sharded generation
// through the reshard plan of the two static meshes):
//   - the worker's meshes are the ones the keys give, with the static sizes' types;
//   - log-probs, generations and an update are bit-identical to the dynamic worker's (the groups
//     are the same slices, made from the mesh);
//   - keys that contradict a static size, and a group of another size than a static mesh, are
//     errors naming the key (or the ranks), the mesh type, the expected and the given size;
//   - the reshard's per-step metrics (perf/reshard_bytes_received, perf/peak_param_bytes) reach the
//     controller's step metrics through the runtime's collect (megatron_compute_proto: tp rank 0 of
//     each DP group, concatenated) and detail::worker_meta_metrics at every layout: tp2 x dp1 -> tg1
//     (2 ranks), tp2 x dp2 -> tg1 and tp4 -> tg2 x dg2 (4 ranks), equal to the reshard plan's
//     comm_bytes_per_rank and peak_param_bytes_per_rank up to the documented share of the tensors
//     not gathered (see megatron_actor_worker.hpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "verl/hybridflow/dispatch.hpp"
#include "verl/model/hf_config.hpp"
#include "verl/model/transformer/transformer.hpp"
#include "verl/parallel/mpi_communicator.hpp"
#include "megatron_job.hpp"
#include "verl/parallel/reshard_plan.hpp"
#include "verl/trainer/ppo_controller.hpp"
#include "verl/trainer/workers/megatron_actor_worker.hpp"

namespace {

using namespace verl;
using parallel::DP;
using parallel::Mesh;
using parallel::MpiCommunicator;
using parallel::TP;

/// A user's model type with its heads as constants (4 attention, 2 KV heads).
struct TinyLlama {
  using policy_type = model::Transformer;
  static constexpr std::int64_t num_attention_heads = 4;
  static constexpr std::int64_t num_key_value_heads = 2;
  static model::Transformer actor(const trainer::PPOConfig&) {
    const nlohmann::json json = {{"model_type", "llama"},        {"hidden_size", 32},        {"intermediate_size", 64},
                                 {"num_hidden_layers", 2},       {"num_attention_heads", 4}, {"num_key_value_heads", 2},
                                 {"vocab_size", 48},             {"rms_norm_eps", 1e-6},     {"max_position_embeddings", 32},
                                 {"eos_token_id", 1},            {"tie_word_embeddings", false}};
    return model::Transformer::random(model::HfModelConfig::from_json(json, "tiny llama"),
                                      {.initializer_range = 0.2, .seed = 5}, {.num_threads = 1});
  }
  static model::Transformer reference(const trainer::PPOConfig& config, const model::Transformer&) { return actor(config); }
};
/// The same model type claiming 8 heads: the loaded model's 4 contradict it.
struct WrongHeads : TinyLlama {
  static constexpr std::int64_t num_attention_heads = 8;
  static constexpr std::int64_t num_key_value_heads = 2;
};

constexpr Index rows = 4, prompt = 4, response = 3;

std::vector<std::string> overrides(int tp, int tg) {
  return {"data.train_batch_size=4",
          "actor_rollout_ref.rollout.n=1",
          "actor_rollout_ref.actor.ppo_mini_batch_size=4",
          "actor_rollout_ref.actor.optim.lr=0.01",
          "actor_rollout_ref.actor.strategy=megatron",
          "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=" + std::to_string(tp),
          "actor_rollout_ref.actor.megatron.sequence_parallel=False",
          "actor_rollout_ref.actor.megatron.use_distributed_optimizer=False",
          "actor_rollout_ref.rollout.tensor_model_parallel_size=" + std::to_string(tg)};
}

using Job = test_support::MegatronJob;
using test_support::make_job;

/// This DP group's rows (every TP rank the same).
data::DataProto chunk(int dp_rank, int dp) {
  const Index mine = rows / dp, first = dp_rank * mine;
  MatrixI64 input_ids(mine, prompt + response), position_ids(mine, prompt + response);
  MatrixF attention_mask = MatrixF::Ones(mine, prompt + response), response_mask = MatrixF::Ones(mine, response);
  MatrixF advantages(mine, response);
  for (Index r = 0; r < mine; ++r) {
    for (Index c = 0; c < prompt + response; ++c) {
      input_ids(r, c) = ((first + r) * 7 + c * 3) % 46 + 2;
      position_ids(r, c) = c;
    }
    for (Index c = 0; c < response; ++c) advantages(r, c) = static_cast<float>(((first + r) * response + c) % 5) - 2.0f;
  }
  data::DataProto batch;
  batch.set(std::string(trainer::keys::input_ids), input_ids);
  batch.set(std::string(trainer::keys::attention_mask), attention_mask);
  batch.set(std::string(trainer::keys::position_ids), position_ids);
  batch.set(std::string(trainer::keys::response_mask), response_mask);
  batch.set(std::string(trainer::keys::advantages), advantages);
  return batch;
}

data::DataProto prompts(int dp_rank, int dp) { return test_support::megatron_prompts(dp_rank, dp, rows, prompt, response); }

struct Results {
  MatrixF log_probs, after_update;
  MatrixI64 responses;
};

template <class Worker>
Results run(Job& job, int tg, std::string* meshes = nullptr) {
  Worker worker(job.context);
  worker.init_model(overrides(job.tp, tg), 2);
  if (meshes != nullptr) {
    *meshes = worker.mesh_layouts().train.to_string() + " -> " + worker.mesh_layouts().generation.to_string();
  }
  const int dp_rank = job.context.rank / job.tp;
  Results out;
  out.responses = trainer::int_column(worker.generate_sequences(prompts(dp_rank, job.dp)), trainer::keys::responses);
  data::DataProto batch = chunk(dp_rank, job.dp);
  out.log_probs = trainer::float_column(worker.compute_log_prob(batch), trainer::keys::old_log_probs);
  batch.set(std::string(trainer::keys::old_log_probs), out.log_probs);
  (void)worker.update_actor(batch);
  out.after_update = trainer::float_column(worker.compute_log_prob(batch), trainer::keys::old_log_probs);
  return out;
}

std::string error_of(auto&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

template <class Static>
void check_same_as_dynamic(int tp, int dp, int tg, const std::string& expected_meshes) {
  MpiCommunicator world = MpiCommunicator::world();
  if (world.size() < tp * dp) GTEST_SKIP() << "needs " << tp * dp << " ranks";
  Job job;
  make_job(world, tp, dp, job);
  if (job.context.group == nullptr) return;
  const Results dynamic = run<trainer::MegatronActorRolloutRefWorker<TinyLlama>>(job, tg);
  std::string meshes;
  const Results typed = run<Static>(job, tg, &meshes);
  EXPECT_EQ(meshes, expected_meshes);
  EXPECT_EQ(typed.responses, dynamic.responses);
  EXPECT_EQ(typed.log_probs, dynamic.log_probs);        // bit for bit: the same groups
  EXPECT_EQ(typed.after_update, dynamic.after_update);  // and the same update
  EXPECT_NE(typed.after_update, typed.log_probs);       // (which moved the policy)
}

TEST(MegatronMeshTypes, StaticTp2DenseGenerationIsTheDynamicWorker) {
  using Static = trainer::MegatronActorRolloutRefWorker<TinyLlama, Mesh<TP<2>, DP<>>, Mesh<TP<1>, DP<>>>;
  const int dp = MpiCommunicator::world().size() >= 4 ? 2 : 1;
  check_same_as_dynamic<Static>(2, dp, 1, dp == 2 ? "tp=2,dp=2 -> tp=1,dp=4" : "tp=2,dp=1 -> tp=1,dp=2");
}

TEST(MegatronMeshTypes, StaticTp4ShardedGenerationIsTheDynamicWorker) {
  using Static = trainer::MegatronActorRolloutRefWorker<TinyLlama, Mesh<TP<4>, DP<1>>, Mesh<TP<2>, DP<2>>>;
  check_same_as_dynamic<Static>(4, 1, 2, "tp=4,dp=1 -> tp=2,dp=2");
}

TEST(MegatronMeshTypes, KeysContradictingTheTypesAreNamed) {
  MpiCommunicator world = MpiCommunicator::world();
  if (world.size() < 2) GTEST_SKIP() << "needs 2 ranks";
  Job job;
  make_job(world, 2, 1, job);
  if (job.context.group == nullptr) return;
  using Static = trainer::MegatronActorRolloutRefWorker<TinyLlama, Mesh<TP<2>, DP<>>, Mesh<TP<1>, DP<>>>;
  EXPECT_EQ(error_of([&] { Static(job.context).init_model(overrides(2, 2), 2); }),
            "actor_rollout_ref.rollout.tensor_model_parallel_size: the worker's generation mesh Mesh<TP<1>, DP<>> "
            "fixes tp: expected 1, got 2");
  // A static world size against the group's ranks: at construction.
  using Four = trainer::MegatronActorRolloutRefWorker<TinyLlama, Mesh<TP<2>, DP<2>>, Mesh<TP<1>, DP<4>>>;
  EXPECT_EQ(error_of([&] { Four worker(job.context); }),
            "the actor pool's ranks (trainer.nnodes x trainer.n_gpus_per_node): the worker's training mesh "
            "Mesh<TP<2>, DP<2>> fixes the world size: expected 4, got 2");
  // The loaded model against the model type's static heads.
  using Wrong = trainer::MegatronActorRolloutRefWorker<WrongHeads, Mesh<TP<2>, DP<>>, Mesh<TP<1>, DP<>>>;
  const std::string wrong = error_of([&] { Wrong(job.context).init_model(overrides(2, 1), 2); });
  EXPECT_NE(wrong.find("actor_rollout_ref.model.path: the model type declares num_attention_heads = 8 and "
                       "num_key_value_heads = 2"),
            std::string::npos)
      << wrong;
  EXPECT_NE(wrong.find("the loaded model has 4 and 2"), std::string::npos) << wrong;
  // A dynamic worker names the same rules by key.
  using Dynamic = trainer::MegatronActorRolloutRefWorker<TinyLlama>;
  EXPECT_EQ(error_of([&] { (void)Dynamic::group_mesh(trainer::load_ppo_config(overrides(4, 1)), 2); }),
            "actor_rollout_ref.actor.megatron.tensor_model_parallel_size: expected a divisor of the actor pool's 2 "
            "ranks (trainer.nnodes x trainer.n_gpus_per_node; data parallel size = ranks / tp), got 4");
}

/// The reshard's metrics as the controller logs them: every rank of a tp x dp job generates, the
/// answers are collected as the runtime's megatron_compute_proto collects them (tp rank 0 of each
/// DP group, concatenated in dp order) and read by detail::worker_meta_metrics (what
/// PPOController merges into the step's metrics). Expected: the plan's per-rank figures for the
/// worker's meshes, less the tensors the reshard does not gather (replicated norms; KV heads the
/// training TP copies) and, at tg = 1, plus the training shard kept beside the dense copy.
void check_reshard_metrics(int tp, int dp, int tg) {
  MpiCommunicator world = MpiCommunicator::world();
  if (world.size() < tp * dp) GTEST_SKIP() << "needs " << tp * dp << " ranks";
  SCOPED_TRACE(::testing::Message() << "tp=" << tp << " dp=" << dp << " tg=" << tg);
  Job job;
  make_job(world, tp, dp, job);
  if (job.context.group == nullptr) return;
  trainer::MegatronActorRolloutRefWorker<TinyLlama> worker(job.context);
  worker.init_model(overrides(tp, tg), 2);
  const int rank = job.context.rank, dp_rank = rank / tp;
  const data::DataProto answer = worker.generate_sequences(prompts(dp_rank, dp));

  // Each rank's answer carries its figures (on every rank: the worker reduces them over the group).
  const nlohmann::json& mine = answer.meta_info().at("metrics");
  ASSERT_TRUE(mine.contains("perf/reshard_bytes_received") && mine.contains("perf/peak_param_bytes")) << mine.dump();
  const std::array<std::int64_t, 2> own{mine["perf/reshard_bytes_received"].get<std::int64_t>(),
                                        mine["perf/peak_param_bytes"].get<std::int64_t>()};
  std::vector<std::int64_t> every(static_cast<std::size_t>(2 * tp * dp));
  job.group->all_gather(std::span<const std::int64_t>(own), std::span<std::int64_t>(every));

  // The runtime's collect over the group's mesh, then the controller's reading.
  const hybridflow::GroupMesh mesh(tp, dp, 1);
  std::vector<data::DataProto> parts(static_cast<std::size_t>(dp));
  for (int r = 0; r < tp * dp; ++r) {
    const hybridflow::RankRole role = hybridflow::megatron_role(mesh, r);
    if (!role.collect) continue;
    data::DataProto& part = parts[static_cast<std::size_t>(role.dp_rank)];
    part.meta_info()["metrics"] = {{"timing_s/reshard", 0.5},
                                   {"perf/reshard_bytes_received", every[static_cast<std::size_t>(2 * r)]},
                                   {"perf/peak_param_bytes", every[static_cast<std::size_t>(2 * r + 1)]}};
  }
  const Metrics logged =
      trainer::detail::worker_meta_metrics(hybridflow::concat_and_unpad(std::move(parts), 0).meta_info());
  ASSERT_TRUE(logged.contains("perf/reshard_bytes_received")) << "not in the step's metrics";
  ASSERT_TRUE(logged.contains("perf/peak_param_bytes")) << "not in the step's metrics";
  EXPECT_EQ(logged.at("timing_s/reshard"), 0.5);

  // The plan for the worker's meshes, and the tensors the reshard does not gather.
  const auto& layouts = worker.mesh_layouts();
  const auto plan = parallel::make_reshard_plan(layouts.train, layouts.generation);
  model::Transformer dense = TinyLlama::actor(trainer::load_ppo_config(overrides(tp, tg)));
  std::int64_t model_bytes = 0, replicated = 0, kv_copied = 0;
  const model::TensorParallelPartition& partition = worker.actor().partition();
  dense.for_each_parameter([&](const auto& p) {
    const auto bytes = static_cast<std::int64_t>(p.value.size_bytes());
    model_bytes += bytes;
    if (partition.shard(p.name, 0).replicated()) replicated += bytes;
    else if (partition.kv_replicas > 1 && (p.name.find("k_proj") != std::string_view::npos ||
                                           p.name.find("v_proj") != std::string_view::npos))
      kv_copied += bytes;
  });
  std::int64_t received = 0, peak = 0;
  for (int r = 0; r < tp * dp; ++r) {
    const parallel::ReshardBytes figures = plan.cost(r).bytes(model_bytes);
    std::int64_t expected_received = 0, expected_peak = 0;
    if (tg == 1) {
      expected_received = figures.comm_bytes_per_rank - replicated * (tp - 1) / tp;
      expected_peak = figures.peak_param_bytes_per_rank + (model_bytes - replicated) / tp + replicated;
    } else {
      expected_received = figures.comm_bytes_per_rank - (replicated + kv_copied) * (tp - tg) / (tp * tg);
      expected_peak = figures.peak_param_bytes_per_rank + replicated * (tg - 1) / tg;
    }
    // Balanced: every rank the same figures, each its own plan's.
    EXPECT_EQ(every[static_cast<std::size_t>(2 * r)], expected_received) << "rank " << r << ", plan comm "
                                                                          << figures.comm_bytes_per_rank;
    EXPECT_EQ(every[static_cast<std::size_t>(2 * r + 1)], expected_peak) << "rank " << r << ", plan peak "
                                                                         << figures.peak_param_bytes_per_rank;
    received = std::max(received, expected_received);
    peak = std::max(peak, expected_peak);
  }
  EXPECT_EQ(logged.at("perf/reshard_bytes_received"), static_cast<double>(received));
  EXPECT_EQ(logged.at("perf/peak_param_bytes"), static_cast<double>(peak));
  EXPECT_GT(received, 0);
  if (world.rank() == 0 && std::getenv("VERL_TEST_VERBOSE") != nullptr) {
    const parallel::ReshardBytes figures = plan.cost(0).bytes(model_bytes);
    fmt::print("tp={} dp={} tg={}: logged perf/reshard_bytes_received {} (plan comm_bytes_per_rank {}), "
               "perf/peak_param_bytes {} (plan peak_param_bytes_per_rank {}), M {}, replicated {}, kv copied {}\n",
               tp, dp, tg, received, figures.comm_bytes_per_rank, peak, figures.peak_param_bytes_per_rank, model_bytes,
               replicated, kv_copied);
  }
}

TEST(MegatronReshardMetrics, Tp2Dp1DenseGenerationReachesTheStepMetrics) { check_reshard_metrics(2, 1, 1); }
TEST(MegatronReshardMetrics, Tp2Dp2DenseGenerationReachesTheStepMetrics) { check_reshard_metrics(2, 2, 1); }
TEST(MegatronReshardMetrics, Tp4ShardedGenerationTg2Dg2ReachesTheStepMetrics) { check_reshard_metrics(4, 1, 2); }

}  // namespace
