// Parity with Hugging Face transformers on the tiny models of tests/data/models (made by
// tools/scripts/make_model_golden.py): logits on a left-padded batch within 1e-4, and the
// gradients of a log-prob + entropy loss (per-parameter summaries). Also checkpoint save/load
// round trips and the errors of checkpoints that do not match their config.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "verl/model/checkpoint.hpp"
#include "verl/model/safetensors.hpp"

namespace {

using verl::Index;
using verl::MatrixF;
using verl::MatrixI64;
using namespace verl::model;
namespace fs = std::filesystem;

const fs::path models_dir = fs::path(VERL_GOLDEN_DIR) / ".." / "models";

nlohmann::json read_golden(const std::string& model) {
  std::ifstream file(models_dir / model / "golden.json");
  return nlohmann::json::parse(file);
}

template <class T>
verl::RowMatrix<T> matrix_of(const nlohmann::json& rows) {
  verl::RowMatrix<T> m(static_cast<Index>(rows.size()), static_cast<Index>(rows[0].size()));
  for (Index r = 0; r < m.rows(); ++r) {
    for (Index c = 0; c < m.cols(); ++c) m(r, c) = rows[static_cast<std::size_t>(r)][static_cast<std::size_t>(c)].get<T>();
  }
  return m;
}

TokenBatch golden_batch(const nlohmann::json& golden) {
  const MatrixI64 ids = matrix_of<std::int64_t>(golden["input_ids"]);
  const MatrixF mask = matrix_of<std::int64_t>(golden["attention_mask"]).cast<float>();
  const MatrixI64 positions = matrix_of<std::int64_t>(golden["position_ids"]);
  return TokenBatch::padded(ids, mask, positions);
}

class HfParity : public ::testing::TestWithParam<std::string> {};

TEST_P(HfParity, LogitsMatchTransformersWithinOneE4) {
  const auto golden = read_golden(GetParam());
  Transformer model = load_transformer(models_dir / GetParam());
  const TokenBatch batch = golden_batch(golden);
  const auto out = model.forward(batch, {.return_logits = true});
  const SafetensorsFile reference_file(models_dir / GetParam() / "golden_logits.safetensors");
  const MatrixF reference = reference_file.tensor("logits").to_matrix_f32();
  ASSERT_EQ(reference.rows(), batch.num_tokens());
  ASSERT_EQ(reference.cols(), model.vocab_size());
  float worst = 0;
  for (Index t = 0; t < batch.num_tokens(); ++t) {
    const auto slot = batch.slots()[static_cast<std::size_t>(t)];
    worst = std::max(worst, (out.logits.row(slot) - reference.row(t)).cwiseAbs().maxCoeff());
  }
  EXPECT_LE(worst, 1e-4f);
  // The same through the packed layout.
  const auto packed = TokenBatch::packed(batch.tokens(), batch.cu_seqlens(), batch.positions());
  const auto packed_out = model.forward(packed, {.return_logits = true});
  EXPECT_LE((packed_out.logits - reference).cwiseAbs().maxCoeff(), 1e-4f);
}

TEST_P(HfParity, GradientsMatchTransformersAutograd) {
  const auto golden = read_golden(GetParam());
  const auto& grads = golden["gradients"];
  Transformer model = load_transformer(models_dir / GetParam());
  const TokenBatch batch = golden_batch(golden);
  // transformers' targets: input_ids rolled left by one in each row.
  const MatrixI64 ids = matrix_of<std::int64_t>(golden["input_ids"]);
  MatrixI64 targets(ids.rows(), ids.cols());
  for (Index r = 0; r < ids.rows(); ++r) {
    for (Index c = 0; c < ids.cols(); ++c) targets(r, c) = ids(r, (c + 1) % ids.cols());
  }
  const MatrixF logprob_weights = matrix_of<double>(grads["logprob_weights"]).cast<float>();
  const MatrixF entropy_weights = matrix_of<double>(grads["entropy_weights"]).cast<float>();
  model.zero_grad();
  const auto out = model.forward(batch, {.targets = {targets.data(), static_cast<std::size_t>(targets.size())},
                                         .return_entropy = true,
                                         .temperature = grads["temperature"].get<float>(),
                                         .keep_activations = true});
  const double loss = (logprob_weights.cast<double>().array() * out.log_probs.cast<double>().array()).sum() +
                      (entropy_weights.cast<double>().array() * out.entropy.cast<double>().array()).sum();
  EXPECT_NEAR(loss, grads["loss"].get<double>(), 1e-4 * std::max(1.0, std::abs(loss)));
  model.backward({.log_probs = {logprob_weights.data(), static_cast<std::size_t>(logprob_weights.size())},
                  .entropy = {entropy_weights.data(), static_cast<std::size_t>(entropy_weights.size())}});
  int compared = 0;
  model.for_each_parameter([&](const auto& p) {
    const auto& expected = grads["parameters"][std::string(p.name)];
    double norm = 0, dot = 0;
    for (std::size_t i = 0; i < p.grad.size(); ++i) {
      norm += static_cast<double>(p.grad[i]) * p.grad[i];
      dot += static_cast<double>(p.grad[i]) * p.value[i];
    }
    norm = std::sqrt(norm);
    const double expected_norm = expected["norm"].get<double>();
    EXPECT_NEAR(norm, expected_norm, 1e-3 * expected_norm + 1e-6) << p.name;
    EXPECT_NEAR(dot, expected["dot_weight"].get<double>(), 1e-3 * expected_norm * std::sqrt(static_cast<double>(p.value.size())))
        << p.name;
    ++compared;
  });
  EXPECT_EQ(compared, static_cast<int>(grads["parameters"].size()));
}

INSTANTIATE_TEST_SUITE_P(TinyModels, HfParity, ::testing::Values("tiny-qwen2", "tiny-llama", "tiny-qwen3", "tiny-qwen2-sliding", "tiny-mistral",
                                                          "tiny-llama2"));

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    folder_ = fs::temp_directory_path() /
              ("verl_model_checkpoint_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(folder_);
  }
  void TearDown() override { fs::remove_all(folder_); }

