// The Megatron critic (critic.strategy=megatron, MegatronCriticWorker) on real ranks: the world is
// cut into jobs of tp x dp ranks (tp fastest), each job one worker group driven SPMD (every rank
// calls the worker's methods, each DP group with its chunk of the rows, as MEGATRON_COMPUTE_PROTO
// sends them). Against the same job in one process with the data-parallel CriticWorker:
//   - compute_values and three update_critic steps (two mini-batches each, micro-batches of one
//     row, clipping acting, left-padded prompts) give the same values, vf_loss, vf_clipfrac,
//     vpred_mean, grad_norm, final weights and AdamW moments within 1e-4 relative, at tp 2 (np 2;
//     with and without Megatron's sequence parallelism), tp 2 x dp 2 (with and without the
//     distributed optimizer) and tp 4 (np 4; one KV head, so it is copied on every TP rank); with
//     pipeline stages (one layer each): pp 2 (np 2), pp 2 x tp 2 with sequence parallelism and
//     pp 2 x dp 2 with the distributed optimizer (np 4);
//   - the TP ranks of a DP group return the same values and metrics (the dispatch collects tp 0);
//   - a checkpoint saved at the largest layout (and with pipeline stages) holds the dense critic's
//     tensors: CriticWorker resumes from it, and the Megatron critic resumes from CriticWorker's,
//     each step after that within 1e-4 of the uninterrupted dense run;
//   - a tp that does not divide the job's ranks is an error naming the key and the values.
// The model layer alone: the TP critic's values and full gradients equal the dense critic's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "megatron_job.hpp"
#include "verl/hybridflow/wire.hpp"
#include "verl/model/hf_config.hpp"
#include "verl/model/transformer/critic.hpp"
#include "verl/model/transformer/tensor_parallel_critic.hpp"
#include "verl/parallel/mpi_communicator.hpp"
#include "verl/parallel/process_group.hpp"
#include "verl/trainer/workers/critic_worker.hpp"
#include "verl/trainer/workers/megatron_critic_worker.hpp"

