// verl-cpp umbrella header: every host-only layer whose dependencies are present.
// The tokenizer (PCRE2), YAML configuration files (yaml-cpp) and the model layer are included
// from their own headers.
// Eigen and fmt are required; CUDA headers (*.cuh) and the MPI communicator are never included
// here (include them from translation units built by nvcc / linked with MPI).
#pragma once

#include "verl/config.hpp"
#include "verl/core/error.hpp"
#include "verl/core/tensor.hpp"
#include "verl/core/threads.hpp"
#include "verl/core/metrics.hpp"

#include "verl/algo.hpp"
#include "verl/parallel.hpp"
#include "verl/reward.hpp"

// Layers that read JSON (checkpoints, datasets, configuration) need nlohmann-json.
#if __has_include(<nlohmann/json.hpp>)
#include "verl/data.hpp"
#include "verl/trainer.hpp"
#endif
