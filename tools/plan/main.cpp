// verl_plan: the 3D-HybridEngine reshard plan between a training and a generation mesh, with
// HybridFlow-V and the full all-gather beside it (HybridFlow, Table 2); and with --auto, the
// placement search (HybridFlow §6): where to put each role and with which layouts.
//
//   verl_plan --train pp=2,tp=4,dp=1 --gen pp=1,tp=2,dp=4 --params 7e9 [--dtype bf16] [--json]
//   verl_plan --auto --actor llama-7b --critic llama-7b --ref llama-7b --reward llama-7b
//             --cluster a100-80gb --devices 16 [--top 5] [--json] [--emit-keys FILE]
//   verl_plan --calibrate TIMINGS [--fit compute,memory,link,latency,overhead] [--efficiency ...]
//             [--call-overhead S] [--strict] [--json]
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "verl/parallel/placement_calibration.hpp"
#include "verl/parallel/placement_report.hpp"
#include "verl/parallel/reshard_report.hpp"

namespace {

constexpr const char* usage =
    "usage: verl_plan --train pp=P,tp=T,dp=D --gen pp=PG,tp=TG,dp=DG --params N [--dtype bf16] [--json]\n"
    "  --train   training mesh sizes (axes tp, pp, dp; missing axes are 1)\n"
    "  --gen     generation mesh sizes over the same ranks (tg | t, pg | p)\n"
    "  --params  number of model parameters, e.g. 7e9\n"
    "  --dtype   bytes per parameter: bf16 (default), fp16, fp32, fp8, fp64\n"
    "  --json    print JSON instead of a table\n"
    "\n"
    "usage: verl_plan --auto --actor MODEL [--critic MODEL] [--ref MODEL] [--reward MODEL] [--cost MODEL]\n"
    "                 (--cluster a100-80gb|h100-80gb | --device-memory 80GB --flops F --bandwidth B\n"
    "                  --nvlink B --internode B) --devices N [options]\n"
    "  MODEL              llama-7b, llama-13b, llama-70b; a parameter count like 7e9 (the shape of the\n"
    "                     nearest preset); or params=..,layers=..,heads=..,kv_heads=..,hidden=..,ffn=..,vocab=..\n"
    "  --devices N        devices in the cluster; --devices-per-node (default 8)\n"
    "  --device-memory    bytes per device: 80GB, 80GiB, 8e10; --flops, --bandwidth, --nvlink, --internode:\n"
    "                     peak FLOP/s, HBM and per-direction link bytes/s (override a preset's)\n"
    "  --efficiency       achieved fractions, e.g. compute=0.45,memory=0.8,intra_node=0.7,inter_node=0.7,latency=1e-5\n"
    "  --call-overhead S  fixed seconds per call (a worker-group call, a model pass, an optimizer step,\n"
    "                     a decode step); default 1e-3, for both presets\n"
    "  --prompts 1024 --responses 1 --prompt-length 1024 --response-length 1024\n"
    "  --ppo-epochs 1 --mini-batches 4 --micro-batch 4   the PPO step the plan is sized for\n"
    "  --reserved 0.1     part of each device's memory kept free; --no-recompute: never recompute\n"
    "  --top K            how many placements to print (default 5)\n"
    "  --verl-pools       only placements verl 0.9.1's keys can express\n"
    "  --emit-keys FILE   write the best plan as verl keys (key=value lines for verl_train)\n"
    "  --json             print JSON instead of a table\n"
    "\n"
    "usage: verl_plan --calibrate TIMINGS [--fit compute,memory,link,latency,overhead] [--efficiency ...]\n"
    "                 [--call-overhead S] [--strict] [--fit-runs A,B,..] [--json]\n"
    "  TIMINGS            measured stage times (format: docs/placement_search.md, written by\n"
    "                     tools/scripts/calibrate_placement.py); fits the device's efficiency factors on\n"
    "                     the runs marked set=fit and prints every stage's predicted and measured time\n"
    "  --fit              the factors to fit (default all five); the others keep --efficiency's values\n"
    "                     (overhead: --call-overhead's, else the file's device overhead=, else 1e-3)\n"
    "  --call-overhead S  the seconds per call held when overhead is not fitted\n"
    "  --strict           refuse a fitted factor outside (0, 1] (default: only non-negative terms)\n"
    "  --fit-runs A,B     fit on these runs, predict the others (instead of the file's set= marks)\n";

using namespace verl::parallel;

/// "80GB", "80GiB", "8e10", "1.5TB".
/// The whole of `text` as a positive finite number; nullopt for anything else.
std::optional<double> positive_number(std::string_view text) {
  std::size_t used = 0;
  double value = 0;
  try {
    value = std::stod(std::string(text), &used);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  if (used != text.size() || used == 0 || !std::isfinite(value) || value <= 0) return std::nullopt;
  return value;
}

double parse_bytes(std::string_view text, std::string_view argument) {
  static const std::vector<std::pair<std::string_view, double>> units{
      {"TiB", 1099511627776.0}, {"GiB", 1073741824.0}, {"MiB", 1048576.0}, {"TB", 1e12}, {"GB", 1e9}, {"MB", 1e6}, {"B", 1}};
  double scale = 1;
  for (const auto& [suffix, factor] : units) {
    if (text.size() > suffix.size() && text.substr(text.size() - suffix.size()) == suffix) {
      text.remove_suffix(suffix.size());
      scale = factor;
      break;
    }
  }
  const std::optional<double> value = positive_number(text);
  VERL_CHECK_ARG(value.has_value(), "{}: expected a positive size like 80GB, 80GiB or 8e10, got '{}'", argument, text);
  return *value * scale;
}

double parse_positive(std::string_view text, std::string_view argument) {
  const std::optional<double> value = positive_number(text);
  VERL_CHECK_ARG(value.has_value(), "{}: expected a positive finite number, got '{}'", argument, text);
  return *value;
}

/// Seconds >= 0 (a fixed cost that may be zero); non-finite values are refused.
double parse_seconds(std::string_view text, std::string_view argument) {
  if (text == "0") return 0.0;
  std::size_t used = 0;
  double value = -1;
  try {
    value = std::stod(std::string(text), &used);
  } catch (const std::exception&) {
    used = 0;
  }
  VERL_CHECK_ARG(used == text.size() && used > 0 && std::isfinite(value) && value >= 0,
                 "{}: expected a finite number of seconds >= 0, got '{}'", argument, text);
  return value;
}

std::int64_t parse_count(std::string_view text, std::string_view argument) {
  const double value = parse_positive(text, argument);
  VERL_CHECK_ARG(std::floor(value) == value && value < 9e18, "{}: expected a positive whole number, got '{}'", argument,
                 text);
  return static_cast<std::int64_t>(value);
}

/// "key=value,key=value" into a map; each key once, from `allowed`.
std::map<std::string, std::string> parse_items(std::string_view text, std::string_view argument,
                                               const std::vector<std::string_view>& allowed) {
  std::map<std::string, std::string> items;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = std::min(text.find(',', start), text.size());
    const std::string_view item = text.substr(start, comma - start);
    const std::size_t eq = item.find('=');
    VERL_CHECK_ARG(eq != std::string_view::npos && eq > 0 && eq + 1 < item.size(),
                   "{}: expected items like 'name=value', got '{}' in '{}'", argument, item, text);
    const std::string name(item.substr(0, eq));
    VERL_CHECK_ARG(std::find(allowed.begin(), allowed.end(), name) != allowed.end(),
                   "{}: expected names among {}, got '{}'", argument, fmt::join(allowed, ", "), name);
    VERL_CHECK_ARG(!items.contains(name), "{}: expected each name once, got '{}' twice", argument, name);
    items[name] = std::string(item.substr(eq + 1));
    start = comma + 1;
  }
  return items;
}

ModelShape parse_model(std::string_view text, std::string_view argument) {
  for (std::string_view preset : model_preset_names) {
    if (text == preset) return model_preset(preset);
  }
  if (text.find('=') != std::string_view::npos) {
    const auto items = parse_items(text, argument, {"params", "layers", "heads", "kv_heads", "hidden", "ffn", "vocab"});
    for (std::string_view key : {"params", "layers", "heads", "hidden", "vocab"}) {
      VERL_CHECK_ARG(items.contains(std::string(key)), "{}: expected {}= in '{}'", argument, key, text);
    }
    ModelShape m;
    m.params = parse_positive(items.at("params"), fmt::format("{} params", argument));
    m.layers = parse_count(items.at("layers"), fmt::format("{} layers", argument));
    m.heads = parse_count(items.at("heads"), fmt::format("{} heads", argument));
    m.kv_heads = items.contains("kv_heads") ? parse_count(items.at("kv_heads"), fmt::format("{} kv_heads", argument)) : m.heads;
    m.hidden = parse_count(items.at("hidden"), fmt::format("{} hidden", argument));
    m.ffn_hidden = items.contains("ffn") ? parse_count(items.at("ffn"), fmt::format("{} ffn", argument)) : 4 * m.hidden;
    m.vocab = parse_count(items.at("vocab"), fmt::format("{} vocab", argument));
    validate_model_shape(m, argument);
    return m;
  }
  double params = 0;
  try {
    params = parse_positive(text, argument);
  } catch (const verl::InvalidArgument&) {
    verl::detail::throw_invalid_argument(
        "{}: expected llama-7b, llama-13b, llama-70b, a parameter count like 7e9, or params=..,layers=..,heads=..,"
        "hidden=..,vocab=.., got '{}'",
        argument, text);
  }
  // The shape of the preset nearest in size (on a log scale), with the given count.
  ModelShape best = model_preset(model_preset_names[0]);
  for (std::string_view preset : model_preset_names) {
    const ModelShape m = model_preset(preset);
    if (std::abs(std::log(m.params / params)) < std::abs(std::log(best.params / params))) best = m;
  }
  best.params = params;
  return best;
}

nlohmann::json to_json(const TrainMesh& m) {
  return {{"pp", m.pp}, {"tp", m.tp}, {"dp", m.dp}, {"recompute", m.recompute}};
}

nlohmann::json to_json(const PlacementPlan& p) {
  nlohmann::json out;
  out["step_seconds"] = p.estimate.step_seconds;
  out["generation_seconds"] = p.estimate.generation_seconds;
  out["forward_seconds"] = p.estimate.forward_seconds;
  out["update_seconds"] = p.estimate.update_seconds;
  out["generation_sequences_in_flight"] = p.estimate.generation_concurrency;
  nlohmann::json pools = nlohmann::json::array();
  for (const GroupPlan& g : p.groups) {
    nlohmann::json roles = nlohmann::json::array();
    for (Role r : g.roles) roles.push_back(std::string(role_name(r)));
    pools.push_back({{"roles", roles},
                     {"devices", g.devices},
                     {"first_device", g.first_device},
                     {"peak_memory_bytes", g.peak_memory_bytes},
                     {"forward_seconds", g.forward_seconds},
                     {"update_seconds", g.update_seconds}});
  }
  out["pools"] = pools;
  nlohmann::json roles = nlohmann::json::object();
  for (const RolePlan& r : p.roles) {
    nlohmann::json role{{"pool", r.group},
                        {"mesh", to_json(r.mesh)},
                        {"persistent_bytes", r.persistent_bytes},
                        {"transient_bytes", r.transient_bytes}};
    if (r.gen) role["generation_mesh"] = {{"pp", r.gen->pp}, {"tp", r.gen->tp}, {"dp", r.gen->dp}};
    nlohmann::json stages = nlohmann::json::object();
    for (const StageTime& s : r.stages) stages[std::string(s.name)] = s.seconds;
    role["stage_seconds"] = stages;
    roles[std::string(role_name(r.role))] = role;
  }
  out["roles"] = roles;
  return out;
}

/// verl_plan --auto: arguments after the program name.
int run_auto(int argc, char** argv) {
  PlacementProblem problem;
  std::optional<std::string> cluster_name, emit_keys;
  std::optional<std::int64_t> devices, devices_per_node;
  std::optional<double> memory, flops, bandwidth, nvlink, internode;
  std::optional<std::string> efficiency;
  std::optional<double> call_overhead;
  std::size_t top = 5;
  bool json = false, verl_pools = false;
  std::vector<std::pair<Role, ModelShape>> roles;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    auto value = [&]() -> std::string {
      VERL_CHECK_ARG(i + 1 < argc, "{}: expected a value after it", arg);
      return argv[++i];
    };
    auto role = [&](Role r) {
      for (const auto& [existing, shape] : roles) {
        VERL_CHECK_ARG(existing != r, "{}: expected once, got it twice", arg);
      }
      roles.emplace_back(r, parse_model(value(), arg));
    };
    if (arg == "--auto") {
    } else if (arg == "-h" || arg == "--help") {
      std::cout << usage;
      return 0;
    } else if (arg == "--actor") {
      role(Role::actor);
    } else if (arg == "--critic") {
      role(Role::critic);
    } else if (arg == "--ref") {
      role(Role::reference);
    } else if (arg == "--reward") {
      role(Role::reward);
    } else if (arg == "--cost") {
      role(Role::cost);
    } else if (arg == "--cluster") {
      cluster_name = value();
    } else if (arg == "--devices") {
      devices = parse_count(value(), arg);
    } else if (arg == "--devices-per-node") {
      devices_per_node = parse_count(value(), arg);
    } else if (arg == "--device-memory") {
      memory = parse_bytes(value(), arg);
    } else if (arg == "--flops") {
      flops = parse_positive(value(), arg);
    } else if (arg == "--bandwidth") {
      bandwidth = parse_positive(value(), arg);
    } else if (arg == "--nvlink") {
      nvlink = parse_positive(value(), arg);
    } else if (arg == "--internode") {
      internode = parse_positive(value(), arg);
    } else if (arg == "--efficiency") {
      efficiency = value();
    } else if (arg == "--call-overhead") {
      call_overhead = parse_seconds(value(), arg);
    } else if (arg == "--prompts") {
      problem.batch.prompts = parse_count(value(), arg);
    } else if (arg == "--responses") {
      problem.batch.responses_per_prompt = parse_count(value(), arg);
    } else if (arg == "--prompt-length") {
      problem.batch.prompt_length = parse_count(value(), arg);
    } else if (arg == "--response-length") {
      problem.batch.response_length = parse_count(value(), arg);
    } else if (arg == "--ppo-epochs") {
      problem.batch.ppo_epochs = parse_count(value(), arg);
    } else if (arg == "--mini-batches") {
      problem.batch.ppo_mini_batches = parse_count(value(), arg);
    } else if (arg == "--micro-batch") {
      problem.batch.micro_batch_sequences = parse_count(value(), arg);
    } else if (arg == "--reserved") {
      const std::string text = value();
      problem.memory.reserved_fraction = text == "0" ? 0.0 : parse_positive(text, arg);
    } else if (arg == "--no-recompute") {
      problem.allow_recompute = false;
    } else if (arg == "--top") {
      top = static_cast<std::size_t>(parse_count(value(), arg));
    } else if (arg == "--verl-pools") {
      verl_pools = true;
    } else if (arg == "--emit-keys") {
      emit_keys = value();
    } else if (arg == "--json") {
      json = true;
    } else {
      verl::detail::throw_invalid_argument("arguments: expected --auto's options (see --help), got '{}'", arg);
    }
  }
  VERL_CHECK_ARG(devices.has_value(), "--devices: expected the number of devices{}", "");
  VERL_CHECK_ARG(!roles.empty(), "--actor: expected the actor's model (llama-7b, 7e9, ...){}", "");
  if (cluster_name) {
    problem.cluster = cluster_preset(*cluster_name, *devices);
  } else {
    VERL_CHECK_ARG(memory && flops && bandwidth && nvlink && internode,
                   "--cluster: expected a preset (a100-80gb, h100-80gb) or all of --device-memory, --flops, "
                   "--bandwidth, --nvlink and --internode{}",
                   "");
    problem.cluster.devices = *devices;
  }
  if (devices_per_node) problem.cluster.devices_per_node = *devices_per_node;
  if (memory) problem.cluster.memory_bytes = *memory;
  if (flops) problem.cluster.peak_flops = *flops;
  if (bandwidth) problem.cluster.hbm_bandwidth = *bandwidth;
  if (nvlink) problem.cluster.intra_node_bandwidth = *nvlink;
  if (internode) problem.cluster.inter_node_bandwidth = *internode;
  if (efficiency) {
    const auto items =
        parse_items(*efficiency, "--efficiency", {"compute", "memory", "intra_node", "inter_node", "latency"});
    for (const auto& [name, text] : items) {
      const double v = parse_positive(text, fmt::format("--efficiency {}", name));
      if (name == "compute") problem.efficiency.compute = v;
      if (name == "memory") problem.efficiency.memory = v;
      if (name == "intra_node") problem.efficiency.intra_node = v;
      if (name == "inter_node") problem.efficiency.inter_node = v;
      if (name == "latency") problem.efficiency.collective_latency = v;
    }
  }
  if (call_overhead) problem.efficiency.call_overhead = *call_overhead;
  std::sort(roles.begin(), roles.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [r, shape] : roles) problem.roles.push_back({r, shape});

