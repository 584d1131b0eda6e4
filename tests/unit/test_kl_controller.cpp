// KL coefficient controllers: verl's update rule, the factory and its errors.
#include <gtest/gtest.h>

#include <string>

#include "verl/algo/kl/controller.hpp"
#include "../support/error_message.hpp"

using namespace verl;
using namespace verl::algo;
using verl::test_support::message_of;

namespace {

}  // namespace

TEST(KLController, ConceptAndNames) {
  static_assert(KLController<FixedKLController> && KLController<AdaptiveKLController>);
  static_assert(!KLController<int>);
  EXPECT_EQ(FixedKLController::name, "fixed");
  EXPECT_EQ(AdaptiveKLController::name, "adaptive");
  EXPECT_EQ(FixedKLController::class_name, "FixedKLController");
  EXPECT_EQ(AdaptiveKLController::class_name, "AdaptiveKLController");
}

TEST(KLController, FixedNeverMoves) {
  FixedKLController fixed(0.05);
  for (double kl : {0.0, 1.0, 100.0}) fixed.update(kl, 256);
  EXPECT_EQ(fixed.value, 0.05);
  EXPECT_EQ(FixedKLController{}.value, 0.001);  // verl's default kl_coef
}

TEST(KLController, AdaptiveFollowsVerlsProportionalRule) {
  AdaptiveKLController c(0.2, 6.0, 10000);
  // kl below target: error = 3/6 - 1 = -0.5, clipped to -0.2.
  c.update(3.0, 256);
  EXPECT_EQ(c.value, 0.2 * (1.0 + -0.2 * 256.0 / 10000.0));
  // kl above target within the clip: error = 6.6/6 - 1.
  const double before = c.value;
  c.update(6.6, 128);
  EXPECT_EQ(c.value, before * (1.0 + (6.6 / 6.0 - 1.0) * 128.0 / 10000.0));
  // far above: clipped to +0.2.
  const double before2 = c.value;
  c.update(1e9, 10000);
  EXPECT_EQ(c.value, before2 * 1.2);
}

TEST(KLController, AdaptiveRejectsNonPositiveHorizon) {
  const std::string msg = message_of<InvalidArgument>([] { AdaptiveKLController c(0.1, 0.1, 0); });
  EXPECT_NE(msg.find("horizon"), std::string::npos) << msg;
  EXPECT_THROW(AdaptiveKLController(0.1, 0.1, -5), InvalidArgument);
}

TEST(KLController, FactoryBuildsTheConfiguredController) {
  KLControlConfig cfg;
  cfg.type = "adaptive";
  cfg.kl_coef = 0.01;
  cfg.target_kl = 0.1;
  cfg.horizon = 10000;
  AnyKLController c = get_kl_controller(cfg);
  ASSERT_TRUE(std::holds_alternative<AdaptiveKLController>(c));
  EXPECT_EQ(class_name_of(c), "AdaptiveKLController");
  EXPECT_EQ(kl_coefficient(c), 0.01);
  update_kl_controller(c, 0.2, 100);
  EXPECT_EQ(kl_coefficient(c), 0.01 * (1.0 + 0.2 * 100.0 / 10000.0));

  cfg.type = "fixed";
  cfg.horizon = 0;  // only the adaptive controller reads the horizon, as in verl
  c = get_kl_controller(cfg);
  ASSERT_TRUE(std::holds_alternative<FixedKLController>(c));
  EXPECT_EQ(class_name_of(c), "FixedKLController");
  update_kl_controller(c, 0.2, 100);
  EXPECT_EQ(kl_coefficient(c), 0.01);
}

TEST(KLController, FactoryErrorsNameTheField) {
  KLControlConfig cfg;
  cfg.type = "adaptive";
  cfg.horizon = 0;
  std::string msg = message_of<InvalidArgument>([&] { (void)get_kl_controller(cfg); });
  EXPECT_NE(msg.find("kl_ctrl.horizon"), std::string::npos) << msg;
  cfg.type = "pid";
  msg = message_of<InvalidArgument>([&] { (void)get_kl_controller(cfg); });
  EXPECT_NE(msg.find("kl_ctrl.type"), std::string::npos) << msg;
  EXPECT_NE(msg.find("fixed"), std::string::npos) << msg;
  EXPECT_NE(msg.find("adaptive"), std::string::npos) << msg;
  EXPECT_NE(msg.find("pid"), std::string::npos) << msg;
}
