// verl/utils/torch_functional.py helpers (verl/algo/functional.hpp), the log-prob / entropy
// wrappers and compute_entropy_loss (verl/algo/entropy_loss.hpp): semantics, errors, gradients by
// finite differences, and a spot check against verl's golden fixtures.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "verl/algo/entropy_loss.hpp"
#include "verl/algo/functional.hpp"
#include "verl/testing/golden.hpp"
#include "../support/error_message.hpp"

namespace {

using verl::Index;
using verl::InvalidArgument;
using verl::MatrixF;
using verl::MatrixI64;
using verl::VectorF;
using namespace verl::algo;
using verl::test_support::message_of;

MatrixF random_matrix(Index rows, Index cols, unsigned seed, float scale = 2.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  MatrixF m(rows, cols);
  for (Index i = 0; i < m.size(); ++i) m.data()[i] = normal(rng);
  return m;
}

// ---- small helpers ------------------------------------------------------------------------------

TEST(Functional, GatherFromLabels) {
  const MatrixF data = random_matrix(3, 5, 1);
  const std::vector<std::int64_t> labels = {4, 0, 2};
  const VectorF out = gather_from_labels(data, labels);
  for (Index i = 0; i < 3; ++i) EXPECT_EQ(out[i], data(i, labels[static_cast<std::size_t>(i)]));
  const std::vector<std::int64_t> bad = {4, 5, 2};
  EXPECT_EQ(message_of([&] { gather_from_labels(data, bad); }),
            "labels: expected values in [0, 5) (size of the last dim), got 5 at 1");
  const std::vector<std::int64_t> short_labels = {1};
  EXPECT_EQ(message_of([&] { gather_from_labels(data, short_labels); }), "labels: expected length 3, got 1");
  VectorF cot(3);
  cot << 0.5f, -2.0f, 1.0f;
  const MatrixF g = gather_from_labels_backward(5, labels, cot);
  EXPECT_EQ(g.sum(), cot.sum());
  for (Index i = 0; i < 3; ++i) EXPECT_EQ(g(i, labels[static_cast<std::size_t>(i)]), cot[i]);
  EXPECT_EQ(message_of([&] { gather_from_labels_backward(5, bad, cot); }),
            "labels: expected values in [0, 5) (size of the last dim), got 5 at 1");
}

TEST(Functional, ClipByValue) {
  MatrixF x(1, 5), lo(1, 5), hi(1, 5);
  x << -3, 0.5f, 7, std::numeric_limits<float>::quiet_NaN(), 2;
  lo << -1, 0, 0, 0, 3;  // the last pair crosses: the lower bound wins, as in max(min(x, hi), lo)
  hi << 1, 1, 5, 1, 1;
  const MatrixF out = clip_by_value(x, lo, hi);
  EXPECT_EQ(out(0, 0), -1.0f);
  EXPECT_EQ(out(0, 1), 0.5f);
  EXPECT_EQ(out(0, 2), 5.0f);
  EXPECT_TRUE(std::isnan(out(0, 3)));  // torch.minimum/maximum propagate NaN
  EXPECT_EQ(out(0, 4), 3.0f);
  EXPECT_EQ(message_of([&] { clip_by_value(x, MatrixF::Zero(1, 4), hi); }),
            "tensor_min: expected the shape of x (1, 5), got (1, 4)");
}

TEST(Functional, GetResponseMask) {
  MatrixI64 ids(4, 7);
  ids << 20, 10, 34, 1, 0, 0, 0,  //
      78, 0, 76, 2, 1, 0, 0,      //
      23, 98, 1, 0, 0, 0, 0,      //
      33, 3, 98, 45, 1, 0, 0;
  MatrixI64 eos1(4, 7), eos12(4, 7);
  eos1 << 1, 1, 1, 1, 0, 0, 0, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 1, 0, 0;
  eos12 << 1, 1, 1, 1, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 1, 0, 0;
  EXPECT_EQ(get_response_mask(ids, 1), eos1);
  EXPECT_EQ(get_response_mask(ids, {1, 2}), eos12);
  const std::vector<std::int64_t> list = {2, 1};
  EXPECT_EQ(get_response_mask(ids, list), eos12);
  EXPECT_EQ(get_response_mask(ids, 99), MatrixI64::Ones(4, 7));  // no EOS: every position valid
  EXPECT_EQ(get_response_mask<float>(ids, 1), eos1.cast<float>());
}

// ---- log-probs and entropy ----------------------------------------------------------------------

TEST(Functional, LogprobVariantsAgree) {
  const MatrixF logits = random_matrix(6, 257, 2);
  const std::vector<std::int64_t> labels = {0, 5, 256, 100, 7, 3};
  const VectorF lp = logprobs_from_logits(logits, labels);
  EXPECT_EQ(lp, logprobs_from_logits_v2(logits, labels));
  EXPECT_EQ(lp, logprobs_from_logits_naive(logits, labels));
  for (Index i = 0; i < 6; ++i) {
    const double m = logits.row(i).maxCoeff();
    const double lse = m + std::log((logits.row(i).cast<double>().array() - m).exp().sum());
    EXPECT_NEAR(lp[i], logits(i, labels[static_cast<std::size_t>(i)]) - lse, 2e-6);
  }
  EXPECT_EQ(message_of([&] { logprobs_from_logits(logits, std::vector<std::int64_t>{}); }),
            "labels: expected length 6 (rows of logits), got 0");
}

TEST(Functional, LogprobGradientIsOnehotMinusSoftmax) {
  const MatrixF logits = random_matrix(3, 9, 3);
  const std::vector<std::int64_t> labels = {1, 8, 0};
  VectorF cot(3);
  cot << 0.5f, -1.0f, 2.0f;
  const MatrixF g = logprobs_from_logits_backward(logits, labels, cot);
  for (Index i = 0; i < 3; ++i) {
    const Eigen::ArrayXd p = (logits.row(i).cast<double>().array() - logits.row(i).maxCoeff()).exp();
    const Eigen::ArrayXd softmax = p / p.sum();
    for (Index j = 0; j < 9; ++j) {
      const double onehot = labels[static_cast<std::size_t>(i)] == j ? 1.0 : 0.0;
      EXPECT_NEAR(g(i, j), cot[i] * (onehot - softmax[j]), 1e-6);
    }
  }
}

TEST(Functional, EntropyVariantsAndGradient) {
  const MatrixF logits = random_matrix(7, 33, 4);
  const VectorF h = entropy_from_logits(logits);
  EXPECT_EQ(h, entropy_from_logits_with_chunking(logits, 3));
  EXPECT_EQ(message_of([&] { entropy_from_logits_with_chunking(logits, 0); }), "chunk_size: expected > 0, got 0");
  VectorF cot = VectorF::LinSpaced(7, -1.0f, 1.0f);
  const MatrixF g = entropy_from_logits_backward(logits, cot);
  // -cot * p * (log p + H)
  for (Index i = 0; i < 7; ++i) {
    const Eigen::ArrayXd p = (logits.row(i).cast<double>().array() - logits.row(i).maxCoeff()).exp();
    const Eigen::ArrayXd softmax = p / p.sum();
    const double entropy = -(softmax * softmax.log()).sum();
    EXPECT_NEAR(h[i], entropy, 3e-6);
    for (Index j = 0; j < 33; ++j)
      EXPECT_NEAR(g(i, j), -cot[i] * softmax[j] * (std::log(softmax[j]) + entropy), 1e-6);
  }
}

TEST(Functional, SumPiSquaredAndItsGradient) {
  const MatrixF logits = random_matrix(3, 50, 5);
  const VectorF q = calculate_sum_pi_squared_from_logits(logits);
  VectorF cot(3);
  cot << 1.0f, -0.5f, 0.25f;
  const MatrixF g = calculate_sum_pi_squared_from_logits_backward(logits, cot);
  const float h = 1e-2f;
  for (Index k = 0; k < logits.size(); k += 7) {
    MatrixF plus = logits, minus = logits;
    plus.data()[k] += h;
    minus.data()[k] -= h;
    const double fd = (calculate_sum_pi_squared_from_logits(plus).cast<double>().dot(cot.cast<double>()) -
                       calculate_sum_pi_squared_from_logits(minus).cast<double>().dot(cot.cast<double>())) /
                      (static_cast<double>(plus.data()[k]) - minus.data()[k]);
    EXPECT_NEAR(g.data()[k], fd, 2e-4);
  }
  for (Index i = 0; i < 3; ++i) {
    const Eigen::ArrayXd p = (logits.row(i).cast<double>().array() - logits.row(i).maxCoeff()).exp();
    EXPECT_NEAR(q[i], (p * p).sum() / (p.sum() * p.sum()), 1e-6);
  }
}

// ---- entropy loss -------------------------------------------------------------------------------

TEST(EntropyLoss, ValueIsAggLossOfTokenEntropy) {
  const Index b = 3, t = 4, v = 20;
  const MatrixF logits = random_matrix(b * t, v, 6);
  MatrixF mask = MatrixF::Ones(b, t);
  mask(0, 3) = 0;
  mask(2, 2) = mask(2, 3) = 0;
  const VectorF h = entropy_from_logits(logits);
  const Eigen::Map<const MatrixF> token_entropy(h.data(), b, t);
  for (const LossAggMode mode : {LossAggMode::token_mean, LossAggMode::token_sum, LossAggMode::seq_mean_token_sum,
                                 LossAggMode::seq_mean_token_mean, LossAggMode::seq_mean_token_sum_norm}) {
    const EntropyLoss loss = compute_entropy_loss(logits, mask, mode);
    EXPECT_EQ(loss.entropy_loss, agg_loss(token_entropy, mask, mode));
    EXPECT_EQ(loss.entropy_loss, compute_entropy_loss_value(logits, mask, mode));
  }
  EXPECT_EQ(compute_entropy_loss<SeqMeanTokenMean>(logits, mask).entropy_loss,
            compute_entropy_loss(logits, mask, LossAggMode::seq_mean_token_mean).entropy_loss);
}

TEST(EntropyLoss, GradientByFiniteDifferencesAndZeroOnMaskedTokens) {
  const Index b = 2, t = 3, v = 6;
  const MatrixF logits = random_matrix(b * t, v, 7, 1.0f);
  MatrixF mask = MatrixF::Ones(b, t);
  mask(1, 2) = 0;
  for (const LossAggMode mode : {LossAggMode::token_mean, LossAggMode::seq_mean_token_mean}) {
    GlobalBatchInfo info;
    info.dp_size = 2;  // with the global numbers verl 0.9.1 requires then
    info.batch_num_tokens = 9;
    info.global_batch_size = 3;
    const EntropyLoss loss = compute_entropy_loss(logits, mask, mode, info);
    const float h = 1e-2f;
    for (Index k = 0; k < logits.size(); ++k) {
      MatrixF plus = logits, minus = logits;
      plus.data()[k] += h;
      minus.data()[k] -= h;
      const double fd = (static_cast<double>(compute_entropy_loss_value(plus, mask, mode, info)) -
                         compute_entropy_loss_value(minus, mask, mode, info)) /
                        (static_cast<double>(plus.data()[k]) - minus.data()[k]);
      EXPECT_NEAR(loss.grad_logits.data()[k], fd, 3e-4) << "element " << k;
    }
    EXPECT_TRUE((loss.grad_logits.row(1 * t + 2).array() == 0).all());  // the masked token
  }
}

TEST(EntropyLoss, ShapeAndMaskErrors) {
  const MatrixF logits = random_matrix(6, 4, 8);
  EXPECT_EQ(message_of([&] { compute_entropy_loss(logits, MatrixF::Ones(2, 2)); }),
            "logits: expected B*T = 4 rows for a (2, 2) response_mask (logits (B, T, V) folded to (B*T, V)), got 6");
  MatrixF mask = MatrixF::Ones(2, 3);
  mask(0, 0) = 2;
  EXPECT_EQ(message_of([&] { compute_entropy_loss(logits, mask); }), "response_mask: expected a 0/1 mask, got 2 at (0, 0)");
}

// ---- golden spot check --------------------------------------------------------------------------

TEST(Functional, GoldenEntropyCaseThroughTheFixtureReader) {
  const auto file = verl::testing::GoldenFile::load(std::string(VERL_GOLDEN_DIR) + "/functional.json");
  int checked = 0;
  for (const auto& c : file.cases()) {
    if (c.fn() != "entropy_from_logits") continue;
    verl::testing::CaseCheck check(c);
    const MatrixF logits = c.input_tensor("logits").matrix<float>();
    check.tensor("entropy", entropy_from_logits(logits).cast<double>(), c.tolerance());
    check.tensor("grad:logits",
                 entropy_from_logits_backward(logits, c.input_tensor("cotangent").vector<float>()).cast<double>(),
                 c.grad_tolerance(), c.grad_tie_indices());
    EXPECT_TRUE(check.passed()) << c.name() << ": " << check.worst();
    ++checked;
  }
  EXPECT_GT(checked, 0);
}

}  // namespace
