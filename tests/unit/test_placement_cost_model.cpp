// The placement cost model's per-call term and head shapes: how many calls each stage makes for
// a given batch and layout, what a call costs in the stage's time, and the FLOPs and memory of a
// value head (critic, reward and cost models) against the language-model head (actor,
// reference). Expected numbers are worked out by hand in the comments.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "../support/error_message.hpp"
#include "verl/parallel/placement_search.hpp"

using namespace verl;
using namespace verl::parallel;
using verl::test_support::message_of;

namespace {

/// hidden 64, vocab 1000: the language-model head has 64 000 parameters of the 500 000.
ModelShape small_model() { return {500'000, 4, 4, 2, 64, 192, 1000}; }

/// S = 8 prompts x 4 responses = 32 sequences of T = 100 + 28 = 128 tokens; 2 epochs of 2
/// mini-batches, micro-batches of 4 sequences.
BatchShape small_batch() { return {8, 4, 100, 28, 2, 2, 4}; }

RoleCostModel model_of(Role role) {
  return RoleCostModel::of(role, small_model(), small_batch(), MemoryModel{}, cluster_preset("a100-80gb", 8));
}

}  // namespace

TEST(PlacementCostModel, CallsOfEachStageFromTheBatchAndTheLayout) {
  const RoleCostModel cm = model_of(Role::actor);
  // Forward, pp=2 tp=1 dp=2: 32 / 2 = 16 sequences per rank, 16 / 4 = 4 micro-batches;
  // 1 worker-group call + (4 + 2 - 1) micro-steps = 6.
  const TrainMesh forward_mesh{2, 1, 2};
  EXPECT_EQ(cm.forward_micro_batches(forward_mesh), 4);
  EXPECT_EQ(cm.forward_calls(forward_mesh), 6);
  EXPECT_EQ(cm.forward_work(forward_mesh).calls, 6);
  // One device, no pipeline: 32 / 4 = 8 micro-batches, 1 + 8 = 9.
  EXPECT_EQ(cm.forward_work(TrainMesh{1, 1, 1}).calls, 9);
  // Update, pp=2 tp=2 dp=2: per mini-batch 32 / (2 x 2) = 8 sequences per rank, 2 micro-batches;
  // per mini-batch (2 + 2 - 1) micro-steps + 1 optimizer step = 4; 2 epochs x 2 mini-batches:
  // 1 + 4 x 4 = 17. Recomputation does not change the calls.
  const TrainMesh update_mesh{2, 2, 2};
  EXPECT_EQ(cm.update_micro_batches(update_mesh), 2);
  EXPECT_EQ(cm.update_calls(update_mesh), 17);
  EXPECT_EQ(cm.update_work(update_mesh).calls, 17);
  EXPECT_EQ(cm.update_work(TrainMesh{2, 2, 2, true}).calls, 17);
  // One device: per mini-batch 16 sequences, 4 micro-batches, 4 + 1 = 5 calls; 1 + 4 x 5 = 21.
  EXPECT_EQ(cm.update_work(TrainMesh{1, 1, 1}).calls, 21);
  // Generation, pg=1 tg=1 dg=4, 3 sequences in flight: 32 / 4 = 8 sequences per replica in
  // ceil(8 / 3) = 3 waves of 28 + 1 steps (prefill and decode): 1 + 3 x 29 = 88.
  EXPECT_EQ(cm.generation_calls(GenMesh{1, 1, 4}, 3), 88);
  EXPECT_EQ(cm.generation_work(GenMesh{1, 1, 4}, 3).calls, 88);
  // pg=2 tg=1 dg=2, every sequence in flight: one wave, each step once per pipeline
  // micro-batch: 1 + 29 x 2 = 59.
  EXPECT_EQ(cm.generation_work(GenMesh{2, 1, 2}, 16).calls, 59);
  // The reshard runs inside generate_sequences' call: no call of its own, one collective.
  const StageWork reshard = cm.reshard_work(TrainMesh{1, 2, 1}, GenMesh{1, 1, 2}, 1e6);
  EXPECT_EQ(reshard.calls, 0);
  EXPECT_EQ(reshard.collectives, 1);
}

TEST(PlacementCostModel, EachCallCostsTheOverheadInTheStageTime) {
  const RoleCostModel cm = model_of(Role::actor);
  ClusterSpec cluster = cluster_preset("a100-80gb", 8);
  Efficiency without = Efficiency{};
  without.call_overhead = 0;
  Efficiency with = without;
  with.call_overhead = 2.5e-3;
  const DeviceModel a{cluster, without}, b{cluster, with};
  for (const StageWork& w : {cm.forward_work(TrainMesh{2, 1, 2}), cm.update_work(TrainMesh{2, 2, 2}),
                             cm.generation_work(GenMesh{1, 1, 4}, 3)}) {
    ASSERT_GT(w.calls, 0);
    EXPECT_NEAR(b.seconds(w) - a.seconds(w), w.calls * 2.5e-3, 1e-12 * b.seconds(w));
  }
  // 17 update calls at 2.5 ms: 42.5 ms.
  EXPECT_NEAR(b.seconds(cm.update_work(TrainMesh{2, 2, 2})) - a.seconds(cm.update_work(TrainMesh{2, 2, 2})), 0.0425,
              1e-12);
  // The default is 1 ms per call, for both presets.
  EXPECT_EQ(Efficiency{}.call_overhead, 1e-3);
  // Not a finite number of seconds >= 0: refused by name, with the value.
  Efficiency bad;
  bad.call_overhead = -1e-3;
  EXPECT_EQ(message_of<InvalidArgument>([&] { validate_efficiency(bad); }),
            "efficiency.call_overhead: expected a finite number of seconds >= 0, got -0.001");
  bad.call_overhead = std::nan("");
  EXPECT_EQ(message_of<InvalidArgument>([&] { validate_efficiency(bad); }),
            "efficiency.call_overhead: expected a finite number of seconds >= 0, got nan");
}

TEST(PlacementCostModel, ValueHeadRolesAreNotChargedTheLanguageModelHead) {
  EXPECT_EQ(role_head(Role::actor), Head::language_model);
  EXPECT_EQ(role_head(Role::reference), Head::language_model);
  EXPECT_EQ(role_head(Role::critic), Head::value);
  EXPECT_EQ(role_head(Role::reward), Head::value);
  EXPECT_EQ(role_head(Role::cost), Head::value);
  const ModelShape m = small_model();
  EXPECT_EQ(m.lm_head_params(), 64'000);
  EXPECT_EQ(m.matmul_params(Head::language_model), 500'000);
  // 500 000 - 64 x 1000 + 64 x 1 = 436 064.
  EXPECT_EQ(m.matmul_params(Head::value), 436'064);

  const RoleCostModel actor = model_of(Role::actor), critic = model_of(Role::critic);
  EXPECT_EQ(actor.head, Head::language_model);
  EXPECT_EQ(critic.head, Head::value);
  // Forward on one device: 32 x 128 = 4096 tokens, no bubble. Actor 2 x 500 000 x 4096 =
  // 4 096 000 000 FLOPs; critic 2 x 436 064 x 4096 = 3 572 236 288; the difference is the LM
  // head's share less the value head's, 2 x (64 000 - 64) x 4096 = 523 763 712.
  const TrainMesh one{1, 1, 1};
  EXPECT_EQ(actor.forward_work(one).flops, 4'096'000'000.0);
  EXPECT_EQ(critic.forward_work(one).flops, 3'572'236'288.0);
  EXPECT_EQ(actor.forward_work(one).flops - critic.forward_work(one).flops, 523'763'712.0);
  // Update: 4 optimizer steps of 16 x 128 = 2048 tokens, 6 FLOPs per parameter and token.
  // Actor 4 x 6 x 500 000 x 2048 = 24 576 000 000; critic 4 x 6 x 436 064 x 2048 =
  // 21 433 417 728.
  EXPECT_EQ(actor.update_work(one).flops, 24'576'000'000.0);
  EXPECT_EQ(critic.update_work(one).flops, 21'433'417'728.0);
  // The rest of the work (weights read, calls) is the same for both heads.
  EXPECT_EQ(actor.forward_work(one).hbm_bytes, critic.forward_work(one).hbm_bytes);
  EXPECT_EQ(actor.forward_work(one).calls, critic.forward_work(one).calls);

  // Head outputs in memory, tp = 2: a micro-batch of 4 x 128 = 512 tokens. The actor's fp32
  // logits over the vocabulary, split over tp: 512 x 1000 / 2 x 4 = 1 024 000 bytes (2 048 000
  // with their gradient); the critic's one fp32 value per token, whole on each tp rank:
  // 512 x 4 = 2048 bytes (4096).
  const TrainMesh tp2{1, 2, 1};
  EXPECT_EQ(actor.logits_bytes(tp2, false), 1'024'000.0);
  EXPECT_EQ(actor.logits_bytes(tp2, true), 2'048'000.0);
  EXPECT_EQ(critic.logits_bytes(tp2, false), 2048.0);
  EXPECT_EQ(critic.logits_bytes(tp2, true), 4096.0);
  EXPECT_EQ(actor.forward_transient_bytes(tp2) - critic.forward_transient_bytes(tp2), 1'024'000.0 - 2048.0);
  EXPECT_EQ(actor.update_transient_bytes(tp2) - critic.update_transient_bytes(tp2), 2'048'000.0 - 4096.0);
}

TEST(PlacementCostModel, TheSearchGivesEachRoleItsHead) {
  PlacementProblem p;
  for (Role r : {Role::actor, Role::critic, Role::reference, Role::reward}) p.roles.push_back({r, small_model()});
  p.batch = small_batch();
  p.cluster = cluster_preset("a100-80gb", 2);
  const PlacementSearch search(p);
  EXPECT_EQ(search.cost_model(0).head, Head::language_model);
  EXPECT_EQ(search.cost_model(1).head, Head::value);
  EXPECT_EQ(search.cost_model(2).head, Head::language_model);
  EXPECT_EQ(search.cost_model(3).head, Head::value);
  // Same shape, same layout: the critic's and the reward model's forward passes are cheaper
  // than the actor's and the reference's, by the stage time of the LM head's FLOPs.
  const DeviceModel& device = search.device_model();
  for (std::int64_t n : {1, 2}) {
    ASSERT_FALSE(search.options(3, n).empty());
    ASSERT_EQ(search.options(3, n).size(), search.options(2, n).size());
    for (std::size_t i = 0; i < search.options(3, n).size(); ++i) {
      const RoleOption& reward = search.options(3, n)[i];
      const RoleOption& reference = search.options(2, n)[i];
      ASSERT_EQ(reward.mesh, reference.mesh);
      const double lm_head_flops = search.cost_model(2).forward_work(reward.mesh).flops -
                                   search.cost_model(3).forward_work(reward.mesh).flops;
      EXPECT_GT(lm_head_flops, 0);
      EXPECT_NEAR(reference.forward_seconds - reward.forward_seconds,
                  lm_head_flops / (device.efficiency.compute * device.cluster.peak_flops), 1e-9 * reference.forward_seconds);
    }
  }
}

TEST(PlacementCostModel, AShapeSmallerThanItsLanguageModelHeadIsRefused) {
  ModelShape m = small_model();
  m.params = 64'000;  // exactly hidden x vocab: no room for the decoder
  EXPECT_EQ(message_of<InvalidArgument>([&] { validate_model_shape(m, "critic"); }),
            "critic.params: expected more than the language-model head's hidden x vocab = 64 x 1000 = 64000 (the "
            "count includes it), got 64000");
}
