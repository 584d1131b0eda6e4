// KL estimators: values, the registry, gradients (central differences away from kinks, torch's
// conventions at kinks) and argument errors.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "verl/algo/kl/estimator.hpp"
#include "verl/algo/kl/penalty.hpp"
#include "verl/algo/kl/registry.hpp"
#include "../support/error_message.hpp"

using namespace verl;
using namespace verl::algo;
using verl::test_support::message_of;

namespace {

struct NotAnEstimator {
  static constexpr std::string_view name = "nope";
  float value(float a, float b) const { return a - b; }  // no gradient, no double overloads
};

}  // namespace

TEST(KLEstimator, ConceptAcceptsEveryVerlTypeAndRejectsOthers) {
  static_assert(KLEstimator<KL> && KLEstimator<K1> && KLEstimator<Abs> && KLEstimator<MSE> && KLEstimator<K2> &&
                KLEstimator<LowVarKL> && KLEstimator<K3>);
  static_assert(!KLEstimator<NotAnEstimator>);
  static_assert(!KLEstimator<int>);
  EXPECT_EQ(KL::name, "kl");
  EXPECT_EQ(K1::name, "k1");
  EXPECT_EQ(Abs::name, "abs");
  EXPECT_EQ(MSE::name, "mse");
  EXPECT_EQ(K2::name, "k2");
  EXPECT_EQ(LowVarKL::name, "low_var_kl");
  EXPECT_EQ(K3::name, "k3");
}

TEST(KLEstimator, ValuesMatchVerlsFormulas) {
  EXPECT_FLOAT_EQ(KL{}.value(-1.0f, -2.5f), 1.5f);
  EXPECT_FLOAT_EQ(K1{}.value(-1.0f, -2.5f), 1.5f);
  EXPECT_FLOAT_EQ(Abs{}.value(-2.5f, -1.0f), 1.5f);
  EXPECT_FLOAT_EQ(MSE{}.value(-2.5f, -1.0f), 1.125f);
  EXPECT_FLOAT_EQ(K2{}.value(-1.0f, -2.5f), 1.125f);
  // k3 with x = ref - lp = 0.5: e^0.5 - 0.5 - 1.
  EXPECT_NEAR(LowVarKL{}.value(-1.5, -1.0), std::exp(0.5) - 1.5, 1e-15);
  EXPECT_NEAR(K3{}.value(-1.0f, -1.5f), std::exp(-0.5) - 0.5, 1e-7);
  EXPECT_EQ(LowVarKL{}.value(-1.0f, -1.0f), 0.0f);
}

TEST(KLEstimator, LowVarKLClampsTheLogRatioAndTheEstimate) {
  const LowVarKL k3;
  // x = ref - lp = 3: e^3 - 4 = 16.09 is clamped to 10.
  EXPECT_EQ(k3.value(0.0, 3.0), 10.0);
  // x = -30 is clamped to -20 first: e^-20 + 19 > 10, clamped to 10 (never NaN or huge).
  EXPECT_EQ(k3.value(30.0f, 0.0f), 10.0f);
  // x = 1000 would overflow exp without the first clamp.
  EXPECT_EQ(k3.value(-1000.0f, 0.0f), 10.0f);
  // Knobs: a wider estimate clamp lets e^3 - 4 through.
  LowVarKL wide;
  wide.kl_bound = 100;
  EXPECT_NEAR(wide.value(0.0, 3.0), std::exp(3.0) - 4.0, 1e-12);
}

namespace {

/// Central difference of cot * k(lp, ref) in double.
template <class E>
void expect_gradient_matches_central_difference(const E& e, double lp, double ref, double cot) {
  const double h = 1e-6;
  const double fd_lp = cot * (e.value(lp + h, ref) - e.value(lp - h, ref)) / (2 * h);
  const double fd_ref = cot * (e.value(lp, ref + h) - e.value(lp, ref - h)) / (2 * h);
  const double g = e.grad_logprob(lp, ref, cot);
  EXPECT_NEAR(g, fd_lp, 1e-6 * (1 + std::abs(fd_lp))) << E::name << " at lp=" << lp << " ref=" << ref;
  EXPECT_NEAR(-g, fd_ref, 1e-6 * (1 + std::abs(fd_ref))) << E::name << " at lp=" << lp << " ref=" << ref;
}

}  // namespace

