// The trainer's pieces built from a PPOConfig as verl builds them.
#include <gtest/gtest.h>

#include <sstream>

#include "verl/trainer/components_from_config.hpp"
#include "verl/trainer/config.hpp"
#include "../support/error_message.hpp"

using namespace verl;
using namespace verl::trainer;

namespace {
PPOConfig with(std::vector<std::string> overrides) { return load_ppo_config(std::span<const std::string>(overrides)); }
}  // namespace

TEST(ConfigComponents, TotalStepsFollowVerl) {
  EXPECT_EQ(total_training_steps(with({"trainer.total_epochs=3"}), 7), 21);
  EXPECT_EQ(total_training_steps(with({"trainer.total_training_steps=5"}), 7), 5);
  EXPECT_THROW(total_training_steps(with({}), 0), InvalidArgument);
  const std::string too_big = test_support::message_of([] { (void)total_training_steps(with({"data.train_batch_size=64"}), 0, 40); });
  EXPECT_NE(too_big.find("data.train_batch_size: expected at most the 40 training prompts"), std::string::npos) << too_big;
  EXPECT_NE(too_big.find("got 64"), std::string::npos) << too_big;
}

TEST(ConfigComponents, OptimizerAndSchedule) {
  const PPOConfig c = with({"actor_rollout_ref.actor.optim.lr=2e-6", "actor_rollout_ref.actor.optim.betas=[0.8,0.9]",
                            "actor_rollout_ref.actor.optim.weight_decay=0.1",
                            "actor_rollout_ref.actor.optim.lr_warmup_steps_ratio=0.1",
                            "actor_rollout_ref.actor.optim.lr_scheduler_type=cosine",
                            "actor_rollout_ref.actor.optim.min_lr_ratio=0.1"});
  const auto& optim = c.actor_rollout_ref.actor.optim;
  const optim::AdamWConfig adamw = adamw_config(optim);
  EXPECT_EQ(adamw.lr, 2e-6);
  EXPECT_EQ(adamw.beta1, 0.8);
  EXPECT_EQ(adamw.beta2, 0.9);
  EXPECT_EQ(adamw.weight_decay, 0.1);
  auto scheduler = lr_scheduler(optim, 50);  // 5 warmup steps, cosine down to 10% over 50
  EXPECT_EQ(scheduler.get_last_lr(), 0.0);
  EXPECT_DOUBLE_EQ(scheduler.lr_at(5), 2e-6);
  EXPECT_DOUBLE_EQ(scheduler.lr_at(50), 2e-7);
  EXPECT_EQ(optim::schedule_name(lr_schedule(with({}).critic.optim, 10)), "constant");
  // An explicit optim.total_training_steps wins over the injected one.
  const PPOConfig explicit_total = with({"critic.optim.total_training_steps=10", "critic.optim.lr_scheduler_type=cosine"});
  EXPECT_DOUBLE_EQ(lr_scheduler(explicit_total.critic.optim, 1000).lr_at(10), 0.0);
}

TEST(ConfigComponents, DataOptions) {
  const PPOConfig c = with({"data.train_batch_size=8", "data.seed=3", "data.max_prompt_length=64",
                            "data.filter_overlong_prompts=true", "data.truncation=left", "data.val_max_samples=20",
                            "data.prompt_key=question"});
  const auto train = dataset_options(c.data);
  EXPECT_EQ(train.prompt_key, "question");
  EXPECT_EQ(train.max_prompt_length, 64);
  EXPECT_TRUE(train.filter_overlong_prompts);
  EXPECT_EQ(train.truncation, data::Truncation::left);
  EXPECT_EQ(train.max_samples, -1);
  EXPECT_EQ(dataset_options(c.data, true).max_samples, 20);
  const auto loader = train_loader_options(c.data);
  EXPECT_EQ(loader.batch_size, 8);
  EXPECT_EQ(loader.seed, 3u);
  EXPECT_TRUE(loader.drop_last);
  EXPECT_EQ(train_loader_options(with({"data.gen_batch_size=24"}).data).batch_size, 24);
  const auto validation = validation_loader_options(c.data, 37);
  EXPECT_EQ(validation.batch_size, 37);
  EXPECT_FALSE(validation.shuffle);
  EXPECT_FALSE(validation.drop_last);
  EXPECT_EQ(train_loader_options(with({}).data).seed, data::default_data_seed);
}

TEST(ConfigComponents, TrackingAndCheckpoints) {
  const PPOConfig c = with({"trainer.max_actor_ckpt_to_keep=2", "trainer.project_name=p", "trainer.experiment_name=e"});
  const RetentionPolicy retention = retention_policy(c.trainer);
  EXPECT_EQ(retention.at("actor"), 2);
  EXPECT_FALSE(retention.at("critic").has_value());
  EXPECT_EQ(checkpoint_manager(c.trainer).root(), std::filesystem::path("checkpoints/p/e"));
  std::ostringstream console;
  Tracking t = tracking(c.trainer, 10, std::nullopt, console);
  t.log({{"critic/score/mean", 0.5}}, 1);
  EXPECT_NE(console.str().find("step 1/10"), std::string::npos);
}
