// The reference reward model against transformers' *ForSequenceClassification on the tiny models
// of tests/data/models/tiny-*-rm (made by tools/scripts/make_reward_model_golden.py): scores at
// verl's position within 1e-4 in float32 for Llama, Qwen2, Qwen3 and Mistral, the pad id == eos id
// case where transformers' pooling and verl's differ, packed == padded, and the errors of folders
// that are not one-label sequence classifiers.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "verl/model/checkpoint.hpp"
#include "verl/model/reward_model.hpp"
#include "verl/model/safetensors.hpp"
#include "verl/model/transformer/reward_model.hpp"

namespace {

using verl::Index;
using verl::MatrixF;
using verl::MatrixI64;
using namespace verl::model;
namespace fs = std::filesystem;

const fs::path models_dir = fs::path(VERL_GOLDEN_DIR) / ".." / "models";

nlohmann::json read_json(const fs::path& file) {
  std::ifstream in(file);
  return nlohmann::json::parse(in);
}

template <class T>
verl::RowMatrix<T> matrix_of(const nlohmann::json& rows) {
  verl::RowMatrix<T> m(static_cast<Index>(rows.size()), static_cast<Index>(rows[0].size()));
  for (Index r = 0; r < m.rows(); ++r) {
    for (Index c = 0; c < m.cols(); ++c) m(r, c) = rows[static_cast<std::size_t>(r)][static_cast<std::size_t>(c)].get<T>();
  }
  return m;
}

TokenBatch batch_of(const nlohmann::json& golden) {
  return TokenBatch::padded(matrix_of<std::int64_t>(golden["input_ids"]),
                            matrix_of<std::int64_t>(golden["attention_mask"]).cast<float>(),
                            matrix_of<std::int64_t>(golden["position_ids"]));
}

template <class Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const verl::InvalidArgument& e) {
    return e.what();
  }
  return "no error";
}

// ---- parity ------------------------------------------------------------------------------------

class RewardModelParity : public ::testing::TestWithParam<std::string> {};

TEST_P(RewardModelParity, ScoresAtVerlsPositionMatchTransformersWithinOneE4) {
  const auto golden = read_json(models_dir / GetParam() / "golden.json");
  TransformerRewardModel model = load_reward_model(models_dir / GetParam());
  for (const char* name : {"verl_layout", "ends_in_eos"}) {
    SCOPED_TRACE(name);
    const auto& expected = golden["batches"][name];
    const TokenBatch batch = batch_of(expected);
    const auto out = model.forward(batch, {.return_token_scores = true});
    ASSERT_EQ(out.scores.size(), batch.rows());
    float worst = 0;
    for (Index r = 0; r < batch.rows(); ++r) {
      const auto row = static_cast<std::size_t>(r);
      // The column verl's worker reads (argmax(position_ids * attention_mask)) is the one scored.
      EXPECT_EQ(out.slots[row], r * batch.cols() + expected["verl_index"][row].get<Index>()) << "row " << r;
      worst = std::max(worst, std::abs(out.scores[r] - expected["verl_scores"][row].get<float>()));
      for (Index c = 0; c < batch.cols(); ++c) {
        const auto& reference = expected["token_scores"][row][static_cast<std::size_t>(c)];
        if (reference.is_null()) {
          EXPECT_EQ(out.token_scores(r, c), 0.0f) << "padding (" << r << ", " << c << ")";
        } else {
          worst = std::max(worst, std::abs(out.token_scores(r, c) - reference.get<float>()));
        }
      }
    }
    EXPECT_LE(worst, 1e-4f);
  }
  // On verl's layout the pooled output of transformers' own forward is the same score.
  const auto& layout = golden["batches"]["verl_layout"];
  const auto scores = model.forward(batch_of(layout)).scores;
  for (Index r = 0; r < scores.size(); ++r) {
    EXPECT_NEAR(scores[r], layout["transformers_scores"][static_cast<std::size_t>(r)].get<float>(), 1e-4f) << r;
  }
}