TEST(KLEstimator, GradientsMatchCentralDifferencesAwayFromKinks) {
  const double points[][2] = {{-1.3, -0.7}, {-0.2, -2.1}, {-3.0, -3.4}, {-0.05, -0.01}, {-1.0, -2.9}};
  for (const auto& p : points) {
    for (double cot : {1.0, -0.37, 2.5}) {
      expect_gradient_matches_central_difference(KL{}, p[0], p[1], cot);
      expect_gradient_matches_central_difference(K1{}, p[0], p[1], cot);
      expect_gradient_matches_central_difference(Abs{}, p[0], p[1], cot);
      expect_gradient_matches_central_difference(MSE{}, p[0], p[1], cot);
      expect_gradient_matches_central_difference(K2{}, p[0], p[1], cot);
      expect_gradient_matches_central_difference(LowVarKL{}, p[0], p[1], cot);
      expect_gradient_matches_central_difference(K3{}, p[0], p[1], cot);
    }
  }
}

TEST(KLEstimator, GradientsFollowTorchAtKinks) {
  // |x|' = 0 at 0.
  EXPECT_EQ(Abs{}.grad_logprob(-1.0f, -1.0f, 0.7f), 0.0f);
  const LowVarKL k3;
  // Outer clamp strictly active: no gradient.
  EXPECT_EQ(k3.grad_logprob(0.0, 3.0, 1.0), 0.0);
  // |x| = 20 sits on the inner clamp's bound, but the outer clamp is active there.
  EXPECT_EQ(k3.grad_logprob(-20.0f, 0.0f, 1.0f), 0.0f);
  EXPECT_EQ(k3.grad_logprob(20.0f, 0.0f, 1.0f), 0.0f);
  // Beyond the inner clamp nothing flows, even with a wide estimate clamp.
  LowVarKL wide;
  wide.kl_bound = 1e30;
  EXPECT_EQ(wide.grad_logprob(-25.0, 0.0, 1.0), 0.0);
  // At the inner bound itself torch's clamp passes the gradient: -(e^20 - 1).
  EXPECT_DOUBLE_EQ(wide.grad_logprob(-20.0, 0.0, 1.0), -(std::exp(20.0) - 1.0));
  // Exactly on the outer bound the gradient passes too: make the estimate at x = 1 the bound.
  LowVarKL on_bound;
  on_bound.kl_bound = on_bound.value(-1.0, 0.0);
  EXPECT_EQ(on_bound.value(-1.0, 0.0), on_bound.kl_bound);
  EXPECT_DOUBLE_EQ(on_bound.grad_logprob(-1.0, 0.0, 1.0), -(std::exp(1.0) - 1.0));
}

TEST(KLPenalty, BatchFunctionsApplyTheEstimatorElementWise) {
  MatrixF lp(2, 3), ref(2, 3), cot(2, 3);
  lp << -1.0f, -0.5f, -2.0f, -0.1f, -3.0f, -1.0f;
  ref << -1.5f, -0.5f, -1.0f, -2.0f, -0.2f, -1.25f;
  cot << 0.5f, -1.0f, 0.25f, 1.0f, 2.0f, -0.75f;
  for (const auto& name : kl_penalty_names) {
    const auto estimator = make_kl_estimator(name);
    EXPECT_EQ(name_of(estimator), name);
    const MatrixF kl = kl_penalty(lp, ref, name);
    // verl's kl_penalty_forward takes the stems only; the typed call takes every estimator.
    const MatrixF forward = std::visit([&](const auto& e) { return kl_penalty_forward(lp, ref, e); }, estimator);
    const auto grad = kl_penalty_backward(lp, ref, cot, estimator);
    ASSERT_EQ(kl.rows(), 2);
    ASSERT_EQ(kl.cols(), 3);
    for (Index i = 0; i < 2; ++i)
      for (Index j = 0; j < 3; ++j) {
        std::visit(
            [&](const auto& e) {
              EXPECT_EQ(kl(i, j), e.value(lp(i, j), ref(i, j))) << name;
              EXPECT_EQ(forward(i, j), kl(i, j)) << name;
              EXPECT_EQ(grad.logprob(i, j), e.grad_logprob(lp(i, j), ref(i, j), cot(i, j))) << name;
              EXPECT_EQ(grad.ref_logprob(i, j), -grad.logprob(i, j)) << name;
            },
            estimator);
      }
  }
}

