// verl-cpp umbrella header: every host-only module, lowest layer first (CONTRIBUTING.md gives the
// order). Eigen and fmt are required; the modules that need an optional library are included when
// it is present: nlohmann-json (testing, model, rollout, data, trainer), PCRE2 (tokenizer, the SFT
// trainer, the built-in tasks), yaml-cpp (YAML configuration files), MPI (the MPI communicator and the HybridFlow runtime).
// CUDA headers (*.cuh) are never included here: include them from translation units built by nvcc.
#pragma once

#include "verl/core.hpp"
#include "verl/cpu.hpp"
#include "verl/algo.hpp"
#include "verl/optim.hpp"
#include "verl/reward.hpp"
#include "verl/parallel.hpp"
#if __has_include(<mpi.h>)
#include "verl/parallel/mpi_communicator.hpp"
#endif
#include "verl/kernels.hpp"
#include "verl/rollout.hpp"

#if __has_include(<nlohmann/json.hpp>)
#include "verl/testing.hpp"
#if __has_include(<pcre2.h>)
#include "verl/tokenizer.hpp"
#endif
#include "verl/model.hpp"
#include "verl/data.hpp"
#include "verl/hybridflow.hpp"
#include "verl/trainer.hpp"
#endif
