// verl_plan: the 3D-HybridEngine reshard plan between a training and a generation mesh, with
// HybridFlow-V and the full all-gather beside it (HybridFlow, Table 2).
//
//   verl_plan --train pp=2,tp=4,dp=1 --gen pp=1,tp=2,dp=4 --params 7e9 [--dtype bf16] [--json]
#include <nlohmann/json.hpp>

#include <cstdio>
#include <iostream>
#include <optional>
#include <string>
#include <string_view>

#include "verl/parallel/reshard_report.hpp"

namespace {

constexpr const char* usage =
    "usage: verl_plan --train pp=P,tp=T,dp=D --gen pp=PG,tp=TG,dp=DG --params N [--dtype bf16] [--json]\n"
    "  --train   training mesh sizes (axes tp, pp, dp; missing axes are 1)\n"
    "  --gen     generation mesh sizes over the same ranks (tg | t, pg | p)\n"
    "  --params  number of model parameters, e.g. 7e9\n"
    "  --dtype   bytes per parameter: bf16 (default), fp16, fp32, fp8, fp64\n"
    "  --json    print JSON instead of a table\n";

nlohmann::json to_json(const verl::parallel::ParallelCoords& c) { return {{"tp", c.tp}, {"pp", c.pp}, {"dp", c.dp}}; }

nlohmann::json to_json(const verl::parallel::ReshardReport& report) {
  const auto& g = report.geometry;
  nlohmann::json out;
  out["train"] = {{"tp", g.train_tp}, {"pp", g.train_pp}, {"dp", g.train_dp}};
  out["gen"] = {{"tp", g.gen_tp}, {"pp", g.gen_pp}, {"dp", g.gen_dp}};
  out["world_size"] = g.world_size();
  out["params"] = report.params;
  out["dtype"] = report.dtype;
  out["bytes_per_param"] = report.bytes_per_param;
  out["model_bytes"] = report.model_bytes();
  out["micro_dp_size"] = g.micro_dp_size();
  for (const auto& s : report.strategies) {
    out[std::string(s.name)] = {
        {"comm_bytes_per_rank", s.bytes.comm_bytes_per_rank},
        {"peak_param_bytes_per_rank", s.bytes.peak_param_bytes_per_rank},
        {"redundant_bytes_per_rank", s.bytes.redundant_bytes_per_rank},
        {"comm_fraction_of_model", s.cost.comm.to_string()},
        {"peak_fraction_of_model", s.cost.peak.to_string()},
        {"redundant_fraction_of_model", s.cost.redundant.to_string()},
    };
  }
  out["micro_dp_groups"] = report.micro_dp_groups;
  nlohmann::json ranks = nlohmann::json::array();
  for (const auto& r : report.ranks) {
    ranks.push_back({{"rank", r.rank}, {"train", to_json(r.train)}, {"gen", to_json(r.gen)}, {"micro_dp_group", r.micro_dp_group}});
  }
  out["ranks"] = std::move(ranks);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::optional<std::string> train, gen, params;
  std::string dtype = "bf16";
  bool json = false;
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string_view arg = argv[i];
      auto value = [&]() -> std::string {
        VERL_CHECK_ARG(i + 1 < argc, "{}: expected a value after it", arg);
        return argv[++i];
      };
      if (arg == "--train") {
        train = value();
      } else if (arg == "--gen") {
        gen = value();
      } else if (arg == "--params") {
        params = value();
      } else if (arg == "--dtype") {
        dtype = value();
      } else if (arg == "--json") {
        json = true;
      } else if (arg == "-h" || arg == "--help") {
        std::cout << usage;
        return 0;
      } else {
        verl::detail::throw_invalid_argument("arguments: expected --train, --gen, --params, --dtype or --json, got '{}'",
                                             arg);
      }
    }
    VERL_CHECK_ARG(train && gen && params, "arguments: expected --train, --gen and --params{}", "");
    using namespace verl::parallel;
    const ReshardGeometry geometry =
        ReshardGeometry::from_sizes(parse_axis_sizes(*train, "--train"), parse_axis_sizes(*gen, "--gen"));
    const ReshardReport report = make_reshard_report(geometry, parse_param_count(*params), dtype);
    if (json) {
      std::cout << to_json(report).dump(2) << '\n';
    } else {
      std::cout << format_reshard_table(report);
    }
  } catch (const verl::InvalidArgument& e) {
    std::cerr << "verl_plan: " << e.what() << '\n' << usage;
    return 2;
  }
  return 0;
}
