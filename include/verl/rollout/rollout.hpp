// Rollout: sampling, the RolloutEngine concept and the reference KV-cache engine.
#pragma once

#include "verl/rollout/kv_cache_rollout.hpp"
#include "verl/rollout/rollout_engine.hpp"
#include "verl/rollout/sampling.hpp"
