// The trainer.logger backends: verl's JSON Lines file logger, the console logger, the Tracking
// fan-out and the SVG reward plot.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "verl/trainer/logging/console_logger.hpp"
#include "verl/trainer/logging/file_logger.hpp"
#include "verl/trainer/logging/tracking.hpp"
#include "verl/trainer/logging/svg_plot.hpp"

using namespace verl;
using namespace verl::trainer;
namespace fs = std::filesystem;

namespace {

/// A fresh folder under the system temp dir, removed at the end of the test.
struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("verl_logger_test_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

/// Sets an environment variable for the scope of the object.
struct ScopedEnv {
  std::string name;
  std::optional<std::string> previous;
  ScopedEnv(std::string n, const std::optional<std::string>& value) : name(std::move(n)) {
    if (const char* old = std::getenv(name.c_str())) previous = old;
    if (value) {
      ::setenv(name.c_str(), value->c_str(), 1);
    } else {
      ::unsetenv(name.c_str());
    }
  }
  ~ScopedEnv() {
    if (previous) {
      ::setenv(name.c_str(), previous->c_str(), 1);
    } else {
      ::unsetenv(name.c_str());
    }
  }
};

std::vector<nlohmann::json> read_lines(const fs::path& path) {
  std::ifstream in(path);
  std::vector<nlohmann::json> out;
  for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
  return out;
}

}  // namespace

static_assert(MetricsLogger<ConsoleLogger> && MetricsLogger<FileLogger>);

TEST(FileLogger, WritesVerlsJsonLines) {
  TempDir dir;
  const fs::path path = dir.path / "run.jsonl";
  {
    FileLogger logger(path);
    logger.log({{"critic/score/mean", 0.25}, {"actor/pg_loss", -1.5}}, 1);
    logger.log({{"critic/score/mean", 0.5}, {"bad", std::nan("")}}, 2);
    // Flushed per line: a killed run keeps what it logged.
    EXPECT_EQ(read_lines(path).size(), 2u);
  }
  const auto lines = read_lines(path);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0], nlohmann::json::parse(R"({"step": 1, "data": {"actor/pg_loss": -1.5, "critic/score/mean": 0.25}})"));
  EXPECT_TRUE(lines[1]["data"]["bad"].is_null());
  // A new run never overwrites an earlier log: it is kept aside (.1, then .2, ...).
  {
    FileLogger fresh(path);
    ASSERT_TRUE(fresh.kept_aside().has_value());
    EXPECT_EQ(*fresh.kept_aside(), fs::path(path.string() + ".1"));
    fresh.log({{"x", 1.0}}, 3);
  }
  EXPECT_EQ(read_lines(path).size(), 1u);
  EXPECT_EQ(read_lines(fs::path(path.string() + ".1")).size(), 2u);
  // A resumed run continues the file.
  { FileLogger(path, std::optional<std::int64_t>(3)).log({{"x", 2.0}}, 4); }
  EXPECT_EQ(read_lines(path).size(), 2u);
}

TEST(FileLogger, AResumedRunLogsEveryStepOnce) {
  TempDir dir;
  const fs::path path = dir.path / "run.jsonl";
  {
    FileLogger first(path);
    for (std::int64_t step = 1; step <= 5; ++step) first.log({{"x", static_cast<double>(step)}}, step);
  }
  // The run stopped while writing step 6's line; its last checkpoint was step 3.
  std::ofstream(path, std::ios::app) << R"({"step": 6, "data": {"x")";
  {
    FileLogger resumed(path, std::optional<std::int64_t>(3));
    for (std::int64_t step = 4; step <= 6; ++step) resumed.log({{"x", 10.0 * static_cast<double>(step)}}, step);
  }
  const auto lines = read_lines(path);
  ASSERT_EQ(lines.size(), 6u);
  for (std::size_t i = 0; i < lines.size(); ++i) EXPECT_EQ(lines[i]["step"], static_cast<std::int64_t>(i + 1));
  EXPECT_EQ(lines[3]["data"]["x"], 40.0);  // the resumed run's step 4, not the stopped run's
}

