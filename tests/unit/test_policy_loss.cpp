// Policy losses: concept and registry, argument errors, hand-computed values and torch's tie
// conventions, aggregation rules, stop-gradients, and central finite differences of the loss
// (away from kinks) against the analytic gradient for every loss without detached terms.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "verl/algo/policy_losses.hpp"
#include "../support/error_message.hpp"

using namespace verl;
using namespace verl::algo;
using verl::test_support::message_of;

namespace {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

constexpr LossAggMode kModes[] = {LossAggMode::token_mean, LossAggMode::token_sum, LossAggMode::seq_mean_token_sum,
                                  LossAggMode::seq_mean_token_mean, LossAggMode::seq_mean_token_sum_norm};

/// Owned tensors for a batch; `token_filter(log_ratio, advantage)` rejects draws near a kink.
struct Inputs {
  MatrixF old_log_prob, log_prob, advantages, mask;
  std::optional<MatrixF> weights;

  PolicyLossBatch batch() const {
    PolicyLossBatch b{old_log_prob, log_prob, advantages, mask};
    if (weights) b.rollout_is_weights.emplace(*weights);
    return b;
  }
  PolicyLossBatch batch_with(const MatrixF& lp) const {
    PolicyLossBatch b{old_log_prob, lp, advantages, mask};
    if (weights) b.rollout_is_weights.emplace(*weights);
    return b;
  }
};

Inputs random_inputs(Index rows, Index cols, unsigned seed, double spread = 0.5, bool with_weights = false,
                     const std::function<bool(float, float)>& token_ok = nullptr) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  Inputs in{MatrixF(rows, cols), MatrixF(rows, cols), MatrixF(rows, cols), MatrixF(rows, cols), std::nullopt};
  if (with_weights) in.weights = MatrixF(rows, cols);
  for (Index i = 0; i < rows; ++i)
    for (Index j = 0; j < cols; ++j) {
      in.old_log_prob(i, j) = -1.5f + u(gen);
      for (;;) {
        const float log_ratio = static_cast<float>(spread) * u(gen);
        const float advantage = 2.0f * u(gen);
        if (std::abs(advantage) < 0.05f) continue;
        if (token_ok && !token_ok(log_ratio, advantage)) continue;
        in.log_prob(i, j) = in.old_log_prob(i, j) + log_ratio;
        in.advantages(i, j) = advantage;
        break;
      }
      in.mask(i, j) = j < cols - i % 3 ? 1.0f : 0.0f;  // ragged lengths
      if (with_weights) in.weights->operator()(i, j) = 0.5f + 0.5f * (u(gen) + 1.0f);
    }
  return in;
}

/// Central differences of pg_loss with respect to every log_prob element (float steps; the
/// step actually taken is measured after rounding).
MatrixD central_differences(const std::function<float(const MatrixF&)>& loss, const MatrixF& log_prob,
                            float step = 2e-3f) {
  MatrixD grad(log_prob.rows(), log_prob.cols());
  MatrixF lp = log_prob;
  for (Index i = 0; i < lp.rows(); ++i)
    for (Index j = 0; j < lp.cols(); ++j) {
      const float x = log_prob(i, j);
      lp(i, j) = x + step;
      const float plus_x = lp(i, j);
      const double plus = loss(lp);
      lp(i, j) = x - step;
      const float minus_x = lp(i, j);
      const double minus = loss(lp);
      lp(i, j) = x;
      grad(i, j) = (plus - minus) / (static_cast<double>(plus_x) - static_cast<double>(minus_x));
    }
  return grad;
}

template <class Loss>
void expect_gradient_matches_differences(const Loss& loss, const Inputs& in, const AggregationContext& context,
                                         double tolerance = 1e-4) {
  const auto result = compute_policy_loss(loss, in.batch(), context);
  const auto numeric = central_differences(
      [&](const MatrixF& lp) { return compute_policy_loss(loss, in.batch_with(lp), context).pg_loss; },
      in.log_prob);
  for (Index i = 0; i < numeric.rows(); ++i)
    for (Index j = 0; j < numeric.cols(); ++j)
      EXPECT_NEAR(result.grad_log_prob(i, j), numeric(i, j), tolerance + 1e-3 * std::abs(numeric(i, j)))
          << Loss::name << " mode " << to_string(context.loss_agg_mode) << " at (" << i << ", " << j << ")";
}

bool far_from(float value, std::initializer_list<float> kinks, float margin) {
  return std::all_of(kinks.begin(), kinks.end(), [&](float k) { return std::abs(value - k) > margin; });
}

/// (A - mean(A)) * (log_prob - mean(log_prob)) over the valid tokens (means over valid tokens).
std::vector<float> valid_covariances(const Inputs& in) {
  double a = 0, l = 0, n = 0;
  for (Index k = 0; k < in.mask.size(); ++k)
    if (in.mask.data()[k] != 0) {
      a += in.advantages.data()[k];
      l += in.log_prob.data()[k];
      n += 1;
    }
  std::vector<float> covs;
  for (Index k = 0; k < in.mask.size(); ++k)
    if (in.mask.data()[k] != 0)
      covs.push_back(static_cast<float>((in.advantages.data()[k] - a / n) * (in.log_prob.data()[k] - l / n)));
  return covs;
}

struct NotALoss {};

}  // namespace

// ---- concept and registry -------------------------------------------------------------------------

static_assert(PolicyLoss<VanillaPPO> && PolicyLoss<GSPO> && PolicyLoss<SAPO> && PolicyLoss<GPGLoss> &&
              PolicyLoss<ClipCov> && PolicyLoss<KLCov> && PolicyLoss<GeoMean> && PolicyLoss<CISPO> &&
              PolicyLoss<BypassMode> && PolicyLoss<ReinforceLoss>);
