// Executing reshard plans on real ranks: for every valid mesh pair over the ranks of the run and
// every strategy, the generation shards equal those cut from a reference model that rank 0
// assembles by gathering every training shard, and HybridFlow goes back without communication.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "verl/parallel/mpi_communicator.hpp"
#include "verl/parallel/resharder.hpp"

using namespace verl;
using namespace verl::parallel;

namespace {

// Shapes divisible by every tp up to 4 (and a GQA qkv whose kv blocks split up to 4 ways).
ModelSpec test_model() {
  return {4,
          {ParamSpec::fused_qkv(8, 4, 2, 3), ParamSpec::row_parallel(3, 16), ParamSpec::fused_gate_up(8, 3),
           ParamSpec::row_parallel(3, 8), ParamSpec::column_parallel(12), ParamSpec::replicated(3),
           ParamSpec::interleaved_qkv(4, 2, 1, 3)}};
}

// A distinct, exactly representable value per (layer, parameter, element).
template <class T>
T element_value(std::int64_t layer, std::size_t param, std::int64_t index) {
  return static_cast<T>(layer * 10000 + static_cast<std::int64_t>(param) * 1000 + index);
}

template <ReshardStrategy S, class T>
std::vector<T> training_buffer(const Resharder<S, T>& resharder, const ModelSpec& model, std::int64_t rank) {
  const auto& plan = resharder.plan();
  const ParallelCoords c = plan.geometry().train_coords(rank);
  const std::int64_t layers = model.num_layers / plan.geometry().train_pp;
  std::vector<T> buffer;
  for (std::int64_t l = 0; l < layers; ++l) {
    for (std::size_t k = 0; k < model.layer_params.size(); ++k) {
      const ParamShard shard = plan.training_param_shard(rank, model.layer_params[k]);
      for (std::int64_t i = 0; i < shard.size(); ++i) {
        buffer.push_back(element_value<T>(c.pp * layers + l, k, shard.global_index(i)));
      }
    }
  }
  return buffer;
}

template <ReshardStrategy S, class T>
void check_pair(MpiCommunicator& world, const ReshardGeometry& geometry) {
  const ModelSpec model = test_model();
  const ReshardPlan<S> plan(geometry);
  const std::int64_t rank = world.rank(), n = world.size();
  Resharder<S, T> resharder(plan, model, rank);
  const std::vector<T> training = training_buffer(resharder, model, rank);
  ASSERT_EQ(static_cast<std::int64_t>(training.size()), resharder.training_size());

  MpiCommunicator gather_comm = sub_communicator(world, resharder.gather_group());
  std::vector<T> generation(static_cast<std::size_t>(resharder.generation_size()));
  resharder.to_generation(gather_comm, std::span(training), std::span(generation));

  // Reference: rank 0 gathers every training buffer, assembles the full model from them, and
  // cuts every rank's generation shard out of it.
  std::vector<T> all_training(training.size() * static_cast<std::size_t>(n));
  world.all_gather(std::span(training), std::span(all_training));
  std::vector<std::int64_t> counts(static_cast<std::size_t>(n));
  std::vector<std::int64_t> my_count{static_cast<std::int64_t>(generation.size())};
  world.all_gather(std::span(my_count), std::span(counts));
  std::int64_t total = 0;
  for (auto c : counts) total += c;
  std::vector<T> all_generation(static_cast<std::size_t>(total));
  world.all_gather_v(std::span(generation), std::span(all_generation), counts);
  if (rank == 0) {
    const std::int64_t train_layers = model.num_layers / geometry.train_pp;
    std::vector<std::vector<std::vector<T>>> full(static_cast<std::size_t>(model.num_layers));
    for (auto& layer : full) {
      for (const ParamSpec& p : model.layer_params) layer.emplace_back(static_cast<std::size_t>(p.numel()));
    }
    for (std::int64_t r = 0; r < n; ++r) {
      const ParallelCoords c = geometry.train_coords(r);
      std::size_t at = static_cast<std::size_t>(r) * training.size();
      for (std::int64_t l = 0; l < train_layers; ++l) {
        for (std::size_t k = 0; k < model.layer_params.size(); ++k) {
          const ParamShard shard = plan.training_param_shard(r, model.layer_params[k]);
          auto& param = full[static_cast<std::size_t>(c.pp * train_layers + l)][k];
          for (std::int64_t i = 0; i < shard.size(); ++i) param[static_cast<std::size_t>(shard.global_index(i))] = all_training[at++];
        }
      }
    }
    const std::int64_t gen_layers = model.num_layers / geometry.gen_pp;
    std::size_t at = 0;
    for (std::int64_t r = 0; r < n; ++r) {
      const ParallelCoords g = plan.generation_coords(r);
      for (std::int64_t l = 0; l < gen_layers; ++l) {
        for (std::size_t k = 0; k < model.layer_params.size(); ++k) {
          const ParamShard shard = plan.generation_param_shard(r, model.layer_params[k]);
          const auto& param = full[static_cast<std::size_t>(g.pp * gen_layers + l)][k];
          for (std::int64_t i = 0; i < shard.size(); ++i) {
            ASSERT_EQ(all_generation[at++], param[static_cast<std::size_t>(shard.global_index(i))])
                << S::name << " rank " << r << " layer " << l << " param " << k << " element " << i;
          }
        }
      }
    }
    ASSERT_EQ(at, all_generation.size());
  }

  if constexpr (S::keeps_training_shard_in_place) {
    std::vector<T> back(training.size(), T{});
    resharder.to_training(std::span(generation), std::span(back));
    EXPECT_EQ(back, training) << S::name;
  }
}

template <ReshardStrategy S, class T>
void check_every_pair() {
  MpiCommunicator world = MpiCommunicator::world();
  const std::int64_t n = world.size();
  int pairs = 0;
  for (std::int64_t t = 1; t <= n; ++t) {
    for (std::int64_t p = 1; p * t <= n; ++p) {
      if (n % (t * p)) continue;
      for (std::int64_t tg = 1; tg <= t; ++tg) {
        for (std::int64_t pg = 1; pg <= p; ++pg) {
          if (t % tg || p % pg) continue;
          AxisSizes train, gen;
          train.set(AxisKind::tp, t), train.set(AxisKind::pp, p), train.set(AxisKind::dp, n / (t * p));
          gen.set(AxisKind::tp, tg), gen.set(AxisKind::pp, pg), gen.set(AxisKind::dp, n / (tg * pg));
          SCOPED_TRACE(fmt::format("t={} p={} tg={} pg={}", t, p, tg, pg));
          check_pair<S, T>(world, ReshardGeometry::from_sizes(train, gen));
          ++pairs;
        }
      }
    }
  }
  EXPECT_GT(pairs, 0);
}

}  // namespace