namespace {

using namespace verl;
using parallel::MpiCommunicator;
using trainer::RoleState;
using test_support::broadcast_state;

static_assert(model::ValueModel<model::TensorParallelCritic<MpiCommunicator>>);

/// A tiny Qwen2 critic (q/k/v biases) with 4 heads over one KV head: at tp 2 and 4 the KV head is
/// copied on the ranks (its gradient counted once), beside replicated norms and sharded matrices.
model::TransformerCritic tiny_critic() {
  const nlohmann::json json = {{"model_type", "qwen2"},       {"hidden_size", 32},        {"intermediate_size", 64},
                               {"num_hidden_layers", 2},      {"num_attention_heads", 4}, {"num_key_value_heads", 1},
                               {"vocab_size", 48},            {"rms_norm_eps", 1e-6},     {"max_position_embeddings", 32},
                               {"eos_token_id", 1},           {"tie_word_embeddings", false}};
  return model::TransformerCritic::random(model::HfModelConfig::from_json(json, "tiny qwen2 critic"),
                                          {.initializer_range = 0.2, .seed = 5}, {.num_threads = 1});
}
struct TinyCritic {
  using critic_type = model::TransformerCritic;
  static critic_type critic(const trainer::PPOConfig&) { return tiny_critic(); }
};
using DenseWorker = trainer::CriticWorker<TinyCritic>;
using Worker = trainer::MegatronCriticWorker<TinyCritic>;

constexpr Index rows = 8, prompt = 4, response = 3, mini_batch = 4;
constexpr int steps = 3;
constexpr double tolerance = 1e-4;

struct Layout {
  int tp = 1, dp = 1, pp = 1;
  bool sequence_parallel = false;
  bool distributed_optimizer = false;
};

std::vector<std::string> overrides(const Layout* megatron) {
  std::vector<std::string> keys = {"data.train_batch_size=8",
                                   "actor_rollout_ref.rollout.n=1",
                                   "actor_rollout_ref.actor.ppo_mini_batch_size=4",
                                   "critic.ppo_mini_batch_size=4",
                                   "critic.ppo_micro_batch_size_per_gpu=1",
                                   "critic.forward_micro_batch_size_per_gpu=3",
                                   "critic.optim.lr=0.01",
                                   // Small enough that the steps are clipped (the norms here are about 1).
                                   "critic.grad_clip=0.3",
                                   "critic.cliprange_value=0.2"};
  if (megatron != nullptr) {
    keys.push_back("critic.strategy=megatron");
    keys.push_back(fmt::format("critic.megatron.tensor_model_parallel_size={}", megatron->tp));
    keys.push_back(fmt::format("critic.megatron.pipeline_model_parallel_size={}", megatron->pp));
    keys.push_back(fmt::format("critic.megatron.sequence_parallel={}", megatron->sequence_parallel ? "True" : "False"));
    keys.push_back(fmt::format("critic.megatron.use_distributed_optimizer={}",
                               megatron->distributed_optimizer ? "True" : "False"));
  }
  return keys;
}

/// Every row of step `step` without values and returns: left-padded prompts (row r has r % 3
/// padding tokens), the last response token of every third row masked.
data::DataProto whole_batch(int step) {
  MatrixI64 input_ids = MatrixI64::Zero(rows, prompt + response), position_ids = MatrixI64::Zero(rows, prompt + response);
  MatrixF attention_mask = MatrixF::Zero(rows, prompt + response), response_mask = MatrixF::Ones(rows, response);
  for (Index r = 0; r < rows; ++r) {
    const Index padding = r % 3;
    std::int64_t position = 0;
    for (Index c = padding; c < prompt + response; ++c) {
      input_ids(r, c) = (r * 5 + c * 7 + step * 3) % 45 + 2;
      attention_mask(r, c) = 1.0f;
      position_ids(r, c) = position++;
    }
    if (r % 3 == 2) response_mask(r, response - 1) = 0.0f;
  }
  data::DataProto batch;
  batch.set(std::string(trainer::keys::input_ids), input_ids);
  batch.set(std::string(trainer::keys::attention_mask), attention_mask);
  batch.set(std::string(trainer::keys::position_ids), position_ids);
  batch.set(std::string(trainer::keys::response_mask), response_mask);
  return batch;
}

MatrixF returns_of(int step) {
  MatrixF returns(rows, response);
  for (Index r = 0; r < rows; ++r)
    for (Index c = 0; c < response; ++c) returns(r, c) = static_cast<float>(std::cos(0.3 * static_cast<double>(r * response + c + step)));
  return returns;
}

/// The update's rows: the whole batch with every row's values and the step's returns, in
/// mini_batch_major_order over `dp` (as the controller sends them), DP group `dp_rank`'s chunk.
data::DataProto update_chunk(int step, const MatrixF& values, int dp_rank, int dp) {
  data::DataProto all = whole_batch(step);
  all.set(std::string(trainer::keys::values), values);
  all.set(std::string(trainer::keys::returns), returns_of(step));
  all.reorder(trainer::mini_batch_major_order(rows, mini_batch, dp, "test mini-batch"));
  const Index share = rows / dp;
  return all.slice(dp_rank * share, (dp_rank + 1) * share);
}

constexpr const char* metric_names[] = {"critic/vf_loss", "critic/grad_norm", "critic/vf_clipfrac", "critic/vpred_mean"};

/// One run: every step's values (all rows), metrics, and the final state (on the job's first rank).
struct CriticRun {
  std::vector<MatrixF> values;
  std::vector<nlohmann::json> metrics;
  RoleState final_state;
};

/// A one-rank group for the dense CriticWorker (each rank runs its own copy).
struct SoloGroup {
  MpiCommunicator comm = MpiCommunicator::world().split(MpiCommunicator::world().rank(), 0);
  parallel::ProcessGroup process_group = parallel::ProcessGroup::borrowing(comm);
  hybridflow::WorkerContext context;
  SoloGroup() {
    context.rank = 0;
    context.world_size = 1;
    context.global_rank = MpiCommunicator::world().rank();
    context.group = &comm;
    context.process_group = &process_group;
  }
};

/// The dense critic in one process: steps [first, last), from `resume` when given; the state
/// after the last step.
CriticRun dense_run(int first, int last, const RoleState* resume = nullptr) {
  SoloGroup solo;
  DenseWorker worker(solo.context);
  worker.init_model(overrides(nullptr), steps);
  if (resume != nullptr) worker.load_checkpoint_state(*resume);
  CriticRun run;
  for (int step = first; step < last; ++step) {
    const MatrixF values = trainer::float_column(worker.compute_values(whole_batch(step)), trainer::keys::values);
    run.values.push_back(values);
    run.metrics.push_back(worker.update_critic(update_chunk(step, values, 0, 1)).meta_info()["metrics"]);
  }
  run.final_state = worker.checkpoint_state();
  return run;
}

using Job = test_support::MegatronJob;

int dp_rank_of(const Job& job) { return job.context.rank / job.tp % job.dp; }
/// The job's rank the dispatch collects from for DP group `d`: tp rank 0 of the last stage.
int collected_rank(const Layout& layout, int d) { return ((layout.pp - 1) * layout.dp + d) * layout.tp; }

/// Every rank's `mine` (the same size everywhere) gathered over the job, in rank order.
std::vector<float> gather_over_job(Job& job, const MatrixF& mine) {
  std::vector<float> all(static_cast<std::size_t>(mine.size() * job.group->size()));
  job.group->all_gather(std::span<const float>(mine.data(), static_cast<std::size_t>(mine.size())), std::span<float>(all));
  return all;
}

/// The Megatron critic (`W`: its worker type) on `job`: steps [first, last), from `resume` when given.
template <class W = Worker>
CriticRun megatron_run(Job& job, const Layout& layout, int first, int last, const RoleState* resume = nullptr) {
  W worker(job.context);
  worker.init_model(overrides(&layout), steps);
  EXPECT_EQ(worker.distributed_optimizer(), layout.distributed_optimizer && layout.dp > 1);
  EXPECT_EQ(worker.critic().sequence_parallel(), layout.sequence_parallel && layout.tp > 1);
  if (resume != nullptr) worker.load_checkpoint_state(*resume);
  EXPECT_EQ(worker.pipeline_size(), layout.pp);
  const int dp_rank = dp_rank_of(job);
  // The stages before the last return nothing (the dispatch collects the last stage's results).
  const bool last_stage = worker.pipeline_rank() == layout.pp - 1;
  const Index share = rows / layout.dp;
  CriticRun run;
  for (int step = first; step < last; ++step) {
    const data::DataProto chunk = whole_batch(step).slice(dp_rank * share, (dp_rank + 1) * share);
    const data::DataProto result = worker.compute_values(chunk);
    EXPECT_EQ(result.has_tensor(trainer::keys::values), last_stage);
    const MatrixF mine = last_stage ? trainer::float_column(result, trainer::keys::values) : MatrixF(MatrixF::Zero(share, response));
    // The controller's view: tp rank 0's rows of each DP group (of the last stage), in DP order;
    // every TP rank of a DP group must have computed the same rows.
    const std::vector<float> all = gather_over_job(job, mine);
    MatrixF values(rows, response);
    const auto chunk_of = [&](int rank) {
      return Eigen::Map<const MatrixF>(all.data() + static_cast<std::ptrdiff_t>(rank) * mine.size(), share, response);
    };
    for (int d = 0; d < layout.dp; ++d) {
      const int collected = collected_rank(layout, d);
      values.middleRows(d * share, share) = chunk_of(collected);
      for (int t = 1; t < layout.tp; ++t)
        EXPECT_TRUE(chunk_of(collected + t) == chunk_of(collected)) << "dp group " << d << ", tp rank " << t;
    }
    run.values.push_back(values);
    const data::DataProto update = worker.update_critic(update_chunk(step, values, dp_rank, layout.dp));
    // Every rank of the last stage reports the same metrics (the DP mean; the TP ranks computed the
    // same values); the others see the collected rank's.
    MatrixF row = MatrixF::Zero(1, static_cast<Index>(std::size(metric_names)));
    if (last_stage) {
      const nlohmann::json& m = update.meta_info()["metrics"];
      for (std::size_t k = 0; k < std::size(metric_names); ++k) row(0, static_cast<Index>(k)) = m.at(metric_names[k]).get<float>();
    }
    const std::vector<float> rows_of_job = gather_over_job(job, row);
    const std::size_t collected = static_cast<std::size_t>(collected_rank(layout, 0)) * std::size(metric_names);
    for (int r = collected_rank(layout, 0); r < job.group->size(); ++r)
      for (std::size_t k = 0; k < std::size(metric_names); ++k)
        EXPECT_EQ(rows_of_job[static_cast<std::size_t>(r) * std::size(metric_names) + k], rows_of_job[collected + k])
            << metric_names[k] << " of rank " << r << " at step " << step;
    nlohmann::json metrics;
    if (last_stage) {
      metrics = update.meta_info()["metrics"];
    } else {
      for (std::size_t k = 0; k < std::size(metric_names); ++k) metrics[metric_names[k]] = rows_of_job[collected + k];
    }
    run.metrics.push_back(std::move(metrics));
  }
  run.final_state = worker.checkpoint_state();
  return run;
}

/// max |a - b| over max |a|: the difference relative to the tensor's scale (an element whose
/// value sums cancel is no worse than its tensor's rounding).
double max_relative(std::span<const float> a, std::span<const float> b, const std::string& what) {
  EXPECT_EQ(a.size(), b.size()) << what;
  if (a.size() != b.size()) return INFINITY;
  double difference = 0, scale = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    difference = std::max(difference, std::abs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::abs(static_cast<double>(a[i])));
  }
  return scale > 0 ? difference / scale : difference;
}