  const PlacementSearch search(problem);
  SearchStats stats;
  const std::vector<RankedPlacement> ranked =
      verl_pools ? search.rank(top, VerlExpressible{}, &stats) : search.rank(top, AnyPlacement{}, &stats);
  std::vector<PlacementPlan> plans;
  for (const RankedPlacement& r : ranked) plans.push_back(search.describe(r));
  std::vector<std::pair<std::string, std::string>> keys;
  if (emit_keys) {
    keys = verl_placement_keys(plans.front(), problem);
    std::ofstream file(*emit_keys);
    VERL_CHECK_ARG(file.good(), "--emit-keys: expected a writable file, got '{}'", *emit_keys);
    for (const auto& [key, value] : keys) file << key << '=' << value << '\n';
  }
  if (json) {
    nlohmann::json out;
    out["placements"] = nlohmann::json::array();
    for (const PlacementPlan& p : plans) out["placements"].push_back(to_json(p));
    out["search"] = {{"placements", stats.placements},
                     {"placements_pruned", stats.placements_pruned},
                     {"nodes", stats.nodes},
                     {"layouts_scored", stats.leaves}};
    if (emit_keys) {
      nlohmann::json k = nlohmann::json::object();
      for (const auto& [key, value] : keys) k[key] = value;
      out["verl_keys"] = k;
    }
    std::cout << out.dump(2) << '\n';
  } else {
    std::cout << format_placement_table(plans, search);
    std::cout << fmt::format("\nsearched {} placements ({} pruned before their layouts), {} layouts scored\n",
                             stats.placements, stats.placements_pruned, stats.leaves);
    if (emit_keys) std::cout << fmt::format("wrote {} verl keys to {}\n", keys.size(), *emit_keys);
  }
  return 0;
}

