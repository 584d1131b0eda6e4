// One Megatron job of tp x dp x pp ranks cut from the world (Megatron's order: tp fastest, then
// dp, then pp), for the MPI tests of the Megatron actor worker (test_megatron_distributed_optimizer,
// test_megatron_mesh_types, test_megatron_pipeline).
#pragma once

#include <optional>

#include "verl/hybridflow/dispatch.hpp"
#include "verl/hybridflow/worker.hpp"
#include "verl/parallel/mpi_communicator.hpp"

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

}  // namespace verl::test_support
