// KV-cache rollout on the reference transformer: Hugging Face's greedy continuations, left
// padding and batching that change nothing, n samples, stop tokens, rollout log-probs equal to a
// full forward's, the cache's memory, and errors.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "verl/model/checkpoint.hpp"
#include "verl/model/transformer/transformer.hpp"
#include "verl/rollout/rollout.hpp"

namespace {

using verl::Index;
using verl::MatrixF;
using verl::MatrixI64;
using namespace verl::rollout;
using verl::model::Transformer;
namespace fs = std::filesystem;

const fs::path models_dir = fs::path(VERL_GOLDEN_DIR) / ".." / "models";

static_assert(RolloutEngine<KvCacheRollout<Transformer>>);
static_assert(IncrementalDecoder<Transformer>);

nlohmann::json read_golden(const std::string& model) {
  std::ifstream file(models_dir / model / "golden.json");
  return nlohmann::json::parse(file);
}

/// The valid tokens of each golden prompt row.
std::vector<std::vector<TokenId>> golden_prompts(const nlohmann::json& golden) {
  std::vector<std::vector<TokenId>> prompts;
  for (std::size_t b = 0; b < golden["input_ids"].size(); ++b) {
    prompts.emplace_back();
    for (std::size_t t = 0; t < golden["input_ids"][b].size(); ++t) {
      if (golden["attention_mask"][b][t].get<int>() == 1) prompts.back().push_back(golden["input_ids"][b][t].get<TokenId>());
    }
  }
  return prompts;
}

class GreedyParity : public ::testing::TestWithParam<std::string> {};

TEST_P(GreedyParity, MatchesTransformersGenerate) {
  const auto golden = read_golden(GetParam());
  Transformer model = verl::model::load_transformer(models_dir / GetParam());
  KvCacheRollout engine(model);
  const auto prompts = golden_prompts(golden);
  const auto out = engine.generate(PromptBatch::left_padded(prompts, 0),
                                   {.temperature = 0.0f, .max_response_length = 8, .pad_token_id = 0});
  for (std::size_t b = 0; b < prompts.size(); ++b) {
    for (std::size_t t = 0; t < 8; ++t) {
      EXPECT_EQ(out.responses(static_cast<Index>(b), static_cast<Index>(t)), golden["greedy_new_tokens"][b][t].get<TokenId>())
          << "prompt " << b << " token " << t;
    }
  }
  const std::vector<std::vector<TokenId>> chat = {golden["chat_prompt_ids"].get<std::vector<TokenId>>()};
  const auto chat_out = engine.generate(PromptBatch::left_padded(chat, 0), {.temperature = 0.0f, .max_response_length = 8});
  for (std::size_t t = 0; t < 8; ++t) {
    EXPECT_EQ(chat_out.responses(0, static_cast<Index>(t)), golden["chat_greedy_new_tokens"][t].get<TokenId>());
  }
}

INSTANTIATE_TEST_SUITE_P(TinyModels, GreedyParity, ::testing::Values("tiny-qwen2", "tiny-llama", "tiny-qwen3", "tiny-qwen2-sliding", "tiny-mistral",
                                                                 "tiny-llama2"));

class RolloutTest : public ::testing::Test {
 protected:
  Transformer model = verl::model::load_transformer(models_dir / "tiny-qwen2");
  std::vector<std::vector<TokenId>> prompts = {{5, 17, 300}, {42}, {7, 8, 9, 10, 11, 12, 13}, {1000, 2}};
  std::vector<std::uint64_t> seeds = {11, 22, 33, 44};
};

TEST_F(RolloutTest, LeftPaddedBatchSamplesExactlyAsEachPromptAlone) {
  KvCacheRollout engine(model);
  const SamplingParams params{.temperature = 0.9f, .top_k = 50, .top_p = 0.95f, .n = 2, .max_response_length = 12};
  PromptBatch batch = PromptBatch::left_padded(prompts, 0);
  batch.seeds = seeds;
  const auto together = engine.generate(batch, params);
  for (std::size_t b = 0; b < prompts.size(); ++b) {
    PromptBatch alone = PromptBatch::left_padded(std::span(prompts).subspan(b, 1), 0);
    alone.seeds = {seeds[b]};
    const auto single = engine.generate(alone, params);
    for (Index j = 0; j < 2; ++j) {
      const Index row = static_cast<Index>(b) * 2 + j;
      EXPECT_EQ(single.responses.row(j), together.responses.row(row)) << "prompt " << b << " sample " << j;
      EXPECT_EQ(single.response_mask.row(j), together.response_mask.row(row));
      EXPECT_LT((single.rollout_log_probs.row(j) - together.rollout_log_probs.row(row)).cwiseAbs().maxCoeff(), 1e-5);
    }
  }
  // The two samples of a prompt differ, and the same seed reproduces the batch.
  EXPECT_NE(together.responses.row(0), together.responses.row(1));
  EXPECT_EQ(engine.generate(batch, params).responses, together.responses);
  batch.seeds = {1, 2, 3, 4};
  EXPECT_NE(engine.generate(batch, params).responses, together.responses);
}

TEST_F(RolloutTest, RolloutLogProbsEqualTheActorsRecomputation) {
  KvCacheRollout engine(model);
  const float temperature = 0.8f;
  const auto out = engine.generate(PromptBatch::left_padded(prompts, 0),
                                   {.temperature = temperature, .n = 3, .max_response_length = 10, .seed = 5});
  // verl's actor: a forward over prompts ++ responses, log-probs of each response token.
  const auto batch = verl::model::TokenBatch::padded(out.input_ids, out.attention_mask, out.position_ids);
  const MatrixI64 targets = verl::model::next_token_targets(batch);
  const auto forward = model.forward(
      batch, {.targets = {targets.data(), static_cast<std::size_t>(targets.size())}, .temperature = temperature});
  const Index width = out.prompts.cols();
  for (Index r = 0; r < out.responses.rows(); ++r) {
    for (Index t = 0; t < out.responses.cols(); ++t) {
      if (out.response_mask(r, t) == 0) continue;
      EXPECT_NEAR(out.rollout_log_probs(r, t), forward.log_probs(r, width + t - 1), 2e-5) << r << ", " << t;
    }
  }
}

TEST_F(RolloutTest, StopsAfterAStopTokenAndPadsTheRest) {
  KvCacheRollout engine(model);
  const auto greedy = engine.generate(PromptBatch::left_padded(prompts, 0), {.temperature = 0.0f, .max_response_length = 8});
  // Make prompt 0's fourth greedy token a stop token.
  const TokenId stop = greedy.responses(0, 3);
  SamplingParams params{.temperature = 0.0f, .max_response_length = 8, .stop_token_ids = {stop}, .pad_token_id = 1399};
  const auto out = engine.generate(PromptBatch::left_padded(prompts, 0), params);
  Index first_stop = 0;
  while (greedy.responses(0, first_stop) != stop) ++first_stop;
  EXPECT_EQ(out.response_lengths[0], first_stop + 1);
  EXPECT_EQ(out.finish_reasons[0], FinishReason::stop);
  for (Index t = 0; t < 8; ++t) {
    const bool inside = t <= first_stop;
    EXPECT_EQ(out.response_mask(0, t), inside ? 1.0f : 0.0f);
    EXPECT_EQ(out.responses(0, t), inside ? greedy.responses(0, t) : 1399);
    if (!inside) {
      EXPECT_EQ(out.rollout_log_probs(0, t), 0.0f);
    }
  }
  // The joined tensors follow verl's layout.
  const Index width = out.prompts.cols();
  EXPECT_EQ(out.input_ids.cols(), width + 8);
  EXPECT_EQ(out.attention_mask.rightCols(8), out.response_mask);
  EXPECT_EQ(out.position_ids(0, width - 1), 2);  // prompt 0 has 3 tokens
  EXPECT_EQ(out.position_ids(0, width), 3);
  EXPECT_EQ(out.position_ids(0, width + 7), 10);
}

TEST_F(RolloutTest, KvCacheHoldsWhatTheShapesRequire) {
  KvCacheRollout engine(model);
  const auto out = engine.generate(PromptBatch::left_padded(prompts, 0), {.n = 3, .max_response_length = 6});
  const auto& c = model.config();
  std::size_t tokens = 0;
  for (const auto& p : prompts) tokens += 3 * (p.size() + 6 - 1);
  EXPECT_EQ(out.kv_cache_bytes, tokens * static_cast<std::size_t>(c.num_hidden_layers * 2 * c.num_key_value_heads * c.head_dim) *
                                    sizeof(float));
}

TEST(KvCache, KeysAreStoredTransposedAndCopiedBetweenSequencesOfOtherCapacities) {
  // Keys are held as (width, capacity) per sequence so that decoding reads each head's keys as
  // rows of consecutive tokens; writes in two chunks and a copy into a longer sequence must keep
  // every key where keys_transposed says it is, and the values as rows.
  const Index width = 6;
  const std::vector<Index> capacities = {5, 9};
  verl::model::KvCache<float> cache(2, width, capacities);
  auto key = [](Index layer, Index t, Index j) { return static_cast<float>(100 * layer + 10 * t + j); };
  auto value = [](Index layer, Index t, Index j) { return -static_cast<float>(100 * layer + 10 * t + j) - 0.5f; };
  for (const auto& [first, count] : {std::pair<Index, Index>{0, 3}, std::pair<Index, Index>{3, 2}}) {
    for (Index layer = 0; layer < 2; ++layer) {
      std::vector<float> k, v;
      for (Index t = first; t < first + count; ++t) {
        for (Index j = 0; j < width; ++j) {
          k.push_back(key(layer, t, j));
          v.push_back(value(layer, t, j));
        }
      }
      cache.write(layer, 0, k.data(), v.data(), count);
    }
    cache.advance(0, count);
  }
  cache.copy_sequence(0, 1);
  ASSERT_EQ(cache.length(1), 5);
  for (const Index s : {0, 1}) {
    for (Index layer = 0; layer < 2; ++layer) {
      for (Index t = 0; t < 5; ++t) {
        for (Index j = 0; j < width; ++j) {
          EXPECT_EQ(cache.keys_transposed(layer, s)[j * capacities[static_cast<std::size_t>(s)] + t], key(layer, t, j))
              << "sequence " << s << " layer " << layer << " token " << t << " key " << j;
          EXPECT_EQ(cache.values(layer, s)[t * width + j], value(layer, t, j));
        }
      }
    }
  }
  const std::vector<float> one(static_cast<std::size_t>(width), 1.0f);
  EXPECT_THROW(cache.write(0, 0, one.data(), one.data(), 1), verl::InvalidArgument);  // sequence 0 is full
}

TEST_F(RolloutTest, BadInputIsNamed) {
  KvCacheRollout engine(model);
  auto message = [&](const PromptBatch& batch, const SamplingParams& params) {
    try {
      engine.generate(batch, params);
    } catch (const verl::InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::vector<std::vector<TokenId>> out_of_range = {{1, 5000}};
  EXPECT_NE(message(PromptBatch::left_padded(out_of_range, 0), {}).find("expected token ids in [0, 1408)"),
            std::string::npos);
  const std::vector<std::vector<TokenId>> long_prompt = {std::vector<TokenId>(60, 3)};
  const auto too_long = message(PromptBatch::left_padded(long_prompt, 0), {.max_response_length = 8});
  EXPECT_NE(too_long.find("prompt 0 has 60 tokens"), std::string::npos) << too_long;
  EXPECT_NE(too_long.find("context length 64"), std::string::npos) << too_long;
  PromptBatch empty = PromptBatch::left_padded(prompts, 0);
  empty.attention_mask.row(1).setZero();
  EXPECT_NE(message(empty, {}).find("prompt 1 has no tokens"), std::string::npos);
  PromptBatch seeded = PromptBatch::left_padded(prompts, 0);
  seeded.seeds = {1};
  EXPECT_NE(message(seeded, {}).find("seeds: expected 4"), std::string::npos);
  EXPECT_NE(message(PromptBatch::left_padded(prompts, 0), {.top_p = 1.5f}).find("top_p"), std::string::npos);
}

}  // namespace
