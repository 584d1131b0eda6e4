// Calibration of the placement cost model against measured trainer runs: a small text format
// for the measurements (the stage times verl_train logs, with the layout each run used), the
// cost model's work for each measured stage (the same `RoleCostModel` formulas and reshard plan
// the placement search scores with), a least-squares fit of the device's efficiency factors
// (`calibrate_efficiency`) on the runs marked `fit`, and the prediction of every stage.
//
// The file (`verl_plan --calibrate FILE`; written by tools/scripts/calibrate_placement.py), one
// record per line, `#` starts a comment, fields are `key=value` separated by blanks:
//
//   verl-placement-timings 1
//   device flops=F bandwidth=B link=L [internode=L] [latency=S] [overhead=S] [memory=BYTES]
//          [devices_per_node=N]
//   memory [param=4] [grad=4] [optimizer=8] [activation=4] [kv=4] [distributed_optimizer=0|1]
//   model NAME params=P layers=L heads=H kv_heads=K hidden=D ffn=F vocab=V
//   run NAME model=NAME devices=N set=fit|predict prompts=.. responses=.. prompt_length=..
//       response_length=.. epochs=.. mini_batches=.. micro_batch=.. actor=PPxTPxDP gen=PGxTGxDG
//       [ref=PPxTPxDP] [critic=PPxTPxDP]
//   stage RUN STAGE SECONDS
//
// `device` holds one device's peak figures (FLOP/s, memory bytes/s, link bytes/s per direction;
// `latency` the initial collective latency and `overhead` the initial cost of one call, each kept
// when no measurement exercises it or when it is held out of the fit) and
// `devices_per_node` (default: all devices of the largest run, so every group is intra-node).
// `memory` the bytes per element of the trainer measured (defaults: float32 everywhere, Adam's
// two moments, no distributed optimizer: verl-cpp's CPU trainer). A `run` is one verl_train
// configuration: the model its roles share, its batch (`BatchShape`), the actor's training and
// generation meshes and, when present, the reference's and the critic's meshes; `set` says
// whether its stages enter the fit or are only predicted. A `stage` is one measured time of a
// run: gen, reshard, old_log_prob, ref, values, update_actor or update_critic (verl_train's
// timing_s/* names). Every error names the file and the line.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "verl/core/error.hpp"
#include "verl/parallel/placement_cost_model.hpp"
#include "verl/parallel/placement_search.hpp"
#include "verl/parallel/reshard_plan.hpp"

namespace verl::parallel {

/// The stages verl_train times that the cost model has a formula for.
enum class TimedStage : std::uint8_t { gen, reshard, old_log_prob, ref, values, update_actor, update_critic };

inline constexpr std::array<std::string_view, 7> timed_stage_names{"gen",    "reshard",      "old_log_prob", "ref",
                                                                   "values", "update_actor", "update_critic"};

constexpr std::string_view timed_stage_name(TimedStage s) noexcept {
  return timed_stage_names[static_cast<std::size_t>(s)];
}

/// One verl_train configuration whose stages were timed.
struct CalibrationRun {
  std::string name;
  std::string model;  ///< the `model` record its roles use
  std::int64_t devices = 1;
  bool fit = true;  ///< set=fit (enters the fit) or set=predict (held out)
  BatchShape batch;
  TrainMesh actor;
  GenMesh gen;
  std::optional<TrainMesh> reference;
  std::optional<TrainMesh> critic;
  std::size_t line = 0;
};

/// One measured stage time of a run.
struct CalibrationStage {
  std::size_t run = 0;  ///< index into CalibrationData::runs
  TimedStage stage = TimedStage::gen;
  double seconds = 0;
  std::size_t line = 0;
};

/// A parsed measurements file.
struct CalibrationData {
  std::string source;
  ClusterSpec cluster;
  Efficiency initial;
  MemoryModel memory{4, 4, 8, 4, 4, false, 0.0};
  std::vector<std::pair<std::string, ModelShape>> models;
  std::vector<CalibrationRun> runs;
  std::vector<CalibrationStage> stages;

