// Rollout correction (bypass_mode's IS weights, rejection sampling and off-policy metrics):
// threshold parsing and its errors, weights and masks by hand, metric keys, and invariants.
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "verl/algo/rollout_correction.hpp"
#include "../support/error_message.hpp"

using namespace verl;
using namespace verl::algo;
using verl::test_support::message_of;

namespace {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

RejectionThresholdSpec spec(const char* text) { return RejectionThresholdSpec(std::string(text)); }

std::set<std::string> keys_of(const Metrics& metrics) {
  std::set<std::string> keys;
  for (const auto& [key, value] : metrics) keys.insert(key);
  return keys;
}

}  // namespace

// ---- parsing ---------------------------------------------------------------------------------------

TEST(RejectionCriteria, ParsesOptionsAndThresholdsLikeVerl) {
  const auto criteria = parse_rejection_criteria(" token_k1, seq_mean_k3 ,token_k1", spec("0.5_2.0, 0.1"));
  ASSERT_EQ(criteria.size(), 2u);  // duplicates dropped, order kept
  EXPECT_EQ(criteria[0].name(), "token_k1");
  EXPECT_EQ(criteria[0].lower, 0.5);
  EXPECT_EQ(criteria[0].upper, 2.0);
  EXPECT_EQ(criteria[1].name(), "seq_mean_k3");
  EXPECT_EQ(criteria[1].level, RejectionLevel::seq_mean);
  EXPECT_EQ(criteria[1].estimator, DivergenceEstimator::k3);
  EXPECT_EQ(criteria[1].upper, 0.1);

  // One shared entry; a lone k1 bound u means [1/u, u].
  const auto shared = parse_rejection_criteria("seq_sum_k1,seq_max_k2", RejectionThresholdSpec(4.0));
  EXPECT_EQ(shared[0].lower, 0.25);
  EXPECT_EQ(shared[0].upper, 4.0);
  EXPECT_EQ(shared[1].upper, 4.0);
  for (const auto name : rejection_option_names)
    EXPECT_EQ(parse_rejection_criteria(name, RejectionThresholdSpec(2.0)).front().name(), name);
}

TEST(RejectionCriteria, ErrorsNameTheArgument) {
  const auto unknown = message_of([] { (void)parse_rejection_criteria("seq_max_k1", spec("2")); });
  EXPECT_TRUE(contains(unknown, "rollout_rs") && contains(unknown, "seq_max_k1") && contains(unknown, "token_k1"))
      << unknown;
  EXPECT_TRUE(contains(message_of([] { (void)parse_rejection_criteria(" , ", spec("2")); }), "rollout_rs"));
  const auto count = message_of([] { (void)parse_rejection_criteria("token_k1,token_k2,token_k3", spec("1,2")); });
  EXPECT_TRUE(contains(count, "rollout_rs_threshold") && contains(count, "3") && contains(count, "got 2")) << count;
  EXPECT_TRUE(contains(message_of([] { (void)parse_rejection_criteria("token_k2", spec("0.1_0.2")); }), "'_'"));
  EXPECT_TRUE(contains(message_of([] { (void)parse_rejection_criteria("token_k1", spec("-1_2")); }), "positive"));
  EXPECT_TRUE(contains(message_of([] { (void)parse_rejection_criteria("token_k3", spec("abc")); }), "number"));
}

TEST(RolloutCorrectionConfig, MakesTypedSettings) {
  RolloutCorrectionConfig config;  // verl's defaults: sequence-level IS, threshold 2, no RS
  auto settings = make_rollout_correction(config);
  EXPECT_EQ(settings.rollout_is, ImportanceSamplingLevel::sequence);
  EXPECT_TRUE(settings.rollout_rs.empty());

  config.rollout_is_threshold = std::nullopt;  // verl: no IS weights without a threshold
  EXPECT_FALSE(make_rollout_correction(config).rollout_is.has_value());

  config.rollout_is = "tokens";
  config.rollout_is_threshold = 2.0;
  EXPECT_TRUE(contains(message_of([&] { (void)make_rollout_correction(config); }), "rollout_is"));
  config.rollout_is = "token";
  config.rollout_is_threshold = 0.0;
  EXPECT_TRUE(contains(message_of([&] { (void)make_rollout_correction(config); }), "rollout_is_threshold"));
  config.rollout_is_threshold = 2.0;
  config.rollout_rs = "token_k1";
  EXPECT_TRUE(contains(message_of([&] { (void)make_rollout_correction(config); }), "rollout_rs_threshold"));
}

