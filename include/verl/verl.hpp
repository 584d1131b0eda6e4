// verl-cpp umbrella header: every host-only layer whose dependencies are present.
// Eigen and fmt are required; CUDA headers (*.cuh) and the MPI communicator are never included
// here (include them from translation units built by nvcc / linked with MPI).
#pragma once

#include "verl/config.hpp"
#include "verl/core/error.hpp"
#include "verl/core/tensor.hpp"
#include "verl/core/metrics.hpp"

#include "verl/algo.hpp"
#include "verl/parallel.hpp"
#include "verl/reward.hpp"
