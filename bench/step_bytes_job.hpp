// The job the step-bytes benchmarks run (bench_megatron_step_bytes.cpp, bench_fsdp_step_bytes.cpp):
// a Llama-shaped model of a given shape, one step's batch, every rank's share of the training rows
// and of the prompts, and the byte tables' printing. Header-only, for those two programs.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "verl/model/hf_config.hpp"
#include "verl/model/transformer/transformer.hpp"
#include "verl/trainer/workers/actor_rollout_ref_worker.hpp"

namespace step_bench {

using namespace verl;

struct Shape {
  std::int64_t hidden, intermediate, layers, heads, kv_heads, vocab;
};
/// The model the job trains (the byte check's small one unless a program sets another).
inline Shape g_shape{64, 128, 4, 4, 4, 64};

inline model::Transformer make_model(const Shape& s) {
  const nlohmann::json json = {{"model_type", "llama"},          {"hidden_size", s.hidden},
                               {"intermediate_size", s.intermediate}, {"num_hidden_layers", s.layers},
                               {"num_attention_heads", s.heads}, {"num_key_value_heads", s.kv_heads},
                               {"vocab_size", s.vocab},          {"rms_norm_eps", 1e-6},
                               {"max_position_embeddings", 256}, {"eos_token_id", 1},
                               {"tie_word_embeddings", false}};
  return model::Transformer::random(model::HfModelConfig::from_json(json, "bench llama"), {.initializer_range = 0.2, .seed = 5},
                                    {.num_threads = 1});
}

struct BenchModels {
  using policy_type = model::Transformer;
  static model::Transformer actor(const trainer::PPOConfig&) { return make_model(g_shape); }
  static model::Transformer reference(const trainer::PPOConfig& config, const model::Transformer&) { return actor(config); }
};

/// One step's batch sizes (per job): rows, prompt and response lengths, micro-batch rows.
struct Batch {
  std::int64_t rows = 8, prompt = 8, response = 8, micro = 2;
};
inline Batch g_batch;

/// Share `share` of `shares` of the job's training rows: every token valid (attention mask all
/// ones), so that a micro-batch of m rows has m (prompt + response) tokens.
inline data::DataProto training_rows(const Batch& b, int share, int shares, int step) {
  const Index mine = b.rows / shares, first = share * mine, width = b.prompt + b.response;
  MatrixI64 input_ids(mine, width), position_ids(mine, width);
  MatrixF attention_mask = MatrixF::Ones(mine, width), response_mask = MatrixF::Ones(mine, b.response);
  MatrixF advantages(mine, b.response);
  for (Index r = 0; r < mine; ++r) {
    const Index g = first + r;
    for (Index c = 0; c < width; ++c) {
      input_ids(r, c) = (g * 7 + c * 3 + step * 11) % (g_shape.vocab - 2) + 2;
      position_ids(r, c) = c;
    }
    for (Index c = 0; c < b.response; ++c) advantages(r, c) = static_cast<float>((g * b.response + c) % 5) - 2.0f;
  }
  data::DataProto batch;
  batch.set(std::string(trainer::keys::input_ids), input_ids);
  batch.set(std::string(trainer::keys::attention_mask), attention_mask);
  batch.set(std::string(trainer::keys::position_ids), position_ids);
  batch.set(std::string(trainer::keys::response_mask), response_mask);
  batch.set(std::string(trainer::keys::advantages), advantages);
  return batch;
}

/// Share `share` of `shares` of the job's prompts, with the sampling settings and per-row seeds.
inline data::DataProto generation_prompts(const Batch& b, int share, int shares) {
  const Index mine = b.rows / shares, first = share * mine;
  MatrixI64 input_ids(mine, b.prompt);
  for (Index r = 0; r < mine; ++r)
    for (Index c = 0; c < b.prompt; ++c) input_ids(r, c) = ((first + r) * 5 + c) % (g_shape.vocab - 3) + 3;
  data::DataProto batch;
  batch.set(std::string(trainer::keys::input_ids), input_ids);
  batch.set(std::string(trainer::keys::attention_mask), MatrixF(MatrixF::Ones(mine, b.prompt)));
  rollout::SamplingParams params;
  params.temperature = 1.0f;
  params.n = 1;
  params.max_response_length = b.response;
  params.eos_token_ids = {1};
  params.pad_token_id = 0;
  params.seed = 9;
  batch.meta_info()["sampling_params"] = trainer::sampling_params_to_json(params);
  std::vector<std::int64_t> seeds;
  for (Index r = 0; r < mine; ++r) seeds.push_back(100 + first + r);
  batch.set_non_tensor(std::string(trainer::keys::seed), std::move(seeds));
  return batch;
}

inline std::string human(double bytes) {
  if (bytes == 0) return "0";
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) {
    bytes /= 1024;
    ++u;
  }
  return u == 0 ? fmt::format("{:.0f} B", bytes) : fmt::format("{:.2f} {}", bytes, units[u]);
}

/// A markdown table: one column per mesh (`names`), one row per entry of `rows` plus the total
/// (each column holds rows.size() + 1 figures); the cells of row `not_available` print "n/a".
inline void print_byte_table(const std::vector<std::string>& names, const std::vector<std::string_view>& rows,
                             const std::vector<std::vector<double>>& columns, int not_available = -1) {
  fmt::print("| collective (bytes moved per rank per step, max over ranks) |");
  for (const auto& name : names) fmt::print(" {} |", name);
  fmt::print("\n| --- |");
  for (std::size_t i = 0; i < names.size(); ++i) fmt::print(" ---: |");
  fmt::print("\n");
  for (std::size_t r = 0; r <= rows.size(); ++r) {
    fmt::print("| {} |", r < rows.size() ? rows[r] : std::string_view("**total**"));
    for (const auto& col : columns) fmt::print(" {} |", static_cast<int>(r) == not_available ? "n/a" : human(col[r]));
    fmt::print("\n");
  }
}

}  // namespace step_bench