// ---- IS weights ---------------------------------------------------------------------------------------

TEST(ImportanceWeights, TokenWeightsAreTruncatedAndMasked) {
  MatrixF log_ratio(1, 4), mask(1, 4);
  log_ratio << 0.0f, std::log(3.0f), 30.0f, 1.0f;
  mask << 1, 1, 1, 0;
  const auto out = compute_rollout_correction_weights(log_ratio, mask, ImportanceSamplingLevel::token, 2.0);
  EXPECT_EQ(out.weights(0, 0), 1.0f);
  EXPECT_EQ(out.weights(0, 1), 2.0f);
  EXPECT_EQ(out.weights(0, 2), 2.0f);  // exp(20) before truncation
  EXPECT_EQ(out.weights(0, 3), 0.0f);
  // verl 0.9.1: max/min/mean describe the applied (truncated) weights, the fractions the raw ones.
  EXPECT_EQ(out.metrics.at("rollout_is_max"), 2.0);
  EXPECT_EQ(out.metrics.at("rollout_is_min"), 1.0);
  EXPECT_NEAR(out.metrics.at("rollout_is_mean"), 5.0 / 3.0, 1e-6);
  EXPECT_NEAR(out.metrics.at("rollout_is_ratio_fraction_high"), 2.0 / 3.0, 1e-6);
  EXPECT_EQ(out.metrics.at("rollout_is_ratio_fraction_low"), 0.0);
  EXPECT_FALSE(out.metrics.contains("rollout_is_batch_norm_factor"));
  EXPECT_FALSE(out.metrics.contains("rollout_is_oob_ratio"));
}

TEST(ImportanceWeights, IcePopZeroesTheWeightsOutsideItsBounds) {
  MatrixF log_ratio(1, 5), mask(1, 5);
  log_ratio << 0.0f, std::log(3.0f), std::log(0.25f), std::log(0.5f), 1.0f;
  mask << 1, 1, 1, 1, 0;
  const ImportanceThreshold bounds = parse_importance_threshold(ImportanceThresholdSpec(std::string(" 0.5_2 ")));
  ASSERT_TRUE(bounds.lower.has_value());
  EXPECT_EQ(*bounds.lower, 0.5);
  EXPECT_EQ(bounds.upper, 2.0);
  const auto out = compute_rollout_correction_weights(log_ratio, mask, ImportanceSamplingLevel::token, bounds.upper,
                                                      false, bounds.lower);
  EXPECT_EQ(out.weights(0, 0), 1.0f);
  EXPECT_EQ(out.weights(0, 1), 0.0f);  // 3 > 2: zeroed, not truncated
  EXPECT_EQ(out.weights(0, 2), 0.0f);  // 0.25 < 0.5
  EXPECT_EQ(out.weights(0, 3), 0.5f);  // on the lower bound: kept
  EXPECT_EQ(out.weights(0, 4), 0.0f);  // padding
  EXPECT_NEAR(out.metrics.at("rollout_is_oob_ratio"), 0.5, 1e-6);
  EXPECT_NEAR(out.metrics.at("rollout_is_ratio_fraction_high"), 0.25, 1e-6);
  EXPECT_NEAR(out.metrics.at("rollout_is_ratio_fraction_low"), 0.25, 1e-6);  // below the lower bound, not 1/2
  // Every weight outside the bounds: verl divides by zero computing the effective sample size.
  MatrixF far(1, 2), ones = MatrixF::Ones(1, 2);
  far << 5.0f, -5.0f;
  EXPECT_TRUE(contains(message_of([&] {
                         (void)compute_rollout_correction_weights(far, ones, ImportanceSamplingLevel::token, 2.0, false, 0.5);
                       }),
                       "effective sample size"));
}

TEST(ImportanceWeights, ThresholdSpecsAreParsedAsVerlDoes) {
  const auto upper_of = [](std::string text) { return parse_importance_threshold(ImportanceThresholdSpec(text)); };
  EXPECT_EQ(upper_of(" 3 ").upper, 3.0);
  EXPECT_FALSE(upper_of("3").lower.has_value());
  for (const char* bad : {"", "  ", "abc", "0.5_x", "_2", "0_2", "3_2", "-1", "0"})
    EXPECT_TRUE(contains(message_of([&] { (void)upper_of(bad); }), "rollout_is_threshold")) << bad;
  EXPECT_TRUE(contains(message_of([] { (void)parse_importance_threshold(ImportanceThresholdSpec(-2.0)); }), "positive"));
}