static_assert(!PolicyLoss<NotALoss> && !PolicyLoss<int>);
static_assert(GSPO::aggregation.effective_mode(LossAggMode::token_mean) == LossAggMode::token_mean);  // verl 0.9.1
static_assert(SAPO::aggregation.effective_mode(LossAggMode::seq_mean_token_sum) == LossAggMode::seq_mean_token_mean);
static_assert(!GeoMean::aggregation.effective_mode(LossAggMode::token_mean).has_value());
static_assert(VanillaPPO::aggregation.honours(LossAggMode::seq_mean_token_sum_norm));
static_assert(GSPO::aggregation.honours(LossAggMode::token_mean) && GSPO::aggregation.honours(LossAggMode::token_sum));

TEST(PolicyLossRegistry, NamesAreVerlsInRegistrationOrder) {
  const std::vector<std::string_view> expected = {"vanilla", "gspo",  "sapo",        "gpg",     "clip_cov", "kl_cov",
                                                  "geo_mean", "cispo", "bypass_mode", "dppo_tv", "dppo_kl",  "dro"};
  const auto names = policy_loss_names();
  EXPECT_EQ(std::vector<std::string_view>(names.begin(), names.end()), expected);
  PolicyLossConfig config;
  config.policy_loss.rollout_correction = RolloutCorrectionConfig{};
  config.policy_loss.dro_beta = 0.1;
  for (const auto name : names) EXPECT_EQ(make_policy_loss(name, config).name(), name);
}

TEST(PolicyLossRegistry, UnknownNameListsTheValidOnes) {
  const auto message = message_of([] { (void)make_policy_loss("ppo", PolicyLossConfig{}); });
  EXPECT_TRUE(contains(message, "loss_mode")) << message;
  EXPECT_TRUE(contains(message, "'ppo'")) << message;
  for (const auto name : policy_loss_names()) EXPECT_TRUE(contains(message, std::string(name))) << message;
  // Not registered in verl by itself.
  EXPECT_THROW((void)make_policy_loss("reinforce", PolicyLossConfig{}), InvalidArgument);
}

TEST(PolicyLossRegistry, ConfigFallbacksFollowVerl) {
  PolicyLossConfig config;
  config.clip_ratio = 0.1;
  config.clip_ratio_low = std::nullopt;
  config.clip_ratio_high = 0.3;
  config.clip_ratio_c = 2.5;
  const auto vanilla = make_policy_loss("vanilla", config);
  ASSERT_NE(vanilla.get_if<VanillaPPO>(), nullptr);
  EXPECT_EQ(vanilla.get_if<VanillaPPO>()->clip_ratio_low, 0.1);
  EXPECT_EQ(vanilla.get_if<VanillaPPO>()->clip_ratio_high, 0.3);
  EXPECT_EQ(vanilla.get_if<VanillaPPO>()->clip_ratio_c, 2.5);

  config.policy_loss.clip_cov_ratio = std::nullopt;
  config.policy_loss.clip_cov_lb = std::nullopt;
  config.policy_loss.clip_cov_ub = std::nullopt;
  config.policy_loss.kl_cov_ratio = std::nullopt;
  config.policy_loss.ppo_kl_coef = std::nullopt;
  const auto clip_cov = *make_policy_loss("clip_cov", config).get_if<ClipCov>();
  EXPECT_EQ(clip_cov.clip_cov_ratio, 0.0002);
  EXPECT_EQ(clip_cov.clip_cov_lb, 1.0);
  EXPECT_EQ(clip_cov.clip_cov_ub, 5.0);
  const auto kl_cov = *make_policy_loss("kl_cov", config).get_if<KLCov>();
  EXPECT_EQ(kl_cov.kl_cov_ratio, 0.0002);
  EXPECT_EQ(kl_cov.ppo_kl_coef, 1.0);  // verl's code default, not the dataclass's 0.1

  config.policy_loss.loss_mode = "sapo";
  config.tau_pos = 2.0;
  const auto sapo = make_policy_loss(config);
  EXPECT_EQ(sapo.get_if<SAPO>()->tau_pos, 2.0);
  EXPECT_EQ(sapo.aggregation().effective_mode(LossAggMode::token_mean), LossAggMode::seq_mean_token_mean);
}

TEST(PolicyLossRegistry, BypassModeNeedsItsRolloutCorrectionConfig) {
  const auto message = message_of([] { (void)make_policy_loss("bypass_mode", PolicyLossConfig{}); });
  EXPECT_TRUE(contains(message, "rollout_correction")) << message;

  PolicyLossConfig config;
  RolloutCorrectionConfig rc;
  rc.loss_type = "reinforce";
  rc.rollout_is = "token";
  rc.rollout_rs = "token_k1,seq_max_k3";
  rc.rollout_rs_threshold = RejectionThresholdSpec(std::string("0.5_2.0,0.1"));
  config.policy_loss.rollout_correction = rc;
  const auto bypass = *make_policy_loss("bypass_mode", config).get_if<BypassMode>();
  EXPECT_EQ(bypass.loss_type, BypassLossType::reinforce);
  EXPECT_EQ(bypass.rollout_correction.rollout_is, ImportanceSamplingLevel::token);
  ASSERT_EQ(bypass.rollout_correction.rollout_rs.size(), 2u);
  EXPECT_EQ(bypass.rollout_correction.rollout_rs[1].name(), "seq_max_k3");

  rc.loss_type = "ppo";
  config.policy_loss.rollout_correction = rc;
  const auto bad_type = message_of([&] { (void)make_policy_loss("bypass_mode", config); });
  EXPECT_TRUE(contains(bad_type, "loss_type") && contains(bad_type, "ppo_clip")) << bad_type;
}