TEST(KLPenalty, IntoGivesTheFreshResultInWhateverStorageItIsHanded) {
  MatrixF lp = MatrixF::Random(9, 37), ref = MatrixF::Random(9, 37);
  lp(2, 3) = std::numeric_limits<float>::quiet_NaN();
  ref(4, 5) = 30.0f;  // both of low_var_kl's clamps
  for (const auto& name : kl_penalty_names) {
    const MatrixF want = kl_penalty(lp, ref, name);
    MatrixF empty;
    kl_penalty_into(empty, lp, ref, name);
    MatrixF reused = MatrixF::Constant(9, 37, 7.0f);
    const float* storage = reused.data();
    kl_penalty_into(reused, lp, ref, make_kl_estimator(name));
    EXPECT_EQ(reused.data(), storage) << name << ": a buffer of the right shape is written in place";
    MatrixF reshaped = MatrixF::Zero(3, 2);
    kl_penalty_into(reshaped, lp, ref, name);
    MatrixF in_place = lp;  // the output may be an input: the estimate is element-wise
    kl_penalty_into(in_place, in_place, ref, name);
    for (const MatrixF* got : {&empty, &reused, &reshaped, &in_place}) {
      ASSERT_EQ(got->rows(), 9) << name;
      ASSERT_EQ(got->cols(), 37) << name;
      EXPECT_TRUE(got->array().isNaN().cast<int>().sum() == 1 && std::isnan((*got)(2, 3))) << name;
      for (Index i = 0; i < 9; ++i)
        for (Index j = 0; j < 37; ++j) {
          if (!std::isnan(want(i, j))) {
            EXPECT_EQ((*got)(i, j), want(i, j)) << name << " at " << i << "," << j;
          }
        }
    }
  }
  MatrixF out;
  const MatrixF wrong(9, 36);
  const std::string msg = message_of<InvalidArgument>([&] { kl_penalty_into(out, lp, wrong, LowVarKL{}); });
  EXPECT_NE(msg.find("ref_logprob"), std::string::npos) << msg;
  EXPECT_NE(msg.find("(9, 36)"), std::string::npos) << msg;
}

TEST(KLPenalty, AcceptsBlocksColumnMajorAndDoubleInputs) {
  MatrixD big = MatrixD::Random(5, 7);
  MatrixD ref = MatrixD::Random(5, 7);
  const auto block = big.block(1, 2, 3, 4);
  const auto ref_block = ref.block(1, 2, 3, 4);
  const MatrixD kl = kl_penalty(block, ref_block, LowVarKL{});
  Eigen::MatrixXd col_major = block;  // column-major copy
  const MatrixD kl_col = kl_penalty(col_major, ref_block, LowVarKL{});
  for (Index i = 0; i < 3; ++i)
    for (Index j = 0; j < 4; ++j) {
      EXPECT_EQ(kl(i, j), LowVarKL{}.value(block(i, j), ref_block(i, j)));
      EXPECT_EQ(kl_col(i, j), kl(i, j));
    }
}

TEST(KLRegistry, UnknownNamesListTheValidOnes) {
  const std::string msg = message_of<InvalidArgument>([] { (void)make_kl_estimator("kl_divergence"); });
  EXPECT_NE(msg.find("kl_penalty"), std::string::npos) << msg;
  EXPECT_NE(msg.find("kl_divergence"), std::string::npos) << msg;
  for (auto name : kl_penalty_names) EXPECT_NE(msg.find(std::string(name)), std::string::npos) << msg;
}

