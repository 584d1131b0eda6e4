// The 3D-HybridEngine with a TP-sharded generation layout (tp -> tg, tg > 1 dividing tp): the
// training shards of tiny-qwen2 are grown in place into generation shards by all-gathers inside
// the plan's micro-DP groups (parallel::ReshardPlan<HybridFlow>), generation decodes with the KV
// cache over the tg ranks of each generation group, and the weights go back to the training
// layout. Checked, for every (t, tg) the world allows among (2, 2) and (4, 2):
//   - the generated tokens equal the dense model's for the same seeds (the logits rows are
//     gathered for sampling), the rollout log-probs within float rounding;
//   - the bytes each rank received (counted by the micro-DP communicator) and its peak parameter
//     bytes (counted at every buffer change) against the plan's comm_bytes_per_rank and
//     peak_param_bytes_per_rank: equal up to the replicated tensors' share (norms and row-parallel
//     biases are not gathered and are held whole), and the KV heads' share where the training TP
//     copies them (their training block already is the generation block); zero redundancy (the
//     peak is the generation shard: the training shard lives inside it);
//   - the training shards come back bit for bit;
//   - a wrong shard assignment fails: blocks rotated inside the gather change the rollout; micro-DP
//     ranks not ordered as the plan says are refused.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "verl/model/checkpoint.hpp"
#include "verl/model/transformer/tensor_parallel_transformer.hpp"
#include "verl/parallel/counting_communicator.hpp"
#include "verl/parallel/mesh.hpp"
#include "verl/parallel/mpi_communicator.hpp"
#include "verl/parallel/reshard_plan.hpp"
#include "verl/rollout/kv_cache_rollout.hpp"

using namespace verl;
using namespace verl::model;
using Comm = verl::parallel::CountingCommunicator<verl::parallel::MpiCommunicator>;
using verl::parallel::MpiCommunicator;

namespace {

const std::filesystem::path models_dir = std::filesystem::path(VERL_GOLDEN_DIR) / ".." / "models";

struct Layouts {
  int t, tg;
};

/// The (t, tg) pairs this world runs.
std::vector<Layouts> layouts(int world) {
  std::vector<Layouts> out;
  for (const Layouts l : {Layouts{2, 2}, Layouts{4, 2}})
    if (world % l.t == 0) out.push_back(l);
  return out;
}

template <class M>
std::int64_t parameter_bytes(M& model) {
  std::int64_t bytes = 0;
  model.for_each_parameter([&](const auto& p) { bytes += static_cast<std::int64_t>(p.value.size_bytes()); });
  return bytes;
}

template <class M>
std::map<std::string, std::vector<float>> values_of(M& model) {
  std::map<std::string, std::vector<float>> out;
  model.for_each_parameter([&](const auto& p) { out[std::string(p.name)].assign(p.value.begin(), p.value.end()); });
  return out;
}

/// Prompts 0..7 of a fixed set; generation group d of dg takes prompts d, d + dg, ...
rollout::PromptBatch prompts_of(int group, int groups) {
  std::vector<std::vector<TokenId>> all = {{1, 5, 9},     {13, 200, 7, 3}, {42},          {100, 101, 102},
                                           {7, 7, 7, 7},  {900, 3},        {55, 66, 77},  {1000, 1, 2, 3, 4}};
  std::vector<std::vector<TokenId>> mine;
  std::vector<std::uint64_t> seeds;
  for (std::size_t i = static_cast<std::size_t>(group); i < all.size(); i += static_cast<std::size_t>(groups)) {
    mine.push_back(all[i]);
    seeds.push_back(1234 + i);
  }
  rollout::PromptBatch batch = rollout::PromptBatch::left_padded(mine, 0);
  batch.seeds = seeds;
  return batch;
}

rollout::SamplingParams sampling() {
  rollout::SamplingParams params;
  params.temperature = 1.0f;
  params.n = 2;
  params.max_response_length = 8;
  params.seed = 5;
  return params;
}

/// One (t, tg) layout over the world: the training model, the plan and the generation groups.
struct LayoutSetup {
  parallel::ReshardPlan<parallel::HybridFlow> plan;
  Transformer dense;
  TensorParallelTransformer<Comm> training;
  Comm micro_dp;
  Comm generation_tp;
  int gen_dp = 0, gen_dp_size = 1;

