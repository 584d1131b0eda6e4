// DP, TP, SP and PP primitives on real ranks, each against the unsharded computation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <vector>

#include "verl/optim/adamw.hpp"
#include "verl/parallel/bucketed_all_reduce.hpp"
#include "verl/parallel/distributed_optimizer.hpp"
#include "verl/parallel/mpi_communicator.hpp"
#include "verl/parallel/pipeline_executor.hpp"
#include "verl/parallel/tensor_parallel.hpp"
#include "verl/parallel/ulysses.hpp"
#include "verl/parallel/zero_optimizer.hpp"

using namespace verl;
using namespace verl::parallel;

namespace {

// The same pseudo-random matrix on every rank.
MatrixF shared_matrix(Index rows, Index cols, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  MatrixF m(rows, cols);
  for (Index i = 0; i < m.size(); ++i) m.data()[i] = dist(gen);
  return m;
}

// Small integers: their sums and their means over 1, 2 or 4 ranks are exact in float.
std::vector<float> integer_gradients(std::size_t n, int rank, int salt) {
  std::vector<float> g(n);
  for (std::size_t i = 0; i < n; ++i) g[i] = static_cast<float>(static_cast<int>((i * 7 + rank * 3 + salt) % 11) - 5);
  return g;
}

}  // namespace

TEST(DataParallel, BucketedAllReduceEqualsOneAllReducePerGradient) {
  MpiCommunicator world = MpiCommunicator::world();
  const std::vector<std::int64_t> numels{5, 1, 300, 7, 7, 64, 2};
  std::vector<std::vector<float>> bucketed, reference;
  for (std::size_t i = 0; i < numels.size(); ++i) {
    bucketed.push_back(integer_gradients(static_cast<std::size_t>(numels[i]), world.rank(), static_cast<int>(i)));
    reference.push_back(bucketed.back());
  }
  BucketedAllReduce<float> reduce(numels, 64 * sizeof(float));
  EXPECT_GT(reduce.buckets().size(), 2u);
  std::vector<std::span<float>> spans;
  for (auto& g : bucketed) spans.emplace_back(g);
  reduce(world, std::span<const std::span<float>>(spans));
  for (auto& g : reference) world.all_reduce(std::span(g), ReduceOp::avg);
  EXPECT_EQ(bucketed, reference);
}

template <class Optimizer>
void check_zero_step(Optimizer optimizer) {
  MpiCommunicator dp = MpiCommunicator::world();
  const std::size_t numel = 37;  // not a multiple of the world size: the last shard is padded
  std::vector<float> sharded(numel), unsharded(numel);
  for (std::size_t i = 0; i < numel; ++i) sharded[i] = unsharded[i] = 0.25f * static_cast<float>(i) - 3.0f;
  ZeroOptimizer<Optimizer> zero(optimizer, static_cast<std::int64_t>(numel), dp.rank(), dp.size());
  Optimizer plain = optimizer;
  for (int step = 0; step < 3; ++step) {
    const std::vector<float> grads = integer_gradients(numel, dp.rank(), step);
    zero.step(dp, std::span(sharded), std::span(grads));
    std::vector<float> mean = grads;
    dp.all_reduce(std::span(mean), ReduceOp::avg);
    plain.step(std::span(unsharded), std::span<const float>(mean));
  }
  EXPECT_EQ(sharded, unsharded) << Optimizer::name;
}

TEST(DataParallel, ZeroShardedStepEqualsTheUnshardedStep) {
  check_zero_step(Sgd{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01});
  check_zero_step(AdamW{.lr = 0.01});
}

