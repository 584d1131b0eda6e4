// A small SVG line chart, for the reward curve (critic/score/mean against step) and other
// metrics of a run; no plotting library needed, and any browser shows the result.
#pragma once

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "verl/core/markup.hpp"
#include "verl/core/error.hpp"
#include "verl/data/jsonl.hpp"
#include "verl/core/file_io.hpp"

namespace verl::trainer {

struct PlotPoint {
  double x = 0.0;
  double y = 0.0;
};

struct PlotSeries {
  std::string name;
  std::vector<PlotPoint> points;
};

struct PlotLabels {
  std::string title;
  std::string x_label = "step";
  std::string y_label;
};

namespace detail {

inline std::string xml_escape(std::string_view text) {
  return escape_markup(text, {{'&', "&amp;"}, {'<', "&lt;"}, {'>', "&gt;"}, {'"', "&quot;"}});
}

/// About five round tick values covering [low, high].
inline std::vector<double> nice_ticks(double low, double high) {
  const double span = high - low;
  const double raw = span / 5.0;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  double step = magnitude;
  for (const double factor : {1.0, 2.0, 2.5, 5.0, 10.0}) {
    step = factor * magnitude;
    if (span / step <= 6.0) break;
  }
  std::vector<double> ticks;
  for (double t = std::ceil(low / step) * step; t <= high + step * 1e-9; t += step) ticks.push_back(std::abs(t) < step * 1e-9 ? 0.0 : t);
  return ticks;
}

}  // namespace detail

/// The chart as SVG text (640x400): axes with ticks, one polyline (and dots) per series, legend.
inline std::string render_svg_line_chart(std::span<const PlotSeries> series, const PlotLabels& labels) {
  constexpr double width = 640, height = 400, left = 70, right = 20, top = 40, bottom = 55;
  double x_min = std::numeric_limits<double>::infinity(), x_max = -x_min, y_min = x_min, y_max = -x_min;
  for (const auto& s : series) {
    for (const auto& p : s.points) {
      if (!std::isfinite(p.x) || !std::isfinite(p.y)) continue;
      x_min = std::min(x_min, p.x), x_max = std::max(x_max, p.x);
      y_min = std::min(y_min, p.y), y_max = std::max(y_max, p.y);
    }
  }
  if (!std::isfinite(x_min)) x_min = 0, x_max = 1, y_min = 0, y_max = 1;  // nothing to draw
  if (x_max == x_min) x_min -= 0.5, x_max += 0.5;
  if (y_max == y_min) y_min -= 0.5, y_max += 0.5;
  const double y_pad = (y_max - y_min) * 0.05;
  y_min -= y_pad, y_max += y_pad;
  const auto px = [&](double x) { return left + (x - x_min) / (x_max - x_min) * (width - left - right); };
  const auto py = [&](double y) { return height - bottom - (y - y_min) / (y_max - y_min) * (height - top - bottom); };
  static constexpr std::string_view colors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b"};

  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
      width, height);
  svg += fmt::format("<text x=\"{}\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">{}</text>\n", width / 2,
                     detail::xml_escape(labels.title));
  for (const double t : detail::nice_ticks(y_min, y_max)) {
    svg += fmt::format(
        "<line x1=\"{0}\" y1=\"{1:.1f}\" x2=\"{2}\" y2=\"{1:.1f}\" stroke=\"#e0e0e0\"/>\n"
        "<text x=\"{3}\" y=\"{4:.1f}\" text-anchor=\"end\">{5:g}</text>\n",
        left, py(t), width - right, left - 6, py(t) + 4, t);
  }
  for (const double t : detail::nice_ticks(x_min, x_max)) {
    svg += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{:g}</text>\n", px(t), height - bottom + 18, t);
  }
  svg += fmt::format("<polyline points=\"{0},{1} {0},{2} {3},{2}\" fill=\"none\" stroke=\"black\"/>\n", left, top,
                     height - bottom, width - right);
  svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", (left + width - right) / 2,
                     height - 12, detail::xml_escape(labels.x_label));
  svg += fmt::format("<text x=\"16\" y=\"{0}\" text-anchor=\"middle\" transform=\"rotate(-90 16 {0})\">{1}</text>\n",
                     (top + height - bottom) / 2, detail::xml_escape(labels.y_label));
  for (std::size_t k = 0; k < series.size(); ++k) {
    const auto color = colors[k % std::size(colors)];
    std::string points;
    for (const auto& p : series[k].points) {
      if (!std::isfinite(p.x) || !std::isfinite(p.y)) continue;
      points += fmt::format("{:.1f},{:.1f} ", px(p.x), py(p.y));
    }
    svg += fmt::format("<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"/>\n", points, color);
    if (series[k].points.size() <= 60) {
      for (const auto& p : series[k].points) {
        if (!std::isfinite(p.x) || !std::isfinite(p.y)) continue;
        svg += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"2.5\" fill=\"{}\"/>\n", px(p.x), py(p.y), color);
      }
    }
    svg += fmt::format("<text x=\"{}\" y=\"{}\" fill=\"{}\">{}</text>\n", left + 10, top + 14 + 16 * static_cast<double>(k),
                       color, detail::xml_escape(series[k].name));
  }
  svg += "</svg>\n";
  return svg;
}

/// Writes the chart to `path` (atomically).
inline void write_svg_line_chart(const std::filesystem::path& path, std::span<const PlotSeries> series,
                                 const PlotLabels& labels) {
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path());
  io::write_file_atomically(path, render_svg_line_chart(series, labels));
}

/// One metric's values against step from a file logger's JSON Lines (steps without it are
/// skipped).
inline PlotSeries metric_series_from_jsonl(const std::filesystem::path& jsonl, std::string_view metric) {
  PlotSeries series{std::string(metric), {}};
  data::for_each_json_row(jsonl, [&](nlohmann::json&& row, const data::SourceLocation& where) {
    VERL_CHECK_ARG(row.is_object() && row.contains("step") && row.contains("data"),
                   "{}: expected {{\"step\": N, \"data\": {{...}}}}", where.to_string());
    const auto& data = row["data"];
    if (const auto found = data.find(metric); found != data.end() && found->is_number()) {
      series.points.push_back({row["step"].get<double>(), found->get<double>()});
    }
  });
  return series;
}

/// A chart of `metrics` against step, read from a file logger's JSON Lines (e.g. the reward
/// curve: critic/score/mean, with val-core/<source>/acc/mean@1 beside it). Metrics never logged
/// are left out; the y label defaults to the single metric's name.
inline void write_metrics_plot(const std::filesystem::path& jsonl, const std::filesystem::path& svg,
                               std::span<const std::string> metrics, PlotLabels labels = {}) {
  std::vector<PlotSeries> series;
  for (const auto& metric : metrics) {
    PlotSeries s = metric_series_from_jsonl(jsonl, metric);
    if (!s.points.empty()) series.push_back(std::move(s));
  }
  if (labels.y_label.empty() && metrics.size() == 1) labels.y_label = metrics.front();
  write_svg_line_chart(svg, series, labels);
}

}  // namespace verl::trainer