TEST_P(RewardModelParity, ResponsesEndingInEosAreScoredAtTheEosAsVerlDoes) {
  const auto golden = read_json(models_dir / GetParam() / "golden.json");
  TransformerRewardModel model = load_reward_model(models_dir / GetParam());
  const auto& expected = golden["batches"]["ends_in_eos"];
  const TokenBatch batch = batch_of(expected);
  const MatrixI64 ids = matrix_of<std::int64_t>(expected["input_ids"]);
  const MatrixF mask = matrix_of<std::int64_t>(expected["attention_mask"]).cast<float>();
  const auto out = model.forward(batch);
  const bool pad_is_eos = golden["pad_is_eos"].get<bool>();
  EXPECT_EQ(pad_is_eos, golden["pad_token_id"] == golden["eos_token_id"]);
  EXPECT_EQ(pad_is_eos, model.config().pad_token_id == model.config().eos_token_ids.front());
  for (Index r = 0; r < batch.rows(); ++r) {
    SCOPED_TRACE(::testing::Message() << "row " << r);
    const auto row = static_cast<std::size_t>(r);
    const Index column = out.slots[row] - r * batch.cols();
    // The scored token is the row's last attended one, and it is the eos.
    EXPECT_EQ(mask(r, column), 1.0f);
    for (Index c = column + 1; c < batch.cols(); ++c) EXPECT_EQ(mask(r, c), 0.0f);
    EXPECT_EQ(ids(r, column), golden["eos_token_id"].get<std::int64_t>());
    const Index transformers_column = expected["transformers_index"][row].get<Index>();
    const float transformers_score = expected["transformers_scores"][row].get<float>();
    if (pad_is_eos) {
      // transformers skips the eos as if it were padding and pools the token before it.
      EXPECT_EQ(transformers_column, column - 1);
      EXPECT_GT(std::abs(out.scores[r] - transformers_score), 1e-2f);
      EXPECT_NEAR(transformers_score, expected["token_scores"][row][static_cast<std::size_t>(column - 1)].get<float>(),
                  1e-6f);
    } else {
      EXPECT_EQ(transformers_column, column);
      EXPECT_NEAR(out.scores[r], transformers_score, 1e-4f);
    }
  }
}

TEST_P(RewardModelParity, PackedSequencesScoreAsTheirPaddedRows) {
  const auto golden = read_json(models_dir / GetParam() / "golden.json");
  TransformerRewardModel model = load_reward_model(models_dir / GetParam());
  const TokenBatch padded = batch_of(golden["batches"]["verl_layout"]);
  const TokenBatch packed = TokenBatch::packed(padded.tokens(), padded.cu_seqlens(), padded.positions());
  const auto from_padded = model.forward(padded);
  const auto from_packed = model.forward(packed);
  ASSERT_EQ(from_packed.scores.size(), from_padded.scores.size());
  EXPECT_LE((from_packed.scores - from_padded.scores).cwiseAbs().maxCoeff(), 1e-6f);
  for (Index s = 0; s < packed.num_sequences(); ++s) {
    EXPECT_EQ(from_packed.slots[static_cast<std::size_t>(s)], packed.cu_seqlens()[static_cast<std::size_t>(s) + 1] - 1);
  }
  // A sequence's score does not depend on the others in its batch.
  for (Index s = 0; s < packed.num_sequences(); ++s) {
    const auto begin = packed.cu_seqlens()[static_cast<std::size_t>(s)];
    const auto end = packed.cu_seqlens()[static_cast<std::size_t>(s) + 1];
    const std::vector<std::int64_t> alone_cu = {0, end - begin};
    const TokenBatch alone = TokenBatch::packed(packed.tokens().subspan(begin, end - begin), alone_cu,
                                                packed.positions().subspan(begin, end - begin));
    EXPECT_NEAR(model.forward(alone).scores[0], from_padded.scores[s], 1e-5f) << "sequence " << s;
  }
}

TEST_P(RewardModelParity, DoublePrecisionModelAgreesWithFloat) {
  const auto golden = read_json(models_dir / GetParam() / "golden.json");
  TransformerRewardModel model = load_reward_model(models_dir / GetParam());
  BasicTransformerRewardModel<double> reference = load_reward_model<double>(models_dir / GetParam());
  const TokenBatch batch = batch_of(golden["batches"]["verl_layout"]);
  const auto scores = model.forward(batch).scores.cast<double>().eval();
  const auto exact = reference.forward(batch).scores;
  EXPECT_LE((scores - exact).cwiseAbs().maxCoeff(), 1e-5);
  for (Index r = 0; r < exact.size(); ++r) {
    EXPECT_NEAR(exact[r], golden["batches"]["verl_layout"]["transformers_scores"][static_cast<std::size_t>(r)].get<double>(),
                1e-4);
  }
}