TEST(PolicyLossRegistry, AnyPolicyLossComputesLikeTheConcreteType) {
  const auto in = random_inputs(4, 9, 7);
  const VanillaPPO vanilla{0.2, 0.28, 3.0};
  const AnyPolicyLoss any = vanilla;
  const AggregationContext context{LossAggMode::seq_mean_token_mean, {}};
  const auto a = compute_policy_loss(any, in.batch(), context);
  const auto b = compute_policy_loss(vanilla, in.batch(), context);
  EXPECT_EQ(a.pg_loss, b.pg_loss);
  EXPECT_EQ(a.metrics, b.metrics);
  EXPECT_TRUE(a.grad_log_prob == b.grad_log_prob);
}

// ---- argument errors ---------------------------------------------------------------------------------

TEST(PolicyLossErrors, ClipRatioCMustExceedOne) {
  const auto in = random_inputs(2, 3, 1);
  const auto message = message_of([&] { (void)compute_policy_loss(VanillaPPO{0.2, 0.2, 1.0}, in.batch()); });
  EXPECT_TRUE(contains(message, "clip_ratio_c")) << message;
  EXPECT_TRUE(contains(message, "> 1")) << message;
}

TEST(PolicyLossErrors, ShapesNameTheArgumentExpectedAndActual) {
  const auto in = random_inputs(2, 3, 1);
  const MatrixF wrong = MatrixF::Zero(3, 2);
  const auto message = message_of([&] {
    (void)compute_policy_loss(GPGLoss{}, PolicyLossBatch{in.old_log_prob, in.log_prob, wrong, in.mask});
  });
  EXPECT_TRUE(contains(message, "advantages")) << message;
  EXPECT_TRUE(contains(message, "(2, 3)") && contains(message, "(3, 2)")) << message;

  PolicyLossBatch batch = in.batch();
  batch.rollout_is_weights.emplace(wrong);
  const auto weights = message_of([&] { (void)compute_policy_loss(SAPO{}, batch); });
  EXPECT_TRUE(contains(weights, "rollout_is_weights")) << weights;
}

TEST(PolicyLossErrors, MaskMustBeZeroOne) {
  auto in = random_inputs(2, 3, 1);
  in.mask(1, 2) = 0.5f;
  const auto message = message_of([&] { (void)compute_policy_loss(CISPO{}, in.batch()); });
  EXPECT_TRUE(contains(message, "response_mask") && contains(message, "0/1") && contains(message, "0.5")) << message;
}

TEST(PolicyLossErrors, CovarianceRatiosMustBePositive) {
  const auto in = random_inputs(2, 3, 1);
  EXPECT_TRUE(contains(message_of([&] { (void)compute_policy_loss(ClipCov{.clip_cov_ratio = 0}, in.batch()); }),
                       "clip_cov_ratio"));
  // Python's int(inf * N) raises in verl; an infinite ratio must not reach the integer cast.
  EXPECT_TRUE(contains(message_of([&] {
                         (void)compute_policy_loss(ClipCov{.clip_cov_ratio = std::numeric_limits<double>::infinity()},
                                                   in.batch());
                       }),
                       "clip_cov_ratio"));
  // A ratio far beyond 1 zeroes every candidate, as any ratio >= 1 does.
  const auto huge = compute_policy_loss(ClipCov{.clip_cov_ratio = 1e300, .clip_cov_lb = -1e30, .clip_cov_ub = 1e30},
                                        in.batch());
  const auto whole = compute_policy_loss(ClipCov{.clip_cov_ratio = 1.0, .clip_cov_lb = -1e30, .clip_cov_ub = 1e30},
                                         in.batch());
  EXPECT_EQ(huge.pg_loss, whole.pg_loss);
  EXPECT_EQ(huge.metrics.at("actor/pg_clipfrac"), whole.metrics.at("actor/pg_clipfrac"));
  EXPECT_TRUE(contains(message_of([&] { (void)compute_policy_loss(KLCov{.kl_cov_ratio = -1}, in.batch()); }),
                       "kl_cov_ratio"));
  // torch.topk cannot pick more tokens than there are.
  EXPECT_TRUE(contains(message_of([&] { (void)compute_policy_loss(KLCov{.kl_cov_ratio = 2.0}, in.batch()); }),
                       "kl_cov_ratio"));
}

TEST(PolicyLossErrors, BypassModeRejectsAnAllZeroMask) {
  auto in = random_inputs(2, 3, 1);
  in.mask.setZero();
  const auto message = message_of([&] { (void)compute_policy_loss(BypassMode{}, in.batch()); });
  EXPECT_TRUE(contains(message, "response_mask")) << message;
}

TEST(PolicyLossErrors, DeprecatedNeedsAClipRange) {
  const auto in = random_inputs(2, 3, 1);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  const auto message = message_of([&] {
    (void)compute_policy_loss_deprecated(in.old_log_prob, in.log_prob, in.advantages, in.mask, std::nullopt,
                                         std::nullopt, 0.2);
  });
#pragma GCC diagnostic pop
  EXPECT_TRUE(contains(message, "cliprange_low")) << message;
}

// ---- torch's element-wise semantics, branch-free ---------------------------------------------------------

