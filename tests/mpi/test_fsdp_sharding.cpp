// FSDP's parameter sharding (actor_rollout_ref.actor.fsdp_config.fsdp_size, ZeRO-3) in the FSDP-
// strategy actor worker, on real ranks: the world is one worker group driven SPMD (every rank
// calls the worker's methods with its chunk of the rows, as DP_COMPUTE_PROTO sends them). For
// fsdp_size -1, 2 (HYBRID_SHARD with two replicas at np 4) and 4, against fsdp_size 1 (the full
// replica on every rank):
//   - three update_actor calls (two mini-batches each, a KL loss against the sharded reference)
//     give the same losses, gradient norms, log-probs, entropy, generated tokens and final
//     weights and moments (1e-5 relative: a layer's gradients are reduce-scattered after each
//     micro-batch's backward, as FSDP does, so the sums run in another order);
//   - FSDP's units are the decoder layers and the root (embedding, norm, head): each rank holds
//     ceil(unit / f) elements of each unit's parameters, gradients and each moment (the
//     model itself none), counted from the buffers, and its shard is the right slice of the
//     flat model (the same check with the slice shifted by one element fails);
//   - a checkpoint saved sharded resumes sharded bit for bit, and under another fsdp_size (1, 2)
//     within 1e-5 (full tensors and moments in the checkpoint);
//   - the critic (critic.fsdp.fsdp_size) likewise: values, value loss, gradient norm, final
//     weights and moments, held bytes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "megatron_job.hpp"
#include "verl/hybridflow/wire.hpp"
#include "verl/model/hf_config.hpp"
#include "verl/model/transformer/transformer.hpp"
#include "verl/parallel/fully_sharded_parameters.hpp"
#include "verl/parallel/mpi_communicator.hpp"
#include "verl/parallel/process_group.hpp"
#include "verl/model/transformer/critic.hpp"
#include "verl/trainer/workers/actor_rollout_ref_worker.hpp"
#include "verl/trainer/workers/critic_worker.hpp"