  const ModelShape& model(std::string_view name) const {
    for (const auto& [n, shape] : models) {
      if (n == name) return shape;
    }
    ::verl::detail::throw_invalid_argument("{}: expected a model named '{}', got none", source, name);
  }
};

namespace calibration_detail {

/// Blank-separated fields of a line, without the comment.
inline std::vector<std::string_view> fields(std::string_view line) {
  if (const std::size_t hash = line.find('#'); hash != std::string_view::npos) line = line.substr(0, hash);
  std::vector<std::string_view> out;
  std::size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r')) ++i;
    std::size_t j = i;
    while (j < line.size() && line[j] != ' ' && line[j] != '\t' && line[j] != '\r') ++j;
    if (j > i) out.push_back(line.substr(i, j - i));
    i = j;
  }
  return out;
}

/// Parses one line's fields; every error is "SOURCE:LINE: ...".
class LineReader {
 public:
  LineReader(std::string_view source, std::size_t line) : source_(source), line_(line) {}

  template <class... Args>
  [[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) const {
    ::verl::detail::throw_invalid_argument("{}:{}: {}", source_, line_,
                                           fmt::format(format, std::forward<Args>(args)...));
  }

  /// The whole of `text` as a finite number (non-finite values and trailing text are refused).
  double number(std::string_view text, std::string_view what) const {
    double value = 0;
    const char* begin = text.data();
    const char* end = begin + text.size();
    if (!text.empty() && *begin == '+') ++begin;
    const auto [ptr, ec] = std::from_chars(begin, end, value);
    if (text.empty() || ec != std::errc{} || ptr != end) fail("{}: expected a number, got '{}'", what, text);
    if (!std::isfinite(value)) fail("{}: expected a finite number, got '{}'", what, text);
    return value;
  }
  double positive(std::string_view text, std::string_view what) const {
    const double value = number(text, what);
    if (!(value > 0)) fail("{}: expected a positive number, got '{}'", what, text);
    return value;
  }
  double non_negative(std::string_view text, std::string_view what) const {
    const double value = number(text, what);
    if (!(value >= 0)) fail("{}: expected a number >= 0, got '{}'", what, text);
    return value;
  }
  std::int64_t count(std::string_view text, std::string_view what) const {
    const double value = positive(text, what);
    if (std::floor(value) != value || value > 9e15) fail("{}: expected a positive whole number, got '{}'", what, text);
    return static_cast<std::int64_t>(value);
  }
  /// "PPxTPxDP".
  std::array<std::int64_t, 3> mesh(std::string_view text, std::string_view what) const {
    std::array<std::int64_t, 3> sizes{};
    std::size_t start = 0;
    for (std::size_t k = 0; k < 3; ++k) {
      const std::size_t x = k < 2 ? text.find('x', start) : text.size();
      if (x == std::string_view::npos) fail("{}: expected sizes PPxTPxDP like 1x2x1, got '{}'", what, text);
      sizes[k] = count(text.substr(start, x - start), what);
      start = x + 1;
    }
    return sizes;
  }

  /// The `key=value` fields after the first `skip`, each key once and from `allowed`; the keys
  /// in `required` must be there.
  std::map<std::string, std::string_view> items(const std::vector<std::string_view>& f, std::size_t skip,
                                                std::string_view record, std::initializer_list<std::string_view> allowed,
                                                std::initializer_list<std::string_view> required) const {
    std::map<std::string, std::string_view> out;
    for (std::size_t i = skip; i < f.size(); ++i) {
      const std::size_t eq = f[i].find('=');
      if (eq == std::string_view::npos || eq == 0 || eq + 1 == f[i].size()) {
        fail("{}: expected fields like key=value, got '{}'", record, f[i]);
      }
      const std::string key(f[i].substr(0, eq));
      if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
        std::string names;
        for (std::string_view a : allowed) names += fmt::format("{}{}", names.empty() ? "" : ", ", a);
        fail("{}: expected keys among {}, got '{}'", record, names, key);
      }
      if (out.contains(key)) fail("{}: expected each key once, got '{}' twice", record, key);
      out[key] = f[i].substr(eq + 1);
    }
    for (std::string_view key : required) {
      if (!out.contains(std::string(key))) fail("{}: expected {}=, got none", record, key);
    }
    return out;
  }