TEST(ImportanceWeights, SequenceWeightsBroadcastAndNormalise) {
  MatrixF log_ratio(3, 2), mask(3, 2);
  log_ratio << -0.1f, -0.2f, -0.5f, 9.0f, 0.3f, 0.3f;
  mask << 1, 1, 1, 0, 0, 0;  // the last row is fully masked
  const auto out = compute_rollout_correction_weights(log_ratio, mask, ImportanceSamplingLevel::sequence, 2.0, true);
  const float w0 = std::exp(-0.1f + -0.2f), w1 = std::exp(-0.5f);
  const float mean = (w0 + w1) / 2.0f;  // over the two non-empty sequences
  EXPECT_NEAR(out.weights(0, 0), w0 / mean, 1e-6);
  EXPECT_NEAR(out.weights(0, 1), w0 / mean, 1e-6);
  EXPECT_NEAR(out.weights(1, 0), w1 / mean, 1e-6);
  EXPECT_EQ(out.weights(1, 1), 0.0f);
  EXPECT_TRUE(out.weights.row(2).isZero());
  EXPECT_NEAR(out.metrics.at("rollout_is_batch_norm_factor"), mean, 1e-6);
  // Sequence metrics run over every row: the empty row's log-ratio sum (0) is the largest, and
  // its mean weight (0) the smallest.
  EXPECT_NEAR(out.metrics.at("rollout_is_max"), 1.0, 1e-6);
  EXPECT_NEAR(out.metrics.at("rollout_is_seq_min"), 0.0, 1e-6);
  EXPECT_NEAR(out.metrics.at("rollout_is_seq_fraction_low"), 1.0 / 3.0, 1e-6);
}

TEST(ImportanceWeights, NeedAValidTokenAndAPositiveThreshold) {
  const MatrixF zeros = MatrixF::Zero(2, 2);
  EXPECT_TRUE(contains(message_of([&] {
                         (void)compute_rollout_correction_weights(zeros, zeros, ImportanceSamplingLevel::token);
                       }),
                       "response_mask"));
  const MatrixF ones = MatrixF::Ones(2, 2);
  EXPECT_TRUE(contains(message_of([&] {
                         (void)compute_rollout_correction_weights(zeros, ones, ImportanceSamplingLevel::token, -1.0);
                       }),
                       "rollout_is_threshold"));
}

// ---- rejection sampling -----------------------------------------------------------------------------------

TEST(RejectionSampling, TokenOptionsRejectTokensSequenceOptionsRejectRows) {
  MatrixF log_ratio(2, 3), mask = MatrixF::Ones(2, 3);
  log_ratio << 0.0f, 1.0f, -0.1f,  // token 1: ratio e > 2
      0.05f, 0.05f, 0.05f;
  mask(1, 2) = 0;
  const auto tokens = compute_rollout_rejection_mask(log_ratio, mask, parse_rejection_criteria("token_k1", spec("0.5_2")));
  MatrixF expected = mask;
  expected(0, 1) = 0;
  EXPECT_TRUE(tokens.response_mask == expected);
  EXPECT_NEAR(tokens.metrics.at("rollout_rs_token_k1_masked_fraction"), 1.0 / 5.0, 1e-6);
  EXPECT_NEAR(tokens.metrics.at("rollout_rs_seq_masked_fraction"), 1.0 / 2.0, 1e-6);
  EXPECT_TRUE(tokens.metrics.contains("rollout_rs_token_k1_seq_fraction_low"));  // k1 is two-sided

  // seq_sum_k2 of row 0 is 0.5 + 0.005 > 0.1: the whole row goes.
  const auto rows = compute_rollout_rejection_mask(log_ratio, mask, parse_rejection_criteria("seq_sum_k2", spec("0.1")));
  EXPECT_TRUE(rows.response_mask.row(0).isZero());
  EXPECT_TRUE(rows.response_mask.row(1) == mask.row(1));
  EXPECT_FALSE(rows.metrics.contains("rollout_rs_seq_sum_k2_seq_fraction_low"));
  EXPECT_NEAR(rows.metrics.at("rollout_rs_seq_sum_k2_max"), 0.5f * (1.0f + 0.01f), 1e-6);
  EXPECT_NEAR(rows.metrics.at("rollout_rs_seq_sum_k2_fraction_high"), 0.5, 1e-6);
}

