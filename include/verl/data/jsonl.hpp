// JSON Lines files (one JSON value per line), the form verl's row schema takes without Arrow.
// Errors name the file and the 1-based line; a leading "~" in a path is the home folder. A ".json" file may also hold one top-level array
// of rows (what Hugging Face's "json" loader accepts besides JSON Lines). Parquet files are read by
// for_each_dataset_row (verl/data/parquet.hpp, with Apache Arrow); this reader rejects them.
#pragma once

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstddef>
#include <filesystem>
#include <fstream>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "verl/core/error.hpp"
#include "verl/core/paths.hpp"
#include "verl/core/file_io.hpp"

namespace verl::data {

/// Where a row came from, for error messages ("file:line").
struct SourceLocation {
  std::string file;
  std::size_t line = 0;  ///< 1-based; 0 when unknown
  [[nodiscard]] std::string to_string() const { return line == 0 ? file : fmt::format("{}:{}", file, line); }
};

namespace detail {

inline bool has_extension(const std::filesystem::path& path, std::string_view extension) {
  return path.extension().string() == extension;
}

inline void reject_unsupported_format(const std::filesystem::path& path) {
  if (has_extension(path, ".parquet")) {
    ::verl::detail::throw_invalid_argument(
        "data file '{}': this reader takes JSON Lines, not Parquet (RL datasets read Parquet through Apache Arrow, "
        "verl/data/parquet.hpp); convert it to JSON Lines "
        "(e.g. pandas.read_parquet(path).to_json(out, orient='records', lines=True))",
        path.string());
  }
  VERL_CHECK_ARG(has_extension(path, ".jsonl") || has_extension(path, ".json"),
                 "data file '{}': expected a .jsonl or .json file (JSON Lines in verl's row schema)", path.string());
}

}  // namespace detail

/// Calls `on_row(value, location)` for every row of a .jsonl / .json file; blank lines are
/// skipped. Malformed JSON is an error naming the file and line.
inline void for_each_json_row(const std::filesystem::path& given_path,
                              const std::function<void(nlohmann::json&&, const SourceLocation&)>& on_row) {
  const std::filesystem::path path = io::expand_user(given_path.string());
  detail::reject_unsupported_format(path);
  VERL_CHECK_ARG(std::filesystem::is_regular_file(path), "data file '{}': no such file", path.string());
  const std::string text = io::read_text_file(path);
  const std::string file = path.string();
  std::size_t first = text.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && text[first] == '[' && detail::has_extension(path, ".json")) {
    nlohmann::json rows;
    try {
      rows = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& error) {
      ::verl::detail::throw_invalid_argument("{}: invalid JSON ({})", file, error.what());
    }
    for (std::size_t i = 0; i < rows.size(); ++i) on_row(std::move(rows[i]), SourceLocation{file + "[" + std::to_string(i) + "]", 0});
    return;
  }
  std::size_t line_number = 0;
  std::size_t begin = 0;
  while (begin <= text.size()) {
    std::size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    ++line_number;
    std::string_view line(text.data() + begin, end - begin);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.find_first_not_of(" \t") != std::string_view::npos) {
      nlohmann::json value;
      try {
        value = nlohmann::json::parse(line);
      } catch (const nlohmann::json::exception& error) {
        ::verl::detail::throw_invalid_argument("{}:{}: invalid JSON ({})", file, line_number, error.what());
      }
      on_row(std::move(value), SourceLocation{file, line_number});
    }
    if (end == text.size()) break;
    begin = end + 1;
  }
}

/// Writes `rows` as JSON Lines, atomically (a reader never sees half a file).
inline void write_jsonl(const std::filesystem::path& path, std::span<const nlohmann::json> rows) {
  std::string text;
  for (const auto& row : rows) {
    text += row.dump();
    text += '\n';
  }
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path());
  io::write_file_atomically(path, text);
}

}  // namespace verl::data
