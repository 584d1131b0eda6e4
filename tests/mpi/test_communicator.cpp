// Every collective of MpiCommunicator, for every element type, on 1, 2 and 4 ranks; errors as
// exceptions naming the call and the rank; sub-communicators from mesh slices.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "verl/parallel/mpi_communicator.hpp"

using namespace verl;
using namespace verl::parallel;

namespace {

template <class T>
T value(double x) {
  return static_cast<T>(x);
}
template <>
bf16 value<bf16>(double x) {
  return bf16(static_cast<float>(x));
}
template <class T>
double as_double(T x) {
  return static_cast<double>(static_cast<float>(x));
}

template <class T>
class MpiCollectives : public ::testing::Test {
 protected:
  MpiCommunicator comm = MpiCommunicator::world();
};

using ElementTypes = ::testing::Types<float, double, std::int32_t, std::int64_t, bf16>;
TYPED_TEST_SUITE(MpiCollectives, ElementTypes);

TYPED_TEST(MpiCollectives, AllReduce) {
  using T = TypeParam;
  auto& comm = this->comm;
  const int n = comm.size(), r = comm.rank();
  // Small integers so that bf16 sums are exact.
  std::vector<T> data{value<T>(r + 1), value<T>(2 * r), value<T>(7 - r)};
  comm.all_reduce(std::span(data), ReduceOp::sum);
  EXPECT_EQ(as_double(data[0]), n * (n + 1) / 2.0);
  EXPECT_EQ(as_double(data[1]), n * (n - 1.0));
  EXPECT_EQ(as_double(data[2]), 7.0 * n - n * (n - 1) / 2.0);

  std::vector<T> extremes{value<T>(r), value<T>(-r)};
  comm.all_reduce(std::span(extremes), ReduceOp::max);
  EXPECT_EQ(as_double(extremes[0]), n - 1.0);
  EXPECT_EQ(as_double(extremes[1]), 0.0);
  std::vector<T> lows{value<T>(r), value<T>(-r)};
  comm.all_reduce(std::span(lows), ReduceOp::min);
  EXPECT_EQ(as_double(lows[0]), 0.0);
  EXPECT_EQ(as_double(lows[1]), -(n - 1.0));

  std::vector<T> mean{value<T>(2 * r)};
  if constexpr (std::is_integral_v<T>) {
    try {
      comm.all_reduce(std::span(mean), ReduceOp::avg);
      FAIL() << "avg on integers must throw";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("all_reduce: op: expected sum, max or min"), std::string::npos);
    }
  } else {
    comm.all_reduce(std::span(mean), ReduceOp::avg);
    EXPECT_EQ(as_double(mean[0]), n - 1.0);
  }
}

TYPED_TEST(MpiCollectives, AllGatherEqualAndVariableSizes) {
  using T = TypeParam;
  auto& comm = this->comm;
  const int n = comm.size(), r = comm.rank();
  const std::vector<T> mine{value<T>(10 * r), value<T>(10 * r + 1)};
  std::vector<T> all(2 * static_cast<std::size_t>(n));
  comm.all_gather(std::span(mine), std::span(all));
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(as_double(all[2 * i]), 10.0 * i);
    EXPECT_EQ(as_double(all[2 * i + 1]), 10.0 * i + 1);
  }
  // Rank i contributes i + 1 copies of i.
  std::vector<std::int64_t> counts(static_cast<std::size_t>(n));
  std::iota(counts.begin(), counts.end(), 1);
  const std::vector<T> variable(static_cast<std::size_t>(r + 1), value<T>(r));
  std::vector<T> gathered(static_cast<std::size_t>(n * (n + 1) / 2));
  comm.all_gather_v(std::span(variable), std::span(gathered), counts);
  std::size_t k = 0;
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j <= i; ++j) EXPECT_EQ(as_double(gathered[k++]), i);
  }
}

TYPED_TEST(MpiCollectives, ReduceScatterBroadcastAllToAll) {
  using T = TypeParam;
  auto& comm = this->comm;
  const int n = comm.size(), r = comm.rank();
  // Block j of every rank holds (j, r): the reduced block j is sum_r (j + r).
  std::vector<T> send;
  for (int j = 0; j < n; ++j) send.insert(send.end(), {value<T>(j + r), value<T>(1)});
  std::vector<T> recv(2);
  comm.reduce_scatter(std::span(send), std::span(recv), ReduceOp::sum);
  EXPECT_EQ(as_double(recv[0]), n * r + n * (n - 1) / 2.0);
  EXPECT_EQ(as_double(recv[1]), n);
  if constexpr (!std::is_integral_v<T>) {
    comm.reduce_scatter(std::span(send), std::span(recv), ReduceOp::avg);
    EXPECT_EQ(as_double(recv[1]), 1.0);
  }

  std::vector<T> message{value<T>(r), value<T>(r + 5)};
  comm.broadcast(std::span(message), n - 1);
  EXPECT_EQ(as_double(message[0]), n - 1.0);
  EXPECT_EQ(as_double(message[1]), n + 4.0);

  // all_to_all: block j of rank r is (r, j); rank r receives (i, r) from every i.
  std::vector<T> outgoing, incoming(2 * static_cast<std::size_t>(n));
  for (int j = 0; j < n; ++j) outgoing.insert(outgoing.end(), {value<T>(r), value<T>(j)});
  comm.all_to_all(std::span(outgoing), std::span(incoming));
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(as_double(incoming[2 * i]), i);
    EXPECT_EQ(as_double(incoming[2 * i + 1]), r);
  }
}

