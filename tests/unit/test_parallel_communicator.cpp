// The Communicator concept and the one-process SelfCommunicator.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "verl/parallel/process_group.hpp"
#include "verl/parallel/self_communicator.hpp"
#include "../support/error_message.hpp"

using namespace verl;
using namespace verl::parallel;
using verl::test_support::message_of;

static_assert(Communicator<SelfCommunicator>);
static_assert(!Communicator<int>);
static_assert(CommElement<float> && CommElement<bf16> && CommElement<std::int64_t>);
static_assert(!CommElement<std::uint8_t> && !CommElement<long double>);

TEST(SelfCommunicator, CollectivesOverOneRankAreCopies) {
  SelfCommunicator comm;
  EXPECT_EQ(comm.rank(), 0);
  EXPECT_EQ(comm.size(), 1);
  std::vector<float> data{1.5f, -2.0f};
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max, ReduceOp::min}) {
    comm.all_reduce(std::span(data), op);
    EXPECT_EQ(data, (std::vector<float>{1.5f, -2.0f})) << to_string(op);
  }
  std::vector<float> gathered(2);
  comm.all_gather(std::span(data), std::span(gathered));
  EXPECT_EQ(gathered, data);
  const std::vector<std::int64_t> counts{2};
  comm.all_gather_v(std::span(data), std::span(gathered), counts);
  EXPECT_EQ(gathered, data);
  comm.reduce_scatter(std::span(data), std::span(gathered), ReduceOp::sum);
  EXPECT_EQ(gathered, data);
  comm.all_to_all(std::span(data), std::span(gathered));
  EXPECT_EQ(gathered, data);
  comm.broadcast(std::span(data), 0);
  comm.barrier();
}

TEST(SelfCommunicator, SendToSelfWaitsForTheMatchingRecv) {
  SelfCommunicator comm;
  const std::vector<double> a{1, 2, 3}, b{4};
  comm.send(std::span(a), 0, 1);
  comm.send(std::span(b), 0, 2);
  std::vector<double> got_b(1), got_a(3);
  comm.recv(std::span(got_b), 0, 2);
  comm.recv(std::span(got_a), 0, 1);
  EXPECT_EQ(got_a, a);
  EXPECT_EQ(got_b, b);
  std::vector<bf16> x{bf16(1.0f)}, y(1);
  comm.send_recv(std::span(x), 0, std::span(y), 0, 0);
  EXPECT_EQ(static_cast<float>(y[0]), 1.0f);
  try {
    comm.recv(std::span(got_b), 0, 9);
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_STREQ(e.what(), "recv: expected a message with tag 9 sent before, got none");
  }
}

TEST(SelfCommunicator, MisuseNamesTheCallAndTheSizes) {
  SelfCommunicator comm;
  std::vector<float> two(2), three(3);
  std::vector<std::int32_t> ints(2);
  EXPECT_EQ(message_of([&] { comm.all_gather(std::span(two), std::span(three)); }),
            "all_gather: recv: expected length 2 (send 2 x 1 ranks), got 3");
  EXPECT_EQ(message_of([&] { comm.reduce_scatter(std::span(three), std::span(two), ReduceOp::sum); }),
            "reduce_scatter: send: expected length 2 (recv 2 x 1 ranks), got 3");
  EXPECT_EQ(message_of([&] { comm.all_reduce(std::span(ints), ReduceOp::avg); }),
            "all_reduce: op: expected sum, max or min for int32 (avg needs a floating-point type), got avg");
  EXPECT_EQ(message_of([&] { comm.broadcast(std::span(two), 1); }), "broadcast: root: expected a rank in [0, 1), got 1");
  const std::vector<std::int64_t> counts{3};
  EXPECT_EQ(message_of([&] { comm.all_gather_v(std::span(two), std::span(three), counts); }),
            "all_gather_v: send: expected length counts[0] = 3, got 2");
  EXPECT_EQ(message_of([&] { comm.all_to_all(std::span(two), std::span(three)); }),
            "all_to_all: recv: expected the length of send 2, got 3");
}

TEST(SelfCommunicator, SubCommunicatorOfAOneRankMesh) {
  SelfCommunicator comm;
  const Mesh<TP<1>, DP<1>> mesh;
  SelfCommunicator tp = sub_communicator(comm, mesh, AxisKind::tp);
  EXPECT_EQ(tp.size(), 1);
  try {
    (void)sub_communicator(comm, Mesh<TP<2>>{}, AxisKind::tp);
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_STREQ(e.what(), "mesh: expected a mesh over the communicator's 1 ranks, got 2 ranks (tp=2)");
  }
}

// ProcessGroup: any communicator behind one type, itself a Communicator.
static_assert(parallel::Communicator<parallel::ProcessGroup>);

TEST(ProcessGroup, ForwardsEveryCollectiveToItsBackend) {
  parallel::ProcessGroup group;  // a SelfCommunicator
  EXPECT_EQ(group.rank(), 0);
  EXPECT_EQ(group.size(), 1);
  std::vector<double> values{1.5, -2.0};
  group.all_reduce(std::span<double>(values), parallel::ReduceOp::sum);
  EXPECT_EQ(values, (std::vector<double>{1.5, -2.0}));
  const std::vector<float> send{3.0f, 4.0f};
  std::vector<float> recv(2, 0.0f);
  group.all_gather<float>(send, recv);
  EXPECT_EQ(recv, send);
  std::vector<std::int64_t> counts{2};
  std::fill(recv.begin(), recv.end(), 0.0f);
  group.all_gather_v<float>(send, recv, counts);
  EXPECT_EQ(recv, send);
  std::vector<parallel::bf16> halves{parallel::bf16(1.0f)}, out(1);
  group.all_to_all<parallel::bf16>(halves, out);
  EXPECT_EQ(static_cast<float>(out[0]), 1.0f);
  std::vector<std::int32_t> ints{7};
  group.broadcast(std::span<std::int32_t>(ints), 0);
  EXPECT_EQ(ints[0], 7);
  group.send(std::span<const float>(send), 0, 5);
  std::vector<float> got(2);
  group.recv(std::span<float>(got), 0, 5);
  EXPECT_EQ(got, send);
  parallel::ProcessGroup part = group.split(0, 0);
  EXPECT_EQ(part.size(), 1);
  part.barrier();
}

TEST(ProcessGroup, BorrowsACommunicatorAndKeepsItsChecks) {
  parallel::SelfCommunicator self;
  parallel::ProcessGroup group = parallel::ProcessGroup::borrowing(self);
  const std::vector<float> send{1.0f, 2.0f};
  std::vector<float> wrong(3);
  // The backend's own argument checks still apply, with its message.
  EXPECT_NE(message_of([&] { group.all_gather<float>(send, wrong); }).find("all_gather: recv: expected length 2"),
            std::string::npos);
  // A message sent through the group arrives on the borrowed communicator.
  group.send(std::span<const float>(send), 0, 9);
  std::vector<float> got(2);
  self.recv(std::span<float>(got), 0, 9);
  EXPECT_EQ(got, send);
}