TEST(DataParallel, ReduceScatterInPlaceLeavesThisRanksBlockFirst) {
  MpiCommunicator dp = MpiCommunicator::world();
  const std::size_t block = 3, n = block * static_cast<std::size_t>(dp.size());
  std::vector<float> data = integer_gradients(n, dp.rank(), 1), reference(n), expected(block);
  reference = data;
  dp.reduce_scatter(std::span<const float>(reference), std::span<float>(expected), ReduceOp::avg);
  dp.reduce_scatter_in_place(std::span<float>(data), ReduceOp::avg);
  EXPECT_EQ(std::vector<float>(data.begin(), data.begin() + static_cast<std::ptrdiff_t>(block)), expected);
}

// Megatron's distributed optimizer over tensors whose slices cross tensor boundaries (an empty
// tensor, a one-element one, a padded last slice): its steps equal all-reducing the gradients and
// stepping optim::AdamW on every rank, bit for bit (integer gradients: every sum is exact), with a
// scaled (clipped) slice; each rank keeps only its slice of the moments, and gathering them gives
// optim::AdamW's moments, which load back into the same slices.
TEST(DataParallel, DistributedAdamWEqualsTheReplicatedAdamW) {
  MpiCommunicator dp = MpiCommunicator::world();
  const std::vector<std::int64_t> sizes{5, 0, 13, 1};  // 19 elements: padded for 2 and 4 ranks
  std::vector<std::vector<float>> sharded, replicated, grads(sizes.size()), mean(sizes.size());
  for (std::size_t k = 0; k < sizes.size(); ++k) {
    sharded.emplace_back(static_cast<std::size_t>(sizes[k]));
    for (std::size_t i = 0; i < sharded[k].size(); ++i) sharded[k][i] = 0.125f * static_cast<float>(i + k) - 1.0f;
  }
  replicated = sharded;
  const optim::AdamWConfig config{.lr = 0.05, .weight_decay = 0.1};
  DistributedAdamW zero(sizes, dp.rank(), dp.size());
  optim::AdamW plain(config);
  const auto refs = [&](std::vector<std::vector<float>>& values, std::vector<std::vector<float>>& g) {
    std::vector<optim::ParameterRef> out;
    for (std::size_t k = 0; k < values.size(); ++k) out.push_back({values[k], g[k]});
    return out;
  };
  for (int step = 0; step < 3; ++step) {
    for (std::size_t k = 0; k < sizes.size(); ++k) {
      grads[k] = integer_gradients(static_cast<std::size_t>(sizes[k]), dp.rank(), step + static_cast<int>(k));
      mean[k] = grads[k];
      dp.all_reduce(std::span(mean[k]), ReduceOp::avg);
      for (float& g : mean[k]) g *= 0.5f;  // the clip coefficient
    }
    const std::span<float> slice = zero.reduce_scatter_gradients(dp, refs(sharded, grads));
    EXPECT_EQ(static_cast<std::int64_t>(slice.size()), zero.owned());
    for (float& g : slice) g *= 0.5f;
    zero.step(dp, refs(sharded, grads), config);
    plain.step(refs(replicated, mean));
  }
  EXPECT_EQ(sharded, replicated);
  const std::int64_t slice = (19 + dp.size() - 1) / dp.size();
  EXPECT_EQ(static_cast<std::int64_t>(zero.state().exp_avg.size()), std::clamp<std::int64_t>(19 - dp.rank() * slice, 0, slice));
  const optim::AdamW::State gathered = zero.gather_moments(dp);
  EXPECT_EQ(gathered, plain.state());
  DistributedAdamW restored(sizes, dp.rank(), dp.size());
  restored.load_moments(gathered);
  EXPECT_EQ(restored.state(), zero.state());
}

