// The tensor-parallel transformer on real ranks against the dense model: for every TP size the
// world allows (1, 2, 4), log-probs, entropy and sum of squared probabilities equal the dense
// model's, and every parameter's gradient (gathered from the shards) and the gradient norm equal
// the dense ones for the same cotangents, in float and double; MHA, GQA with KV heads split and with KV heads
// copied (fewer KV heads than ranks), tied and untied heads, Qwen3's q/k norms, a sliding window,
// an uneven vocabulary split, the tiny fixture models; and sizes that do not divide the model are
// refused with the sizes named. Megatron's sequence parallelism (set_sequence_parallel) at tp 2
// and 4 gives the same outputs, gathered gradients and gradient norm as tensor parallelism alone,
// for token counts that are multiples of tp and not (fewer tokens than ranks too), every bias
// (row-parallel ones included), GQA, copied KV heads, q/k norms and a sliding window.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include <fmt/format.h>

#include "../support/error_message.hpp"
#include "verl/model/checkpoint.hpp"
#include "verl/model/transformer/tensor_parallel_transformer.hpp"
#include "verl/parallel/mpi_communicator.hpp"

using namespace verl;
using namespace verl::model;
using verl::parallel::MpiCommunicator;
using verl::test_support::message_of;

namespace {

const std::filesystem::path models_dir = std::filesystem::path(VERL_GOLDEN_DIR) / ".." / "models";

/// The TP sizes this world can form (groups of consecutive ranks).
std::vector<int> tp_sizes() {
  const int world = MpiCommunicator::world().size();
  std::vector<int> sizes;
  for (int tp : {1, 2, 4}) {
    if (tp <= world && world % tp == 0) sizes.push_back(tp);
  }
  return sizes;
}

MpiCommunicator tp_group(int tp) {
  MpiCommunicator world = MpiCommunicator::world();
  return world.split(world.rank() / tp, world.rank() % tp);
}

HfModelConfig config_of(nlohmann::json extra) {
  nlohmann::json json = {{"model_type", "llama"},  {"hidden_size", 16},       {"intermediate_size", 24},
                         {"num_hidden_layers", 2}, {"num_attention_heads", 4}, {"num_key_value_heads", 4},
                         {"head_dim", 4},          {"vocab_size", 37},         {"rms_norm_eps", 1e-5},
                         {"max_position_embeddings", 64}};
  for (auto& [key, value] : extra.items()) json[key] = value;
  return HfModelConfig::from_json(json, "test config");
}

/// Llama with every bias, MHA, an untied head and a vocabulary of 37 (uneven over 2 and 4 ranks).
HfModelConfig llama_mha() { return config_of({{"attention_bias", true}, {"mlp_bias", true}}); }
/// Qwen2: GQA with 8 heads and 4 KV heads (split at TP 2 and 4), q/k/v biases, tied embeddings.
HfModelConfig qwen2_gqa() {
  return config_of({{"model_type", "qwen2"},
                    {"num_attention_heads", 8},
                    {"num_key_value_heads", 4},
                    {"head_dim", 2},
                    {"tie_word_embeddings", true},
                    {"vocab_size", 40}});
}
/// Qwen3: per-head q/k norms, every attention bias, one KV head (copied on every rank), and a
/// sliding window of 3 keys in the second layer.
HfModelConfig qwen3_copied_kv() {
  return config_of({{"model_type", "qwen3"},
                    {"attention_bias", true},
                    {"num_key_value_heads", 1},
                    {"use_sliding_window", true},
                    {"sliding_window", 3},
                    {"max_window_layers", 1}});
}

/// Fresh weights the same on every rank; norm weights away from 1 so that their gradients matter.
template <class Scalar>
BasicTransformer<Scalar> random_dense(const HfModelConfig& config, std::uint64_t seed) {
  BasicTransformer<Scalar> model(config, {.num_threads = 1});
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  model.for_each_parameter([&](const auto& p) {
    const bool norm = p.name.ends_with("norm.weight");
    for (auto& v : p.value) v = static_cast<Scalar>(norm ? 1.0 + 0.2 * normal(rng) : 0.4 * normal(rng));
  });
  return model;
}

/// Left-padded rows of different lengths (every rank the same).
TokenBatch padded_batch(Index vocab, unsigned seed) {
  MatrixI64 ids(3, 7);
  MatrixF mask(3, 7);
  std::mt19937 rng(seed);
  for (Index i = 0; i < ids.size(); ++i) ids.data()[i] = static_cast<std::int64_t>(rng() % static_cast<unsigned>(vocab));
  mask << 0, 0, 1, 1, 1, 1, 0,  //
      1, 1, 1, 1, 1, 1, 1,      //
      0, 1, 1, 1, 0, 0, 0;
  return TokenBatch::padded(ids, mask);
}

template <class Scalar>
std::vector<Scalar> random_cotangent(Index size, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal;
  std::vector<Scalar> values(static_cast<std::size_t>(size));
  for (auto& v : values) v = static_cast<Scalar>(normal(rng));
  return values;
}

template <class A, class B>
double max_abs_difference(const A& a, const B& b) {
  double worst = 0;
  for (std::size_t i = 0; i < static_cast<std::size_t>(a.size()); ++i) {
    worst = std::max(worst, std::abs(static_cast<double>(a.data()[i]) - static_cast<double>(b.data()[i])));
  }
  return worst;
}

template <class A>
double max_abs(const A& a) {
  double m = 0;
  for (std::size_t i = 0; i < static_cast<std::size_t>(a.size()); ++i) m = std::max(m, std::abs(static_cast<double>(a.data()[i])));
  return m;
}

struct Tolerance {
  double outputs;    ///< absolute, on log-probs, entropy and sum p^2
  double gradients;  ///< relative to the tensor's largest gradient
};

/// Two training micro-batches (the second accumulating gradients) through the dense model and the
/// TP model over `tp` ranks; outputs and gathered gradients must agree.
template <class Scalar>
void expect_tp_equals_dense(BasicTransformer<Scalar>& dense, int tp, Tolerance tolerance, bool logits_cotangent = false) {
  SCOPED_TRACE(::testing::Message() << "tp = " << tp);
  BasicTensorParallelTransformer<Scalar, MpiCommunicator> model(dense, tp_group(tp));
  ASSERT_EQ(model.tp_size(), tp);
  dense.zero_grad();
  double worst_output = 0, worst_gradient = 0;
  for (unsigned step = 0; step < 2; ++step) {
    const TokenBatch batch = padded_batch(dense.vocab_size(), 7 + step);
    const MatrixI64 targets = next_token_targets(batch);
    const ForwardOptions options{.targets = {targets.data(), static_cast<std::size_t>(targets.size())},
                                 .return_logits = logits_cotangent,
                                 .return_entropy = true,
                                 .return_sum_pi_squared = true,
                                 .temperature = step == 0 ? 0.7f : 1.3f,
                                 .keep_activations = true};
    const auto expected = dense.forward(batch, options);
    const auto actual = model.forward(batch, options);
    for (const auto& [a, e] : {std::pair{&actual.log_probs, &expected.log_probs},
                               std::pair{&actual.entropy, &expected.entropy},
                               std::pair{&actual.sum_pi_squared, &expected.sum_pi_squared}}) {
      ASSERT_EQ(a->size(), e->size());
      worst_output = std::max(worst_output, max_abs_difference(*a, *e));
    }
    if (logits_cotangent) worst_output = std::max(worst_output, max_abs_difference(actual.logits, expected.logits));

    const auto g_lp = random_cotangent<Scalar>(batch.layout_size(), 20 + step);
    const auto g_h = random_cotangent<Scalar>(batch.layout_size(), 30 + step);
    const auto g_logits = logits_cotangent ? random_cotangent<Scalar>(batch.layout_size() * dense.vocab_size(), 40 + step)
                                           : std::vector<Scalar>{};
    dense.backward({.log_probs = g_lp, .entropy = g_h, .logits = g_logits});
    model.backward({.log_probs = g_lp, .entropy = g_h, .logits = g_logits});
  }
  EXPECT_LE(worst_output, tolerance.outputs);

  std::map<std::string, std::vector<Scalar>> dense_grads;
  dense.for_each_parameter([&](const auto& p) { dense_grads[std::string(p.name)].assign(p.grad.begin(), p.grad.end()); });
  std::size_t visited = 0;
  model.for_each_full_parameter([&](const Parameter<const Scalar>& p) {
    ++visited;
    const auto& expected = dense_grads.at(std::string(p.name));
    ASSERT_EQ(p.grad.size(), expected.size()) << p.name;
    const Eigen::Map<const Vector<Scalar>> actual(p.grad.data(), static_cast<Index>(p.grad.size()));
    const Eigen::Map<const Vector<Scalar>> reference(expected.data(), static_cast<Index>(expected.size()));
    const double error = max_abs_difference(actual, reference) / std::max(max_abs(reference), 1e-30);
    worst_gradient = std::max(worst_gradient, error);
    EXPECT_LE(error, tolerance.gradients) << p.name;
  });
  EXPECT_EQ(visited, dense_grads.size());
  double dense_norm = 0;
  for (const auto& [name, grad] : dense_grads) {
    for (const Scalar g : grad) dense_norm += static_cast<double>(g) * static_cast<double>(g);
  }
  EXPECT_NEAR(model.gradient_squared_norm(), dense_norm, tolerance.gradients * 10 * dense_norm);
  // The shards gather back into the dense weights exactly.
  EXPECT_EQ(model.full_state_dict(), dense.state_dict());
  // A model built from the config loads the same shards from the full state dict, and from its own.
  BasicTensorParallelTransformer<Scalar, MpiCommunicator> loaded(dense.config(), tp_group(tp));
  loaded.load_full_state_dict(dense.state_dict());
  EXPECT_EQ(loaded.state_dict(), model.state_dict());
  BasicTensorParallelTransformer<Scalar, MpiCommunicator> resumed(dense.config(), tp_group(tp));
  resumed.load_state_dict(model.state_dict());
  EXPECT_EQ(resumed.full_state_dict(), dense.state_dict());
  if (MpiCommunicator::world().rank() == 0) {
    std::printf("  tp=%d %s: max |output difference| %.3g, max gradient error (relative to the tensor's max) %.3g\n",
                tp, std::is_same_v<Scalar, float> ? "float32" : "float64", worst_output, worst_gradient);
  }
}

constexpr Tolerance float_tolerance{2e-5, 2e-5};
constexpr Tolerance double_tolerance{1e-12, 1e-11};

/// The batches of the sequence-parallel comparison: 13 packed tokens (a multiple of neither 2 nor
/// 4), 8 (a multiple of both), then 3 (fewer than 4 ranks: a rank holds padding only).
TokenBatch sequence_parallel_batch(Index vocab, unsigned step) {
  if (step == 0) return padded_batch(vocab, 11);
  const Index rows = step == 1 ? 2 : 1, cols = step == 1 ? 4 : 3;
  MatrixI64 ids(rows, cols);
  for (Index i = 0; i < ids.size(); ++i) ids.data()[i] = (i * 7 + 3 * step) % vocab;
  return TokenBatch::padded(ids, MatrixF::Ones(rows, cols));
}

/// Three training micro-batches (accumulating gradients) through two TP models over `tp` ranks,
/// one with Megatron's sequence parallelism: outputs, gathered gradients and the gradient norm
/// must agree (relative to each tensor's largest value). Returns the worst differences.
template <class Scalar>
std::pair<double, double> expect_sequence_parallel_equals_tensor_parallel(const BasicTransformer<Scalar>& dense, int tp,
                                                                          double tolerance) {
  SCOPED_TRACE(::testing::Message() << "tp = " << tp);
  BasicTensorParallelTransformer<Scalar, MpiCommunicator> plain(dense, tp_group(tp));
  BasicTensorParallelTransformer<Scalar, MpiCommunicator> split(dense, tp_group(tp));
  split.set_sequence_parallel(true);
  EXPECT_TRUE(split.sequence_parallel());
  double worst_output = 0, worst_gradient = 0;
  for (unsigned step = 0; step < 3; ++step) {
    const TokenBatch batch = sequence_parallel_batch(dense.vocab_size(), step);
    const MatrixI64 targets = next_token_targets(batch);
    const ForwardOptions options{.targets = {targets.data(), static_cast<std::size_t>(targets.size())},
                                 .return_logits = step == 1,
                                 .return_entropy = true,
                                 .return_sum_pi_squared = true,
                                 .temperature = step == 0 ? 0.7f : 1.3f,
                                 .keep_activations = true};
    const auto expected = plain.forward(batch, options);
    const auto actual = split.forward(batch, options);
    for (const auto& [a, e] : {std::pair{&actual.log_probs, &expected.log_probs},
                               std::pair{&actual.entropy, &expected.entropy},
                               std::pair{&actual.sum_pi_squared, &expected.sum_pi_squared},
                               std::pair{&actual.logits, &expected.logits}}) {
      EXPECT_EQ(a->size(), e->size());
      if (a->size() != e->size()) continue;
      const double error = max_abs_difference(*a, *e) / std::max(max_abs(*e), 1.0);
      worst_output = std::max(worst_output, error);
      EXPECT_LE(error, tolerance) << "step " << step;
    }
    const auto g_lp = random_cotangent<Scalar>(batch.layout_size(), 50 + step);
    const auto g_h = random_cotangent<Scalar>(batch.layout_size(), 60 + step);
    plain.backward({.log_probs = g_lp, .entropy = g_h});
    split.backward({.log_probs = g_lp, .entropy = g_h});
  }
  std::map<std::string, std::vector<Scalar>> expected_grads;
  plain.for_each_full_parameter(
      [&](const Parameter<const Scalar>& p) { expected_grads[std::string(p.name)].assign(p.grad.begin(), p.grad.end()); });
  split.for_each_full_parameter([&](const Parameter<const Scalar>& p) {
    const auto& expected = expected_grads.at(std::string(p.name));
    ASSERT_EQ(p.grad.size(), expected.size()) << p.name;
    const Eigen::Map<const Vector<Scalar>> actual(p.grad.data(), static_cast<Index>(p.grad.size()));
    const Eigen::Map<const Vector<Scalar>> reference(expected.data(), static_cast<Index>(expected.size()));
    const double error = max_abs_difference(actual, reference) / std::max(max_abs(reference), 1e-30);
    worst_gradient = std::max(worst_gradient, error);
    EXPECT_LE(error, tolerance) << p.name;
  });
  // Each rank's shard too: the replicated tensors (norms, row-parallel biases) hold the summed
  // gradient on every rank, not their slice's share.
  std::vector<std::vector<Scalar>> plain_local;
  plain.for_each_parameter([&](const auto& p) { plain_local.emplace_back(p.grad.begin(), p.grad.end()); });
  std::size_t k = 0;
  split.for_each_parameter([&](const auto& p) {
    const Eigen::Map<const Vector<Scalar>> actual(p.grad.data(), static_cast<Index>(p.grad.size()));
    const Eigen::Map<const Vector<Scalar>> reference(plain_local[k].data(), static_cast<Index>(plain_local[k].size()));
    ++k;
    EXPECT_LE(max_abs_difference(actual, reference) / std::max(max_abs(reference), 1e-30), tolerance)
        << p.name << " on tp rank " << split.tp_rank();
  });
  const double plain_norm = plain.gradient_squared_norm(), split_norm = split.gradient_squared_norm();
  EXPECT_NEAR(split_norm, plain_norm, tolerance * plain_norm);
  if (MpiCommunicator::world().rank() == 0) {
    std::printf("  sequence parallel tp=%d %s: max output difference %.3g, max gradient difference %.3g (relative), "
                "squared norm %.17g vs %.17g\n",
                tp, std::is_same_v<Scalar, float> ? "float32" : "float64", worst_output, worst_gradient, split_norm,
                plain_norm);
  }
  return {worst_output, worst_gradient};
}

}  // namespace

