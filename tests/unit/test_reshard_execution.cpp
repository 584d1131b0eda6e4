// Executing reshard plans without MPI: every rank of 1, 2, 4 and 8-rank worlds runs in this
// process. A recording communicator first collects what each rank contributes to its gather
// group, then serves those contributions, so each rank's generation shard can be compared with
// the one cut from the full model.
#include <gtest/gtest.h>

#include <map>
#include <vector>

#include "verl/parallel/resharder.hpp"

using namespace verl;
using namespace verl::parallel;

namespace {

ModelSpec test_model() {
  return {8,
          {ParamSpec::fused_qkv(8, 8, 1, 3), ParamSpec::row_parallel(3, 16), ParamSpec::fused_gate_up(8, 3),
           ParamSpec::column_parallel(24), ParamSpec::replicated(3), ParamSpec::interleaved_qkv(8, 2, 1, 3)}};
}

double element_value(std::int64_t layer, std::size_t param, std::int64_t index) {
  return static_cast<double>(layer * 10000 + static_cast<std::int64_t>(param) * 1000 + index);
}

/// The all-gather of one gather group, served from contributions recorded in a first pass.
struct Contributions {
  std::map<std::pair<std::int64_t, std::int64_t>, std::vector<double>> by_group_and_member;
};

class RecordingGroup {
 public:
  RecordingGroup(Contributions& log, std::int64_t group, int rank, int size, bool replay)
      : log_(&log), group_(group), rank_(rank), size_(size), replay_(replay) {}
  int rank() const { return rank_; }
  int size() const { return size_; }
  template <CommElement T>
  void all_gather(std::type_identity_t<std::span<const T>> send, std::span<T> recv) {
    static_assert(std::is_same_v<T, double>);
    if (!replay_) {
      log_->by_group_and_member[{group_, rank_}].assign(send.begin(), send.end());
      return;
    }
    for (int m = 0; m < size_; ++m) {
      const auto& part = log_->by_group_and_member.at({group_, m});
      std::copy(part.begin(), part.end(), recv.begin() + static_cast<std::ptrdiff_t>(m * part.size()));
    }
  }
  // Unused by the resharder.
  template <CommElement T>
  void all_reduce(std::span<T>, ReduceOp) {}
  template <CommElement T>
  void all_gather_v(std::type_identity_t<std::span<const T>>, std::span<T>, std::span<const std::int64_t>) {}
  template <CommElement T>
  void reduce_scatter(std::type_identity_t<std::span<const T>>, std::span<T>, ReduceOp) {}
  template <CommElement T>
  void broadcast(std::span<T>, int) {}
  template <CommElement T>
  void all_to_all(std::type_identity_t<std::span<const T>>, std::span<T>) {}
  template <class T>
  void send(std::span<T>, int, int) {}
  template <CommElement T>
  void recv(std::span<T>, int, int) {}
  template <CommElement T>
  void send_recv(std::type_identity_t<std::span<const T>>, int, std::span<T>, int, int) {}
  void barrier() {}
  RecordingGroup split(int, int) { return *this; }