TEST(PolicyLossInternals, ElementwiseOpsFollowTorch) {
  using namespace verl::algo::detail;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(clamp_value(nan, 0.8f, 1.2f)));
  EXPECT_EQ(clamp_value(0.5f, 0.8f, 1.2f), 0.8f);
  EXPECT_EQ(clamp_value(2.0f, 0.8f, 1.2f), 1.2f);
  EXPECT_EQ(clamp_passes(0.8f, 0.8f, 1.2f), 1.0f);  // bounds included
  EXPECT_EQ(clamp_passes(1.3f, 0.8f, 1.2f), 0.0f);
  EXPECT_EQ(clamp_passes(nan, 0.8f, 1.2f), 0.0f);
  EXPECT_TRUE(std::isnan(maximum_value(nan, 1.0f)) && std::isnan(maximum_value(1.0f, nan)));
  EXPECT_TRUE(std::isnan(minimum_value(nan, 1.0f)) && std::isnan(minimum_value(1.0f, nan)));
  EXPECT_EQ(maximum_value(-0.5f, 2.0f), 2.0f);
  EXPECT_EQ(minimum_value(-0.5f, 2.0f), -0.5f);
  EXPECT_EQ(maximum_share(1.0f, 1.0f), 0.5f);
  EXPECT_EQ(maximum_share(2.0f, 1.0f), 1.0f);
  EXPECT_EQ(maximum_share(1.0f, 2.0f), 0.0f);
  EXPECT_EQ(minimum_share(1.0f, 2.0f), 1.0f);
  EXPECT_EQ(minimum_share(2.0f, 2.0f), 0.5f);
  EXPECT_EQ(sign_of(0.0f), 0.0f);
  EXPECT_EQ(sign_of(-3.0f), -1.0f);
  EXPECT_EQ(select(true, 1.0f, nan), 1.0f);
  EXPECT_EQ(row_sum_term(std::numeric_limits<float>::infinity(), 0.0f, true), 0.0f);  // where(mask, L, 0)
  EXPECT_TRUE(std::isnan(row_sum_term(std::numeric_limits<float>::infinity(), 0.0f, false)));  // L * m
  // The bound is 1 - clip_ratio_low computed in double, then rounded to float32.
  EXPECT_EQ(RatioClipRange::from_clip_ratios(0.2, 0.28).low, static_cast<float>(1.0 - 0.2));
  EXPECT_EQ(RatioClipRange::from_clip_ratios(0.2, 0.28).high, static_cast<float>(1.0 + 0.28));
}

// ---- values by hand and torch's tie conventions ---------------------------------------------------------

TEST(VanillaPPO, ValuesMetricsAndGradientByHand) {
  // Four tokens, token-mean over 3 valid ones (W = 1/3), clip [0.8, 1.2], dual clip 1.5.
  MatrixF old = MatrixF::Zero(1, 4), lp(1, 4), adv(1, 4), mask(1, 4);
  lp << std::log(1.1f), std::log(1.5f), std::log(2.0f), 5.0f;
  adv << 1.0f, 1.0f, -1.0f, 1.0f;
  mask << 1, 1, 1, 0;
  const auto out = compute_policy_loss(VanillaPPO{0.2, 0.2, 1.5}, PolicyLossBatch{old, lp, adv, mask});
  const float r0 = std::exp(lp(0, 0));
  // Token 0 unclipped (-r0); token 1 clipped at 1.2 (-1.2, no gradient); token 2 (A < 0): max(r2,
  // 1.2) = 2 > 1.5, so the dual clip's constant 1.5 wins (no gradient).
  EXPECT_NEAR(out.pg_loss, (-r0 - 1.2f + 1.5f) / 3.0f, 1e-6);
  EXPECT_NEAR(out.grad_log_prob(0, 0), -r0 / 3.0f, 1e-7);
  EXPECT_EQ(out.grad_log_prob(0, 1), 0.0f);
  EXPECT_EQ(out.grad_log_prob(0, 2), 0.0f);
  EXPECT_EQ(out.grad_log_prob(0, 3), 0.0f);  // masked
  // pg_clipfrac counts pg_losses2 > pg_losses1: token 1 only (for token 2, -A r = 2 > 1.2).
  EXPECT_NEAR(out.metrics.at("actor/pg_clipfrac"), 1.0 / 3.0, 1e-6);
  EXPECT_NEAR(out.metrics.at("actor/pg_clipfrac_lower"), 1.0 / 3.0, 1e-6);  // token 2
  EXPECT_NEAR(out.metrics.at("actor/ppo_kl"), -(lp(0, 0) + lp(0, 1) + lp(0, 2)) / 3.0, 1e-6);
}

TEST(VanillaPPO, TiesFollowTorch) {
  MatrixF old = MatrixF::Zero(1, 3), lp = MatrixF::Zero(1, 3), adv(1, 3), mask = MatrixF::Ones(1, 3);
  adv << -2.0f, 1.0f, 1.0f;
  // Token 0 (A < 0): r = 1.5 and clip_ratio_c = r, so max(-A r, -A clip(r)) == -A c exactly and
  // torch.min gives the unclipped branch half the gradient.
  lp(0, 0) = std::log(1.5f);
  const float r = std::exp(lp(0, 0));
  const double c = static_cast<double>(r);
  // Token 1: ratio exactly at the upper bound 1 + high (clamp passes, max is a tie of equal
  // derivatives): the full unclipped gradient.
  const float upper = static_cast<float>(1.0 + 0.3);
  lp(0, 1) = std::log(upper);
  const bool at_bound = std::exp(lp(0, 1)) == upper;
  // Token 2: log-ratio beyond +20: the clamp stops the gradient.
  lp(0, 2) = 25.0f;
  const auto out = compute_policy_loss(VanillaPPO{0.2, 0.3, c}, PolicyLossBatch{old, lp, adv, mask});
  EXPECT_NEAR(out.grad_log_prob(0, 0), 0.5f * 2.0f * r / 3.0f, 1e-6);
  if (at_bound) {
    EXPECT_NEAR(out.grad_log_prob(0, 1), -upper / 3.0f, 1e-6);
  }
  EXPECT_EQ(out.grad_log_prob(0, 2), 0.0f);
}