 private:
  std::string_view source_;
  std::size_t line_;
};

}  // namespace calibration_detail

/// Parses a measurements file's text; `source` names it in errors ("FILE:LINE: ...").
inline CalibrationData parse_calibration(std::string_view text, std::string_view source) {
  using calibration_detail::LineReader;
  CalibrationData data;
  data.source = std::string(source);
  bool header = false, device = false, memory = false;
  std::optional<std::int64_t> devices_per_node;
  std::size_t line_number = 0;
  std::size_t start = 0;
  while (start < text.size()) {
    const std::size_t end = std::min(text.find('\n', start), text.size());
    const std::string_view line = text.substr(start, end - start);
    start = end + 1;
    ++line_number;
    const std::vector<std::string_view> f = calibration_detail::fields(line);
    if (f.empty()) continue;
    const LineReader in(source, line_number);
    const std::string_view kind = f[0];
    if (!header) {
      if (kind != "verl-placement-timings" || f.size() != 2 || f[1] != "1") {
        in.fail("expected the header 'verl-placement-timings 1' first, got '{}'", line);
      }
      header = true;
      continue;
    }
    if (kind == "device") {
      if (device) in.fail("device: expected one device record, got a second");
      device = true;
      const auto it = in.items(f, 1, "device",
                               {"flops", "bandwidth", "link", "internode", "latency", "overhead", "memory",
                                "devices_per_node"},
                               {"flops", "bandwidth", "link"});
      data.cluster.peak_flops = in.positive(it.at("flops"), "device flops");
      data.cluster.hbm_bandwidth = in.positive(it.at("bandwidth"), "device bandwidth");
      data.cluster.intra_node_bandwidth = in.positive(it.at("link"), "device link");
      data.cluster.inter_node_bandwidth = it.contains("internode") ? in.positive(it.at("internode"), "device internode")
                                                                   : data.cluster.intra_node_bandwidth;
      data.cluster.memory_bytes = it.contains("memory") ? in.positive(it.at("memory"), "device memory") : 1e12;
      if (it.contains("latency")) data.initial.collective_latency = in.non_negative(it.at("latency"), "device latency");
      if (it.contains("overhead")) data.initial.call_overhead = in.non_negative(it.at("overhead"), "device overhead");
      if (it.contains("devices_per_node")) {
        devices_per_node = in.count(it.at("devices_per_node"), "device devices_per_node");
      }
    } else if (kind == "memory") {
      if (memory) in.fail("memory: expected one memory record, got a second");
      memory = true;
      const auto it = in.items(f, 1, "memory", {"param", "grad", "optimizer", "activation", "kv", "distributed_optimizer"},
                               {});
      if (it.contains("param")) data.memory.param_bytes = in.positive(it.at("param"), "memory param");
      if (it.contains("grad")) data.memory.grad_bytes = in.positive(it.at("grad"), "memory grad");
      if (it.contains("optimizer")) data.memory.optimizer_bytes = in.non_negative(it.at("optimizer"), "memory optimizer");
      if (it.contains("activation")) data.memory.activation_bytes = in.positive(it.at("activation"), "memory activation");
      if (it.contains("kv")) data.memory.kv_cache_bytes = in.positive(it.at("kv"), "memory kv");
      if (it.contains("distributed_optimizer")) {
        const std::string_view v = it.at("distributed_optimizer");
        if (v != "0" && v != "1") in.fail("memory distributed_optimizer: expected 0 or 1, got '{}'", v);
        data.memory.distributed_optimizer = v == "1";
      }
    } else if (kind == "model") {
      if (f.size() < 2 || f[1].find('=') != std::string_view::npos) in.fail("model: expected a name first");
      const std::string name(f[1]);
      for (const auto& [existing, shape] : data.models) {
        if (existing == name) in.fail("model: expected each name once, got '{}' twice", name);
      }
      const auto it = in.items(f, 2, "model", {"params", "layers", "heads", "kv_heads", "hidden", "ffn", "vocab"},
                               {"params", "layers", "heads", "kv_heads", "hidden", "ffn", "vocab"});
      ModelShape m;
      m.params = in.positive(it.at("params"), "model params");
      m.layers = in.count(it.at("layers"), "model layers");
      m.heads = in.count(it.at("heads"), "model heads");
      m.kv_heads = in.count(it.at("kv_heads"), "model kv_heads");
      m.hidden = in.count(it.at("hidden"), "model hidden");
      m.ffn_hidden = in.count(it.at("ffn"), "model ffn");
      m.vocab = in.count(it.at("vocab"), "model vocab");
      try {
        validate_model_shape(m, name);
      } catch (const InvalidArgument& e) {
        in.fail("{}", e.what());
      }
      data.models.emplace_back(name, m);
    } else if (kind == "run") {
      if (f.size() < 2 || f[1].find('=') != std::string_view::npos) in.fail("run: expected a name first");
      CalibrationRun run;
      run.name = std::string(f[1]);
      run.line = line_number;
      for (const CalibrationRun& r : data.runs) {
        if (r.name == run.name) in.fail("run: expected each name once, got '{}' twice (line {})", run.name, r.line);
      }
      const auto it = in.items(f, 2, "run",
                               {"model", "devices", "set", "prompts", "responses", "prompt_length", "response_length",
                                "epochs", "mini_batches", "micro_batch", "actor", "gen", "ref", "critic"},
                               {"model", "devices", "set", "prompts", "responses", "prompt_length", "response_length",
                                "epochs", "mini_batches", "micro_batch", "actor", "gen"});
      run.model = std::string(it.at("model"));
      bool known = false;
      for (const auto& [name, shape] : data.models) known = known || name == run.model;
      if (!known) in.fail("run model: expected a model defined above, got '{}'", run.model);
      const ModelShape& shape = data.model(run.model);
      run.devices = in.count(it.at("devices"), "run devices");
      const std::string_view set = it.at("set");
      if (set != "fit" && set != "predict") in.fail("run set: expected fit or predict, got '{}'", set);
      run.fit = set == "fit";
      run.batch.prompts = in.count(it.at("prompts"), "run prompts");
      run.batch.responses_per_prompt = in.count(it.at("responses"), "run responses");
      run.batch.prompt_length = in.count(it.at("prompt_length"), "run prompt_length");
      run.batch.response_length = in.count(it.at("response_length"), "run response_length");
      run.batch.ppo_epochs = in.count(it.at("epochs"), "run epochs");
      run.batch.ppo_mini_batches = in.count(it.at("mini_batches"), "run mini_batches");
      run.batch.micro_batch_sequences = in.count(it.at("micro_batch"), "run micro_batch");
      auto train_mesh = [&](std::string_view key) {
        const auto s = in.mesh(it.at(std::string(key)), fmt::format("run {}", key));
        const TrainMesh mesh{s[0], s[1], s[2], false};
        if (mesh.devices() > run.devices) {
          in.fail("run {}: expected at most the run's {} devices, got {}", key, run.devices, mesh.devices());
        }
        try {
          validate_train_mesh(shape, mesh, key);
        } catch (const InvalidArgument& e) {
          in.fail("{}", e.what());
        }
        return mesh;
      };
      run.actor = train_mesh("actor");
      const auto g = in.mesh(it.at("gen"), "run gen");
      run.gen = GenMesh{g[0], g[1], g[2]};
      try {
        (void)actor_reshard_geometry(run.actor, run.gen);
      } catch (const InvalidArgument& e) {
        in.fail("run gen: {}", e.what());
      }
      if (it.contains("ref")) run.reference = train_mesh("ref");
      if (it.contains("critic")) run.critic = train_mesh("critic");
      data.runs.push_back(std::move(run));
    } else if (kind == "stage") {
      if (f.size() != 4) in.fail("stage: expected 'stage RUN STAGE SECONDS', got {} fields", f.size());
      CalibrationStage s;
      s.line = line_number;
      const auto run = std::find_if(data.runs.begin(), data.runs.end(), [&](const CalibrationRun& r) { return r.name == f[1]; });
      if (run == data.runs.end()) in.fail("stage run: expected a run defined above, got '{}'", f[1]);
      s.run = static_cast<std::size_t>(run - data.runs.begin());
      const auto name = std::find(timed_stage_names.begin(), timed_stage_names.end(), f[2]);
      if (name == timed_stage_names.end()) {
        in.fail("stage: expected one of gen, reshard, old_log_prob, ref, values, update_actor, update_critic, got '{}'",
                f[2]);
      }
      s.stage = static_cast<TimedStage>(name - timed_stage_names.begin());
      if ((s.stage == TimedStage::ref && !run->reference) ||
          ((s.stage == TimedStage::values || s.stage == TimedStage::update_critic) && !run->critic)) {
        in.fail("stage {}: expected a run with the role it times, got run '{}' without it", f[2], run->name);
      }
      for (const CalibrationStage& other : data.stages) {
        if (other.run == s.run && other.stage == s.stage) {
          in.fail("stage: expected one time per run and stage, got {} of '{}' twice (line {})", f[2], run->name,
                  other.line);
        }
      }
      s.seconds = in.positive(f[3], "stage seconds");
      data.stages.push_back(s);
    } else {
      in.fail("expected a record device, memory, model, run or stage, got '{}'", kind);
    }
  }
  const calibration_detail::LineReader end(source, line_number);
  if (!header) end.fail("expected the header 'verl-placement-timings 1', got an empty file");
  if (!device) end.fail("expected a device record, got none");
  if (data.stages.empty()) end.fail("expected stage records, got none");
  std::int64_t largest = 1;
  for (const CalibrationRun& r : data.runs) largest = std::max(largest, r.devices);
  data.cluster.devices = largest;
  data.cluster.devices_per_node = devices_per_node.value_or(largest);
  return data;
}

