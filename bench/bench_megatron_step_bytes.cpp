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
// through MPI's profiling interface (PMPI): it defines the non-blocking collectives and
// point-to-point calls MpiCommunicator issues (MPI_Iallreduce, MPI_Ireduce_scatter_block,
// MPI_Iallgather(v), MPI_Ibcast, MPI_Ialltoall, MPI_Isend, MPI_Irecv) and forwards each to its
// PMPI_ twin after adding the call's bytes to a tally keyed by (phase, collective, mesh axis,
// element type). Nothing in the library changes and the numerics are untouched (the same calls
// with the same buffers). The axis of a call is read from its communicator's members: the world
// ranks it holds, placed on the job's (tp, dp, pp) mesh (Megatron's order, tp fastest).
// The reshard's figure is also read from the worker's own CountingCommunicator
// (perf/reshard_bytes_received) and checked equal to the PMPI count.
//
// What a call's bytes are (per rank, this rank's buffers, as the counting communicator counts):
//   all-reduce        the buffer (N elements)
//   reduce-scatter    the send buffer (d x block)
//   all-gather(v)     the blocks received (all but this rank's own)
//   broadcast         the buffer, on every rank but the root
//   send/recv         the receive buffers (point-to-point, PP activations and their gradients)
// The tables print "moved per rank" under ring algorithms (the convention): an all-reduce
// over n ranks moves 2 (n-1)/n N b per rank, a reduce-scatter (n-1)/n of its send buffer; the
// others as counted.
//
// Formulas (the 7B table): the same tally computed from the model's shape and the mesh, checked
// here, entry for entry, against the counted tally of the small model on every rank.
#include <mpi.h>

#include <algorithm>
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

// ---- the tally, filled by the PMPI wrappers ---------------------------------------------------

namespace tally {

enum class Kind { all_reduce, reduce_scatter, all_gather, all_gather_in_place, broadcast, all_to_all, p2p };
constexpr const char* kind_names[] = {"all-reduce", "reduce-scatter", "all-gather", "all-gather (in place)",
                                      "broadcast",  "all-to-all",     "send/recv"};

struct Key {
  std::string phase;  ///< generate (reshard + decode), log_prob, update
  Kind kind;
  std::string axis;  ///< the mesh axes the communicator's members differ along (tp, dp, pp, tp+dp, ...)
  int ranks;         ///< the communicator's size
  int element;       ///< element bytes (4: f32/i32, 8: f64/i64)
  friend bool operator<(const Key& a, const Key& b) {
    return std::tie(a.phase, a.kind, a.axis, a.ranks, a.element) < std::tie(b.phase, b.kind, b.axis, b.ranks, b.element);
  }
  friend bool operator==(const Key& a, const Key& b) = default;
};
using Table = std::map<Key, std::int64_t>;  ///< bytes (see the file's comment)

bool enabled = false;
std::string phase = "init";
int tp = 1, dp = 1, pp = 1;  ///< the job's mesh (the job is the world)
Table counts;

std::string axis_of(MPI_Comm comm) {
  MPI_Group group = MPI_GROUP_NULL, world = MPI_GROUP_NULL;
  MPI_Comm_group(comm, &group);
  MPI_Comm_group(MPI_COMM_WORLD, &world);
  int n = 0;
  MPI_Group_size(group, &n);
  std::vector<int> local(static_cast<std::size_t>(n)), global(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) local[static_cast<std::size_t>(i)] = i;
  MPI_Group_translate_ranks(group, n, local.data(), world, global.data());
  MPI_Group_free(&group);
  MPI_Group_free(&world);
  bool varies[3] = {false, false, false};
  const auto coords = [](int r) { return std::array<int, 3>{r % tp, (r / tp) % dp, r / (tp * dp)}; };
  const auto first = coords(global[0]);
  for (const int r : global) {
    const auto c = coords(r);
    for (int a = 0; a < 3; ++a) varies[a] = varies[a] || c[static_cast<std::size_t>(a)] != first[static_cast<std::size_t>(a)];
  }
  std::string axis;
  const char* names[] = {"tp", "dp", "pp"};
  for (int a = 0; a < 3; ++a)
    if (varies[a]) axis += (axis.empty() ? "" : "+") + std::string(names[a]);
  return axis.empty() ? "self" : axis;
}

void add(Kind kind, MPI_Comm comm, MPI_Datatype type, std::int64_t elements) {
  if (!enabled || elements == 0) return;
  int size = 0, element = 0;
  PMPI_Comm_size(comm, &size);
  MPI_Type_size(type, &element);
  counts[Key{phase, kind, axis_of(comm), size, element}] += elements * element;
}

}  // namespace tally

