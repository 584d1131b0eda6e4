// The MetricsLogger concept: a backend of verl's Tracking (trainer.logger), fed one dictionary
// of metrics per step.
#pragma once

#include <concepts>
#include <cstdint>
#include <string_view>

#include "verl/core/metrics.hpp"

namespace verl::trainer {

/// log(metrics, step) records a step's metrics; finish() flushes and closes (idempotent);
/// `name` is the backend's trainer.logger name ("console", "file", "tensorboard").
template <class L>
concept MetricsLogger = requires(L& logger, const Metrics& metrics, std::int64_t step) {
  { L::name } -> std::convertible_to<std::string_view>;
  logger.log(metrics, step);
  logger.finish();
};

}  // namespace verl::trainer