namespace {

using namespace verl;
using verl::parallel::MpiCommunicator;
using trainer::RoleState;
using test_support::broadcast_state;

/// A tiny Qwen2 (q/k/v biases, untied head, hidden 30 in 3 heads of 10, one KV head, two layers):
/// 19,390 elements, not a multiple of 4, so that at fsdp_size 4 the last shard carries padding.
struct TinyQwen2 {
  using policy_type = model::Transformer;
  static model::Transformer actor(const trainer::PPOConfig&) {
    const nlohmann::json json = {{"model_type", "qwen2"},       {"hidden_size", 30},        {"intermediate_size", 64},
                                 {"num_hidden_layers", 2},      {"num_attention_heads", 3}, {"num_key_value_heads", 1},
                                 {"vocab_size", 47},            {"rms_norm_eps", 1e-6},     {"max_position_embeddings", 32},
                                 {"eos_token_id", 1},           {"tie_word_embeddings", false}};
    return model::Transformer::random(model::HfModelConfig::from_json(json, "tiny qwen2"),
                                      {.initializer_range = 0.2, .seed = 3}, {.num_threads = 1});
  }
  /// The reference starts from other weights than the actor, so that the KL term matters.
  static model::Transformer reference(const trainer::PPOConfig& config, const model::Transformer&) {
    model::Transformer ref = actor(config);
    ref.init_weights({.initializer_range = 0.2, .seed = 11});
    return ref;
  }
};
using Worker = trainer::ActorRolloutRefWorker<TinyQwen2>;

constexpr Index rows = 8, prompt = 4, response = 3;

std::vector<std::string> overrides(const std::string& fsdp_size) {
  return {"data.train_batch_size=8",
          "actor_rollout_ref.rollout.n=1",
          "actor_rollout_ref.actor.ppo_mini_batch_size=4",
          "actor_rollout_ref.actor.optim.lr=0.01",
          "actor_rollout_ref.actor.grad_clip=0.5",
          "actor_rollout_ref.actor.use_kl_loss=True",
          "actor_rollout_ref.actor.kl_loss_coef=0.1",
          "actor_rollout_ref.actor.fsdp_config.fsdp_size=" + fsdp_size,
          "actor_rollout_ref.ref.fsdp_config.fsdp_size=" + fsdp_size};
}

/// The whole world as one worker group (the process group the FSDP worker reduces over).
struct Group {
  MpiCommunicator comm = MpiCommunicator::world();
  parallel::ProcessGroup process_group = parallel::ProcessGroup::borrowing(comm);
  hybridflow::WorkerContext context;
  Group() {
    context.rank = comm.rank();
    context.world_size = comm.size();
    context.global_rank = comm.rank();
    context.group = &comm;
    context.process_group = &process_group;
  }
};

/// This rank's chunk of update `step`'s rows, with the worker's own log-probs (old_log_probs) and
/// the reference's (ref_log_prob).
data::DataProto chunk(Worker& worker, int rank, int world, int step) {
  const Index mine = rows / world, first = rank * mine;
  MatrixI64 input_ids(mine, prompt + response), position_ids(mine, prompt + response);
  MatrixF attention_mask = MatrixF::Ones(mine, prompt + response), response_mask = MatrixF::Ones(mine, response);
  MatrixF advantages(mine, response);
  for (Index r = 0; r < mine; ++r) {
    const Index global = first + r;
    for (Index c = 0; c < prompt + response; ++c) {
      input_ids(r, c) = (global * 7 + c * 3 + step * 5) % 45 + 2;
      position_ids(r, c) = c;
    }
    if (global % 3 == 1) response_mask(r, response - 1) = 0.0f;
    for (Index c = 0; c < response; ++c)
      advantages(r, c) = static_cast<float>(std::sin(0.7 * static_cast<double>(global * response + c) + step));
  }
  data::DataProto batch;
  batch.set(std::string(trainer::keys::input_ids), input_ids);
  batch.set(std::string(trainer::keys::attention_mask), attention_mask);
  batch.set(std::string(trainer::keys::position_ids), position_ids);
  batch.set(std::string(trainer::keys::response_mask), response_mask);
  batch.set(std::string(trainer::keys::advantages), advantages);
  const data::DataProto old = worker.compute_log_prob(batch);
  batch.set(std::string(trainer::keys::old_log_probs), trainer::float_column(old, trainer::keys::old_log_probs));
  batch.set(std::string(trainer::keys::entropys), trainer::float_column(old, trainer::keys::entropys));
  const data::DataProto ref = worker.compute_ref_log_prob(batch);
  batch.set(std::string(trainer::keys::ref_log_prob), trainer::float_column(ref, trainer::keys::ref_log_prob));
  batch.meta_info()["entropy_metric"] = true;
  return batch;
}

std::vector<float> flat(const MatrixF& m) {
  std::vector<float> out;
  for (Index r = 0; r < m.rows(); ++r)
    for (Index c = 0; c < m.cols(); ++c) out.push_back(m(r, c));
  return out;
}

struct TrainingRun {
  std::vector<nlohmann::json> metrics;  ///< per update_actor call
  std::vector<float> log_probs, entropy, ref_log_probs;  ///< this rank's rows, every step
  std::vector<std::int64_t> generated;  ///< this rank's responses after the last update
  RoleState final_state;                ///< on rank 0 (the others: empty)
  std::optional<std::vector<float>> shard;  ///< this rank's flat parameter shard at the end (sharded runs)
  std::int64_t shard_size = 0, padding = 0, numel = 0;
  int fsdp = 1;
};

TrainingRun train(Group& group, const std::string& fsdp_size, int steps, const RoleState* resume_from = nullptr,
                  int first_step = 0) {
  Worker worker(group.context);
  worker.init_model(overrides(fsdp_size), 3);
  if (resume_from != nullptr) worker.load_checkpoint_state(*resume_from);
  TrainingRun run;
  const int rank = group.comm.rank(), world = group.comm.size();
  for (int s = first_step; s < first_step + steps; ++s) {
    data::DataProto batch = chunk(worker, rank, world, s);
    for (const auto& [key, out] : {std::pair{trainer::keys::old_log_probs, &run.log_probs},
                                   std::pair{trainer::keys::entropys, &run.entropy},
                                   std::pair{trainer::keys::ref_log_prob, &run.ref_log_probs}}) {
      const auto values = flat(trainer::float_column(batch, key));
      out->insert(out->end(), values.begin(), values.end());
    }
    const data::DataProto out = worker.update_actor(batch);
    run.metrics.push_back(out.meta_info()["metrics"]);
  }
  const data::DataProto generated = worker.generate_sequences(test_support::megatron_prompts(rank, world, rows, prompt, response));
  const MatrixI64& responses = trainer::int_column(generated, trainer::keys::responses);
  for (Index r = 0; r < responses.rows(); ++r)
    for (Index c = 0; c < responses.cols(); ++c) run.generated.push_back(responses(r, c));
  if (const auto& shards = worker.actor_shards()) {
    run.shard = shards->shard_values();
    run.shard_size = shards->shard_size();
    run.padding = shards->padding();
    run.fsdp = shards->fsdp_size();
    // The model holds no tensors between calls.
    std::int64_t held = 0;
    worker.actor().for_each_parameter([&](const auto& p) { held += static_cast<std::int64_t>(p.value.size() + p.grad.size()); });
    EXPECT_EQ(held, 0) << "the sharded actor model keeps tensors at rest";
    EXPECT_TRUE(worker.reference_shards().has_value()) << "the reference is sharded too";
    EXPECT_EQ(shards->most_layers_held(), 1) << "the update gathered one decoder layer at a time";
    EXPECT_EQ(worker.reference_shards()->most_layers_held(), 1) << "the ref log-probs too";
  }
  run.numel = worker.policy_facts().parameter_count;
  run.final_state = worker.checkpoint_state();
  return run;
}

double relative(double a, double b) { return std::abs(a - b) / std::max(1.0, std::abs(a)); }

/// The largest relative difference of b from a; expects equal sizes.
double worst_difference(const std::vector<float>& a, const std::vector<float>& b, std::string_view what) {
  EXPECT_EQ(a.size(), b.size()) << what;
  if (a.size() != b.size()) return INFINITY;
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, relative(a[i], b[i]));
  return worst;
}