TEST(GeoMean, TokenClampTieAndZeroAdvantage) {
  // A lone valid token with log-ratio exactly at +high: clamp passes and min() ties, so the
  // gradient is the full -A * ratio / (len + 1e-8) / B. A = 0 gets no gradient (sign 0).
  MatrixF old = MatrixF::Zero(2, 2), lp(2, 2), adv(2, 2), mask(2, 2);
  const float high = 0.25f;
  lp << high, 0.0f, 0.1f, 0.0f;
  adv << 1.0f, 0.0f, 0.0f, 0.0f;
  mask << 1, 0, 1, 0;
  const auto out = compute_policy_loss(GeoMean{0.2, high}, PolicyLossBatch{old, lp, adv, mask});
  const float ratio = std::exp(high);
  EXPECT_NEAR(out.pg_loss, (-ratio + 0.0f) / 2.0f, 1e-6);
  EXPECT_NEAR(out.grad_log_prob(0, 0), -ratio / 2.0f, 1e-6);
  EXPECT_EQ(out.grad_log_prob(1, 0), 0.0f);
}

TEST(KLCov, PenaltyOnTheTopCovarianceTokensWithSignAtZero) {
  // Covariances: token 0 is the largest; its log-ratio is 0, so |x| contributes value 0 and
  // gradient sign(0) = 0.
  MatrixF old = MatrixF::Zero(1, 4), lp(1, 4), adv(1, 4), mask = MatrixF::Ones(1, 4);
  lp << 0.0f, -1.0f, -2.0f, -3.0f;
  old << 0.0f, -1.2f, -2.5f, -2.0f;
  adv << 3.0f, 1.0f, -1.0f, -2.0f;
  const auto out = compute_policy_loss(KLCov{.kl_cov_ratio = 0.25, .ppo_kl_coef = 0.5},
                                       PolicyLossBatch{old, lp, adv, mask});
  for (Index j = 0; j < 4; ++j)
    EXPECT_NEAR(out.grad_log_prob(0, j), -adv(0, j) * std::exp(lp(0, j) - old(0, j)) / 4.0f, 1e-6) << j;
  // Covariances are 4.125, 0.375, 0.625, 3.375: with two picks the last token (x = -1) gets
  // coef * |x| and coef * sign(x).
  const auto two = compute_policy_loss(KLCov{.kl_cov_ratio = 0.5, .ppo_kl_coef = 0.5},
                                       PolicyLossBatch{old, lp, adv, mask});
  EXPECT_NEAR(two.grad_log_prob(0, 3), (2.0f * std::exp(-1.0f) - 0.5f) / 4.0f, 1e-6);
  EXPECT_NEAR(two.grad_log_prob(0, 1), -1.0f * std::exp(0.2f) / 4.0f, 1e-6);
  EXPECT_NEAR(two.pg_loss - out.pg_loss, 0.5f * 1.0f / 4.0f, 1e-6);
  EXPECT_NEAR(out.metrics.at("actor/ppo_kl"), (0.0 + 0.2 + 0.5 + 1.0) / 4.0, 1e-6);
}

// ---- aggregation rules -----------------------------------------------------------------------------------

TEST(PolicyLossAggregation, SapoForcesSeqMeanTokenMeanAndGspoFollowsTheMode) {
  const auto in = random_inputs(5, 8, 3);
  const auto gspo_seq_mean = compute_policy_loss<SeqMeanTokenMean>(GSPO{}, in.batch());
  for (const auto mode : kModes) {
    const AggregationContext context{mode, {}};
    // verl 0.9.1: GSPO aggregates with loss_agg_mode; its gradient is the mode's weights times the
    // per-token factor, so the two modes' gradients differ unless the modes coincide.
    const auto gspo = compute_policy_loss(GSPO{}, in.batch(), context);
    if (mode == LossAggMode::seq_mean_token_mean) {
      EXPECT_EQ(gspo.pg_loss, gspo_seq_mean.pg_loss);
    } else {
      EXPECT_NE(gspo.pg_loss, gspo_seq_mean.pg_loss) << to_string(mode);
    }
    const auto sapo = compute_policy_loss(SAPO{}, in.batch(), context);
    EXPECT_EQ(sapo.pg_loss, compute_policy_loss<SeqMeanTokenMean>(SAPO{}, in.batch()).pg_loss);
  }
}

TEST(PolicyLossAggregation, GlobalBatchInfoScalesLikeAggLoss) {
  const auto in = random_inputs(4, 6, 5);
  for (const auto mode : kModes) {
    const GlobalBatchInfo info{2, 40, 16, 12};
    const auto out = compute_policy_loss(GPGLoss{}, in.batch(), AggregationContext{mode, info});
    const MatrixF loss_mat = -(in.log_prob.array() * in.advantages.array()).matrix();
    EXPECT_FLOAT_EQ(out.pg_loss, agg_loss(loss_mat, in.mask, mode, info)) << to_string(mode);
    const MatrixF w = agg_loss_weights(in.mask, mode, info);
    EXPECT_TRUE(out.grad_log_prob.isApprox(-(w.array() * in.advantages.array()).matrix())) << to_string(mode);
  }
}

TEST(PolicyLossAggregation, GeoMeanIgnoresModeAndMeansOverAllRows) {
  auto in = random_inputs(4, 6, 9);
  in.mask.row(2).setZero();
  const auto a = compute_policy_loss(GeoMean{}, in.batch(), AggregationContext{LossAggMode::token_mean, {}});
  const auto b = compute_policy_loss(GeoMean{}, in.batch(), AggregationContext{LossAggMode::seq_mean_token_sum, {2, 1, 1, 1}});
  EXPECT_EQ(a.pg_loss, b.pg_loss);
  EXPECT_TRUE(a.grad_log_prob == b.grad_log_prob);
  EXPECT_TRUE(a.grad_log_prob.row(2).isZero());
}

