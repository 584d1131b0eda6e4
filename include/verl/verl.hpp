// verl-cpp umbrella header: every host-only header, in dependency order.
// CUDA headers (*.cuh) are not included; include them from translation units built by nvcc.
#pragma once

#include "verl/config.hpp"
#include "verl/core/error.hpp"
#include "verl/core/tensor.hpp"
#include "verl/core/metrics.hpp"

#include "verl/algo/masked_stats.hpp"
#include "verl/algo/loss_aggregation.hpp"