TEST(RejectionSampling, AllOptionsMustPass) {
  MatrixF log_ratio = MatrixF::Constant(2, 4, 0.05f), mask = MatrixF::Ones(2, 4);
  log_ratio(1, 3) = 0.8f;
  const auto criteria = parse_rejection_criteria("seq_max_k3,token_k2", spec("0.1,0.5"));
  const auto out = compute_rollout_rejection_mask(log_ratio, mask, criteria);
  EXPECT_TRUE(out.response_mask.row(0) == mask.row(0));
  EXPECT_TRUE(out.response_mask.row(1).isZero());  // k3(0.8) = 0.43 > 0.1 rejects the row
  std::set<std::string> expected;
  for (const char* option : {"seq_max_k3", "token_k2"})
    for (const char* stat : {"mean", "max", "min", "fraction_high", "fraction_low", "std", "seq_mean", "seq_std",
                             "seq_max", "seq_min", "seq_max_deviation", "seq_fraction_high", "masked_fraction",
                             "seq_masked_fraction"})
      expected.insert(std::string("rollout_rs_") + option + "_" + stat);
  expected.insert("rollout_rs_masked_fraction");
  expected.insert("rollout_rs_seq_masked_fraction");
  EXPECT_EQ(keys_of(out.metrics), expected);
}

// ---- off-policy metrics and the pipeline ---------------------------------------------------------------------

TEST(OffPolicyMetrics, IdenticalPoliciesHaveNoDivergence) {
  MatrixF log_prob(2, 3), mask = MatrixF::Ones(2, 3);
  log_prob << -1.0f, -2.0f, -0.5f, -0.1f, -3.0f, -1.0f;
  mask(1, 2) = 0;
  const auto metrics = compute_offpolicy_metrics(log_prob, log_prob, mask);
  EXPECT_EQ(metrics.at("kl"), 0.0);
  EXPECT_EQ(metrics.at("k3_kl"), 0.0);
  EXPECT_EQ(metrics.at("chi2_token"), 0.0);
  EXPECT_EQ(metrics.at("chi2_seq"), 0.0);
  EXPECT_EQ(metrics.at("ppl_ratio"), 1.0);
  EXPECT_EQ(metrics.at("log_ppl_diff"), 0.0);
  EXPECT_EQ(metrics.at("training_ppl"), metrics.at("rollout_ppl"));
  EXPECT_NEAR(metrics.at("training_log_ppl"), (3.5 / 3.0 + 3.1 / 2.0) / 2.0, 1e-6);
}

TEST(RolloutCorrectionPipeline, PrefixesEveryMetricAndRejectsAnEmptyMask) {
  MatrixF lp = MatrixF::Constant(2, 3, -1.0f), rollout = MatrixF::Constant(2, 3, -1.2f), mask = MatrixF::Ones(2, 3);
  RolloutCorrection settings;
  settings.rollout_is = ImportanceSamplingLevel::token;
  settings.rollout_rs = parse_rejection_criteria("token_k1", spec("1.5"));
  const auto out = compute_rollout_correction_and_rejection_mask(lp, rollout, mask, settings);
  ASSERT_TRUE(out.rollout_is_weights.has_value());
  EXPECT_NEAR((*out.rollout_is_weights)(0, 0), std::exp(0.2f), 1e-6);
  EXPECT_TRUE(out.response_mask == mask);
  for (const auto& [key, value] : out.metrics) EXPECT_EQ(key.rfind("rollout_corr/", 0), 0u) << key;
  EXPECT_TRUE(out.metrics.contains("rollout_corr/chi2_seq"));
  EXPECT_TRUE(out.metrics.contains("rollout_corr/rollout_is_eff_sample_size"));

  const MatrixF zeros = MatrixF::Zero(2, 3);
  EXPECT_TRUE(contains(
      message_of([&] { (void)compute_rollout_correction_and_rejection_mask(lp, rollout, zeros, settings); }),
      "response_mask"));
  const MatrixF wrong(3, 2);
  EXPECT_TRUE(contains(
      message_of([&] { (void)compute_rollout_correction_and_rejection_mask(lp, wrong, mask, settings); }),
      "rollout_log_prob"));
}