TEST(PolicyLossAggregation, AllMaskedBatchGivesNaNLikeVerl) {
  auto in = random_inputs(2, 4, 2);
  in.mask.setZero();
  EXPECT_TRUE(std::isnan(compute_policy_loss(VanillaPPO{}, in.batch()).pg_loss));
  EXPECT_TRUE(std::isnan(compute_policy_loss(GSPO{}, in.batch()).pg_loss));
  const auto kl_cov = compute_policy_loss(KLCov{}, in.batch());
  EXPECT_TRUE(std::isnan(kl_cov.pg_loss));
  EXPECT_EQ(kl_cov.metrics.at("actor/ppo_kl"), 0.0);
  EXPECT_EQ(compute_policy_loss(GeoMean{}, in.batch()).pg_loss, 0.0f);  // mean of -0 * exp(0)
}

// ---- gradients: central differences where nothing is detached -------------------------------------------

TEST(PolicyLossGradient, VanillaMatchesCentralDifferences) {
  const VanillaPPO loss{0.2, 0.28, 1.4};
  const float lo = 0.8f, hi = 1.28f, c = 1.4f;
  const auto in = random_inputs(4, 7, 11, 0.6, true, [&](float x, float) {
    const float r = std::exp(x);
    return far_from(r, {lo, hi, c}, 0.02f);
  });
  for (const auto mode : kModes) expect_gradient_matches_differences(loss, in, {mode, {2, 30, 8, 10}});
}

TEST(PolicyLossGradient, SapoMatchesCentralDifferences) {
  const auto in = random_inputs(4, 7, 12, 1.0, true);
  expect_gradient_matches_differences(SAPO{1.0, 1.05}, in, {});
  expect_gradient_matches_differences(SAPO{2.0, 4.0}, in, {});
}

TEST(PolicyLossGradient, GspoMatchesCentralDifferencesWithRowConstantAdvantages) {
  // The stop-gradient reproduces d/d log_prob of exp(mean_t(log-ratio)) only when A (and w) are
  // constant within a row; rows sit away from the clip bounds (0.8, 1.2) and the cap at 10.
  auto in = random_inputs(4, 6, 13);
  const float targets[] = {-0.5f, -0.05f, 0.1f, 0.5f};
  for (Index i = 0; i < 4; ++i) {
    in.advantages.row(i).setConstant(i % 2 ? -1.3f : 0.7f);
    double sum = 0;
    const float length = in.mask.row(i).sum();
    for (Index j = 0; j < 6; ++j) sum += (in.log_prob(i, j) - in.old_log_prob(i, j)) * in.mask(i, j);
    const float shift = targets[i] - static_cast<float>(sum) / length;
    for (Index j = 0; j < 6; ++j) in.log_prob(i, j) += shift;
  }
  expect_gradient_matches_differences(GSPO{0.2, 0.2}, in, {});
}

TEST(PolicyLossGradient, DroMatchesCentralDifferences) {
  const auto in = random_inputs(3, 6, 15, 0.7, true);
  for (const auto mode : kModes) {
    // token-sum's loss is an unnormalised sum: its float32 differences miss the helper's relative
    // tolerance there (the mode's weights are exact, test_loss_aggregation), so it is left out.
    if (mode == LossAggMode::token_sum) continue;
    expect_gradient_matches_differences(DRO{.beta = 0.1}, in, {mode, {}});
    expect_gradient_matches_differences(DRO{.beta = 2.0}, in, {mode, {}});
  }
}

TEST(PolicyLossGradient, GpgAndReinforceMatchCentralDifferences) {
  const auto in = random_inputs(3, 5, 14, 0.5, true);
  for (const auto mode : kModes) {
    expect_gradient_matches_differences(GPGLoss{}, in, {mode, {}});
    expect_gradient_matches_differences(ReinforceLoss{}, in, {mode, {}});
  }
}

TEST(PolicyLossGradient, KlCovMatchesCentralDifferencesAwayFromSelectionChanges) {
  const auto in = random_inputs(4, 8, 15, 0.6, false, [](float x, float) { return std::abs(x) > 0.02f; });
  const KLCov loss{.kl_cov_ratio = 0.15, .ppo_kl_coef = 0.7};
  // The selection must not change under the finite-difference steps.
  auto covs = valid_covariances(in);
  std::sort(covs.begin(), covs.end(), std::greater<>());
  const auto k = static_cast<std::size_t>(0.15 * static_cast<double>(covs.size()));
  ASSERT_GT(covs[k - 1] - covs[k], 0.05f);
  expect_gradient_matches_differences(loss, in, {LossAggMode::seq_mean_token_mean, {}}, 3e-4);
}

TEST(PolicyLossGradient, GeoMeanMatchesCentralDifferences) {
  const auto in = random_inputs(4, 7, 16, 0.6, true, [](float x, float) { return far_from(x, {-0.2f, 0.28f}, 0.02f); });
  expect_gradient_matches_differences(GeoMean{0.2, 0.28}, in, {});
}

TEST(PolicyLossGradient, ClipCovMatchesCentralDifferencesWithAStableSelection) {
  const float lo = 0.8f, hi = 1.2f;
  const auto in = random_inputs(4, 7, 17, 0.5, false, [&](float x, float) { return far_from(std::exp(x), {lo, hi}, 0.02f); });
  // No candidates: plain PPO clip without the dual clip.
  expect_gradient_matches_differences(ClipCov{.clip_cov_lb = 100.0, .clip_cov_ub = 200.0}, in, {});
  // Every candidate zeroed (the budget covers them all), so the choice is not random; the lower
  // edge of the band sits in the widest gap between covariances, so the steps cannot move a
  // token across it.
  auto covs = valid_covariances(in);
  std::sort(covs.begin(), covs.end());
  std::size_t widest = 0;
  for (std::size_t k = 1; k + 1 < covs.size(); ++k)
    if (covs[k + 1] - covs[k] > covs[widest + 1] - covs[widest]) widest = k;
  ASSERT_GT(covs[widest + 1] - covs[widest], 0.05f);
  const double lb = 0.5 * (covs[widest] + covs[widest + 1]);
  expect_gradient_matches_differences(ClipCov{.clip_cov_ratio = 1.0, .clip_cov_lb = lb, .clip_cov_ub = 50.0}, in, {});
}