TEST(FileLogger, PathFromVerlsEnvironmentVariables) {
  TempDir dir;
  {
    ScopedEnv path("VERL_FILE_LOGGER_PATH", (dir.path / "explicit.jsonl").string());
    EXPECT_EQ(file_logger_path("proj", "exp"), dir.path / "explicit.jsonl");
  }
  {
    ScopedEnv path("VERL_FILE_LOGGER_PATH", std::nullopt);
    ScopedEnv root("VERL_FILE_LOGGER_ROOT", dir.path.string());
    EXPECT_EQ(file_logger_path("proj", "exp"), dir.path / "proj" / "exp.jsonl");
    auto logger = FileLogger::for_run("proj", "exp");
    logger.log({{"a", 1.0}}, 0);
    EXPECT_TRUE(fs::exists(dir.path / "proj" / "exp.jsonl"));
  }
  {
    ScopedEnv path("VERL_FILE_LOGGER_PATH", std::nullopt);
    ScopedEnv root("VERL_FILE_LOGGER_ROOT", std::nullopt);
    EXPECT_EQ(file_logger_path("p", "e"), fs::path(".") / "p" / "e.jsonl");
  }
  EXPECT_THROW(FileLogger(fs::path("/proc/definitely/not/writable.jsonl")), std::exception);
}

TEST(ConsoleLogger, PlainTextWhenNotATerminal) {
  std::ostringstream out;
  ConsoleLogger logger(out, {.total_steps = 10, .width = 80});
  EXPECT_EQ(logger.style(), ConsoleStyle::plain);
  logger.log({{"actor/pg_loss", 0.125}, {"critic/score/mean", 0.5}, {"perf/total_num_tokens", 2048}}, 3);
  const std::string text = out.str();
  EXPECT_NE(text.find("step 3/10 [#########.....................]  30%"), std::string::npos) << text;
  EXPECT_NE(text.find("eta "), std::string::npos);
  EXPECT_NE(text.find("actor/pg_loss"), std::string::npos);
  EXPECT_NE(text.find("0.125"), std::string::npos);
  EXPECT_NE(text.find(" 2048"), std::string::npos);  // integers without a fraction
  for (const char c : text) EXPECT_TRUE(static_cast<unsigned char>(c) < 128 && c != '\x1b') << "non-ASCII output";
}

