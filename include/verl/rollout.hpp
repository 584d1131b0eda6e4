// Module header: rollout — next-token sampling, the RolloutEngine concept and the reference
// batched KV-cache engine.
#pragma once

#include "verl/rollout/rollout.hpp"
