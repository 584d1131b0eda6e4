// Module header: meshes, process groups, the 3D-HybridEngine reshard plan, the placement search
// (HybridFlow's auto-mapping) and its cost model, the single-process
// communicator and the DP/TP/SP/PP primitives, sequence-length balancing. The MPI communicator
// (verl/parallel/mpi_communicator.hpp, needs mpi.h) and the NCCL one (*.cuh, needs nvcc) are
// included separately.
#pragma once

#include "verl/core/int_tuple.hpp"
#include "verl/core/layout.hpp"
#include "verl/parallel/axis.hpp"
#include "verl/parallel/axis_sizes.hpp"
#include "verl/parallel/mesh.hpp"
#include "verl/parallel/rank_group.hpp"
#include "verl/parallel/fraction.hpp"
#include "verl/parallel/param_shard.hpp"
#include "verl/parallel/reshard_strategy.hpp"
#include "verl/parallel/reshard_plan.hpp"
#include "verl/parallel/reshard_report.hpp"
#include "verl/parallel/placement_cost_model.hpp"
#include "verl/parallel/placement_search.hpp"
#include "verl/parallel/placement_report.hpp"
#include "verl/parallel/communicator.hpp"
#include "verl/parallel/process_group.hpp"
#include "verl/parallel/self_communicator.hpp"
#include "verl/parallel/resharder.hpp"
#include "verl/parallel/bucketed_all_reduce.hpp"
#include "verl/parallel/elementwise_optimizer.hpp"
#include "verl/parallel/distributed_optimizer.hpp"
#include "verl/parallel/zero_optimizer.hpp"
#include "verl/parallel/tensor_parallel.hpp"
#include "verl/parallel/vocab_parallel.hpp"
#include "verl/parallel/ulysses.hpp"
#include "verl/parallel/pipeline_schedule.hpp"
#include "verl/parallel/pipeline_executor.hpp"
#include "verl/parallel/seqlen_balancing.hpp"
