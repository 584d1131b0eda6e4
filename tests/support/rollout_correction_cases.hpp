// Inputs of the rollout-correction tests, shared by the host tests (tests/unit) and the CUDA tests
// (tests/cuda): batches with the edge rows and extreme log-ratios the correction must handle, the
// configurations (every IS level, every rejection option, combinations), and a key-by-key metric
// comparison.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "random_loss_batch.hpp"
#include "verl/algo/rollout_correction.hpp"
#include "verl/core/metrics.hpp"
#include "verl/core/tensor.hpp"

namespace verl::test {

struct CorrectionBatch {
  MatrixF log_prob, rollout_log_prob, mask, advantages;
};

/// Rows of random length (empty, single-token and full rows among them), optionally scattered
/// masks; `extremes`: log-ratios of +-25 and +-100 (past the +-20 clamp; exp(100) overflows the
/// unclamped ratio of k3_kl); `garbage`: NaN and inf log-probs at padded positions.
inline CorrectionBatch correction_batch(Index rows, Index cols, std::uint32_t seed, bool extremes = true,
                                        bool scattered = false, bool garbage = false, float spread = 0.3f) {
  std::mt19937 rng(seed);
  CorrectionBatch b;
  b.rollout_log_prob = random_matrix(rows, cols, rng, 1.0f);
  b.log_prob = b.rollout_log_prob + random_matrix(rows, cols, rng, spread);
  b.mask = random_mask(rows, cols, rng);
  if (scattered) {
    std::bernoulli_distribution keep(0.6);
    for (Index i = 0; i < b.mask.size(); ++i) b.mask.data()[i] = keep(rng) ? 1.0f : 0.0f;
  }
  b.advantages = random_matrix(rows, cols, rng, 2.0f);
  if (extremes && rows > 3 && cols > 2) {
    b.log_prob(2, 0) = b.rollout_log_prob(2, 0) + 25.0f;
    b.log_prob(3, 0) = b.rollout_log_prob(3, 0) - 25.0f;
    b.log_prob(2, 1) = b.rollout_log_prob(2, 1) + 100.0f;
    b.mask(2, 0) = b.mask(3, 0) = b.mask(2, 1) = 1.0f;
  }
  if (b.mask.sum() == 0.0f) b.mask(rows - 1, 0) = 1.0f;  // verl raises for an all-zero mask
  if (garbage)
    for (Index i = 0; i < b.mask.size(); ++i)
      if (b.mask.data()[i] == 0.0f && i % 3 == 0)
        b.log_prob.data()[i] = i % 2 == 0 ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
  return b;
}

/// A named configuration, built through verl's own config keys (make_rollout_correction).
struct CorrectionCase {
  std::string name;
  algo::RolloutCorrection settings;
};

inline CorrectionCase correction_case(std::optional<std::string> is, double threshold, bool batch_normalize,
                                      std::optional<std::string> rs, std::optional<algo::RejectionThresholdSpec> rs_threshold) {
  algo::RolloutCorrectionConfig config;
  config.rollout_is = is;
  config.rollout_is_threshold = threshold;
  config.rollout_is_batch_normalize = batch_normalize;
  config.rollout_rs = rs;
  config.rollout_rs_threshold = rs_threshold;
  const std::string name = "is=" + is.value_or("none") + " threshold=" + std::to_string(threshold) +
                           (batch_normalize ? " normalized" : "") + " rs=" + rs.value_or("none");
  return {name, algo::make_rollout_correction(config)};
}

/// A threshold per option that rejects some tokens or rows of correction_batch and keeps others.
inline std::string threshold_of(std::string_view option) {
  if (option == "token_k1") return "0.7_1.4";
  if (option == "seq_sum_k1") return "0.3_3";
  if (option == "seq_mean_k1") return "0.9_1.1";
  if (option == "token_k2" || option == "token_k3") return "0.04";
  if (option == "seq_sum_k2" || option == "seq_sum_k3") return "0.6";
  if (option == "seq_mean_k2" || option == "seq_mean_k3") return "0.05";
  return "0.2";  // seq_max
}

/// Every IS level with and without normalisation; each of the 11 rejection options alone, with
/// either IS level; all 11 together; a few mixes; a one-number threshold and k1's lone-upper form.
inline std::vector<CorrectionCase> correction_cases() {
  std::vector<CorrectionCase> cases;
  for (const char* is : {"token", "sequence"})
    for (const bool normalize : {false, true})
      for (const double threshold : {2.0, 1.2}) cases.push_back(correction_case(is, threshold, normalize, {}, {}));
  cases.push_back(correction_case({}, 2.0, false, {}, {}));
  std::string all, all_thresholds;
  for (const auto option : algo::rejection_option_names) {
    const std::string name(option), threshold = threshold_of(option);
    cases.push_back(correction_case({}, 2.0, false, name, threshold));
    cases.push_back(correction_case("token", 2.0, true, name, threshold));
    cases.push_back(correction_case("sequence", 1.5, false, name, threshold));
    all += (all.empty() ? "" : ",") + name;
    all_thresholds += (all_thresholds.empty() ? "" : ",") + threshold;
  }
  cases.push_back(correction_case("token", 2.0, false, all, all_thresholds));
  cases.push_back(correction_case("sequence", 3.0, true, all, all_thresholds));
  cases.push_back(correction_case("token", 2.0, true, "token_k1,seq_mean_k3,seq_max_k2", std::string("0.5_2,0.1,0.3")));
  cases.push_back(correction_case({}, 2.0, false, "token_k2,token_k3,seq_sum_k1", std::string("0.02,0.03,0.5_2")));
  cases.push_back(correction_case("sequence", 2.0, false, "seq_mean_k1,token_k1", 2.0));  // k1: [1/2, 2]
  cases.push_back(correction_case({}, 2.0, false, "token_k3", 1e-30));                    // rejects nearly all
  cases.push_back(correction_case("token", 1e30, true, "seq_max_k3", 1e30));             // keeps all
  return cases;
}

inline bool same_value(double actual, double expected, double rtol, double atol = 0) {
  if (std::isnan(expected)) return std::isnan(actual);
  if (std::isinf(expected)) return actual == expected;
  return std::abs(actual - expected) <= atol + rtol * std::abs(expected);
}

/// Same key set; every value bit-identical (as double; -0 == 0, NaN == NaN) except the keys in
/// `near`, which may differ by `near_rtol` + `near_atol` (or all of them by `rtol` + `atol` when
/// those are non-zero).
inline void expect_same_metrics(const Metrics& actual, const Metrics& expected, const std::string& what,
                                const std::set<std::string>& near = {}, double near_rtol = 0, double rtol = 0,
                                double near_atol = 0, double atol = 0) {
  std::set<std::string> actual_keys, expected_keys;
  for (const auto& [key, value] : actual) actual_keys.insert(key);
  for (const auto& [key, value] : expected) expected_keys.insert(key);
  EXPECT_EQ(actual_keys, expected_keys) << what << ": metric keys differ";
  for (const auto& [key, value] : expected) {
    const auto it = actual.find(key);
    if (it == actual.end()) continue;
    const bool is_near = near.count(key) > 0;
    const double tolerance = is_near ? std::max(near_rtol, rtol) : rtol;
    EXPECT_TRUE(same_value(it->second, value, tolerance, is_near ? std::max(near_atol, atol) : atol))
        << what << ": " << key << ": got " << it->second << ", expected " << value;
  }
}

}  // namespace verl::test
