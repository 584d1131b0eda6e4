// Ulysses sequence parallelism in the fsdp actor worker (actor_rollout_ref.actor.
// ulysses_sequence_parallel_size = sp > 1) on real ranks, the group's world (dp = world / sp, sp)
// with sp fastest. Each rank is given 1/world of the rows, as DP_COMPUTE_PROTO sends them (for
// update_actor in mini_batch_major_order over the world's ranks, two mini-batches per step), and
// the ranks of a dp rank's sp group compute on their chunks together:
//   - three steps of compute_log_prob, compute_ref_log_prob (a KL loss needs them) and update_actor
//     (with an entropy bonus, so that the entropy's cotangent flows too), micro-batches of two rows
//     whose token counts are not all multiples of sp (padded slices): log-probs, entropies, ref
//     log-probs, pg_loss, kl_loss, entropy, grad_norm and the final weights within 1e-4 relative of
//     the same job at sp = 1 in one process;
//   - every rank of an sp group returns bit-identical metrics;
//   - sp = 4 with 2 KV heads (repeated, as verl does);
//   - a model whose KV heads neither divide nor are divided by sp, and an sp that does not divide
//     the group, are errors naming the key and the values.
//   - the actor and the reference sharded over the whole group (fsdp_size -1, verl's default), over
//     pairs (HYBRID_SHARD, sp 2 x dp 2) or not at all: the same results, each rank holding its
//     shard of the parameters at rest (perf/actor_param_bytes_at_rest).
// np 2: sp 2 (sharded over 2 and replicated); np 4: sp 2 x dp 2 (sharded over 4 and over pairs) and sp 4.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "verl/model/hf_config.hpp"
#include "verl/model/transformer/transformer.hpp"
#include "verl/parallel/mpi_communicator.hpp"
#include "verl/parallel/process_group.hpp"
#include "verl/trainer/workers/actor_rollout_ref_worker.hpp"