TEST(ConsoleLogger, TerminalStyleDrawsABar) {
  std::ostringstream out;
  ConsoleLogger logger(out, {.total_steps = 4, .style = ConsoleStyle::terminal, .width = 120, .bar_width = 8});
  logger.log({{"x", 1.0}}, 2);
  EXPECT_NE(out.str().find("\u2588\u2588\u2588\u2588\u2591\u2591\u2591\u2591"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("\x1b[1m"), std::string::npos);
}

TEST(ConsoleLogger, VerlsOneLineFormat) {
  std::ostringstream out;
  ConsoleLogger logger(out, {.total_steps = std::nullopt, .style = ConsoleStyle::verl_line});
  logger.log({{"a/b", 1.0}, {"c", 0.1}}, 7);
  EXPECT_EQ(out.str(), "step:7 - a/b:1.0 - c:0.1\n");
}

TEST(ConsoleLogger, TableFitsTheWidth) {
  std::ostringstream out;
  ConsoleLogger logger(out, {.total_steps = std::nullopt, .style = ConsoleStyle::plain, .width = 60});
  Metrics metrics;
  for (int i = 0; i < 6; ++i) metrics["metric_" + std::to_string(i)] = i * 0.5;
  const std::string table = logger.table(metrics);
  std::istringstream lines(table);
  int rows = 0;
  for (std::string line; std::getline(lines, line); ++rows) EXPECT_LE(line.size(), 60u) << line;
  EXPECT_EQ(rows, 2);  // three cells per row
}

TEST(Tracking, FansOutToTheConfiguredBackends) {
  TempDir dir;
  ScopedEnv path("VERL_FILE_LOGGER_PATH", (dir.path / "metrics.jsonl").string());
  std::ostringstream console;
  TrackingOptions options;
  options.console_stream = &console;
  options.console.style = ConsoleStyle::plain;
  const std::vector<std::string> backends = {"console", "file", "console"};
  {
    Tracking tracking("proj", "exp", backends, options);
    EXPECT_EQ(tracking.backends(), (std::vector<std::string_view>{"console", "file"}));
    tracking.log({{"critic/score/mean", 0.75}}, 1);
    const std::string_view only_file[] = {"file"};
    tracking.log({{"val-core/x/acc/mean@1", 0.5}}, 1, only_file);
  }
  EXPECT_EQ(read_lines(dir.path / "metrics.jsonl").size(), 2u);
  EXPECT_NE(console.str().find("critic/score/mean"), std::string::npos);
  EXPECT_EQ(console.str().find("val-core"), std::string::npos);
}

TEST(Tracking, RejectsBackendsItDoesNotHave) {
  const std::vector<std::string> wandb = {"console", "wandb"};
  try {
    Tracking tracking("p", "e", wandb);
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_STREQ(e.what(),
                 "trainer.logger: 'wandb' is a verl backend that is not supported by verl-cpp yet (supported: console, "
                 "file, tensorboard)");
  }
  const std::vector<std::string> typo = {"consle"};
  try {
    Tracking tracking("p", "e", typo);
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_STREQ(e.what(), "trainer.logger: expected one of console, file, tensorboard, got 'consle'");
  }
}

namespace {
struct CountingLogger {
  static constexpr std::string_view name = "counting";
  int* count;
  void log(const Metrics&, std::int64_t) { ++*count; }
  void finish() {}
};
}  // namespace

TEST(Tracking, AcceptsUserDefinedBackends) {
  int count = 0;
  Tracking tracking;
  tracking.add(CountingLogger{&count});
  tracking.log({{"a", 1.0}}, 0);
  tracking.log({{"a", 1.0}}, 1);
  EXPECT_EQ(count, 2);
  EXPECT_TRUE(tracking.has("counting"));
}

TEST(SvgPlot, RewardCurveFromTheFileLogger) {
  TempDir dir;
  const fs::path jsonl = dir.path / "metrics.jsonl";
  {
    FileLogger logger(jsonl);
    for (int step = 1; step <= 5; ++step) logger.log({{"critic/score/mean", 0.1 * step}, {"other", 1.0}}, step);
    logger.log({{"other", 2.0}}, 6);  // steps without the metric are skipped
  }
  const PlotSeries series = metric_series_from_jsonl(jsonl, "critic/score/mean");
  ASSERT_EQ(series.points.size(), 5u);
  EXPECT_DOUBLE_EQ(series.points[4].x, 5.0);
  EXPECT_DOUBLE_EQ(series.points[4].y, 0.5);
  const fs::path svg = dir.path / "plots" / "reward.svg";
  const PlotSeries all[] = {series};
  write_svg_line_chart(svg, all, {"GRPO reward <train>", "step", "critic/score/mean"});
  std::ifstream in(svg);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text.rfind("<svg", 0), 0u);
  EXPECT_NE(text.find("GRPO reward &lt;train&gt;"), std::string::npos);
  EXPECT_NE(text.find("<polyline points=\""), std::string::npos);
  EXPECT_NE(text.find("</svg>"), std::string::npos);
  const std::vector<std::string> metrics = {"critic/score/mean", "other", "never/logged"};
  write_metrics_plot(jsonl, dir.path / "all.svg", metrics, PlotLabels{.title = "run", .x_label = "step", .y_label = ""});
  std::ifstream all_svg(dir.path / "all.svg");
  const std::string both((std::istreambuf_iterator<char>(all_svg)), std::istreambuf_iterator<char>());
  EXPECT_NE(both.find(">other</text>"), std::string::npos);
  EXPECT_EQ(both.find("never/logged"), std::string::npos);
  // Degenerate input still renders.
  const PlotSeries empty[] = {PlotSeries{"none", {}}};
  EXPECT_NE(render_svg_line_chart(empty, {}).find("</svg>"), std::string::npos);
}