/// Reads and parses a measurements file.
inline CalibrationData read_calibration_file(const std::filesystem::path& path) {
  std::ifstream file(path, std::ios::binary);
  VERL_CHECK_ARG(file.good(), "{}: expected a readable measurements file, got none", path.string());
  std::ostringstream text;
  text << file.rdbuf();
  return parse_calibration(text.str(), path.string());
}

/// The role a timed stage runs: the actor (generation, reshard, old log-probs, its update), the
/// reference, or the critic (values, its update).
constexpr Role timed_stage_role(TimedStage s) noexcept {
  switch (s) {
    case TimedStage::gen:
    case TimedStage::reshard:
    case TimedStage::old_log_prob:
    case TimedStage::update_actor: return Role::actor;
    case TimedStage::ref: return Role::reference;
    case TimedStage::values:
    case TimedStage::update_critic: return Role::critic;
  }
  return Role::actor;
}

/// The cost model's work for a measured stage: the formulas `PlacementSearch` scores with, for
/// the layout the run used and the head of the stage's role (the run's model with the
/// language-model head for the actor and the reference, with a value head for the critic).
/// Generation keeps every sequence of a replica in flight (the CPU engine decodes its whole
/// share of the batch at once); the reshard's bytes are the plan's.
inline StageWork calibration_stage_work(const CalibrationData& data, const CalibrationStage& s) {
  const CalibrationRun& run = data.runs.at(s.run);
  const RoleCostModel cm =
      RoleCostModel::of(timed_stage_role(s.stage), data.model(run.model), run.batch, data.memory, data.cluster);
  switch (s.stage) {
    case TimedStage::gen: {
      const double per_replica =
          std::ceil(static_cast<double>(run.batch.sequences()) / static_cast<double>(run.gen.dp));
      return cm.generation_work(run.gen, per_replica);
    }
    case TimedStage::reshard: {
      const ReshardPlan<HybridFlow> plan(actor_reshard_geometry(run.actor, run.gen));
      const auto model_bytes = static_cast<std::int64_t>(std::ceil(cm.model.params * data.memory.param_bytes));
      return cm.reshard_work(run.actor, run.gen, static_cast<double>(plan.cost().bytes(model_bytes).comm_bytes_per_rank));
    }
    case TimedStage::old_log_prob: return cm.forward_work(run.actor);
    case TimedStage::ref: return cm.forward_work(*run.reference);
    case TimedStage::values: return cm.forward_work(*run.critic);
    case TimedStage::update_actor: return cm.update_work(run.actor);
    case TimedStage::update_critic: return cm.update_work(*run.critic);
  }
  return {};
}

