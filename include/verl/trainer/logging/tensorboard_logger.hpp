// verl's "tensorboard" logger: TensorBoard event files under $TENSORBOARD_DIR, or else
// tensorboard_log/<project>/<experiment>, written without TensorFlow or protobuf libraries.
//
// An event file is a sequence of TFRecords (little-endian uint64 length, masked CRC-32C of the
// length, the bytes, masked CRC-32C of the bytes) holding tensorflow.Event messages: first one
// with file_version "brain.Event:2", then one per logged step whose Summary has a
// {tag, simple_value} entry per metric (what torch's SummaryWriter.add_scalar writes).
#pragma once

#include <fmt/format.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "verl/core/error.hpp"
#include "verl/core/metrics.hpp"
#include "verl/trainer/logging/detail/crc32c.hpp"
#include "verl/trainer/logging/detail/protobuf_writer.hpp"
#include "verl/trainer/logging/file_logger.hpp"
#include "verl/trainer/logging/logger_options.hpp"
#include "verl/trainer/logging/metrics_logger.hpp"

#if defined(__unix__) || defined(__APPLE__)
#include <unistd.h>
#endif

namespace verl::trainer {

/// Where verl's tensorboard logger writes for this project and experiment.
inline std::filesystem::path tensorboard_log_dir(std::string_view project_name, std::string_view experiment_name) {
  if (const std::string dir = detail::environment("TENSORBOARD_DIR"); !dir.empty()) return dir;
  return std::filesystem::path("tensorboard_log") / std::string(project_name) / std::string(experiment_name);
}

namespace detail {

inline double wall_time_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

inline std::string host_name() {
#if defined(__unix__) || defined(__APPLE__)
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) == 0 && name[0] != '\0') return name;
#endif
  return "localhost";
}

inline long process_id() {
#if defined(__unix__) || defined(__APPLE__)
  return static_cast<long>(::getpid());
#else
  return 0;
#endif
}

/// Event{wall_time = 1, step = 2, file_version = 3, summary = 5}.
inline std::vector<std::byte> encode_file_version_event(double wall_time) {
  ProtobufWriter event;
  event.double_field(1, wall_time);
  event.bytes_field(3, "brain.Event:2");
  return event.bytes();
}

/// An Event with Summary{value = 1: Value{tag = 1, simple_value = 2}} for every metric.
inline std::vector<std::byte> encode_scalars_event(const Metrics& metrics, std::int64_t step, double wall_time) {
  ProtobufWriter summary;
  for (const auto& [tag, value] : metrics) {
    ProtobufWriter entry;
    entry.bytes_field(1, tag);
    entry.float_field(2, static_cast<float>(value));
    summary.message_field(1, entry);
  }
  ProtobufWriter event;
  event.double_field(1, wall_time);
  event.int64_field(2, step);
  event.message_field(5, summary);
  return event.bytes();
}

/// The TFRecord framing of one record.
inline std::vector<std::byte> frame_record(std::span<const std::byte> data) {
  std::vector<std::byte> out(8 + 4 + data.size() + 4);
  const std::uint64_t length = data.size();
  for (int i = 0; i < 8; ++i) out[static_cast<std::size_t>(i)] = static_cast<std::byte>((length >> (8 * i)) & 0xFF);
  auto put_u32 = [&](std::size_t at, std::uint32_t value) {
    for (int i = 0; i < 4; ++i) out[at + static_cast<std::size_t>(i)] = static_cast<std::byte>((value >> (8 * i)) & 0xFF);
  };
  put_u32(8, masked_crc32c(std::span<const std::byte>(out.data(), 8)));
  if (!data.empty()) std::memcpy(out.data() + 12, data.data(), data.size());
  put_u32(12 + data.size(), masked_crc32c(data));
  return out;
}

}  // namespace detail

class TensorboardLogger {
 public:
  static constexpr std::string_view name = "tensorboard";

  /// A new event file in verl's folder for the project and experiment.
  static TensorboardLogger for_run(std::string_view project_name, std::string_view experiment_name) {
    return TensorboardLogger(tensorboard_log_dir(project_name, experiment_name));
  }
  /// The TensorBoard backend of a Tracking run.
  static TensorboardLogger open(const LoggerRun& run) { return for_run(run.project_name, run.experiment_name); }

  /// A new event file in `log_dir` (created if needed), named as TensorBoard's writers name them.
  explicit TensorboardLogger(const std::filesystem::path& log_dir) {
    static std::atomic<unsigned> unique{0};
    std::filesystem::create_directories(log_dir);
    const double now = detail::wall_time_now();
    path_ = log_dir / fmt::format("events.out.tfevents.{:010d}.{}.{}.{}", static_cast<long long>(now),
                                  detail::host_name(), detail::process_id(), unique.fetch_add(1));
    file_ = std::fopen(path_.c_str(), "wb");
    VERL_CHECK_ARG(file_ != nullptr, "tensorboard logger: cannot create '{}' ({})", path_.string(), std::strerror(errno));
    write_record(detail::encode_file_version_event(now));
  }
  TensorboardLogger(const TensorboardLogger&) = delete;
  TensorboardLogger& operator=(const TensorboardLogger&) = delete;
  TensorboardLogger(TensorboardLogger&& other) noexcept
      : path_(std::move(other.path_)), file_(std::exchange(other.file_, nullptr)) {}
  ~TensorboardLogger() { finish(); }

  [[nodiscard]] const std::filesystem::path& path() const { return path_; }

  void log(const Metrics& metrics, std::int64_t step) {
    VERL_CHECK_ARG(file_ != nullptr, "tensorboard logger: log() after finish() for '{}'", path_.string());
    write_record(detail::encode_scalars_event(metrics, step, detail::wall_time_now()));
  }

  void finish() {
    if (file_ != nullptr) {
      std::fclose(file_);
      file_ = nullptr;
    }
  }

 private:
  void write_record(std::span<const std::byte> event) {
    const auto record = detail::frame_record(event);
    if (std::fwrite(record.data(), 1, record.size(), file_) != record.size() || std::fflush(file_) != 0) {
      ::verl::detail::throw_invalid_argument("tensorboard logger: cannot write to '{}' ({})", path_.string(),
                                             std::strerror(errno));
    }
  }

  std::filesystem::path path_;
  std::FILE* file_ = nullptr;
};

static_assert(MetricsLogger<TensorboardLogger>);

}  // namespace verl::trainer
