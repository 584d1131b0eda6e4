// A side-by-side report of the three resharding strategies for one mesh pair and one model
// size (what `verl_plan` prints): per-rank bytes, the micro-DP groups and every rank's
// training and generation coordinates.
#pragma once

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <array>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "verl/core/error.hpp"
#include "verl/parallel/reshard_plan.hpp"

namespace verl::parallel {

/// Bytes per parameter of a dtype name (bf16, fp16, fp32, fp8 and torch's long names).
inline std::int64_t dtype_bytes(std::string_view dtype) {
  if (dtype == "bf16" || dtype == "bfloat16" || dtype == "fp16" || dtype == "float16" || dtype == "half") return 2;
  if (dtype == "fp32" || dtype == "float32" || dtype == "float") return 4;
  if (dtype == "fp8" || dtype == "float8_e4m3fn" || dtype == "float8_e5m2" || dtype == "int8") return 1;
  if (dtype == "fp64" || dtype == "float64" || dtype == "double") return 8;
  ::verl::detail::throw_invalid_argument(
      "dtype: expected one of bf16, fp16, fp32, fp8, fp64 (or torch's names bfloat16, float16, float32, "
      "float8_e4m3fn, float8_e5m2, float64), got '{}'",
      dtype);
}

/// Parses a parameter count such as "7e9" or "1500000000": a positive whole number.
inline std::int64_t parse_param_count(std::string_view text) {
  double value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  VERL_CHECK_ARG(error == std::errc{} && end == text.data() + text.size() && value >= 1 && value < 9.2e18 &&
                     std::floor(value) == value,
                 "params: expected a positive whole number of parameters like 7e9, got '{}'", text);
  return static_cast<std::int64_t>(value);
}

struct ReshardReport {
  struct Strategy {
    std::string_view name;
    ReshardCost cost;
    ReshardBytes bytes;
  };
  struct RankRow {
    std::int64_t rank;
    ParallelCoords train;
    ParallelCoords gen;
    std::int64_t micro_dp_group;
  };

  ReshardGeometry geometry;
  std::int64_t params = 0;
  std::string dtype;
  std::int64_t bytes_per_param = 0;
  std::array<Strategy, 3> strategies{};
  std::vector<std::vector<std::int64_t>> micro_dp_groups;  ///< HybridFlow's, in group order
  std::vector<RankRow> ranks;

  std::int64_t model_bytes() const { return params * bytes_per_param; }
};

inline ReshardReport make_reshard_report(const ReshardGeometry& geometry, std::int64_t params, std::string_view dtype) {
  VERL_CHECK_ARG(params > 0, "params: expected a positive count, got {}", params);
  ReshardReport report;
  report.geometry = geometry;
  report.params = params;
  report.dtype = std::string(dtype);
  report.bytes_per_param = dtype_bytes(dtype);
  const std::int64_t model_bytes = report.model_bytes();
  auto row = [&](auto plan) {
    return ReshardReport::Strategy{plan.strategy_name, plan.cost(), plan.cost().bytes(model_bytes)};
  };
  const ReshardPlan<HybridFlow> hybridflow(geometry);
  report.strategies = {row(hybridflow), row(ReshardPlan<HybridFlowV>(geometry)), row(ReshardPlan<FullAllGather>(geometry))};
  for (std::int64_t g = 0; g < hybridflow.gather_group_count(); ++g) {
    report.micro_dp_groups.push_back(hybridflow.gather_group_at(g).to_vector());
  }
  for (std::int64_t r = 0; r < geometry.world_size(); ++r) {
    report.ranks.push_back({r, geometry.train_coords(r), hybridflow.generation_coords(r), hybridflow.gather_group_index(r)});
  }
  return report;
}

namespace detail {

/// "14.00 GB" (decimal units, like model sizes are quoted).
inline std::string human_bytes(std::int64_t bytes) {
  constexpr std::array<const char*, 5> units{"B", "KB", "MB", "GB", "TB"};
  double value = static_cast<double>(bytes);
  std::size_t unit = 0;
  while (value >= 1000.0 && unit + 1 < units.size()) {
    value /= 1000.0;
    ++unit;
  }
  return unit == 0 ? fmt::format("{} B", bytes) : fmt::format("{:.2f} {}", value, units[unit]);
}

}  // namespace detail

/// The report as a readable table.
inline std::string format_reshard_table(const ReshardReport& report) {
  const ReshardGeometry& g = report.geometry;
  std::string out;
  out += fmt::format("train      tp={} pp={} dp={}\n", g.train_tp, g.train_pp, g.train_dp);
  out += fmt::format("generation tp={} pp={} dp={}  (micro-DP size {} = {} x {})\n", g.gen_tp, g.gen_pp, g.gen_dp,
                     g.micro_dp_size(), g.micro_dp_tp(), g.micro_dp_pp());
  out += fmt::format("world size {}, model M = {} params x {} bytes ({}) = {}\n\n", g.world_size(), report.params,
                     report.bytes_per_param, report.dtype, detail::human_bytes(report.model_bytes()));
  out += fmt::format("{:<16}{:>28}{:>28}{:>28}\n", "strategy", "comm/rank", "peak params/rank", "redundant/rank");
  for (const auto& s : report.strategies) {
    auto cell = [](std::int64_t bytes, const Fraction& f) {
      return fmt::format("{} ({} M)", detail::human_bytes(bytes), f.to_string());
    };
    out += fmt::format("{:<16}{:>28}{:>28}{:>28}\n", s.name, cell(s.bytes.comm_bytes_per_rank, s.cost.comm),
                       cell(s.bytes.peak_param_bytes_per_rank, s.cost.peak),
                       cell(s.bytes.redundant_bytes_per_rank, s.cost.redundant));
  }
  out += fmt::format("\nmicro-DP groups (HybridFlow all-gathers inside each): {} of {} ranks\n",
                     report.micro_dp_groups.size(), g.micro_dp_size());
  for (std::size_t i = 0; i < report.micro_dp_groups.size(); ++i) {
    out += fmt::format("  {:>4}: [{}]\n", i, fmt::join(report.micro_dp_groups[i], ", "));
  }
  out += fmt::format("\n{:>6}  {:<18}{:<18}{}\n", "rank", "train tp,pp,dp", "gen tp,pp,dp", "micro-DP group");
  for (const auto& r : report.ranks) {
    out += fmt::format("{:>6}  {:<18}{:<18}{}\n", r.rank, fmt::format("{},{},{}", r.train.tp, r.train.pp, r.train.dp),
                       fmt::format("{},{},{}", r.gen.tp, r.gen.pp, r.gen.dp), r.micro_dp_group);
  }
  return out;
}

}  // namespace verl::parallel
