// Module header: the core layer — configuration macros, errors and argument checks, tensors and
// views, static/dynamic integers and layouts, thread counts, metrics, file I/O and paths.
#pragma once

#include "verl/config.hpp"
#include "verl/core/error.hpp"
#include "verl/core/tensor.hpp"
#include "verl/core/threads.hpp"
#include "verl/core/metrics.hpp"
#include "verl/core/int_tuple.hpp"
#include "verl/core/layout.hpp"
#include "verl/core/half_float.hpp"
#include "verl/core/file_io.hpp"
#include "verl/core/paths.hpp"
