// Pipeline parallelism in the Megatron actor worker (actor_rollout_ref.actor.megatron.
// pipeline_model_parallel_size > 1): the layers split evenly over the stages, micro-batches run
// through them with 1F1B (forward only for the log-probs), the generation gathers every stage's
// layers (pg = 1). On real ranks, for pp x tp x dp in Megatron's order (tp fastest, then dp, then pp):
//   - three steps of compute_log_prob, compute_ref_log_prob (a KL loss needs them) and update_actor
//     with micro-batches of one row of different token counts (left-padded prompts, responses
//     ending early): log-probs, entropies, pg_loss, kl_loss, the update's entropy and grad_norm
//     within 1e-4 relative of the pp = 1 run of the same tp x dp and of one process;
//   - the responses the same tokens;
//   - perf/reshard_bytes_received and perf/peak_param_bytes (counted by the communicators as the
//     gathers happen) equal to the figures from the tensors each stage holds, and to the reshard
//     plan's (p t - 1)/(p t) M and M corrected as the worker's header comment documents;
//   - the static mesh type Mesh<TP<2>, DP<>, PP<2>> is the dynamic worker, bit for bit; two runs are
//     bit-identical (same-seed determinism);
//   - checkpoints hold every stage's tensors and moments (the pp = 1 worker's state) and resume
//     bit for bit;
//   - a layer count the stages do not divide, tied embeddings over stages, a TP-sharded generation
//     under a pipeline and interleaved stages are errors naming the key, expected and actual values.
//   - with Megatron's sequence parallelism (tp > 1) the stages exchange each TP rank's slice of the
//     tokens: the same figures as above against the runs without it;
// np 4: pp2 x tp2 x dp1 (with sequence parallelism too), pp2 x tp1 x dp2 (with the distributed
// optimizer too), pp4 x tp1 x dp1; np 8 (the `long` label): pp2 x tp2 x dp2 (and with sequence
// parallelism and the distributed optimizer).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "megatron_job.hpp"
#include "verl/hybridflow/dispatch.hpp"
#include "verl/hybridflow/wire.hpp"
#include "verl/model/hf_config.hpp"
#include "verl/model/transformer/tensor_parallel_transformer.hpp"
#include "verl/model/transformer/transformer.hpp"
#include "verl/parallel/mpi_communicator.hpp"
#include "verl/parallel/reshard_plan.hpp"
#include "verl/trainer/workers/megatron_actor_worker.hpp"

