// Parallel primitives in one process: bucketing, the ZeRO step and the TP layers on a
// one-rank group (with finite-difference gradient checks), Ulysses on one rank, and the
// pipeline schedules in simulation (order, deadlock freedom, bubble fraction (p-1)/(m+p-1)).
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "verl/optim/adamw.hpp"
#include "verl/parallel/bucketed_all_reduce.hpp"
#include "verl/parallel/distributed_optimizer.hpp"
#include "verl/parallel/pipeline_schedule.hpp"
#include "verl/parallel/self_communicator.hpp"
#include "verl/parallel/tensor_parallel.hpp"
#include "verl/parallel/ulysses.hpp"
#include "verl/parallel/zero_optimizer.hpp"

using namespace verl;
using namespace verl::parallel;

namespace {

MatrixF random_matrix(Index rows, Index cols, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  MatrixF m(rows, cols);
  for (Index i = 0; i < m.size(); ++i) m.data()[i] = dist(gen);
  return m;
}

}  // namespace

// ---- data parallelism ---------------------------------------------------------------------------
TEST(GradientBuckets, PackInOrderUpToTheBucketSize) {
  const std::vector<std::int64_t> numels{3, 4, 10, 1, 1, 2};
  // 4-byte elements, 32-byte buckets: [3, 4] (28 B), [10] alone (40 B), [1, 1, 2] (16 B).
  const auto buckets = make_gradient_buckets(numels, 4, 32);
  ASSERT_EQ(buckets.size(), 3u);
  EXPECT_EQ(buckets[0], (GradientBucket{0, 2, 7}));
  EXPECT_EQ(buckets[1], (GradientBucket{2, 3, 10}));
  EXPECT_EQ(buckets[2], (GradientBucket{3, 6, 4}));
  EXPECT_THROW((void)make_gradient_buckets(numels, 4, 0), InvalidArgument);
}

TEST(GradientBuckets, OneRankReduceKeepsValuesAndChecksLengths) {
  SelfCommunicator comm;
  const std::vector<std::int64_t> numels{2, 3};
  BucketedAllReduce<float> reduce(numels, 1 << 20);
  std::vector<float> a{1, 2}, b{3, 4, 5};
  std::vector<std::span<float>> grads{std::span(a), std::span(b)};
  reduce(comm, std::span<const std::span<float>>(grads));
  EXPECT_EQ(b, (std::vector<float>{3, 4, 5}));
  std::vector<float> short_b{1};
  std::vector<std::span<float>> wrong{std::span(a), std::span(short_b)};
  try {
    reduce(comm, std::span<const std::span<float>>(wrong));
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_STREQ(e.what(), "gradients[1]: expected length 3, got 1");
  }
}

TEST(ZeroOptimizer, OneRankEqualsTheUnshardedStep) {
  SelfCommunicator comm;
  std::vector<float> params{1, -2, 3, 0.5f}, reference = params;
  const std::vector<float> grads{0.1f, 0.2f, -0.3f, 1.0f};
  ZeroOptimizer<AdamW> zero(AdamW{.lr = 0.1}, 4, 0, 1);
  AdamW plain{.lr = 0.1};
  for (int step = 0; step < 3; ++step) {
    zero.step(comm, std::span(params), std::span(grads));
    plain.step(std::span(reference), std::span(grads));
  }
  EXPECT_EQ(params, reference);
  EXPECT_EQ(zero.shard_begin(), 0);
  EXPECT_EQ(zero.shard_end(), 4);
}

// Megatron's distributed optimizer on one rank is optim::AdamW over the same tensors, bit for bit;
// a non-finite step skipped leaves the state; misuse names the argument.
TEST(DistributedAdamW, OneRankEqualsOptimAdamW) {
  SelfCommunicator comm;
  std::vector<std::vector<float>> values{{1, -2, 3}, {}, {0.5f, 0.25f}}, reference = values;
  std::vector<std::vector<float>> grads{{0.1f, 0.2f, -0.3f}, {}, {1.0f, -4.0f}};
  const optim::AdamWConfig config{.lr = 0.1, .weight_decay = 0.05};
  DistributedAdamW zero({3, 0, 2}, 0, 1);
  optim::AdamW plain(config);
  const auto refs = [&](std::vector<std::vector<float>>& v) {
    std::vector<optim::ParameterRef> out;
    for (std::size_t k = 0; k < v.size(); ++k) out.push_back({v[k], grads[k]});
    return out;
  };
  for (int step = 0; step < 3; ++step) {
    (void)zero.reduce_scatter_gradients(comm, refs(values));
    zero.step(comm, refs(values), config);
    plain.step(refs(reference));
  }
  EXPECT_EQ(values, reference);
  (void)zero.reduce_scatter_gradients(comm, refs(values));
  zero.skip();
  EXPECT_EQ(values, reference);
  EXPECT_EQ(zero.state().step, 3);
  EXPECT_EQ(zero.gather_moments(comm), plain.state());
  EXPECT_EQ(zero.segments().size(), 2u) << "the empty tensor owns no segment";
  try {
    zero.step(comm, refs(values), config);
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_STREQ(e.what(), "step: call reduce_scatter_gradients first");
  }
  std::vector<std::vector<float>> short_values{{1, 2, 3}, {}, {1}};
  std::vector<optim::ParameterRef> wrong = refs(values);
  wrong[2].value = std::span<float>(short_values[2]);
  wrong[2].grad = wrong[2].grad.first(1);
  try {
    (void)zero.reduce_scatter_gradients(comm, wrong);
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_STREQ(e.what(), "parameters[2] (''): expected 2 elements (the optimizer's layout), got 1");
  }
}