/// Least squares on the same unknowns and relative-error rows as `calibrate_efficiency`, with
/// the physical constraint only: every unknown x = (1/e_c, 1/e_m, 1/e_i, 1/e_x, lambda, omega) >= 0,
/// since a stage's time is a sum of non-negative terms. Factors may come out above 1 (the stages
/// ran faster than the peak figures given say: peaks measured on a busy machine) or infinite (the
/// term's unknown is 0: the data give that term no time). Exact: the optimum of this convex
/// problem solves the unconstrained problem on the unknowns it leaves positive, so every subset
/// of the exercised unknowns (at most 2^6) is solved and the best feasible one kept. Factors no
/// measurement exercises keep their value in `initial`. Throws when no subset is determined.
inline Efficiency calibrate_efficiency_nonnegative(const ClusterSpec& cluster,
                                                    std::span<const StageMeasurement> measurements,
                                                    const Efficiency& initial = {}) {
  validate_cluster(cluster);
  const std::array<bool, efficiency_unknowns> used = detail::exercised_unknowns(cluster, measurements);
  std::vector<std::size_t> exercised;
  for (std::size_t k = 0; k < efficiency_unknowns; ++k) {
    if (used[k]) exercised.push_back(k);
  }
  VERL_CHECK_ARG(!exercised.empty(), "measurements: expected at least one with non-zero work, got {}",
                 measurements.size());
  const auto rows = static_cast<Eigen::Index>(measurements.size());
  double best_residual = std::numeric_limits<double>::infinity();
  std::array<double, efficiency_unknowns> best{};
  for (std::uint32_t mask = 1; mask < (1u << exercised.size()); ++mask) {
    std::vector<std::size_t> free;
    for (std::size_t j = 0; j < exercised.size(); ++j) {
      if (mask & (1u << j)) free.push_back(exercised[j]);
    }
    if (free.size() > measurements.size()) continue;
    Eigen::MatrixXd a(rows, static_cast<Eigen::Index>(free.size()));
    Eigen::VectorXd b = Eigen::VectorXd::Ones(rows);
    for (Eigen::Index i = 0; i < rows; ++i) {
      const StageMeasurement& m = measurements[static_cast<std::size_t>(i)];
      const std::array<double, efficiency_unknowns> row = detail::fit_columns(cluster, m.work);
      for (std::size_t j = 0; j < free.size(); ++j) a(i, static_cast<Eigen::Index>(j)) = row[free[j]] / m.seconds;
    }
    Eigen::VectorXd norms = a.colwise().norm().transpose();
    for (Eigen::Index j = 0; j < a.cols(); ++j) a.col(j) /= norms(j);
    const Eigen::ColPivHouseholderQR<Eigen::MatrixXd> qr(a);
    if (qr.rank() < a.cols()) continue;
    const Eigen::VectorXd y = qr.solve(b);
    if ((y.array() < 0).any()) continue;
    const double residual = (a * y - b).squaredNorm();
    if (residual < best_residual) {
      best_residual = residual;
      best = {};
      const Eigen::VectorXd x = y.cwiseQuotient(norms);
      for (std::size_t j = 0; j < free.size(); ++j) best[free[j]] = x(static_cast<Eigen::Index>(j));
    }
  }
  VERL_CHECK_ARG(std::isfinite(best_residual),
                 "measurements: expected work vectors that determine at least one factor, got none of the {} "
                 "subsets of the exercised factors solvable with non-negative values",
                 (1u << exercised.size()) - 1);
  Efficiency fitted = initial;
  std::array<double*, 4> factors{&fitted.compute, &fitted.memory, &fitted.intra_node, &fitted.inter_node};
  for (std::size_t k : exercised) {
    if (k < 4) {
      *factors[k] = best[k] > 0 ? 1 / best[k] : std::numeric_limits<double>::infinity();
    } else if (k == 4) {
      fitted.collective_latency = best[k];
    } else {
      fitted.call_overhead = best[k];
    }
  }
  return fitted;
}

