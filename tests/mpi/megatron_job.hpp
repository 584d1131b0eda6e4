// One Megatron job of tp x dp x pp ranks cut from the world (Megatron's order: tp fastest, then
// dp, then pp), for the MPI tests of the Megatron workers (test_megatron_distributed_optimizer,
// test_megatron_mesh_types, test_megatron_pipeline, test_megatron_critic), and a checkpoint state
// shared from a group's first rank (those and test_fsdp_sharding).
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "verl/core/tensor.hpp"
#include "verl/data/data_proto.hpp"
#include "verl/hybridflow/dispatch.hpp"
#include "verl/hybridflow/wire.hpp"
#include "verl/hybridflow/worker.hpp"
#include "verl/parallel/mpi_communicator.hpp"
#include "verl/trainer/workers/batch_keys.hpp"
#include "verl/trainer/workers/role_state.hpp"

namespace verl::test_support {

/// One job of tp x dp x pp ranks of the world (none for the ranks past the last whole job).
struct MegatronJob {
  std::optional<parallel::MpiCommunicator> group;
  hybridflow::WorkerContext context;
  int tp = 1, dp = 1, pp = 1;
};

/// Collective over the world: fills `job` on the ranks of a whole job.
inline void make_job(parallel::MpiCommunicator& world, int tp, int dp, MegatronJob& job, int pp = 1) {
  const int size = tp * dp * pp, jobs = world.size() / size;
  const bool member = world.rank() < jobs * size;
  job.group.emplace(world.split(member ? world.rank() / size : jobs, world.rank() % size));
  if (!member) return;
  job.tp = tp;
  job.dp = dp;
  job.pp = pp;
  job.context.rank = job.group->rank();
  job.context.world_size = job.group->size();
  job.context.global_rank = world.rank();
  job.context.group = &*job.group;
  job.context.mesh = hybridflow::GroupMesh(tp, dp, pp);
}

/// The prompts of DP group `dp_rank` of `dp` (its share of `rows`, each `prompt` tokens), with
/// sampling parameters for `response` new tokens and one seed per row: what the Megatron worker
/// tests feed generate_sequences.
inline data::DataProto megatron_prompts(int dp_rank, int dp, Index rows, Index prompt, Index response) {
  const Index mine = rows / dp, first = dp_rank * mine;
  MatrixI64 input_ids(mine, prompt);
  for (Index r = 0; r < mine; ++r)
    for (Index c = 0; c < prompt; ++c) input_ids(r, c) = ((first + r) * 5 + c) % 40 + 3;
  data::DataProto batch;
  batch.set(std::string(trainer::keys::input_ids), input_ids);
  batch.set(std::string(trainer::keys::attention_mask), MatrixF(MatrixF::Ones(mine, prompt)));
  rollout::SamplingParams params;
  params.temperature = 1.0f;
  params.n = 1;
  params.max_response_length = response;
  params.eos_token_ids = {1};
  params.pad_token_id = 0;
  params.seed = 9;
  batch.meta_info()["sampling_params"] = trainer::sampling_params_to_json(params);
  std::vector<std::int64_t> seeds;
  for (Index r = 0; r < mine; ++r) seeds.push_back(100 + first + r);
  batch.set_non_tensor(std::string(trainer::keys::seed), std::move(seeds));
  return batch;
}

/// Shares a RoleState from the group's first rank (where checkpoint_state leaves it) with every
/// rank of the group (collective).
inline trainer::RoleState broadcast_state(parallel::MpiCommunicator& group, const trainer::RoleState& state) {
  hybridflow::WireWriter writer;
  if (group.rank() == 0) hybridflow::write(writer, state);
  hybridflow::Bytes bytes = writer.take();
  std::int64_t size = static_cast<std::int64_t>(bytes.size());
  group.broadcast(std::span<std::int64_t>(&size, 1), 0);
  std::vector<std::int32_t> words(static_cast<std::size_t>((size + 3) / 4), 0);
  if (group.rank() == 0) std::memcpy(words.data(), bytes.data(), bytes.size());
  group.broadcast(std::span<std::int32_t>(words), 0);
  hybridflow::WireReader reader(std::span<const std::byte>(reinterpret_cast<const std::byte*>(words.data()),
                                                           static_cast<std::size_t>(size)));
  return hybridflow::read<trainer::RoleState>(reader);
}

}  // namespace verl::test_support
