// The 3D-HybridEngine's reshard as the Megatron actor worker executes it (TP shards -> dense
// generation copy, tg = 1), measured by the counting communicator and checked against
// parallel::ReshardPlan<HybridFlow> for the same meshes (tp = 2 when the world allows, dp = the
// rest): the bytes each rank received equal the plan's comm_bytes_per_rank less (t-1)/t of the
// replicated tensors (RMSNorm weights, which are not gathered); the dense copy equals the model
// the shards were cut from, bit for bit; and a deliberately wrong shard assignment (rank r's block
// written where rank r+1's belongs) gives another model, whose log-probs differ.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <vector>

#include "verl/model/checkpoint.hpp"
#include "verl/model/transformer/tensor_parallel_transformer.hpp"
#include "verl/parallel/counting_communicator.hpp"
#include "verl/parallel/mesh.hpp"
#include "verl/parallel/mpi_communicator.hpp"
#include "verl/parallel/reshard_plan.hpp"

using namespace verl;
using namespace verl::model;
using verl::parallel::CountingCommunicator;
using verl::parallel::MpiCommunicator;

namespace {

const std::filesystem::path models_dir = std::filesystem::path(VERL_GOLDEN_DIR) / ".." / "models";

int train_tp(int world) { return world % 2 == 0 ? 2 : 1; }

template <class M>
std::int64_t parameter_bytes(M& model) {
  std::int64_t bytes = 0;
  model.for_each_parameter([&](const auto& p) { bytes += static_cast<std::int64_t>(p.value.size_bytes()); });
  return bytes;
}

TEST(MegatronReshard, MeasuredBytesEqualThePlanLessTheReplicatedShare) {
  MpiCommunicator world = MpiCommunicator::world();
  const int n = world.size(), t = train_tp(n);
  Transformer dense = load_transformer(models_dir / "tiny-qwen2", {.num_threads = 1});
  // Megatron's rank order: tp fastest, then dp.
  TensorParallelTransformer<CountingCommunicator<MpiCommunicator>> shard(
      dense, CountingCommunicator<MpiCommunicator>(world.split(world.rank() / t, world.rank() % t)));

  shard.communicator().reset_counts();
  Transformer copy = shard.gather_dense();
  const std::int64_t received = shard.communicator().received_bytes();

  // The copy is the model the shards were cut from.
  std::map<std::string, std::vector<float>> original;
  dense.for_each_parameter([&](const auto& p) { original[std::string(p.name)].assign(p.value.begin(), p.value.end()); });
  copy.for_each_parameter([&](const auto& p) {
    EXPECT_EQ(original.at(std::string(p.name)), std::vector<float>(p.value.begin(), p.value.end())) << p.name;
  });

  // The plan for the same meshes: training (tp=t, dp=n/t, pp=1) -> generation (tp=1, dp=n).
  const auto train = parallel::Mesh<parallel::TP<>, parallel::DP<>, parallel::PP<>>(t, n / t, 1);
  const auto gen = parallel::Mesh<parallel::TP<>, parallel::DP<>, parallel::PP<>>(1, n, 1);
  const auto plan = parallel::make_reshard_plan(train, gen);
  const std::int64_t model_bytes = parameter_bytes(dense);
  const parallel::ReshardBytes figures = plan.cost(world.rank()).bytes(model_bytes);
  std::int64_t replicated = 0;
  shard.for_each_parameter([&](const auto& p) {
    if (shard.shard_of(p.name).replicated()) replicated += static_cast<std::int64_t>(p.value.size_bytes());
  });
  // tiny-qwen2: 2 layers x 2 RMSNorms x 32 + the final norm = 160 floats replicated.
  EXPECT_EQ(replicated, 160 * 4);
  EXPECT_EQ(received, figures.comm_bytes_per_rank - replicated * (t - 1) / t)
      << "plan comm " << figures.comm_bytes_per_rank << ", M " << model_bytes;
  // Peak: HybridFlow holds M (the training shard inside the generation buffer); this reshard
  // keeps the shard beside the dense copy, so the shard is its redundancy.
  EXPECT_EQ(figures.peak_param_bytes_per_rank, model_bytes);
  EXPECT_EQ(figures.redundant_bytes_per_rank, 0);
  EXPECT_EQ(parameter_bytes(copy), model_bytes);
  EXPECT_EQ(parameter_bytes(shard), (model_bytes - replicated) / t + replicated);
  RecordProperty("received_bytes", std::to_string(received));
  RecordProperty("plan_comm_bytes", std::to_string(figures.comm_bytes_per_rank));
}

TEST(MegatronReshard, AWrongShardAssignmentGivesAnotherModel) {
  MpiCommunicator world = MpiCommunicator::world();
  const int n = world.size(), t = train_tp(n);
  if (t == 1) GTEST_SKIP() << "needs two ranks for a TP group";
  Transformer dense = load_transformer(models_dir / "tiny-qwen2", {.num_threads = 1});
  TensorParallelTransformer<CountingCommunicator<MpiCommunicator>> shard(
      dense, CountingCommunicator<MpiCommunicator>(world.split(world.rank() / t, world.rank() % t)));
  Transformer wrong = shard.gather_dense(/*misplace_blocks=*/1);
  std::int64_t differing = 0;
  std::map<std::string, std::vector<float>> original;
  dense.for_each_parameter([&](const auto& p) { original[std::string(p.name)].assign(p.value.begin(), p.value.end()); });
  wrong.for_each_parameter([&](const auto& p) {
    if (original.at(std::string(p.name)) != std::vector<float>(p.value.begin(), p.value.end())) ++differing;
  });
  EXPECT_GT(differing, 0);
  // ... and it computes other log-probs than the right copy.
  MatrixI64 ids(1, 6);
  ids << 1, 5, 9, 13, 200, 7;
  const MatrixF mask = MatrixF::Ones(1, 6);
  const auto batch = TokenBatch::padded(ids, mask);
  const MatrixI64 targets = next_token_targets(batch);
  const ForwardOptions options{.targets = std::span<const std::int64_t>(targets.data(), static_cast<std::size_t>(targets.size()))};
  const auto right_out = dense.forward(batch, options);
  const auto wrong_out = wrong.forward(batch, options);
  EXPECT_NE(right_out.log_probs, wrong_out.log_probs);
}

}  // namespace