std::vector<float> weights(const RoleState& state) {
  std::vector<float> out;
  for (const auto& t : state.model) out.insert(out.end(), t.values.begin(), t.values.end());
  return out;
}
std::vector<float> moments(const RoleState& state) {
  std::vector<float> out;
  for (const auto* m : {&state.optimizer.exp_avg, &state.optimizer.exp_avg_sq})
    for (const auto& t : *m) out.insert(out.end(), t.begin(), t.end());
  return out;
}

/// FSDP's units' flat weights, from a state's full tensors by their names: one unit per decoder
/// layer ("model.layers.<l>."), the root (every other tensor) first; each in the state's order.
std::vector<std::vector<float>> unit_flats(const RoleState& state) {
  std::vector<std::vector<float>> units(1);
  for (const auto& t : state.model) {
    std::size_t unit = 0;
    if (t.name.starts_with("model.layers.")) unit = 1 + std::stoul(t.name.substr(std::strlen("model.layers.")));
    if (units.size() <= unit) units.resize(unit + 1);
    units[unit].insert(units[unit].end(), t.values.begin(), t.values.end());
  }
  return units;
}

/// Elements a rank holds of each unit's shards together: ceil(unit / f) per unit.
std::int64_t shard_elements_of(const std::vector<std::vector<float>>& units, std::int64_t f) {
  std::int64_t total = 0;
  for (const auto& unit : units) total += (static_cast<std::int64_t>(unit.size()) + f - 1) / f;
  return total;
}