TEST(TensorParallel, ColumnAndRowParallelLayersEqualTheDenseLayer) {
  MpiCommunicator tp = MpiCommunicator::world();
  const int r = tp.rank(), t = tp.size();
  const MatrixF x = shared_matrix(3, 8, 1), w = shared_matrix(12, 8, 2), dy = shared_matrix(3, 12, 3);
  const VectorF b = shared_matrix(12, 1, 4);
  const MatrixF dense = (x * w.transpose()).rowwise() + b.transpose();
  const MatrixF dense_dx = dy * w, dense_dw = dy.transpose() * x;
  const VectorF dense_db = dy.colwise().sum().transpose();
  const Index out = 12 / t, in = 8 / t;

  const auto column = ColumnParallelLinear::shard_of(w, b, r, t, true);
  EXPECT_TRUE(column.forward(tp, x).isApprox(dense, 1e-5f));
  const LinearGrads cg = column.backward(tp, x, dy);
  EXPECT_TRUE(cg.input.isApprox(dense_dx, 1e-5f));
  EXPECT_TRUE(cg.weight.isApprox(dense_dw.middleRows(r * out, out), 1e-5f));
  EXPECT_TRUE(cg.bias.isApprox(dense_db.segment(r * out, out), 1e-5f));

  const auto row = RowParallelLinear::shard_of(w, b, r, t, false);
  EXPECT_TRUE(row.forward(tp, x).isApprox(dense, 1e-5f));
  const LinearGrads rg = row.backward(tp, x, dy);
  EXPECT_TRUE(rg.input.isApprox(dense_dx, 1e-5f));
  EXPECT_TRUE(rg.weight.isApprox(dense_dw.middleCols(r * in, in), 1e-5f));
  EXPECT_TRUE(rg.bias.isApprox(dense_db, 1e-5f));
}

TEST(TensorParallel, MegatronMlpColumnThenRowEqualsTheDenseMlp) {
  // h = x A^T (column-parallel, output kept split), y = h B^T + b (row-parallel, input split):
  // one all-reduce forward (g) and one backward (f).
  MpiCommunicator tp = MpiCommunicator::world();
  const int r = tp.rank(), t = tp.size();
  const MatrixF x = shared_matrix(4, 6, 5), a = shared_matrix(16, 6, 6), bw = shared_matrix(6, 16, 7);
  const VectorF bias = shared_matrix(6, 1, 8);
  const MatrixF dy = shared_matrix(4, 6, 9);
  const auto up = ColumnParallelLinear::shard_of(a, VectorF(), r, t, false);
  const auto down = RowParallelLinear::shard_of(bw, bias, r, t, true);
  const MatrixF h = up.forward(tp, x);
  const MatrixF y = down.forward(tp, h);
  const MatrixF dense_h = x * a.transpose();
  EXPECT_TRUE(y.isApprox((dense_h * bw.transpose()).rowwise() + bias.transpose(), 1e-5f));
  const LinearGrads dg = down.backward(tp, h, dy);
  const LinearGrads ug = up.backward(tp, x, dg.input);
  const MatrixF dense_dh = dy * bw;
  EXPECT_TRUE(ug.input.isApprox(dense_dh * a, 1e-5f));
  const Index hidden = 16 / t;
  EXPECT_TRUE(ug.weight.isApprox((dense_dh.transpose() * x).middleRows(r * hidden, hidden), 1e-5f));
}

TEST(SequenceParallel, UlyssesAllToAllSwitchesBetweenSequenceAndHeadShards) {
  MpiCommunicator sp = MpiCommunicator::world();
  const int r = sp.rank(), n = sp.size();
  const std::int64_t heads = 8, head_dim = 3;
  const Index tokens = 4 * n, local = tokens / n;
  const MatrixF full = shared_matrix(tokens, heads * head_dim, 10);  // [tokens, heads * head_dim]
  const MatrixF mine = full.middleRows(r * local, local);
  const MatrixF by_heads = gather_seq_scatter_heads<float>(sp, mine, heads);
  const Index width = (heads / n) * head_dim;
  EXPECT_EQ(by_heads, full.middleCols(r * width, width));
  EXPECT_EQ((gather_heads_scatter_seq<float>(sp, by_heads, heads)), mine);
  // bf16 moves bit for bit.
  const RowMatrix<bf16> mine16 = mine.cast<bf16>();
  const RowMatrix<bf16> back16 =
      gather_heads_scatter_seq<bf16>(sp, gather_seq_scatter_heads<bf16>(sp, mine16, heads), heads);
  EXPECT_TRUE((back16.cast<float>().array() == mine16.cast<float>().array()).all());
}

