// trainer.v1.trainer_mode=separate_async over MPI ranks: rank 0 trains (and runs the controller),
// the other ranks form the rollout pool. Checked:
//  - with no warm-up batch the asynchronous step is the synchronous one (hybrid_engine=False,
//    trainer_mode=sync): the same samples and scores, losses to float tolerance;
//  - every sample carries the weight version it was generated with, and the staleness of each
//    step is what the queue's depth makes it (verl's training/off_policy/trajectory_staleness);
//  - with drop, prompts sent more than max_off_policy_threshold steps before are evicted and
//    replaced, and no step trains on anything older;
//  - a slow rollout pool changes how long the trainer waits (timing_s/gen), never what it trains on.
// Run under mpirun -np 2 and 3 (one or two rollout ranks).
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "verl/data/prompt_formatter.hpp"
#include "verl/data/rl_dataset.hpp"
#include "verl/hybridflow/placement.hpp"
#include "verl/hybridflow/runtime.hpp"
#include "verl/model/transformer/transformer.hpp"
#include "verl/tokenizer/char_tokenizer.hpp"
#include "verl/trainer/config.hpp"
#include "verl/trainer/ppo_controller.hpp"
#include "verl/trainer/workers/actor_rollout_ref_worker.hpp"
#include "verl/trainer/workers/rollout_worker.hpp"
#include "tiny_controller_models.hpp"