  /// Copies the tiny Llama and rewrites its weights with `edit` applied to the tensor list.
  template <class Edit>
  void write_edited_llama(Edit&& edit) {
    fs::create_directories(folder_);
    fs::copy_file(models_dir / "tiny-llama" / "config.json", folder_ / "config.json",
                  fs::copy_options::overwrite_existing);
    const SafetensorsFile original(models_dir / "tiny-llama" / "model.safetensors");
    SafetensorsWriter writer;
    for (const auto& name : original.names()) {
      const TensorView t = original.tensor(name);
      edit(writer, name, t);
    }
    writer.write(folder_ / "model.safetensors");
  }

  template <class Fn>
  static std::string error_of(Fn&& fn) {
    try {
      fn();
    } catch (const verl::InvalidArgument& e) {
      return e.what();
    }
    return "no error";
  }

  fs::path folder_;
};

TEST_F(CheckpointTest, SaveAndLoadRoundTripsSingleAndSharded) {
  Transformer model = load_transformer(models_dir / "tiny-qwen2");
  for (const std::uint64_t shard : {std::uint64_t{1} << 40, std::uint64_t{20000}}) {
    save_transformer(model, folder_, {.max_shard_bytes = shard});
    EXPECT_EQ(fs::exists(folder_ / "model.safetensors.index.json"), shard < 100000);
    Transformer loaded = load_transformer(folder_);
    EXPECT_EQ(loaded.config(), [&] {
      auto c = model.config();
      c.torch_dtype = "float32";
      return c;
    }());
    EXPECT_EQ(loaded.state_dict(), model.state_dict());
  }
  // bf16 weights (the tiny models' are bf16-representable) survive a bf16 round trip exactly.
  save_transformer(model, folder_, {.dtype = DType::BF16});
  EXPECT_EQ(load_transformer(folder_).state_dict(), model.state_dict());
  EXPECT_EQ(SafetensorsFile(folder_ / "model.safetensors").tensor("model.norm.weight").dtype, DType::BF16);
}