/// One stage: measured and predicted.
struct CalibrationRow {
  std::string run;
  std::string stage;
  bool fit = false;
  bool modelled = true;  ///< false when the cost model gives it no work (a reshard that moves nothing)
  StageWork work;
  double measured = 0;
  double predicted = 0;
  double relative_error() const noexcept { return (predicted - measured) / measured; }
};

struct CalibrationResult {
  ClusterSpec cluster;
  Efficiency fitted;
  std::vector<CalibrationRow> rows;
  std::size_t fit_measurements = 0;
  bool strict = false;  ///< fitted with calibrate_efficiency (every factor in (0, 1])
};

/// Which efficiency factors to fit; the others keep their initial value. `strict`: fit with
/// `calibrate_efficiency`, which refuses a factor outside (0, 1]; otherwise with
/// `calibrate_efficiency_nonnegative`, which only keeps every term non-negative.
struct CalibrationFactors {
  bool compute = true, memory = true, intra_node = true, inter_node = true, collective_latency = true,
       call_overhead = true;
  bool strict = false;
};

/// Fits the efficiency factors on the stages of the `fit` runs that have work, then predicts
/// every stage with the fitted device model.
inline CalibrationResult calibrate_and_predict(const CalibrationData& data, const CalibrationFactors& factors = {}) {
  CalibrationResult out;
  out.strict = factors.strict;
  out.cluster = data.cluster;
  std::vector<StageMeasurement> fit;
  for (const CalibrationStage& s : data.stages) {
    const CalibrationRun& run = data.runs[s.run];
    CalibrationRow row;
    row.run = run.name;
    row.stage = std::string(timed_stage_name(s.stage));
    row.fit = run.fit;
    row.work = calibration_stage_work(data, s);
    row.measured = s.seconds;
    const StageWork& w = row.work;
    row.modelled = w.any();
    if (row.fit && row.modelled) fit.push_back({w, s.seconds});
    out.rows.push_back(std::move(row));
  }
  out.fit_measurements = fit.size();
  VERL_CHECK_ARG(!fit.empty(), "{}: expected stages of runs with set=fit that the cost model gives work, got none",
                 data.source);
  // A factor left out of the fit: its term is known, so it is moved to the time's side.
  const Efficiency& e0 = data.initial;
  const ClusterSpec& c = data.cluster;
  for (StageMeasurement& m : fit) {
    double known = 0;
    auto hold = [&](bool fitted, double& amount, double seconds_per_unit) {
      if (fitted) return;
      known += amount * seconds_per_unit;
      amount = 0;
    };
    hold(factors.compute, m.work.flops, 1 / (e0.compute * c.peak_flops));
    hold(factors.memory, m.work.hbm_bytes, 1 / (e0.memory * c.hbm_bandwidth));
    hold(factors.intra_node, m.work.intra_node_bytes, 1 / (e0.intra_node * c.intra_node_bandwidth));
    hold(factors.inter_node, m.work.inter_node_bytes, 1 / (e0.inter_node * c.inter_node_bandwidth));
    hold(factors.collective_latency, m.work.collectives, e0.collective_latency);
    hold(factors.call_overhead, m.work.calls, e0.call_overhead);
    VERL_CHECK_ARG(known < m.seconds,
                   "{}: a measured stage ({} s) is shorter than the terms of the factors held fixed ({} s); fit "
                   "more factors or lower the fixed ones",
                   data.source, m.seconds, known);
    m.seconds -= known;
  }
  std::erase_if(fit, [](const StageMeasurement& m) { return !m.work.any(); });
  out.fitted = factors.strict ? calibrate_efficiency(data.cluster, fit, data.initial)
                               : calibrate_efficiency_nonnegative(data.cluster, fit, data.initial);
  const DeviceModel device{data.cluster, out.fitted};
  for (CalibrationRow& row : out.rows) row.predicted = device.seconds(row.work);
  return out;
}