TEST(PolicyLossGradient, BypassModeMatchesTheLossItRunsOnTheRejectionMaskedBatch) {
  const auto in = random_inputs(4, 8, 18, 0.6);
  BypassMode bypass;
  bypass.rollout_correction.rollout_is = std::nullopt;
  bypass.rollout_correction.rollout_rs = parse_rejection_criteria("token_k1", RejectionThresholdSpec(std::string("0.7_1.4")));
  const auto out = compute_policy_loss(bypass, in.batch());
  const auto rs = compute_rollout_rejection_mask(in.log_prob - in.old_log_prob, in.mask, bypass.rollout_correction.rollout_rs);
  const auto vanilla = compute_policy_loss(bypass.ppo_clip, PolicyLossBatch{in.old_log_prob, in.log_prob, in.advantages, rs.response_mask});
  EXPECT_EQ(out.pg_loss, vanilla.pg_loss);
  EXPECT_TRUE(out.grad_log_prob == vanilla.grad_log_prob);
  EXPECT_TRUE(out.metrics.contains("rollout_corr/rollout_rs_token_k1_masked_fraction"));
  EXPECT_TRUE(out.metrics.contains("actor/pg_clipfrac"));

  bypass.loss_type = BypassLossType::reinforce;
  bypass.rollout_correction.rollout_is = ImportanceSamplingLevel::token;
  const auto reinforce = compute_policy_loss(bypass, in.batch());
  const auto is = compute_rollout_correction_weights(in.log_prob - in.old_log_prob, in.mask, ImportanceSamplingLevel::token);
  const MatrixF expected = -(agg_loss_weights(rs.response_mask, LossAggMode::token_mean).array() *
                             is.weights.array() * in.advantages.array()).matrix();
  EXPECT_TRUE(reinforce.grad_log_prob.isApprox(expected, 1e-6f));
  EXPECT_FALSE(reinforce.metrics.contains("actor/pg_clipfrac"));
}

// ---- stop-gradients --------------------------------------------------------------------------------------

TEST(PolicyLossStopGradient, CispoFlowsOnlyThroughTheExplicitLogProb) {
  MatrixF old = MatrixF::Zero(1, 3), lp(1, 3), adv(1, 3), mask = MatrixF::Ones(1, 3);
  lp << -0.1f, -1.0f, 25.0f - 1.0f;  // in range, clipped low, and beyond +20
  old << 0.0f, 0.0f, -1.0f;
  adv << 1.0f, -2.0f, 0.5f;
  const auto out = compute_policy_loss(CISPO{0.2, 0.2}, PolicyLossBatch{old, lp, adv, mask});
  EXPECT_NEAR(out.grad_log_prob(0, 0), -std::exp(-0.1f) * 1.0f / 3.0f, 1e-6);
  EXPECT_NEAR(out.grad_log_prob(0, 1), -0.8f * -2.0f / 3.0f, 1e-6);
  EXPECT_NEAR(out.grad_log_prob(0, 2), -1.2f * 0.5f / 3.0f, 1e-6);
  EXPECT_NEAR(out.metrics.at("actor/pg_clipfrac"), 2.0 / 3.0, 1e-6);
}

TEST(Dppo, TrustRegionsTruncatedRatioMetricsAndGradientByHand) {
  // Four tokens: A > 0 inside / outside the TV region, A < 0 inside / outside; the last has a
  // ratio above clip_ratio_c = 1.5.
  MatrixF old(1, 4), lp(1, 4), adv(1, 4), mask = MatrixF::Ones(1, 4);
  old << std::log(0.5f), std::log(0.5f), std::log(0.5f), std::log(0.2f);
  lp << std::log(0.55f), std::log(0.9f), std::log(0.45f), std::log(0.4f);
  adv << 1.0f, 2.0f, -1.0f, -0.5f;
  const DPPOTV tv{.clip_ratio_low = 0.1, .clip_ratio_high = 0.1, .clip_ratio_c = 1.5};
  const auto out = compute_policy_loss(tv, PolicyLossBatch{old, lp, adv, mask});
  // Kept: token 0 (+0.05 <= 0.1), token 2 (-0.05 >= -0.1), token 3 (+0.2 >= -0.1 with A < 0);
  // dropped: token 1 (+0.4 > 0.1 with A > 0). Token 3's ratio 2 is truncated to 1.5.
  const float r0 = std::exp(lp(0, 0) - old(0, 0)), r2 = std::exp(lp(0, 2) - old(0, 2));
  const float want = (-1.0f * r0 * lp(0, 0) + 1.0f * r2 * lp(0, 2) + 0.5f * 1.5f * lp(0, 3)) / 4.0f;
  EXPECT_NEAR(out.pg_loss, want, 1e-6);
  EXPECT_NEAR(out.grad_log_prob(0, 0), -1.0f * r0 / 4.0f, 1e-6);
  EXPECT_EQ(out.grad_log_prob(0, 1), 0.0f);  // outside the region: no gradient at all
  EXPECT_NEAR(out.grad_log_prob(0, 3), 0.5f * 1.5f / 4.0f, 1e-6);
  EXPECT_NEAR(out.metrics.at("actor/pg_clipfrac"), 0.25, 1e-6);
  EXPECT_NEAR(out.metrics.at("actor/pg_clipfrac_lower"), 0.25, 1e-6);  // truncated and kept
  // The binary-KL region keeps token 1 only when its KL is small enough: not at 0.1.
  const auto kl = compute_policy_loss(DPPOKL{.clip_ratio_low = 0.1, .clip_ratio_high = 0.1, .clip_ratio_c = 1.5},
                                      PolicyLossBatch{old, lp, adv, mask});
  EXPECT_EQ(kl.grad_log_prob(0, 1), 0.0f);
  const auto wide = compute_policy_loss(DPPOKL{.clip_ratio_low = 5.0, .clip_ratio_high = 5.0, .clip_ratio_c = 1.5},
                                        PolicyLossBatch{old, lp, adv, mask});
  EXPECT_NE(wide.grad_log_prob(0, 1), 0.0f);
  EXPECT_EQ(wide.metrics.at("actor/pg_clipfrac"), 0.0);
}