/// Whether `shard` is rank r's slice of every unit's flat weights, the units end to end (zero
/// padding past a unit's end), each slice starting `shift` elements past the rank's offset;
/// within 1e-5 relative.
bool shard_matches(const std::vector<float>& shard, const std::vector<std::vector<float>>& units, std::int64_t r,
                   std::int64_t f, std::int64_t shift) {
  std::size_t at = 0;
  for (const auto& unit : units) {
    const std::int64_t size = (static_cast<std::int64_t>(unit.size()) + f - 1) / f;
    for (std::int64_t i = 0; i < size; ++i, ++at) {
      if (at >= shard.size()) return false;
      const auto k = static_cast<std::size_t>(r * size + i + shift);
      const float expected = k < unit.size() ? unit[k] : 0.0f;
      if (relative(expected, shard[at]) > 1e-5) return false;
    }
  }
  return at == shard.size();
}

void check_sharding(const std::string& fsdp_size, int expected_fsdp) {
  Group group;
  const int world = group.comm.size(), rank = group.comm.rank();
  if (world % expected_fsdp != 0 || expected_fsdp > world) GTEST_SKIP() << "needs a multiple of " << expected_fsdp << " ranks";
  const TrainingRun replicated = train(group, "1", 3);
  const TrainingRun sharded = train(group, fsdp_size, 3);
  EXPECT_FALSE(replicated.shard.has_value());
  EXPECT_EQ(sharded.shard.has_value(), expected_fsdp > 1);

  // The numbers, up to the order of the sums: a layer's gradients are reduce-scattered after each
  // micro-batch's backward and added up in the shard (the replica adds the micro-batches first),
  // and MPI's reduce-scatter may add more than two ranks in another order than its all-reduce.
  const double tolerance = 1e-5;
  double worst = 0;
  ASSERT_EQ(replicated.metrics.size(), sharded.metrics.size());
  for (std::size_t s = 0; s < replicated.metrics.size(); ++s) {
    for (const char* key : {"actor/pg_loss", "actor/grad_norm", "actor/kl_loss", "actor/entropy", "actor/pg_clipfrac",
                            "actor/ppo_kl", "actor/lr"}) {
      ASSERT_TRUE(replicated.metrics[s].contains(key) && sharded.metrics[s].contains(key)) << key;
      const double a = replicated.metrics[s][key].get<double>(), b = sharded.metrics[s][key].get<double>();
      worst = std::max(worst, relative(a, b));
      EXPECT_LE(relative(a, b), tolerance) << key << " at step " << s << ": " << a << " vs " << b;
    }
  }
  for (const auto& [what, a, b] : {std::tuple{"old_log_probs", &replicated.log_probs, &sharded.log_probs},
                                   std::tuple{"entropys", &replicated.entropy, &sharded.entropy},
                                   std::tuple{"ref_log_prob", &replicated.ref_log_probs, &sharded.ref_log_probs}}) {
    const double w = worst_difference(*a, *b, what);
    worst = std::max(worst, w);
    EXPECT_LE(w, tolerance) << what;
  }
  EXPECT_EQ(replicated.generated, sharded.generated) << "generation with the gathered weights";
  if (rank == 0) {
    const double w = worst_difference(weights(replicated.final_state), weights(sharded.final_state), "weights");
    const double m = worst_difference(moments(replicated.final_state), moments(sharded.final_state), "moments");
    worst = std::max({worst, w, m});
    EXPECT_LE(w, tolerance) << "final weights";
    EXPECT_LE(m, tolerance) << "final AdamW moments";
    EXPECT_EQ(replicated.final_state.optimizer.step, sharded.final_state.optimizer.step);
    EXPECT_EQ(replicated.final_state.extra, sharded.final_state.extra);
  }
  ::testing::Test::RecordProperty("worst_relative_difference", fmt::format("{:.3g}", worst));

  // Memory: the replica holds numel elements of each; a shard ceil(unit / f) of each FSDP unit
  // (one per decoder layer, and the root), padding included.
  const std::int64_t numel = replicated.numel, f = expected_fsdp;
  RoleState final_state = broadcast_state(group.comm, replicated.final_state);
  const std::vector<std::vector<float>> units = unit_flats(final_state);
  ASSERT_EQ(units.size(), 3u) << "the root and two decoder layers";
  const std::int64_t full_bytes = numel * static_cast<std::int64_t>(sizeof(float));
  const auto held = [](const TrainingRun& run, const char* key) { return run.metrics.back()[key].get<std::int64_t>(); };
  EXPECT_EQ(held(replicated, "perf/actor_param_bytes_at_rest"), full_bytes);
  EXPECT_EQ(held(replicated, "perf/actor_grad_bytes_at_rest"), full_bytes);
  EXPECT_EQ(held(replicated, "perf/actor_optimizer_bytes_at_rest"), 2 * full_bytes);
  const std::int64_t shard_elements = shard_elements_of(units, f), shard_bytes = shard_elements * 4;
  EXPECT_EQ(held(sharded, "perf/actor_param_bytes_at_rest"), shard_bytes);
  EXPECT_EQ(held(sharded, "perf/actor_grad_bytes_at_rest"), shard_bytes);
  EXPECT_EQ(held(sharded, "perf/actor_optimizer_bytes_at_rest"), 2 * shard_bytes);
  EXPECT_EQ(held(replicated, "perf/ref_param_bytes_at_rest"), full_bytes);
  EXPECT_EQ(held(sharded, "perf/ref_param_bytes_at_rest"), shard_bytes);
  if (f > 1) {
    EXPECT_EQ(sharded.shard_size, shard_elements);
    EXPECT_EQ(sharded.padding, shard_elements * f - numel);
    EXPECT_LT(sharded.padding, f * static_cast<std::int64_t>(units.size())) << "fewer than f elements per unit";
    ::testing::Test::RecordProperty("numel", std::to_string(numel));
    ::testing::Test::RecordProperty("shard_elements", std::to_string(shard_elements));
    ::testing::Test::RecordProperty("padding_elements", std::to_string(sharded.padding));
    if (rank == 0)
      std::printf("fsdp %d of %d ranks: numel %lld (%lld bytes); per rank params %lld, grads %lld, moments %lld bytes; "
                  "padding %lld elements; worst relative difference %.3g\n",
                  static_cast<int>(f), world, static_cast<long long>(numel), static_cast<long long>(full_bytes),
                  static_cast<long long>(held(sharded, "perf/actor_param_bytes_at_rest")),
                  static_cast<long long>(held(sharded, "perf/actor_grad_bytes_at_rest")),
                  static_cast<long long>(held(sharded, "perf/actor_optimizer_bytes_at_rest")),
                  static_cast<long long>(sharded.padding), worst);

    // This rank's shard is its slice of every unit's final flat weights (broadcast from rank 0);
    // the same check with the slices one element further, or the rank's neighbour's, must fail.
    EXPECT_TRUE(shard_matches(*sharded.shard, units, rank % f, f, 0)) << "rank " << rank << "'s shard";
    EXPECT_FALSE(shard_matches(*sharded.shard, units, rank % f, f, 1)) << "a shifted shard offset must be caught";
    EXPECT_FALSE(shard_matches(*sharded.shard, units, (rank + 1) % f, f, 0)) << "another rank's slices must be caught";
  }
}

