// Greedy accuracy of a policy on RLHF rows: each prompt is chat-templated, decoded greedily with
// the KV-cache rollout and scored by verl's default_compute_score for its data_source (the gsm8k
// scorer for the built-in arithmetic task). What verl's validation reports as
// val-core/<data_source>/reward/mean@1 with do_sample=False, without needing the trainer.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "verl/core/error.hpp"
#include "verl/data/rlhf_row.hpp"
#include "verl/tokenizer/pretrained.hpp"
#include "verl/reward/reward_score.hpp"
#include "verl/rollout/kv_cache_rollout.hpp"

namespace verl::trainer::tasks {

struct GreedyAccuracyOptions {
  std::int64_t max_new_tokens = 16;
  std::int64_t batch_size = 64;  ///< prompts per generate call
};

struct GreedyAccuracy {
  double mean_score = 0.0;
  std::int64_t count = 0;
  std::vector<std::string> responses;  ///< decoded, in row order
};

template <class Model>
GreedyAccuracy greedy_accuracy(Model& policy, const tokenizer::PretrainedTokenizer& tokenizer,
                               std::span<const data::RLHFRow> rows, const GreedyAccuracyOptions& options = {}) {
  VERL_CHECK_ARG(!rows.empty(), "rows: expected at least one row to evaluate, got none");
  VERL_CHECK_ARG(options.batch_size > 0, "batch_size: expected a positive batch size, got {}", options.batch_size);
  const auto special = tokenizer.tokenizer.special_ids();
  rollout::SamplingParams sampling;
  sampling.temperature = 0.0f;
  sampling.max_response_length = options.max_new_tokens;
  if (special.eos) sampling.eos_token_ids.push_back(*special.eos);
  sampling.pad_token_id = special.pad.value_or(0);
  rollout::KvCacheRollout engine(policy);
  GreedyAccuracy out;
  double total = 0.0;
  for (std::size_t begin = 0; begin < rows.size(); begin += static_cast<std::size_t>(options.batch_size)) {
    const std::size_t end = std::min(rows.size(), begin + static_cast<std::size_t>(options.batch_size));
    std::vector<std::vector<tokenizer::TokenId>> prompts;
    for (std::size_t i = begin; i < end; ++i) prompts.push_back(tokenizer.encode_chat(rows[i].prompt));
    const auto generated = engine.generate(rollout::PromptBatch::left_padded(prompts, sampling.pad_token_id), sampling);
    for (std::size_t i = begin; i < end; ++i) {
      const auto row = static_cast<Index>(i - begin);
      const Index length = generated.response_lengths[static_cast<std::size_t>(row)];
      const std::vector<tokenizer::TokenId> ids(generated.responses.row(row).data(),
                                            generated.responses.row(row).data() + length);
      std::string text = tokenizer.tokenizer.decode(ids, true);
      total += reward::default_compute_score(rows[i].data_source, text, rows[i].ground_truth_text()).score;
      out.responses.push_back(std::move(text));
    }
  }
  out.count = static_cast<std::int64_t>(rows.size());
  out.mean_score = total / static_cast<double>(rows.size());
  return out;
}

/// Every row of a JSON Lines file in verl's RLHF schema.
inline std::vector<data::RLHFRow> read_rlhf_rows(const std::filesystem::path& file) {
  std::vector<data::RLHFRow> rows;
  data::for_each_json_row(file, [&](nlohmann::json&& row, const data::SourceLocation& where) {
    rows.push_back(parse_rlhf_row(std::move(row), where));
  });
  return rows;
}

}  // namespace verl::trainer::tasks