extern "C" {

int MPI_Iallreduce(const void* send, void* recv, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm, MPI_Request* request) {
  tally::add(tally::Kind::all_reduce, comm, type, count);
  return PMPI_Iallreduce(send, recv, count, type, op, comm, request);
}
int MPI_Ireduce_scatter_block(const void* send, void* recv, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm,
                              MPI_Request* request) {
  int size = 0;
  PMPI_Comm_size(comm, &size);
  tally::add(tally::Kind::reduce_scatter, comm, type, static_cast<std::int64_t>(count) * size);
  return PMPI_Ireduce_scatter_block(send, recv, count, type, op, comm, request);
}
int MPI_Iallgather(const void* send, int send_count, MPI_Datatype send_type, void* recv, int recv_count, MPI_Datatype recv_type,
                   MPI_Comm comm, MPI_Request* request) {
  int size = 0;
  PMPI_Comm_size(comm, &size);
  tally::add(tally::Kind::all_gather, comm, recv_type, static_cast<std::int64_t>(recv_count) * (size - 1));
  return PMPI_Iallgather(send, send_count, send_type, recv, recv_count, recv_type, comm, request);
}
int MPI_Iallgatherv(const void* send, int send_count, MPI_Datatype send_type, void* recv, const int recv_counts[],
                    const int displacements[], MPI_Datatype recv_type, MPI_Comm comm, MPI_Request* request) {
  int size = 0, rank = 0;
  PMPI_Comm_size(comm, &size);
  PMPI_Comm_rank(comm, &rank);
  std::int64_t others = 0;
  for (int r = 0; r < size; ++r)
    if (r != rank) others += recv_counts[r];
  tally::add(send == MPI_IN_PLACE ? tally::Kind::all_gather_in_place : tally::Kind::all_gather, comm, recv_type, others);
  return PMPI_Iallgatherv(send, send_count, send_type, recv, recv_counts, displacements, recv_type, comm, request);
}
int MPI_Ibcast(void* buffer, int count, MPI_Datatype type, int root, MPI_Comm comm, MPI_Request* request) {
  int rank = 0;
  PMPI_Comm_rank(comm, &rank);
  if (rank != root) tally::add(tally::Kind::broadcast, comm, type, count);
  return PMPI_Ibcast(buffer, count, type, root, comm, request);
}
int MPI_Ialltoall(const void* send, int send_count, MPI_Datatype send_type, void* recv, int recv_count, MPI_Datatype recv_type,
                  MPI_Comm comm, MPI_Request* request) {
  int size = 0;
  PMPI_Comm_size(comm, &size);
  tally::add(tally::Kind::all_to_all, comm, recv_type, static_cast<std::int64_t>(recv_count) * (size - 1));
  return PMPI_Ialltoall(send, send_count, send_type, recv, recv_count, recv_type, comm, request);
}
int MPI_Irecv(void* buffer, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm, MPI_Request* request) {
  tally::add(tally::Kind::p2p, comm, type, count);
  return PMPI_Irecv(buffer, count, type, source, tag, comm, request);
}

}  // extern "C"

// ---- the worker job ---------------------------------------------------------------------------