INSTANTIATE_TEST_SUITE_P(TinyRewardModels, RewardModelParity,
                         ::testing::Values("tiny-llama-rm", "tiny-qwen2-rm", "tiny-qwen3-rm", "tiny-mistral-rm"));

// ---- the scored position -----------------------------------------------------------------------

TEST(RewardModelPosition, LastAttendedTokenOfEachRowAndOfEachPackedSequence) {
  // Row 1 holds one attended token away from column 0: verl's argmax(position_ids * mask) would
  // read column 0 there (all products are 0); the last attended token is column 3.
  MatrixI64 ids(3, 5);
  ids << 9, 9, 4, 5, 6,  //
      9, 9, 9, 7, 9,     //
      1, 2, 3, 9, 9;
  MatrixF mask(3, 5);
  mask << 0, 0, 1, 1, 1,  //
      0, 0, 0, 1, 0,      //
      1, 1, 1, 0, 0;
  EXPECT_EQ(last_token_slots(TokenBatch::padded(ids, mask)), (std::vector<std::int64_t>{4, 8, 12}));

  const std::vector<TokenId> tokens = {4, 5, 6, 7, 1, 2};
  const std::vector<std::int64_t> cu = {0, 3, 4, 6};
  EXPECT_EQ(last_token_slots(TokenBatch::packed(tokens, cu)), (std::vector<std::int64_t>{2, 3, 5}));

  mask(1, 3) = 0;
  const auto error = error_of([&] { (void)last_token_slots(TokenBatch::padded(ids, mask)); });
  EXPECT_NE(error.find("sequence 1 has no attended token"), std::string::npos) << error;
  const std::vector<std::int64_t> with_empty = {0, 3, 3, 6};
  const auto packed_error = error_of([&] { (void)last_token_slots(TokenBatch::packed(tokens, with_empty)); });
  EXPECT_NE(packed_error.find("sequence 1 has no attended token"), std::string::npos) << packed_error;
}

TEST(RewardModelPosition, AnEmptyRowIsRefusedBeforeTheForwardPass) {
  TransformerRewardModel model = load_reward_model(models_dir / "tiny-qwen2-rm");
  MatrixI64 ids = MatrixI64::Constant(2, 3, 5);
  MatrixF mask(2, 3);
  mask << 1, 1, 1, 0, 0, 0;
  const auto error = error_of([&] { (void)model.forward(TokenBatch::padded(ids, mask)); });
  EXPECT_NE(error.find("sequence 1 has no attended token"), std::string::npos) << error;
}

TEST(RewardModelPosition, ScoreIsTheHeadAppliedToTheLastHiddenState) {
  // A fresh model: the score at each sequence's last token equals the token score there, and a
  // token score is the score of the prefix ending at that token (causal attention).
  HfModelConfig config = HfModelConfig::from_file(models_dir / "tiny-qwen3-rm");
  auto model = BasicTransformerRewardModel<double>::random(config, {.initializer_range = 0.3, .seed = 7});
  EXPECT_EQ(model.config().architectures, std::vector<std::string>{"Qwen3ForSequenceClassification"});
  const std::vector<TokenId> tokens = {3, 14, 15, 92, 65, 35};
  const std::vector<std::int64_t> cu = {0, 6};
  const auto full = model.forward(TokenBatch::packed(tokens, cu), {.return_token_scores = true});
  EXPECT_NEAR(full.scores[0], full.token_scores(0, 5), 1e-12);
  for (std::int64_t length = 1; length < 6; ++length) {
    const std::vector<std::int64_t> prefix_cu = {0, length};
    const auto prefix = model.forward(TokenBatch::packed(std::span(tokens).first(static_cast<std::size_t>(length)), prefix_cu));
    EXPECT_NEAR(prefix.scores[0], full.token_scores(0, length - 1), 1e-12) << length;
  }
  EXPECT_GT(full.token_scores.cwiseAbs().minCoeff(), 0.0);
}