TEST_F(CheckpointTest, CriticLoadsAPolicyCheckpointBodyAndItsOwnCheckpoint) {
  TransformerCritic critic = load_critic(models_dir / "tiny-llama", {.initializer_range = 0.02, .seed = 3});
  Transformer policy = load_transformer(models_dir / "tiny-llama");
  const auto critic_dict = critic.state_dict();
  for (const auto& [name, tensor] : policy.state_dict()) {
    if (name == "lm_head.weight") continue;
    EXPECT_EQ(critic_dict.at(name), tensor) << name;
  }
  EXPECT_EQ(critic_dict.at("score.weight").shape, (std::vector<std::int64_t>{1, 32}));
  save_critic(critic, folder_);
  EXPECT_EQ(load_critic(folder_).state_dict(), critic_dict);
  // A critic checkpoint is not a policy checkpoint.
  EXPECT_NE(error_of([&] { load_transformer(folder_); }).find("missing tensor 'lm_head.weight'"), std::string::npos);
}

TEST_F(CheckpointTest, MismatchedTensorsAreNamed) {
  write_edited_llama([](SafetensorsWriter& w, const std::string& name, const TensorView& t) {
    if (name == "model.layers.1.mlp.up_proj.weight") return;  // missing
    w.add(name, t.dtype, {t.shape.begin(), t.shape.end()}, t.data);
  });
  EXPECT_NE(error_of([&] { load_transformer(folder_); }).find("missing tensor 'model.layers.1.mlp.up_proj.weight'"),
            std::string::npos);

  write_edited_llama([](SafetensorsWriter& w, const std::string& name, const TensorView& t) {
    std::vector<std::int64_t> shape(t.shape.begin(), t.shape.end());
    if (name == "model.layers.0.self_attn.k_proj.weight") std::swap(shape[0], shape[1]);
    w.add(name, t.dtype, shape, t.data);
  });
  const auto shape_error = error_of([&] { load_transformer(folder_); });
  EXPECT_NE(shape_error.find("'model.layers.0.self_attn.k_proj.weight'"), std::string::npos) << shape_error;
  EXPECT_NE(shape_error.find("expected shape [16, 32], got [32, 16]"), std::string::npos) << shape_error;

  write_edited_llama([](SafetensorsWriter& w, const std::string& name, const TensorView& t) {
    if (name == "model.norm.weight") {
      const std::vector<std::int64_t> values(32, 1);
      w.add_i64(name, {32}, values);
      return;
    }
    w.add(name, t.dtype, {t.shape.begin(), t.shape.end()}, t.data);
  });
  const auto dtype_error = error_of([&] { load_transformer(folder_); });
  EXPECT_NE(dtype_error.find("tensor 'model.norm.weight'"), std::string::npos) << dtype_error;
  EXPECT_NE(dtype_error.find("expected a floating dtype"), std::string::npos) << dtype_error;

  write_edited_llama([](SafetensorsWriter& w, const std::string& name, const TensorView& t) {
    w.add(name, t.dtype, {t.shape.begin(), t.shape.end()}, t.data);
    if (name == "model.norm.weight") w.add("model.layers.2.input_layernorm.weight", t.dtype, {32}, t.data);
  });
  EXPECT_NE(error_of([&] { load_transformer(folder_); }).find("unexpected tensor 'model.layers.2.input_layernorm.weight'"),
            std::string::npos);

  // Old checkpoints' rotary buffers are not parameters and are skipped.
  write_edited_llama([](SafetensorsWriter& w, const std::string& name, const TensorView& t) {
    w.add(name, t.dtype, {t.shape.begin(), t.shape.end()}, t.data);
    if (name == "model.norm.weight") {
      const std::vector<float> inv_freq(8, 1.0f);
      w.add_f32("model.layers.0.self_attn.rotary_emb.inv_freq", {8}, inv_freq);
    }
  });
  EXPECT_NO_THROW(load_transformer(folder_));
}

TEST_F(CheckpointTest, UnreadableFoldersAndCorruptFilesAreErrors) {
  EXPECT_NE(error_of([&] { load_transformer(folder_ / "nowhere"); }).find("does not exist"), std::string::npos);
  fs::create_directories(folder_);
  fs::copy_file(models_dir / "tiny-llama" / "config.json", folder_ / "config.json");
  EXPECT_NE(error_of([&] { load_transformer(folder_); }).find("model.safetensors"), std::string::npos);
  // Truncated weights.
  std::ifstream in(models_dir / "tiny-llama" / "model.safetensors", std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::ofstream(folder_ / "model.safetensors", std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size() / 2));
  EXPECT_NE(error_of([&] { load_transformer(folder_); }).find("model.safetensors"), std::string::npos);
}

}  // namespace
