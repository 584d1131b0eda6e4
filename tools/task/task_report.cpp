// verl_task_report: the main job's summary from verl_train's file-logger JSON Lines: the reward
// curve as an SVG plot (critic/score/mean, beside the validation score) and the validation
// accuracy before the first step (val_before_train) and after the last.
//
//   verl_task_report --metrics METRICS.jsonl --svg PLOT.svg [--metric NAME]
//                    [--require-before-max A] [--require-after-min B]
//
// The --require flags make it a check (exit status 2 when the accuracy before training is above
// A or the one after is below B), for the main job's test.
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "verl/data/jsonl.hpp"
#include "verl/trainer/logging/svg_plot.hpp"

namespace {

int run(int argc, char** argv) {
  using namespace verl;
  std::filesystem::path metrics, svg;
  std::string val_metric;
  std::optional<double> before_max, after_min;
  for (int i = 1; i < argc; ++i) {
    const std::string_view flag = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw InvalidArgument(fmt::format("{}: expected a value", flag));
      return argv[++i];
    };
    if (flag == "--metrics") {
      metrics = value();
    } else if (flag == "--svg") {
      svg = value();
    } else if (flag == "--metric") {
      val_metric = value();
    } else if (flag == "--require-before-max" || flag == "--require-after-min") {
      const std::string text = value();
      std::size_t used = 0;
      double bound = 0.0;
      try {
        bound = std::stod(text, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (text.empty() || used != text.size()) throw InvalidArgument(fmt::format("{}: expected a number, got '{}'", flag, text));
      (flag == "--require-before-max" ? before_max : after_min) = bound;
    } else {
      throw InvalidArgument(fmt::format(
          "unknown flag '{}' (usage: verl_task_report --metrics METRICS.jsonl --svg PLOT.svg [--metric NAME] "
          "[--require-before-max A] [--require-after-min B])",
          flag));
    }
  }
  if (metrics.empty() || svg.empty()) throw InvalidArgument("--metrics and --svg are required");
  // The validation score: verl's val-core/<data_source>/reward/mean@1 unless named.
  if (val_metric.empty()) {
    data::for_each_json_row(metrics, [&](nlohmann::json&& row, const data::SourceLocation&) {
      if (!val_metric.empty() || !row.contains("data")) return;
      for (const auto& [key, v] : row["data"].items()) {
        if (key.starts_with("val-core/") && key.ends_with("/mean@1")) {
          val_metric = key;
          break;
        }
      }
    });
  }
  const std::vector<std::string> plotted = val_metric.empty()
                                               ? std::vector<std::string>{"critic/score/mean"}
                                               : std::vector<std::string>{"critic/score/mean", val_metric};
  trainer::write_metrics_plot(metrics, svg, plotted,
                              {.title = "GRPO on the arithmetic task: reward (train) and validation accuracy",
                               .x_label = "step",
                               .y_label = "score"});
  fmt::print("reward curve: {}\n", svg.string());
  if (val_metric.empty()) {
    fmt::print("no validation metric (val-core/*/mean@1) in {}\n", metrics.string());
    return before_max || after_min ? 2 : 0;
  }
  const auto series = trainer::metric_series_from_jsonl(metrics, val_metric);
  const auto rewards = trainer::metric_series_from_jsonl(metrics, "critic/score/mean");
  if (!rewards.points.empty()) {
    fmt::print("train reward (critic/score/mean): first step {:.3f}, last step {:.3f}\n", rewards.points.front().y,
               rewards.points.back().y);
  }
  if (!series.points.empty()) {
    // "before GRPO" only when the first validation ran before the first step (val_before_train).
    const bool before = series.points.front().x == 0;
    fmt::print("validation accuracy ({}, greedy): {} (step {}) {:.1f}%, after GRPO (step {}) {:.1f}%\n", val_metric,
               before ? "before GRPO" : "first validation", series.points.front().x, 100.0 * series.points.front().y,
               series.points.back().x, 100.0 * series.points.back().y);
  }
  if (series.points.empty()) return before_max || after_min ? 2 : 0;
  bool ok = true;
  if (before_max && series.points.front().y > *before_max) {
    fmt::print("check failed: accuracy before GRPO {:.3f} > {}\n", series.points.front().y, *before_max);
    ok = false;
  }
  if (after_min && series.points.back().y < *after_min) {
    fmt::print("check failed: accuracy after GRPO {:.3f} < {}\n", series.points.back().y, *after_min);
    ok = false;
  }
  return ok ? 0 : 2;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "verl_task_report: error: %s\n", error.what());
    return 1;
  }
}
