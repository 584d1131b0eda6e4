// verl's configuration: defaults, dotted overrides in Hydra's grammar, YAML files, OmegaConf
// interpolations, and the errors for unknown, unsupported and mistyped keys.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "verl/trainer/config.hpp"
#include "verl/trainer/separate_async.hpp"
#include "verl/trainer/config_yaml.hpp"
#include "verl/trainer/placement_keys.hpp"
#include "verl/trainer/workers/fsdp_sharding.hpp"

using namespace verl;
using namespace verl::trainer;
namespace fs = std::filesystem;

namespace {

PPOConfig with(std::vector<std::string> overrides) { return load_ppo_config(std::span<const std::string>(overrides)); }

std::string error_of(const std::vector<std::string>& overrides) {
  try {
    (void)with(overrides);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "<no error>";
}

struct TempFile {
  fs::path path;
  explicit TempFile(const std::string& text, const std::string& name = "config.yaml") {
    path = fs::temp_directory_path() / ("verl_config_test_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name() + "_" + name);
    std::ofstream(path) << text;
  }
  ~TempFile() { fs::remove(path); }
};

std::string yaml_error_of(const std::string& text, std::vector<std::string> overrides = {}) {
  TempFile file(text);
  try {
    (void)load_ppo_config(file.path, overrides);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "<no error>";
}

}  // namespace

TEST(Config, DefaultsAreVerls) {
  const PPOConfig loaded = with({});
  // The C++ defaults and verl's yaml (plus verl-cpp's three documented changes) agree.
  EXPECT_EQ(loaded, PPOConfig{});
  EXPECT_EQ(loaded.actor_rollout_ref.actor.optim.lr, 1e-6);
  EXPECT_EQ(loaded.critic.optim.lr, 1e-5);
  EXPECT_EQ(loaded.actor_rollout_ref.actor.kl_loss_type, "low_var_kl");
  EXPECT_EQ(loaded.algorithm.adv_estimator, "gae");
  EXPECT_EQ(loaded.data.truncation, data::Truncation::error);
  EXPECT_EQ(loaded.trainer.resume_mode, ResumeMode::automatic);
  EXPECT_EQ(loaded.trainer.logger, (std::vector<std::string>{"console"}));
  EXPECT_FALSE(loaded.actor_rollout_ref.rollout.name.has_value());  // verl's mandatory ??? is unset
}

TEST(Config, OverridesWithVerlsKeyNames) {
  const PPOConfig c = with({"algorithm.adv_estimator=grpo", "actor_rollout_ref.rollout.n=8", "data.train_batch_size=64",
                            "trainer.total_training_steps=100", "trainer.logger=['console','file']",
                            "actor_rollout_ref.actor.optim.lr=1e-6", "actor_rollout_ref.actor.use_kl_loss=True",
                            "actor_rollout_ref.actor.optim.betas=[0.9, 0.95]", "data.truncation=middle",
                            "trainer.resume_mode=disable", "+data.gen_batch_size=96"});
  EXPECT_EQ(c.algorithm.adv_estimator, "grpo");
  EXPECT_EQ(c.actor_rollout_ref.rollout.n, 8);
  EXPECT_EQ(c.data.train_batch_size, 64);
  EXPECT_EQ(c.trainer.total_training_steps, 100);
  EXPECT_EQ(c.trainer.logger, (std::vector<std::string>{"console", "file"}));
  EXPECT_TRUE(c.actor_rollout_ref.actor.use_kl_loss);
  EXPECT_EQ(c.actor_rollout_ref.actor.optim.betas, (std::vector<double>{0.9, 0.95}));
  EXPECT_EQ(c.data.truncation, data::Truncation::middle);
  EXPECT_EQ(c.trainer.resume_mode, ResumeMode::disable);
  EXPECT_EQ(c.data.gen_batch_size, 96);
  // Hydra's other spellings of a list, and a single string where verl takes a list.
  EXPECT_EQ(with({"trainer.logger=[console,file]"}).trainer.logger, (std::vector<std::string>{"console", "file"}));
  EXPECT_EQ(with({"trainer.logger=console"}).trainer.logger, (std::vector<std::string>{"console"}));
  EXPECT_EQ(with({"data.train_files=/data/a.jsonl"}).data.train_files, (std::vector<std::string>{"/data/a.jsonl"}));
  // Later overrides win; null clears an optional.
  EXPECT_EQ(with({"data.seed=1", "data.seed=2"}).data.seed, 2);
  EXPECT_FALSE(with({"data.seed=1", "data.seed=null"}).data.seed.has_value());
  EXPECT_NE(error_of({"actor_rollout_ref.rollout.name=vllm"}).find("actor_rollout_ref.rollout.name: not supported"),
            std::string::npos);
}

TEST(Config, InterpolationsFollowVerl) {
  const PPOConfig c = with({"actor_rollout_ref.actor.ppo_mini_batch_size=32", "data.max_prompt_length=200",
                            "trainer.project_name=proj", "trainer.experiment_name=exp", "actor_rollout_ref.actor.ppo_epochs=3",
                            "actor_rollout_ref.model.path=/models/tiny"});
  EXPECT_EQ(c.critic.ppo_mini_batch_size, 32);  // ${oc.select:actor_rollout_ref.actor.ppo_mini_batch_size,256}
  EXPECT_EQ(c.critic.ppo_epochs, 3);
  EXPECT_EQ(c.actor_rollout_ref.rollout.prompt_length, 200);  // ${oc.select:data.max_prompt_length,512}
  EXPECT_EQ(c.trainer.default_local_dir, "checkpoints/proj/exp");
  EXPECT_FALSE(c.critic.model.tokenizer_path.has_value());  // verl 0.9.1: null (no longer the actor's)
  EXPECT_EQ(c.actor_rollout_ref.actor.checkpoint.load_contents, c.actor_rollout_ref.actor.checkpoint.save_contents);
  EXPECT_EQ(with({"reward_model.reward_manager=dapo"}).reward.reward_manager.name, "dapo");  // the legacy key migrates
  EXPECT_EQ(with({"actor_rollout_ref.actor.checkpoint.save_contents=[optimizer,model,extra]"})
                .actor_rollout_ref.actor.checkpoint.load_contents,
            (std::vector<std::string>{"optimizer", "model", "extra"}));  // ${.save_contents}
  // Setting the follower itself wins.
  EXPECT_EQ(with({"actor_rollout_ref.actor.ppo_mini_batch_size=32", "critic.ppo_mini_batch_size=8"}).critic.ppo_mini_batch_size, 8);
  // Interpolations in overrides too.
  EXPECT_EQ(with({"trainer.experiment_name=${trainer.project_name}_run"}).trainer.experiment_name, "verl_examples_run");
  EXPECT_EQ(with({"data.val_batch_size=${data.train_batch_size}"}).data.val_batch_size, 1024);
  EXPECT_NE(error_of({"data.train_files=${data.val_files}", "data.val_files=${data.train_files}"}).find("interpolation cycle"),
            std::string::npos);
  EXPECT_NE(error_of({"data.val_batch_size=${data.nope}"}).find("refers to 'data.nope', which is not a key"),
            std::string::npos);
}

TEST(Config, UnknownKeysSuggestTheNearestOne) {
  EXPECT_EQ(error_of({"actor_rollout_ref.rollout.temprature=0.7"}),
            "actor_rollout_ref.rollout.temprature: unknown key (override 'actor_rollout_ref.rollout.temprature=0.7'); did "
            "you mean actor_rollout_ref.rollout.temperature?");
  EXPECT_NE(error_of({"data.train_batch=64"}).find("did you mean data.train_batch_size?"), std::string::npos);
  EXPECT_NE(error_of({"algorithm.kl_ctrl.kl_coeff=0.1"}).find("did you mean algorithm.kl_ctrl.kl_coef?"), std::string::npos);
}

TEST(Config, UnsupportedVerlKeysAreRejectedUnlessAtVerlsDefault) {
  // verl's Megatron-Bridge LoRA section (lora.*) is refused; the FSDP keys (lora_rank, ...) act.
  EXPECT_EQ(error_of({"actor_rollout_ref.model.lora.rank=8"}),
            "actor_rollout_ref.model.lora.rank: not supported by verl-cpp yet (only verl's default 0 is accepted, got 8; "
            "override 'actor_rollout_ref.model.lora.rank=8')");
  EXPECT_NE(error_of({"algorithm.use_pf_ppo=true"}).find("algorithm.use_pf_ppo: not supported by verl-cpp yet"),
            std::string::npos);
  EXPECT_EQ(error_of({"actor_rollout_ref.model.override_config.attention_dropout=0.1"}),
            "actor_rollout_ref.model.override_config: not supported by verl-cpp yet (only verl's default {} is accepted, "
            "got {attention_dropout: 0.1}; override 'actor_rollout_ref.model.override_config.attention_dropout=0.1')");
  // verl's default value, however spelt, is accepted.
  EXPECT_NO_THROW(with({"actor_rollout_ref.model.lora_rank=0", "algorithm.use_pf_ppo=False",
                        "actor_rollout_ref.rollout.over_sample_rate=0.0"}));
  // Python machinery has no meaning here: accepted whatever the value.
  EXPECT_NO_THROW(with({"actor_rollout_ref.actor.fsdp_config.param_offload=true", "actor_rollout_ref.rollout.gpu_memory_utilization=0.9",
                        "actor_rollout_ref.actor.strategy=fsdp2", "trainer.ray_wait_register_center_timeout=5",
                        "actor_rollout_ref.rollout.engine_kwargs.vllm.swap_space=4", "data.dataloader_num_workers=0"}));
  EXPECT_NE(error_of({"actor_rollout_ref.actor.optim=3"})
                .find("actor_rollout_ref.actor.optim: expected a mapping (a section of the configuration), got 3"),
            std::string::npos);
}

TEST(Config, TypeErrorsNameTheKeyAndTheExpectedType) {
  EXPECT_EQ(error_of({"actor_rollout_ref.rollout.n=eight"}),
            "actor_rollout_ref.rollout.n: expected an integer, got 'eight' (override 'actor_rollout_ref.rollout.n=eight')");
  EXPECT_NE(error_of({"actor_rollout_ref.actor.use_kl_loss=maybe"}).find("expected a boolean (true or false), got 'maybe'"),
            std::string::npos);
  EXPECT_NE(error_of({"actor_rollout_ref.actor.optim.lr=fast"}).find("expected a number, got 'fast'"), std::string::npos);
  EXPECT_NE(error_of({"data.seed=abc"}).find("data.seed: expected an integer, got 'abc' or null"), std::string::npos);
  EXPECT_NE(error_of({"trainer.project_name=[a,b]"}).find("trainer.project_name: expected a string, got a list"),
            std::string::npos);
  EXPECT_NE(error_of({"data.truncation=center"}).find("data.truncation: expected one of error, left, right, middle, got 'center'"),
            std::string::npos);
  EXPECT_NE(error_of({"actor_rollout_ref.actor.optim.betas=[0.9,x]"}).find("element 1: expected a number, got 'x'"),
            std::string::npos);
  // Several problems are reported together.
  const std::string many = error_of({"actor_rollout_ref.rollout.n=x", "data.train_batch_size=y"});
  EXPECT_NE(many.find("invalid configuration (2 problems)"), std::string::npos);
}

TEST(Config, NamesAndRangesAreValidated) {
  EXPECT_NE(error_of({"algorithm.adv_estimator=grp"}).find("algorithm.adv_estimator: expected one of gae, grpo"), std::string::npos);
  EXPECT_NE(error_of({"algorithm.adv_estimator=grp"}).find("got 'grp'; did you mean grpo?"), std::string::npos);
  EXPECT_NE(error_of({"actor_rollout_ref.actor.policy_loss.loss_mode=gpso"}).find("did you mean gspo?"), std::string::npos);
  EXPECT_NE(error_of({"actor_rollout_ref.actor.kl_loss_type=low_var"}).find("did you mean low_var_kl?"), std::string::npos);
  EXPECT_NE(error_of({"actor_rollout_ref.actor.loss_agg_mode=token_mean"}).find("did you mean token-mean?"), std::string::npos);
  EXPECT_NE(error_of({"actor_rollout_ref.actor.optim.optimizer=SGD"}).find("expected AdamW"), std::string::npos);
  EXPECT_NE(error_of({"critic.optim.lr_scheduler_type=linear"}).find("critic.optim.lr_scheduler_type: expected one of constant, cosine"),
            std::string::npos);
  EXPECT_NE(error_of({"trainer.logger=[console,wandb]"}).find("'wandb' is a verl backend that is not supported by verl-cpp yet"),
            std::string::npos);
  // A reward model acts (the HybridFlow controller's worker) and needs its folder.
  EXPECT_NE(error_of({"reward_model.enable=true"}).find("reward.reward_model.model_path: expected the reward model's folder"),
            std::string::npos);
  EXPECT_NE(error_of({"trainer.default_local_dir=''"}).find("trainer.default_local_dir: expected a folder"), std::string::npos);
  EXPECT_NE(error_of({"trainer.resume_mode=resume_path"}).find("trainer.resume_from_path: expected a checkpoint folder"),
            std::string::npos);
  EXPECT_NE(error_of({"data.train_batch_size=0"}).find("data.train_batch_size: expected a positive integer, got 0"),
            std::string::npos);
  EXPECT_NE(error_of({"algorithm.kl_penalty=full"}).find("not implemented by verl"), std::string::npos);
  EXPECT_NE(error_of({"actor_rollout_ref.actor.policy_loss.loss_mode=dro"})
                .find("actor_rollout_ref.actor.policy_loss.dro_beta: expected a positive value with loss_mode dro, got null"),
            std::string::npos);
  EXPECT_NE(error_of({"actor_rollout_ref.actor.policy_loss.loss_mode=dro", "actor_rollout_ref.actor.policy_loss.dro_beta=-1"})
                .find("actor_rollout_ref.actor.policy_loss.dro_beta: expected a value > 0, got -1"),
            std::string::npos);
  EXPECT_EQ(with({"actor_rollout_ref.actor.policy_loss.loss_mode=dro", "actor_rollout_ref.actor.policy_loss.dro_beta=0.2"})
                .actor_rollout_ref.actor.policy_loss.dro_beta,
            0.2);
  EXPECT_EQ(with({"actor_rollout_ref.actor.kl_loss_type=low_var_kl+"}).actor_rollout_ref.actor.kl_loss_type, "low_var_kl+");
  // verl's deprecated warmup_style still selects the schedule.
  EXPECT_EQ(with({"actor_rollout_ref.actor.optim.warmup_style=cosine"}).actor_rollout_ref.actor.optim.lr_scheduler_type,
            "cosine");
}

TEST(Config, OverrideGrammar) {
  using trainer::detail::parse_override;
  using trainer::detail::parse_value;
  EXPECT_EQ(parse_override("+a.b=1").key, "a.b");
  EXPECT_EQ(parse_override("++a.b=1").key, "a.b");
  const auto quoted = parse_value("'x, y'", "t");
  EXPECT_TRUE(quoted.quoted);
  EXPECT_EQ(quoted.text, "x, y");
  const auto list = parse_value("[1, 'two', [3, 4], null, ${oc.select:a,1}]", "t");
  ASSERT_EQ(list.items.size(), 5u);
  EXPECT_EQ(list.items[1].text, "two");
  EXPECT_EQ(list.items[2].items.size(), 2u);
  EXPECT_TRUE(list.items[3].is_null());
  EXPECT_EQ(list.items[4].text, "${oc.select:a,1}");
  const auto map = parse_value("{a: 1, 'b': [x]}", "t");
  ASSERT_EQ(map.entries.size(), 2u);
  EXPECT_EQ(map.entries[1].first, "b");
  EXPECT_EQ(parse_value("", "t").text, "");
  EXPECT_THROW(parse_override("~trainer.logger"), InvalidArgument);
  EXPECT_THROW(parse_override("trainer.logger"), InvalidArgument);
  EXPECT_THROW(parse_override("a..b=1"), InvalidArgument);
  EXPECT_THROW(parse_value("[1, 2", "t"), InvalidArgument);
  EXPECT_THROW(parse_value("'open", "t"), InvalidArgument);
  EXPECT_EQ(trainer::detail::edit_distance("kitten", "sitting"), 3u);
}

TEST(Config, RoundTripsThroughYamlAndOverrides) {
  const PPOConfig original = with({"algorithm.adv_estimator=grpo", "trainer.experiment_name=it's \"quoted\"",
                                   "actor_rollout_ref.rollout.n=4", "data.seed=7", "trainer.logger=[console,file]",
                                   "actor_rollout_ref.actor.optim.lr=3e-7", "algorithm.filter_groups.metric=acc"});
  const std::string yaml = to_yaml(original);
  TempFile file(yaml);
  EXPECT_EQ(load_ppo_config(file.path), original) << yaml;
  EXPECT_EQ(with(to_overrides(original)), original);
}

TEST(ConfigYaml, FileThenOverrides) {
  TempFile file(R"(# a partial verl config
data:
  train_batch_size: 32
  train_files: [a.jsonl, b.jsonl]
  truncation: "left"
actor_rollout_ref:
  rollout:
    'n': 4
    name: ???
  actor:
    optim:
      lr: 1.0e-05
trainer:
  logger: ['console', 'file']
  project_name: "123"
)");
  const std::vector<std::string> overrides = {"data.train_batch_size=16"};
  const PPOConfig c = load_ppo_config(file.path, overrides);
  EXPECT_EQ(c.data.train_batch_size, 16);  // the override wins over the file
  EXPECT_EQ(c.data.train_files, (std::vector<std::string>{"a.jsonl", "b.jsonl"}));
  EXPECT_EQ(c.data.truncation, data::Truncation::left);
  EXPECT_EQ(c.actor_rollout_ref.rollout.n, 4);
  EXPECT_DOUBLE_EQ(c.actor_rollout_ref.actor.optim.lr, 1e-5);
  EXPECT_EQ(c.trainer.project_name, "123");
  EXPECT_EQ(c.trainer.default_local_dir, "checkpoints/123/gsm8k");
}

TEST(ConfigYaml, ErrorsNameFileLineAndColumn) {
  const std::string typo = yaml_error_of("trainer:\n  total_epochs: 3\n  totl_training_steps: 5\n");
  EXPECT_NE(typo.find("trainer.totl_training_steps: unknown key ("), std::string::npos) << typo;
  EXPECT_NE(typo.find("config.yaml:3:24); did you mean trainer.total_training_steps?"), std::string::npos) << typo;
  const std::string type = yaml_error_of("data:\n  max_prompt_length: long\n");
  EXPECT_NE(type.find("data.max_prompt_length: expected an integer, got 'long' ("), std::string::npos) << type;
  EXPECT_NE(type.find("config.yaml:2:22)"), std::string::npos) << type;
  EXPECT_NE(yaml_error_of("data: [1, 2\n").find("invalid YAML"), std::string::npos);
  EXPECT_NE(yaml_error_of("data:\n  seed: 1\n  seed: 2\n").find("key 'seed' appears twice"), std::string::npos);
  EXPECT_NE(yaml_error_of("defaults:\n  - ppo_trainer\n").find("Hydra's composition is not supported"), std::string::npos);
  EXPECT_NE(yaml_error_of("- a\n- b\n").find("expected a mapping of keys at the top"), std::string::npos);
  // A second document's keys would be lost: refused, not read halfway.
  const std::string two = yaml_error_of("data:\n  seed: 1\n---\ntrainer:\n  total_epochs: 2\n");
  EXPECT_NE(two.find("expected one YAML document, got 2"), std::string::npos) << two;
  EXPECT_EQ(yaml_error_of("---\ndata:\n  seed: 1\n"), "<no error>");  // one document, with its marker
  EXPECT_EQ(yaml_error_of(""), "<no error>");
  EXPECT_NE(yaml_error_of("actor_rollout_ref:\n  model:\n    lora:\n      rank: 16\n").find("lora.rank: not supported by verl-cpp yet"),
            std::string::npos);
  EXPECT_THROW((void)load_ppo_config(fs::path("/no/such/config.yaml")), ConfigError);
}

namespace {

fs::path verl_reference(const std::string& name) {
  return fs::path(VERL_GOLDEN_DIR) / ".." / ".." / ".." / ".." / "shared" / "reference" / name;
}

/// The problems loading `file` reports (none: empty).
std::vector<std::string> problems_loading(const fs::path& file, const std::vector<std::string>& overrides = {}) {
  try {
    (void)load_ppo_config(file, overrides);
  } catch (const ConfigError& e) {
    return e.problems();
  }
  return {};
}

}  // namespace

// verl 0.9.1's own flattened configurations load as they stand: every key known, every
// interpolation resolved; what verl-cpp does not implement is refused by name, value by value.
TEST(ConfigYaml, VerlsOwnFullConfigLoads) {
  const fs::path reference = verl_reference("verl_ppo_trainer.yaml");
  if (!fs::exists(reference)) GTEST_SKIP() << "verl's reference config is not next to this checkout: " << reference;
  // The values verl-cpp runs differently: wandb, cuda on 8 GPUs, a bfloat16 rollout.
  const std::vector<std::string> overrides = {"trainer.logger=[console]", "trainer.device=cpu", "trainer.n_gpus_per_node=1",
                                              "actor_rollout_ref.rollout.dtype=float32"};
  EXPECT_EQ(load_ppo_config(reference, overrides), PPOConfig{});
  // As it stands: each refusal names its key; nothing is unknown.
  const auto problems = problems_loading(reference, {"actor_rollout_ref.rollout.dtype=float32"});
  ASSERT_EQ(problems.size(), 2u) << fmt::format("{}", fmt::join(problems, "\n"));
  EXPECT_NE(problems[0].find("'wandb' is a verl backend"), std::string::npos) << problems[0];
  EXPECT_NE(problems[1].find("trainer.device: not supported by verl-cpp yet"), std::string::npos) << problems[1];
  // trainer.n_gpus_per_node=8 acts: it sizes the actor's pool (8 MPI ranks).
  const std::vector<std::string> eight_devices = {"trainer.logger=[console]", "trainer.device=cpu",
                                                  "actor_rollout_ref.rollout.dtype=float32"};
  EXPECT_EQ(load_ppo_config(reference, eight_devices).trainer.n_gpus_per_node, 8);
  // verl's bfloat16 rollout is acted on.
  const std::vector<std::string> stock_rollout = {"trainer.logger=[console]", "trainer.device=cpu", "trainer.n_gpus_per_node=1"};
  EXPECT_EQ(load_ppo_config(reference, stock_rollout).actor_rollout_ref.rollout.dtype, "bfloat16");
}

TEST(ConfigYaml, VerlsMegatronConfigLoads) {
  const fs::path reference = verl_reference("verl_ppo_megatron_trainer.yaml");
  if (!fs::exists(reference)) GTEST_SKIP() << "verl's reference config is not next to this checkout: " << reference;
  const auto problems = problems_loading(reference);
  ASSERT_FALSE(problems.empty());
  for (const auto& problem : problems) {
    EXPECT_EQ(problem.find("unknown key"), std::string::npos) << problem;
    EXPECT_EQ(problem.find("interpolation"), std::string::npos) << problem;
  }
  const std::string all = fmt::format("{}", fmt::join(problems, "\n"));
  // The actor's and the critic's Megatron engines act (tensor parallelism); what they do not
  // build is refused by name, as is the ref's own Megatron strategy (it is a TP copy in the actor's worker).
  EXPECT_EQ(all.find("actor_rollout_ref.actor.strategy:"), std::string::npos) << all;
  EXPECT_NE(all.find("actor_rollout_ref.ref.strategy: not supported by verl-cpp yet"), std::string::npos) << all;
  EXPECT_EQ(all.find("critic.strategy:"), std::string::npos) << all;
  EXPECT_EQ(all.find("critic.megatron"), std::string::npos) << all;
  std::vector<std::string> overrides = {"trainer.logger=[console]", "trainer.device=cpu", "trainer.n_gpus_per_node=1",
                                        "actor_rollout_ref.rollout.dtype=float32", "actor_rollout_ref.actor.strategy=fsdp",
                                        "actor_rollout_ref.ref.strategy=fsdp", "critic.strategy=fsdp"};
  const std::string optimizer = fmt::format("{}", fmt::join(problems_loading(reference, overrides), "\n"));
  EXPECT_NE(optimizer.find("actor_rollout_ref.actor.optim.optimizer: expected AdamW"), std::string::npos) << optimizer;
  // With the values verl-cpp implements, it loads; its Megatron parallel sizes stay at 1.
  overrides.insert(overrides.end(), {"actor_rollout_ref.actor.optim.optimizer=AdamW", "critic.optim.optimizer=AdamW"});
  EXPECT_TRUE(problems_loading(reference, overrides).empty()) << fmt::format("{}", fmt::join(problems_loading(reference, overrides), "\n"));
  // A TP size acts only with the Megatron strategy.
  EXPECT_NE(error_of({"actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2"})
                .find("actor_rollout_ref.actor.megatron: tensor/pipeline/context_parallel_size act only with "
                      "actor_rollout_ref.actor.strategy=megatron"),
            std::string::npos);
  EXPECT_EQ(with({"actor_rollout_ref.actor.strategy=megatron", "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2",
                  "actor_rollout_ref.actor.megatron.sequence_parallel=False",
                  "actor_rollout_ref.actor.megatron.use_distributed_optimizer=False"})
                .actor_rollout_ref.actor.megatron.tensor_model_parallel_size,
            2);
  // Pipeline parallelism acts in the Megatron worker, with the dense generation (tg = 1).
  EXPECT_EQ(with({"actor_rollout_ref.actor.strategy=megatron", "actor_rollout_ref.actor.megatron.use_distributed_optimizer=False",
                  "actor_rollout_ref.actor.megatron.pipeline_model_parallel_size=2",
                  "actor_rollout_ref.rollout.tensor_model_parallel_size=1"})
                .actor_rollout_ref.actor.megatron.pipeline_model_parallel_size,
            2);
  EXPECT_NE(error_of({"actor_rollout_ref.actor.strategy=megatron", "actor_rollout_ref.actor.megatron.use_distributed_optimizer=False",
                      "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2",
                      "actor_rollout_ref.actor.megatron.sequence_parallel=False",
                      "actor_rollout_ref.actor.megatron.pipeline_model_parallel_size=2",
                      "actor_rollout_ref.rollout.tensor_model_parallel_size=2"})
                .find("actor_rollout_ref.rollout.tensor_model_parallel_size: expected 1 with "
                      "actor_rollout_ref.actor.megatron.pipeline_model_parallel_size = 2 > 1"),
            std::string::npos);
}

// actor_rollout_ref.actor.megatron.use_distributed_optimizer (verl's default True) acts in the
// Megatron worker (ZeRO-1 over the DP ranks); it loads either way, alone or with verl's other
// Megatron defaults, and a value that is not a boolean names the key and the value.
TEST(Config, MegatronDistributedOptimizerIsAccepted) {
  const std::vector<std::string> megatron = {"actor_rollout_ref.actor.strategy=megatron",
                                             "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2",
                                             "actor_rollout_ref.actor.megatron.sequence_parallel=False"};
  EXPECT_TRUE(with(megatron).actor_rollout_ref.actor.megatron.use_distributed_optimizer) << "verl's default";
  for (const bool value : {true, false}) {
    std::vector<std::string> overrides = megatron;
    overrides.push_back(fmt::format("actor_rollout_ref.actor.megatron.use_distributed_optimizer={}", value ? "True" : "False"));
    EXPECT_EQ(with(overrides).actor_rollout_ref.actor.megatron.use_distributed_optimizer, value);
  }
  // The ref's copy loads (read only with its strategy=megatron, refused by name); the critic's
  // acts with critic.strategy=megatron (the Megatron critic's distributed optimizer).
  EXPECT_TRUE(with({"actor_rollout_ref.ref.megatron.use_distributed_optimizer=True",
                    "critic.megatron.use_distributed_optimizer=True"})
                  .actor_rollout_ref.actor.megatron.use_distributed_optimizer);
  for (const bool value : {true, false}) {
    EXPECT_EQ(with({"critic.strategy=megatron", fmt::format("critic.megatron.use_distributed_optimizer={}", value ? "True" : "False")})
                  .critic.megatron.use_distributed_optimizer,
              value);
  }
  std::vector<std::string> bad = megatron;
  bad.push_back("actor_rollout_ref.actor.megatron.use_distributed_optimizer=sometimes");
  const std::string error = error_of(bad);
  EXPECT_NE(error.find("actor_rollout_ref.actor.megatron.use_distributed_optimizer"), std::string::npos) << error;
  EXPECT_NE(error.find("sometimes"), std::string::npos) << error;
}

// actor_rollout_ref.actor.megatron.sequence_parallel (verl's default True) acts with the Megatron
// strategy at any TP size (Megatron's sequence parallelism at tp > 1, nothing at tp = 1), is read
// by nothing with strategy=fsdp (verl's default there too), and with pipeline stages at tp > 1 is
// refused by name, with both sizes.
TEST(Config, MegatronSequenceParallelActsWithTensorParallelism) {
  const std::string key = "actor_rollout_ref.actor.megatron.sequence_parallel";
  EXPECT_TRUE(with({}).actor_rollout_ref.actor.megatron.sequence_parallel) << "verl's default";
  for (const int tp : {1, 2, 4}) {
    const auto config = with({"actor_rollout_ref.actor.strategy=megatron",
                              fmt::format("actor_rollout_ref.actor.megatron.tensor_model_parallel_size={}", tp),
                              "actor_rollout_ref.rollout.tensor_model_parallel_size=1", key + "=True"});
    EXPECT_TRUE(config.actor_rollout_ref.actor.megatron.sequence_parallel) << "tp " << tp;
    EXPECT_EQ(config.actor_rollout_ref.actor.megatron.tensor_model_parallel_size, tp);
  }
  // Pipeline stages: at tp = 1 it does nothing; at tp > 1 the stages exchange token slices (acts).
  const std::vector<std::string> pipeline = {"actor_rollout_ref.actor.strategy=megatron",
                                             "actor_rollout_ref.actor.megatron.pipeline_model_parallel_size=2",
                                             "actor_rollout_ref.rollout.tensor_model_parallel_size=1", key + "=True"};
  EXPECT_EQ(with(pipeline).actor_rollout_ref.actor.megatron.pipeline_model_parallel_size, 2);
  std::vector<std::string> stages = pipeline;
  stages.push_back("actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2");
  EXPECT_TRUE(with(stages).actor_rollout_ref.actor.megatron.sequence_parallel);
  stages.push_back(key + "=False");
  EXPECT_FALSE(with(stages).actor_rollout_ref.actor.megatron.sequence_parallel);
  // With strategy=fsdp nothing reads it.
  EXPECT_TRUE(with({"actor_rollout_ref.actor.strategy=fsdp", key + "=True"}).actor_rollout_ref.actor.megatron.sequence_parallel);
}

/// A model's sizes for the TP-fit checks: 4 attention heads over 2 KV heads.
model::HfModelConfig four_heads_model() {
  model::HfModelConfig config;
  config.num_attention_heads = 4;
  config.num_key_value_heads = 2;
  config.intermediate_size = 64;
  config.vocab_size = 1408;
  return config;
}

// actor_rollout_ref.rollout.tensor_model_parallel_size: the generation layout's TP size tg acts
// with the Megatron strategy (the 3D-HybridEngine's TP-sharded generation), where it must divide
// the training TP size; impossible pairs are errors naming both keys and both numbers.
TEST(Config, RolloutTensorParallelSizeActsWithMegatron) {
  const auto megatron = [](int tp, int tg) {
    return std::vector<std::string>{"actor_rollout_ref.actor.strategy=megatron",
                                    fmt::format("actor_rollout_ref.actor.megatron.tensor_model_parallel_size={}", tp),
                                    fmt::format("actor_rollout_ref.rollout.tensor_model_parallel_size={}", tg),
                                    "actor_rollout_ref.actor.megatron.sequence_parallel=False",
                                    "actor_rollout_ref.actor.megatron.use_distributed_optimizer=False"};
  };
  EXPECT_EQ(with(megatron(4, 2)).actor_rollout_ref.rollout.tensor_model_parallel_size, 2);
  EXPECT_EQ(with(megatron(4, 4)).actor_rollout_ref.rollout.tensor_model_parallel_size, 4);
  EXPECT_EQ(with(megatron(2, 1)).actor_rollout_ref.rollout.tensor_model_parallel_size, 1);
  // tg not dividing tp.
  const std::string three = error_of(megatron(4, 3));
  EXPECT_NE(three.find("actor_rollout_ref.rollout.tensor_model_parallel_size: expected a divisor of "
                       "actor_rollout_ref.actor.megatron.tensor_model_parallel_size = 4"),
            std::string::npos)
      << three;
  EXPECT_NE(three.find("got 3"), std::string::npos) << three;
  // tg larger than tp (verl's default rollout TP 2 with a training TP of 1 included).
  const std::string larger = error_of(megatron(1, 2));
  EXPECT_NE(larger.find("actor_rollout_ref.rollout.tensor_model_parallel_size: expected a divisor of "
                        "actor_rollout_ref.actor.megatron.tensor_model_parallel_size = 1"),
            std::string::npos)
      << larger;
  EXPECT_NE(larger.find("got 2"), std::string::npos) << larger;
  // With fsdp every rank generates with the whole model: 1 or verl's default 2 (inert), nothing else.
  EXPECT_NO_THROW(with({"actor_rollout_ref.rollout.tensor_model_parallel_size=1"}));
  EXPECT_NO_THROW(with({"actor_rollout_ref.rollout.tensor_model_parallel_size=2"}));
  EXPECT_NE(error_of({"actor_rollout_ref.rollout.tensor_model_parallel_size=4"})
                .find("actor_rollout_ref.rollout.tensor_model_parallel_size: acts only with "
                      "actor_rollout_ref.actor.strategy=megatron"),
            std::string::npos);

  // Against the model (once its config.json is read): tg larger than the attention heads.
  const model::HfModelConfig four_heads = four_heads_model();
  EXPECT_NO_THROW(check_tensor_parallel_fits(with(megatron(4, 2)), four_heads));
  EXPECT_NO_THROW(check_tensor_parallel_fits(with(megatron(4, 4)), four_heads));
  try {
    check_tensor_parallel_fits(with(megatron(8, 8)), four_heads);
    ADD_FAILURE() << "tp = tg = 8 over 4 heads was accepted";
  } catch (const InvalidArgument& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("actor_rollout_ref.rollout.tensor_model_parallel_size: expected a divisor of the model's "
                           "num_attention_heads = 4"),
              std::string::npos)
        << message;
    EXPECT_NE(message.find("actor_rollout_ref.actor.megatron.tensor_model_parallel_size: expected a divisor of the "
                           "model's num_attention_heads = 4"),
              std::string::npos)
        << message;
    EXPECT_NE(message.find("got 8"), std::string::npos) << message;
  }
  // With fsdp nothing is split: no check.
  EXPECT_NO_THROW(check_tensor_parallel_fits(with({}), four_heads));
}

// critic.strategy=megatron: the Megatron critic (MegatronCriticWorker) with critic.megatron's
// tensor parallelism, sequence parallelism and distributed optimizer; its other sizes, and the
// fsdp worker's keys, are refused by name with the value; the TP size is checked against the value
// model's heads once its config.json is read.
TEST(Config, MegatronCriticStrategyActsWithItsOwnLayout) {
  EXPECT_EQ(with({}).critic.strategy, "fsdp");
  const PPOConfig megatron = with({"critic.strategy=megatron", "critic.megatron.tensor_model_parallel_size=2"});
  EXPECT_EQ(megatron.critic.strategy, "megatron");
  EXPECT_EQ(megatron.critic.megatron.tensor_model_parallel_size, 2);
  EXPECT_TRUE(megatron.critic.megatron.sequence_parallel) << "verl's default";
  EXPECT_TRUE(megatron.critic.megatron.use_distributed_optimizer) << "verl's default";
  EXPECT_EQ(megatron.actor_rollout_ref.actor.strategy, "fsdp") << "the critic's engine is its own";
  EXPECT_FALSE(with({"critic.strategy=megatron", "critic.megatron.sequence_parallel=False"}).critic.megatron.sequence_parallel);
  const auto expect_error = [](const std::vector<std::string>& overrides, const std::vector<std::string>& parts) {
    const std::string error = error_of(overrides);
    for (const auto& part : parts) EXPECT_NE(error.find(part), std::string::npos) << part << "\nin: " << error;
  };
  expect_error({"critic.strategy=megatorn"}, {"critic.strategy: expected one of fsdp, fsdp2, megatron, got 'megatorn'",
                                              "did you mean megatron"});
  expect_error({"critic.megatron.tensor_model_parallel_size=2"},
               {"critic.megatron: tensor/pipeline/context_parallel_size act only with critic.strategy=megatron",
                "tp=2 pp=1 cp=1 with strategy=fsdp"});
  expect_error({"critic.strategy=megatron", "critic.megatron.tensor_model_parallel_size=0"},
               {"critic.megatron.tensor_model_parallel_size: expected a value >= 1, got 0"});
  expect_error({"critic.strategy=megatron", "critic.megatron.pipeline_model_parallel_size=0"},
               {"critic.megatron.pipeline_model_parallel_size: expected a value >= 1, got 0"});
  // Pipeline stages of the value model act.
  EXPECT_EQ(with({"critic.strategy=megatron", "critic.megatron.pipeline_model_parallel_size=2"}).critic.megatron.pipeline_model_parallel_size, 2);
  expect_error({"critic.strategy=megatron", "critic.megatron.context_parallel_size=2"},
               {"critic.megatron.context_parallel_size: not supported by verl-cpp yet", "expected 1, got 2"});
  expect_error({"critic.strategy=megatron", "critic.ulysses_sequence_parallel_size=2"},
               {"critic.ulysses_sequence_parallel_size: acts only with critic.strategy=fsdp or fsdp2", "got 2"});
  expect_error({"critic.strategy=megatron", "critic.fsdp.fsdp_size=2"},
               {"critic.fsdp.fsdp_size: acts only with critic.strategy=fsdp or fsdp2", "expected -1 or 1", "got 2"});
  expect_error({"critic.strategy=megatron", "critic.megatron.expert_model_parallel_size=2"},
               {"critic.megatron.expert_model_parallel_size: not supported by verl-cpp yet"});

  // Against the value model (once its config.json is read).
  const model::HfModelConfig four_heads = four_heads_model();
  const auto critic_tp = [](int tp) {
    return with({"critic.strategy=megatron", fmt::format("critic.megatron.tensor_model_parallel_size={}", tp),
                 "critic.model.path=/models/tiny-critic"});
  };
  EXPECT_NO_THROW(check_critic_tensor_parallel_fits(critic_tp(4), four_heads));
  try {
    check_critic_tensor_parallel_fits(critic_tp(8), four_heads);
    ADD_FAILURE() << "critic tp 8 over 4 heads was accepted";
  } catch (const InvalidArgument& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("critic.megatron.tensor_model_parallel_size: expected a divisor of the model's "
                           "num_attention_heads = 4"),
              std::string::npos)
        << message;
    EXPECT_NE(message.find("got 8"), std::string::npos) << message;
    EXPECT_NE(message.find("critic.model.path = '/models/tiny-critic'"), std::string::npos) << message;
  }
  // With fsdp nothing is split: no check.
  EXPECT_NO_THROW(check_critic_tensor_parallel_fits(with({}), four_heads));
}

// verl 0.9.1's migrate_legacy_reward_impl: the legacy keys act through their reward.* places.
// FSDP's sharding group acts for the actor, the reference and the critic (the workers check it
// against the group's world size); values that cannot name a group are refused by key.
TEST(Config, FsdpSizeActsForTheActorTheReferenceAndTheCritic) {
  EXPECT_EQ(with({}).actor_rollout_ref.actor.fsdp_config.fsdp_size, -1);
  EXPECT_EQ(with({}).actor_rollout_ref.ref.fsdp_config.fsdp_size, -1);
  const PPOConfig two = with({"actor_rollout_ref.actor.fsdp_config.fsdp_size=2", "actor_rollout_ref.ref.fsdp_config.fsdp_size=4"});
  EXPECT_EQ(two.actor_rollout_ref.actor.fsdp_config.fsdp_size, 2);
  EXPECT_EQ(two.actor_rollout_ref.ref.fsdp_config.fsdp_size, 4);
  EXPECT_EQ(with({}).critic.fsdp.fsdp_size, -1);
  EXPECT_EQ(with({"critic.fsdp.fsdp_size=2"}).critic.fsdp.fsdp_size, 2);
  EXPECT_NO_THROW(with({"actor_rollout_ref.actor.fsdp_config.fsdp_size=1", "critic.fsdp.fsdp_size=1"}));
  for (const std::string key : {"actor_rollout_ref.actor.fsdp_config.fsdp_size", "actor_rollout_ref.ref.fsdp_config.fsdp_size",
                                "critic.fsdp.fsdp_size"}) {
    for (const char* value : {"0", "-2"}) {
      EXPECT_EQ(error_of({key + "=" + value}),
                fmt::format("{}: expected -1 (every rank of the worker group) or a positive number of ranks, got {}", key, value));
    }
  }
  // The worker's check: a divisor of the group's world size, -1 for all of it.
  EXPECT_EQ(resolve_fsdp_size(-1, 4, "actor_rollout_ref.actor.fsdp_config.fsdp_size"), 4);
  EXPECT_EQ(resolve_fsdp_size(2, 4, "actor_rollout_ref.actor.fsdp_config.fsdp_size"), 2);
  EXPECT_EQ(resolve_fsdp_size(1, 4, "actor_rollout_ref.actor.fsdp_config.fsdp_size"), 1);
  try {
    (void)resolve_fsdp_size(3, 4, "actor_rollout_ref.actor.fsdp_config.fsdp_size");
    ADD_FAILURE() << "fsdp_size 3 accepted at world size 4";
  } catch (const InvalidArgument& e) {
    EXPECT_STREQ(e.what(),
                 "actor_rollout_ref.actor.fsdp_config.fsdp_size: expected a divisor of the worker group's world size 4 (or "
                 "-1), got 3");
  }
  EXPECT_THROW((void)resolve_fsdp_size(8, 4, "actor_rollout_ref.ref.fsdp_config.fsdp_size"), InvalidArgument);
}

TEST(Config, LegacyRewardKeysMigrateToReward) {
  EXPECT_EQ(with({"reward.reward_manager.name=dapo"}).reward.reward_manager.name, "dapo");
  EXPECT_EQ(with({"reward_model.reward_manager=dapo"}).reward.reward_manager.name, "dapo");
  EXPECT_EQ(with({"reward_model.reward_manager=naive", "reward.reward_manager.name=dapo"}).reward.reward_manager.name,
            "naive");  // as in verl, a legacy value set wins
  // The legacy key lands on reward.reward_model.enable, which acts: its folder is required.
  EXPECT_TRUE(with({"reward_model.enable=true", "reward.reward_model.model_path=/models/rm"}).reward.reward_model.enable);
  EXPECT_NE(error_of({"reward.reward_model.enable=true"}).find("reward.reward_model.model_path: expected the reward model's folder"),
            std::string::npos);
  EXPECT_NE(error_of({"reward.reward_model.enable=true", "reward.reward_model.model_path=/models/rm",
                      "reward.reward_model.enable_resource_pool=true", "reward.reward_model.nnodes=0"})
                .find("reward.reward_model.nnodes / n_gpus_per_node: expected >= 1 each"),
            std::string::npos);
  const std::string custom = error_of({"custom_reward_function.path=/tmp/score.py"});
  EXPECT_NE(custom.find("reward.custom_reward_function.path: not supported by verl-cpp yet"), std::string::npos) << custom;
  EXPECT_NE(custom.find("custom_reward_function.path=/tmp/score.py"), std::string::npos) << custom;  // where it came from
  EXPECT_NE(error_of({"sandbox_fusion.url=http://sandbox"}).find("reward.sandbox_fusion.url: not supported by verl-cpp yet"),
            std::string::npos);
  EXPECT_NE(error_of({"reward.reward_manager.name=prime"}).find("reward.reward_manager.name: expected one of naive, dapo"),
            std::string::npos);
  // The old top-level reward_manager section is gone in 0.9.1.
  EXPECT_NE(error_of({"reward_manager.name=naive"}).find("reward_manager: unknown key"), std::string::npos);
  // reward-model serving settings cannot act while the reward model is off.
  EXPECT_NO_THROW(with({"reward_model.rollout.gpu_memory_utilization=0.8", "reward.num_workers=2"}));
  // The DAPO overlong buffer is the DAPO manager's.
  EXPECT_NE(error_of({"reward_model.overlong_buffer.enable=true", "reward_model.overlong_buffer.len=4"})
                .find("expected reward.reward_manager.name=dapo"),
            std::string::npos);
}

// Ulysses sequence parallelism acts in the fsdp actor worker (and its reference, which follows
// the actor's size) and in the critic worker; the Megatron worker and the new engine's copies of
// the key refuse it by name.
TEST(Config, UlyssesSequenceParallelSizeActsForTheFsdpActor) {
  EXPECT_EQ(with({}).actor_rollout_ref.actor.ulysses_sequence_parallel_size, 1);
  EXPECT_EQ(with({"actor_rollout_ref.actor.ulysses_sequence_parallel_size=2"}).actor_rollout_ref.actor.ulysses_sequence_parallel_size, 2);
  EXPECT_EQ(with({"actor_rollout_ref.actor.strategy=fsdp2", "actor_rollout_ref.actor.ulysses_sequence_parallel_size=4",
                  "actor_rollout_ref.ref.ulysses_sequence_parallel_size=4"})
                .actor_rollout_ref.actor.ulysses_sequence_parallel_size,
            4);
  const std::string ref_differs = error_of({"actor_rollout_ref.actor.ulysses_sequence_parallel_size=2",
                                            "actor_rollout_ref.ref.ulysses_sequence_parallel_size=1"});
  EXPECT_NE(ref_differs.find("actor_rollout_ref.ref.ulysses_sequence_parallel_size:"), std::string::npos) << ref_differs;
  EXPECT_NE(error_of({"actor_rollout_ref.actor.ulysses_sequence_parallel_size=0"})
                .find("actor_rollout_ref.actor.ulysses_sequence_parallel_size"),
            std::string::npos);
  const std::string megatron = error_of({"actor_rollout_ref.actor.strategy=megatron",
                                         "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
                                         "actor_rollout_ref.actor.ulysses_sequence_parallel_size=2"});
  EXPECT_NE(megatron.find("actor_rollout_ref.actor.ulysses_sequence_parallel_size: acts only with "
                          "actor_rollout_ref.actor.strategy=fsdp or fsdp2"),
            std::string::npos)
      << megatron;
  EXPECT_NE(megatron.find("got 2"), std::string::npos) << megatron;
  EXPECT_EQ(with({"critic.ulysses_sequence_parallel_size=2"}).critic.ulysses_sequence_parallel_size, 2);
  const std::string critic_engine = error_of({"critic.fsdp.ulysses_sequence_parallel_size=2"});
  EXPECT_NE(critic_engine.find("critic.fsdp.ulysses_sequence_parallel_size: not supported by verl-cpp yet (the new "
                               "engine's copy of the key; the critic worker reads critic.ulysses_sequence_parallel_size"),
            std::string::npos)
      << critic_engine;
  const std::string engine = error_of({"actor_rollout_ref.actor.fsdp_config.ulysses_sequence_parallel_size=2"});
  EXPECT_NE(engine.find("actor_rollout_ref.actor.fsdp_config.ulysses_sequence_parallel_size: not supported by verl-cpp "
                        "yet (the new engine's copy of the key; the fsdp worker reads "
                        "actor_rollout_ref.actor.ulysses_sequence_parallel_size"),
            std::string::npos)
      << engine;
}

// Every key verl acts on is acted on or refused: these were accepted and never read.
TEST(Config, KeysVerlActsOnAreActedOnOrRefused) {
  const std::pair<std::string, std::string> refused[] = {
      {"actor_rollout_ref.rollout.tensor_model_parallel_size=4", "actor_rollout_ref.rollout.tensor_model_parallel_size"},
      {"actor_rollout_ref.rollout.data_parallel_size=2", "actor_rollout_ref.rollout.data_parallel_size"},
      // The ref follows the actor's sequence parallel size (verl's default interpolates it).
      {"actor_rollout_ref.ref.ulysses_sequence_parallel_size=2", "actor_rollout_ref.ref.ulysses_sequence_parallel_size"},
      {"actor_rollout_ref.actor.fsdp_config.ulysses_sequence_parallel_size=2",
       "actor_rollout_ref.actor.fsdp_config.ulysses_sequence_parallel_size"},
      {"actor_rollout_ref.rollout.name=sglang", "actor_rollout_ref.rollout.name"},
      {"trainer.device=cuda", "trainer.device"},
      {"trainer.nnodes=0", "trainer.nnodes"},
      {"trainer.n_gpus_per_node=0", "trainer.n_gpus_per_node"},
      {"+critic.nnodes=1", "critic.nnodes / critic.n_gpus_per_node"},
      {"actor_rollout_ref.hybrid_engine=False", "actor_rollout_ref.rollout.nnodes / n_gpus_per_node"},
      {"actor_rollout_ref.rollout.nnodes=1", "actor_rollout_ref.rollout.nnodes"},
      {"actor_rollout_ref.actor.checkpoint.save_contents=[model]", "actor_rollout_ref.actor.checkpoint.save_contents"},
      {"critic.checkpoint.load_contents=[model,optimizer,extra,hf_model]", "critic.checkpoint.load_contents"},
      {"actor_rollout_ref.ref.strategy=megatron", "actor_rollout_ref.ref.strategy"},
      {"actor_rollout_ref.rollout.dtype=float16", "actor_rollout_ref.rollout.dtype"},
      {"actor_rollout_ref.actor.fsdp_config.model_dtype=bf16", "actor_rollout_ref.actor.fsdp_config.model_dtype"},
      {"actor_rollout_ref.rollout.max_model_len=128", "actor_rollout_ref.rollout.max_model_len"},
      {"trainer.v1.trainer_mode=separate_async", "trainer.v1.trainer_mode"},  // needs hybrid_engine=False
      {"trainer.v1.trainer_mode=colocate_async", "trainer.v1.trainer_mode"},
      {"trainer.v1.sampler.max_off_policy_strategy=keep", "trainer.v1.sampler.max_off_policy_strategy"},
      {"trainer.v1.sampler.max_off_policy_threshold=0", "trainer.v1.sampler.max_off_policy_threshold"},
      {"trainer.v1.separate_async.parameter_sync_step=0", "trainer.v1.separate_async.parameter_sync_step"},
      {"trainer.v1.separate_async.hybrid_rollout.enable_switch=True", "trainer.v1.separate_async.hybrid_rollout.enable_switch"},
      {"algorithm.filter_groups.enable=true", "algorithm.filter_groups.metric"},  // 0.9.1's default metric 'reward'
      {"algorithm.rollout_correction.rollout_is=bogus", "algorithm.rollout_correction.rollout_is"},
      {"algorithm.rollout_correction.loss_type=ppo", "algorithm.rollout_correction.loss_type"},
  };
  for (const auto& [override_text, key] : refused) {
    const std::string error = error_of({override_text});
    EXPECT_NE(error.find(key + ":"), std::string::npos) << override_text << " -> " << error;
  }
  // The values verl-cpp implements are accepted, however spelt: the ref's sequence parallel size
  // is verl's ${oc.select:actor_rollout_ref.actor.ulysses_sequence_parallel_size,1}, 1 here.
  EXPECT_NO_THROW(with({"actor_rollout_ref.ref.ulysses_sequence_parallel_size=1"}));
  // The pools' sizes act (the placement checks them against the job's ranks when it starts); the
  // critic's pool is verl-cpp's pair of keys, both set or neither.
  const PPOConfig pools = with({"trainer.nnodes=2", "trainer.n_gpus_per_node=4", "+critic.nnodes=1", "+critic.n_gpus_per_node=2"});
  EXPECT_EQ(pools.trainer.nnodes * pools.trainer.n_gpus_per_node, 8);
  EXPECT_EQ(pools.critic.nnodes * pools.critic.n_gpus_per_node, 2);
  // A rollout pool of its own (hybrid_engine=False): its size, by default trainer.n_gpus_per_node
  // per node; refused for the LoRA and Megatron actors, whose weights it would not take as they are.
  const std::vector<std::string> separate = {"actor_rollout_ref.hybrid_engine=False", "actor_rollout_ref.rollout.nnodes=1"};
  const PPOConfig apart = with(separate);
  EXPECT_FALSE(apart.actor_rollout_ref.hybrid_engine);
  const hybridflow::RolePlacement placed = hybridflow::place_roles(placement_keys(apart, false), 2);
  EXPECT_EQ(placed.actor.to_string(), "[0]");
  EXPECT_EQ(placed.rollout.to_string(), "[1]");
  auto with_lora = separate;
  with_lora.push_back("actor_rollout_ref.model.lora_rank=4");
  EXPECT_NE(error_of(with_lora).find("actor_rollout_ref.hybrid_engine: False (a rollout pool of its own)"), std::string::npos);
  // separate_async (verl 0.9.1's trainer.v1): a rollout pool of its own, data.train_batch_size =
  // parameter_sync_step x ppo_mini_batch_size, and with wait a bound the warm-up batches can meet.
  std::vector<std::string> async_keys = separate;
  for (const char* key : {"trainer.v1.trainer_mode=separate_async", "data.train_batch_size=8",
                          "actor_rollout_ref.actor.ppo_mini_batch_size=2"})
    async_keys.emplace_back(key);
  const PPOConfig async = with(async_keys);
  EXPECT_EQ(async.trainer.v1.trainer_mode, "separate_async");
  EXPECT_EQ(SeparateAsyncSettings::from_config(async).parameter_sync_step, 4);  // verl's default
  auto mismatched = async_keys;
  mismatched.emplace_back("trainer.v1.separate_async.parameter_sync_step=3");
  EXPECT_NE(error_of(mismatched).find("data.train_batch_size: separate_async trains one PPO mini-batch per update"),
            std::string::npos)
      << error_of(mismatched);
  auto waiting = async_keys;
  for (const char* key : {"trainer.v1.sampler.max_off_policy_strategy=wait", "trainer.v1.separate_async.num_warmup_batches=3",
                          "trainer.v1.sampler.max_off_policy_threshold=3"})
    waiting.emplace_back(key);
  EXPECT_NE(error_of(waiting).find("trainer.v1.sampler.max_off_policy_threshold: with max_off_policy_strategy=wait"),
            std::string::npos)
      << error_of(waiting);
  waiting.back() = "trainer.v1.sampler.max_off_policy_threshold=4";
  EXPECT_NO_THROW(with(waiting));
  auto dynamic = async_keys;
  dynamic.emplace_back("algorithm.filter_groups.enable=True");
  dynamic.emplace_back("algorithm.filter_groups.metric=acc");
  EXPECT_NE(error_of(dynamic).find("algorithm.filter_groups.enable: dynamic sampling with trainer.v1.trainer_mode=separate_async"),
            std::string::npos);
  // In sync mode the sampler's keys are verl's no-ops, but their values are still checked.
  EXPECT_NO_THROW(with({"trainer.v1.sampler.max_off_policy_strategy=wait"}));
  // verl 0.9.1's IcePop bounds, as a string, and a plain number; bad bounds are refused by name
  // when importance weights are on (verl parses the threshold only then).
  const std::string token_weights = "algorithm.rollout_correction.rollout_is=token";
  EXPECT_EQ(with({token_weights, "algorithm.rollout_correction.rollout_is_threshold='0.5_2.0'"})
                .algorithm.rollout_correction.rollout_is_threshold,
            "0.5_2.0");
  EXPECT_NO_THROW(with({token_weights, "algorithm.rollout_correction.rollout_is_threshold=1.5"}));
  EXPECT_NE(error_of({"algorithm.rollout_correction.rollout_is_threshold=inf"})
                .find("algorithm.rollout_correction.rollout_is_threshold:"),
            std::string::npos);  // also while importance weights are off
  for (const char* bad : {"3_2", "abc", "inf", "-1", "0.5_nan"}) {
    const std::string error = error_of({token_weights, std::string("algorithm.rollout_correction.rollout_is_threshold=") + bad});
    EXPECT_NE(error.find("algorithm.rollout_correction.rollout_is_threshold:"), std::string::npos) << bad << " -> " << error;
  }
  EXPECT_NO_THROW(with({"algorithm.use_pf_ppo=${algorithm.use_kl_in_reward}"}));  // false, verl's default
  EXPECT_NE(error_of({"algorithm.use_kl_in_reward=true", "algorithm.use_pf_ppo=${algorithm.use_kl_in_reward}"})
                .find("algorithm.use_pf_ppo: not supported by verl-cpp yet"),
            std::string::npos);
  EXPECT_NO_THROW(with({"actor_rollout_ref.actor.strategy=fsdp2", "actor_rollout_ref.actor.fsdp_config.model_dtype=fp32",
                        "actor_rollout_ref.rollout.dtype=bf16", "trainer.device=cpu",
                        "critic.checkpoint.save_contents=[optimizer,model,extra]", "algorithm.filter_groups.enable=true",
                        "algorithm.filter_groups.metric=acc"}));
}

TEST(Config, KeyListsAreVerls) {
  EXPECT_TRUE(is_verl_config_key("actor_rollout_ref.rollout.n"));
  EXPECT_TRUE(is_verl_config_key("actor_rollout_ref.actor.fsdp_config.param_offload"));
  EXPECT_TRUE(is_verl_config_key("data.gen_batch_size"));  // verl 0.9.1 took it from its DAPO recipe
  EXPECT_TRUE(is_verl_config_key("actor_rollout_ref.actor.megatron.pipeline_model_parallel_size"));  // the Megatron file's
  EXPECT_FALSE(is_verl_config_key("reward_model.overlong_buffer.len"));  // a verl-cpp extension (DAPO's recipe)
  EXPECT_FALSE(is_verl_config_key("reward_manager.name"));  // gone in 0.9.1 (reward.reward_manager.name)
  const auto supported = supported_config_keys();
  EXPECT_GT(supported.size(), 150u);
  for (const auto& key : supported) {
    // verl's AlgoConfig fields its yaml does not list are set with '+' there (+algorithm.gdpo_reward_keys).
    const bool extension = key.starts_with("reward_model.overlong_buffer.") ||
                           key == "trainer.max_consecutive_nonfinite_steps" || key == "algorithm.gdpo_reward_keys" ||
                           key == "algorithm.gdpo_reward_weights" ||
                           // The critic's own pool: verl places it in code (its split-placement example).
                           key == "critic.nnodes" || key == "critic.n_gpus_per_node" ||
                           // Safe-RLHF's keys (algo/safe_rlhf.hpp): verl has no Safe-RLHF.
                           key.starts_with("algorithm.safe_rlhf.") || key == "reward.cost_model.model_path" ||
                           key == "cost_critic.model.path";
    EXPECT_TRUE(extension || is_verl_config_key(key)) << key << " is not one of verl's keys";
  }
}

// What `verl_train --cfg job` prints: every key as it will run, loadable again.
TEST(Config, TheResolvedTreePrintsAsYamlThatLoadsAgain) {
  const std::vector<std::string> overrides = {"algorithm.adv_estimator=grpo", "reward_model.reward_manager=dapo",
                                              "trainer.project_name=it's", "actor_rollout_ref.rollout.n=4",
                                              "data.train_files=[a.jsonl, b.jsonl]"};
  trainer::detail::ConfigNode resolved;
  const PPOConfig config = load_ppo_config(std::span<const std::string>(overrides), &resolved);
  const std::string yaml = to_yaml(resolved);
  EXPECT_NE(yaml.find("adv_estimator: grpo\n"), std::string::npos);
  EXPECT_NE(yaml.find("default_local_dir: 'checkpoints/it''s/gsm8k'"), std::string::npos) << yaml;  // resolved
  EXPECT_NE(yaml.find("  reward_manager:\n"), std::string::npos);
  EXPECT_NE(yaml.find("'n': 4\n"), std::string::npos);  // YAML 1.1 would read a bare n as false
  EXPECT_EQ(yaml.find("${"), std::string::npos) << "every interpolation is resolved";
  TempFile file(yaml);
  EXPECT_EQ(load_ppo_config(file.path), config) << yaml;
  const std::string_view cfg[] = {"--cfg", "job", "--resolve", "data.seed=1"};
  const ConfigArguments a = parse_config_arguments(cfg);
  EXPECT_TRUE(a.print_config);
  EXPECT_EQ(a.overrides, (std::vector<std::string>{"data.seed=1"}));
  const std::string_view hydra_only[] = {"--cfg=hydra"};
  EXPECT_THROW((void)parse_config_arguments(hydra_only), InvalidArgument);
}

// verl_train --plan FILE: verl_plan's chosen placement as key=value lines, before the command
// line's own overrides (which win); a malformed line names the file and line.
TEST(Config, PlanFileComesBeforeTheOverrides) {
  TempFile plan("# verl_plan --emit-keys\ntrainer.nnodes=1\n\n  trainer.n_gpus_per_node=2  \n", "plan.txt");
  const std::string plan_path = plan.path.string();
  const std::string_view args[] = {"--plan", plan_path, "trainer.n_gpus_per_node=4", "data.seed=3"};
  const ConfigArguments a = parse_config_arguments(args);
  EXPECT_EQ(a.overrides, (std::vector<std::string>{"trainer.nnodes=1", "trainer.n_gpus_per_node=2",
                                                   "trainer.n_gpus_per_node=4", "data.seed=3"}));
  EXPECT_EQ(load_ppo_config(a.overrides).trainer.n_gpus_per_node, 4);
  TempFile bad("trainer.nnodes=1\nnot a key\n", "bad_plan.txt");
  const std::string bad_path = bad.path.string();
  const std::string_view bad_args[] = {"--plan", bad_path};
  try {
    (void)parse_config_arguments(bad_args);
    FAIL() << "expected an error";
  } catch (const InvalidArgument& error) {
    EXPECT_NE(std::string(error.what()).find(bad_path + ":2: expected a key=value line"), std::string::npos) << error.what();
  }
  const std::string_view missing[] = {"--plan=/nonexistent/plan.txt"};
  EXPECT_THROW((void)parse_config_arguments(missing), InvalidArgument);
}

TEST(Config, CommandLineArguments) {
  const std::string_view hydra[] = {"--config-path", "/etc/verl", "--config-name=ppo_trainer", "algorithm.adv_estimator=grpo",
                                    "trainer.logger=['console','file']"};
  const ConfigArguments a = parse_config_arguments(hydra);
  EXPECT_EQ(a.config_file, fs::path("/etc/verl/ppo_trainer.yaml"));
  EXPECT_EQ(a.overrides, (std::vector<std::string>{"algorithm.adv_estimator=grpo", "trainer.logger=['console','file']"}));
  const std::string_view file[] = {"-c", "run.yml", "data.seed=1"};
  EXPECT_EQ(parse_config_arguments(file).config_file, fs::path("run.yml"));
  const std::string_view none[] = {"data.seed=1"};
  EXPECT_FALSE(parse_config_arguments(none).config_file.has_value());
  const std::string_view help[] = {"--help"};
  EXPECT_TRUE(parse_config_arguments(help).help);
  const std::string_view stray[] = {"grpo"};
  EXPECT_THROW(parse_config_arguments(stray), InvalidArgument);
  const std::string_view dangling[] = {"--config"};
  EXPECT_THROW(parse_config_arguments(dangling), InvalidArgument);
  const std::string_view path_only[] = {"--config-path=/x"};
  EXPECT_THROW(parse_config_arguments(path_only), InvalidArgument);
  const char* argv[] = {"verl_train", "--config=a.yaml", "x.y=1"};
  EXPECT_EQ(parse_config_arguments(3, argv).overrides, (std::vector<std::string>{"x.y=1"}));
}

namespace {

TEST(ConfigValues, NonFiniteAndOutOfRangeSettingsAreRefusedNamingTheKey) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"actor_rollout_ref.actor.optim.lr=inf", "actor_rollout_ref.actor.optim.lr: expected a finite value, got inf"},
      {"actor_rollout_ref.actor.entropy_coeff=inf",
       "actor_rollout_ref.actor.entropy_coeff: expected a finite value, got inf"},
      {"actor_rollout_ref.actor.kl_loss_coef=nan", "actor_rollout_ref.actor.kl_loss_coef: expected a finite value, got nan"},
      {"algorithm.kl_ctrl.kl_coef=inf", "algorithm.kl_ctrl.kl_coef: expected a finite value, got inf"},
      {"algorithm.gamma=nan", "algorithm.gamma: expected a finite value, got nan"},
      {"algorithm.lam=-3", "algorithm.lam: expected a value in [0, 1], got -3"},
      {"actor_rollout_ref.actor.clip_ratio_low=nan", "actor_rollout_ref.actor.clip_ratio_low: expected a finite value, got nan"},
      {"actor_rollout_ref.actor.clip_ratio_high=-1", "actor_rollout_ref.actor.clip_ratio_high: expected a value > 0, got -1"},
      {"actor_rollout_ref.actor.clip_ratio=-0.5", "actor_rollout_ref.actor.clip_ratio: expected a value > 0, got -0.5"},
      {"actor_rollout_ref.rollout.top_k=-7",
       "actor_rollout_ref.rollout.top_k: expected -1 (off) or an integer >= 1, got -7"},
      {"trainer.total_training_steps=-5", "trainer.total_training_steps: expected a positive integer, got -5"},
      {"actor_rollout_ref.actor.clip_ratio_c=1", "actor_rollout_ref.actor.clip_ratio_c: expected a value > 1, got 1"},
      {"critic.optim.betas=[0.9,1.0]", "critic.optim.betas: expected values in [0, 1), got 1"},
      {"actor_rollout_ref.rollout.val_kwargs.top_p=0",
       "actor_rollout_ref.rollout.val_kwargs.top_p: expected a value in (0, 1], got 0"},
      {"actor_rollout_ref.rollout.temperature=-0.1",
       "actor_rollout_ref.rollout.temperature: expected a value >= 0 (0: greedy), got -0.1"},
      {"critic.grad_clip=0", "critic.grad_clip: expected a value > 0, got 0"},
      {"actor_rollout_ref.actor.optim.weight_decay=-0.01",
       "actor_rollout_ref.actor.optim.weight_decay: expected a value >= 0, got -0.01"},
      {"trainer.save_freq=-5", "trainer.save_freq: expected -1 or 0 (never) or a positive step count, got -5"},
      {"data.max_response_length=0", "data.max_response_length: expected a positive integer, got 0"},
  };
  for (const auto& [override_text, expected] : cases) {
    const std::string error = error_of({override_text});
    EXPECT_NE(error.find(expected), std::string::npos) << override_text << " -> " << error;
  }
  // Every problem is reported at once.
  const std::string both = error_of({"algorithm.gamma=2", "critic.optim.lr=-1"});
  EXPECT_NE(both.find("algorithm.gamma: expected a value in [0, 1], got 2"), std::string::npos) << both;
  EXPECT_NE(both.find("critic.optim.lr: expected a learning rate >= 0, got -1"), std::string::npos) << both;
  // verl's "unset" values and the bounds themselves are accepted.
  EXPECT_NO_THROW((void)with({"actor_rollout_ref.rollout.top_k=-1", "algorithm.gamma=1", "algorithm.lam=0",
                              "trainer.save_freq=0", "actor_rollout_ref.actor.optim.lr=0",
                              "actor_rollout_ref.rollout.temperature=0", "actor_rollout_ref.actor.optim.lr_warmup_steps=-1"}));
}

TEST(ConfigValues, TheReadmeListsTheRangeTable) {
  std::ifstream readme(fs::path(__FILE__).parent_path().parent_path().parent_path() / "README.md");
  ASSERT_TRUE(readme) << "README.md not found";
  std::vector<std::string> listed;
  for (std::string line; std::getline(readme, line);)
    if (line.starts_with("| `") && line.find("` | ") != std::string::npos) listed.push_back(line.substr(3, line.find("` | ") - 3));
  std::vector<std::string> rules;
  for (const auto& rule : verl::trainer::detail::value_rules) rules.emplace_back(rule.pattern);
  for (const auto& pattern : rules)
    EXPECT_NE(std::find(listed.begin(), listed.end(), pattern), listed.end()) << pattern << " is not in README.md";
}

}  // namespace
