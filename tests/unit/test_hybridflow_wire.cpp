// The HybridFlow runtime's pure parts: the wire format (every codec round-trips; truncated or
// corrupt buffers are named errors, never undefined behaviour) and the DataProto split/collect
// of the dispatch modes (verl's chunking, its auto-padding, the Megatron collect ranks).
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "verl/hybridflow/dispatch.hpp"
#include "verl/hybridflow/wire.hpp"
#include "../support/error_message.hpp"

namespace {

using namespace verl;
using namespace verl::hybridflow;
using data::DataProto;
using verl::test_support::message_of;

DataProto sample_proto() {
  DataProto p;
  MatrixF x(3, 2);
  x << 1.5f, -2.0f, 0.25f, 1e-30f, 7.0f, -0.0f;
  MatrixI64 ids(3, 4);
  ids << 1, 2, 3, 4, 5, 6, 7, 8, -9, 10, 11, std::numeric_limits<std::int64_t>::max();
  p.set("x", x).set("ids", ids);
  p.set_non_tensor("text", std::vector<std::string>{"a", "", "ünïcode"});
  p.set_non_tensor("uid", std::vector<std::int64_t>{3, 3, 9});
  p.set_non_tensor("score", std::vector<double>{0.1, -1e300, 2.5});
  p.set_non_tensor("extra", std::vector<nlohmann::json>{{{"k", 1}}, nullptr, {1, 2, "x"}});
  p.meta_info()["temperature"] = 0.7;
  p.meta_info()["metrics"] = {{"loss", 1.25}};
  return p;
}

bool same(const DataProto& a, const DataProto& b) {
  if (a.size() != b.size() || a.meta_info() != b.meta_info()) return false;
  if (a.tensors().size() != b.tensors().size() || a.non_tensors() != b.non_tensors()) return false;
  for (const auto& [name, column] : a.tensors()) {
    const auto found = b.tensors().find(name);
    if (found == b.tensors().end() || column.index() != found->second.index()) return false;
    const bool equal = std::visit(
        [&](const auto& m) {
          const auto& other = std::get<std::decay_t<decltype(m)>>(found->second);
          return m.rows() == other.rows() && m.cols() == other.cols() &&
                 std::memcmp(m.data(), other.data(), static_cast<std::size_t>(m.size()) * sizeof(m.data()[0])) == 0;
        },
        column);
    if (!equal) return false;
  }
  return true;
}

TEST(HybridFlowWire, EveryCodecRoundTrips) {
  EXPECT_EQ(from_bytes<int>(to_bytes(-42)), -42);
  EXPECT_EQ(from_bytes<double>(to_bytes(0.1)), 0.1);
  EXPECT_EQ(from_bytes<std::string>(to_bytes(std::string("with\0nul", 8))), std::string("with\0nul", 8));
  const std::vector<std::string> words{"x", "", "yz"};
  EXPECT_EQ(from_bytes<std::vector<std::string>>(to_bytes(words)), words);
  const std::map<std::string, double, std::less<>> metrics{{"actor/pg_loss", -0.5}, {"critic/vf_loss", 2.0}};
  EXPECT_EQ((from_bytes<std::map<std::string, double, std::less<>>>(to_bytes(metrics))), metrics);
  const std::optional<std::vector<float>> some = std::vector<float>{1.0f, 2.0f}, none;
  EXPECT_EQ(from_bytes<std::optional<std::vector<float>>>(to_bytes(some)), some);
  EXPECT_EQ(from_bytes<std::optional<std::vector<float>>>(to_bytes(none)), none);
  const auto tuple = std::make_tuple(std::int64_t{7}, std::string("s"), 2.5f);
  EXPECT_EQ((from_bytes<std::tuple<std::int64_t, std::string, float>>(to_bytes(tuple))), tuple);
  const nlohmann::json json = {{"a", {1, 2.5, "three"}}, {"b", nullptr}};
  EXPECT_EQ(from_bytes<nlohmann::json>(to_bytes(json)), json);
  MatrixF m(2, 3);
  m << 1, 2, 3, 4, 5, 6;
  EXPECT_EQ(from_bytes<MatrixF>(to_bytes(m)), m);
  EXPECT_EQ(from_bytes<MatrixF>(to_bytes(MatrixF(0, 5))).cols(), 5);
  const DataProto p = sample_proto();
  EXPECT_TRUE(same(from_bytes<DataProto>(to_bytes(p)), p));
  EXPECT_TRUE(same(from_bytes<DataProto>(to_bytes(DataProto{})), DataProto{}));
}

TEST(HybridFlowWire, TruncatedAndCorruptMessagesAreNamedErrors) {
  const Bytes whole = to_bytes(sample_proto());
  // Every truncation is refused (the last byte included), never read past the end.
  for (std::size_t cut = 0; cut < whole.size(); ++cut) {
    const std::span<const std::byte> part(whole.data(), cut);
    EXPECT_THROW((void)from_bytes<DataProto>(part), std::exception) << cut;
  }
  // Trailing bytes are refused too.
  Bytes longer = whole;
  longer.push_back(std::byte{0});
  EXPECT_NE(message_of([&] { (void)from_bytes<DataProto>(longer); }).find("1 unread bytes"), std::string::npos);
  // A length that claims more than the buffer holds names what it was reading.
  Bytes lying = to_bytes(std::vector<double>{1.0, 2.0});
  lying[0] = std::byte{0xff};
  EXPECT_NE(message_of([&] { (void)from_bytes<std::vector<double>>(lying); }).find("a vector's length claims"), std::string::npos);
  // Random corruption: an error or a value, never a crash (run under the sanitizers in CI).
  std::mt19937_64 rng(5);
  for (int trial = 0; trial < 3000; ++trial) {
    Bytes bad = whole;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f) bad[rng() % bad.size()] = static_cast<std::byte>(rng() & 0xff);
    try {
      (void)from_bytes<DataProto>(bad);
    } catch (const std::exception&) {
    }
  }
}