TEST(FsdpSharding, WholeGroupMatchesTheReplica) { check_sharding("-1", MpiCommunicator::world().size()); }
TEST(FsdpSharding, TwoRankShardsMatchTheReplica) { check_sharding("2", 2); }
TEST(FsdpSharding, FourRankShardsMatchTheReplica) { check_sharding("4", 4); }

// A flat parameter built for another rank's shard holds the wrong values (the worker's check
// above would see them), and gathering with it is refused rather than scattering them.
TEST(FsdpSharding, WrongShardAssignmentIsCaught) {
  MpiCommunicator comm = MpiCommunicator::world();
  const int world = comm.size(), rank = comm.rank();
  if (world < 2) GTEST_SKIP() << "needs 2 ranks";
  model::Transformer model = TinyQwen2::actor({});
  std::vector<std::int64_t> sizes;
  std::vector<float> full;
  std::vector<optim::ParameterRef> refs;
  model.for_each_parameter([&](const auto& p) {
    sizes.push_back(static_cast<std::int64_t>(p.value.size()));
    full.insert(full.end(), p.value.begin(), p.value.end());
    refs.push_back({p.value, {}, p.name});
  });
  parallel::FullyShardedParameters right(sizes, rank, world), wrong(sizes, (rank + 1) % world, world);
  right.shard_from(refs);
  wrong.shard_from(refs);
  const std::vector<float> right_values(right.values().begin(), right.values().end());
  const std::vector<float> wrong_values(wrong.values().begin(), wrong.values().end());
  EXPECT_TRUE(shard_matches(right_values, {full}, rank, world, 0));
  EXPECT_FALSE(shard_matches(wrong_values, {full}, rank, world, 0));
  EXPECT_THROW(wrong.gather_into(comm, refs), InvalidArgument);
  // Gathering the right shards into a zeroed model gives the weights back.
  for (auto& r : refs) std::fill(r.value.begin(), r.value.end(), 0.0f);
  right.gather_into(comm, refs);
  std::vector<float> gathered;
  for (const auto& r : refs) gathered.insert(gathered.end(), r.value.begin(), r.value.end());
  EXPECT_EQ(gathered, full);
}

