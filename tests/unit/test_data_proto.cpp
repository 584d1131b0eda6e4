// DataProto: verl's batch container operations.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "verl/data/data_proto.hpp"

using namespace verl;
using verl::data::DataProto;

namespace {

/// Four samples: "x" rows are [10i, 10i+1], "ids" rows [i], "name" = "s<i>".
DataProto four() {
  MatrixF x(4, 2);
  MatrixI64 ids(4, 1);
  for (int i = 0; i < 4; ++i) {
    x(i, 0) = 10.0f * i;
    x(i, 1) = 10.0f * i + 1;
    ids(i, 0) = i;
  }
  DataProto data;
  data.set("x", x).set("ids", ids);
  data.set_non_tensor("name", std::vector<std::string>{"s0", "s1", "s2", "s3"});
  data.meta_info()["temperature"] = 1.0;
  return data;
}

std::vector<std::string> names(const DataProto& d) { return d.non_tensor<std::string>("name"); }

std::vector<std::int64_t> ids(const DataProto& d) {
  const auto& m = d.tensor<std::int64_t>("ids");
  return std::vector<std::int64_t>(m.data(), m.data() + m.size());
}

}  // namespace

TEST(DataProto, AccessAndErrors) {
  DataProto d = four();
  EXPECT_EQ(d.size(), 4);
  EXPECT_EQ(d.tensor("x")(2, 1), 21.0f);
  try {
    (void)d.tensor("y");
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_STREQ(e.what(), "batch['y']: no such tensor (tensors: ids, x)");
  }
  try {
    (void)d.tensor<float>("ids");
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_STREQ(e.what(), "batch['ids']: expected a float32 tensor, got int64");
  }
  EXPECT_THROW((void)d.non_tensor<std::int64_t>("name"), InvalidArgument);
  try {
    d.set("bad", MatrixF::Zero(3, 2));
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_STREQ(e.what(), "bad: expected 4 rows (the batch size), got 3");
  }
  EXPECT_THROW(d.set_non_tensor("short", std::vector<double>{1.0}), InvalidArgument);
}

TEST(DataProto, SelectPopRenameUnion) {
  DataProto d = four();
  const DataProto only_x = d.select(std::vector<std::string>{"x"}, std::vector<std::string>{});
  EXPECT_TRUE(only_x.has_tensor("x"));
  EXPECT_FALSE(only_x.has_tensor("ids"));
  EXPECT_FALSE(only_x.has_non_tensor("name"));
  EXPECT_EQ(only_x.meta_info()["temperature"], 1.0);
  EXPECT_THROW(d.select(std::vector<std::string>{"nope"}), InvalidArgument);

  DataProto popped = d.pop({"x"}, {"name"}, {"temperature"});
  EXPECT_TRUE(popped.has_tensor("x"));
  EXPECT_FALSE(d.has_tensor("x"));
  EXPECT_FALSE(d.meta_info().contains("temperature"));
  EXPECT_EQ(popped.size(), 4);
  EXPECT_THROW(d.pop({"x"}), InvalidArgument);

  d.rename({"ids"}, {"uid"});
  EXPECT_TRUE(d.has_tensor("uid"));
  d.union_with(popped);
  EXPECT_TRUE(d.has_tensor("x") && d.has_non_tensor("name"));
  DataProto conflicting = four();
  conflicting.mutable_tensor("x")(0, 0) = -1.0f;
  EXPECT_THROW(d.union_with(conflicting.select(std::vector<std::string>{"x"})), InvalidArgument);
}

TEST(DataProto, SliceSelectIdxsReorder) {
  DataProto d = four();
  EXPECT_EQ(names(d.slice(1, 3)), (std::vector<std::string>{"s1", "s2"}));
  EXPECT_EQ(names(d.slice(std::nullopt, std::nullopt, 2)), (std::vector<std::string>{"s0", "s2"}));
  EXPECT_EQ(names(d.slice(-2)), (std::vector<std::string>{"s2", "s3"}));
  EXPECT_EQ(names(d.slice(std::nullopt, std::nullopt, -1)), (std::vector<std::string>{"s3", "s2", "s1", "s0"}));
  EXPECT_EQ(d.slice(3, 1).size(), 0);
  const std::vector<Index> picks = {3, 0, 3};
  const DataProto picked = d.select_idxs(picks);
  EXPECT_EQ(ids(picked), (std::vector<std::int64_t>{3, 0, 3}));
  EXPECT_EQ(picked.tensor("x")(0, 1), 31.0f);
  const std::vector<Index> out_of_range = {4};
  EXPECT_THROW(d.select_idxs(out_of_range), InvalidArgument);
  const bool mask[] = {true, false, false, true};
  EXPECT_EQ(names(d.select_mask(mask)), (std::vector<std::string>{"s0", "s3"}));
  const std::vector<Index> order = {2, 3, 0, 1};
  d.reorder(order);
  EXPECT_EQ(ids(d), (std::vector<std::int64_t>{2, 3, 0, 1}));
}

TEST(DataProto, RepeatChunkSplitConcat) {
  const DataProto d = four().slice(0, 2);
  EXPECT_EQ(names(d.repeat(3)), (std::vector<std::string>{"s0", "s0", "s0", "s1", "s1", "s1"}));
  EXPECT_EQ(names(d.repeat(2, false)), (std::vector<std::string>{"s0", "s1", "s0", "s1"}));

  const DataProto all = four();
  const auto chunks = all.chunk(2);
  ASSERT_EQ(chunks.size(), 2u);
  EXPECT_EQ(names(chunks[1]), (std::vector<std::string>{"s2", "s3"}));
  EXPECT_THROW(all.chunk(3), InvalidArgument);
  const auto parts = all.split(3);
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[1].size(), 1);

  const DataProto joined = DataProto::concat(chunks);
  EXPECT_EQ(ids(joined), (std::vector<std::int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(joined.tensor("x")(3, 0), 30.0f);
  EXPECT_EQ(joined.meta_info()["temperature"], 1.0);

  DataProto other = chunks[0];
  other.meta_info()["temperature"] = 0.5;
  EXPECT_THROW(DataProto::concat({chunks[1], other}), InvalidArgument);
  DataProto narrow = chunks[0];
  narrow.set("x", MatrixF::Zero(2, 5));
  EXPECT_THROW(DataProto::concat({chunks[1], narrow}), InvalidArgument);
}

TEST(DataProto, ConcatGathersWorkerMetrics) {
  DataProto a = four().slice(0, 2), b = four().slice(2, 4);
  a.meta_info()["metrics"] = {{"actor/pg_loss", 0.5}};
  b.meta_info()["metrics"] = {{"actor/pg_loss", 0.7}};
  const DataProto joined = DataProto::concat({a, b});
  EXPECT_EQ(joined.meta_info()["metrics"]["actor/pg_loss"], nlohmann::json({0.5, 0.7}));
}

TEST(DataProto, PadToDivisorAndUnpad) {
  DataProto d = four().slice(0, 3);
  const Index pad = d.pad_to_divisor(4);
  EXPECT_EQ(pad, 1);
  EXPECT_EQ(names(d), (std::vector<std::string>{"s0", "s1", "s2", "s0"}));
  d.unpad(pad);
  EXPECT_EQ(d.size(), 3);
  DataProto one = four().slice(0, 1);
  EXPECT_EQ(one.pad_to_divisor(4), 3);
  EXPECT_EQ(names(one), (std::vector<std::string>{"s0", "s0", "s0", "s0"}));
  EXPECT_EQ(four().pad_to_divisor(2), 0);
}
