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
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "verl/core/error.hpp"
#include "verl/core/file_io.hpp"
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
  static FileLogger for_run(std::string_view project_name, std::string_view experiment_name,
                            std::optional<std::int64_t> resumed_at_step = std::nullopt) {
    return FileLogger(file_logger_path(project_name, experiment_name), resumed_at_step);
  }
  /// The file backend of a Tracking run (continuing the log of a resumed run).
  static FileLogger open(const LoggerRun& run) {
    return for_run(run.project_name, run.experiment_name, run.options.resumed_at_step);
  }

  /// A new run's log: an earlier non-empty file there is never overwritten but kept as
  /// `<path>.1` (or the next free number), said on stderr. A run resumed from the checkpoint of
  /// `resumed_at_step` continues the file: lines of later steps (logged before the run stopped,
  /// about to be logged again) and a torn last line are dropped, so every step appears once.
  explicit FileLogger(std::filesystem::path path, std::optional<std::int64_t> resumed_at_step = std::nullopt)
      : path_(std::move(path)) {
    if (path_.has_parent_path()) std::filesystem::create_directories(path_.parent_path());
    std::error_code error;
    const bool earlier = std::filesystem::is_regular_file(path_, error) && std::filesystem::file_size(path_, error) > 0;
    if (earlier && !resumed_at_step) keep_aside();
    if (earlier && resumed_at_step) keep_lines_up_to(*resumed_at_step);
    file_ = std::fopen(path_.c_str(), resumed_at_step ? "ab" : "wb");
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
  /// Where an earlier run's log was kept, when this run found one.
  [[nodiscard]] const std::optional<std::filesystem::path>& kept_aside() const { return kept_aside_; }

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
  void keep_aside() {
    for (int n = 1;; ++n) {
      std::filesystem::path aside = path_;
      aside += "." + std::to_string(n);
      if (std::filesystem::exists(aside)) continue;
      std::filesystem::rename(path_, aside);
      std::fprintf(stderr, "file logger: '%s' held an earlier run's log; kept it as '%s'\n", path_.c_str(), aside.c_str());
      kept_aside_ = aside;
      return;
    }
  }

  void keep_lines_up_to(std::int64_t step) {
    const std::string text = io::read_text_file(path_);
    std::string kept;
    std::size_t dropped = 0;
    for (std::size_t begin = 0; begin < text.size();) {
      const std::size_t end = text.find('\n', begin);
      if (end == std::string::npos) {  // a line the stopped run did not finish
        ++dropped;
        break;
      }
      const std::string_view line(text.data() + begin, end - begin);
      const nlohmann::json parsed = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      const bool keep = parsed.is_object() && parsed.contains("step") && parsed["step"].is_number_integer() &&
                        parsed["step"].get<std::int64_t>() <= step;
      if (keep) {
        kept.append(line);
        kept += '\n';
      } else {
        ++dropped;
      }
      begin = end + 1;
    }
    if (dropped == 0) return;
    io::write_file_atomically(path_, kept);
    std::fprintf(stderr, "file logger: resuming at step %lld; dropped %zu line(s) of '%s' logged after it\n",
                 static_cast<long long>(step), dropped, path_.c_str());
  }

  std::filesystem::path path_;
  std::FILE* file_ = nullptr;
  std::optional<std::filesystem::path> kept_aside_;
};

static_assert(MetricsLogger<FileLogger>);

}  // namespace verl::trainer