TEST(ElementwiseOptimizers, MatchTorchOnAHandComputedStep) {
  // torch.optim.SGD(lr=0.1, momentum=0.9, weight_decay=0.5), two steps on p=1, g=2:
  // d = 2 + 0.5 = 2.5, buf = 2.5, p = 0.75; d = 2 + 0.375 = 2.375, buf = 0.9*2.5 + 2.375 = 4.625, p = 0.2875.
  Sgd sgd{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.5};
  std::vector<float> p{1.0f};
  const std::vector<float> g{2.0f};
  sgd.step(std::span(p), std::span(g));
  EXPECT_FLOAT_EQ(p[0], 0.75f);
  sgd.step(std::span(p), std::span(g));
  EXPECT_FLOAT_EQ(p[0], 0.2875f);
  // AdamW's first step moves every element by lr (times the sign of its gradient), after decay.
  AdamW adam{.lr = 0.01, .weight_decay = 0.0};
  std::vector<float> q{1.0f, 1.0f};
  const std::vector<float> h{3.0f, -0.5f};
  adam.step(std::span(q), std::span(h));
  EXPECT_NEAR(q[0], 0.99f, 1e-6f);
  EXPECT_NEAR(q[1], 1.01f, 1e-6f);
  std::vector<float> other(3);
  EXPECT_THROW(adam.step(std::span(other), std::span<const float>(other)), InvalidArgument);
}

// The ZeRO shard optimizer and the trainer's optimizer share one element kernel: the same
// hyper-parameters give bit-identical parameters and moments, step after step.
TEST(ElementwiseOptimizers, AdamWEqualsTheTrainersAdamW) {
  std::mt19937 engine(5);
  std::normal_distribution<float> normal;
  std::vector<float> flat(1000), grads(1000);
  for (auto& v : flat) v = normal(engine);
  std::vector<float> tensor = flat, tensor_grad(1000);
  AdamW shard{.lr = 3e-3, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1};
  optim::AdamW trainer({.lr = 3e-3, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1});
  const optim::ParameterRef parameter{std::span(tensor), std::span(tensor_grad), "w"};
  for (int step = 0; step < 4; ++step) {
    for (auto& g : grads) g = normal(engine);
    tensor_grad = grads;
    shard.step(std::span(flat), std::span<const float>(grads));
    trainer.step(std::span(&parameter, 1));
    EXPECT_EQ(flat, tensor) << "step " << step;
  }
  EXPECT_EQ(shard.state.exp_avg, trainer.state().exp_avg[0]);
  EXPECT_EQ(shard.state.exp_avg_sq, trainer.state().exp_avg_sq[0]);
}

// ---- tensor parallelism ---------------------------------------------------------------------------
TEST(TensorParallel, OneRankLayersEqualTheDenseLayer) {
  SelfCommunicator tp;
  const MatrixF x = random_matrix(3, 4, 1), w = random_matrix(5, 4, 2);
  const VectorF b = random_matrix(5, 1, 3);
  const MatrixF dense = (x * w.transpose()).rowwise() + b.transpose();
  const auto column = ColumnParallelLinear::shard_of(w, b, 0, 1, true);
  const auto row = RowParallelLinear::shard_of(w, b, 0, 1, false);
  EXPECT_TRUE(column.forward(tp, x).isApprox(dense));
  EXPECT_TRUE(row.forward(tp, x).isApprox(dense));
}

