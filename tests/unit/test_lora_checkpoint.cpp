// LoRA adapters on disk: PEFT's layout (tensor names, adapter_config.json), the round trip through
// load_lora_adapter, the merged model as a Hugging Face folder, refused PEFT options, and PEFT's
// own adapter and logits (tests/data/lora, written by tools/scripts/make_lora_golden.py).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "verl/core/file_io.hpp"
#include "verl/model/checkpoint.hpp"
#include "verl/model/lora_checkpoint.hpp"
#include "../support/error_message.hpp"

#ifndef VERL_GOLDEN_DIR
#error "VERL_GOLDEN_DIR must name tests/data/golden"
#endif

namespace {

namespace fs = std::filesystem;
using verl::Index;
using verl::MatrixF;
using verl::MatrixI64;
using namespace verl::model;

const fs::path data_dir = fs::path(VERL_GOLDEN_DIR) / "..";
const fs::path tiny_llama = data_dir / "models" / "tiny-llama";

fs::path scratch_folder(const std::string& name) {
  const fs::path folder = fs::temp_directory_path() / ("verl_lora_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(folder);
  return folder;
}

void randomize_adapters(LoraTransformer& model, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  model.for_each_parameter([&](const auto& p) {
    for (auto& v : p.value) v = static_cast<float>(0.1 * normal(rng));
  });
}

MatrixF logits_of(auto& model, const std::vector<std::vector<TokenId>>& sequences) {
  std::vector<TokenId> ids;
  std::vector<std::int64_t> cu = {0};
  for (const auto& s : sequences) {
    ids.insert(ids.end(), s.begin(), s.end());
    cu.push_back(static_cast<std::int64_t>(ids.size()));
  }
  return model.forward(TokenBatch::packed(ids, cu), {.return_logits = true}).logits;
}

const std::vector<std::vector<TokenId>> sequences = {{5, 17, 230, 1400, 9, 88, 3, 41}, {1401, 2, 2, 640, 77, 12, 300, 7}};

TEST(LoraCheckpoint, AdapterFolderHasPeftsLayout) {
  LoraTransformer model(load_transformer(tiny_llama), {.rank = 4, .alpha = 8, .exclude_modules = {"model.layers.1.mlp.down_proj"}});
  randomize_adapters(model, 1);
  const fs::path folder = scratch_folder("layout");
  save_lora_adapter(model, folder, tiny_llama.string());
  const SafetensorsFile file(folder / "adapter_model.safetensors");
  EXPECT_EQ(file.size(), 2u * (2 * 7 - 1));
  EXPECT_TRUE(file.contains("base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"));
  EXPECT_TRUE(file.contains("base_model.model.model.layers.1.mlp.up_proj.lora_B.weight"));
  EXPECT_FALSE(file.contains("base_model.model.model.layers.1.mlp.down_proj.lora_A.weight"));
  const TensorView a = file.tensor("base_model.model.model.layers.0.self_attn.k_proj.lora_A.weight");
  const TensorView b = file.tensor("base_model.model.model.layers.0.self_attn.k_proj.lora_B.weight");
  EXPECT_EQ(std::vector<std::int64_t>(a.shape.begin(), a.shape.end()), (std::vector<std::int64_t>{4, 32}));
  EXPECT_EQ(std::vector<std::int64_t>(b.shape.begin(), b.shape.end()), (std::vector<std::int64_t>{16, 4}));
  const auto config = nlohmann::json::parse(verl::io::read_text_file(folder / "adapter_config.json"));
  EXPECT_EQ(config["peft_type"], "LORA");
  EXPECT_EQ(config["task_type"], "CAUSAL_LM");
  EXPECT_EQ(config["r"], 4);
  EXPECT_EQ(config["lora_alpha"], 8.0);
  EXPECT_EQ(config["base_model_name_or_path"], tiny_llama.string());
  EXPECT_EQ(config["target_modules"],
            nlohmann::json({"down_proj", "gate_proj", "k_proj", "o_proj", "q_proj", "up_proj", "v_proj"}));
  EXPECT_EQ(config["exclude_modules"], nlohmann::json({"model.layers.1.mlp.down_proj"}));
  fs::remove_all(folder);
}

TEST(LoraCheckpoint, AdapterAndMergedFoldersRoundTrip) {
  LoraTransformer model(load_transformer(tiny_llama), {.rank = 3, .alpha = 6, .target_modules = {"q_proj", "v_proj", "down_proj"}});
  randomize_adapters(model, 2);
  const MatrixF adapted = logits_of(model, sequences);
  const fs::path folder = scratch_folder("roundtrip");
  save_lora_adapter(model, folder / "adapter", "base");
  save_lora_merged(model, folder / "merged");
  auto reloaded = load_lora_adapter(load_transformer(tiny_llama), folder / "adapter");
  EXPECT_EQ(reloaded.state_dict(), model.state_dict());
  EXPECT_EQ(reloaded.options().rank, 3);
  EXPECT_EQ(reloaded.options().alpha, 6.0);
  EXPECT_EQ(logits_of(reloaded, sequences), adapted);
  auto merged = load_transformer(folder / "merged");
  EXPECT_LT((logits_of(merged, sequences) - adapted).cwiseAbs().maxCoeff(), 1e-4f);
  fs::remove_all(folder);
}

TEST(LoraCheckpoint, UnsupportedPeftOptionsAreRefusedByName) {
  using verl::test_support::message_of;
  const nlohmann::json good = {{"peft_type", "LORA"}, {"r", 4}, {"lora_alpha", 8}, {"target_modules", {"q_proj"}}};
  EXPECT_EQ(lora_options_from_adapter_config(good, "a.json").rank, 4);
  auto with = [&](const char* key, nlohmann::json value) {
    nlohmann::json c = good;
    c[key] = std::move(value);
    return message_of([&] { lora_options_from_adapter_config(c, "a.json"); });
  };
  EXPECT_NE(with("use_dora", true).find("a.json: field 'use_dora': expected false"), std::string::npos);
  EXPECT_NE(with("bias", "all").find("field 'bias'"), std::string::npos);
  EXPECT_NE(with("r", 0).find("field 'r': expected an integer > 0, got 0"), std::string::npos);
  EXPECT_NE(with("rank_pattern", {{"q_proj", 8}}).find("field 'rank_pattern'"), std::string::npos);
  EXPECT_NE(with("peft_type", "IA3").find("field 'peft_type'"), std::string::npos);
  EXPECT_NE(with("modules_to_save", {"lm_head"}).find("field 'modules_to_save'"), std::string::npos);
}

/// PEFT's adapter, loaded onto the same base: the logits PEFT computed, within float tolerance;
/// saved again, the same tensors under the same names.
TEST(LoraCheckpoint, PeftsOwnAdapterGivesPeftsLogits) {
  const fs::path adapter = data_dir / "lora" / "tiny-llama-adapter";
  const fs::path expected_path = data_dir / "lora" / "tiny-llama-logits.json";
  if (!fs::exists(expected_path)) {
    GTEST_SKIP() << "no PEFT golden data: run tools/scripts/make_lora_golden.py where torch, transformers and peft "
                    "are installed";
  }
  const auto expected = nlohmann::json::parse(verl::io::read_text_file(expected_path));
  std::vector<std::vector<TokenId>> ids = expected["input_ids"].get<std::vector<std::vector<TokenId>>>();
  auto model = load_lora_adapter(load_transformer(tiny_llama), adapter);
  const MatrixF logits = logits_of(model, ids);
  auto reference = model.with_adapter_disabled();
  const MatrixF base_logits = logits_of(reference, ids);
  float worst = 0, worst_base = 0;
  Index row = 0;
  for (std::size_t s = 0; s < ids.size(); ++s) {
    for (std::size_t t = 0; t < ids[s].size(); ++t, ++row) {
      for (Index v = 0; v < logits.cols(); ++v) {
        worst = std::max(worst, std::abs(logits(row, v) - expected["logits"][s][t][v].get<float>()));
        worst_base = std::max(worst_base, std::abs(base_logits(row, v) - expected["disabled_logits"][s][t][v].get<float>()));
      }
    }
  }
  EXPECT_LT(worst, 1e-4f);
  EXPECT_LT(worst_base, 1e-4f);
  const fs::path folder = scratch_folder("peft");
  save_lora_adapter(model, folder, tiny_llama.string());
  const SafetensorsFile theirs(adapter / "adapter_model.safetensors"), ours(folder / "adapter_model.safetensors");
  EXPECT_EQ(ours.names(), theirs.names());
  for (const auto& name : theirs.names()) EXPECT_EQ(ours.tensor(name).to_f32(), theirs.tensor(name).to_f32()) << name;
  fs::remove_all(folder);
}

}  // namespace