namespace {

using namespace verl;
using namespace verl::trainer;
using namespace verl::test_support;

using ActorWorker = ActorRolloutRefWorker<TinyPolicySource>;
using Rollout = RolloutWorker<TinyPolicySource>;

/// A rollout pool much slower than the trainer: every generation call takes 300 ms longer.
class SlowRollout : public RolloutWorker<TinyPolicySource> {
 public:
  static constexpr std::string_view name = "SlowRollout";
  using RolloutWorker::RolloutWorker;
  data::DataProto generate_sequences(const data::DataProto& prompts) {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    return RolloutWorker::generate_sequences(prompts);
  }
  using methods =
      TypeList<hybridflow::Method<&SlowRollout::init_model, hybridflow::Dispatch::one_to_all, "init_model">,
               hybridflow::Method<&SlowRollout::generate_sequences, hybridflow::Dispatch::dp_compute_proto, "generate_sequences">,
               hybridflow::Method<&SlowRollout::load_weights, hybridflow::Dispatch::one_to_all, "load_weights">>;
};

using TestRuntime = hybridflow::Runtime<ActorWorker, Rollout, SlowRollout>;
TestRuntime* runtime = nullptr;

template <class RolloutW>
using Controller = PPOController<TestRuntime, ActorWorker, NoCritic, FirstDigitParity, NoRewardModel, RolloutW>;

/// GRPO with KL in the reward (so that scores differ once the actor moves), 4 prompts x 4 samples
/// a step in two mini-batches of 2 prompts, on one training rank and the rest as the rollout pool.
PPOConfig config_of(const std::vector<std::string>& extra) {
  std::vector<std::string> overrides = {
      "data.train_batch_size=4", "data.max_prompt_length=8", "data.max_response_length=3", "actor_rollout_ref.rollout.n=4",
      "actor_rollout_ref.actor.ppo_mini_batch_size=2", "actor_rollout_ref.actor.optim.lr=0.01",
      "algorithm.adv_estimator=grpo", "actor_rollout_ref.actor.use_kl_loss=True", "algorithm.use_kl_in_reward=True",
      "algorithm.kl_ctrl.kl_coef=0.5", "actor_rollout_ref.actor.entropy_coeff=0.01", "trainer.balance_batch=False",
      "trainer.total_training_steps=5", "trainer.logger=[file]", "trainer.n_gpus_per_node=1",
      "actor_rollout_ref.hybrid_engine=False", "actor_rollout_ref.rollout.nnodes=1",
      "actor_rollout_ref.rollout.n_gpus_per_node=" + std::to_string(runtime->world_size() - 1),
      "trainer.v1.separate_async.parameter_sync_step=2"};
  overrides.insert(overrides.end(), extra.begin(), extra.end());
  return load_ppo_config(overrides);
}

template <class RolloutW = Rollout>
Controller<RolloutW> controller(const std::vector<std::string>& extra) {
  const PPOConfig config = config_of(extra);
  const hybridflow::RolePlacement placement = hybridflow::place_roles(placement_keys(config, false), runtime->world_size());
  return Controller<RolloutW>(*runtime, config, placement, FirstDigitParity{}, hooks(), prompts(24), data::RLHFDataset{});
}

template <class RolloutW = Rollout>
std::vector<Metrics> run(const std::vector<std::string>& extra, int steps) {
  auto c = controller<RolloutW>(extra);
  std::vector<Metrics> out;
  for (int s = 0; s < steps; ++s) out.push_back(c.step());
  return out;
}

const std::vector<std::string> async_mode = {"trainer.v1.trainer_mode=separate_async"};

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST(SeparateAsync, WithoutWarmupIsTheSynchronousStep) {
  const auto sync = run({}, 3);
  const auto async = run(with(async_mode, {"trainer.v1.separate_async.num_warmup_batches=0"}), 3);
  for (int s = 0; s < 3; ++s) {
    EXPECT_EQ(sync[s].at("critic/score/mean"), async[s].at("critic/score/mean")) << "step " << s + 1;
    EXPECT_EQ(sync[s].at("response_length/mean"), async[s].at("response_length/mean")) << "step " << s + 1;
    // (actor/entropy is not compared: the synchronous step takes its token mean over the whole
    // batch, the asynchronous one averages the mini-batches' means, as verl's MetricsAggregator.)
    for (const char* key : {"actor/pg_loss", "actor/kl_loss", "actor/grad_norm", "critic/rewards/mean"}) {
      ASSERT_TRUE(sync[s].contains(key) && async[s].contains(key)) << key;
      EXPECT_NEAR(sync[s].at(key), async[s].at(key), 1e-4 * std::max(1.0, std::abs(sync[s].at(key))))
          << key << " at step " << s + 1;
    }
    // Every sample was generated with the weights the step started from.
    EXPECT_EQ(async[s].at("training/off_policy/trajectory_staleness/max"), 0.0) << "step " << s + 1;
  }
}

TEST(SeparateAsync, SamplesCarryTheirWeightVersionAndStalenessFollowsTheQueue) {
  // Two batches sent ahead: the k-th step trains on prompts sent at step k - 2, generated with
  // the weights of step k - 3 (or the initial ones), while the actor holds those of step k - 1.
  const auto m = run(with(async_mode, {"trainer.v1.separate_async.num_warmup_batches=2"}), 5);
  for (int s = 1; s <= 5; ++s) {
    const double expected = std::min(s - 1, 2);
    const Metrics& step = m[static_cast<std::size_t>(s - 1)];
    EXPECT_EQ(step.at("training/off_policy/trajectory_staleness/max"), expected) << "step " << s;
    EXPECT_EQ(step.at("training/off_policy/trajectory_staleness/min"), expected) << "step " << s;
    EXPECT_EQ(step.at("training/off_policy/trajectory_spans/max"), 1.0) << "step " << s;
    EXPECT_FALSE(step.contains("training/off_policy/evicted_samples")) << "step " << s;
  }
}

TEST(SeparateAsync, DropEvictsWhatIsOlderThanTheBoundAndTrainsOnFreshPrompts) {
  // Two batches sent ahead (w1, w2 and b1 at step 1, then b_k at step k): b1 spans three steps at
  // step 3, above the bound of 2, so its 4 prompts are dropped and sent again (r3) behind b2 and
  // b3; step 3 trains b2, step 4 b3, and at step 5 r3 spans three steps too: dropped again.
  const auto m = run(with(async_mode, {"trainer.v1.separate_async.num_warmup_batches=2",
                                       "trainer.v1.sampler.max_off_policy_threshold=2"}),
                     5);
  const double evicted[] = {0, 0, 4, 0, 4};
  for (int s = 1; s <= 5; ++s) {
    const Metrics& step = m[static_cast<std::size_t>(s - 1)];
    // Nothing trained is older than the bound: at most threshold - 1 weight versions behind.
    EXPECT_LE(step.at("training/off_policy/trajectory_staleness_worst/max"), 1.0) << "step " << s;
    const double expected = evicted[s - 1];
    EXPECT_EQ(step.contains("training/off_policy/evicted_samples") ? step.at("training/off_policy/evicted_samples") : 0.0,
              expected)
        << "step " << s;
    if (expected > 0) {
      EXPECT_EQ(step.at("training/off_policy/evicted_samples_staleness/max"), 3.0) << "step " << s;
    }
  }
}

TEST(SeparateAsync, RolloutCorrectionSeesTheOffPolicyGap) {
  // The rollout's own log-probs against pi_old: the same weights at step 1, two versions apart
  // from step 3 on, and the importance weights of verl's rollout correction act on that gap.
  const auto m = run(with(async_mode, {"trainer.v1.separate_async.num_warmup_batches=2",
                                       "actor_rollout_ref.rollout.calculate_log_probs=True",
                                       "algorithm.rollout_correction.rollout_is=token"}),
                     4);
  const double on_policy = m[0].at("training/rollout_probs_diff_max");
  const double off_policy = m[2].at("training/rollout_probs_diff_max");
  EXPECT_LT(on_policy, 1e-3);
  EXPECT_GT(off_policy, 10 * on_policy);
  EXPECT_GT(off_policy, 1e-3);
  bool corrected = false;
  for (const auto& [key, value] : m[2]) corrected = corrected || key.starts_with("rollout_corr/");
  EXPECT_TRUE(corrected) << "no rollout_corr/ metric at step 3";
}

TEST(SeparateAsync, ASlowRolloutPoolChangesTheWaitNotTheTraining) {
  const std::vector<std::string> keys = with(async_mode, {"trainer.v1.separate_async.num_warmup_batches=1",
                                                          "trainer.v1.sampler.max_off_policy_threshold=2"});
  const auto fast = run<Rollout>(keys, 4);
  const auto slow = run<SlowRollout>(keys, 4);
  double fast_wait = 0, slow_wait = 0;
  for (int s = 0; s < 4; ++s) {
    for (const char* key : {"critic/score/mean", "response_length/mean", "actor/pg_loss", "actor/kl_loss",
                            "training/off_policy/trajectory_staleness/max"}) {
      EXPECT_EQ(fast[s].at(key), slow[s].at(key)) << key << " at step " << s + 1;
    }
    EXPECT_LE(slow[s].at("training/off_policy/trajectory_staleness_worst/max"), 1.0) << "step " << s + 1;
    fast_wait += fast[s].at("timing_s/gen");
    slow_wait += slow[s].at("timing_s/gen");
  }
  // Two chunks a step, each at least 300 ms late on the slow pool.
  EXPECT_GT(slow_wait, fast_wait);
  EXPECT_GT(slow_wait, 4 * 0.3);
}

TEST(SeparateAsync, ResumingTrainsOnTheSamplesTheUninterruptedRunTrainsOn) {
  // A checkpoint holds the generations in flight (settled) and the queue's place in the prompt
  // stream: the resumed steps are the uninterrupted run's, bit for bit.
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    ("verl_separate_async_resume_" + std::to_string(runtime->world_size()));
  std::filesystem::remove_all(dir);
  const std::vector<std::string> keys =
      with(async_mode, {"trainer.v1.separate_async.num_warmup_batches=2", "trainer.v1.sampler.max_off_policy_threshold=2",
                        "trainer.save_freq=2", "trainer.default_local_dir=" + dir.string()});
  const auto uninterrupted = run(keys, 4);
  ASSERT_TRUE(std::filesystem::exists(dir / "global_step_2" / "separate_async_in_flight.bin"));
  auto resumed = controller(keys);
  resumed.load_checkpoint(dir / "global_step_2");
  for (int s = 3; s <= 4; ++s) {
    const Metrics m = resumed.step();
    const Metrics& expected = uninterrupted[static_cast<std::size_t>(s - 1)];
    for (const char* key : {"critic/score/mean", "response_length/mean", "actor/pg_loss", "actor/kl_loss", "actor/grad_norm",
                            "training/off_policy/trajectory_staleness/max"}) {
      EXPECT_EQ(m.at(key), expected.at(key)) << key << " at step " << s;
    }
    EXPECT_EQ(m.contains("training/off_policy/evicted_samples"), expected.contains("training/off_policy/evicted_samples"));
  }
  // A damaged file is refused by name, never resumed quietly.
  const auto file = dir / "global_step_2" / "separate_async_in_flight.bin";
  std::filesystem::resize_file(file, std::filesystem::file_size(file) - 3);
  auto damaged = controller(keys);
  try {
    damaged.load_checkpoint(dir / "global_step_2");
    ADD_FAILURE() << "a truncated in-flight file was resumed";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("separate_async_in_flight.bin"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(dir);
}

TEST(SeparateAsync, RefusesABatchThatIsNotParameterSyncStepMiniBatches) {
  EXPECT_THROW(
      {
        try {
          (void)controller(with(async_mode, {"trainer.v1.separate_async.parameter_sync_step=3"}));
        } catch (const InvalidArgument& e) {
          EXPECT_NE(std::string(e.what()).find("data.train_batch_size"), std::string::npos) << e.what();
          throw;
        }
      },
      InvalidArgument);
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  return hybridflow::run_controller<ActorWorker, Rollout, SlowRollout>(argc, argv, [](TestRuntime& r) {
    runtime = &r;
    return RUN_ALL_TESTS();
  });
}