// Central finite differences of L = sum(R .* layer(x)) in double, against the analytic
// gradients (the layer is linear, so the difference quotient is exact up to rounding).
template <class Layer>
void check_linear_gradients(const Layer& layer, const MatrixF& x) {
  SelfCommunicator tp;
  const MatrixF y = layer.forward(tp, x);
  const MatrixF r = random_matrix(y.rows(), y.cols(), 7);
  const LinearGrads grads = layer.backward(tp, x, r);
  auto loss = [&](const Layer& l, const MatrixF& input) {
    return (l.forward(tp, input).template cast<double>().array() * r.template cast<double>().array()).sum();
  };
  const float h = 1e-2f;
  for (Index i = 0; i < x.size(); ++i) {
    MatrixF plus = x, minus = x;
    plus.data()[i] += h;
    minus.data()[i] -= h;
    EXPECT_NEAR((loss(layer, plus) - loss(layer, minus)) / (2 * h), grads.input.data()[i], 2e-3) << "input " << i;
  }
  for (Index i = 0; i < layer.weight().size(); ++i) {
    MatrixF plus = layer.weight(), minus = layer.weight();
    plus.data()[i] += h;
    minus.data()[i] -= h;
    const double fd = (loss(Layer(plus, layer.bias(), false), x) - loss(Layer(minus, layer.bias(), false), x)) / (2 * h);
    EXPECT_NEAR(fd, grads.weight.data()[i], 2e-3) << "weight " << i;
  }
  for (Index i = 0; i < layer.bias().size(); ++i) {
    VectorF plus = layer.bias(), minus = layer.bias();
    plus[i] += h;
    minus[i] -= h;
    const double fd = (loss(Layer(layer.weight(), plus, false), x) - loss(Layer(layer.weight(), minus, false), x)) / (2 * h);
    EXPECT_NEAR(fd, grads.bias[i], 2e-3) << "bias " << i;
  }
}

TEST(TensorParallel, GradientsMatchFiniteDifferences) {
  const MatrixF x = random_matrix(3, 4, 11), w = random_matrix(5, 4, 12);
  const VectorF b = random_matrix(5, 1, 13);
  check_linear_gradients(ColumnParallelLinear(w, b, false), x);
  check_linear_gradients(RowParallelLinear(w, b, false), x);
}

TEST(TensorParallel, ShapeErrorsNameTheArgument) {
  SelfCommunicator tp;
  const ColumnParallelLinear column(MatrixF::Ones(2, 3), VectorF(), false);
  try {
    (void)column.forward(tp, MatrixF::Ones(4, 2));
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_STREQ(e.what(), "x: expected 3 input features, got 2");
  }
  EXPECT_THROW((void)column.backward(tp, MatrixF::Ones(4, 3), MatrixF::Ones(4, 3)), InvalidArgument);
  EXPECT_THROW((void)ColumnParallelLinear::shard_of(MatrixF::Ones(3, 2), VectorF(), 0, 2, false), InvalidArgument);
  EXPECT_THROW((ColumnParallelLinear(MatrixF::Ones(2, 3), VectorF::Ones(3), false)), InvalidArgument);
}

// ---- sequence parallelism ---------------------------------------------------------------------------
TEST(Ulysses, OneRankIsTheIdentityAndHeadsMustDivide) {
  SelfCommunicator sp;
  const MatrixF x = random_matrix(6, 8, 3);
  const MatrixF heads = gather_seq_scatter_heads<float>(sp, x, 4);
  EXPECT_EQ(heads, x);
  EXPECT_EQ((gather_heads_scatter_seq<float>(sp, heads, 4)), x);
  try {
    (void)gather_seq_scatter_heads<float>(sp, x, 3);
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_STREQ(e.what(), "x: expected columns divisible by num_heads 3 (heads * head_dim), got 8");
  }
}