/// The largest max_relative over the tensors of two states' weights. The keys' biases
/// (k_proj.bias) get a gradient that is zero up to rounding (a constant added to every key leaves
/// the softmax as it is), so AdamW's steps on them follow each run's rounding: their difference is
/// taken relative to the largest weight of the model instead.
double weights_difference(const RoleState& a, const RoleState& b) {
  double largest = 0;
  for (const auto& t : a.model)
    for (const float v : t.values) largest = std::max(largest, std::abs(static_cast<double>(v)));
  double worst = 0;
  for (std::size_t i = 0; i < std::min(a.model.size(), b.model.size()); ++i) {
    double d = max_relative(a.model[i].values, b.model[i].values, a.model[i].name);
    if (a.model[i].name.ends_with("k_proj.bias")) {
      double scale = 0;
      for (const float v : a.model[i].values) scale = std::max(scale, std::abs(static_cast<double>(v)));
      d *= scale / largest;
    }
    worst = std::max(worst, d);
  }
  return worst;
}
double moments_difference(const RoleState& a, const RoleState& b) {
  double worst = 0;
  for (const auto member : {&optim::AdamW::State::exp_avg, &optim::AdamW::State::exp_avg_sq}) {
    const auto &x = a.optimizer.*member, &y = b.optimizer.*member;
    EXPECT_EQ(x.size(), y.size()) << "moment tensors";
    for (std::size_t i = 0; i < std::min(x.size(), y.size()); ++i) worst = std::max(worst, max_relative(x[i], y[i], "moment"));
  }
  return worst;
}

