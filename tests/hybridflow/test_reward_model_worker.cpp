// RewardModelWorker on real MPI ranks (run under mpirun -np 1, 2 and 4): init_model loads the
// reward model on every rank of the group (ONE_TO_ALL), compute_rm_score splits the batch over the
// ranks (DP_COMPUTE_PROTO, padded as verl pads when the rows do not divide) and the collected
// rm_scores are the single in-process model's, placed on each row's last response token, and
// transformers' scores at verl's position (tests/data/models/tiny-*-rm: verl_scores) within 1e-4. The worker's errors (no model
// path, a token id beyond the reward model's vocabulary, a call before init_model) name the key,
// checked on a worker built in the controller's process.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "verl/data/data_proto.hpp"
#include "verl/hybridflow/runtime.hpp"
#include "verl/model/checkpoint.hpp"
#include "verl/model/transformer/reward_model.hpp"
#include "verl/trainer/workers/model_sources.hpp"
#include "verl/trainer/workers/reward_model_worker.hpp"

namespace {

using namespace verl;
using data::DataProto;
namespace fs = std::filesystem;
namespace keys = trainer::keys;

using Worker = trainer::RewardModelWorker<trainer::HfRewardModelSource>;
using TestRuntime = hybridflow::Runtime<Worker>;
TestRuntime* runtime = nullptr;

const fs::path models_dir = fs::path(VERL_GOLDEN_DIR) / ".." / "models";
constexpr Index response_width = 6;  // the golden batches' last attended tokens lie in columns 6-10

nlohmann::json read_json(const fs::path& file) {
  std::ifstream in(file);
  return nlohmann::json::parse(in);
}

template <class T>
RowMatrix<T> matrix_of(const nlohmann::json& rows) {
  RowMatrix<T> m(static_cast<Index>(rows.size()), static_cast<Index>(rows[0].size()));
  for (Index r = 0; r < m.rows(); ++r)
    for (Index c = 0; c < m.cols(); ++c) m(r, c) = rows[static_cast<std::size_t>(r)][static_cast<std::size_t>(c)].get<T>();
  return m;
}

/// The fixture's two golden batches one after the other (10 rows), as the controller's batch:
/// the sequences and a response mask over their last `response_width` columns.
struct Golden {
  DataProto batch;
  std::vector<Index> scored_column;  ///< per row, the column verl reads the score at
  /// per row, transformers' head output at that column (transformers' own score where its pooling
  /// picks the same token: every row but those ending in eos when the pad id is the eos id)
  std::vector<float> transformers;
};

Golden golden_batch(const std::string& model) {
  const auto golden = read_json(models_dir / model / "golden.json");
  std::vector<DataProto> parts;
  Golden out;
  for (const char* name : {"verl_layout", "ends_in_eos"}) {
    const auto& b = golden["batches"][name];
    DataProto part;
    const MatrixF mask = matrix_of<std::int64_t>(b["attention_mask"]).cast<float>();
    part.set(std::string(keys::input_ids), matrix_of<std::int64_t>(b["input_ids"]));
    part.set(std::string(keys::attention_mask), mask);
    part.set(std::string(keys::position_ids), matrix_of<std::int64_t>(b["position_ids"]));
    part.set(std::string(keys::response_mask), MatrixF(mask.rightCols(response_width)));
    parts.push_back(std::move(part));
    for (std::size_t r = 0; r < b["verl_index"].size(); ++r) {
      out.scored_column.push_back(b["verl_index"][r].get<Index>());
      out.transformers.push_back(b["verl_scores"][r].get<float>());
    }
  }
  out.batch = DataProto::concat(parts);
  // Rows that do not divide over the ranks are padded (verl's DataProto auto-padding).
  out.batch.meta_info()["_verl_auto_padding"] = true;
  return out;
}

std::vector<std::string> overrides_for(const std::string& model) {
  return {"reward.reward_model.model_path=" + (models_dir / model).string()};
}

class RewardModelWorkerParity : public ::testing::TestWithParam<std::string> {};

TEST_P(RewardModelWorkerParity, ScoresOverTheRanksAreTheSingleModelsAndTransformers) {
  const Golden golden = golden_batch(GetParam());
  auto group = runtime->spawn<Worker>(runtime->whole_world());
  group.call<&Worker::init_model>(overrides_for(GetParam())).get();
  const DataProto scored = group.call<&Worker::compute_rm_score>(golden.batch).get();
  const MatrixF& rm_scores = scored.tensor<float>(keys::rm_scores);
  ASSERT_EQ(rm_scores.rows(), golden.batch.size());
  ASSERT_EQ(rm_scores.cols(), response_width);

  // The single model in this process, on the whole batch.
  model::TransformerRewardModel single = model::load_reward_model(models_dir / GetParam());
  const model::TokenBatch tokens = trainer::token_batch(golden.batch, 0, golden.batch.size());
  const MatrixF expected = model::response_token_scores(tokens, single.forward(tokens), response_width);

  const Index first_response_column = trainer::int_column(golden.batch, keys::input_ids).cols() - response_width;
  for (Index r = 0; r < rm_scores.rows(); ++r) {
    const auto row = static_cast<std::size_t>(r);
    for (Index c = 0; c < response_width; ++c) {
      EXPECT_NEAR(rm_scores(r, c), expected(r, c), 1e-6f) << "row " << r << " column " << c;
      if (c == golden.scored_column[row] - first_response_column) {
        EXPECT_NEAR(rm_scores(r, c), golden.transformers[row], 1e-4f) << "row " << r;
      } else {
        EXPECT_EQ(rm_scores(r, c), 0.0f) << "row " << r << " column " << c << ": only the last response token scores";
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(TinyRewardModels, RewardModelWorkerParity,
                         ::testing::Values("tiny-llama-rm", "tiny-qwen2-rm", "tiny-qwen3-rm", "tiny-mistral-rm"));

TEST(RewardModelWorker, TwoScoringGroupsOnTheSameRanksKeepTheirOwnModels) {
  const Golden golden = golden_batch("tiny-qwen2-rm");
  auto reward = runtime->spawn<Worker>(runtime->whole_world());
  auto cost = runtime->spawn<Worker>(runtime->whole_world());
  auto reward_ready = reward.call<&Worker::init_model>(overrides_for("tiny-qwen2-rm"));
  auto cost_ready = cost.call<&Worker::init_model>(overrides_for("tiny-qwen3-rm"));
  reward_ready.get();
  cost_ready.get();
  auto reward_scores = reward.call<&Worker::compute_rm_score>(golden.batch);
  auto cost_scores = cost.call<&Worker::compute_rm_score>(golden.batch);
  const MatrixF r = reward_scores.get().tensor<float>(keys::rm_scores);
  const MatrixF c = cost_scores.get().tensor<float>(keys::rm_scores);
  model::TransformerRewardModel qwen3 = model::load_reward_model(models_dir / "tiny-qwen3-rm");
  const model::TokenBatch tokens = trainer::token_batch(golden.batch, 0, golden.batch.size());
  const MatrixF expected = model::response_token_scores(tokens, qwen3.forward(tokens), response_width);
  EXPECT_LE((c - expected).cwiseAbs().maxCoeff(), 1e-6f);
  EXPECT_GT((r - c).cwiseAbs().maxCoeff(), 1e-3f) << "the two groups scored with the same model";
}

// ---- errors, on a worker in this process -----------------------------------------------------

template <class Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "no error";
}

TEST(RewardModelWorkerErrors, NameTheKeyAndWhatWasExpected) {
  hybridflow::WorkerContext context;
  Worker worker(context);
  EXPECT_NE(error_of([&] { (void)worker.compute_rm_score(golden_batch("tiny-qwen2-rm").batch); })
                .find("RewardModelWorker: init_model must be called before any other method"),
            std::string::npos);
  EXPECT_NE(error_of([&] { worker.init_model({}); })
                .find("reward.reward_model.model_path: expected the folder of a sequence-classification reward model, "
                      "got null"),
            std::string::npos);
  EXPECT_NE(error_of([&] { worker.init_model({"reward.reward_model.model_path=/nonexistent/rm"}); })
                .find("reward.reward_model.model_path: expected a Hugging Face *ForSequenceClassification folder, got "
                      "'/nonexistent/rm' (does not exist)"),
            std::string::npos);

  worker.init_model(overrides_for("tiny-qwen2-rm"));
  DataProto batch = golden_batch("tiny-qwen2-rm").batch;
  MatrixI64 ids = batch.tensor<std::int64_t>(keys::input_ids);
  ids(3, 9) = 1400;  // a policy's id (tiny-qwen2 has 1408) beyond the reward model's 96
  batch.set(std::string(keys::input_ids), ids);
  EXPECT_NE(error_of([&] { (void)worker.compute_rm_score(batch); })
                .find("reward.reward_model.model_path: the reward model has 96 token ids (vocab_size), but row 3 holds "
                      "id 1400 at column 9; it must share the policy's tokenizer"),
            std::string::npos);

  // A row whose response is empty has no response token to carry its score.
  DataProto narrow = golden_batch("tiny-qwen2-rm").batch;
  narrow.set(std::string(keys::response_mask), MatrixF(narrow.tensor<float>(keys::response_mask).rightCols(2)));
  EXPECT_NE(error_of([&] { (void)worker.compute_rm_score(narrow); }).find("before its response"), std::string::npos);
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  return hybridflow::run_controller<Worker>(argc, argv, [](TestRuntime& r) {
    runtime = &r;
    return RUN_ALL_TESTS();
  });
}