// A checkpoint saved sharded (full tensors, gathered) resumes sharded: two steps, save, a fresh
// worker loads it, one more step == three steps straight, bit for bit.
TEST(FsdpSharding, CheckpointResumesExactly) {
  Group group;
  const std::string fsdp = group.comm.size() >= 2 ? "2" : "-1";
  if (group.comm.size() % 2 != 0 && group.comm.size() != 1) GTEST_SKIP() << "needs an even number of ranks";
  const TrainingRun straight = train(group, fsdp, 3);
  const TrainingRun first = train(group, fsdp, 2);
  const RoleState saved = broadcast_state(group.comm, first.final_state);
  const TrainingRun resumed = train(group, fsdp, 1, &saved, 2);
  for (const char* key : {"actor/pg_loss", "actor/grad_norm", "actor/kl_loss"})
    EXPECT_EQ(straight.metrics[2][key], resumed.metrics[0][key]) << key;
  if (group.comm.rank() == 0) {
    EXPECT_EQ(weights(straight.final_state), weights(resumed.final_state));
    EXPECT_EQ(moments(straight.final_state), moments(resumed.final_state));
    EXPECT_EQ(straight.final_state.optimizer.step, resumed.final_state.optimizer.step);
  }
  EXPECT_EQ(straight.shard, resumed.shard) << "this rank's shard after the resumed step";
}