/// The result as a text table: the fitted factors, then each stage's measured and predicted
/// times and relative error, and the mean absolute relative error of the fit and held-out sets.
inline std::string format_calibration_table(const CalibrationResult& r) {
  std::string out = fmt::format(
      "device: {:.3g} FLOP/s, {:.3g} B/s memory, {:.3g} B/s link\n"
      "fitted on {} stages ({}): compute {:.3g}, memory {:.3g}, link {:.3g}, latency {:.3g} s per collective, "
      "overhead {:.3g} s per call\n\n",
      r.cluster.peak_flops, r.cluster.hbm_bandwidth, r.cluster.intra_node_bandwidth, r.fit_measurements,
      r.strict ? "every factor in (0, 1]" : "non-negative terms; a factor above 1 beats the peak given, inf: no time",
      r.fitted.compute, r.fitted.memory, r.fitted.intra_node, r.fitted.collective_latency, r.fitted.call_overhead);
  out += fmt::format("{:<26} {:<14} {:<8} {:>12} {:>12} {:>9}\n", "run", "stage", "set", "measured_s", "predicted_s",
                     "error");
  std::array<double, 2> sum{}, count{};
  for (const CalibrationRow& row : r.rows) {
    if (!row.modelled) {
      out += fmt::format("{:<26} {:<14} {:<8} {:>12.4g} {:>12} {:>9}\n", row.run, row.stage, row.fit ? "fit" : "predict",
                         row.measured, "-", "no work");
      continue;
    }
    out += fmt::format("{:<26} {:<14} {:<8} {:>12.4g} {:>12.4g} {:>+8.1f}%\n", row.run, row.stage,
                       row.fit ? "fit" : "predict", row.measured, row.predicted, 100 * row.relative_error());
    sum[row.fit ? 0 : 1] += std::abs(row.relative_error());
    count[row.fit ? 0 : 1] += 1;
  }
  for (std::size_t k = 0; k < 2; ++k) {
    if (count[k] > 0) {
      out += fmt::format("\nmean |error| over the {} stages ({}): {:.1f}%", k == 0 ? "fitted" : "held-out",
                         static_cast<int>(count[k]), 100 * sum[k] / count[k]);
    }
  }
  return out + "\n";
}

}  // namespace verl::parallel
