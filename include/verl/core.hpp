// Module header: the core layer — configuration macros, errors and argument checks, tensors and
// views, static/dynamic integers and layouts, thread counts, metrics, type lists and enum names,
// file I/O, paths and UTF-8.
#pragma once

#include "verl/config.hpp"
#include "verl/core/error.hpp"
#include "verl/core/tensor.hpp"
#include "verl/core/finite.hpp"
#include "verl/core/threads.hpp"
#include "verl/core/metrics.hpp"
#include "verl/core/type_list.hpp"
#include "verl/core/enum_names.hpp"
#include "verl/core/int_tuple.hpp"
#include "verl/core/layout.hpp"
#include "verl/core/half_float.hpp"
#include "verl/core/file_io.hpp"
#include "verl/core/paths.hpp"
#include "verl/core/utf8.hpp"
#include "verl/core/markup.hpp"