// fsdp_size must divide the group's world size: refused by name with the world size and value.
// A checkpoint holds full tensors and moments, so it resumes under another sharding: saved
// sharded over the whole group, resumed replicated (fsdp_size 1) and over pairs; the step after
// it equals the uninterrupted sharded run's up to the order of the sums.
TEST(FsdpSharding, CheckpointResumesUnderAnotherShardingSize) {
  Group group;
  const int world = group.comm.size();
  if (world < 2) GTEST_SKIP() << "needs 2 ranks";
  const TrainingRun straight = train(group, "-1", 3);
  const TrainingRun first = train(group, "-1", 2);
  const RoleState saved = broadcast_state(group.comm, first.final_state);
  std::vector<std::string> sizes = {"1"};
  if (world % 2 == 0 && world > 2) sizes.push_back("2");
  for (const std::string& size : sizes) {
    SCOPED_TRACE("resumed with fsdp_size " + size);
    const TrainingRun resumed = train(group, size, 1, &saved, 2);
    EXPECT_EQ(resumed.shard.has_value(), size != "1");
    for (const char* key : {"actor/pg_loss", "actor/grad_norm", "actor/kl_loss"})
      EXPECT_LE(relative(straight.metrics[2][key].get<double>(), resumed.metrics[0][key].get<double>()), 1e-5) << key;
    if (group.comm.rank() == 0) {
      EXPECT_LE(worst_difference(weights(straight.final_state), weights(resumed.final_state), "weights"), 1e-5);
      EXPECT_LE(worst_difference(moments(straight.final_state), moments(resumed.final_state), "moments"), 1e-5);
      EXPECT_EQ(straight.final_state.optimizer.step, resumed.final_state.optimizer.step);
    }
  }
}

TEST(FsdpSharding, SizeThatDoesNotDivideTheWorldIsRefused) {
  Group group;
  const int world = group.comm.size();
  Worker worker(group.context);
  try {
    worker.init_model(overrides(std::to_string(world + 1)), 3);
    ADD_FAILURE() << "fsdp_size " << world + 1 << " accepted at world size " << world;
  } catch (const InvalidArgument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("actor_rollout_ref.actor.fsdp_config.fsdp_size"), std::string::npos) << what;
    EXPECT_NE(what.find(fmt::format("world size {}", world)), std::string::npos) << what;
    EXPECT_NE(what.find(fmt::format("got {}", world + 1)), std::string::npos) << what;
  }
}

/// The value model on the actor's shapes.
struct TinyCritic {
  using critic_type = model::BasicTransformerCritic<float>;
  static critic_type critic(const trainer::PPOConfig&) {
    const nlohmann::json json = {{"model_type", "qwen2"},       {"hidden_size", 30},        {"intermediate_size", 64},
                                 {"num_hidden_layers", 2},      {"num_attention_heads", 3}, {"num_key_value_heads", 1},
                                 {"vocab_size", 47},            {"rms_norm_eps", 1e-6},     {"max_position_embeddings", 32},
                                 {"eos_token_id", 1},           {"tie_word_embeddings", false}};
    return critic_type::random(model::HfModelConfig::from_json(json, "tiny qwen2 critic"),
                               {.initializer_range = 0.2, .seed = 5}, {.num_threads = 1});
  }
};
using CriticWorkerType = trainer::CriticWorker<TinyCritic>;

struct CriticRun {
  std::vector<nlohmann::json> metrics;
  std::vector<float> values;  ///< this rank's rows, every step
  RoleState final_state;
  bool sharded = false;
};

