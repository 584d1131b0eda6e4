// Bytes per collective per step of the FSDP-strategy actor worker (issue 26): FSDP's sharding
// (fsdp_config.fsdp_size: FULL_SHARD over the group, HYBRID_SHARD over smaller groups) against the
// replicated engine (fsdp_size 1, gradients all-reduced), and step time at 1 and 2 ranks. An MPI
// program built as bench_fsdp_step_bytes_mpi (bench/CMakeLists.txt; ctest runs the np 4 check):
//
//   mpirun -np 4 build/bench/bench_fsdp_step_bytes_mpi            # the byte tables (np 2 or 4)
//   mpirun -np 1|2 build/bench/bench_fsdp_step_bytes_mpi --time   # step time
//
// The bytes are counted through MPI's profiling interface (pmpi_tally.hpp: what a call's bytes
// are), the axis of a call named from its communicator's members: "fsdp" (an FSDP group, f
// consecutive ranks), "replicate" (the ranks holding the same shard, HYBRID_SHARD), "group" (the
// whole worker group). The tables print "moved per rank" under ring algorithms, as the Megatron
// benchmark's.
//
// Formulas, from the model's shape, the mesh and the batch, checked here entry for entry against
// the counted tally on every rank. FSDP's units are the decoder layers and the root (embedding,
// head, final norm); unit u of n_u floats is cut into shards of s_u = ceil(n_u / f), rank r of the
// FSDP group owning o_u(r) = clamp(n_u - r s_u, 0, s_u) of them. Per step on that rank:
//   generate     every unit gathered once (the decode runs every layer at every step):
//                all-gather sum_u (n_u - o_u)
//   log_prob     the root once, each layer once per micro-batch (its forward)
//   update       the root once, each layer twice per micro-batch (forward, backward), each layer's
//                gradients reduce-scattered after its backward (send buffer f s_l) and the root's
//                once (f s_root); the shards all-reduced over the replicas (sum_u s_u, HYBRID
//                only); the clip norm's per-tensor squares over the FSDP group (one f64 per tensor)
// The replicated engine all-reduces every gradient over the group once per mini-batch; both
// reduce the mini-batch's token count and the loss and metric sums over the group (5 f64).
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "verl/hybridflow/worker.hpp"
#include "verl/model/hf_config.hpp"
#include "verl/model/transformer/transformer.hpp"
#include "verl/parallel/mpi_communicator.hpp"
#include "verl/parallel/process_group.hpp"
#include "verl/trainer/workers/actor_rollout_ref_worker.hpp"

#include "pmpi_tally.hpp"
#include "step_bytes_job.hpp"

