// Bytes per collective per step of the Megatron actor worker (issue 26), and step time at 1 and 2
// ranks. Not a Google Benchmark program: an MPI program built as bench_megatron_step_bytes_mpi
// (bench/CMakeLists.txt, when MPI is found; ctest runs the np 4 check):
//
//   mpirun -np 4 build/bench/bench_megatron_step_bytes_mpi            # the byte tables (np 4)
//   mpirun -np 1 build/bench/bench_megatron_step_bytes_mpi --time     # step time at np 1
//   mpirun -np 2 build/bench/bench_megatron_step_bytes_mpi --time     # step time at np 2
//
// How the bytes are counted. The worker's TP, pipeline and micro-DP communicators are
// CountingCommunicators, but its DP group and its worker group are plain MpiCommunicators, and the
// counting communicator lumps every all-reduce and reduce-scatter into one figure; wrapping every
// communicator would need a change to the worker's header. So this program counts one layer below,
// through MPI's profiling interface (pmpi_tally.hpp, which also says what a call's bytes are); the
// axis of a call is read from its communicator's members placed on the job's (tp, dp, pp) mesh
// (Megatron's order, tp fastest). The reshard's figure is also read from the worker's own
// CountingCommunicator (perf/reshard_bytes_received) and checked equal to the PMPI count.
// The tables print "moved per rank" under ring algorithms (the convention): an all-reduce
// over n ranks moves 2 (n-1)/n N b per rank, a reduce-scatter (n-1)/n of its send buffer; the
// others as counted.
//
// Formulas (the 7B table): the same tally computed from the model's shape and the mesh, checked
// here, entry for entry, against the counted tally of the small model on every rank.
#include <mpi.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "verl/hybridflow/dispatch.hpp"
#include "verl/hybridflow/worker.hpp"
#include "verl/model/hf_config.hpp"
#include "verl/model/transformer/transformer.hpp"
#include "verl/parallel/mesh.hpp"
#include "verl/parallel/mpi_communicator.hpp"
#include "verl/parallel/reshard_plan.hpp"
#include "verl/trainer/workers/megatron_actor_worker.hpp"

#include "pmpi_tally.hpp"
#include "step_bytes_job.hpp"

// ---- the tally (pmpi_tally.hpp), named along (tp, dp, pp) -------------------------------------

namespace tally {

int tp = 1, dp = 1, pp = 1;  ///< the job's mesh (the job is the world)

/// The axes a communicator's members differ along, Megatron's order (tp fastest).
std::string mesh_axis(const std::vector<int>& members) {
  bool varies[3] = {false, false, false};
  const auto coords = [](int r) { return std::array<int, 3>{r % tp, (r / tp) % dp, r / (tp * dp)}; };
  const auto first = coords(members[0]);
  for (const int r : members) {
    const auto c = coords(r);
    for (int a = 0; a < 3; ++a) varies[a] = varies[a] || c[static_cast<std::size_t>(a)] != first[static_cast<std::size_t>(a)];
  }
  std::string axis;
  const char* names[] = {"tp", "dp", "pp"};
  for (int a = 0; a < 3; ++a)
    if (varies[a]) axis += (axis.empty() ? "" : "+") + std::string(names[a]);
  return axis.empty() ? "self" : axis;
}

}  // namespace tally

// ---- the worker job ---------------------------------------------------------------------------