/// verl_plan --calibrate: arguments after the program name.
int run_calibrate(int argc, char** argv) {
  std::optional<std::string> file, fit, efficiency, fit_runs;
  std::optional<double> call_overhead;
  bool json = false, strict = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    auto value = [&]() -> std::string {
      VERL_CHECK_ARG(i + 1 < argc, "{}: expected a value after it", arg);
      return argv[++i];
    };
    if (arg == "--calibrate") {
      file = value();
    } else if (arg == "--fit") {
      fit = value();
    } else if (arg == "--efficiency") {
      efficiency = value();
    } else if (arg == "--call-overhead") {
      call_overhead = parse_seconds(value(), arg);
    } else if (arg == "--json") {
      json = true;
    } else if (arg == "--strict") {
      strict = true;
    } else if (arg == "--fit-runs") {
      fit_runs = value();
    } else {
      verl::detail::throw_invalid_argument("arguments: expected --calibrate's options (see --help), got '{}'", arg);
    }
  }
  CalibrationData data = read_calibration_file(*file);
  if (fit_runs) {  // overrides the file's set= marks
    for (CalibrationRun& run : data.runs) run.fit = false;
    std::size_t start = 0;
    const std::string_view text = *fit_runs;
    while (start <= text.size()) {
      const std::size_t comma = std::min(text.find(',', start), text.size());
      const std::string_view name = text.substr(start, comma - start);
      const auto run = std::find_if(data.runs.begin(), data.runs.end(), [&](const CalibrationRun& r) { return r.name == name; });
      VERL_CHECK_ARG(run != data.runs.end(), "--fit-runs: expected run names of {}, got '{}'", data.source, name);
      run->fit = true;
      start = comma + 1;
    }
  }
  if (efficiency) {
    const auto items = parse_items(*efficiency, "--efficiency", {"compute", "memory", "link", "latency"});
    for (const auto& [name, text] : items) {
      const double v = parse_positive(text, fmt::format("--efficiency {}", name));
      if (name == "compute") data.initial.compute = v;
      if (name == "memory") data.initial.memory = v;
      if (name == "link") data.initial.intra_node = data.initial.inter_node = v;
      if (name == "latency") data.initial.collective_latency = v;
    }
  }
  if (call_overhead) data.initial.call_overhead = *call_overhead;
  validate_efficiency(data.initial);
  CalibrationFactors factors;
  if (fit) {
    factors = {false, false, false, false, false, false};
    std::size_t start = 0;
    const std::string_view text = *fit;
    while (start <= text.size()) {
      const std::size_t comma = std::min(text.find(',', start), text.size());
      const std::string_view name = text.substr(start, comma - start);
      if (name == "compute") {
        factors.compute = true;
      } else if (name == "memory") {
        factors.memory = true;
      } else if (name == "link") {
        factors.intra_node = factors.inter_node = true;
      } else if (name == "latency") {
        factors.collective_latency = true;
      } else if (name == "overhead") {
        factors.call_overhead = true;
      } else {
        verl::detail::throw_invalid_argument(
            "--fit: expected names among compute, memory, link, latency, overhead, got '{}'", name);
      }
      start = comma + 1;
    }
  }
  factors.strict = strict;
  const CalibrationResult result = calibrate_and_predict(data, factors);
  if (!json) {
    std::cout << format_calibration_table(result);
    return 0;
  }
  nlohmann::json out;
  out["source"] = data.source;
  out["device"] = {{"flops", data.cluster.peak_flops},
                   {"bandwidth", data.cluster.hbm_bandwidth},
                   {"link", data.cluster.intra_node_bandwidth}};
  out["fitted"] = {{"compute", result.fitted.compute},
                   {"memory", result.fitted.memory},
                   {"link", result.fitted.intra_node},
                   {"latency", result.fitted.collective_latency},
                   {"overhead", result.fitted.call_overhead},
                   {"measurements", result.fit_measurements}};
  nlohmann::json rows = nlohmann::json::array();
  for (const CalibrationRow& row : result.rows) {
    nlohmann::json r{{"run", row.run}, {"stage", row.stage}, {"set", row.fit ? "fit" : "predict"},
                     {"measured_seconds", row.measured}, {"modelled", row.modelled},
                     {"work", {{"flops", row.work.flops}, {"hbm_bytes", row.work.hbm_bytes},
                               {"link_bytes", row.work.intra_node_bytes + row.work.inter_node_bytes},
                               {"collectives", row.work.collectives}, {"calls", row.work.calls}}}};
    if (row.modelled) {
      r["predicted_seconds"] = row.predicted;
      r["relative_error"] = row.relative_error();
    }
    rows.push_back(std::move(r));
  }
  out["stages"] = std::move(rows);
  std::cout << out.dump(2) << '\n';
  return 0;
}

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
  for (int i = 1; i < argc; ++i) {
    if (std::string_view(argv[i]) == "--calibrate") {
      try {
        return run_calibrate(argc, argv);
      } catch (const verl::InvalidArgument& e) {
        std::cerr << "verl_plan: " << e.what() << '\n';
        return 2;
      }
    }
    if (std::string_view(argv[i]) == "--auto") {
      try {
        return run_auto(argc, argv);
      } catch (const verl::InvalidArgument& e) {
        std::cerr << "verl_plan: " << e.what() << '\n';
        return 2;
      }
    }
  }
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
