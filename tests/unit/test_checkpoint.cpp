// Checkpoints: verl's folder layout and tracker file, atomic writes, resume modes, retention,
// and an interrupted-and-resumed optimisation that continues exactly.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "verl/trainer/checkpoint.hpp"
#include "verl/optim/lr_scheduler.hpp"

using namespace verl;
using namespace verl::trainer;
namespace fs = std::filesystem;

namespace {

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("verl_ckpt_test_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

/// A toy "model": two parameter tensors trained by AdamW on a quadratic, with a scheduler, a
/// data loader and an RNG that perturbs the gradients.
struct ToyRun {
  std::vector<float> w = {0.5f, -1.0f, 2.0f, 0.25f, 1.5f, -0.75f};  // shape (2, 3)
  std::vector<float> b = {0.1f, 0.2f};
  std::vector<float> gw = std::vector<float>(6), gb = std::vector<float>(2);
  optim::AdamW adamw{optim::AdamWConfig{0.05, 0.9, 0.999, 1e-8, 0.01}};
  optim::LrScheduler<optim::CosineWithWarmup> scheduler{0.05, optim::CosineWithWarmup(2, 10)};
  data::DataLoader loader{12, {.batch_size = 4, .shuffle = true, .seed = 3, .drop_last = true}};
  std::mt19937_64 rng{99};
  std::int64_t step = 0;
  std::vector<double> losses;

  void train_step() {
    auto batch = loader.next();
    if (!batch) batch = loader.next();
    std::normal_distribution<float> noise(0.0f, 0.01f);
    double loss = 0.0;
    for (std::size_t i = 0; i < w.size(); ++i) {
      gw[i] = 2.0f * (w[i] - static_cast<float>((*batch)[i % batch->size()])) + noise(rng);
      loss += (w[i] - (*batch)[i % batch->size()]) * (w[i] - (*batch)[i % batch->size()]);
    }
    for (std::size_t i = 0; i < b.size(); ++i) gb[i] = 2.0f * b[i];
    scheduler.apply(adamw);
    const optim::ParameterRef parameters[] = {{w, gw, "w"}, {b, gb, "b"}};
    adamw.step(parameters);
    scheduler.step();
    ++step;
    losses.push_back(loss);
  }

  CheckpointSnapshot snapshot() const {
    CheckpointSnapshot s;
    s.global_step = step;
    RoleSnapshot actor;
    actor.model = {{"w", {2, 3}, w}, {"b", {2}, b}};
    actor.optimizer = &adamw.state();
    actor.extra = {{"lr_scheduler", {{"last_epoch", scheduler.last_epoch()}}}};
    s.roles.emplace("actor", std::move(actor));
    s.data = loader.state();
    s.rng["trainer"] = serialize_rng(rng);
    s.extra = {{"losses", losses}};
    return s;
  }

  void restore(const LoadedCheckpoint& checkpoint) {
    const LoadedRole& actor = checkpoint.role("actor");
    actor.tensor("w").copy_to(w, std::vector<std::int64_t>{2, 3});
    actor.tensor("b").copy_to(b, std::vector<std::int64_t>{2});
    adamw.load_state(*actor.optimizer);
    scheduler.set_last_epoch(actor.extra["lr_scheduler"]["last_epoch"].get<std::int64_t>());
    loader.load_state(*checkpoint.data);
    restore_rng(checkpoint.rng.at("trainer"), rng);
    step = checkpoint.global_step;
    losses = checkpoint.extra["losses"].get<std::vector<double>>();
  }
};

}  // namespace

TEST(Checkpoint, WritesVerlsLayoutAndTracker) {
  TempDir dir;
  ToyRun run;
  run.train_step();
  CheckpointManager manager(dir.path);
  EXPECT_FALSE(manager.latest_step().has_value());
  const fs::path folder = manager.save(run.snapshot());
  EXPECT_EQ(folder, dir.path / "global_step_1");
  EXPECT_TRUE(fs::is_regular_file(folder / "actor" / "model.safetensors"));
  EXPECT_TRUE(fs::is_regular_file(folder / "actor" / "optim.safetensors"));
  EXPECT_TRUE(fs::is_regular_file(folder / "actor" / "extra_state.json"));
  EXPECT_TRUE(fs::is_regular_file(folder / "data.json"));
  EXPECT_TRUE(fs::is_regular_file(folder / "trainer_state.json"));
  std::ifstream tracker(dir.path / "latest_checkpointed_iteration.txt");
  std::string text((std::istreambuf_iterator<char>(tracker)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "1");
  // The model file is an ordinary safetensors file.
  const model::SafetensorsFile weights(folder / "actor" / "model.safetensors");
  EXPECT_EQ(weights.names(), (std::vector<std::string>{"b", "w"}));
  EXPECT_EQ(weights.tensor("w").to_f32(), run.w);
  // Nothing temporary is left behind.
  for (const auto& entry : fs::directory_iterator(dir.path)) EXPECT_NE(entry.path().filename().string()[0], '.');
}

TEST(Checkpoint, InterruptedAndResumedRunMatchesAnUninterruptedOne) {
  TempDir dir;
  ToyRun straight;
  for (int s = 0; s < 9; ++s) straight.train_step();

  {
    ToyRun first;
    CheckpointManager manager(dir.path);
    for (int s = 0; s < 5; ++s) {
      first.train_step();
      if (first.step % 2 == 0) manager.save(first.snapshot());
    }
    // "Killed" after step 5: the last checkpoint is step 4.
  }
  ToyRun resumed;
  CheckpointManager manager(dir.path);
  const auto folder = manager.resume_folder(ResumeMode::automatic);
  ASSERT_TRUE(folder.has_value());
  EXPECT_EQ(*folder, dir.path / "global_step_4");
  resumed.restore(CheckpointManager::load(*folder));
  while (resumed.step < 9) resumed.train_step();
  EXPECT_EQ(resumed.w, straight.w);
  EXPECT_EQ(resumed.b, straight.b);
  EXPECT_EQ(resumed.losses, straight.losses);
  EXPECT_EQ(resumed.adamw.state(), straight.adamw.state());
}

TEST(Checkpoint, ResumeModes) {
  TempDir dir;
  CheckpointManager manager(dir.path);
  EXPECT_FALSE(manager.resume_folder(ResumeMode::automatic).has_value());  // from scratch
  ToyRun run;
  run.train_step();
  manager.save(run.snapshot());
  EXPECT_FALSE(manager.resume_folder(ResumeMode::disable).has_value());
  EXPECT_EQ(*manager.resume_folder(ResumeMode::resume_path, (dir.path / "global_step_1").string()),
            dir.path / "global_step_1");
  EXPECT_THROW((void)manager.resume_folder(ResumeMode::resume_path), InvalidArgument);
  try {
    (void)manager.resume_folder(ResumeMode::resume_path, dir.path.string());
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("expected a path naming a global_step_<N> folder"), std::string::npos);
  }
  EXPECT_THROW((void)manager.resume_folder(ResumeMode::resume_path, (dir.path / "global_step_7").string()),
               InvalidArgument);
  EXPECT_EQ(parse_resume_mode("auto"), ResumeMode::automatic);
  try {
    parse_resume_mode("latest");
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_STREQ(e.what(), "trainer.resume_mode: expected one of auto, disable, resume_path, got 'latest'");
  }
  // A tracker naming a folder that is gone: an error naming both (verl would quietly start over).
  io::write_file_atomically(manager.tracker_path(), std::string_view("12"));
  try {
    (void)manager.resume_folder(ResumeMode::automatic);
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("names step 12, but"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("global_step_12' is missing"), std::string::npos) << e.what();
  }
  io::write_file_atomically(manager.tracker_path(), std::string_view("twelve"));
  EXPECT_THROW((void)manager.latest_step(), InvalidArgument);
  fs::remove(manager.tracker_path());
  fs::create_directories(manager.tracker_path());  // a tracker that is a folder is not "no checkpoint"
  EXPECT_THROW((void)manager.resume_folder(ResumeMode::automatic), InvalidArgument);
}

TEST(Checkpoint, RetentionKeepsTheNewestPerRole) {
  TempDir dir;
  CheckpointManager manager(dir.path, {{"actor", 2}, {"critic", 1}});
  ToyRun run;
  for (int s = 0; s < 4; ++s) {
    run.train_step();
    CheckpointSnapshot snapshot = run.snapshot();
    RoleSnapshot critic;
    critic.model = {{"v", {2}, run.b}};
    snapshot.roles.emplace("critic", std::move(critic));
    manager.save(snapshot);
  }
  const auto kept = manager.checkpoints();
  ASSERT_EQ(kept.size(), 2u);  // steps 1 and 2 lost both roles and were removed
  EXPECT_EQ(kept[0].first, 3);
  EXPECT_TRUE(fs::is_directory(kept[0].second / "actor"));
  EXPECT_FALSE(fs::is_directory(kept[0].second / "critic"));
  EXPECT_TRUE(fs::is_directory(kept[1].second / "critic"));
  const LoadedCheckpoint older = CheckpointManager::load(kept[0].second);
  EXPECT_EQ(older.roles.count("critic"), 0u);
  EXPECT_EQ(older.roles.count("actor"), 1u);
}

TEST(Checkpoint, ResavingAStepReplacesItAtomically) {
  TempDir dir;
  CheckpointManager manager(dir.path);
  ToyRun run;
  run.train_step();
  manager.save(run.snapshot());
  run.w[0] = 42.0f;
  manager.save(run.snapshot());
  const auto loaded = CheckpointManager::load(dir.path / "global_step_1");
  EXPECT_EQ(loaded.role("actor").tensor("w").values[0], 42.0f);
  // A staging folder left by a crash is not a checkpoint, and the next save clears it; the old
  // copy of a replaced checkpoint goes too, unless it is the only copy left.
  const std::string gone = "2147483646";  // no such process
  fs::create_directories(dir.path / (".global_step_2.tmp." + gone) / "actor");
  fs::create_directories(dir.path / (".global_step_1.old." + gone) / "actor");
  fs::create_directories(dir.path / (".global_step_5.old." + gone) / "actor");
  EXPECT_EQ(manager.checkpoints().size(), 1u);
  run.train_step();
  manager.save(run.snapshot());
  EXPECT_FALSE(fs::exists(dir.path / (".global_step_2.tmp." + gone)));
  EXPECT_FALSE(fs::exists(dir.path / (".global_step_1.old." + gone)));
  EXPECT_TRUE(fs::exists(dir.path / (".global_step_5.old." + gone)));
  EXPECT_EQ(manager.checkpoints().size(), 2u);
}

TEST(Checkpoint, BadCheckpointsAreClearErrors) {
  TempDir dir;
  EXPECT_THROW((void)CheckpointManager::load(dir.path / "global_step_3"), InvalidArgument);
  fs::create_directories(dir.path / "global_step_3");
  try {
    (void)CheckpointManager::load(dir.path / "global_step_3");
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("no trainer_state.json (not a complete verl-cpp checkpoint)"), std::string::npos);
  }
  std::ofstream(dir.path / "global_step_3" / "trainer_state.json") << "{not json";
  EXPECT_THROW((void)CheckpointManager::load(dir.path / "global_step_3"), InvalidArgument);
  std::ofstream(dir.path / "global_step_3" / "trainer_state.json")
      << R"({"global_step": 4, "rng": {}, "extra": {}, "roles": []})";
  EXPECT_THROW((void)CheckpointManager::load(dir.path / "global_step_3"), InvalidArgument);  // step mismatch

  NamedTensor tensor{"w", {2, 3}, std::vector<float>(6)};
  std::vector<float> out(6);
  EXPECT_THROW(tensor.copy_to(out, std::vector<std::int64_t>{3, 2}), InvalidArgument);
  std::mt19937_64 engine;
  EXPECT_THROW(restore_rng("1 2 3", engine), InvalidArgument);
}

TEST(Checkpoint, RngStateRoundTrip) {
  std::mt19937_64 engine(7);
  for (int i = 0; i < 1000; ++i) engine();
  const std::string saved = serialize_rng(engine);
  std::mt19937_64 restored;
  restore_rng(saved, restored);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(engine(), restored());
}