/// Compares a Megatron run with the dense one (values, metrics; weights and moments where the
/// Megatron state is held); returns the largest relative difference of each kind.
struct Differences {
  double values = 0, metrics = 0, weights = 0, moments = 0;
};
Differences compare(const CriticRun& dense, const CriticRun& megatron, bool holds_state) {
  Differences worst;
  EXPECT_EQ(dense.values.size(), megatron.values.size());
  for (std::size_t s = 0; s < std::min(dense.values.size(), megatron.values.size()); ++s) {
    worst.values = std::max(worst.values, max_relative(std::span<const float>(dense.values[s].data(), static_cast<std::size_t>(dense.values[s].size())),
                                                       std::span<const float>(megatron.values[s].data(), static_cast<std::size_t>(megatron.values[s].size())),
                                                       fmt::format("values at step {}", s)));
    for (const char* key : metric_names) {
      const double a = dense.metrics[s].at(key).get<double>(), b = megatron.metrics[s].at(key).get<double>();
      const double d = std::abs(a - b) / std::max({std::abs(a), std::abs(b), 1e-6});
      EXPECT_LE(d, tolerance) << key << " at step " << s << ": dense " << a << ", megatron " << b;
      worst.metrics = std::max(worst.metrics, d);
    }
  }
  EXPECT_LE(worst.values, tolerance) << "values";
  if (holds_state) {
    EXPECT_EQ(dense.final_state.model.size(), megatron.final_state.model.size());
    for (std::size_t i = 0; i < std::min(dense.final_state.model.size(), megatron.final_state.model.size()); ++i) {
      EXPECT_EQ(dense.final_state.model[i].name, megatron.final_state.model[i].name);
      EXPECT_EQ(dense.final_state.model[i].shape, megatron.final_state.model[i].shape) << dense.final_state.model[i].name;
    }
    EXPECT_EQ(dense.final_state.optimizer.step, megatron.final_state.optimizer.step);
    EXPECT_EQ(dense.final_state.extra, megatron.final_state.extra);
    worst.weights = weights_difference(dense.final_state, megatron.final_state);
    worst.moments = moments_difference(dense.final_state, megatron.final_state);
    EXPECT_LE(worst.weights, tolerance) << "final weights";
    EXPECT_LE(worst.moments, tolerance) << "final AdamW moments";
  }
  return worst;
}

