// One row of verl's RLHF dataset schema:
//   {"data_source": "openai/gsm8k", "prompt": [{"role": "user", "content": "..."}],
//    "ability": "math", "reward_model": {"style": "rule", "ground_truth": "72"},
//    "extra_info": {"split": "train", "index": 0, ...}}
// parsed with errors that name the file, line and field. Columns beyond these are kept as they
// are (verl passes every column on to the batch).
#pragma once

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "verl/core/error.hpp"
#include "verl/data/jsonl.hpp"
#include "verl/tokenizer/chat_template.hpp"

namespace verl::data {

/// The "reward_model" column: how to score the response and against what.
struct RewardModelInfo {
  std::string style = "rule";
  nlohmann::json ground_truth;  ///< usually a string; numbers and lists occur in some datasets
  friend bool operator==(const RewardModelInfo&, const RewardModelInfo&) = default;
};

struct RLHFRow {
  std::string data_source;
  std::vector<tokenizer::ChatMessage> prompt;
  std::string ability;
  RewardModelInfo reward_model;
  nlohmann::json extra_info = nlohmann::json::object();
  nlohmann::json other_columns = nlohmann::json::object();  ///< any further columns, unchanged

  /// The ground truth as a scorer takes it: a string as is, anything else as its JSON text.
  [[nodiscard]] std::string ground_truth_text() const {
    if (reward_model.ground_truth.is_string()) return reward_model.ground_truth.get<std::string>();
    if (reward_model.ground_truth.is_null()) return {};
    return reward_model.ground_truth.dump();
  }
  /// extra_info["index"] when present (verl's per-prompt index), else 0 as verl defaults it.
  [[nodiscard]] std::int64_t index() const {
    if (extra_info.is_object() && extra_info.contains("index") && extra_info["index"].is_number_integer())
      return extra_info["index"].get<std::int64_t>();
    return 0;
  }
  friend bool operator==(const RLHFRow&, const RLHFRow&) = default;
};

namespace detail {

template <class... Args>
[[noreturn]] void row_error(const SourceLocation& where, fmt::format_string<Args...> format, Args&&... args) {
  throw InvalidArgument(fmt::format("{}: {}", where.to_string(), fmt::format(format, std::forward<Args>(args)...)));
}

inline std::string require_string(const nlohmann::json& row, std::string_view key, const SourceLocation& where) {
  const auto found = row.find(key);
  if (found == row.end()) row_error(where, "missing field '{}'", key);
  if (!found->is_string()) row_error(where, "field '{}': expected a string, got {}", key, found->type_name());
  return found->get<std::string>();
}

}  // namespace detail

/// Parses one row. `prompt_key` is data.prompt_key ("prompt"); the prompt must be a list of
/// {"role": string, "content": string} messages (multimodal content lists are not supported).
inline RLHFRow parse_rlhf_row(nlohmann::json row, const SourceLocation& where, std::string_view prompt_key = "prompt",
                              std::string_view data_source_key = "data_source") {
  if (!row.is_object()) detail::row_error(where, "expected a JSON object (one dataset row), got {}", row.type_name());
  RLHFRow out;
  out.data_source = detail::require_string(row, data_source_key, where);

  const auto prompt = row.find(prompt_key);
  if (prompt == row.end()) detail::row_error(where, "missing field '{}' (data.prompt_key)", prompt_key);
  if (!prompt->is_array()) {
    detail::row_error(where, "field '{}': expected a list of {{role, content}} messages, got {}", prompt_key,
                      prompt->type_name());
  }
  if (prompt->empty()) detail::row_error(where, "field '{}': expected at least one message, got an empty list", prompt_key);
  for (std::size_t i = 0; i < prompt->size(); ++i) {
    const auto& message = (*prompt)[i];
    if (!message.is_object()) detail::row_error(where, "{}[{}]: expected a {{role, content}} object, got {}", prompt_key, i, message.type_name());
    const auto role = message.find("role");
    const auto content = message.find("content");
    if (role == message.end() || !role->is_string()) detail::row_error(where, "{}[{}].role: expected a string", prompt_key, i);
    if (content == message.end()) detail::row_error(where, "{}[{}]: missing field 'content'", prompt_key, i);
    if (!content->is_string()) {
      detail::row_error(where, "{}[{}].content: expected a string, got {} (multimodal content is not supported by verl-cpp yet)",
                        prompt_key, i, content->type_name());
    }
    out.prompt.push_back({role->get<std::string>(), content->get<std::string>()});
  }

  if (const auto ability = row.find("ability"); ability != row.end() && !ability->is_null()) {
    if (!ability->is_string()) detail::row_error(where, "field 'ability': expected a string, got {}", ability->type_name());
    out.ability = ability->get<std::string>();
  }
  if (const auto reward = row.find("reward_model"); reward != row.end() && !reward->is_null()) {
    if (!reward->is_object()) detail::row_error(where, "field 'reward_model': expected an object, got {}", reward->type_name());
    if (const auto style = reward->find("style"); style != reward->end() && !style->is_null()) {
      if (!style->is_string()) detail::row_error(where, "reward_model.style: expected a string, got {}", style->type_name());
      out.reward_model.style = style->get<std::string>();
    }
    if (const auto truth = reward->find("ground_truth"); truth != reward->end()) out.reward_model.ground_truth = *truth;
  }
  if (const auto extra = row.find("extra_info"); extra != row.end() && !extra->is_null()) {
    if (!extra->is_object()) detail::row_error(where, "field 'extra_info': expected an object, got {}", extra->type_name());
    out.extra_info = *extra;
  }
  for (auto& [key, value] : row.items()) {
    if (key == data_source_key || key == prompt_key || key == "ability" || key == "reward_model" || key == "extra_info")
      continue;
    out.other_columns[key] = std::move(value);
  }
  return out;
}

/// The row in verl's schema again (for writing generated datasets).
inline nlohmann::json to_json(const RLHFRow& row, std::string_view prompt_key = "prompt") {
  nlohmann::json out = row.other_columns.is_object() ? row.other_columns : nlohmann::json::object();
  out["data_source"] = row.data_source;
  nlohmann::json messages = nlohmann::json::array();
  for (const auto& message : row.prompt) messages.push_back({{"role", message.role}, {"content", message.content}});
  out[std::string(prompt_key)] = std::move(messages);
  out["ability"] = row.ability;
  out["reward_model"] = {{"style", row.reward_model.style}, {"ground_truth", row.reward_model.ground_truth}};
  out["extra_info"] = row.extra_info;
  return out;
}

}  // namespace verl::data