TEST(KLRegistry, StraightThroughNamesHaveTheStemsValueAndTheGradientOfK2) {
  // verl 0.9.1: k2 - k2.detach() + stem.detach() for a name ending in '+'.
  MatrixF lp(2, 4), ref(2, 4), cot(2, 4);
  lp << -1.0f, -0.5f, -2.0f, -30.0f, -0.1f, -3.0f, -1.0f, 0.0f;
  ref << -1.5f, -0.5f, -1.0f, -0.2f, -2.0f, -0.2f, -1.25f, -40.0f;  // both of k3's clamps included
  cot << 0.5f, -1.0f, 0.25f, 1.0f, 2.0f, -0.75f, 3.0f, -2.0f;
  for (const char* stem : {"kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3"}) {
    const std::string name = std::string(stem) + "+";
    const AnyKLEstimator plus = make_kl_estimator(name);
    EXPECT_EQ(name_of(plus), name);
    EXPECT_EQ(kl_penalty(lp, ref, name), kl_penalty(lp, ref, stem)) << name;
    // verl's kl_penalty_forward raises NotImplementedError for a '+' name; kl_penalty takes it.
    const std::string forward_error = message_of<NotImplemented>([&] { (void)kl_penalty_forward(lp, ref, name); });
    EXPECT_NE(forward_error.find("kl_penalty_forward: '" + name + "'"), std::string::npos) << forward_error;
    const auto grad = kl_penalty_backward(lp, ref, cot, plus);
    const auto k2 = kl_penalty_backward(lp, ref, cot, make_kl_estimator("k2"));
    EXPECT_EQ(grad.logprob, k2.logprob) << name;
    EXPECT_EQ(grad.ref_logprob, k2.ref_logprob) << name;
    // (lp - ref) * cot, checked against the formula itself too.
    for (Index i = 0; i < 2; ++i)
      for (Index j = 0; j < 4; ++j) EXPECT_FLOAT_EQ(grad.logprob(i, j), (lp(i, j) - ref(i, j)) * cot(i, j)) << name;
  }
  // "full" stays verl's NotImplementedError; '+' after an unknown stem is an unknown name.
  const std::string msg = message_of<NotImplemented>([] { (void)make_kl_estimator("full"); });
  EXPECT_NE(msg.find("full"), std::string::npos) << msg;
  MatrixF zeros = MatrixF::Zero(2, 3);
  EXPECT_THROW((void)kl_penalty_forward(zeros, zeros, "full"), NotImplemented);
  EXPECT_THROW((void)make_kl_estimator("foo+"), InvalidArgument);
  EXPECT_THROW((void)make_kl_estimator("k3++"), InvalidArgument);
}

TEST(KLRegistry, KeepsTheEstimatorsKnobs) {
  LowVarKL custom;
  custom.kl_bound = 3;
  AnyKLEstimator any = custom;
  MatrixD lp(1, 1), ref(1, 1);
  lp << 0.0;
  ref << 2.5;  // e^2.5 - 3.5 = 8.68 > 3
  EXPECT_EQ(kl_penalty(lp, ref, any)(0, 0), 3.0);
  EXPECT_DOUBLE_EQ(kl_penalty(lp, ref, "low_var_kl")(0, 0), std::exp(2.5) - 3.5);
}

TEST(KLPenalty, ShapeErrorsNameTheArgument) {
  MatrixF lp = MatrixF::Zero(2, 3);
  MatrixF ref = MatrixF::Zero(3, 2);
  std::string msg = message_of<InvalidArgument>([&] { (void)kl_penalty(lp, ref, KL{}); });
  EXPECT_NE(msg.find("ref_logprob"), std::string::npos) << msg;
  EXPECT_NE(msg.find("(2, 3)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("(3, 2)"), std::string::npos) << msg;
  MatrixF cot = MatrixF::Zero(2, 2);
  msg = message_of<InvalidArgument>([&] { (void)kl_penalty_backward(lp, lp, cot, K3{}); });
  EXPECT_NE(msg.find("cotangent"), std::string::npos) << msg;
}

TEST(KLPenalty, EmptyBatchGivesEmptyResults) {
  MatrixF empty(0, 5);
  EXPECT_EQ(kl_penalty(empty, empty, K3{}).rows(), 0);
  EXPECT_EQ(kl_penalty_backward(empty, empty, empty, K3{}).logprob.rows(), 0);
}