void check_layout(const Layout& layout) {
  MpiCommunicator world = MpiCommunicator::world();
  const int size = layout.tp * layout.dp * layout.pp;
  if (world.size() < size) GTEST_SKIP() << "needs " << size << " ranks";
  const CriticRun dense = dense_run(0, steps);
  Job job;
  test_support::make_job(world, layout.tp, layout.dp, job, layout.pp);
  if (job.context.group == nullptr) return;  // this rank is past the last whole job
  const CriticRun megatron = megatron_run(job, layout, 0, steps);
  const Differences worst = compare(dense, megatron, job.context.rank == 0);
  if (world.rank() == 0) {
    ::testing::Test::RecordProperty("max_relative_values", fmt::format("{:.3g}", worst.values));
    ::testing::Test::RecordProperty("max_relative_metrics", fmt::format("{:.3g}", worst.metrics));
    ::testing::Test::RecordProperty("max_relative_weights", fmt::format("{:.3g}", worst.weights));
    ::testing::Test::RecordProperty("max_relative_moments", fmt::format("{:.3g}", worst.moments));
    std::printf("tp %d dp %d pp %d sp %d distributed %d: max relative difference values %.3g metrics %.3g weights %.3g "
                "moments %.3g\n",
                layout.tp, layout.dp, layout.pp, layout.sequence_parallel, layout.distributed_optimizer, worst.values,
                worst.metrics, worst.weights, worst.moments);
  }
}

TEST(MegatronCritic, Tp1MatchesTheDenseCritic) { check_layout({.tp = 1, .dp = 1}); }
TEST(MegatronCritic, Tp2MatchesTheDenseCritic) { check_layout({.tp = 2, .dp = 1}); }
TEST(MegatronCritic, Tp2SequenceParallelMatchesTheDenseCritic) {
  check_layout({.tp = 2, .dp = 1, .sequence_parallel = true});
}
TEST(MegatronCritic, Tp2Dp2MatchesTheDenseCritic) { check_layout({.tp = 2, .dp = 2}); }
TEST(MegatronCritic, Tp2Dp2DistributedOptimizerMatchesTheDenseCritic) {
  check_layout({.tp = 2, .dp = 2, .sequence_parallel = true, .distributed_optimizer = true});
}
TEST(MegatronCritic, Tp4MatchesTheDenseCritic) { check_layout({.tp = 4, .dp = 1, .sequence_parallel = true}); }
// Pipeline stages of one layer each (the tiny critic has two).
TEST(MegatronCritic, Pp2MatchesTheDenseCritic) { check_layout({.tp = 1, .dp = 1, .pp = 2}); }
TEST(MegatronCritic, Pp2Tp2SequenceParallelMatchesTheDenseCritic) {
  check_layout({.tp = 2, .dp = 1, .pp = 2, .sequence_parallel = true});
}
TEST(MegatronCritic, Pp2Dp2DistributedOptimizerMatchesTheDenseCritic) {
  check_layout({.tp = 1, .dp = 2, .pp = 2, .distributed_optimizer = true});
}

