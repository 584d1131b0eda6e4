// verl's "console" logger: per step, a progress line over the run's steps (a bar, the rate and
// the time left) and a compact table of the step's metrics. On a terminal the bar is drawn with
// block characters and the header in bold; elsewhere (files, pipes, CI logs) everything is plain
// ASCII without escape codes, one block per step, so logs stay greppable. The one-line format of
// verl's LocalLogger ("step:N - key:value - ...") is available as a style too.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "verl/core/metrics.hpp"
#include "verl/trainer/logging/logger_options.hpp"
#include "verl/trainer/logging/metrics_logger.hpp"
#include "verl/trainer/timer.hpp"

#if defined(__unix__) || defined(__APPLE__)
#include <unistd.h>
#endif

namespace verl::trainer {

namespace detail {

inline bool stream_is_terminal(const std::ostream& out) {
#if defined(__unix__) || defined(__APPLE__)
  const char* term = std::getenv("TERM");
  if (term != nullptr && std::string_view(term) == "dumb") return false;
  if (&out == &std::cout) return ::isatty(STDOUT_FILENO) != 0;
  if (&out == &std::cerr || &out == &std::clog) return ::isatty(STDERR_FILENO) != 0;
#endif
  return false;
}

/// A metric value, compact: integers without a fraction, others with 6 significant digits.
inline std::string format_metric(double value) {
  if (std::isfinite(value) && value == std::round(value) && std::abs(value) < 1e15) {
    return fmt::format("{}", static_cast<long long>(value));
  }
  return fmt::format("{:.6g}", value);
}

/// "1h02m03s", "4m05s", "12.3s".
inline std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  if (seconds < 60) return fmt::format("{:.1f}s", seconds);
  const auto total = static_cast<long long>(seconds + 0.5);
  if (total < 3600) return fmt::format("{}m{:02d}s", total / 60, total % 60);
  return fmt::format("{}h{:02d}m{:02d}s", total / 3600, (total % 3600) / 60, total % 60);
}

/// Python's pprint.pformat of a float for verl's one-line format (repr: shortest round trip).
inline std::string python_repr(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  std::string text = fmt::format("{}", value);
  if (text.find_first_of(".eE") == std::string::npos) text += ".0";
  return text;
}

}  // namespace detail

class ConsoleLogger {
 public:
  static constexpr std::string_view name = "console";

  /// The console backend of a Tracking run: its stream and options.
  static ConsoleLogger open(const LoggerRun& run) { return ConsoleLogger(*run.options.console_stream, run.options.console); }

  explicit ConsoleLogger(std::ostream& out = std::cout, ConsoleLoggerOptions options = {})
      : out_(&out), options_(options) {
    if (options_.style == ConsoleStyle::automatic) {
      options_.style = detail::stream_is_terminal(out) ? ConsoleStyle::terminal : ConsoleStyle::plain;
    }
    if (options_.width == 0) {
      const char* columns = std::getenv("COLUMNS");
      options_.width = columns != nullptr ? static_cast<std::size_t>(std::max(40, std::atoi(columns))) : 100;
    }
  }

  [[nodiscard]] ConsoleStyle style() const { return options_.style; }

  void log(const Metrics& metrics, std::int64_t step) {
    if (!first_step_) first_step_ = step;
    std::string text;
    if (options_.style == ConsoleStyle::verl_line) {
      text = fmt::format("step:{}", step);
      for (const auto& [key, value] : metrics) text += fmt::format(" - {}:{}", key, detail::python_repr(value));
      text += '\n';
    } else {
      text = progress_line(step) + '\n' + table(metrics);
    }
    *out_ << text << std::flush;
  }

  void finish() { out_->flush(); }

  /// The progress line alone: "step 12/100 [#####.....] 12% | 1.23 s/step | eta 1m48s".
  [[nodiscard]] std::string progress_line(std::int64_t step) const {
    const bool terminal = options_.style == ConsoleStyle::terminal;
    std::string line = options_.total_steps ? fmt::format("step {}/{}", step, *options_.total_steps)
                                            : fmt::format("step {}", step);
    const double elapsed = stopwatch_.seconds();
    const std::int64_t done = step - first_step_.value_or(step) + 1;
    const double per_step = done > 0 ? elapsed / static_cast<double>(done) : 0.0;
    if (options_.total_steps && *options_.total_steps > 0) {
      const double fraction = std::clamp(static_cast<double>(step) / static_cast<double>(*options_.total_steps), 0.0, 1.0);
      const auto filled = static_cast<std::size_t>(std::lround(fraction * static_cast<double>(options_.bar_width)));
      std::string bar;
      for (std::size_t i = 0; i < options_.bar_width; ++i) {
        bar += i < filled ? (terminal ? "\u2588" : "#") : (terminal ? "\u2591" : ".");
      }
      line += fmt::format(" [{}] {:3.0f}%", bar, fraction * 100.0);
      line += fmt::format(" | {:.2f} s/step | eta {}", per_step,
                          detail::format_duration(per_step * static_cast<double>(*options_.total_steps - step)));
    } else {
      line += fmt::format(" | {:.2f} s/step", per_step);
    }
    return terminal ? "\x1b[1m" + line + "\x1b[0m" : line;
  }

  /// The metrics as "name  value" cells, as many per row as the width allows, in name order.
  [[nodiscard]] std::string table(const Metrics& metrics) const {
    if (metrics.empty()) return {};
    std::size_t name_width = 0, value_width = 0;
    std::vector<std::pair<std::string_view, std::string>> cells;
    for (const auto& [key, value] : metrics) {
      cells.emplace_back(key, detail::format_metric(value));
      name_width = std::max(name_width, key.size());
      value_width = std::max(value_width, cells.back().second.size());
    }
    const std::size_t cell_width = 2 + name_width + 1 + value_width;
    const std::size_t columns = std::max<std::size_t>(1, options_.width / (cell_width + 1));
    std::string out;
    for (std::size_t i = 0; i < cells.size(); ++i) {
      out += fmt::format("  {:<{}} {:>{}}", cells[i].first, name_width, cells[i].second, value_width);
      out += (i + 1) % columns == 0 || i + 1 == cells.size() ? "\n" : " ";
    }
    return out;
  }

 private:
  std::ostream* out_;
  ConsoleLoggerOptions options_;
  Stopwatch stopwatch_;
  std::optional<std::int64_t> first_step_;
};

static_assert(MetricsLogger<ConsoleLogger>);

}  // namespace verl::trainer