TYPED_TEST(MpiCollectives, PointToPoint) {
  using T = TypeParam;
  auto& comm = this->comm;
  const int n = comm.size(), r = comm.rank();
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  // A ring: exchange with send_recv (safe for any message size).
  const std::vector<T> out{value<T>(r), value<T>(r + 1)};
  std::vector<T> in(2);
  comm.send_recv(std::span(out), next, std::span(in), prev, 7);
  EXPECT_EQ(as_double(in[0]), prev);
  // Plain send/recv: even ranks send first, odd ranks receive first.
  if (n > 1) {
    const int partner = r % 2 == 0 ? r + 1 : r - 1;
    if (partner < n) {
      std::vector<T> got(2);
      if (r % 2 == 0) {
        comm.send(std::span(out), partner, 3);
        comm.recv(std::span(got), partner, 3);
      } else {
        comm.recv(std::span(got), partner, 3);
        comm.send(std::span(out), partner, 3);
      }
      EXPECT_EQ(as_double(got[0]), partner);
    }
  }
  comm.barrier();
}

TEST(MpiCommunicator, ArgumentErrorsNameTheCallAndSizes) {
  MpiCommunicator comm = MpiCommunicator::world();
  const int n = comm.size();
  std::vector<float> send(2), recv(2 * static_cast<std::size_t>(n) + 1);
  try {
    comm.all_gather(std::span(send), std::span(recv));
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(std::string(e.what()), fmt::format("all_gather: recv: expected length {} (send 2 x {} ranks), got {}",
                                                 2 * n, n, 2 * n + 1));
  }
  std::vector<float> data(1);
  EXPECT_THROW(comm.broadcast(std::span(data), n), InvalidArgument);
  std::vector<std::int64_t> wrong_counts(static_cast<std::size_t>(n) + 1, 1);
  EXPECT_THROW(comm.all_gather_v(std::span(data), std::span(recv), wrong_counts), InvalidArgument);
}

TEST(MpiCommunicator, MpiFailuresNameTheCallAndRank) {
  MpiCommunicator comm = MpiCommunicator::world();
  // A negative tag is invalid: MPI rejects the call on every rank without communicating.
  const std::vector<double> out(2, 1.0);
  std::vector<double> in(2);
  try {
    comm.send_recv(std::span(out), comm.rank(), std::span(in), comm.rank(), -5);
    FAIL() << "expected a CommunicatorError";
  } catch (const CommunicatorError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find(fmt::format("MPI_Irecv failed on rank {} of {}: MPI_ERR_TAG", comm.rank(), comm.size())),
              std::string::npos)
        << message;
  }
  comm.barrier();
}

// A rank that stops answering (stopped, stuck, or failed elsewhere) does not make the others wait
// forever: past the timeout the collective throws, naming the call and the rank.
TEST(MpiCommunicator, ACollectiveThatWaitsPastTheTimeoutThrows) {
  MpiCommunicator comm = MpiCommunicator::world();
  if (comm.size() < 2) GTEST_SKIP() << "needs another rank to wait for";
  MpiCommunicator slow = MpiCommunicator::world();
  std::vector<double> x(4, 1.0);
  if (comm.rank() == 0) {
    slow.set_timeout(std::chrono::milliseconds(300));
    try {
      slow.all_reduce(std::span(x), ReduceOp::sum);
      FAIL() << "expected a timeout";
    } catch (const CommunicatorError& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find(fmt::format("all_reduce on rank 0 of {}: the other ranks did not answer within 0.3 s",
                                         comm.size())),
                std::string::npos)
          << message;
    }
    EXPECT_THROW(slow.barrier(), CommunicatorError);  // its all_reduce is still pending: unusable
  } else {
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    slow.all_reduce(std::span(x), ReduceOp::sum);  // the pending one on rank 0 completes with it
  }
  comm.barrier();
  EXPECT_THROW(comm.set_timeout(std::chrono::milliseconds(0)), InvalidArgument);
}

TEST(MpiCommunicator, SubCommunicatorsFromMeshSlices) {
  MpiCommunicator world = MpiCommunicator::world();
  const int n = world.size();
  const std::int64_t tp = n >= 2 ? 2 : 1;
  const auto mesh = Mesh<TP<>, DP<>>::of_world(n, tp, inferred);
  for (AxisSet axes : {AxisSet(AxisKind::tp), AxisSet(AxisKind::dp), AxisKind::tp | AxisKind::dp}) {
    MpiCommunicator group_comm = sub_communicator(world, mesh, axes);
    const RankGroup group = mesh.group(world.rank(), axes);
    ASSERT_EQ(group_comm.size(), group.size());
    ASSERT_EQ(group_comm.rank(), *group.index_of(world.rank()));
    // Summing the world ranks inside the group gives the sum of the group's members.
    std::vector<std::int64_t> sum{world.rank()};
    group_comm.all_reduce(std::span(sum), ReduceOp::sum);
    std::int64_t expected = 0;
    for (std::int64_t member : group) expected += member;
    EXPECT_EQ(sum[0], expected) << axes.to_string();
  }
  try {
    (void)sub_communicator(world, RankGroup{static_cast<std::int64_t>(n)});
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("group: expected a group containing rank"), std::string::npos);
  }
}

}  // namespace