  static LayoutSetup make(MpiCommunicator& world, Layouts l, bool plan_order = true) {
    const int n = world.size(), r = world.rank();
    // Megatron's rank order: tp fastest, then dp.
    const auto train = parallel::Mesh<parallel::TP<>, parallel::DP<>, parallel::PP<>>(l.t, n / l.t, 1);
    const auto gen = parallel::Mesh<parallel::TP<>, parallel::DP<>, parallel::PP<>>(l.tg, n / l.tg, 1);
    const auto plan = parallel::make_reshard_plan(train, gen);
    Transformer dense = load_transformer(models_dir / "tiny-qwen2", {.num_threads = 1});
    TensorParallelTransformer<Comm> training(dense, Comm(world.split(r / l.t, r % l.t)));
    // The plan's groups: the micro-DP group (ordered by its position in it) and the generation
    // TP group (same generation dp, ordered by generation tp).
    const auto micro = plan.micro_dp_group(r);
    const int position = static_cast<int>(*micro.index_of(r));
    const int key = plan_order ? position : static_cast<int>(micro.size()) - 1 - position;
    Comm micro_dp(world.split(static_cast<int>(plan.gather_group_index(r)), key));
    const parallel::ParallelCoords g = plan.generation_coords(r);
    Comm generation_tp(world.split(static_cast<int>(g.dp), static_cast<int>(g.tp)));
    return LayoutSetup{plan,          std::move(dense), std::move(training), std::move(micro_dp), std::move(generation_tp),
                 static_cast<int>(g.dp), static_cast<int>(n / l.tg)};
  }
};

TEST(GenerationReshard, TokensBytesAndPeakAgainstThePlan) {
  MpiCommunicator world = MpiCommunicator::world();
  if (layouts(world.size()).empty() || world.size() < 2) GTEST_SKIP() << "needs 2 or 4 ranks";
  for (const Layouts l : layouts(world.size())) {
    SCOPED_TRACE(::testing::Message() << "t=" << l.t << " tg=" << l.tg << " on " << world.size() << " ranks");
    LayoutSetup s = LayoutSetup::make(world, l);
    const auto before = values_of(s.training);
    const std::int64_t model_bytes = parameter_bytes(s.dense);

    ParameterMemoryMeter meter;
    s.micro_dp.reset_counts();
    TensorParallelTransformer<Comm> generation = s.training.lend_to_generation(s.micro_dp, std::move(s.generation_tp), meter);
    const std::int64_t received = s.micro_dp.received_bytes();
    EXPECT_TRUE(s.training.lent());
    EXPECT_EQ(generation.tp_size(), l.tg);

    // Generation: this group's prompts, against the dense model on the same prompts and seeds.
    const rollout::PromptBatch batch = prompts_of(s.gen_dp, s.gen_dp_size);
    const rollout::RolloutOutput sharded = rollout::KvCacheRollout(generation).generate(batch, sampling());
    const rollout::RolloutOutput reference = rollout::KvCacheRollout(s.dense).generate(batch, sampling());
    EXPECT_EQ(sharded.responses, reference.responses);
    EXPECT_TRUE(sharded.rollout_log_probs.isApprox(reference.rollout_log_probs, 1e-4f))
        << sharded.rollout_log_probs << "\nvs\n" << reference.rollout_log_probs;

    // The plan for the same meshes.
    const parallel::ReshardBytes figures = s.plan.cost(world.rank()).bytes(model_bytes);
    EXPECT_EQ(figures.redundant_bytes_per_rank, 0);
    // Replicated tensors (held whole, not gathered) and KV tensors the training TP copies.
    std::int64_t replicated = 0, kv_copied = 0;
    const TensorParallelPartition& partition = s.training.partition();
    s.dense.for_each_parameter([&](const auto& p) {
      const auto bytes = static_cast<std::int64_t>(p.value.size_bytes());
      if (partition.shard(p.name, 0).replicated()) replicated += bytes;
      else if (partition.kv_replicas > 1 && (p.name.find("k_proj") != std::string_view::npos ||
                                             p.name.find("v_proj") != std::string_view::npos))
        kv_copied += bytes;
    });
    // tiny-qwen2: 2 layers x 2 RMSNorms x 32 + the final norm = 160 floats replicated.
    EXPECT_EQ(replicated, 160 * 4);
    // Received: the plan's (1/tg - 1/t) M less that fraction of the tensors not gathered.
    const std::int64_t not_gathered = replicated + kv_copied;
    EXPECT_EQ(received, figures.comm_bytes_per_rank - not_gathered * (l.t - l.tg) / (l.t * l.tg))
        << "plan comm " << figures.comm_bytes_per_rank << ", M " << model_bytes;
    // Peak: the generation shard M/tg, plus (1 - 1/tg) of the replicated tensors held whole
    // (the copied KV heads' generation block is exactly 1/tg of them here: kv heads = tg).
    const std::int64_t generation_bytes = parameter_bytes(generation);
    EXPECT_EQ(meter.peak(), generation_bytes) << "redundancy: the peak must be the generation shard alone";
    EXPECT_EQ(meter.peak(), figures.peak_param_bytes_per_rank + replicated * (l.tg - 1) / l.tg)
        << "plan peak " << figures.peak_param_bytes_per_rank;
    RecordProperty("t" + std::to_string(l.t) + "_tg" + std::to_string(l.tg) + "_received", std::to_string(received));
    RecordProperty("t" + std::to_string(l.t) + "_tg" + std::to_string(l.tg) + "_plan_comm",
                   std::to_string(figures.comm_bytes_per_rank));
    RecordProperty("t" + std::to_string(l.t) + "_tg" + std::to_string(l.tg) + "_peak", std::to_string(meter.peak()));
    RecordProperty("t" + std::to_string(l.t) + "_tg" + std::to_string(l.tg) + "_plan_peak",
                   std::to_string(figures.peak_param_bytes_per_rank));
    if (world.rank() == 0) {
      std::printf("t=%d tg=%d np=%d: received %lld (plan %lld), peak %lld (plan %lld), M %lld, replicated %lld, "
                  "kv copied %lld\n",
                  l.t, l.tg, world.size(), static_cast<long long>(received),
                  static_cast<long long>(figures.comm_bytes_per_rank), static_cast<long long>(meter.peak()),
                  static_cast<long long>(figures.peak_param_bytes_per_rank), static_cast<long long>(model_bytes),
                  static_cast<long long>(replicated), static_cast<long long>(kv_copied));
    }

    // Back to the training layout, bit for bit, holding what it held.
    s.training.take_back_from_generation(generation, meter);
    EXPECT_FALSE(s.training.lent());
    EXPECT_EQ(values_of(s.training), before);
    EXPECT_EQ(meter.current(), parameter_bytes(s.training));
    EXPECT_TRUE(generation.lent());  // the generation copy holds nothing any more
  }
}

TEST(GenerationReshard, AWrongShardAssignmentFails) {
  MpiCommunicator world = MpiCommunicator::world();
  if (world.size() % 4 != 0) GTEST_SKIP() << "needs 4 ranks (t=4 -> tg=2 gathers pairs of blocks)";
  const Layouts l{4, 2};
  {
    // Blocks rotated inside the gather: another model, another rollout.
    LayoutSetup s = LayoutSetup::make(world, l);
    ParameterMemoryMeter meter;
    TensorParallelTransformer<Comm> wrong =
        s.training.lend_to_generation(s.micro_dp, std::move(s.generation_tp), meter, /*misplace_blocks=*/1);
    const rollout::PromptBatch batch = prompts_of(s.gen_dp, s.gen_dp_size);
    const rollout::RolloutOutput sharded = rollout::KvCacheRollout(wrong).generate(batch, sampling());
    const rollout::RolloutOutput reference = rollout::KvCacheRollout(s.dense).generate(batch, sampling());
    EXPECT_FALSE(sharded.rollout_log_probs.isApprox(reference.rollout_log_probs, 1e-3f));
    s.training.take_back_from_generation(wrong, meter);
  }
  {
    // Micro-DP ranks in the reverse of the plan's order: refused before anything moves.
    LayoutSetup s = LayoutSetup::make(world, l, /*plan_order=*/false);
    ParameterMemoryMeter meter;
    EXPECT_THROW((void)s.training.lend_to_generation(s.micro_dp, std::move(s.generation_tp), meter), InvalidArgument);
    EXPECT_FALSE(s.training.lent());
  }
}

}  // namespace
