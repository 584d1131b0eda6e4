// TensorBoard event files written by hand (TFRecord framing, masked CRC-32C, Event/Summary wire
// format), read back with the `tensorboard` package from PyPI when it is installed.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "verl/trainer/logging/tensorboard_logger.hpp"

using namespace verl;
using namespace verl::trainer;
namespace fs = std::filesystem;

namespace {

std::span<const std::byte> bytes_of(std::string_view text) {
  return std::as_bytes(std::span<const char>(text.data(), text.size()));
}

fs::path temp_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("verl_tb_test_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(dir);
  return dir;
}

std::string run(const std::string& command) {
  std::string out;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return out;
  std::array<char, 4096> buffer{};
  while (std::fgets(buffer.data(), buffer.size(), pipe) != nullptr) out += buffer.data();
  ::pclose(pipe);
  return out;
}

}  // namespace

TEST(Crc32c, KnownVectors) {
  // RFC 3720 / iSCSI check value.
  EXPECT_EQ(trainer::detail::crc32c(bytes_of("123456789")), 0xE3069283u);
  EXPECT_EQ(trainer::detail::crc32c(bytes_of("")), 0u);
  const std::array<std::byte, 32> zeros{};
  EXPECT_EQ(trainer::detail::crc32c(zeros), 0x8A9136AAu);
}

TEST(TensorboardLogger, FramesRecordsAsTfRecord) {
  const std::string payload = "hello";
  const auto record = trainer::detail::frame_record(bytes_of(payload));
  ASSERT_EQ(record.size(), 8u + 4u + payload.size() + 4u);
  EXPECT_EQ(static_cast<int>(record[0]), 5);
  for (int i = 1; i < 8; ++i) EXPECT_EQ(static_cast<int>(record[static_cast<std::size_t>(i)]), 0);
  auto u32 = [&](std::size_t at) {
    std::uint32_t v = 0;
    for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<std::uint32_t>(record[at + static_cast<std::size_t>(i)]);
    return v;
  };
  EXPECT_EQ(u32(8), trainer::detail::masked_crc32c(std::span<const std::byte>(record.data(), 8)));
  EXPECT_EQ(u32(12 + payload.size()), trainer::detail::masked_crc32c(bytes_of(payload)));
  // Event{step: 3} with one simple_value: the wire bytes we expect.
  const auto event = trainer::detail::encode_scalars_event({{"a", 1.0}}, 3, 0.0);
  const std::vector<std::byte> expected = {
      std::byte{0x09}, std::byte{0}, std::byte{0}, std::byte{0}, std::byte{0}, std::byte{0}, std::byte{0}, std::byte{0},
      std::byte{0},    std::byte{0x10}, std::byte{3},  // step
      std::byte{0x2A}, std::byte{10},                  // summary, 10 bytes
      std::byte{0x0A}, std::byte{8},                   // value, 8 bytes
      std::byte{0x0A}, std::byte{1}, std::byte{'a'},   // tag
      std::byte{0x15}, std::byte{0}, std::byte{0}, std::byte{0x80}, std::byte{0x3F}};  // simple_value 1.0f
  EXPECT_EQ(event, expected);
}

TEST(TensorboardLogger, LogDirFollowsVerl) {
  ::unsetenv("TENSORBOARD_DIR");
  EXPECT_EQ(tensorboard_log_dir("proj", "exp"), fs::path("tensorboard_log") / "proj" / "exp");
  ::setenv("TENSORBOARD_DIR", "/tmp/tb_here", 1);
  EXPECT_EQ(tensorboard_log_dir("proj", "exp"), fs::path("/tmp/tb_here"));
  ::unsetenv("TENSORBOARD_DIR");
}

TEST(TensorboardLogger, ReadBackByTheTensorboardPackage) {
  if (std::system("python3 -c 'import tensorboard' > /dev/null 2>&1") != 0) {
    GTEST_SKIP() << "the `tensorboard` Python package is not installed (pip install tensorboard); "
                    "the event files were not read back";
  }
  const fs::path dir = temp_dir("readback");
  fs::path file;
  {
    TensorboardLogger logger(dir);
    file = logger.path();
    for (int step = 1; step <= 3; ++step) {
      logger.log({{"critic/score/mean", 0.25 * step}, {"actor/pg_loss", -0.5 * step}, {"perf/throughput", 1000.0}},
                 step);
    }
  }
  EXPECT_EQ(file.filename().string().rfind("events.out.tfevents.", 0), 0u);
  const std::string script =
      "import json, sys\n"
      "from tensorboard.backend.event_processing import event_accumulator as ea\n"
      "acc = ea.EventAccumulator(sys.argv[1]); acc.Reload()\n"
      "out = {tag: [[e.step, e.value] for e in acc.Scalars(tag)] for tag in acc.Tags()['scalars']}\n"
      "print(json.dumps(out))\n";
  const fs::path script_path = dir / "read_events.py";
  std::ofstream(script_path) << script;
  const std::string output = run("python3 " + script_path.string() + " " + dir.string() + " 2>&1");
  nlohmann::json scalars;
  ASSERT_NO_THROW(scalars = nlohmann::json::parse(output.substr(output.find('{')))) << output;
  EXPECT_EQ(scalars["critic/score/mean"], nlohmann::json::parse("[[1, 0.25], [2, 0.5], [3, 0.75]]"));
  EXPECT_EQ(scalars["actor/pg_loss"], nlohmann::json::parse("[[1, -0.5], [2, -1.0], [3, -1.5]]"));
  EXPECT_EQ(scalars["perf/throughput"][2], nlohmann::json::parse("[3, 1000.0]"));
  fs::remove_all(dir);
}