TEST(HybridFlowDispatch, ChunksAreVerlsAndPaddingIsCutFromTheResult) {
  DataProto batch;
  MatrixF x(7, 1);
  for (Index i = 0; i < 7; ++i) x(i, 0) = static_cast<float>(i);
  batch.set("x", x);
  // Without padding a batch that does not divide is refused, naming the call and the sizes.
  const std::vector<DataProto> arguments{batch};
  EXPECT_NE(message_of([&] { (void)chunk_protos(arguments, 3, "Actor.update"); })
                .find("Actor.update: argument 0: a batch of 7 rows does not split over 3 ranks"),
            std::string::npos);
  // verl's padding: copies of the leading rows, cut again after the concatenation.
  batch.meta_info()["_verl_auto_padding"] = true;
  const std::vector<DataProto> padded{batch, batch};
  const ChunkedProtos chunked = chunk_protos(padded, 3, "Actor.update");
  EXPECT_EQ(chunked.padding, 2);
  ASSERT_EQ(chunked.chunks.size(), 2u);
  ASSERT_EQ(chunked.chunks[0].size(), 3u);
  EXPECT_EQ(chunked.chunks[0][2].tensor("x"), (MatrixF(3, 1) << 6, 0, 1).finished());
  const DataProto back = concat_and_unpad(chunked.chunks[0], chunked.padding);
  EXPECT_EQ(back.tensor("x"), x);
  // DataProtos of different lengths cannot share one padding.
  DataProto shorter = batch.slice(0, 5);
  const std::vector<DataProto> mismatched{batch, shorter};
  EXPECT_NE(message_of([&] { (void)chunk_protos(mismatched, 3, "Actor.update"); }).find("padding needs DataProtos of one length (7), got 5"),
            std::string::npos);
}

TEST(HybridFlowDispatch, MegatronCollectsFromTpRankZeroOfTheLastStage) {
  // tp = 2, dp = 3, pp = 2 in Megatron's order (tp fastest, then dp, then pp).
  const GroupMesh mesh(2, 3, 2);
  int collected = 0;
  std::vector<int> per_dp(3, 0);
  for (std::int64_t rank = 0; rank < 12; ++rank) {
    const RankRole role = megatron_role(mesh, rank);
    EXPECT_EQ(role.dp_rank, (rank / 2) % 3) << rank;
    EXPECT_EQ(role.collect, rank % 2 == 0 && rank >= 6) << rank;
    if (role.collect) {
      ++collected;
      ++per_dp[static_cast<std::size_t>(role.dp_rank)];
    }
  }
  EXPECT_EQ(collected, 3);
  EXPECT_EQ(per_dp, (std::vector<int>{1, 1, 1}));
  EXPECT_EQ(to_string(Dispatch::megatron_compute_proto), "MEGATRON_COMPUTE_PROTO");
}

}  // namespace