namespace {

// Stage s scales its input by w_s (elementwise); the last stage's loss is 0.5 * |y|^2.
struct ScaleStage {
  int stage, stages;
  std::int64_t width;
  std::vector<float> weight, weight_grad;
  std::map<std::int64_t, std::vector<float>> inputs;
  std::vector<float> out;

  static std::vector<float> microbatch_input(std::int64_t mb, std::int64_t width) {
    std::vector<float> x(static_cast<std::size_t>(width));
    for (std::int64_t i = 0; i < width; ++i) x[static_cast<std::size_t>(i)] = static_cast<float>((mb * 13 + i) % 7) - 3.0f;
    return x;
  }
  static std::vector<float> stage_weight(int stage, std::int64_t width) {
    std::vector<float> w(static_cast<std::size_t>(width));
    for (std::int64_t i = 0; i < width; ++i) w[static_cast<std::size_t>(i)] = 0.5f + static_cast<float>((stage + i) % 3) * 0.25f;
    return w;
  }
  ScaleStage(int s, int p, std::int64_t w)
      : stage(s), stages(p), width(w), weight(stage_weight(s, w)), weight_grad(static_cast<std::size_t>(w), 0.0f) {}

  std::span<const float> forward(std::int64_t mb, std::span<const float> in) {
    std::vector<float> x = stage == 0 ? microbatch_input(mb, width) : std::vector<float>(in.begin(), in.end());
    out.resize(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) out[i] = weight[i] * x[i];
    inputs[mb] = std::move(x);
    return out;
  }
  std::span<const float> backward(std::int64_t mb, std::span<const float> grad) {
    const std::vector<float> x = inputs.at(mb);
    std::vector<float> dy(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) dy[i] = stage == stages - 1 ? weight[i] * x[i] : grad[i];  // dL/dy = y
    out.resize(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) {
      weight_grad[i] += dy[i] * x[i];
      out[i] = weight[i] * dy[i];
    }
    inputs.erase(mb);
    return out;
  }
};
static_assert(PipelineStageModel<ScaleStage>);

template <PipelineSchedule S>
void check_pipeline_run() {
  MpiCommunicator pp = MpiCommunicator::world();
  const int p = pp.size(), s = pp.rank();
  const std::int64_t width = 4096, microbatches = 6;  // 16 KiB messages: past the eager limit
  ScaleStage stage(s, p, width);
  const auto steps = S::steps(s, p, microbatches);
  run_pipeline_stage(pp, std::span<const PipelineStep>(steps), stage, width);

  // Reference: all stages in one process, micro-batches in the same order.
  std::vector<ScaleStage> chain;
  for (int k = 0; k < p; ++k) chain.emplace_back(k, p, width);
  for (std::int64_t mb = 0; mb < microbatches; ++mb) {
    std::vector<float> act;
    for (auto& st : chain) {
      const auto y = st.forward(mb, act);
      act.assign(y.begin(), y.end());
    }
    std::vector<float> grad;
    for (int k = p - 1; k >= 0; --k) {
      const auto g = chain[static_cast<std::size_t>(k)].backward(mb, grad);
      grad.assign(g.begin(), g.end());
    }
  }
  EXPECT_EQ(stage.weight_grad, chain[static_cast<std::size_t>(s)].weight_grad) << S::name << " stage " << s;
}

}  // namespace

TEST(PipelineParallel, OneFOneBRunEqualsTheSequentialModel) { check_pipeline_run<OneFOneB>(); }
TEST(PipelineParallel, GPipeRunEqualsTheSequentialModel) { check_pipeline_run<GPipe>(); }
