// verl's Tracking: the fan-out of a step's metrics to the backends listed in trainer.logger.
// verl-cpp has "console", "file" and "tensorboard"; verl's other backends (wandb, mlflow,
// swanlab, vemlp_wandb, clearml, trackio) are named as such in the error rather than dropped.
// User-defined backends (anything satisfying MetricsLogger) can be added.
#pragma once

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <iostream>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "verl/config.hpp"
#include "verl/core/error.hpp"
#include "verl/core/type_list.hpp"
#include "verl/core/metrics.hpp"
#include "verl/trainer/logging/console_logger.hpp"
#include "verl/trainer/logging/file_logger.hpp"
#include "verl/trainer/logging/metrics_logger.hpp"
#include "verl/trainer/logging/tensorboard_logger.hpp"

namespace verl::trainer {

/// The backends verl-cpp provides, by trainer.logger name: the one list of the family. The names
/// and Tracking's by-name construction derive from it.
using BuiltinLoggers = TypeList<ConsoleLogger, FileLogger, TensorboardLogger>;

inline constexpr auto supported_logger_names = names_of(BuiltinLoggers{});
/// verl's backends that need Python services (or are deprecated aliases of them).
inline constexpr std::array<std::string_view, 7> verl_only_logger_names = {"wandb",   "mlflow",  "swanlab", "vemlp_wandb",
                                                                           "clearml", "trackio", "tracking"};

/// Throws unless `name` is a backend verl-cpp provides.
inline void check_logger_name(std::string_view name) {
  for (const auto supported : supported_logger_names)
    if (supported == name) return;
  for (const auto verl_only : verl_only_logger_names) {
    if (verl_only == name) {
      ::verl::detail::throw_invalid_argument(
          "trainer.logger: '{}' is a verl backend that is not supported by verl-cpp yet (supported: {})", name,
          fmt::join(supported_logger_names, ", "));
    }
  }
  ::verl::detail::throw_invalid_argument("trainer.logger: expected one of {}, got '{}'",
                                         fmt::join(supported_logger_names, ", "), name);
}

class Tracking {
 public:
  Tracking() = default;

  /// Opens every backend in `backends` (trainer.logger) for the project and experiment.
  Tracking(std::string_view project_name, std::string_view experiment_name, std::span<const std::string> backends,
           const TrackingOptions& options = {}) {
    for (const auto& backend : backends) check_logger_name(backend);
    const LoggerRun run{project_name, experiment_name, options};
    for (const auto& backend : backends) {
      if (has(backend)) continue;  // listed twice: one logger
      visit_by_name(BuiltinLoggers{}, backend, [&](auto type) { add(decltype(type)::type::open(run)); });
    }
  }
  Tracking(const Tracking&) = delete;
  Tracking& operator=(const Tracking&) = delete;
  Tracking(Tracking&&) = default;
  Tracking& operator=(Tracking&&) = default;
  ~Tracking() { finish(); }

  /// Adds a backend (a user-defined one, or a configured built-in).
  template <class L>
  void add(L logger) {
    VERL_STATIC_ASSERT(MetricsLogger<L>, A_LOGGER_NEEDS_A_NAME_AND_LOG_METRICS_STEP_AND_FINISH);
    loggers_.push_back(std::make_unique<Model<L>>(std::move(logger)));
  }

  [[nodiscard]] bool has(std::string_view backend) const {
    for (const auto& logger : loggers_)
      if (logger->name() == backend) return true;
    return false;
  }
  [[nodiscard]] std::vector<std::string_view> backends() const {
    std::vector<std::string_view> out;
    for (const auto& logger : loggers_) out.push_back(logger->name());
    return out;
  }

  /// Sends the metrics to every backend, or only to those named in `only`.
  void log(const Metrics& metrics, std::int64_t step, std::span<const std::string_view> only = {}) {
    for (const auto& logger : loggers_) {
      if (!only.empty() && std::find(only.begin(), only.end(), logger->name()) == only.end()) continue;
      logger->log(metrics, step);
    }
  }

  void finish() {
    for (const auto& logger : loggers_) logger->finish();
  }

 private:
  struct Concept {
    virtual ~Concept() = default;
    virtual void log(const Metrics& metrics, std::int64_t step) = 0;
    virtual void finish() = 0;
    [[nodiscard]] virtual std::string_view name() const = 0;
  };
  template <MetricsLogger L>
  struct Model final : Concept {
    explicit Model(L l) : logger(std::move(l)) {}
    void log(const Metrics& metrics, std::int64_t step) override { logger.log(metrics, step); }
    void finish() override { logger.finish(); }
    [[nodiscard]] std::string_view name() const override { return L::name; }
    L logger;
  };

  std::vector<std::unique_ptr<Concept>> loggers_;
};

}  // namespace verl::trainer
