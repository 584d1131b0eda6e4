// verl's validation metrics (val-core / val-aux), checked against numpy itself when it is
// installed (the bootstrap draws and summation order must be numpy's to agree to the bit).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "verl/trainer/validation_metrics.hpp"

using namespace verl;
using namespace verl::trainer;

namespace {

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

TEST(ValidationMetrics, GreedySingleResponse) {
  const std::vector<std::string> sources = {"gsm8k", "gsm8k", "gsm8k", "math"};
  const std::vector<std::string> uids = {"a", "b", "c", "d"};
  const ValidationInfos infos = {{"reward", std::vector<double>{1.0, 0.0, 1.0, 0.5}}};
  const Metrics m = validation_metrics(sources, uids, infos);
  EXPECT_DOUBLE_EQ(m.at("val-core/gsm8k/reward/mean@1"), 2.0 / 3.0);
  EXPECT_DOUBLE_EQ(m.at("val-core/math/reward/mean@1"), 0.5);
  EXPECT_EQ(m.size(), 2u);
}

TEST(ValidationMetrics, CoreVariableIsAccWhenPresent) {
  const std::vector<std::string> sources(4, "s");
  const std::vector<std::string> uids = {"p", "p", "q", "q"};
  const ValidationInfos infos = {{"reward", std::vector<double>{1, 0, 0, 0}},
                                 {"acc", std::vector<double>{1, 0, 1, 1}},
                                 {"pred", std::vector<std::string>{"7", "8", "3", "3"}}};
  const Metrics m = validation_metrics(sources, uids, infos);
  EXPECT_DOUBLE_EQ(m.at("val-core/s/acc/mean@2"), 0.75);
  EXPECT_TRUE(m.contains("val-core/s/acc/best@2/mean"));
  EXPECT_TRUE(m.contains("val-core/s/acc/maj@2/mean"));
  EXPECT_TRUE(m.contains("val-core/s/acc/best@2/std"));  // verl: best*/maj*/mean* at the largest N
  EXPECT_TRUE(m.contains("val-aux/s/acc/worst@2/mean"));
  EXPECT_TRUE(m.contains("val-aux/s/reward/mean@2"));
  EXPECT_FALSE(m.contains("val-aux/s/pred/mean@2"));  // strings have no statistics
  EXPECT_DOUBLE_EQ(m.at("val-aux/s/acc/std@2"), 0.25);  // prompt p: std 0.5, prompt q: std 0
  EXPECT_THROW(validation_metrics(sources, std::vector<std::string>{"p"}, infos), InvalidArgument);
}

TEST(ValidationMetrics, BootstrapMatchesNumpy) {
  if (std::system("python3 -c 'import numpy' > /dev/null 2>&1") != 0) {
    GTEST_SKIP() << "numpy is not installed: the bootstrap was not compared with numpy's";
  }
  // Six responses per prompt, three prompts, values with repeats and a majority vote.
  std::vector<std::string> sources, uids, preds;
  std::vector<double> scores;
  const double table[3][6] = {{0.0, 1.0, 0.5, 1.0, 0.25, 0.0}, {0.1, 0.2, 0.3, 0.9, 0.8, 0.7}, {1, 1, 1, 0, 0, 1}};
  const char* votes[3][6] = {{"a", "b", "a", "c", "b", "a"}, {"x", "y", "y", "x", "z", "y"}, {"1", "1", "2", "2", "3", "3"}};
  for (int p = 0; p < 3; ++p)
    for (int r = 0; r < 6; ++r) {
      sources.push_back("src");
      uids.push_back("u" + std::to_string(p));
      scores.push_back(table[p][r]);
      preds.push_back(votes[p][r]);
    }
  const ValidationResults results = process_validation_metrics(sources, uids, {{"score", scores}, {"pred", preds}});
  // The same statistics from numpy primitives: seeded legacy choice, max/min/majority, mean/std.
  const std::string script = R"PY(
import json, numpy as np
table = [[0.0, 1.0, 0.5, 1.0, 0.25, 0.0], [0.1, 0.2, 0.3, 0.9, 0.8, 0.7], [1, 1, 1, 0, 0, 1]]
votes = [list("abacba"), list("xyyxzy"), list("112233")]
out = {}
def add(name, v):
    out.setdefault(name, []).append(float(v))
for vals, preds in zip(table, votes):
    vals = np.array(vals, dtype=float)
    add("mean@6", np.mean(vals)); add("std@6", np.std(vals))
    for n in [2, 4, 6]:
        np.random.seed(42)
        idx = np.random.choice(6, size=(1000, n), replace=True)
        best = np.array([vals[i].max() for i in idx]); worst = np.array([vals[i].min() for i in idx])
        maj = []
        for i in idx:
            counts = {}
            for j in i:
                counts.setdefault(preds[j], [0, vals[j]])[0] += 1
            top = max(counts, key=lambda k: counts[k][0])
            maj.append(counts[top][1])
        maj = np.array(maj)
        for name, arr in [("best", best), ("worst", worst), ("maj", maj)]:
            add(f"{name}@{n}/mean", np.mean(arr)); add(f"{name}@{n}/std", np.std(arr))
print(json.dumps({k: float(np.mean(v)) for k, v in out.items()}))
)PY";
  const auto path = std::filesystem::temp_directory_path() / ("verl_val_metrics_" + std::to_string(::getpid()) + ".py");
  std::ofstream(path) << script;
  const std::string output = run("python3 " + path.string() + " 2>&1");
  std::filesystem::remove(path);
  nlohmann::json expected;
  ASSERT_NO_THROW(expected = nlohmann::json::parse(output)) << output;
  const auto& ours = results.at("src").at("score");
  EXPECT_EQ(ours.size(), expected.size());
  for (const auto& [name, value] : expected.items()) {
    ASSERT_TRUE(ours.contains(name)) << name;
    EXPECT_EQ(ours.at(name), value.get<double>()) << name;  // bit for bit
  }
}

TEST(ValidationMetrics, NumpyReductions) {
  // Pairwise summation differs from a running sum: 1 + 1e-16 * 200 loses everything in a
  // running sum but not in blocks.
  std::vector<double> values(201, 1e-16);
  values[0] = 1.0;
  double running = 0.0;
  for (const double v : values) running += v;
  EXPECT_EQ(running, 1.0);
  EXPECT_GT(trainer::detail::numpy_sum(values), 1.0);
  EXPECT_EQ(trainer::detail::numpy_legacy_choice(42, 5, 6), (std::vector<std::size_t>{3, 4, 2, 4, 4, 1}));
  EXPECT_EQ(trainer::detail::bootstrap_sizes(6), (std::vector<std::size_t>{2, 4, 6}));
  EXPECT_EQ(trainer::detail::bootstrap_sizes(8), (std::vector<std::size_t>{2, 4, 8}));
  EXPECT_TRUE(trainer::detail::bootstrap_sizes(1).empty());
}
