// verl's "file" logger: one JSON object per step, {"step": N, "data": {metric: value, ...}},
// written line by line (flushed at once, so a killed run keeps every logged step) to
// $VERL_FILE_LOGGER_PATH, or else <$VERL_FILE_LOGGER_ROOT or .>/<project>/<experiment>.jsonl.
// Like verl, a new logger truncates the file; `append` keeps earlier lines (resumed runs).
// Non-finite values are written as null (JSON has no NaN; orjson does the same).
#pragma once

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>

#include "verl/core/error.hpp"
#include "verl/core/metrics.hpp"
#include "verl/core/paths.hpp"
#include "verl/trainer/logging/logger_options.hpp"
#include "verl/trainer/logging/metrics_logger.hpp"

namespace verl::trainer {

namespace detail {

inline std::string environment(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? std::string() : std::string(value);
}

}  // namespace detail

/// Where verl's file logger writes for this project and experiment.
inline std::filesystem::path file_logger_path(std::string_view project_name, std::string_view experiment_name) {
  if (const std::string explicit_path = detail::environment("VERL_FILE_LOGGER_PATH"); !explicit_path.empty()) {
    return explicit_path;
  }
  std::string root = detail::environment("VERL_FILE_LOGGER_ROOT");
  if (root.empty()) root = ".";
  return io::expand_user(root) / std::string(project_name) / (std::string(experiment_name) + ".jsonl");
}

class FileLogger {
 public:
  static constexpr std::string_view name = "file";

  /// Opens verl's path for the project and experiment (creating folders).
  static FileLogger for_run(std::string_view project_name, std::string_view experiment_name, bool append = false) {
    return FileLogger(file_logger_path(project_name, experiment_name), append);
  }
  /// The file backend of a Tracking run (appending for a resumed run).
  static FileLogger open(const LoggerRun& run) {
    return for_run(run.project_name, run.experiment_name, run.options.append_file);
  }

  explicit FileLogger(std::filesystem::path path, bool append = false) : path_(std::move(path)) {
    if (path_.has_parent_path()) std::filesystem::create_directories(path_.parent_path());
    file_ = std::fopen(path_.c_str(), append ? "ab" : "wb");
    VERL_CHECK_ARG(file_ != nullptr, "file logger: cannot open '{}' for writing ({})", path_.string(),
                   std::strerror(errno));
  }
  FileLogger(const FileLogger&) = delete;
  FileLogger& operator=(const FileLogger&) = delete;
  FileLogger(FileLogger&& other) noexcept : path_(std::move(other.path_)), file_(std::exchange(other.file_, nullptr)) {}
  FileLogger& operator=(FileLogger&& other) noexcept {
    if (this != &other) {
      finish();
      path_ = std::move(other.path_);
      file_ = std::exchange(other.file_, nullptr);
    }
    return *this;
  }
  ~FileLogger() { finish(); }

  [[nodiscard]] const std::filesystem::path& path() const { return path_; }

  void log(const Metrics& metrics, std::int64_t step) {
    VERL_CHECK_ARG(file_ != nullptr, "file logger: log() after finish() for '{}'", path_.string());
    nlohmann::json data = nlohmann::json::object();
    for (const auto& [key, value] : metrics) data[key] = value;  // NaN/inf dump as null
    std::string line = nlohmann::json{{"step", step}, {"data", std::move(data)}}.dump();
    line += '\n';
    if (std::fwrite(line.data(), 1, line.size(), file_) != line.size() || std::fflush(file_) != 0) {
      ::verl::detail::throw_invalid_argument("file logger: cannot write to '{}' ({})", path_.string(),
                                             std::strerror(errno));
    }
  }

  void finish() {
    if (file_ != nullptr) {
      std::fclose(file_);
      file_ = nullptr;
    }
  }

 private:
  std::filesystem::path path_;
  std::FILE* file_ = nullptr;
};

static_assert(MetricsLogger<FileLogger>);

}  // namespace verl::trainer