namespace {

using namespace verl;
using parallel::DP;
using parallel::Mesh;
using parallel::MpiCommunicator;
using parallel::PP;
using parallel::TP;

model::Transformer tiny_model(std::int64_t layers, bool tied) {
  const nlohmann::json json = {{"model_type", "llama"},        {"hidden_size", 32},        {"intermediate_size", 64},
                               {"num_hidden_layers", layers},  {"num_attention_heads", 4}, {"num_key_value_heads", 2},
                               {"vocab_size", 48},             {"rms_norm_eps", 1e-6},     {"max_position_embeddings", 32},
                               {"eos_token_id", 1},            {"tie_word_embeddings", tied}};
  return model::Transformer::random(model::HfModelConfig::from_json(json, "tiny llama"),
                                    {.initializer_range = 0.2, .seed = 5}, {.num_threads = 1});
}

/// A user's model type: 4 layers (2 or 4 stages), 4 attention and 2 KV heads, untied.
struct TinyLlama {
  using policy_type = model::Transformer;
  static constexpr std::int64_t num_attention_heads = 4;
  static constexpr std::int64_t num_key_value_heads = 2;
  static model::Transformer actor(const trainer::PPOConfig&) { return tiny_model(4, false); }
  static model::Transformer reference(const trainer::PPOConfig& config, const model::Transformer&) { return actor(config); }
};
struct ThreeLayers : TinyLlama {
  static model::Transformer actor(const trainer::PPOConfig&) { return tiny_model(3, false); }
};
struct Tied : TinyLlama {
  static model::Transformer actor(const trainer::PPOConfig&) { return tiny_model(4, true); }
};

constexpr Index rows = 4, prompt = 5, response = 4, steps = 3;

std::vector<std::string> overrides(int tp, int pp, int tg = 1, bool distributed_optimizer = false, bool sequence_parallel = false) {
  return {"data.train_batch_size=4",
          "actor_rollout_ref.rollout.n=1",
          "actor_rollout_ref.actor.ppo_mini_batch_size=4",
          "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
          "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=1",
          "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=1",
          "actor_rollout_ref.actor.optim.lr=0.01",
          "actor_rollout_ref.actor.grad_clip=0.5",  // the norm is above it: clipping acts
          "actor_rollout_ref.actor.use_kl_loss=True",
          "actor_rollout_ref.actor.kl_loss_coef=0.1",
          "actor_rollout_ref.actor.strategy=megatron",
          "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=" + std::to_string(tp),
          "actor_rollout_ref.actor.megatron.pipeline_model_parallel_size=" + std::to_string(pp),
          std::string("actor_rollout_ref.actor.megatron.sequence_parallel=") + (sequence_parallel ? "True" : "False"),
          std::string("actor_rollout_ref.actor.megatron.use_distributed_optimizer=") + (distributed_optimizer ? "True" : "False"),
          "actor_rollout_ref.rollout.tensor_model_parallel_size=" + std::to_string(tg)};
}

/// This DP group's rows: row g has g % 3 left-padded prompt tokens and its response ends g % 2
/// tokens early, so that one-row micro-batches have different token counts.
data::DataProto chunk(int dp_rank, int dp) {
  const Index mine = rows / dp, first = dp_rank * mine;
  MatrixI64 input_ids(mine, prompt + response), position_ids(mine, prompt + response);
  MatrixF attention_mask = MatrixF::Ones(mine, prompt + response), response_mask = MatrixF::Ones(mine, response);
  MatrixF advantages(mine, response);
  for (Index r = 0; r < mine; ++r) {
    const Index g = first + r, pad = g % 3, short_by = g % 2;
    Index position = 0;
    for (Index c = 0; c < prompt + response; ++c) {
      const bool valid = c >= pad && c < prompt + response - short_by;
      attention_mask(r, c) = valid ? 1.0f : 0.0f;
      input_ids(r, c) = valid ? (g * 7 + c * 3) % 46 + 2 : 0;
      position_ids(r, c) = valid ? position++ : 0;
    }
    for (Index c = 0; c < response; ++c) {
      response_mask(r, c) = c < response - short_by ? 1.0f : 0.0f;
      advantages(r, c) = static_cast<float>((g * response + c) % 5) - 2.0f;
    }
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

/// One run's results on every rank of the world, as the dispatch collects them (tp rank 0 of the
/// last stage of each DP group), from the world's first job.
struct Results {
  std::vector<double> log_probs, entropy, ref_log_probs;  ///< per step (and once after), rows x response
  std::vector<double> metrics;                            ///< per step: pg_loss, kl_loss, entropy, grad_norm
  std::vector<double> responses;                          ///< rows x response token ids
  double received = 0, peak = 0;                          ///< the generation's reshard metrics
};

constexpr const char* metric_names[] = {"actor/pg_loss", "actor/kl_loss", "actor/entropy", "actor/grad_norm"};
constexpr std::size_t metric_count = std::size(metric_names);

template <class Worker>
Results run(int tp, int dp, int pp, bool distributed_optimizer = false, bool sequence_parallel = false) {
  MpiCommunicator world = MpiCommunicator::world();
  test_support::MegatronJob job;
  test_support::make_job(world, tp, dp, job, pp);
  const std::size_t per_pass = static_cast<std::size_t>(rows * response);
  std::vector<double> flat(per_pass * (3 * (steps + 1) + 1) + steps * metric_count + 2, 0.0);
  const auto log_probs_at = [&](std::size_t pass) { return flat.data() + pass * per_pass; };
  const auto entropy_at = [&](std::size_t pass) { return flat.data() + ((steps + 1) + pass) * per_pass; };
  const auto ref_at = [&](std::size_t pass) { return flat.data() + (2 * (steps + 1) + pass) * per_pass; };
  double* const responses = flat.data() + 3 * (steps + 1) * per_pass;
  double* const metrics = responses + per_pass;
  double* const reshard = metrics + steps * metric_count;
  const int size = tp * dp * pp;
  if (job.context.group != nullptr && world.rank() < size) {
    Worker worker(job.context);
    worker.init_model(overrides(tp, pp, 1, distributed_optimizer, sequence_parallel), steps);
    const int rank = job.context.rank, tp_rank = rank % tp, dp_rank = (rank / tp) % dp, pp_rank = rank / (tp * dp);
    EXPECT_EQ(worker.pipeline_rank(), pp_rank);
    EXPECT_EQ(worker.pipeline_size(), pp);
    const bool collected = hybridflow::megatron_role(hybridflow::GroupMesh(tp, dp, pp), rank).collect;
    EXPECT_EQ(collected, tp_rank == 0 && pp_rank == pp - 1);
    const Index mine = rows / dp, first = dp_rank * mine;
    const auto put = [&](double* out, const MatrixF& m) {
      for (Index r = 0; r < mine; ++r)
        for (Index c = 0; c < response; ++c) out[(first + r) * response + c] = m(r, c);
    };
    const data::DataProto generated = worker.generate_sequences(prompts(dp_rank, dp));
    if (collected) {
      const MatrixI64& tokens = trainer::int_column(generated, trainer::keys::responses);
      for (Index r = 0; r < mine; ++r)
        for (Index c = 0; c < response; ++c) responses[(first + r) * response + c] = static_cast<double>(tokens(r, c));
      if (dp_rank == 0) {
        reshard[0] = generated.meta_info().at("metrics").at("perf/reshard_bytes_received").get<double>();
        reshard[1] = generated.meta_info().at("metrics").at("perf/peak_param_bytes").get<double>();
      }
    }
    // Before each update and once after the last: the log-prob passes (forward only); each
    // update uses them (the KL loss reads ref_log_prob; the old log-probs are the on-policy ones).
    for (std::size_t pass = 0; pass <= steps; ++pass) {
      data::DataProto batch = chunk(dp_rank, dp);
      const data::DataProto old = worker.compute_log_prob(batch);
      const data::DataProto ref = worker.compute_ref_log_prob(batch);
      // Only the last stage has rows (the dispatch collects one of its ranks).
      EXPECT_EQ(old.has_tensor(trainer::keys::old_log_probs), pp_rank == pp - 1);
      if (collected) {
        put(log_probs_at(pass), trainer::float_column(old, trainer::keys::old_log_probs));
        put(entropy_at(pass), trainer::float_column(old, trainer::keys::entropys));
        put(ref_at(pass), trainer::float_column(ref, trainer::keys::ref_log_prob));
      }
      if (pass == steps) break;
      if (old.has_tensor(trainer::keys::old_log_probs)) {
        batch.set(std::string(trainer::keys::old_log_probs), trainer::float_column(old, trainer::keys::old_log_probs));
        batch.set(std::string(trainer::keys::ref_log_prob), trainer::float_column(ref, trainer::keys::ref_log_prob));
      }
      batch.meta_info()["entropy_metric"] = true;
      const data::DataProto result = worker.update_actor(batch);
      if (collected && dp_rank == 0) {
        const nlohmann::json& m = result.meta_info().at("metrics");
        for (std::size_t k = 0; k < metric_count; ++k) metrics[pass * metric_count + k] = m.at(metric_names[k]).get<double>();
      }
    }
  }
  world.all_reduce(std::span<double>(flat), parallel::ReduceOp::sum);
  Results out;
  for (std::size_t pass = 0; pass <= steps; ++pass) {
    out.log_probs.insert(out.log_probs.end(), log_probs_at(pass), log_probs_at(pass) + per_pass);
    out.entropy.insert(out.entropy.end(), entropy_at(pass), entropy_at(pass) + per_pass);
    out.ref_log_probs.insert(out.ref_log_probs.end(), ref_at(pass), ref_at(pass) + per_pass);
  }
  out.responses.assign(responses, responses + per_pass);
  out.metrics.assign(metrics, metrics + steps * metric_count);
  out.received = reshard[0];
  out.peak = reshard[1];
  return out;
}

/// max |a - b| / max(|a|, |b|, floor) over the values.
double max_relative(const std::vector<double>& a, const std::vector<double>& b, double floor = 1e-3) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    worst = std::max(worst, std::abs(a[i] - b[i]) / std::max({std::abs(a[i]), std::abs(b[i]), floor}));
  }
  return worst;
}

void expect_close(const Results& piped, const Results& reference, std::string_view against) {
  SCOPED_TRACE(std::string(against));
  const double lp = max_relative(piped.log_probs, reference.log_probs), ent = max_relative(piped.entropy, reference.entropy),
               ref = max_relative(piped.ref_log_probs, reference.ref_log_probs),
               met = max_relative(piped.metrics, reference.metrics);
  EXPECT_LE(lp, 1e-4) << "log-probs";
  EXPECT_LE(ent, 1e-4) << "entropy";
  EXPECT_LE(ref, 1e-4) << "ref log-probs";
  EXPECT_LE(met, 1e-4) << "pg_loss, kl_loss, entropy, grad_norm";
  EXPECT_EQ(piped.responses, reference.responses);
  if (MpiCommunicator::world().rank() == 0 && std::getenv("VERL_TEST_VERBOSE") != nullptr) {
    fmt::print("  vs {}: max relative differences: log-probs {:.3g}, entropy {:.3g}, ref {:.3g}, metrics {:.3g}\n", against,
               lp, ent, ref, met);
  }
}

/// The reshard's figures from the tensors each rank holds: stage s's tensors all-gathered over
/// the TP group (all but the rank's own shard, replicated tensors not at all), every other
/// stage's tensors received whole; the peak is the rank's shard plus the dense copy. The max over
/// the ranks. Also checked against the plan's figures with the worker's documented corrections.
void expect_reshard_figures(const Results& piped, int tp, int dp, int pp) {
  const model::Transformer dense = tiny_model(4, false);
  const model::HfModelConfig& config = dense.config();
  std::int64_t model_bytes = 0;
  dense.for_each_parameter([&](const auto& p) { model_bytes += static_cast<std::int64_t>(p.value.size_bytes()); });
  const auto plan = parallel::make_reshard_plan(parallel::Mesh<TP<>, DP<>, PP<>>(tp, dp, pp), parallel::Mesh<TP<>, DP<>>(1, tp * dp * pp));
  std::int64_t received = 0, peak = 0;
  for (int s = 0; s < pp; ++s) {
    for (int r = 0; r < tp; ++r) {
      const auto partition = model::TensorParallelPartition::of(config, tp, r);
      std::int64_t got = 0, shard = 0, stage_full = 0, stage_replicated = 0;
      dense.for_each_parameter([&](const auto& p) {
        const auto full = static_cast<std::int64_t>(p.value.size_bytes());
        if (model::pipeline_stage_of(config, pp, p.name) != s) {
          got += full;
          return;
        }
        const model::TensorParallelShard sh = partition.shard(p.name, r);
        const std::int64_t own = sh.replicated() ? full : full / sh.full * sh.length;
        got += sh.replicated() ? 0 : full - own;
        shard += own;
        stage_full += full;
        if (sh.replicated()) stage_replicated += full;
      });
      received = std::max(received, got);
      peak = std::max(peak, shard + model_bytes);
      // The plan: (p t - 1) / (p t) M received, M at the peak; the stage holds stage_full of M/p
      // (the embedding on the first stage, the head on the last) and its replicated tensors are
      // not gathered; the worker keeps its shard beside the dense copy.
      const parallel::ReshardBytes figures = plan.cost(s * tp * dp + r).bytes(model_bytes);
      const double documented = static_cast<double>(figures.comm_bytes_per_rank) +
                                (static_cast<double>(model_bytes) / pp - static_cast<double>(stage_full)) / tp -
                                static_cast<double>(stage_replicated) * (tp - 1) / tp;
      EXPECT_NEAR(static_cast<double>(got), documented, 1.0) << "stage " << s << " tp rank " << r;
      EXPECT_EQ(figures.peak_param_bytes_per_rank, model_bytes);
      if (MpiCommunicator::world().rank() == 0 && std::getenv("VERL_TEST_VERBOSE") != nullptr) {
        fmt::print("  stage {} tp {}: received {} (plan comm_bytes_per_rank {}), peak {} (plan {}), M {}\n", s, r, got,
                   figures.comm_bytes_per_rank, shard + model_bytes, figures.peak_param_bytes_per_rank, model_bytes);
      }
    }
  }
  EXPECT_GT(received, 0);
  EXPECT_EQ(piped.received, static_cast<double>(received));
  EXPECT_EQ(piped.peak, static_cast<double>(peak));
}

using Dynamic = trainer::MegatronActorRolloutRefWorker<TinyLlama, Mesh<TP<>, DP<>, PP<>>>;

/// `sequence_parallel`: the pipelined run with Megatron's sequence parallelism (its stages exchange
/// their token slices), against the runs without it.
void check_pipeline(int tp, int dp, int pp, bool distributed_optimizer = false, bool sequence_parallel = false) {
  MpiCommunicator world = MpiCommunicator::world();
  if (world.size() < tp * dp * pp) GTEST_SKIP() << "needs " << tp * dp * pp << " ranks";
  SCOPED_TRACE(::testing::Message() << "pp=" << pp << " tp=" << tp << " dp=" << dp << " sp=" << sequence_parallel);
  const Results piped = run<Dynamic>(tp, dp, pp, distributed_optimizer, sequence_parallel);
  const Results flat = run<Dynamic>(tp, dp, 1, distributed_optimizer);
  const Results one = run<Dynamic>(1, 1, 1);
  expect_close(piped, flat, fmt::format("pp=1 tp={} dp={}", tp, dp));
  expect_close(piped, one, "one process");
  EXPECT_NE(piped.log_probs[0], piped.log_probs[steps * rows * response]);  // the updates moved the policy
  // The collected ranks are the ones with the rows: every valid response token has a log-prob.
  const data::DataProto all = chunk(0, 1);
  const MatrixF& mask = trainer::float_column(all, trainer::keys::response_mask);
  for (Index r = 0; r < rows; ++r)
    for (Index c = 0; c < response; ++c)
      EXPECT_EQ(piped.log_probs[static_cast<std::size_t>(r * response + c)] != 0.0, mask(r, c) != 0.0f) << r << ", " << c;
  expect_reshard_figures(piped, tp, dp, pp);
}

TEST(MegatronPipeline, Pp2Tp2Dp1MatchesTheUnpipelinedRuns) { check_pipeline(2, 1, 2); }
// One-row micro-batches of 9, 7, 6 and 8 tokens: slices of 5, 4, 3 and 4 rows (odd counts pad the second rank's slice).
TEST(MegatronPipeline, Pp2Tp2Dp1SequenceParallelMatchesTheUnpipelinedRuns) { check_pipeline(2, 1, 2, false, true); }
TEST(MegatronPipeline, Pp2Tp1Dp2MatchesTheUnpipelinedRuns) { check_pipeline(1, 2, 2); }
TEST(MegatronPipeline, Pp2Tp1Dp2DistributedOptimizerMatchesTheUnpipelinedRuns) { check_pipeline(1, 2, 2, true); }
TEST(MegatronPipeline, Pp4Tp1Dp1MatchesTheUnpipelinedRuns) { check_pipeline(1, 1, 4); }
// np 8 (oversubscribed; the `long` label): pp2 x tp2 x dp2 -> tg1 dg8.
TEST(MegatronPipeline, Pp2Tp2Dp2MatchesTheUnpipelinedRuns) {
  if (MpiCommunicator::world().size() < 8) GTEST_SKIP() << "needs 8 ranks";
  check_pipeline(2, 2, 2);
}
TEST(MegatronPipeline, Pp2Tp2Dp2SequenceParallelDistributedOptimizerMatchesTheUnpipelinedRuns) {
  if (MpiCommunicator::world().size() < 8) GTEST_SKIP() << "needs 8 ranks";
  check_pipeline(2, 2, 2, true, true);
}

TEST(MegatronPipeline, StaticMeshTypeIsTheDynamicWorkerAndRunsAreDeterministic) {
  MpiCommunicator world = MpiCommunicator::world();
  if (world.size() < 4) GTEST_SKIP() << "needs 4 ranks";
  using Static = trainer::MegatronActorRolloutRefWorker<TinyLlama, Mesh<TP<2>, DP<>, PP<2>>, Mesh<TP<1>, DP<>>>;
  static_assert(trainer::layout_rules<Mesh<TP<2>, DP<>, PP<2>>, Mesh<TP<1>, DP<>>, TinyLlama>::value);
  const Results dynamic = run<Dynamic>(2, 1, 2), again = run<Dynamic>(2, 1, 2), typed = run<Static>(2, 1, 2);
  EXPECT_EQ(again.log_probs, dynamic.log_probs);
  EXPECT_EQ(again.metrics, dynamic.metrics);
  EXPECT_EQ(again.responses, dynamic.responses);
  EXPECT_EQ(typed.log_probs, dynamic.log_probs);
  EXPECT_EQ(typed.metrics, dynamic.metrics);
  EXPECT_EQ(typed.responses, dynamic.responses);
}

/// Rank 0's checkpoint_state() on every rank of the group (what a resume hands every rank).
trainer::RoleState share(MpiCommunicator& group, const trainer::RoleState& mine) {
  hybridflow::Bytes bytes = group.rank() == 0 ? hybridflow::to_bytes(mine) : hybridflow::Bytes{};
  std::int64_t size = static_cast<std::int64_t>(bytes.size());
  group.broadcast(std::span<std::int64_t>(&size, 1), 0);
  std::vector<std::int64_t> words(static_cast<std::size_t>((size + 7) / 8));
  if (group.rank() == 0) std::memcpy(words.data(), bytes.data(), bytes.size());
  group.broadcast(std::span<std::int64_t>(words), 0);
  bytes.resize(static_cast<std::size_t>(size));
  std::memcpy(bytes.data(), words.data(), bytes.size());
  return hybridflow::from_bytes<trainer::RoleState>(bytes);
}

/// One training step on the DP group's rows: log-probs, reference log-probs, update.
template <class Worker>
void train_step(Worker& worker, int dp_rank, int dp) {
  data::DataProto batch = chunk(dp_rank, dp);
  const data::DataProto old = worker.compute_log_prob(batch);
  const data::DataProto ref = worker.compute_ref_log_prob(batch);
  if (old.has_tensor(trainer::keys::old_log_probs)) {
    batch.set(std::string(trainer::keys::old_log_probs), trainer::float_column(old, trainer::keys::old_log_probs));
    batch.set(std::string(trainer::keys::ref_log_prob), trainer::float_column(ref, trainer::keys::ref_log_prob));
  }
  (void)worker.update_actor(batch);
}

// Checkpoints at the same mesh: the state holds the whole model (every stage's tensors, in the
// dense worker's order, with their moments), equal to the pp = 1 worker's after the same step,
// and a worker resumed from it continues bit for bit as the one that saved it.
TEST(MegatronPipeline, CheckpointsHoldEveryStageAndResumeExactly) {
  MpiCommunicator world = MpiCommunicator::world();
  if (world.size() < 4) GTEST_SKIP() << "needs 4 ranks";
  constexpr int tp = 2, dp = 1, pp = 2;
  test_support::MegatronJob job;
  test_support::make_job(world, tp, dp, job, pp);
  trainer::RoleState piped_state;
  if (job.context.group != nullptr) {
    const int rank = job.context.rank, dp_rank = (rank / tp) % dp;
    Dynamic saver(job.context);
    saver.init_model(overrides(tp, pp), steps);
    train_step(saver, dp_rank, dp);
    piped_state = saver.checkpoint_state();
    const trainer::RoleState saved = share(*job.group, piped_state);
    train_step(saver, dp_rank, dp);
    train_step(saver, dp_rank, dp);
    const data::DataProto continued = saver.compute_log_prob(chunk(dp_rank, dp));

    Dynamic resumed(job.context);
    resumed.init_model(overrides(tp, pp), steps);
    resumed.load_checkpoint_state(saved);
    train_step(resumed, dp_rank, dp);
    train_step(resumed, dp_rank, dp);
    const data::DataProto again = resumed.compute_log_prob(chunk(dp_rank, dp));
    EXPECT_EQ(again.has_tensor(trainer::keys::old_log_probs), continued.has_tensor(trainer::keys::old_log_probs));
    if (continued.has_tensor(trainer::keys::old_log_probs)) {
      EXPECT_EQ(trainer::float_column(again, trainer::keys::old_log_probs),
                trainer::float_column(continued, trainer::keys::old_log_probs));
    }
  }
  // The pp = 1 worker of the same tp x dp after the same step.
  test_support::MegatronJob flat_job;
  test_support::make_job(world, tp, dp, flat_job);
  trainer::RoleState flat_state;
  if (flat_job.context.group != nullptr) {
    Dynamic flat(flat_job.context);
    flat.init_model(overrides(tp, 1), steps);
    train_step(flat, (flat_job.context.rank / tp) % dp, dp);
    flat_state = flat.checkpoint_state();
  }
  if (world.rank() != 0) return;
  ASSERT_EQ(piped_state.model.size(), flat_state.model.size());
  ASSERT_EQ(piped_state.optimizer.exp_avg.size(), piped_state.model.size());
  ASSERT_EQ(flat_state.optimizer.exp_avg.size(), flat_state.model.size());
  EXPECT_EQ(piped_state.optimizer.step, flat_state.optimizer.step);
  EXPECT_EQ(piped_state.extra, flat_state.extra);
  double worst = 0;
  const auto relative = [&](const std::vector<float>& a, const std::vector<float>& b) {
    ASSERT_EQ(a.size(), b.size());
    for (std::size_t j = 0; j < a.size(); ++j)
      worst = std::max(worst, std::abs(double(a[j]) - double(b[j])) / std::max({std::abs(double(a[j])), std::abs(double(b[j])), 1e-6}));
  };
  for (std::size_t i = 0; i < flat_state.model.size(); ++i) {
    EXPECT_EQ(piped_state.model[i].name, flat_state.model[i].name) << i;
    EXPECT_EQ(piped_state.model[i].shape, flat_state.model[i].shape) << flat_state.model[i].name;
    relative(piped_state.model[i].values, flat_state.model[i].values);
    relative(piped_state.optimizer.exp_avg[i], flat_state.optimizer.exp_avg[i]);
    relative(piped_state.optimizer.exp_avg_sq[i], flat_state.optimizer.exp_avg_sq[i]);
  }
  EXPECT_LE(worst, 1e-4) << "weights and moments against the pp = 1 worker's";
  if (std::getenv("VERL_TEST_VERBOSE") != nullptr) fmt::print("  checkpoint vs pp=1: max relative difference {:.3g}\n", worst);
}

std::string init_error(auto&& make_worker, int tp, int dp, int pp, std::vector<std::string> keys) {
  MpiCommunicator world = MpiCommunicator::world();
  test_support::MegatronJob job;
  test_support::make_job(world, tp, dp, job, pp);
  std::string error;
  if (job.context.group != nullptr) {
    try {
      auto worker = make_worker(job.context);
      worker.init_model(keys, 1);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  return job.context.group != nullptr ? error : "not a member";
}

TEST(MegatronPipeline, WhatIsNotBuiltIsRefusedByName) {
  MpiCommunicator world = MpiCommunicator::world();
  if (world.size() < 2) GTEST_SKIP() << "needs 2 ranks";
  const std::string pp_key = "actor_rollout_ref.actor.megatron.pipeline_model_parallel_size";
  const auto worker_of = []<class Models>(hybridflow::WorkerContext& context) {
    return trainer::MegatronActorRolloutRefWorker<Models, Mesh<TP<>, DP<>, PP<>>>(context);
  };
  std::string error = init_error([&](auto& c) { return worker_of.template operator()<ThreeLayers>(c); }, 1, 1, 2, overrides(1, 2));
  if (error != "not a member") {
    EXPECT_NE(error.find(pp_key + ": expected a divisor of the model's num_hidden_layers = 3"), std::string::npos) << error;
    EXPECT_NE(error.find("got 2"), std::string::npos) << error;
  }
  error = init_error([&](auto& c) { return worker_of.template operator()<Tied>(c); }, 1, 1, 2, overrides(1, 2));
  if (error != "not a member") {
    EXPECT_NE(error.find(pp_key + ": expected 1 for a model with tie_word_embeddings = true"), std::string::npos) << error;
  }
  // Interleaved stages (virtual pipeline) are not built: refused by name.
  try {
    (void)trainer::load_ppo_config({"actor_rollout_ref.actor.strategy=megatron", pp_key + "=2",
                                    "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
                                    "actor_rollout_ref.actor.megatron.virtual_pipeline_model_parallel_size=2"});
    ADD_FAILURE() << "expected an error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("actor_rollout_ref.actor.megatron.virtual_pipeline_model_parallel_size: not "
                                         "supported by verl-cpp yet"),
              std::string::npos)
        << e.what();
  }
  // TP-sharded generation from a pipeline: the configuration names the generation key.
  try {
    (void)trainer::load_ppo_config({"actor_rollout_ref.actor.strategy=megatron", "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2",
                                    "actor_rollout_ref.actor.megatron.sequence_parallel=False", pp_key + "=2",
                                    "actor_rollout_ref.rollout.tensor_model_parallel_size=2"});
    ADD_FAILURE() << "expected an error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("actor_rollout_ref.rollout.tensor_model_parallel_size: expected 1 with " + pp_key +
                                         " = 2 > 1"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