TEST(TensorParallelTransformer, LlamaWithEveryBiasEqualsTheDenseModel) {
  for (const int tp : tp_sizes()) {
    auto dense = random_dense<float>(llama_mha(), 1);
    expect_tp_equals_dense(dense, tp, float_tolerance);
    auto dense64 = random_dense<double>(llama_mha(), 1);
    expect_tp_equals_dense(dense64, tp, double_tolerance);
  }
}

TEST(TensorParallelTransformer, LogitsAndTheirCotangentsGoThroughTheVocabularyShards) {
  for (const int tp : tp_sizes()) {
    auto dense64 = random_dense<double>(llama_mha(), 2);
    expect_tp_equals_dense(dense64, tp, double_tolerance, /*logits_cotangent=*/true);
  }
}

TEST(TensorParallelTransformer, GqaWithSplitKvHeadsAndTiedEmbeddingsEqualsTheDenseModel) {
  for (const int tp : tp_sizes()) {
    auto dense = random_dense<float>(qwen2_gqa(), 3);
    expect_tp_equals_dense(dense, tp, float_tolerance);
    auto dense64 = random_dense<double>(qwen2_gqa(), 3);
    expect_tp_equals_dense(dense64, tp, double_tolerance);
  }
}

TEST(TensorParallelTransformer, CopiedKvHeadsQkNormsAndSlidingWindowEqualTheDenseModel) {
  for (const int tp : tp_sizes()) {
    auto dense = random_dense<float>(qwen3_copied_kv(), 4);
    expect_tp_equals_dense(dense, tp, float_tolerance);
    auto dense64 = random_dense<double>(qwen3_copied_kv(), 4);
    expect_tp_equals_dense(dense64, tp, double_tolerance);
  }
}

