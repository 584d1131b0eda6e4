// verl's RLHFDataset: rows in verl's schema read from JSON Lines or Parquet files (by extension,
// data/parquet.hpp), optionally reduced to `max_samples` (a seeded random choice when shuffling,
// else the first rows), prompts rendered
// by a formatter (a chat template) and tokenized, overlong prompts filtered
// (`filter_overlong_prompts`) or truncated (`truncation`), and batches collated into a
// DataProto with left-padded `input_ids`, `attention_mask`, `position_ids` and the row's columns
// as non-tensor columns (data_source, raw_prompt, ability, reward_model, extra_info, index).
//
// Prompts are tokenized once, when the dataset is built; the tokenizer is not kept.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "verl/config.hpp"
#include "verl/core/error.hpp"
#include "verl/core/tensor.hpp"
#include "verl/data/data_proto.hpp"
#include "verl/data/dataloader.hpp"
#include "verl/data/jsonl.hpp"
#include "verl/data/parquet.hpp"
#include "verl/data/prompt_formatter.hpp"
#include "verl/data/random_permutation.hpp"
#include "verl/data/rlhf_row.hpp"
#include "verl/data/truncation.hpp"
#include "verl/tokenizer/concept.hpp"

namespace verl::data {

/// The data.* settings that shape a dataset (verl's names).
struct RLHFDatasetOptions {
  std::string prompt_key = "prompt";
  std::string data_source_key = "data_source";  ///< data.reward_fn_key
  std::int64_t max_prompt_length = 512;
  bool filter_overlong_prompts = false;
  Truncation truncation = Truncation::error;
  std::int64_t max_samples = -1;  ///< data.train_max_samples / val_max_samples; -1 keeps all
  bool shuffle = true;            ///< with max_samples: choose the rows at random (seeded)
  std::uint64_t seed = default_data_seed;
  /// Whether the tokenizer adds its special tokens (bos); false for chat templates, which write
  /// them into the text (as Hugging Face's apply_chat_template does).
  bool add_special_tokens = false;
};

/// One usable prompt: the row, its tokens (truncated to max_prompt_length) and where it came from.
struct RLHFSample {
  RLHFRow row;
  std::vector<tokenizer::TokenId> prompt_ids;
  SourceLocation source;
};

class RLHFDataset {
 public:
  RLHFDataset() = default;

  /// Reads every file (in order), then selects, tokenizes and filters as verl does.
  template <class Tok, class Formatter>
  static RLHFDataset load(std::span<const std::filesystem::path> files, const Tok& tokenizer, const Formatter& formatter,
                          const RLHFDatasetOptions& options) {
    VERL_CHECK_ARG(!files.empty(), "data files: expected at least one file, got none");
    std::vector<std::pair<RLHFRow, SourceLocation>> rows;
    for (const auto& file : files) {
      for_each_dataset_row(file, [&](nlohmann::json&& value, const SourceLocation& where) {
        rows.emplace_back(parse_rlhf_row(std::move(value), where, options.prompt_key, options.data_source_key), where);
      });
    }
    return from_rows(std::move(rows), tokenizer, formatter, options);
  }

  /// From rows already in memory (generated tasks); `where` names them in errors.
  template <class Tok, class Formatter>
  static RLHFDataset from_rows(std::vector<RLHFRow> rows, const Tok& tokenizer, const Formatter& formatter,
                               const RLHFDatasetOptions& options, std::string where = "<rows>") {
    std::vector<std::pair<RLHFRow, SourceLocation>> located;
    located.reserve(rows.size());
    for (std::size_t i = 0; i < rows.size(); ++i) located.emplace_back(std::move(rows[i]), SourceLocation{where, i + 1});
    return from_rows(std::move(located), tokenizer, formatter, options);
  }

  template <class Tok, class Formatter>
  static RLHFDataset from_rows(std::vector<std::pair<RLHFRow, SourceLocation>> rows, const Tok& tokenizer,
                               const Formatter& formatter, const RLHFDatasetOptions& options) {
    VERL_STATIC_ASSERT(tokenizer::Tokenizer<Tok>, THE_TOKENIZER_TYPE_DOES_NOT_SATISFY_THE_TOKENIZER_CONCEPT);
    VERL_STATIC_ASSERT(PromptFormatter<Formatter>, A_PROMPT_FORMATTER_MUST_RENDER_CHAT_MESSAGES_TO_TEXT);
    VERL_CHECK_ARG(options.max_prompt_length > 0, "max_prompt_length: expected a positive length, got {}",
                   options.max_prompt_length);
    RLHFDataset dataset;
    dataset.options_ = options;
    dataset.rows_read_ = static_cast<std::int64_t>(rows.size());
    // verl selects max_samples rows first (at random with a seed when shuffling), then filters.
    std::vector<std::int64_t> chosen;
    const auto total = static_cast<std::int64_t>(rows.size());
    if (options.max_samples > 0 && options.max_samples < total) {
      if (options.shuffle) {
        auto engine = seeded_engine(options.seed, /*stream=*/0x5e1ec7);
        chosen = random_permutation(total, engine);
        chosen.resize(static_cast<std::size_t>(options.max_samples));
      } else {
        for (std::int64_t i = 0; i < options.max_samples; ++i) chosen.push_back(i);
      }
    } else {
      for (std::int64_t i = 0; i < total; ++i) chosen.push_back(i);
    }
    dataset.samples_.reserve(chosen.size());
    for (const std::int64_t i : chosen) {
      auto& [row, where] = rows[static_cast<std::size_t>(i)];
      const std::string text = formatter.render(row.prompt, /*add_generation_prompt=*/true);
      std::vector<tokenizer::TokenId> ids;
      try {
        ids = tokenizer.encode(text, options.add_special_tokens);
      } catch (const InvalidArgument& error) {
        ::verl::detail::throw_invalid_argument("{}: cannot tokenize the prompt: {}", where.to_string(), error.what());
      }
      if (static_cast<std::int64_t>(ids.size()) > options.max_prompt_length) {
        if (options.filter_overlong_prompts) {
          ++dataset.filtered_;
          continue;
        }
        try {
          ids = truncate(std::span<const tokenizer::TokenId>(ids), options.max_prompt_length, options.truncation);
        } catch (const InvalidArgument& error) {
          ::verl::detail::throw_invalid_argument("{}: {}", where.to_string(), error.what());
        }
      }
      dataset.samples_.push_back(RLHFSample{std::move(row), std::move(ids), std::move(where)});
    }
    return dataset;
  }