TEST(Resharder, HybridFlowFloat) { check_every_pair<HybridFlow, float>(); }
TEST(Resharder, HybridFlowInt64) { check_every_pair<HybridFlow, std::int64_t>(); }
TEST(Resharder, HybridFlowVFloat) { check_every_pair<HybridFlowV, float>(); }
TEST(Resharder, FullAllGatherDouble) { check_every_pair<FullAllGather, double>(); }

TEST(Resharder, MegatronMeshOrderAndErrors) {
  MpiCommunicator world = MpiCommunicator::world();
  const int n = world.size();
  // A training mesh in tp-pp-dp order: neighbours differ, the result does not.
  const std::int64_t t = n >= 2 ? 2 : 1;
  const auto train = Mesh<TP<>, PP<>, DP<>>::of_world(n, t, 1, inferred);
  const auto gen = Mesh<TP<>, DP<>, PP<>>::of_world(n, 1, inferred, 1);
  check_pair<HybridFlow, float>(world, make_reshard_geometry(train, gen));

  const ReshardPlan<HybridFlow> plan(make_reshard_geometry(train, gen));
  Resharder<HybridFlow, float> resharder(plan, test_model(), world.rank());
  std::vector<float> wrong(static_cast<std::size_t>(resharder.training_size() + 1));
  std::vector<float> generation(static_cast<std::size_t>(resharder.generation_size()));
  try {
    resharder.to_generation(world, std::span(wrong), std::span(generation));
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(std::string(e.what()),
              fmt::format("training: expected length {}, got {}", resharder.training_size(), wrong.size()));
  }
  EXPECT_THROW((Resharder<HybridFlow, float>(plan, ModelSpec{0, test_model().layer_params}, world.rank())),
               InvalidArgument);
}