namespace {

using namespace verl;
using parallel::MpiCommunicator;

using step_bench::Batch;
using step_bench::g_batch;
using step_bench::g_shape;
using step_bench::Shape;
using Worker = trainer::MegatronActorRolloutRefWorker<step_bench::BenchModels>;

struct Config {
  std::string name;
  int tp = 1, dp = 1, pp = 1, tg = 1;
  bool distributed_optimizer = false;
  bool sequence_parallel = false;  ///< megatron.sequence_parallel (acts with tp > 1)
};

std::vector<std::string> overrides(const Config& c, const Batch& b) {
  return {"data.train_batch_size=" + std::to_string(b.rows),
          "actor_rollout_ref.rollout.n=1",
          "actor_rollout_ref.actor.ppo_mini_batch_size=" + std::to_string(b.rows),
          "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=" + std::to_string(b.micro),
          "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=" + std::to_string(b.micro),
          "actor_rollout_ref.actor.optim.lr=0.001",
          "actor_rollout_ref.actor.grad_clip=1.0",
          "actor_rollout_ref.actor.use_kl_loss=False",
          "actor_rollout_ref.actor.strategy=megatron",
          "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=" + std::to_string(c.tp),
          "actor_rollout_ref.actor.megatron.pipeline_model_parallel_size=" + std::to_string(c.pp),
          std::string("actor_rollout_ref.actor.megatron.sequence_parallel=") + (c.sequence_parallel ? "True" : "False"),
          std::string("actor_rollout_ref.actor.megatron.use_distributed_optimizer=") + (c.distributed_optimizer ? "True" : "False"),
          "actor_rollout_ref.rollout.tensor_model_parallel_size=" + std::to_string(c.tg)};
}

/// The job over the whole world (its size must be tp x dp x pp).
struct Job {
  MpiCommunicator group;
  hybridflow::WorkerContext context;
  Job(MpiCommunicator& world, const Config& c) : group(world.split(0, world.rank())) {
    context.rank = group.rank();
    context.world_size = group.size();
    context.global_rank = world.rank();
    context.group = &group;
    context.mesh = hybridflow::GroupMesh(c.tp, c.dp, c.pp);
  }
};

struct StepResult {
  tally::Table counts;           ///< the last step's tally
  bool steps_agree = true;       ///< every step's training tally equal (deterministic)
  std::int64_t reshard_metric = 0;  ///< perf/reshard_bytes_received (the worker's CountingCommunicator)
  double seconds_per_step = 0;
  double phase_seconds[3] = {0, 0, 0};  ///< per step: generate, log_prob, update
};

/// `steps` steps of generate_sequences (the reshard), compute_log_prob and update_actor on
/// every rank; the tally of the last step (tallies on when `count`).
StepResult run_job(MpiCommunicator& world, const Config& c, int steps, bool count) {
  tally::tp = c.tp;
  tally::dp = c.dp;
  tally::pp = c.pp;
  Job job(world, c);
  Worker worker(job.context);
  worker.init_model(overrides(c, g_batch), steps);
  const int rank = job.context.rank, dp_rank = (rank / c.tp) % c.dp;
  StepResult result;
  std::optional<tally::Table> first;
  double elapsed = 0;
  for (int s = 0; s < steps; ++s) {
    tally::counts.clear();
    tally::enabled = count;
    world.barrier();
    const auto start = std::chrono::steady_clock::now();
    auto lap = [&, last = start](int phase) mutable {
      const auto now = std::chrono::steady_clock::now();
      if (s > 0) result.phase_seconds[phase] += std::chrono::duration<double>(now - last).count();
      last = now;
    };
    tally::phase = "generate";
    const data::DataProto generated = worker.generate_sequences(step_bench::generation_prompts(g_batch, dp_rank, c.dp));
    result.reshard_metric = generated.meta_info().at("metrics").at("perf/reshard_bytes_received").get<std::int64_t>();
    lap(0);
    data::DataProto batch = step_bench::training_rows(g_batch, dp_rank, c.dp, s);
    tally::phase = "log_prob";
    const data::DataProto old = worker.compute_log_prob(batch);
    // The last stage's tp rank 0 holds the log-probs; the bench needs them only as update inputs,
    // and on-policy (one mini-batch, one epoch) the update uses its own forward's.
    MatrixF zeros = MatrixF::Zero(batch.size(), g_batch.response);
    batch.set(std::string(trainer::keys::old_log_probs), old.size() > 0 ? trainer::float_column(old, trainer::keys::old_log_probs) : zeros);
    lap(1);
    tally::phase = "update";
    (void)worker.update_actor(batch);
    lap(2);
    tally::enabled = false;
    world.barrier();
    if (s > 0) elapsed += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    tally::Table training;
    for (const auto& [k, v] : tally::counts)
      if (k.phase != "generate") training[k] = v;
    if (!first) {
      first = training;
    } else if (*first != training) {
      result.steps_agree = false;
    }
  }
  result.counts = tally::counts;
  result.seconds_per_step = steps > 1 ? elapsed / (steps - 1) : 0;
  for (double& t : result.phase_seconds) t = steps > 1 ? t / (steps - 1) : 0;
  return result;
}

// ---- the formulas ------------------------------------------------------------------------------

/// The axes of a communicator over the job's mesh: those of `axes` (tp, dp, pp) whose size is > 1.
std::string axis_label(const Config& c, bool tp, bool dp, bool pp) {
  std::string axis;
  if (tp && c.tp > 1) axis = "tp";
  if (dp && c.dp > 1) axis += std::string(axis.empty() ? "" : "+") + "dp";
  if (pp && c.pp > 1) axis += std::string(axis.empty() ? "" : "+") + "pp";
  return axis.empty() ? "self" : axis;
}

/// Parameter floats: the whole model (M), and a stage's TP shard (N_s, what this rank holds) with
/// its replicated part (R_s: the RMSNorm weights) and the stage's dense floats (F_s).
struct Params {
  std::int64_t model = 0, shard = 0, replicated = 0, stage_dense = 0, model_replicated = 0;
};
Params params_of(const Shape& m, const Config& c, int stage) {
  const std::int64_t h = m.hidden, head_dim = h / m.heads;
  const std::int64_t layer_sharded = 2 * h * m.heads * head_dim + 2 * h * m.kv_heads * head_dim + 3 * h * m.intermediate;
  const std::int64_t layer_replicated = 2 * h, embed = m.vocab * h, layers = m.layers / c.pp;
  const bool first = stage == 0, last = stage == c.pp - 1;
  Params p;
  p.model = 2 * embed + m.layers * (layer_sharded + layer_replicated) + h;
  p.model_replicated = m.layers * layer_replicated + h;
  const std::int64_t sharded = (first ? embed : 0) + layers * layer_sharded + (last ? embed : 0);
  p.replicated = layers * layer_replicated + (last ? h : 0);
  p.shard = sharded / c.tp + p.replicated;
  p.stage_dense = sharded + p.replicated;
  return p;
}

/// One step's tally on `rank` from the shapes (see the file's comment for what a call's bytes are).
tally::Table formula(const Shape& m, const Batch& b, const Config& c, int rank) {
  using tally::Kind;
  const int stage = rank / (c.tp * c.dp);
  const bool first = stage == 0, last = stage == c.pp - 1;
  const std::int64_t h = m.hidden, layers = m.layers / c.pp, width = b.prompt + b.response, mine = b.rows / c.dp;
  const std::int64_t tokens = mine * width, micro_batches = (mine + b.micro - 1) / b.micro;
  const bool zero = c.distributed_optimizer && c.dp > 1;
  const Params p = params_of(m, c, stage);
  const std::string tp = axis_label(c, true, false, false), dp = axis_label(c, false, true, false),
                    pp = axis_label(c, false, false, true), group = axis_label(c, true, true, true);
  const int job = c.tp * c.dp * c.pp;
  tally::Table t;
  const auto put = [&](const char* phase, Kind kind, const std::string& axis, int ranks, int element, std::int64_t elements) {
    if (elements > 0) t[tally::Key{phase, kind, axis, ranks, element}] += elements * element;
  };
  for (const char* phase : {"log_prob", "update"}) {
    const bool update = std::strcmp(phase, "update") == 0;
    if (c.tp > 1 && c.sequence_parallel) {
      // Megatron's sequence parallelism: the residual stream holds 1/tp of a micro-batch's tokens
      // (padded to a multiple of tp). Forward: the embedding and the row-parallel outputs (o_proj,
      // down) reduce-scattered (send buffer: every token), the column-parallel inputs (qkv, gate/up)
      // and the final norm's output all-gathered. Backward: the head's d(hidden) and the
      // column-parallel input gradients reduce-scattered; the row-parallel output gradients
      // all-gathered, the column-parallel inputs gathered again, the embedding's gradient
      // gathered; the norms' partial gradients all-reduced once per micro-batch.
      const std::int64_t padded = (b.micro * width + c.tp - 1) / c.tp * c.tp, others = padded / c.tp * (c.tp - 1);
      put(phase, Kind::reduce_scatter, tp, c.tp, 4, micro_batches * ((first ? 1 : 0) + 2 * layers) * padded * h);
      put(phase, Kind::all_gather, tp, c.tp, 4, micro_batches * (2 * layers + (last ? 1 : 0)) * others * h);
      if (update) {
        put(phase, Kind::reduce_scatter, tp, c.tp, 4, micro_batches * ((last ? 1 : 0) + 2 * layers) * padded * h);
        put(phase, Kind::all_gather, tp, c.tp, 4, micro_batches * (4 * layers + (first ? 1 : 0)) * others * h);
        put(phase, Kind::all_reduce, tp, c.tp, 4, micro_batches * (2 * layers + (last ? 1 : 0)) * h);
      }
    } else if (c.tp > 1) {
      // Row-parallel outputs (embedding, attention o_proj, MLP down) forward; column-parallel
      // inputs' gradients (qkv, gate/up, LM head) backward: one tokens x hidden all-reduce each.
      put(phase, Kind::all_reduce, tp, c.tp, 4, ((first ? 1 : 0) + 2 * layers) * h * tokens);
      if (update) put(phase, Kind::all_reduce, tp, c.tp, 4, (2 * layers + (last ? 1 : 0)) * h * tokens);
    }
    if (c.tp > 1) {
      // Vocabulary-parallel log-probs and entropy (per token: the max, then 4 sums, in double) and
      // the stage's 4 int64 bounds per micro-batch.
      put(phase, Kind::all_reduce, tp, c.tp, 8, 4 * micro_batches + (last ? 5 * tokens : 0));
    }
    // Pipeline messages: activations into every stage but the first, their gradients (update)
    // into every stage but the last; under sequence parallelism each TP rank's slice of a
    // micro-batch's tokens (padded to a multiple of tp), as Megatron's stages exchange them.
    if (c.pp > 1) {
      const std::int64_t rows = c.tp > 1 && c.sequence_parallel ? micro_batches * ((b.micro * width + c.tp - 1) / c.tp) : tokens;
      put(phase, Kind::p2p, pp, c.pp, 4, first ? 0 : rows * h);
      if (update) put(phase, Kind::p2p, pp, c.pp, 4, last ? 0 : rows * h);
    }
  }
  // The optimizer step (one mini-batch): gradients over DP, the global norm.
  if (zero) {
    const std::int64_t slice = (p.shard + c.dp - 1) / c.dp;
    put("update", Kind::reduce_scatter, dp, c.dp, 4, c.dp * slice);
    put("update", Kind::all_gather_in_place, dp, c.dp, 4, (c.dp - 1) * slice);
    put("update", Kind::all_reduce, group, job, 8, 1);  // the norm over the worker group
  } else {
    if (c.dp > 1) put("update", Kind::all_reduce, dp, c.dp, 4, p.shard);
    put("update", Kind::all_reduce, tp, c.tp, 8, 1);  // the norm over TP (even at tp 1)
    if (c.pp > 1) put("update", Kind::all_reduce, pp, c.pp, 8, 1);  // ... then over the stages
  }
  // The last stage's loss sums and metrics over DP: 5 doubles (counted once on the small model;
  // independent of the model's shape).
  if (last && c.dp > 1) put("update", Kind::all_reduce, dp, c.dp, 8, 5);
  // The reshard (generate_sequences): 2 int64 figures max-reduced over the group, then the gathers.
  put("generate", Kind::all_reduce, group, job, 8, 2);
  if (c.tg == 1) {
    if (c.tp > 1) put("generate", Kind::all_gather, tp, c.tp, 4, (c.tp - 1) * (p.shard - p.replicated));
    if (c.pp > 1) put("generate", Kind::broadcast, pp, c.pp, 4, p.model - p.stage_dense);
  } else if (c.tg < c.tp) {
    const std::int64_t sharded = p.model - p.model_replicated;  // received: (1/tg - 1/t) of it
    put("generate", Kind::all_gather_in_place, tp, c.tp / c.tg, 4, sharded / c.tg - sharded / c.tp);
  }
  return t;
}

/// Generation's own traffic with tg > 1 (TP decode, the gathered logits row, the results over the
/// micro-DP group): depends on the sampled lengths, counted only.
bool decode_traffic(const tally::Key& k, const Config& c) {
  return c.tg > 1 && k.phase == "generate" && k.kind != tally::Kind::all_gather_in_place && k.ranks != c.tp * c.dp * c.pp;
}

// ---- the tables --------------------------------------------------------------------------------

constexpr const char* row_names[] = {
    "TP all-reduce, activations (f32; with SP: reduce-scatter + all-gather)",         "TP all-reduce, vocab stats + bounds + norm (f64/i64)",
    "DP all-reduce, gradients (f32)",           "DP reduce-scatter, gradients (dist. opt.)",
    "DP all-gather, parameters (dist. opt.)",   "PP send/recv, activations + gradients",
    "other scalars (norm, metrics, figures)",   "reshard: all-gather over TP / micro-DP",
    "reshard: broadcast over PP",               "generation decode, tg > 1 (counted only)",
};
constexpr std::size_t row_count = std::size(row_names);

int row_of(const tally::Key& k, const Config& c) {
  using tally::Kind;
  if (decode_traffic(k, c)) return 9;
  if (k.phase == "generate") {
    if (k.kind == Kind::all_gather || k.kind == Kind::all_gather_in_place) return 7;
    if (k.kind == Kind::broadcast) return 8;
    return 6;
  }
  if (k.kind == Kind::p2p) return 5;
  if ((k.kind == Kind::reduce_scatter || k.kind == Kind::all_gather) && k.axis == "tp") return 0;  // sequence parallel
  if (k.kind == Kind::reduce_scatter) return 3;
  if (k.kind == Kind::all_gather_in_place && k.axis == "dp") return 4;
  if (k.kind == Kind::all_reduce && k.element == 4 && k.axis == "tp") return 0;
  if (k.kind == Kind::all_reduce && k.element == 4 && k.axis == "dp") return 2;
  if (k.kind == Kind::all_reduce && (k.axis == "tp" || k.axis == "self")) return 1;
  return 6;
}

std::vector<double> rows_of(const tally::Table& t, const Config& c) {
  std::vector<double> rows(row_count + 1, 0.0);
  for (const auto& [k, v] : t) {
    rows[static_cast<std::size_t>(row_of(k, c))] += tally::moved(k, v);
    rows[row_count] += tally::moved(k, v);
  }
  return rows;
}

void print_table(const std::vector<Config>& configs, const std::vector<std::vector<double>>& columns, bool counted) {
  std::vector<std::string> names;
  for (const Config& c : configs) names.push_back(c.name);
  step_bench::print_byte_table(names, std::vector<std::string_view>(std::begin(row_names), std::end(row_names)), columns,
                               counted ? -1 : 9);
}

}  // namespace