/// A Megatron checkpoint resumed by the dense critic, and the dense critic's resumed by the Megatron one.
void check_resume(const Layout& layout) {
  MpiCommunicator world = MpiCommunicator::world();
  const CriticRun uninterrupted = dense_run(0, steps);
  const CriticRun dense_first = dense_run(0, steps - 1);
  Job job;
  test_support::make_job(world, layout.tp, layout.dp, job, layout.pp);
  if (job.context.group == nullptr) return;
  // Megatron's checkpoint after two steps -> the dense critic's last step.
  const CriticRun megatron_first = megatron_run(job, layout, 0, steps - 1);
  const RoleState saved = broadcast_state(*job.group, megatron_first.final_state);
  const CriticRun dense_resumed = dense_run(steps - 1, steps, &saved);
  // The dense critic's checkpoint -> the Megatron critic's last step.
  const CriticRun megatron_resumed = megatron_run(job, layout, steps - 1, steps, &dense_first.final_state);
  CriticRun tail = uninterrupted;
  tail.values.erase(tail.values.begin(), tail.values.end() - 1);
  tail.metrics.erase(tail.metrics.begin(), tail.metrics.end() - 1);
  const Differences from_megatron = compare(tail, dense_resumed, true);
  const Differences to_megatron = compare(tail, megatron_resumed, job.context.rank == 0);
  if (world.rank() == 0)
    std::printf("resumed tp %d dp %d pp %d: dense from megatron's checkpoint weights %.3g, megatron from the dense one %.3g\n",
                layout.tp, layout.dp, layout.pp, from_megatron.weights, to_megatron.weights);
}

TEST(MegatronCritic, CheckpointsResumeAcrossTheDenseAndMegatronCritics) {
  const int ranks = MpiCommunicator::world().size();
  check_resume(ranks >= 4   ? Layout{.tp = 2, .dp = 2, .sequence_parallel = true, .distributed_optimizer = true}
               : ranks >= 2 ? Layout{.tp = 2, .dp = 1, .sequence_parallel = true}
                            : Layout{.tp = 1, .dp = 1});
}
TEST(MegatronCritic, CheckpointsResumeAcrossPipelineStages) {
  const int ranks = MpiCommunicator::world().size();
  if (ranks < 2) GTEST_SKIP() << "needs 2 ranks";
  check_resume(ranks >= 4 ? Layout{.tp = 2, .dp = 1, .pp = 2, .sequence_parallel = true} : Layout{.tp = 1, .dp = 1, .pp = 2});
}

// The worker type with a static training mesh: the dynamic worker's run bit for bit; keys that
// contradict the type are an error naming the key, the mesh type and both numbers.
TEST(MegatronCritic, StaticMeshTypeIsTheDynamicWorker) {
  MpiCommunicator world = MpiCommunicator::world();
  if (world.size() < 2) GTEST_SKIP() << "needs 2 ranks";
  using Static = trainer::MegatronCriticWorker<TinyCritic, parallel::Mesh<parallel::TP<2>, parallel::DP<>, parallel::PP<>>>;
  static_assert(Static::mesh_rules::value);
  const Layout layout{.tp = 2, .dp = 1, .sequence_parallel = true};
  Job job;
  test_support::make_job(world, layout.tp, layout.dp, job);
  if (job.context.group == nullptr) return;
  const CriticRun dynamic = megatron_run(job, layout, 0, steps), typed = megatron_run<Static>(job, layout, 0, steps);
  for (int s = 0; s < steps; ++s) {
    EXPECT_TRUE(dynamic.values[static_cast<std::size_t>(s)] == typed.values[static_cast<std::size_t>(s)]) << "step " << s;
    EXPECT_EQ(dynamic.metrics[static_cast<std::size_t>(s)], typed.metrics[static_cast<std::size_t>(s)]) << "step " << s;
  }
  if (job.context.rank == 0) {
    EXPECT_EQ(weights_difference(dynamic.final_state, typed.final_state), 0.0);
    EXPECT_EQ(moments_difference(dynamic.final_state, typed.final_state), 0.0);
  }
  Static contradicted(job.context);
  const Layout one{.tp = 1, .dp = 2};
  job.context.mesh.reset();  // the worker derives it from the keys
  try {
    contradicted.init_model(overrides(&one), steps);
    ADD_FAILURE() << "tp 1 accepted by a worker typed TP<2>";
  } catch (const InvalidArgument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("critic.megatron.tensor_model_parallel_size: the worker's training mesh Mesh<TP<2>, DP<>, PP<>> "
                        "fixes tp: expected 2, got 1"),
              std::string::npos)
        << what;
  }
}

