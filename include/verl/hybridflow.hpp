// The HybridFlow runtime (single controller, worker groups, dispatch modes, futures, resource
// pools): wire.hpp and dispatch.hpp need only nlohmann-json; worker.hpp and runtime.hpp need MPI.
#pragma once

#include "verl/hybridflow/dispatch.hpp"
#include "verl/hybridflow/local_runtime.hpp"
#include "verl/hybridflow/placement.hpp"
#include "verl/hybridflow/resource_pool.hpp"
#include "verl/hybridflow/wire.hpp"
#include "verl/hybridflow/worker.hpp"
#if __has_include(<mpi.h>)
#include "verl/hybridflow/runtime.hpp"
#endif