CriticRun train_critic(Group& group, const std::string& fsdp_size) {
  CriticWorkerType worker(group.context);
  std::vector<std::string> keys = overrides("1");
  keys.push_back("critic.optim.lr=0.01");
  keys.push_back("critic.grad_clip=0.5");
  keys.push_back("critic.fsdp.fsdp_size=" + fsdp_size);
  worker.init_model(keys, 3);
  CriticRun run;
  const int rank = group.comm.rank(), world = group.comm.size();
  const Index mine = rows / world, first = rank * mine;
  for (int step = 0; step < 3; ++step) {
    MatrixI64 input_ids(mine, prompt + response), position_ids(mine, prompt + response);
    MatrixF response_mask = MatrixF::Ones(mine, response), returns(mine, response);
    for (Index r = 0; r < mine; ++r) {
      for (Index c = 0; c < prompt + response; ++c) {
        input_ids(r, c) = ((first + r) * 5 + c * 7 + step) % 45 + 2;
        position_ids(r, c) = c;
      }
      if ((first + r) % 3 == 2) response_mask(r, 0) = 0.0f;
      for (Index c = 0; c < response; ++c) returns(r, c) = static_cast<float>(std::cos(0.3 * static_cast<double>((first + r) * 3 + c + step)));
    }
    data::DataProto batch;
    batch.set(std::string(trainer::keys::input_ids), input_ids);
    batch.set(std::string(trainer::keys::attention_mask), MatrixF(MatrixF::Ones(mine, prompt + response)));
    batch.set(std::string(trainer::keys::position_ids), position_ids);
    batch.set(std::string(trainer::keys::response_mask), response_mask);
    const data::DataProto values = worker.compute_values(batch);
    const MatrixF& v = trainer::float_column(values, trainer::keys::values);
    const auto f = flat(v);
    run.values.insert(run.values.end(), f.begin(), f.end());
    batch.set(std::string(trainer::keys::values), v);
    batch.set(std::string(trainer::keys::returns), returns);
    run.metrics.push_back(worker.update_critic(batch).meta_info()["metrics"]);
  }
  run.sharded = worker.shards().has_value();
  if (run.sharded) {
    std::int64_t held = 0;
    worker.critic().for_each_parameter([&](const auto& p) { held += static_cast<std::int64_t>(p.value.size() + p.grad.size()); });
    EXPECT_EQ(held, 0) << "the sharded critic model keeps tensors at rest";
    EXPECT_EQ(worker.shards()->most_layers_held(), 1) << "the critic's update gathered one layer at a time";
  }
  run.final_state = worker.checkpoint_state();
  return run;
}

TEST(FsdpSharding, CriticShardsMatchTheReplica) {
  Group group;
  const int world = group.comm.size();
  const CriticRun replicated = train_critic(group, "1");
  const CriticRun sharded = train_critic(group, "-1");
  EXPECT_EQ(sharded.sharded, world > 1);
  const double tolerance = 1e-5;  // the order of the sums, as the actor's
  for (std::size_t s = 0; s < replicated.metrics.size(); ++s)
    for (const char* key : {"critic/vf_loss", "critic/grad_norm", "critic/vf_clipfrac", "critic/vpred_mean"}) {
      ASSERT_TRUE(replicated.metrics[s].contains(key) && sharded.metrics[s].contains(key)) << key;
      EXPECT_LE(relative(replicated.metrics[s][key].get<double>(), sharded.metrics[s][key].get<double>()), tolerance)
          << key << " at step " << s;
    }
  EXPECT_LE(worst_difference(replicated.values, sharded.values, "values"), tolerance);
  if (group.comm.rank() == 0) {
    EXPECT_LE(worst_difference(weights(replicated.final_state), weights(sharded.final_state), "weights"), tolerance);
    EXPECT_LE(worst_difference(moments(replicated.final_state), moments(sharded.final_state), "moments"), tolerance);
  }
  const auto held = [](const CriticRun& run, const char* key) { return run.metrics.back()[key].get<std::int64_t>(); };
  const RoleState final_state = broadcast_state(group.comm, replicated.final_state);  // rank 0 holds it
  const std::int64_t count = static_cast<std::int64_t>(weights(final_state).size());
  const std::vector<std::vector<float>> units = unit_flats(final_state);  // the root holds the score head
  ASSERT_EQ(units.size(), 3u) << "the root and two decoder layers";
  const std::int64_t shard = shard_elements_of(units, world);
  EXPECT_EQ(held(replicated, "perf/critic_param_bytes_at_rest"), count * 4);
  EXPECT_EQ(held(replicated, "perf/critic_optimizer_bytes_at_rest"), 2 * count * 4);
  EXPECT_EQ(held(sharded, "perf/critic_param_bytes_at_rest"), shard * 4);
  EXPECT_EQ(held(sharded, "perf/critic_grad_bytes_at_rest"), shard * 4);
  EXPECT_EQ(held(sharded, "perf/critic_optimizer_bytes_at_rest"), 2 * shard * 4);
}

}  // namespace
