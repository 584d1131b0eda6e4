// What Tracking hands each built-in backend when it opens it (LoggerRun): the run's project and
// experiment names and the backends' settings (TrackingOptions, including the console's).
#pragma once

#include <cstddef>
#include <cstdint>
#include <iostream>
#include <optional>
#include <ostream>
#include <string_view>

namespace verl::trainer {

enum class ConsoleStyle {
  automatic,  ///< terminal when the stream is stdout/stderr attached to a TTY, else plain
  terminal,   ///< block-character bar, bold header
  plain,      ///< ASCII only
  verl_line,  ///< verl's LocalLogger: "step:N - key:value - ..." on one line
};

struct ConsoleLoggerOptions {
  std::optional<std::int64_t> total_steps;  ///< the progress bar's end (trainer.total_training_steps)
  ConsoleStyle style = ConsoleStyle::automatic;
  std::size_t width = 0;      ///< line width; 0: $COLUMNS, else 100
  std::size_t bar_width = 30;
};

struct TrackingOptions {
  ConsoleLoggerOptions console;
  std::ostream* console_stream = &std::cout;
  /// A run resumed from the checkpoint of this step: the file logger keeps the lines up to it and
  /// appends (lines logged after it, before the run stopped, would otherwise appear twice).
  std::optional<std::int64_t> resumed_at_step;
};

/// A run as the backends see it when Tracking opens them (each built-in backend has
/// `static L open(const LoggerRun&)`).
struct LoggerRun {
  std::string_view project_name;
  std::string_view experiment_name;
  const TrackingOptions& options;
};

}  // namespace verl::trainer