TEST(TensorParallelTransformer, TinyFixtureModelsEqualTheDenseModel) {
  for (const std::string name : {"tiny-llama", "tiny-qwen3", "tiny-mistral"}) {
    SCOPED_TRACE(name);
    for (const int tp : tp_sizes()) {
      auto dense = load_transformer(models_dir / name, {.num_threads = 1});
      expect_tp_equals_dense(dense, tp, float_tolerance);
    }
  }
}

TEST(TensorParallelTransformer, SequenceParallelEqualsTensorParallelAlone) {
  for (const int tp : tp_sizes()) {
    for (const auto& [name, config] : {std::pair<std::string, HfModelConfig>{"llama, every bias", llama_mha()},
                                       {"qwen2 gqa", qwen2_gqa()},
                                       {"qwen3 copied kv, window", qwen3_copied_kv()}}) {
      SCOPED_TRACE(name);
      expect_sequence_parallel_equals_tensor_parallel(random_dense<float>(config, 8), tp, 1e-5);
      expect_sequence_parallel_equals_tensor_parallel(random_dense<double>(config, 8), tp, 1e-12);
    }
  }
}

TEST(TensorParallelTransformer, SequenceParallelLeavesGenerationUnsplit) {
  // extend() (the KV-cache decode) on a model with sequence parallelism on gives the logits of one
  // without it: generation never splits the tokens.
  for (const int tp : tp_sizes()) {
    const auto dense = random_dense<float>(llama_mha(), 9);
    BasicTensorParallelTransformer<float, MpiCommunicator> plain(dense, tp_group(tp));
    BasicTensorParallelTransformer<float, MpiCommunicator> split(dense, tp_group(tp));
    split.set_sequence_parallel(true);
    const std::vector<Index> capacities{8, 8};
    auto plain_cache = plain.make_kv_cache(capacities);
    auto split_cache = split.make_kv_cache(capacities);
    const std::vector<Index> sequences{0, 1};
    const std::vector<TokenId> tokens{3, 4, 5, 6, 7};
    const std::vector<std::int64_t> offsets{0, 3, 5}, positions{0, 1, 2, 0, 1};
    EXPECT_EQ(split.extend(split_cache, sequences, tokens, offsets, positions),
              plain.extend(plain_cache, sequences, tokens, offsets, positions));
  }
}

