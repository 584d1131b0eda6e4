#include <gtest/gtest.h>

#include "verl/algo/loss_aggregation.hpp"

using namespace verl;
using namespace verl::algo;

TEST(LossAggregation, UnknownModeNamesTheArgument) {
  try {
    (void)parse_loss_agg_mode("token-sum");
    FAIL() << "expected an exception";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("loss_agg_mode"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("token-sum"), std::string::npos);
  }
}

TEST(LossAggregation, MismatchedMaskShapeIsAnError) {
  MatrixF loss = MatrixF::Ones(2, 3);
  MatrixF mask = MatrixF::Ones(3, 2);
  EXPECT_THROW((void)agg_loss(loss, mask, LossAggMode::token_mean), InvalidArgument);
}
