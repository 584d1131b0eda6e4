// The report behind verl_plan: the issue's example, dtype and parameter-count parsing.
#include <gtest/gtest.h>

#include <string>

#include "verl/parallel/reshard_report.hpp"

using namespace verl;
using namespace verl::parallel;

TEST(ReshardReport, IssueExample) {
  // verl_plan --train pp=2,tp=4,dp=1 --gen pp=1,tp=2,dp=4 --params 7e9
  const ReshardGeometry g =
      ReshardGeometry::from_sizes(parse_axis_sizes("pp=2,tp=4,dp=1"), parse_axis_sizes("pp=1,tp=2,dp=4"));
  const ReshardReport report = make_reshard_report(g, parse_param_count("7e9"), "bf16");
  EXPECT_EQ(report.model_bytes(), 14'000'000'000LL);
  ASSERT_EQ(report.strategies[0].name, "hybridflow");
  EXPECT_EQ(report.strategies[0].bytes, (ReshardBytes{5'250'000'000LL, 7'000'000'000LL, 0}));
  EXPECT_EQ(report.strategies[1].name, "hybridflow_v");
  EXPECT_EQ(report.strategies[1].bytes, (ReshardBytes{12'250'000'000LL, 14'000'000'000LL, 1'750'000'000LL}));
  EXPECT_EQ(report.strategies[2].name, "full_allgather");
  EXPECT_EQ(report.micro_dp_groups, (std::vector<std::vector<std::int64_t>>{{0, 1, 4, 5}, {2, 3, 6, 7}}));
  ASSERT_EQ(report.ranks.size(), 8u);
  EXPECT_EQ(report.ranks[5].gen, (ParallelCoords{0, 0, 3}));
  const std::string table = format_reshard_table(report);
  EXPECT_NE(table.find("5.25 GB (3/8 M)"), std::string::npos) << table;
  EXPECT_NE(table.find("[0, 1, 4, 5]"), std::string::npos) << table;
}

TEST(ReshardReport, GenerationDpIsInferredWhenMissing) {
  const ReshardGeometry g = ReshardGeometry::from_sizes(parse_axis_sizes("pp=2,tp=4"), parse_axis_sizes("tp=2"));
  EXPECT_EQ(g.gen_dp, 4);
}

TEST(ReshardReport, ParsingErrorsNameTheArgument) {
  EXPECT_EQ(dtype_bytes("fp32"), 4);
  EXPECT_EQ(dtype_bytes("bfloat16"), 2);
  EXPECT_EQ(parse_param_count("1500000000"), 1'500'000'000LL);
  try {
    (void)dtype_bytes("int3");
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("dtype: expected one of bf16"), std::string::npos);
  }
  try {
    (void)parse_param_count("7.5");
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_STREQ(e.what(), "params: expected a positive whole number of parameters like 7e9, got '7.5'");
  }
  EXPECT_THROW((void)parse_param_count("-1"), InvalidArgument);
  EXPECT_THROW((void)parse_param_count("7B"), InvalidArgument);
}