namespace {

using namespace verl;
using parallel::MpiCommunicator;

struct Shape {
  std::int64_t hidden, intermediate, layers, heads, kv_heads, vocab;
};

Shape g_shape{64, 128, 4, 4, 4, 64};

model::Transformer make_model(const Shape& s) {
  const nlohmann::json json = {{"model_type", "llama"},
                               {"hidden_size", s.hidden},
                               {"intermediate_size", s.intermediate},
                               {"num_hidden_layers", s.layers},
                               {"num_attention_heads", s.heads},
                               {"num_key_value_heads", s.kv_heads},
                               {"vocab_size", s.vocab},
                               {"rms_norm_eps", 1e-6},
                               {"max_position_embeddings", 256},
                               {"eos_token_id", 1},
                               {"tie_word_embeddings", false}};
  return model::Transformer::random(model::HfModelConfig::from_json(json, "bench llama"), {.initializer_range = 0.2, .seed = 5},
                                    {.num_threads = 1});
}

struct BenchModels {
  using policy_type = model::Transformer;
  static model::Transformer actor(const trainer::PPOConfig&) { return make_model(g_shape); }
  static model::Transformer reference(const trainer::PPOConfig& config, const model::Transformer&) { return actor(config); }
};
using Worker = trainer::MegatronActorRolloutRefWorker<BenchModels>;

/// One step's batch sizes (per job): rows, prompt and response lengths, micro-batch rows.
struct Batch {
  std::int64_t rows = 8, prompt = 8, response = 8, micro = 2;
};
Batch g_batch;

struct Config {
  std::string name;
  int tp = 1, dp = 1, pp = 1, tg = 1;
  bool distributed_optimizer = false;
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
          "actor_rollout_ref.actor.megatron.sequence_parallel=False",
          std::string("actor_rollout_ref.actor.megatron.use_distributed_optimizer=") + (c.distributed_optimizer ? "True" : "False"),
          "actor_rollout_ref.rollout.tensor_model_parallel_size=" + std::to_string(c.tg)};
}

/// This DP group's training rows: every token valid (attention mask all ones), so that a
/// micro-batch of m rows has m (prompt + response) tokens.
data::DataProto chunk(const Batch& b, int dp_rank, int dp, int step) {
  const Index mine = b.rows / dp, first = dp_rank * mine, width = b.prompt + b.response;
  MatrixI64 input_ids(mine, width), position_ids(mine, width);
  MatrixF attention_mask = MatrixF::Ones(mine, width), response_mask = MatrixF::Ones(mine, b.response);
  MatrixF advantages(mine, b.response);
  for (Index r = 0; r < mine; ++r) {
    const Index g = first + r;
    for (Index c = 0; c < width; ++c) {
      input_ids(r, c) = (g * 7 + c * 3 + step * 11) % (g_shape.vocab - 2) + 2;
      position_ids(r, c) = c;
    }
    for (Index c = 0; c < b.response; ++c) advantages(r, c) = static_cast<float>((g * b.response + c) % 5) - 2.0f;
  }
  data::DataProto batch;
  batch.set(std::string(trainer::keys::input_ids), input_ids);
  batch.set(std::string(trainer::keys::attention_mask), attention_mask);
  batch.set(std::string(trainer::keys::position_ids), position_ids);
  batch.set(std::string(trainer::keys::response_mask), response_mask);
  batch.set(std::string(trainer::keys::advantages), advantages);
  return batch;
}

