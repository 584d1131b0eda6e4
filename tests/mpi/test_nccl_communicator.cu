// NcclCommunicator on real GPUs (one per rank), bootstrapped over MPI. Built whenever CUDA and
// NCCL are found; every test skips itself when the ranks do not each have a GPU.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <numeric>
#include <vector>

#include "verl/parallel/nccl_communicator.cuh"

using namespace verl;
using namespace verl::parallel;

namespace {

int visible_gpus() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess ? count : 0;
}

// A device copy of a host vector, freed on scope exit.
template <class T>
struct DeviceVector {
  explicit DeviceVector(const std::vector<T>& host) : size(host.size()) {
    EXPECT_EQ(cudaMalloc(&data, sizeof(T) * size), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(data, host.data(), sizeof(T) * size, cudaMemcpyHostToDevice), cudaSuccess);
  }
  explicit DeviceVector(std::size_t n) : DeviceVector(std::vector<T>(n)) {}
  ~DeviceVector() { cudaFree(data); }
  std::vector<T> to_host() const {
    std::vector<T> host(size);
    EXPECT_EQ(cudaMemcpy(host.data(), data, sizeof(T) * size, cudaMemcpyDeviceToHost), cudaSuccess);
    return host;
  }
  std::span<T> span() { return {data, size}; }
  T* data = nullptr;
  std::size_t size;
};

class Nccl : public ::testing::Test {
 protected:
  void SetUp() override {
    if (visible_gpus() < world.size()) GTEST_SKIP() << "needs one GPU per rank (" << world.size() << ")";
    comm.emplace(NcclCommunicator::bootstrap(world, world.rank() % visible_gpus()));
  }
  MpiCommunicator world = MpiCommunicator::world();
  std::optional<NcclCommunicator> comm;
};

}  // namespace

TEST_F(Nccl, CollectivesMatchTheirDefinitions) {
  const int n = comm->size(), r = comm->rank();
  DeviceVector<float> data(std::vector<float>{float(r + 1), float(2 * r)});
  comm->all_reduce(data.span(), ReduceOp::sum);
  DeviceVector<bf16> half(std::vector<bf16>{bf16(float(r))});
  comm->all_reduce(half.span(), ReduceOp::max);
  DeviceVector<std::int64_t> mine(std::vector<std::int64_t>{r, 10 + r});
  DeviceVector<std::int64_t> all(2 * static_cast<std::size_t>(n));
  comm->all_gather(std::span<const std::int64_t>(mine.span()), all.span());
  comm->synchronize();
  EXPECT_EQ(data.to_host(), (std::vector<float>{float(n * (n + 1) / 2), float(n * (n - 1))}));
  EXPECT_EQ(static_cast<float>(half.to_host()[0]), float(n - 1));
  const auto gathered = all.to_host();
  for (int i = 0; i < n; ++i) EXPECT_EQ(gathered[2 * i + 1], 10 + i);

  std::vector<std::int64_t> counts(static_cast<std::size_t>(n));
  std::iota(counts.begin(), counts.end(), 1);
  DeviceVector<double> variable(std::vector<double>(static_cast<std::size_t>(r + 1), double(r)));
  DeviceVector<double> variable_all(static_cast<std::size_t>(n * (n + 1) / 2));
  comm->all_gather_v(std::span<const double>(variable.span()), variable_all.span(), counts);
  DeviceVector<std::int32_t> blocks(std::vector<std::int32_t>(static_cast<std::size_t>(n), r));
  DeviceVector<std::int32_t> reduced(1);
  comm->reduce_scatter(std::span<const std::int32_t>(blocks.span()), reduced.span(), ReduceOp::sum);
  DeviceVector<std::int32_t> exchanged(static_cast<std::size_t>(n));
  comm->all_to_all(std::span<const std::int32_t>(blocks.span()), exchanged.span());
  comm->barrier();
  const auto v = variable_all.to_host();
  std::size_t k = 0;
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j <= i; ++j) EXPECT_EQ(v[k++], double(i));
  }
  EXPECT_EQ(reduced.to_host()[0], n * (n - 1) / 2);
  const auto x = exchanged.to_host();
  for (int i = 0; i < n; ++i) EXPECT_EQ(x[static_cast<std::size_t>(i)], i);
}

TEST_F(Nccl, PointToPointAndSplit) {
  const int n = comm->size(), r = comm->rank();
  DeviceVector<float> out(std::vector<float>{float(r)});
  DeviceVector<float> in(1);
  comm->send_recv(std::span<const float>(out.span()), (r + 1) % n, in.span(), (r + n - 1) % n, 0);
  comm->synchronize();
  EXPECT_EQ(in.to_host()[0], float((r + n - 1) % n));
  NcclCommunicator half = comm->split(r % 2, r);
  EXPECT_EQ(half.size(), (n + 1 - r % 2) / 2);
  try {
    comm->all_reduce(std::span<std::int32_t>(), ReduceOp::avg);
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("avg needs a floating-point type"), std::string::npos);
  }
}
