// The tensor-parallel transformer on one rank (SelfCommunicator) is the dense model, bit for bit:
// outputs, gradients and weights; and the partition refuses sizes that do not divide the model,
// naming them. (The multi-rank checks are tests/mpi/test_tensor_parallel_transformer.cpp.)
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <array>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "../support/error_message.hpp"
#include "verl/model/transformer/tensor_parallel_transformer.hpp"
#include "verl/parallel/self_communicator.hpp"

namespace {

using namespace verl;
using namespace verl::model;
using verl::parallel::SelfCommunicator;
using verl::test_support::message_of;

HfModelConfig config_of(nlohmann::json extra) {
  nlohmann::json json = {{"model_type", "qwen3"},  {"hidden_size", 16},       {"intermediate_size", 24},
                         {"num_hidden_layers", 2}, {"num_attention_heads", 4}, {"num_key_value_heads", 2},
                         {"head_dim", 4},          {"vocab_size", 37},         {"rms_norm_eps", 1e-5},
                         {"max_position_embeddings", 64}};
  for (auto& [key, value] : extra.items()) json[key] = value;
  return HfModelConfig::from_json(json, "test config");
}

template <class Model>
void randomize(Model& model, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  model.for_each_parameter([&](const auto& p) {
    const bool norm = p.name.ends_with("norm.weight");
    for (auto& v : p.value) v = static_cast<std::remove_cvref_t<decltype(v)>>(norm ? 1.0 + 0.2 * normal(rng) : 0.5 * normal(rng));
  });
}

TokenBatch padded_batch(Index vocab) {
  MatrixI64 ids(2, 6);
  MatrixF mask(2, 6);
  std::mt19937 rng(3);
  for (Index i = 0; i < ids.size(); ++i) ids.data()[i] = static_cast<std::int64_t>(rng() % static_cast<unsigned>(vocab));
  mask << 0, 1, 1, 1, 1, 0,  //
      1, 1, 1, 1, 1, 1;
  return TokenBatch::padded(ids, mask);
}

template <class Scalar>
void expect_one_rank_equals_dense(const HfModelConfig& config) {
  BasicTransformer<Scalar> dense(config, {.num_threads = 1});
  randomize(dense, 11);
  BasicTensorParallelTransformer<Scalar, SelfCommunicator> tp(dense, SelfCommunicator{});
  const TokenBatch batch = padded_batch(config.vocab_size);
  const MatrixI64 targets = next_token_targets(batch);
  const ForwardOptions options{.targets = {targets.data(), static_cast<std::size_t>(targets.size())},
                               .return_entropy = true,
                               .return_sum_pi_squared = true,
                               .temperature = 0.7f,
                               .keep_activations = true};
  const auto expected = dense.forward(batch, options);
  const auto actual = tp.forward(batch, options);
  EXPECT_EQ(actual.log_probs, expected.log_probs);
  EXPECT_EQ(actual.entropy, expected.entropy);
  EXPECT_EQ(actual.sum_pi_squared, expected.sum_pi_squared);

  std::vector<Scalar> g_lp(static_cast<std::size_t>(batch.layout_size())), g_h(g_lp.size());
  std::mt19937 rng(5);
  std::normal_distribution<double> normal;
  for (std::size_t i = 0; i < g_lp.size(); ++i) {
    g_lp[i] = static_cast<Scalar>(normal(rng));
    g_h[i] = static_cast<Scalar>(normal(rng));
  }
  dense.backward({.log_probs = g_lp, .entropy = g_h});
  tp.backward({.log_probs = g_lp, .entropy = g_h});
  std::map<std::string, std::vector<Scalar>> dense_grads;
  dense.for_each_parameter([&](const auto& p) { dense_grads[std::string(p.name)].assign(p.grad.begin(), p.grad.end()); });
  std::size_t visited = 0;
  tp.for_each_parameter([&](const auto& p) {
    ++visited;
    EXPECT_EQ(std::vector<Scalar>(p.grad.begin(), p.grad.end()), dense_grads.at(std::string(p.name))) << p.name;
  });
  EXPECT_EQ(visited, dense_grads.size());
  EXPECT_EQ(tp.full_state_dict(), dense.state_dict());
  EXPECT_EQ(tp.state_dict(), dense.state_dict());
  EXPECT_EQ(tp.gather_dense().state_dict(), dense.state_dict());
}

TEST(TensorParallelTransformer, OneRankIsTheDenseModelBitForBit) {
  static_assert(CausalLM<TensorParallelTransformer<SelfCommunicator>>);
  static_assert(CausalLM<BasicTensorParallelTransformer<double, SelfCommunicator>>);
  const HfModelConfig qwen3 = config_of({{"attention_bias", true}, {"tie_word_embeddings", true}});
  const HfModelConfig llama = config_of({{"model_type", "llama"}, {"attention_bias", true}, {"mlp_bias", true}});
  expect_one_rank_equals_dense<float>(qwen3);
  expect_one_rank_equals_dense<double>(qwen3);
  expect_one_rank_equals_dense<float>(llama);
}

TEST(TensorParallelPartition, SplitsHeadsKvHeadsMlpAndVocabulary) {
  const HfModelConfig config = config_of({{"num_attention_heads", 8}, {"num_key_value_heads", 2}});
  const auto p = TensorParallelPartition::of(config, 4, 3);
  EXPECT_EQ(p.heads, 2);
  EXPECT_EQ(p.kv_heads, 1);
  EXPECT_EQ(p.kv_replicas, 2);
  EXPECT_EQ(p.first_kv_head(3), 1);
  EXPECT_EQ(p.intermediate, 6);
  // 37 tokens over 4 ranks: 9, 9, 9, 10 rows.
  EXPECT_EQ(p.vocab_begin(3), 27);
  EXPECT_EQ(p.vocab_rows(3), 10);
  const auto k = p.shard("model.layers.0.self_attn.k_proj.weight", 3);
  EXPECT_EQ(k.dim, 0);
  EXPECT_EQ(k.offset, 4);
  EXPECT_EQ(k.length, 4);
  EXPECT_EQ(k.full, 8);
  const auto o = p.shard("model.layers.1.self_attn.o_proj.weight", 1);
  EXPECT_EQ(o.dim, 1);
  EXPECT_EQ(o.offset, 8);
  EXPECT_TRUE(p.shard("model.layers.1.self_attn.o_proj.bias", 1).replicated());
  EXPECT_TRUE(p.shard("model.norm.weight", 1).replicated());
  EXPECT_EQ(p.shard("model.layers.0.mlp.down_proj.weight", 2).dim, 1);
  EXPECT_EQ(p.shard("model.layers.0.mlp.up_proj.bias", 2).offset, 12);
}

TEST(TensorParallelPartition, RefusesSizesThatDoNotDivideTheModelNamingThem) {
  const HfModelConfig config = config_of({{"num_attention_heads", 6}, {"num_key_value_heads", 3}, {"head_dim", 4}});
  EXPECT_NE(message_of([&] { (void)TensorParallelPartition::of(config, 4, 0); }).find("num_attention_heads = 6"),
            std::string::npos);
  const std::string kv = message_of([&] { (void)TensorParallelPartition::of(config, 2, 0); });
  EXPECT_NE(kv.find("num_key_value_heads = 3"), std::string::npos) << kv;
  EXPECT_NE(kv.find("got 2"), std::string::npos) << kv;
  const HfModelConfig mlp = config_of({{"intermediate_size", 26}});
  EXPECT_NE(message_of([&] { (void)TensorParallelPartition::of(mlp, 4, 0); }).find("intermediate_size = 26"),
            std::string::npos);
}

// The 3D-HybridEngine turns gathered column blocks (blocks, rows, width) into rows of side-by-side
// pieces (rows, blocks, width) in place, and back: checked against the index arithmetic.
TEST(TensorParallelReshard, TransposesBlocksOfItemsInPlace) {
  for (const auto [a, b, item] : {std::array<Index, 3>{2, 5, 3}, {3, 4, 1}, {4, 7, 2}, {1, 6, 4}, {5, 1, 2}}) {
    std::vector<float> data(static_cast<std::size_t>(a * b * item));
    for (std::size_t k = 0; k < data.size(); ++k) data[k] = static_cast<float>(k);
    std::vector<float> expected(data.size());
    for (Index i = 0; i < a; ++i)
      for (Index j = 0; j < b; ++j)
        for (Index e = 0; e < item; ++e)
          expected[static_cast<std::size_t>((j * a + i) * item + e)] = data[static_cast<std::size_t>((i * b + j) * item + e)];
    std::vector<float> moved = data;
    model::detail::transpose_items_in_place(moved.data(), a, b, item);
    EXPECT_EQ(moved, expected) << a << " x " << b << " items of " << item;
    model::detail::transpose_items_in_place(moved.data(), b, a, item);
    EXPECT_EQ(moved, data) << "and back";
  }
}

// A meter of parameter buffers: the peak is the most held at once.
TEST(TensorParallelReshard, TheMeterKeepsThePeak) {
  ParameterMemoryMeter meter;
  meter.start(100);
  meter.resized(10, 40);
  meter.resized(40, 0);
  meter.resized(0, 5);
  EXPECT_EQ(meter.current(), 95);
  EXPECT_EQ(meter.peak(), 130);
}

}  // namespace