data::DataProto prompts(const Batch& b, int dp_rank, int dp) {
  const Index mine = b.rows / dp, first = dp_rank * mine;
  MatrixI64 input_ids(mine, b.prompt);
  for (Index r = 0; r < mine; ++r)
    for (Index c = 0; c < b.prompt; ++c) input_ids(r, c) = ((first + r) * 5 + c) % (g_shape.vocab - 3) + 3;
  data::DataProto batch;
  batch.set(std::string(trainer::keys::input_ids), input_ids);
  batch.set(std::string(trainer::keys::attention_mask), MatrixF(MatrixF::Ones(mine, b.prompt)));
  rollout::SamplingParams params;
  params.temperature = 1.0f;
  params.n = 1;
  params.max_response_length = b.response;
  params.eos_token_ids = {1};
  params.pad_token_id = 0;
  params.seed = 9;
  batch.meta_info()["sampling_params"] = trainer::sampling_params_to_json(params);
  std::vector<std::int64_t> seeds;
  for (Index r = 0; r < mine; ++r) seeds.push_back(100 + first + r);
  batch.set_non_tensor(std::string(trainer::keys::seed), std::move(seeds));
  return batch;
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
    const data::DataProto generated = worker.generate_sequences(prompts(g_batch, dp_rank, c.dp));
    result.reshard_metric = generated.meta_info().at("metrics").at("perf/reshard_bytes_received").get<std::int64_t>();
    lap(0);
    data::DataProto batch = chunk(g_batch, dp_rank, c.dp, s);
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
    if (c.tp > 1) {
      // Row-parallel outputs (embedding, attention o_proj, MLP down) forward; column-parallel
      // inputs' gradients (qkv, gate/up, LM head) backward: one tokens x hidden all-reduce each.
      put(phase, Kind::all_reduce, tp, c.tp, 4, ((first ? 1 : 0) + 2 * layers) * h * tokens);
      if (update) put(phase, Kind::all_reduce, tp, c.tp, 4, (2 * layers + (last ? 1 : 0)) * h * tokens);
      // Vocabulary-parallel log-probs and entropy (per token: the max, then 4 sums, in double) and
      // the stage's 4 int64 bounds per micro-batch.
      put(phase, Kind::all_reduce, tp, c.tp, 8, 4 * micro_batches + (last ? 5 * tokens : 0));
    }
    // Pipeline messages: activations into every stage but the first, their gradients (update)
    // into every stage but the last.
    if (c.pp > 1) {
      put(phase, Kind::p2p, pp, c.pp, 4, first ? 0 : tokens * h);
      if (update) put(phase, Kind::p2p, pp, c.pp, 4, last ? 0 : tokens * h);
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
    "TP all-reduce, activations (f32)",         "TP all-reduce, vocab stats + bounds + norm (f64/i64)",
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
  if (k.kind == Kind::reduce_scatter) return 3;
  if (k.kind == Kind::all_gather_in_place && k.axis == "dp") return 4;
  if (k.kind == Kind::all_reduce && k.element == 4 && k.axis == "tp") return 0;
  if (k.kind == Kind::all_reduce && k.element == 4 && k.axis == "dp") return 2;
  if (k.kind == Kind::all_reduce && (k.axis == "tp" || k.axis == "self")) return 1;
  return 6;
}

/// Bytes moved per rank under ring algorithms: all-reduce 2 (n-1)/n of the buffer, reduce-scatter
/// (n-1)/n of the send buffer, the others as counted (already what the rank receives).
double moved(const tally::Key& k, std::int64_t bytes) {
  const double n = k.ranks;
  if (k.kind == tally::Kind::all_reduce) return 2.0 * (n - 1) / n * static_cast<double>(bytes);
  if (k.kind == tally::Kind::reduce_scatter) return (n - 1) / n * static_cast<double>(bytes);
  return static_cast<double>(bytes);
}

std::vector<double> rows_of(const tally::Table& t, const Config& c) {
  std::vector<double> rows(row_count + 1, 0.0);
  for (const auto& [k, v] : t) {
    rows[static_cast<std::size_t>(row_of(k, c))] += moved(k, v);
    rows[row_count] += moved(k, v);
  }
  return rows;
}

std::string human(double bytes) {
  if (bytes == 0) return "0";
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) {
    bytes /= 1024;
    ++u;
  }
  return u == 0 ? fmt::format("{:.0f} B", bytes) : fmt::format("{:.2f} {}", bytes, units[u]);
}

void print_table(const std::vector<Config>& configs, const std::vector<std::vector<double>>& columns, bool counted) {
  fmt::print("| collective (bytes moved per rank per step, max over ranks) |");
  for (const Config& c : configs) fmt::print(" {} |", c.name);
  fmt::print("\n| --- |");
  for (std::size_t i = 0; i < configs.size(); ++i) fmt::print(" ---: |");
  fmt::print("\n");
  for (std::size_t r = 0; r <= row_count; ++r) {
    fmt::print("| {} |", r < row_count ? row_names[r] : "**total**");
    for (const auto& col : columns) fmt::print(" {} |", !counted && r == 9 ? "n/a" : human(col[r]));
    fmt::print("\n");
  }
}

}  // namespace

int main(int argc, char** argv) {
  verl::parallel::MpiEnvironment environment(argc, argv);
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
                 human(static_cast<double>(plan.cost(0).bytes(params_of(llama7b, c, 0).model * 4).comm_bytes_per_rank)));
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