TEST(TensorParallelTransformer, RefusesSizesThatDoNotDivideTheModelNamingThem) {
  for (const int tp : tp_sizes()) {
    if (tp == 1) continue;
    // 6 heads over 4 ranks; 3 KV heads over 2 ranks (neither a multiple nor a divisor).
    const HfModelConfig config = config_of({{"num_attention_heads", 6}, {"num_key_value_heads", 3}, {"hidden_size", 24}});
    const std::string message =
        message_of([&] { BasicTensorParallelTransformer<float, MpiCommunicator> model(config, tp_group(tp)); });
    EXPECT_NE(message.find(tp == 4 ? "num_attention_heads = 6" : "num_key_value_heads = 3"), std::string::npos)
        << message;
    EXPECT_NE(message.find(fmt::format("got {}", tp)), std::string::npos) << message;
  }
}

TEST(TensorParallelTransformer, RanksGivenDifferentBatchesAreToldSo) {
  for (const int tp : tp_sizes()) {
    if (tp == 1) continue;
    auto dense = random_dense<float>(llama_mha(), 5);
    BasicTensorParallelTransformer<float, MpiCommunicator> model(dense, tp_group(tp));
    const TokenBatch batch = padded_batch(dense.vocab_size(), 9 + static_cast<unsigned>(model.tp_rank()));
    const std::string message = message_of([&] { (void)model.forward(batch, {.return_entropy = true}); });
    EXPECT_NE(message.find("the same tokens on every tensor-parallel rank"), std::string::npos) << message;
  }
}