TEST(RewardModelPosition, ResponseTokenScoresCarryEachScoreOnItsLastResponseToken) {
  TransformerRewardModel model = load_reward_model(models_dir / "tiny-qwen2-rm");
  const auto golden = read_json(models_dir / "tiny-qwen2-rm" / "golden.json");
  const TokenBatch batch = batch_of(golden["batches"]["verl_layout"]);
  const auto out = model.forward(batch);
  const Index response_length = 5;  // the script's RESPONSE_WIDTH
  const verl::MatrixF placed = response_token_scores(batch, out, response_length);
  const MatrixF mask = matrix_of<std::int64_t>(golden["batches"]["verl_layout"]["attention_mask"]).cast<float>();
  ASSERT_EQ(placed.rows(), batch.rows());
  ASSERT_EQ(placed.cols(), response_length);
  for (Index r = 0; r < batch.rows(); ++r) {
    // verl's placement: the last valid response token, valid_response_length - 1.
    const Index valid = static_cast<Index>(mask.row(r).tail(response_length).sum());
    for (Index c = 0; c < response_length; ++c) EXPECT_EQ(placed(r, c), c == valid - 1 ? out.scores[r] : 0.0f);
  }
  // An empty response has no token to carry a score.
  MatrixI64 ids = MatrixI64::Constant(2, 4, 5);
  MatrixF empty_response(2, 4);
  empty_response << 1, 1, 1, 0,  //
      0, 1, 1, 1;
  const TokenBatch short_batch = TokenBatch::padded(ids, empty_response);
  const auto error = error_of([&] { (void)response_token_scores(short_batch, model.forward(short_batch), 1); });
  EXPECT_NE(error.find("row 0 was scored at column 2, before its response (columns 3 to 3)"), std::string::npos) << error;
}

// ---- loading and saving ------------------------------------------------------------------------