TEST(MegatronCritic, RefusesATensorParallelSizeThatDoesNotDivideTheRanks) {
  MpiCommunicator world = MpiCommunicator::world();
  Job job;
  test_support::make_job(world, 1, world.size(), job);
  job.context.mesh.reset();  // the worker derives it from the key
  Worker worker(job.context);
  const Layout layout{.tp = world.size() + 1};
  try {
    worker.init_model(overrides(&layout), steps);
    ADD_FAILURE() << "tp " << layout.tp << " accepted over " << world.size() << " ranks";
  } catch (const InvalidArgument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("critic.megatron.tensor_model_parallel_size"), std::string::npos) << what;
    EXPECT_NE(what.find(fmt::format("critic's {} ranks", world.size())), std::string::npos) << what;
    EXPECT_NE(what.find(fmt::format("got {}", layout.tp)), std::string::npos) << what;
  }
}

/// The model alone: values and every full gradient of the TP critic equal the dense critic's, with
/// and without sequence parallelism, over the whole world as one TP group.
TEST(TensorParallelCritic, ValuesAndGradientsMatchTheDenseCritic) {
  MpiCommunicator world = MpiCommunicator::world();
  if (4 % world.size() != 0) GTEST_SKIP() << "the tiny critic's 4 heads split over 1, 2 or 4 ranks";
  model::TransformerCritic dense = tiny_critic();
  const data::DataProto batch = whole_batch(0);
  const model::TokenBatch tokens = trainer::token_batch(batch, 0, rows);
  const auto dense_out = dense.forward(tokens, {.keep_activations = true});
  std::vector<float> cotangent(static_cast<std::size_t>(dense_out.values.size()));
  for (std::size_t i = 0; i < cotangent.size(); ++i) cotangent[i] = static_cast<float>(std::sin(0.37 * static_cast<double>(i)));
  dense.zero_grad();
  dense.backward({.values = cotangent});
  for (const bool sequence_parallel : {false, true}) {
    model::TensorParallelCritic<MpiCommunicator> critic(dense, world.split(0, world.rank()));
    critic.set_sequence_parallel(sequence_parallel);
    critic.zero_grad();
    const auto out = critic.forward(tokens, {.keep_activations = true});
    const double values = max_relative(std::span<const float>(dense_out.values.data(), static_cast<std::size_t>(dense_out.values.size())),
                                       std::span<const float>(out.values.data(), static_cast<std::size_t>(out.values.size())), "values");
    EXPECT_LE(values, 1e-5) << "sequence_parallel " << sequence_parallel;
    critic.backward({.values = cotangent});
    std::vector<std::vector<float>> dense_grads;
    dense.for_each_parameter([&](const auto& p) { dense_grads.emplace_back(p.grad.begin(), p.grad.end()); });
    std::size_t k = 0;
    double worst = 0;
    critic.for_each_full_parameter([&](const auto& p) {
      ASSERT_LT(k, dense_grads.size());
      worst = std::max(worst, max_relative(dense_grads[k], std::span<const float>(p.grad.data(), p.grad.size()), std::string(p.name)));
      ++k;
    });
    EXPECT_EQ(k, dense_grads.size());
    EXPECT_LE(worst, 1e-4) << "gradients, sequence_parallel " << sequence_parallel;
    // The gradient norm counts every element once.
    double dense_squares = 0;
    for (const auto& g : dense_grads)
      for (const float v : g) dense_squares += static_cast<double>(v) * v;
    EXPECT_NEAR(std::sqrt(critic.gradient_squared_norm()), std::sqrt(dense_squares), 1e-5 * std::sqrt(dense_squares));
  }
}

}  // namespace