TEST(VocabParallelLogprobEntropy, LargeLogitsOverUnevenShardsEqualTheFullSoftmaxAndItsBackward) {
  for (const int tp : tp_sizes()) {
    SCOPED_TRACE(::testing::Message() << "tp = " << tp);
    MpiCommunicator group = tp_group(tp);
    const Index rows = 6, vocab = 1001;  // uneven over 2 and 4 ranks
    std::mt19937 rng(17);
    std::normal_distribution<double> normal;
    RowMatrix<double> logits(rows, vocab);
    for (Index i = 0; i < logits.size(); ++i) logits.data()[i] = 300.0 * normal(rng);  // e^x overflows unshifted
    std::vector<std::int64_t> labels(static_cast<std::size_t>(rows));
    for (auto& label : labels) label = static_cast<std::int64_t>(rng() % vocab);
    const float temperature = 1.7f;
    std::vector<double> lp(rows), h(rows), sp(rows), ref_lp(rows), ref_h(rows), ref_sp(rows);
    const auto reference = model::detail::head_forward<double>(logits, labels, temperature, 1, ref_lp.data(),
                                                               ref_h.data(), ref_sp.data());
    const Index begin = vocab * group.rank() / tp, end = vocab * (group.rank() + 1) / tp;
    RowMatrix<double> shard = logits.middleCols(begin, end - begin);
    const auto stats = parallel::vocab_parallel_logprob_entropy<double>(
        group, shard, begin, vocab, labels, temperature, {.log_probs = lp, .entropy = h, .sum_pi_squared = sp});
    for (Index r = 0; r < rows; ++r) {
      const auto at = static_cast<std::size_t>(r);
      EXPECT_NEAR(lp[at], ref_lp[at], 1e-9 * std::abs(ref_lp[at]));
      EXPECT_NEAR(h[at], ref_h[at], 1e-9);
      EXPECT_NEAR(sp[at], ref_sp[at], 1e-12);
    }
    const auto g_lp = random_cotangent<double>(rows, 3), g_h = random_cotangent<double>(rows, 4);
    RowMatrix<double> full_grad = logits;
    model::detail::head_backward<double>(full_grad, labels, reference, g_lp, g_h, temperature, 1);
    parallel::vocab_parallel_logprob_entropy_backward<double>(shard, begin, labels, stats, g_lp, g_h, temperature);
    // log p reaches -10^3 here: its rounding (10^-13) is amplified by (log p + H) in the entropy term.
    EXPECT_LE(max_abs_difference(shard, RowMatrix<double>(full_grad.middleCols(begin, end - begin))), 1e-10);
  }
}
