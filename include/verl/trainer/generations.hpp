// Generated samples as verl's trainer writes and prints them: _dump_generations (one JSONL file per
// step under trainer.rollout_data_dir / validation_data_dir) and _maybe_log_val_generations
// (trainer.log_val_generations samples on the console).
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "verl/core/error.hpp"
#include "verl/data/random_permutation.hpp"

namespace verl::trainer {

/// One generated sample as verl's _dump_generations / _maybe_log_val_generations see it.
struct Generation {
  std::string input, output, gts;
  double score = 0;
};

/// verl's _dump_generations: <dir>/<global_step>.jsonl, one line per sample with input, output,
/// gts, score and step (in that key order).
inline void dump_generations(const std::vector<Generation>& generations, const std::string& dir, std::int64_t global_step) {
  std::filesystem::create_directories(dir);
  const auto path = std::filesystem::path(dir) / (std::to_string(global_step) + ".jsonl");
  std::ofstream out(path);
  VERL_CHECK_ARG(out.good(), "trainer.rollout_data_dir / trainer.validation_data_dir: cannot write {}", path.string());
  for (const auto& g : generations) {
    nlohmann::ordered_json line;
    line["input"] = g.input;
    line["output"] = g.output;
    line["gts"] = g.gts;
    line["score"] = g.score;
    line["step"] = global_step;
    out << line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
  }
  VERL_CHECK_ARG(out.good(), "trainer.rollout_data_dir / trainer.validation_data_dir: writing {} failed", path.string());
}

/// verl's _maybe_log_val_generations: `count` samples, sorted by input and then shuffled with seed
/// 42 (a fixed choice, though not numpy's RandomState stream), printed to `out`.
inline void log_val_generations(std::vector<Generation> generations, std::int64_t count, std::int64_t global_step,
                                std::ostream& out) {
  if (count <= 0 || generations.empty()) return;
  std::stable_sort(generations.begin(), generations.end(),
                   [](const Generation& a, const Generation& b) { return a.input < b.input; });
  auto engine = data::seeded_engine(42);
  const auto order = data::random_permutation(static_cast<std::int64_t>(generations.size()), engine);
  const auto shown = std::min<std::size_t>(static_cast<std::size_t>(count), generations.size());
  out << fmt::format("validation generations (step {}, {} of {}):\n", global_step, shown, generations.size());
  for (std::size_t i = 0; i < shown; ++i) {
    const auto& g = generations[static_cast<std::size_t>(order[i])];
    out << fmt::format("[{}] input: {}\n    output: {}\n    score: {}\n", i + 1, g.input, g.output, g.score);
  }
  out.flush();
}

}  // namespace verl::trainer