TEST(Dro, NeedsAPositiveBetaFromTheConfig) {
  PolicyLossConfig config;
  const std::string unset = message_of<InvalidArgument>([&] { (void)make_policy_loss("dro", config); });
  EXPECT_NE(unset.find("policy_loss.dro_beta"), std::string::npos) << unset;
  EXPECT_NE(unset.find("null"), std::string::npos) << unset;
  config.policy_loss.dro_beta = -1.0;
  EXPECT_NE(message_of<InvalidArgument>([&] { (void)make_policy_loss("dro", config); }).find("-1"), std::string::npos);
  config.policy_loss.dro_beta = 0.5;
  EXPECT_EQ(make_policy_loss("dro", config).get_if<DRO>()->beta, 0.5);
  // The DPPO losses take clip_ratio_c from the actor config (3.0 by default there).
  EXPECT_EQ(make_policy_loss("dppo_tv", config).get_if<DPPOTV>()->clip_ratio_c, 3.0);
}

TEST(PolicyLossStopGradient, GspoHasNoCrossTokenTerms) {
  MatrixF old = MatrixF::Zero(1, 2), lp(1, 2), adv(1, 2), mask = MatrixF::Ones(1, 2);
  lp << 0.1f, -0.1f;  // sequence log-ratio 0: s = 1
  adv << 1.0f, -3.0f;
  const auto out = compute_policy_loss(GSPO{}, PolicyLossBatch{old, lp, adv, mask});
  EXPECT_NEAR(out.grad_log_prob(0, 0), -1.0f / 2.0f, 1e-7);
  EXPECT_NEAR(out.grad_log_prob(0, 1), 3.0f / 2.0f, 1e-7);
}

// ---- the rest of each loss's contract ----------------------------------------------------------------------

TEST(ClipCov, SeededSelectionIsDeterministicAndBounded) {
  const auto in = random_inputs(8, 16, 19);
  const ClipCov loss{.clip_cov_ratio = 0.05, .clip_cov_lb = -10.0, .clip_cov_ub = 10.0, .seed = 42};
  const auto a = compute_policy_loss(loss, in.batch());
  const auto b = compute_policy_loss(loss, in.batch());
  EXPECT_EQ(a.pg_loss, b.pg_loss);
  EXPECT_TRUE(a.grad_log_prob == b.grad_log_prob);
  const double valid = in.mask.sum();
  const auto budget = std::max<Index>(static_cast<Index>(0.05 * valid), 1);
  EXPECT_NEAR(a.metrics.at("actor/pg_clipfrac"), static_cast<double>(budget) / valid, 1e-6);
  Index zeroed = 0;
  for (Index k = 0; k < a.grad_log_prob.size(); ++k)
    zeroed += in.mask.data()[k] != 0 && a.grad_log_prob.data()[k] == 0.0f && in.advantages.data()[k] != 0;
  EXPECT_GE(zeroed, budget);  // the zeroed tokens, plus any clipped ones
  EXPECT_FALSE(a.metrics.contains("actor/pg_clipfrac_lower"));
}

TEST(GpgLoss, HasNoMetrics) {
  const auto in = random_inputs(2, 3, 20);
  EXPECT_TRUE(compute_policy_loss(GPGLoss{}, in.batch()).metrics.empty());
}

TEST(DeprecatedComputePolicyLoss, EqualsVanillaWithItsOwnKeys) {
  const auto in = random_inputs(3, 6, 21);
  for (const auto mode : kModes) {
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
    const auto old_style = compute_policy_loss_deprecated(in.old_log_prob, in.log_prob, in.advantages, in.mask, 0.2,
                                                          std::nullopt, 0.3, 2.0, mode);
#pragma GCC diagnostic pop
    const auto vanilla = compute_policy_loss(VanillaPPO{0.2, 0.3, 2.0}, in.batch(), {mode, {}});
    EXPECT_EQ(old_style.pg_loss, vanilla.pg_loss);
    EXPECT_EQ(old_style.pg_clipfrac, vanilla.metrics.at("actor/pg_clipfrac"));
    EXPECT_EQ(old_style.ppo_kl, vanilla.metrics.at("actor/ppo_kl"));
    EXPECT_EQ(old_style.pg_clipfrac_lower, vanilla.metrics.at("actor/pg_clipfrac_lower"));
    EXPECT_TRUE(old_style.grad_log_prob == vanilla.grad_log_prob);
  }
}

TEST(PolicyLossBatchViews, BlocksAndMapsBindWithoutCopies) {
  const auto in = random_inputs(6, 10, 22);
  // The left 3x5 corner of each input, as views.
  const auto block = [](const MatrixF& m) { return ConstMatrixRefF(m.topLeftCorner(3, 5)); };
  const PolicyLossBatch view{block(in.old_log_prob), block(in.log_prob), block(in.advantages), block(in.mask)};
  const MatrixF old = in.old_log_prob.topLeftCorner(3, 5), lp = in.log_prob.topLeftCorner(3, 5),
                adv = in.advantages.topLeftCorner(3, 5), mask = in.mask.topLeftCorner(3, 5);
  const auto a = compute_policy_loss(VanillaPPO{}, view);
  const auto b = compute_policy_loss(VanillaPPO{}, PolicyLossBatch{old, lp, adv, mask});
  EXPECT_EQ(a.pg_loss, b.pg_loss);
  EXPECT_TRUE(a.grad_log_prob == b.grad_log_prob);
}