namespace {

using namespace verl;
using parallel::MpiCommunicator;

model::Transformer tiny_model(std::int64_t heads, std::int64_t kv_heads) {
  const nlohmann::json json = {{"model_type", "llama"},       {"hidden_size", 32},         {"intermediate_size", 48},
                               {"num_hidden_layers", 2},      {"num_attention_heads", heads},
                               {"num_key_value_heads", kv_heads}, {"head_dim", 8},         {"vocab_size", 48},
                               {"rms_norm_eps", 1e-6},        {"max_position_embeddings", 32},
                               {"eos_token_id", 1},           {"tie_word_embeddings", false}};
  return model::Transformer::random(model::HfModelConfig::from_json(json, "tiny llama"),
                                    {.initializer_range = 0.2, .seed = 5}, {.num_threads = 1});
}

/// 4 attention heads over 2 KV heads: sp 2 splits both, sp 4 repeats the KV heads.
struct TinyLlama {
  using policy_type = model::Transformer;
  static model::Transformer actor(const trainer::PPOConfig&) { return tiny_model(4, 2); }
  static model::Transformer reference(const trainer::PPOConfig& config, const model::Transformer&) { return actor(config); }
};
/// 6 attention heads over 3 KV heads: sp 2 splits the query heads but not the KV heads.
struct ThreeKvHeads : TinyLlama {
  static model::Transformer actor(const trainer::PPOConfig&) { return tiny_model(6, 3); }
};

constexpr Index rows = 8, prompt = 5, response = 4, steps = 3, mini_batch = 4;

/// fsdp: actor_rollout_ref.{actor,ref}.fsdp_config.fsdp_size (verl's default -1: the whole group).
std::vector<std::string> overrides(int sp, int fsdp) {
  return {"actor_rollout_ref.actor.fsdp_config.fsdp_size=" + std::to_string(fsdp),
          "actor_rollout_ref.ref.fsdp_config.fsdp_size=" + std::to_string(fsdp),
          "data.train_batch_size=8",
          "actor_rollout_ref.rollout.n=1",
          "actor_rollout_ref.actor.ppo_mini_batch_size=" + std::to_string(mini_batch),
          "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
          "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=2",
          "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=2",
          "actor_rollout_ref.actor.optim.lr=0.01",
          "actor_rollout_ref.actor.grad_clip=0.5",  // the norm is above it: clipping acts
          "actor_rollout_ref.actor.use_kl_loss=True",
          "actor_rollout_ref.actor.kl_loss_coef=0.1",
          "actor_rollout_ref.actor.entropy_coeff=0.01",
          "actor_rollout_ref.actor.ulysses_sequence_parallel_size=" + std::to_string(sp)};
}

/// The batch: row g has g % 3 left-padded prompt tokens and its response ends g % 2 tokens early
/// (9, 7, 7, 8, ... tokens: micro-batches of two rows hold 16 or 15 tokens, some not multiples of sp).
data::DataProto whole_batch() {
  const Index mine = rows, first = 0;
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

constexpr const char* metric_names[] = {"actor/pg_loss", "actor/kl_loss", "actor/entropy", "actor/grad_norm"};
constexpr std::size_t metric_count = std::size(metric_names);
constexpr std::size_t per_pass = static_cast<std::size_t>(rows * response);

/// One rank's view of a run: its dp rank's rows of every pass (zeros elsewhere), the metrics of
/// every step and the final weights. Laid out in one vector so that ranks compare them whole.
struct Layout {
  std::size_t weights = 0;
  [[nodiscard]] std::size_t log_probs(std::size_t pass) const { return pass * per_pass; }
  [[nodiscard]] std::size_t entropy(std::size_t pass) const { return ((steps + 1) + pass) * per_pass; }
  [[nodiscard]] std::size_t ref(std::size_t pass) const { return (2 * (steps + 1) + pass) * per_pass; }
  [[nodiscard]] std::size_t metrics() const { return 3 * (steps + 1) * per_pass; }
  [[nodiscard]] std::size_t weights_at() const { return metrics() + steps * metric_count; }
  [[nodiscard]] std::size_t size() const { return weights_at() + weights; }
};

/// The values of each parameter tensor, in the order actor_weights() lists them.
std::vector<std::size_t> tensor_sizes() {
  std::vector<std::size_t> sizes;
  tiny_model(4, 2).for_each_parameter([&](const auto& p) { sizes.push_back(p.value.size()); });
  return sizes;
}

std::size_t weight_count() {
  std::size_t n = 0;
  for (const std::size_t size : tensor_sizes()) n += size;
  return n;
}

/// A job's vectors (every rank's) and what each rank held of the actor's parameters after its
/// last update (perf/actor_param_bytes_at_rest).
struct Run {
  std::vector<std::vector<double>> ranks;
  std::vector<double> param_bytes_at_rest;
};

/// The job's ranks are the world's first sp * dp; every world rank gets every job rank's vector.
Run run(int sp, int dp, int fsdp) {
  MpiCommunicator world = MpiCommunicator::world();
  const int size = sp * dp;
  const bool member = world.rank() < size;
  MpiCommunicator job = world.split(member ? 0 : 1, world.rank());
  const Layout layout{weight_count()};
  std::vector<double> mine(layout.size(), 0.0);
  double param_bytes_at_rest = 0;
  if (member) {
    parallel::ProcessGroup group = parallel::ProcessGroup::borrowing(job);
    hybridflow::WorkerContext context;
    context.rank = job.rank();
    context.world_size = job.size();
    context.global_rank = world.rank();
    context.group = &job;
    context.process_group = &group;
    trainer::ActorRolloutRefWorker<TinyLlama> worker(context);
    worker.init_model(overrides(sp, fsdp), steps);
    const Index share = rows / size, first = job.rank() * share;
    const auto put = [&](std::size_t at, const MatrixF& m) {
      for (Index r = 0; r < m.rows(); ++r)
        for (Index c = 0; c < response; ++c) mine[at + static_cast<std::size_t>((first + r) * response + c)] = m(r, c);
    };
    for (std::size_t pass = 0; pass <= steps; ++pass) {
      data::DataProto all = whole_batch();
      const data::DataProto batch = all.slice(first, first + share);
      const data::DataProto old = worker.compute_log_prob(batch);
      const data::DataProto ref = worker.compute_ref_log_prob(batch);
      put(layout.log_probs(pass), trainer::float_column(old, trainer::keys::old_log_probs));
      put(layout.entropy(pass), trainer::float_column(old, trainer::keys::entropys));
      put(layout.ref(pass), trainer::float_column(ref, trainer::keys::ref_log_prob));
      if (pass == steps) break;
      // Every rank's log-probs, as the controller joins them, then its update chunk.
      std::vector<float> old_all(static_cast<std::size_t>(rows * response)), ref_all(old_all.size());
      job.all_gather(std::span<const float>(trainer::float_column(old, trainer::keys::old_log_probs).data(), static_cast<std::size_t>(share * response)),
                     std::span<float>(old_all));
      job.all_gather(std::span<const float>(trainer::float_column(ref, trainer::keys::ref_log_prob).data(), static_cast<std::size_t>(share * response)),
                     std::span<float>(ref_all));
      all.set(std::string(trainer::keys::old_log_probs), MatrixF(Eigen::Map<const MatrixF>(old_all.data(), rows, response)));
      all.set(std::string(trainer::keys::ref_log_prob), MatrixF(Eigen::Map<const MatrixF>(ref_all.data(), rows, response)));
      all.reorder(trainer::mini_batch_major_order(rows, mini_batch, size, "test mini-batch"));
      data::DataProto update = all.slice(first, first + share);
      update.meta_info()["entropy_metric"] = true;
      const data::DataProto result = worker.update_actor(update);
      const nlohmann::json& m = result.meta_info().at("metrics");
      for (std::size_t k = 0; k < metric_count; ++k) mine[layout.metrics() + pass * metric_count + k] = m.at(metric_names[k]).get<double>();
      param_bytes_at_rest = m.at("perf/actor_param_bytes_at_rest").get<double>();
    }
    std::size_t at = layout.weights_at();
    for (const auto& t : worker.actor_weights().tensors)
      for (const float v : t.values) mine[at++] = v;
  }
  std::vector<double> all(mine.size() * static_cast<std::size_t>(world.size()));
  world.all_gather(std::span<const double>(mine), std::span<double>(all));
  std::vector<double> held(static_cast<std::size_t>(world.size()));
  world.all_gather(std::span<const double>(&param_bytes_at_rest, 1), std::span<double>(held));
  Run out;
  for (int r = 0; r < size; ++r) {
    out.ranks.emplace_back(all.begin() + static_cast<std::ptrdiff_t>(r * mine.size()),
                           all.begin() + static_cast<std::ptrdiff_t>((r + 1) * mine.size()));
    out.param_bytes_at_rest.push_back(held[static_cast<std::size_t>(r)]);
  }
  return out;
}

/// The job's results as the controller joins them: each rank's rows, the metrics and weights of
/// rank 0.
std::vector<double> combined(const std::vector<std::vector<double>>& ranks) {
  const Layout layout{weight_count()};
  std::vector<double> out = ranks[0];
  for (std::size_t r = 1; r < ranks.size(); ++r)
    for (std::size_t i = 0; i < layout.metrics(); ++i) out[i] += ranks[r][i];
  return out;
}

/// max |a - b| / max(|a|, |b|, floor) over [begin, end).
double max_relative(const std::vector<double>& a, const std::vector<double>& b, std::size_t begin, std::size_t end,
                    double floor = 1e-3) {
  double worst = 0;
  for (std::size_t i = begin; i < end; ++i)
    worst = std::max(worst, std::abs(a[i] - b[i]) / std::max({std::abs(a[i]), std::abs(b[i]), floor}));
  return worst;
}

/// sp x dp ranks with the actor and the reference sharded over fsdp_size ranks (-1: all of them),
/// against one process.
void check_sequence_parallel(int sp, int dp, int fsdp_size = -1) {
  MpiCommunicator world = MpiCommunicator::world();
  if (world.size() < sp * dp) GTEST_SKIP() << "needs " << sp * dp << " ranks";
  SCOPED_TRACE(::testing::Message() << "sp=" << sp << " dp=" << dp << " fsdp_size=" << fsdp_size);
  const Run job = run(sp, dp, fsdp_size);
  const auto& ranks = job.ranks;
  const auto one = run(1, 1, 1).ranks;
  // Each rank held its 1/fsdp shard of the parameters at rest (padded by fewer than fsdp
  // elements per tensor), the whole model without sharding.
  const int fsdp = fsdp_size == -1 ? sp * dp : fsdp_size;
  const double full_bytes = static_cast<double>(weight_count() * sizeof(float));
  const double padding = static_cast<double>(tensor_sizes().size() * sizeof(float));
  for (int r = 0; r < sp * dp; ++r) {
    const double held = job.param_bytes_at_rest[static_cast<std::size_t>(r)];
    EXPECT_GE(held, full_bytes / fsdp) << "rank " << r;
    EXPECT_LE(held, full_bytes / fsdp + padding) << "rank " << r;
  }
  const Layout layout{weight_count()};
  // The ranks of an sp group agree bit for bit on the metrics; their rows are their own chunks',
  // so compare those against one process. actor_weights() is the group's first rank's (gathered
  // from the shards when sharded); the other ranks return none.
  for (int r = 0; r < sp * dp; ++r) {
    const auto& mine = ranks[static_cast<std::size_t>(r)];
    const auto& first = ranks[static_cast<std::size_t>(r / sp * sp)];
    EXPECT_TRUE(std::equal(mine.begin() + static_cast<std::ptrdiff_t>(layout.metrics()),
                           mine.begin() + static_cast<std::ptrdiff_t>(layout.weights_at()),
                           first.begin() + static_cast<std::ptrdiff_t>(layout.metrics())))
        << "rank " << r << " differs from its sp group's first rank";
  }
  const std::vector<double> got = combined(ranks), expected = one[0];
  const double lp = max_relative(got, expected, layout.log_probs(0), layout.entropy(0));
  const double ent = max_relative(got, expected, layout.entropy(0), layout.ref(0));
  const double ref = max_relative(got, expected, layout.ref(0), layout.metrics());
  const double met = max_relative(got, expected, layout.metrics(), layout.weights_at());
  // Weights relative to each tensor's largest value: AdamW's first steps move every weight by about
  // lr whatever its gradient's size, so a weight crossing zero keeps the rounding of a large one.
  double weights = 0;
  for (std::size_t begin = layout.weights_at(); const std::size_t count : tensor_sizes()) {
    double scale = 0, worst = 0;
    for (std::size_t i = begin; i < begin + count; ++i) scale = std::max(scale, std::abs(expected[i]));
    for (std::size_t i = begin; i < begin + count; ++i) worst = std::max(worst, std::abs(got[i] - expected[i]));
    weights = std::max(weights, worst / scale);
    begin += count;
  }
  EXPECT_LE(lp, 1e-4) << "log-probs";
  EXPECT_LE(ent, 1e-4) << "entropy";
  EXPECT_LE(ref, 1e-4) << "ref log-probs";
  EXPECT_LE(met, 1e-4) << "pg_loss, kl_loss, entropy, grad_norm";
  EXPECT_LE(weights, 1e-4) << "updated weights";
  // The updates moved the policy, and every valid response token has a log-prob.
  EXPECT_NE(got[layout.log_probs(0)], got[layout.log_probs(steps)]);
  const data::DataProto all = whole_batch();
  const MatrixF& mask = trainer::float_column(all, trainer::keys::response_mask);
  for (Index r = 0; r < rows; ++r)
    for (Index c = 0; c < response; ++c)
      EXPECT_EQ(got[static_cast<std::size_t>(r * response + c)] != 0.0, mask(r, c) != 0.0f) << r << ", " << c;
  if (world.rank() == 0 && std::getenv("VERL_TEST_VERBOSE") != nullptr) {
    fmt::print("  sp={} dp={} fsdp_size={}: max relative differences vs one process: log-probs {:.3g}, entropy {:.3g}, ref {:.3g}, "
               "metrics {:.3g}, weights {:.3g}\n",
               sp, dp, fsdp_size, lp, ent, ref, met, weights);
  }
}

TEST(FsdpUlysses, Sp2MatchesOneProcess) { check_sequence_parallel(2, 1); }
TEST(FsdpUlysses, Sp2Dp2MatchesOneProcess) { check_sequence_parallel(2, 2); }
TEST(FsdpUlysses, Sp4RepeatsTheKvHeadsAndMatchesOneProcess) { check_sequence_parallel(4, 1); }
// Sharding and sequence parallelism as independent groups: replicated, and FSDP groups of two
// (HYBRID_SHARD) over sp 2 x dp 2.
TEST(FsdpUlysses, Sp2ReplicatedMatchesOneProcess) { check_sequence_parallel(2, 1, 1); }
TEST(FsdpUlysses, Sp2Dp2ShardedInPairsMatchesOneProcess) { check_sequence_parallel(2, 2, 2); }

/// init_model's error on every rank of the world's first `size` ranks (the same on each).
template <class Models>
std::string init_error(int size, int sp) {
  MpiCommunicator world = MpiCommunicator::world();
  const bool member = world.rank() < size;
  MpiCommunicator job = world.split(member ? 0 : 1, world.rank());
  if (!member) return "";
  parallel::ProcessGroup group = parallel::ProcessGroup::borrowing(job);
  hybridflow::WorkerContext context;
  context.rank = job.rank();
  context.world_size = job.size();
  context.group = &job;
  context.process_group = &group;
  trainer::ActorRolloutRefWorker<Models> worker(context);
  try {
    worker.init_model(overrides(sp, -1), steps);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "no error";
}

TEST(FsdpUlysses, KvHeadsThatDoNotSplitAreRefusedByName) {
  if (MpiCommunicator::world().size() < 2) GTEST_SKIP() << "needs 2 ranks";
  const std::string error = init_error<ThreeKvHeads>(2, 2);
  if (MpiCommunicator::world().rank() >= 2) return;
  EXPECT_NE(error.find("actor_rollout_ref.actor.ulysses_sequence_parallel_size: 2: the model's num_key_value_heads 3 "
                       "must be a multiple or a divisor of it"),
            std::string::npos)
      << error;
}

TEST(FsdpUlysses, SpThatDoesNotDivideTheGroupIsRefusedByName) {
  if (MpiCommunicator::world().size() < 2) GTEST_SKIP() << "needs 2 ranks";
  const std::string error = init_error<TinyLlama>(2, 4);
  if (MpiCommunicator::world().rank() >= 2) return;
  EXPECT_NE(error.find("actor_rollout_ref.actor.ulysses_sequence_parallel_size: expected a divisor of the worker group's "
                       "world size 2 (dp = world / sp), got 4"),
            std::string::npos)
      << error;
}

}  // namespace