 private:
  Contributions* log_;
  std::int64_t group_;
  int rank_, size_;
  bool replay_;
};
static_assert(Communicator<RecordingGroup>);

template <ReshardStrategy S>
void check_pair(const ReshardGeometry& geometry) {
  const ModelSpec model = test_model();
  const ReshardPlan<S> plan(geometry);
  const std::int64_t world = geometry.world_size();
  std::vector<Resharder<S, double>> resharders;
  std::vector<std::vector<double>> training(static_cast<std::size_t>(world));
  for (std::int64_t r = 0; r < world; ++r) {
    resharders.emplace_back(plan, model, r);
    const ParallelCoords c = geometry.train_coords(r);
    const std::int64_t layers = model.num_layers / geometry.train_pp;
    for (std::int64_t l = 0; l < layers; ++l) {
      for (std::size_t k = 0; k < model.layer_params.size(); ++k) {
        const ParamShard shard = plan.training_param_shard(r, model.layer_params[k]);
        for (std::int64_t i = 0; i < shard.size(); ++i) {
          training[static_cast<std::size_t>(r)].push_back(element_value(c.pp * layers + l, k, shard.global_index(i)));
        }
      }
    }
  }
  Contributions log;
  for (bool replay : {false, true}) {
    for (std::int64_t r = 0; r < world; ++r) {
      Resharder<S, double>& resharder = resharders[static_cast<std::size_t>(r)];
      RecordingGroup group(log, plan.gather_group_index(r), static_cast<int>(*resharder.gather_group().index_of(r)),
                           static_cast<int>(resharder.gather_group().size()), replay);
      std::vector<double> generation(static_cast<std::size_t>(resharder.generation_size()), -1.0);
      resharder.to_generation(group, std::span(training[static_cast<std::size_t>(r)]), std::span(generation));
      if (!replay) continue;
      // The expected generation shard, cut from the full model.
      const ParallelCoords g = plan.generation_coords(r);
      const std::int64_t layers = model.num_layers / geometry.gen_pp;
      std::size_t at = 0;
      for (std::int64_t l = 0; l < layers; ++l) {
        for (std::size_t k = 0; k < model.layer_params.size(); ++k) {
          const ParamShard shard = plan.generation_param_shard(r, model.layer_params[k]);
          for (std::int64_t i = 0; i < shard.size(); ++i) {
            ASSERT_EQ(generation[at++], element_value(g.pp * layers + l, k, shard.global_index(i)))
                << S::name << " rank " << r << " layer " << l << " param " << k;
          }
        }
      }
      ASSERT_EQ(at, generation.size());
      if constexpr (S::keeps_training_shard_in_place) {
        std::vector<double> back(training[static_cast<std::size_t>(r)].size());
        resharder.to_training(std::span(generation), std::span(back));
        ASSERT_EQ(back, training[static_cast<std::size_t>(r)]);
      }
    }
  }
}

template <ReshardStrategy S>
void check_worlds() {
  for (std::int64_t world : {1, 2, 4, 8}) {
    for (std::int64_t t = 1; t <= world; t *= 2) {
      for (std::int64_t p = 1; p * t <= world; p *= 2) {
        for (std::int64_t tg = 1; tg <= t; tg *= 2) {
          for (std::int64_t pg = 1; pg <= p; pg *= 2) {
            AxisSizes train, gen;
            train.set(AxisKind::tp, t), train.set(AxisKind::pp, p), train.set(AxisKind::dp, world / (t * p));
            gen.set(AxisKind::tp, tg), gen.set(AxisKind::pp, pg);
            SCOPED_TRACE(fmt::format("world={} t={} p={} tg={} pg={}", world, t, p, tg, pg));
            check_pair<S>(ReshardGeometry::from_sizes(train, gen));
            if (::testing::Test::HasFatalFailure()) return;
          }
        }
      }
    }
  }
}

}  // namespace

TEST(ReshardExecution, HybridFlowEveryPairUpTo8Ranks) { check_worlds<HybridFlow>(); }
TEST(ReshardExecution, HybridFlowVEveryPairUpTo8Ranks) { check_worlds<HybridFlowV>(); }
TEST(ReshardExecution, FullAllGatherEveryPairUpTo8Ranks) { check_worlds<FullAllGather>(); }

TEST(ReshardExecution, ModelErrorsNameTheSizes) {
  AxisSizes train, gen;
  train.set(AxisKind::tp, 2), train.set(AxisKind::pp, 2);
  gen.set(AxisKind::tp, 1);
  const ReshardPlan<HybridFlow> plan(ReshardGeometry::from_sizes(train, gen));
  try {
    (void)Resharder<HybridFlow, float>(plan, ModelSpec{3, test_model().layer_params}, 0);
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_STREQ(e.what(), "model: expected a positive number of layers divisible by the training pp 2, got 3");
  }
  EXPECT_THROW((Resharder<HybridFlow, float>(plan, ModelSpec{2, {ParamSpec::row_parallel(2, 3)}}, 0)), InvalidArgument);
}