class RewardModelFolder : public ::testing::Test {
 protected:
  void SetUp() override {
    folder_ = fs::temp_directory_path() /
              ("verl_reward_model_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(folder_);
    fs::create_directories(folder_);
  }
  void TearDown() override { fs::remove_all(folder_); }

  /// The tiny Llama reward model with its config.json edited by `edit_config` and its tensors
  /// passed through `edit_tensor` (which writes what it wants kept).
  template <class EditConfig, class EditTensor>
  void write_edited(EditConfig&& edit_config, EditTensor&& edit_tensor) {
    nlohmann::json config = read_json(models_dir / "tiny-llama-rm" / "config.json");
    edit_config(config);
    std::ofstream(folder_ / "config.json") << config.dump(2);
    const SafetensorsFile original(models_dir / "tiny-llama-rm" / "model.safetensors");
    SafetensorsWriter writer;
    for (const auto& name : original.names()) edit_tensor(writer, name, original.tensor(name));
    writer.write(folder_ / "model.safetensors");
  }
  static void keep_config(nlohmann::json&) {}
  static void keep_tensor(SafetensorsWriter& w, const std::string& name, const TensorView& t) {
    w.add(name, t.dtype, {t.shape.begin(), t.shape.end()}, t.data);
  }
  std::string load_error() {
    return error_of([&] { (void)load_reward_model(folder_); });
  }

  fs::path folder_;
};

TEST_F(RewardModelFolder, UneditedCopyLoads) {
  write_edited(keep_config, keep_tensor);
  EXPECT_EQ(load_reward_model(folder_).state_dict(), load_reward_model(models_dir / "tiny-llama-rm").state_dict());
}

TEST_F(RewardModelFolder, MissingOrMisshapenScoreHeadIsNamed) {
  write_edited(keep_config, [](SafetensorsWriter& w, const std::string& name, const TensorView& t) {
    if (name != "score.weight") keep_tensor(w, name, t);
  });
  auto error = load_error();
  EXPECT_NE(error.find("missing tensor 'score.weight' (expected shape [1, 32])"), std::string::npos) << error;

  write_edited(keep_config, [](SafetensorsWriter& w, const std::string& name, const TensorView& t) {
    if (name != "score.weight") return keep_tensor(w, name, t);
    std::vector<std::byte> two_rows(t.data.begin(), t.data.end());
    two_rows.insert(two_rows.end(), t.data.begin(), t.data.end());
    w.add(name, t.dtype, {2, 32}, two_rows);
  });
  error = load_error();
  EXPECT_NE(error.find("'score.weight'"), std::string::npos) << error;
  EXPECT_NE(error.find("expected shape [1, 32], got [2, 32]"), std::string::npos) << error;

  // A token-classification head (verl's critic layout) carries a bias this model has no place for.
  write_edited(keep_config, [](SafetensorsWriter& w, const std::string& name, const TensorView& t) {
    keep_tensor(w, name, t);
    if (name == "score.weight") {
      const std::vector<float> bias = {0.5f};
      w.add_f32("score.bias", {1}, bias);
    }
  });
  error = load_error();
  EXPECT_NE(error.find("unexpected tensor 'score.bias'"), std::string::npos) << error;

  write_edited(keep_config, [](SafetensorsWriter& w, const std::string& name, const TensorView& t) {
    if (name != "model.layers.1.self_attn.v_proj.weight") keep_tensor(w, name, t);
  });
  error = load_error();
  EXPECT_NE(error.find("missing tensor 'model.layers.1.self_attn.v_proj.weight'"), std::string::npos) << error;
}

TEST_F(RewardModelFolder, MoreThanOneLabelIsRefusedByKey) {
  write_edited([](nlohmann::json& c) { c["id2label"] = {{"0", "LABEL_0"}, {"1", "LABEL_1"}}; }, keep_tensor);
  auto error = load_error();
  EXPECT_NE(error.find("key 'id2label': expected one label"), std::string::npos) << error;
  EXPECT_NE(error.find("got 2"), std::string::npos) << error;

  write_edited([](nlohmann::json& c) { c["num_labels"] = 2; }, keep_tensor);
  error = load_error();
  EXPECT_NE(error.find("key 'num_labels': expected 1"), std::string::npos) << error;
  EXPECT_NE(error.find("got 2"), std::string::npos) << error;

  // Neither key: verl forces num_labels = 1, and the head's shape decides.
  write_edited(
      [](nlohmann::json& c) {
        c.erase("id2label");
        c.erase("label2id");
      },
      keep_tensor);
  EXPECT_NO_THROW((void)load_reward_model(folder_));
}

TEST_F(RewardModelFolder, ArchitecturesMustBeASupportedSequenceClassifier) {
  for (const auto& [architectures, model_type] :
       std::vector<std::pair<nlohmann::json, std::string>>{{{"GPT2ForSequenceClassification"}, "gpt2"},
                                                           {{"LlamaForCausalLM"}, "llama"},
                                                           {{"LlamaForTokenClassification"}, "llama"},
                                                           {nlohmann::json::array(), "llama"}}) {
    write_edited(
        [&](nlohmann::json& c) {
          c["architectures"] = architectures;
          c["model_type"] = model_type;
        },
        keep_tensor);
    const auto error = load_error();
    EXPECT_NE(error.find("key 'architectures': expected one of [LlamaForSequenceClassification, "
                         "Qwen2ForSequenceClassification, Qwen3ForSequenceClassification, "
                         "MistralForSequenceClassification]"),
              std::string::npos)
        << error;
    EXPECT_NE(error.find(fmt::format("got [{}]", fmt::join(architectures.get<std::vector<std::string>>(), ", "))),
              std::string::npos)
        << error;
  }
  write_edited([](nlohmann::json& c) { c["architectures"] = {"Qwen2ForSequenceClassification"}; }, keep_tensor);
  const auto error = load_error();
  EXPECT_NE(error.find("expected [LlamaForSequenceClassification] for model_type 'llama', got "
                       "[Qwen2ForSequenceClassification]"),
            std::string::npos)
      << error;
  // A policy checkpoint is not a reward model.
  EXPECT_NE(error_of([] { (void)load_reward_model(models_dir / "tiny-llama"); }).find("got [LlamaForCausalLM]"),
            std::string::npos);
  EXPECT_NE(error_of([&] { (void)load_reward_model(folder_ / "nowhere"); }).find("does not exist"), std::string::npos);
}

TEST_F(RewardModelFolder, SaveAndLoadRoundTrip) {
  TransformerRewardModel model = load_reward_model(models_dir / "tiny-qwen3-rm");
  save_reward_model(model, folder_);
  const auto config = read_json(folder_ / "config.json");
  EXPECT_EQ(config["architectures"], nlohmann::json::array({"Qwen3ForSequenceClassification"}));
  EXPECT_EQ(config["id2label"].size(), 1u);
  EXPECT_EQ(config["label2id"]["LABEL_0"], 0);
  TransformerRewardModel loaded = load_reward_model(folder_);
  EXPECT_EQ(loaded.state_dict(), model.state_dict());
  EXPECT_EQ(loaded.config().pad_token_id, model.config().pad_token_id);
  // The tiny models' weights are bf16-representable: a bf16 round trip is exact.
  save_reward_model(model, folder_, {.dtype = DType::BF16});
  EXPECT_EQ(load_reward_model(folder_).state_dict(), model.state_dict());
  EXPECT_EQ(SafetensorsFile(folder_ / "model.safetensors").tensor("score.weight").dtype, DType::BF16);
}

}  // namespace