// ---- pipeline parallelism ---------------------------------------------------------------------------
namespace {

template <PipelineSchedule S>
void check_schedule(std::int64_t p, std::int64_t m, std::int64_t forward_time, std::int64_t backward_time) {
  const auto steps = pipeline_steps<S>(p, m);
  const PipelineTimeline timeline = simulate_pipeline(steps, m, forward_time, backward_time);
  const std::string where = fmt::format("{} p={} m={} tf={} tb={}", S::name, p, m, forward_time, backward_time);
  // The paper's bubble: (p - 1) / (m + p - 1) of the time, for either schedule.
  ASSERT_EQ(timeline.bubble_fraction, (Fraction{p - 1, m + p - 1})) << where;
  ASSERT_EQ(timeline.makespan, (m + p - 1) * (forward_time + backward_time)) << where;
  // Every micro-batch passes every stage in order: forward s before forward s+1, backward s+1
  // before backward s, and its forward before its backward on each stage.
  std::vector<std::vector<std::int64_t>> fwd_end(static_cast<std::size_t>(p), std::vector<std::int64_t>(m, -1)),
      fwd_start = fwd_end, bwd_start = fwd_end, bwd_end = fwd_end;
  for (const ComputeEvent& e : timeline.events) {
    auto& start = e.action == PipelineAction::forward ? fwd_start : bwd_start;
    auto& end = e.action == PipelineAction::forward ? fwd_end : bwd_end;
    start[static_cast<std::size_t>(e.stage)][static_cast<std::size_t>(e.microbatch)] = e.start;
    end[static_cast<std::size_t>(e.stage)][static_cast<std::size_t>(e.microbatch)] = e.end;
  }
  for (std::size_t s = 0; s < static_cast<std::size_t>(p); ++s) {
    for (std::size_t mb = 0; mb < static_cast<std::size_t>(m); ++mb) {
      ASSERT_GE(bwd_start[s][mb], fwd_end[s][mb]) << where;
      if (s + 1 < static_cast<std::size_t>(p)) {
        ASSERT_GE(fwd_start[s + 1][mb], fwd_end[s][mb]) << where;
        ASSERT_GE(bwd_start[s][mb], bwd_end[s + 1][mb]) << where;
      }
    }
    // 1F1B bounds live activations by the stages ahead; GPipe keeps all micro-batches.
    const std::int64_t expected_peak =
        std::is_same_v<S, OneFOneB> ? std::min<std::int64_t>(p - static_cast<std::int64_t>(s), m) : m;
    ASSERT_EQ(timeline.peak_activations[s], expected_peak) << where << " stage " << s;
  }
}

}  // namespace

TEST(PipelineSchedule, BubbleFractionAndOrderForEveryShape) {
  for (std::int64_t p = 1; p <= 8; ++p) {
    for (std::int64_t m = 1; m <= 16; ++m) {
      for (auto [tf, tb] : {std::pair<std::int64_t, std::int64_t>{1, 1}, {1, 2}, {2, 3}}) {
        check_schedule<GPipe>(p, m, tf, tb);
        check_schedule<OneFOneB>(p, m, tf, tb);
        if (HasFatalFailure()) return;
      }
    }
  }
}

TEST(PipelineSchedule, OneFOneBMatchesMegatronOnFourStages) {
  // Stage 1 of 4 with 4 micro-batches: 2 warm-up forwards, then 1F1B, then 2 backwards.
  const auto steps = OneFOneB::steps(1, 4, 4);
  using A = PipelineAction;
  const std::vector<PipelineStep> expected{
      {A::recv_forward, 0},  {A::forward, 0},  {A::send_forward, 0},
      {A::recv_forward, 1},  {A::forward, 1},  {A::send_forward, 1},
      {A::recv_forward, 2},  {A::forward, 2},  {A::send_forward_recv_backward, 2, 0},
      {A::backward, 0},      {A::send_backward_recv_forward, 0, 3},
      {A::forward, 3},       {A::send_forward_recv_backward, 3, 1},
      {A::backward, 1},      {A::send_backward, 1},
      {A::recv_backward, 2}, {A::backward, 2}, {A::send_backward, 2},
      {A::recv_backward, 3}, {A::backward, 3}, {A::send_backward, 3}};
  EXPECT_EQ(steps, expected);
}

TEST(PipelineSchedule, SimulatorRejectsDeadlocksAndMissingData) {
  using A = PipelineAction;
  // Both stages wait to receive before sending: a deadlock.
  const std::vector<std::vector<PipelineStep>> deadlock{
      {{A::forward, 0}, {A::recv_backward, 0}, {A::send_forward, 0}, {A::backward, 0}},
      {{A::recv_forward, 0}, {A::forward, 0}, {A::backward, 0}, {A::send_backward, 0}}};
  try {
    (void)simulate_pipeline(deadlock, 1);
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_STREQ(e.what(),
                 "steps: expected a schedule without deadlock, got stuck with stage 0 at recv_backward of micro-batch "
                 "0; stage 1 at recv_forward of micro-batch 0");
  }
  // The second stage computes before its activation arrives.
  const std::vector<std::vector<PipelineStep>> early{
      {{A::forward, 0}, {A::send_forward, 0}, {A::recv_backward, 0}, {A::backward, 0}},
      {{A::forward, 0}, {A::recv_forward, 0}, {A::backward, 0}, {A::send_backward, 0}}};
  try {
    (void)simulate_pipeline(early, 1);
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_STREQ(e.what(),
                 "steps: stage 1 step 0 (forward of micro-batch 0): expected the activation from the previous stage first");
  }
  EXPECT_THROW((void)OneFOneB::steps(4, 4, 2), InvalidArgument);
}