namespace {

using namespace verl;
using parallel::MpiCommunicator;

using step_bench::Batch;
using step_bench::g_batch;
using step_bench::g_shape;
using step_bench::Shape;
using Worker = trainer::ActorRolloutRefWorker<step_bench::BenchModels>;

struct Config {
  std::string name;
  int world = 1, fsdp = 1;
};

int g_fsdp = 1, g_world = 1;  ///< the mesh the axis names read

std::string fsdp_axis(const std::vector<int>& members) {
  const auto n = static_cast<int>(members.size());
  if (n == 1) return "self";
  if (n == g_world) return "group";
  bool block = n == g_fsdp, stride = n == g_world / g_fsdp;
  for (int i = 0; i < n; ++i) {
    block = block && members[static_cast<std::size_t>(i)] == members[0] + i;
    stride = stride && members[static_cast<std::size_t>(i)] == members[0] + i * g_fsdp;
  }
  return block ? "fsdp" : stride ? "replicate" : "other";
}

std::vector<std::string> overrides(const Config& c, const Batch& b) {
  return {"data.train_batch_size=" + std::to_string(b.rows),
          "actor_rollout_ref.rollout.n=1",
          "actor_rollout_ref.actor.ppo_mini_batch_size=" + std::to_string(b.rows),
          "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=" + std::to_string(b.micro),
          "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=" + std::to_string(b.micro),
          "actor_rollout_ref.actor.optim.lr=0.001",
          "actor_rollout_ref.actor.grad_clip=1.0",
          "actor_rollout_ref.actor.use_kl_loss=False",
          "actor_rollout_ref.actor.fsdp_config.fsdp_size=" + std::to_string(c.fsdp)};
}

struct StepResult {
  tally::Table counts;      ///< the last step's tally
  bool steps_agree = true;  ///< every step's training tally equal (deterministic)
  double seconds_per_step = 0;
  double phase_seconds[3] = {0, 0, 0};  ///< per step: generate, log_prob, update
  std::int64_t param_bytes_at_rest = 0;
};

/// `steps` steps of generate_sequences, compute_log_prob and update_actor on every rank of the
/// world (the job); the tally of the last step (tallies on when `count`).
StepResult run_job(MpiCommunicator& world, const Config& c, int steps, bool count) {
  g_world = c.world;
  g_fsdp = c.fsdp;
  MpiCommunicator job = world.split(0, world.rank());
  parallel::ProcessGroup group = parallel::ProcessGroup::borrowing(job);
  hybridflow::WorkerContext context;
  context.rank = job.rank();
  context.world_size = job.size();
  context.global_rank = world.rank();
  context.group = &job;
  context.process_group = &group;
  Worker worker(context);
  worker.init_model(overrides(c, g_batch), steps);
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
    (void)worker.generate_sequences(step_bench::generation_prompts(g_batch, context.rank, c.world));
    lap(0);
    data::DataProto batch = step_bench::training_rows(g_batch, context.rank, c.world, s);
    tally::phase = "log_prob";
    const data::DataProto old = worker.compute_log_prob(batch);
    batch.set(std::string(trainer::keys::old_log_probs), trainer::float_column(old, trainer::keys::old_log_probs));
    lap(1);
    tally::phase = "update";
    const data::DataProto updated = worker.update_actor(batch);
    result.param_bytes_at_rest = updated.meta_info().at("metrics").at("perf/actor_param_bytes_at_rest").get<std::int64_t>();
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

/// FSDP's units: the root's floats (embedding, untied head, final norm) and one decoder layer's
/// (q, k, v, o, gate, up, down, two norms), and the tensor counts.
struct Units {
  std::int64_t root = 0, layer = 0, layers = 0, tensors = 0;
};
Units units_of(const Shape& m) {
  const std::int64_t h = m.hidden, head_dim = h / m.heads, kv = m.kv_heads * head_dim;
  return {2 * m.vocab * h + h, 2 * h * h + 2 * h * kv + 3 * h * m.intermediate + 2 * h, m.layers, 3 + 9 * m.layers};
}

/// Floats rank r of an FSDP group of f holds of a unit of n (its shard, the padding excluded).
std::int64_t owned(std::int64_t n, std::int64_t f, std::int64_t r) {
  const std::int64_t s = (n + f - 1) / f;
  return std::clamp<std::int64_t>(n - r * s, 0, s);
}

/// One step's tally on `rank` from the shapes (see the file's comment).
tally::Table formula(const Shape& m, const Batch& b, const Config& c, int rank) {
  using tally::Kind;
  const Units u = units_of(m);
  const std::int64_t f = c.fsdp, r = rank % f, mine = b.rows / c.world;
  const std::int64_t micro_batches = (mine + b.micro - 1) / b.micro;
  tally::Table t;
  const auto put = [&](const char* phase, Kind kind, const char* axis, int ranks, int element, std::int64_t elements) {
    if (elements > 0) t[tally::Key{phase, kind, axis, ranks, element}] += elements * element;
  };
  const int fs = static_cast<int>(f), replicas = c.world / fs;
  const char* fsdp_axis_name = fs == c.world ? "group" : "fsdp";
  if (f > 1) {
    const std::int64_t root_in = u.root - owned(u.root, f, r), layer_in = u.layer - owned(u.layer, f, r);
    const auto shard = [&](std::int64_t n) { return (n + f - 1) / f; };
    put("generate", Kind::all_gather, fsdp_axis_name, fs, 4, root_in + u.layers * layer_in);
    put("log_prob", Kind::all_gather, fsdp_axis_name, fs, 4, root_in + micro_batches * u.layers * layer_in);
    put("update", Kind::all_gather, fsdp_axis_name, fs, 4, root_in + 2 * micro_batches * u.layers * layer_in);
    put("update", Kind::reduce_scatter, fsdp_axis_name, fs, 4, f * (shard(u.root) + micro_batches * u.layers * shard(u.layer)));
    if (replicas > 1) put("update", Kind::all_reduce, "replicate", replicas, 4, shard(u.root) + u.layers * shard(u.layer));
    put("update", Kind::all_reduce, fsdp_axis_name, fs, 8, u.tensors);
  } else if (c.world > 1) {
    put("update", Kind::all_reduce, "group", c.world, 4, u.root + u.layers * u.layer);
  }
  // The mini-batch's token count and the loss and metric sums over the group: 5 f64 (counted once
  // on the small model; independent of the model's shape).
  if (c.world > 1) put("update", Kind::all_reduce, "group", c.world, 8, 5);
  return t;
}

// ---- the tables --------------------------------------------------------------------------------

constexpr const char* row_names[] = {
    "all-gather, parameters: generation (whole model)", "all-gather, parameters: log-probs (per layer)",
    "all-gather, parameters: update (per layer, fwd + bwd)", "reduce-scatter, gradients (FSDP group)",
    "all-reduce, gradient shards (replicas)",           "all-reduce, gradients (replicated engine)",
    "other scalars (norm squares, token count, metrics)",
};
constexpr std::size_t row_count = std::size(row_names);

int row_of(const tally::Key& k) {
  using tally::Kind;
  if (k.kind == Kind::all_gather) return k.phase == "generate" ? 0 : k.phase == "log_prob" ? 1 : 2;
  if (k.kind == Kind::reduce_scatter) return 3;
  if (k.kind == Kind::all_reduce && k.element == 4) return k.axis == "replicate" ? 4 : 5;
  return 6;
}

std::vector<double> rows_of(const tally::Table& t) {
  std::vector<double> rows(row_count + 1, 0.0);
  for (const auto& [k, v] : t) {
    rows[static_cast<std::size_t>(row_of(k))] += tally::moved(k, v);
    rows[row_count] += tally::moved(k, v);
  }
  return rows;
}

void print_table(const std::vector<Config>& configs, const std::vector<std::vector<double>>& columns) {
  std::vector<std::string> names;
  for (const Config& c : configs) names.push_back(c.name);
  step_bench::print_byte_table(names, std::vector<std::string_view>(std::begin(row_names), std::end(row_names)), columns);
}

std::string describe(const tally::Key& k) {
  return fmt::format("{} {} {} n={} e={}", k.phase, tally::kind_names[static_cast<int>(k.kind)], k.axis, k.ranks, k.element);
}

}  // namespace

int main(int argc, char** argv) {
  verl::parallel::MpiEnvironment environment(argc, argv);
  tally::axis_namer = fsdp_axis;
  MpiCommunicator world = MpiCommunicator::world();
  const bool timing = argc > 1 && std::strcmp(argv[1], "--time") == 0;
  const int n = world.size();
  if (timing) {
    // Step time: a medium model, the tally off (the wrappers only forward).
    g_shape = Shape{256, 704, 4, 8, 8, 2048};
    g_batch = Batch{8, 32, 32, 2};
    const std::vector<Config> configs = {{"np 1", 1, 1}, {"replicated (fsdp 1)", 2, 1}, {"FULL_SHARD (fsdp 2)", 2, 2}};
    if (world.rank() == 0)
      fmt::print("| mesh (np {}) | s per step | generate | compute_log_prob | update_actor | parameter bytes at rest per rank |\n"
                 "| --- | ---: | ---: | ---: | ---: | ---: |\n",
                 n);
    for (const Config& c : configs) {
      if (c.world != n) continue;
      const StepResult r = run_job(world, c, 6, false);  // 1 warm-up step, the mean of 5
      if (world.rank() == 0)
        fmt::print("| {} | {:.3f} | {:.3f} | {:.3f} | {:.3f} | {} |\n", c.name, r.seconds_per_step, r.phase_seconds[0],
                   r.phase_seconds[1], r.phase_seconds[2], r.param_bytes_at_rest);
    }
    return 0;
  }
  const std::vector<Config> configs = {{"replicated (fsdp 1)", 2, 1}, {"FULL_SHARD (fsdp 2)", 2, 2},
                                       {"replicated (fsdp 1)", 4, 1}, {"HYBRID_SHARD (fsdp 2 x 2)", 4, 2},
                                       {"FULL_SHARD (fsdp 4)", 4, 4}};
  std::vector<Config> ran;
  std::vector<std::vector<double>> counted, big_formula;
  const Shape small = g_shape, llama7b{4096, 11008, 32, 32, 32, 32000};
  const Batch big_batch{128, 1024, 1024, 2};  // per job: 128 sequences of 1024 + 1024 tokens, micro-batch 2
  bool all_agree = true;
  for (const Config& c : configs) {
    if (c.world != n) continue;
    const StepResult r = run_job(world, c, 2, true);
    const tally::Table expected = formula(small, g_batch, c, world.rank());
    int mismatch = r.counts != expected || !r.steps_agree ? 1 : 0;
    if (mismatch) {
      std::string diff;
      for (const auto& [k, v] : r.counts)
        if (!expected.contains(k) || expected.at(k) != v)
          diff += fmt::format(" [{}: counted {} formula {}]", describe(k), v, expected.contains(k) ? expected.at(k) : 0);
      for (const auto& [k, v] : expected)
        if (!r.counts.contains(k)) diff += fmt::format(" [{}: counted 0 formula {}]", describe(k), v);
      fmt::print(stderr, "{} (np {}) rank {}: the formulas differ from the count:{}\n", c.name, c.world, world.rank(), diff);
    }
    world.all_reduce(std::span<int>(&mismatch, 1), parallel::ReduceOp::max);
    all_agree = all_agree && mismatch == 0;
    auto rows = rows_of(r.counts), big = rows_of(formula(llama7b, big_batch, c, world.rank()));
    world.all_reduce(std::span<double>(rows), parallel::ReduceOp::max);
    world.all_reduce(std::span<double>(big), parallel::ReduceOp::max);
    ran.push_back(c);
    counted.push_back(std::move(rows));
    big_formula.push_back(std::move(big));
  }
  if (world.rank() == 0) {
    fmt::print("\n### Counted (PMPI), small model: hidden {}, intermediate {}, {} layers, {} heads, vocab {}; {} rows of {} + {} "
               "tokens per job, micro-batch {}; np {}\n\n",
               small.hidden, small.intermediate, small.layers, small.heads, small.vocab, g_batch.rows, g_batch.prompt,
               g_batch.response, g_batch.micro, n);
    print_table(ran, counted);
    fmt::print("\nFormulas equal the counts, key for key on every rank: {}\n", all_agree ? "yes" : "NO");
    fmt::print("\n### Formulas, Llama-2-7B shape (hidden 4096, intermediate 11008, 32 layers, 32 heads, vocab 32000, untied; "
               "fp32); {} rows of {} + {} tokens per job, micro-batch {}; np {}\n\n",
               big_batch.rows, big_batch.prompt, big_batch.response, big_batch.micro, n);
    print_table(ran, big_formula);
  }
  return all_agree ? 0 : 1;
}
