// How many threads verl-cpp's parallel code uses by default: the CPUs this process may run on
// (its affinity mask, so `taskset -c 0` or a container's CPU set means one thread rather than one
// per core of the host), unless the environment says otherwise.
#pragma once

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <optional>
#include <thread>

#if defined(__linux__)
#include <sched.h>
#endif

#include "verl/core/error.hpp"

namespace verl {

/// CPUs this process may run on: its affinity mask where the platform has one (Linux), else
/// std::thread::hardware_concurrency(); at least 1.
inline unsigned available_cpus() {
#if defined(__linux__)
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    const int count = CPU_COUNT(&set);
    if (count > 0) return static_cast<unsigned>(count);
  }
#endif
  return std::max(1u, std::thread::hardware_concurrency());
}

/// A thread count from the environment variable `name`: nullopt when unset or empty; a positive
/// integer otherwise, or std::invalid_argument naming the variable and its value.
inline std::optional<unsigned> thread_count_from_environment(const char* name) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const long value = std::strtol(text, &end, 10);
  VERL_CHECK_ARG(end != text && *end == '\0' && errno == 0 && value > 0 && value <= 4096,
                 "{}: expected a positive thread count (at most 4096), got '{}'", name, text);
  return static_cast<unsigned>(value);
}

/// Threads for the model's pool and the logits kernels when the caller asks for 0 (automatic):
/// VERL_NUM_THREADS when set, else available_cpus().
inline unsigned default_thread_count() {
  return thread_count_from_environment("VERL_NUM_THREADS").value_or(available_cpus());
}

}  // namespace verl