int main(int argc, char** argv) {
  verl::parallel::MpiEnvironment environment(argc, argv);
  tally::axis_namer = tally::mesh_axis;
  MpiCommunicator world = MpiCommunicator::world();
  const bool timing = argc > 1 && std::strcmp(argv[1], "--time") == 0;
  const int n = world.size();
  if (timing) {
    // Step time: a medium model, the tally off (the wrappers only forward).
    g_shape = Shape{256, 704, 4, 8, 8, 2048};
    g_batch = Batch{8, 32, 32, 2};
    const std::vector<Config> configs = {{"tp1 (np 1)", 1, 1, 1, 1, false}, {"tp2", 2, 1, 1, 1, false},
                                         {"tp2 -> tg2", 2, 1, 1, 2, false}, {"dp2", 1, 2, 1, 1, false},
                                         {"dp2 DO", 1, 2, 1, 1, true},      {"pp2", 1, 1, 2, 1, false}};
    if (world.rank() == 0)
      fmt::print("| mesh (np {}) | s per step | generate (reshard + decode) | compute_log_prob | update_actor |\n"
                 "| --- | ---: | ---: | ---: | ---: |\n",
                 n);
    for (const Config& c : configs) {
      if (c.tp * c.dp * c.pp != n) continue;
      const StepResult r = run_job(world, c, 6, false);  // 1 warm-up step, the mean of 5
      if (world.rank() == 0)
        fmt::print("| {} | {:.3f} | {:.3f} | {:.3f} | {:.3f} |\n", c.name, r.seconds_per_step, r.phase_seconds[0],
                   r.phase_seconds[1], r.phase_seconds[2]);
    }
    return 0;
  }
  const std::vector<Config> configs = {
      {"tp4", 4, 1, 1, 1, false},       {"tp4 -> tg2", 4, 1, 1, 2, false}, {"tp2 dp2", 2, 2, 1, 1, false},
      {"tp2 dp2 DO", 2, 2, 1, 1, true}, {"dp4", 1, 4, 1, 1, false},        {"dp4 DO", 1, 4, 1, 1, true},
      {"pp2 tp2", 2, 1, 2, 1, false},   {"pp2 dp2 DO", 1, 2, 2, 1, true},  {"pp4", 1, 1, 4, 1, false},
      {"tp4 SP", 4, 1, 1, 1, false, true}, {"tp2 dp2 SP", 2, 2, 1, 1, false, true},
      {"pp2 tp2 SP", 2, 1, 2, 1, false, true},
  };
  std::vector<Config> ran;
  std::vector<std::vector<double>> counted, big_formula;
  const Shape small = g_shape, llama7b{4096, 11008, 32, 32, 32, 32000};
  const Batch big_batch{128, 1024, 1024, 2};  // per job: 128 sequences of 1024 + 1024 tokens, micro-batch 2
  bool all_agree = true;
  for (const Config& c : configs) {
    if (c.tp * c.dp * c.pp != n) continue;
    const StepResult r = run_job(world, c, 2, true);
    tally::Table checked;
    for (const auto& [k, v] : r.counts)
      if (!decode_traffic(k, c)) checked[k] = v;
    const tally::Table expected = formula(small, g_batch, c, world.rank());
    int mismatch = checked != expected || !r.steps_agree ? 1 : 0;
    if (mismatch) {
      std::string diff;
      for (const auto& [k, v] : checked)
        if (!expected.contains(k) || expected.at(k) != v)
          diff += fmt::format(" [{} {} {} n={} e={}: counted {} formula {}]", k.phase, tally::kind_names[static_cast<int>(k.kind)],
                              k.axis, k.ranks, k.element, v, expected.contains(k) ? expected.at(k) : 0);
      for (const auto& [k, v] : expected)
        if (!checked.contains(k))
          diff += fmt::format(" [{} {} {} n={} e={}: counted 0 formula {}]", k.phase, tally::kind_names[static_cast<int>(k.kind)],
                              k.axis, k.ranks, k.element, v);
      fmt::print(stderr, "{} rank {}: the formulas differ from the count:{}\n", c.name, world.rank(), diff);
    }
    // The reshard's PMPI count equals the worker's CountingCommunicator figure (max over ranks).
    std::int64_t gathered = 0;
    for (const auto& [k, v] : r.counts)
      if (row_of(k, c) == 7 || row_of(k, c) == 8) gathered += v;
    world.all_reduce(std::span<std::int64_t>(&gathered, 1), parallel::ReduceOp::max);
    if (gathered != r.reshard_metric) {
      mismatch = 1;
      if (world.rank() == 0)
        fmt::print(stderr, "{}: reshard counted {} B, the worker's perf/reshard_bytes_received {}\n", c.name, gathered, r.reshard_metric);
    }
    world.all_reduce(std::span<int>(&mismatch, 1), parallel::ReduceOp::max);
    all_agree = all_agree && mismatch == 0;
    auto rows = rows_of(r.counts, c), big = rows_of(formula(llama7b, big_batch, c, world.rank()), c);
    world.all_reduce(std::span<double>(rows), parallel::ReduceOp::max);
    world.all_reduce(std::span<double>(big), parallel::ReduceOp::max);
    ran.push_back(c);
    counted.push_back(std::move(rows));
    big_formula.push_back(std::move(big));
    if (world.rank() == 0) {
      // The plan's figure for the reshard, for reference (the worker's differs as its header says).
      const auto train = parallel::Mesh<parallel::TP<>, parallel::DP<>, parallel::PP<>>(c.tp, c.dp, c.pp);
      const auto gen = parallel::Mesh<parallel::TP<>, parallel::DP<>, parallel::PP<>>(c.tg, n / c.tg, 1);
      const auto plan = parallel::make_reshard_plan(train, gen);
      fmt::print(stderr, "{}: formulas {} the count on every rank; plan comm_bytes_per_rank (rank 0) small {} B, 7B {}\n", c.name,
                 mismatch ? "DIFFER FROM" : "equal", plan.cost(0).bytes(params_of(small, c, 0).model * 4).comm_bytes_per_rank,
                 step_bench::human(static_cast<double>(plan.cost(0).bytes(params_of(llama7b, c, 0).model * 4).comm_bytes_per_rank)));
    }
  }
  if (world.rank() == 0) {
    fmt::print("\n### Counted (PMPI), small model: hidden {}, intermediate {}, {} layers, {} heads, vocab {}; {} rows of {} + {} tokens per job, micro-batch {}\n\n",
               small.hidden, small.intermediate, small.layers, small.heads, small.vocab, g_batch.rows, g_batch.prompt, g_batch.response,
               g_batch.micro);
    print_table(ran, counted, true);
    fmt::print("\nFormulas equal the counts, key for key on every rank: {}\n", all_agree ? "yes" : "NO");
    fmt::print("\n### Formulas, Llama-2-7B shape (hidden 4096, intermediate 11008, 32 layers, 32 heads, vocab 32000, untied; fp32); {} rows of {} + {} tokens per job, micro-batch {}\n\n",
               big_batch.rows, big_batch.prompt, big_batch.response, big_batch.micro);
    print_table(ran, big_formula, false);
  }
  return all_agree ? 0 : 1;
}