  [[nodiscard]] std::int64_t size() const { return static_cast<std::int64_t>(samples_.size()); }
  [[nodiscard]] const RLHFSample& operator[](std::int64_t i) const {
    VERL_CHECK_ARG(i >= 0 && i < size(), "index: expected a sample index in [0, {}), got {}", size(), i);
    return samples_[static_cast<std::size_t>(i)];
  }
  [[nodiscard]] std::span<const RLHFSample> samples() const { return samples_; }
  /// Rows dropped by filter_overlong_prompts.
  [[nodiscard]] std::int64_t filtered_count() const { return filtered_; }
  [[nodiscard]] std::int64_t rows_read() const { return rows_read_; }
  [[nodiscard]] const RLHFDatasetOptions& options() const { return options_; }

  /// The samples at `indices` as a DataProto: input_ids / attention_mask / position_ids (int64,
  /// (B, max_prompt_length), left-padded with `pad_token_id`) and one non-tensor value per sample
  /// for data_source, raw_prompt, ability, reward_model, extra_info, index and any other column.
  [[nodiscard]] DataProto collate(std::span<const std::int64_t> indices, tokenizer::TokenId pad_token_id) const {
    const auto batch = static_cast<Index>(indices.size());
    const Index width = options_.max_prompt_length;
    MatrixI64 input_ids = MatrixI64::Constant(batch, width, pad_token_id);
    MatrixI64 attention_mask = MatrixI64::Zero(batch, width);
    MatrixI64 position_ids = MatrixI64::Zero(batch, width);
    std::vector<std::string> data_source, ability;
    std::vector<nlohmann::json> raw_prompt, reward_model, extra_info;
    std::vector<std::int64_t> index;
    std::map<std::string, std::vector<nlohmann::json>> others;
    for (Index b = 0; b < batch; ++b) {
      const RLHFSample& sample = (*this)[indices[static_cast<std::size_t>(b)]];
      const auto length = static_cast<Index>(sample.prompt_ids.size());
      const Index offset = width - length;  // left padding
      for (Index t = 0; t < length; ++t) {
        input_ids(b, offset + t) = sample.prompt_ids[static_cast<std::size_t>(t)];
        attention_mask(b, offset + t) = 1;
        position_ids(b, offset + t) = t;  // clip(cumsum(mask) - 1, 0)
      }
      data_source.push_back(sample.row.data_source);
      ability.push_back(sample.row.ability);
      nlohmann::json messages = nlohmann::json::array();
      for (const auto& message : sample.row.prompt) messages.push_back({{"role", message.role}, {"content", message.content}});
      raw_prompt.push_back(std::move(messages));
      reward_model.push_back({{"style", sample.row.reward_model.style}, {"ground_truth", sample.row.reward_model.ground_truth}});
      extra_info.push_back(sample.row.extra_info);
      index.push_back(sample.row.index());
      if (sample.row.other_columns.is_object()) {
        for (const auto& [key, value] : sample.row.other_columns.items()) {
          auto& column = others[key];
          column.resize(static_cast<std::size_t>(b));  // rows without the column get null
          column.push_back(value);
        }
      }
    }
    DataProto out;
    out.set("input_ids", std::move(input_ids));
    out.set("attention_mask", std::move(attention_mask));
    out.set("position_ids", std::move(position_ids));
    out.set_non_tensor(options_.data_source_key, std::move(data_source));
    out.set_non_tensor("raw_prompt", std::move(raw_prompt));
    out.set_non_tensor("ability", std::move(ability));
    out.set_non_tensor("reward_model", std::move(reward_model));
    out.set_non_tensor("extra_info", std::move(extra_info));
    out.set_non_tensor("index", std::move(index));
    for (auto& [key, column] : others) {
      column.resize(static_cast<std::size_t>(batch));
      out.set_non_tensor(key, std::move(column));
    }
    return out;
  }

 private:
  RLHFDatasetOptions options_;
  std::vector<RLHFSample> samples_;
  std::int64_t filtered_ = 0;
  std::int64_t rows_read_ = 0;
};

}  // namespace verl::data
