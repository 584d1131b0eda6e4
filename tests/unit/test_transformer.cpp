// The reference Llama / Qwen2 transformer: gradients of every parameter against central finite
// differences (double precision), packed vs padded batches, thread-count independence, state
// dicts, the critic, and errors for bad input.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "verl/model/causal_lm.hpp"
#include "verl/model/transformer/critic.hpp"
#include "verl/model/transformer/transformer.hpp"
#include "verl/model/value_model.hpp"

namespace {

using verl::Index;
using verl::MatrixD;
using verl::MatrixF;
using verl::MatrixI64;
using namespace verl::model;

HfModelConfig tiny_config(const std::string& family, nlohmann::json extra = {}) {
  nlohmann::json json = {{"model_type", family},   {"hidden_size", 8},         {"intermediate_size", 12},
                         {"num_hidden_layers", 2}, {"num_attention_heads", 2}, {"num_key_value_heads", 1},
                         {"vocab_size", 23},       {"rms_norm_eps", 1e-5},     {"max_position_embeddings", 64}};
  for (auto& [key, value] : extra.items()) json[key] = value;
  return HfModelConfig::from_json(json, "test config");
}

/// Qwen2: q/k/v biases, tied embeddings. Llama: every bias, untied head, explicit head_dim,
/// llama3 rope scaling.
HfModelConfig qwen2_config() { return tiny_config("qwen2", {{"tie_word_embeddings", true}, {"rope_theta", 1e4}}); }
HfModelConfig llama_config() {
  return tiny_config("llama", {{"attention_bias", true},
                               {"mlp_bias", true},
                               {"head_dim", 6},
                               {"num_attention_heads", 4},
                               {"num_key_value_heads", 2},
                               {"rope_theta", 500.0},
                               {"rope_scaling",
                                {{"rope_type", "llama3"},
                                 {"factor", 4.0},
                                 {"low_freq_factor", 1.0},
                                 {"high_freq_factor", 4.0},
                                 {"original_max_position_embeddings", 8}}}});
}

/// Qwen3: per-head q/k norms, every attention bias, an explicit head_dim, GQA, and a second layer
/// that attends through a sliding window of 2 keys.
HfModelConfig qwen3_config() {
  return tiny_config("qwen3", {{"attention_bias", true},
                               {"head_dim", 4},
                               {"num_attention_heads", 4},
                               {"num_key_value_heads", 2},
                               {"rope_theta", 1e4},
                               {"use_sliding_window", true},
                               {"sliding_window", 2},
                               {"max_window_layers", 1}});
}

/// Random norm weights and biases too, so that every parameter matters.
template <class Model>
void randomize(Model& model, std::uint64_t seed, double scale = 0.5) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  model.for_each_parameter([&](const auto& p) {
    const bool norm = p.name.ends_with("norm.weight");
    for (auto& v : p.value) v = static_cast<std::remove_cvref_t<decltype(v)>>(norm ? 1.0 + 0.2 * normal(rng) : scale * normal(rng));
  });
}

struct Batch {
  MatrixI64 ids;
  MatrixF mask;
};

/// Left-padded prompts followed by right-padded responses: rows of different valid lengths.
Batch padded_batch(Index vocab) {
  Batch b{MatrixI64(3, 7), MatrixF(3, 7)};
  b.ids << 0, 0, 5, 9, 3, 17, 2,  //
      1, 4, 8, 22, 6, 0, 0,       //
      0, 7, 7, 13, 10, 11, 0;
  b.mask << 0, 0, 1, 1, 1, 1, 1,  //
      1, 1, 1, 1, 1, 0, 0,        //
      0, 1, 1, 1, 1, 1, 0;
  for (Index i = 0; i < b.ids.size(); ++i) b.ids.data()[i] %= vocab;
  return b;
}

/// L = sum w * logp(target) + sum u * entropy + sum c * logits at temperature 0.8, and its
/// cotangents.
struct Loss {
  MatrixD w, u, c;
  MatrixI64 targets;

  double value(const CausalLMOutput<double>& out) const {
    return (w.array() * out.log_probs.array()).sum() + (u.array() * out.entropy.array()).sum() +
           (c.array() * out.logits.array()).sum();
  }
};

Loss make_loss(const TokenBatch& batch, Index vocab, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  Loss loss{MatrixD(batch.rows(), batch.cols()), MatrixD(batch.rows(), batch.cols()),
            MatrixD(batch.layout_size(), vocab), next_token_targets(batch)};
  for (Index i = 0; i < loss.w.size(); ++i) loss.w.data()[i] = normal(rng);
  for (Index i = 0; i < loss.u.size(); ++i) loss.u.data()[i] = 0.3 * normal(rng);
  for (Index i = 0; i < loss.c.size(); ++i) loss.c.data()[i] = 0.05 * normal(rng);
  return loss;
}

ForwardOptions loss_options(const Loss& loss, bool keep) {
  return {.targets = {loss.targets.data(), static_cast<std::size_t>(loss.targets.size())},
          .return_logits = true,
          .return_entropy = true,
          .temperature = 0.8f,
          .keep_activations = keep};
}

void backward_loss(BasicTransformer<double>& model, const Loss& loss) {
  model.backward({.log_probs = {loss.w.data(), static_cast<std::size_t>(loss.w.size())},
                  .entropy = {loss.u.data(), static_cast<std::size_t>(loss.u.size())},
                  .logits = {loss.c.data(), static_cast<std::size_t>(loss.c.size())}});
}

/// Every parameter element's analytic gradient against a central difference.
void check_gradients(BasicTransformer<double>& model, const TokenBatch& batch, const Loss& loss) {
  model.zero_grad();
  model.forward(batch, loss_options(loss, true));
  backward_loss(model, loss);
  std::vector<std::pair<std::string, std::vector<double>>> analytic;
  model.for_each_parameter([&](const Parameter<double>& p) {
    analytic.emplace_back(std::string(p.name), std::vector<double>(p.grad.begin(), p.grad.end()));
  });
  const double h = 1e-5;
  std::size_t k = 0;
  int checked = 0;
  model.for_each_parameter([&](const Parameter<double>& p) {
    const auto& expected = analytic[k++];
    ASSERT_EQ(expected.first, p.name);
    double worst = 0;
    for (std::size_t i = 0; i < p.value.size(); ++i) {
      const double saved = p.value[i];
      p.value[i] = saved + h;
      const double plus = loss.value(model.forward(batch, loss_options(loss, false)));
      p.value[i] = saved - h;
      const double minus = loss.value(model.forward(batch, loss_options(loss, false)));
      p.value[i] = saved;
      const double numeric = (plus - minus) / (2 * h);
      const double error = std::abs(numeric - expected.second[i]) / std::max(1.0, std::abs(numeric));
      worst = std::max(worst, error);
      ++checked;
    }
    EXPECT_LT(worst, 1e-6) << p.name;
  });
  EXPECT_GT(checked, 500);
}

TEST(TransformerGradients, Qwen2EveryParameterMatchesFiniteDifferences) {
  // No saved logits: backward recomputes the LM head's logits chunk by chunk.
  auto model = BasicTransformer<double>(qwen2_config(), {.num_threads = 2, .max_saved_logits_bytes = 0});
  randomize(model, 1);
  const Batch b = padded_batch(model.vocab_size());
  const auto batch = TokenBatch::padded(b.ids, b.mask);
  check_gradients(model, batch, make_loss(batch, model.vocab_size(), 2));
}

TEST(TransformerGradients, LlamaEveryParameterMatchesFiniteDifferences) {
  auto model = BasicTransformer<double>(llama_config(), {.num_threads = 1});
  randomize(model, 3);
  const Batch b = padded_batch(model.vocab_size());
  const auto batch = TokenBatch::padded(b.ids, b.mask);
  check_gradients(model, batch, make_loss(batch, model.vocab_size(), 4));
}

TEST(TransformerGradients, Qwen3EveryParameterMatchesFiniteDifferences) {
  auto model = BasicTransformer<double>(qwen3_config(), {.num_threads = 2});
  randomize(model, 7);
  std::size_t head_norms = 0;
  model.for_each_parameter([&](const auto& p) { head_norms += p.name.ends_with("q_norm.weight") || p.name.ends_with("k_norm.weight"); });
  EXPECT_EQ(head_norms, 4u);  // two layers, q and k
  EXPECT_EQ(model.config().attention_window(0), 0);
  EXPECT_EQ(model.config().attention_window(1), 2);
  const Batch b = padded_batch(model.vocab_size());
  const auto batch = TokenBatch::padded(b.ids, b.mask);
  check_gradients(model, batch, make_loss(batch, model.vocab_size(), 8));
}

TEST(TransformerGradients, PackedSequencesMatchFiniteDifferences) {
  auto model = BasicTransformer<double>(llama_config(), {.num_threads = 2});
  randomize(model, 5);
  const std::vector<TokenId> ids = {3, 4, 5, 6, 7, 8, 9, 10, 11};
  const std::vector<std::int64_t> cu = {0, 4, 4, 9};  // an empty sequence in the middle
  const auto batch = TokenBatch::packed(ids, cu);
  check_gradients(model, batch, make_loss(batch, model.vocab_size(), 6));
}

TEST(TransformerGradients, FloatModelAgreesWithDoubleModel) {
  auto exact = BasicTransformer<double>(qwen2_config());
  randomize(exact, 7);
  Transformer model(qwen2_config());
  model.load_state_dict(exact.state_dict());
  exact.load_state_dict(model.state_dict());  // both hold the float-rounded weights
  const Batch b = padded_batch(model.vocab_size());
  const auto batch = TokenBatch::padded(b.ids, b.mask);
  const Loss loss = make_loss(batch, model.vocab_size(), 8);
  exact.zero_grad();
  const auto reference = exact.forward(batch, loss_options(loss, true));
  backward_loss(exact, loss);
  model.zero_grad();
  const auto out = model.forward(batch, loss_options(loss, true));
  const MatrixF w = loss.w.cast<float>(), u = loss.u.cast<float>(), c = loss.c.cast<float>();
  model.backward({.log_probs = {w.data(), static_cast<std::size_t>(w.size())},
                  .entropy = {u.data(), static_cast<std::size_t>(u.size())},
                  .logits = {c.data(), static_cast<std::size_t>(c.size())}});
  EXPECT_LT((out.log_probs.cast<double>() - reference.log_probs).cwiseAbs().maxCoeff(), 1e-5);
  EXPECT_LT((out.entropy.cast<double>() - reference.entropy).cwiseAbs().maxCoeff(), 1e-5);
  EXPECT_LT((out.logits.cast<double>() - reference.logits).cwiseAbs().maxCoeff(), 1e-5);
  std::vector<std::vector<double>> grads;
  exact.for_each_parameter([&](const auto& p) { grads.emplace_back(p.grad.begin(), p.grad.end()); });
  std::size_t k = 0;
  model.for_each_parameter([&](const auto& p) {
    const auto& expected = grads[k++];
    for (std::size_t i = 0; i < p.grad.size(); ++i) {
      ASSERT_NEAR(p.grad[i], expected[i], 1e-4 * std::max(1.0, std::abs(expected[i]))) << p.name << "[" << i << "]";
    }
  });
}

TEST(TransformerGradients, PaddingTokenEmbeddingGetsNoGradientLikeNnEmbeddingPaddingIdx) {
  auto config = qwen2_config();
  config.tie_word_embeddings = false;
  config.pad_token_id = 0;
  auto model = BasicTransformer<double>(config);
  randomize(model, 9);
  MatrixI64 ids(1, 4);
  ids << 0, 5, 0, 7;  // the pad id as a real (unmasked) token
  const MatrixF mask = MatrixF::Ones(1, 4);
  const auto batch = TokenBatch::padded(ids, mask);
  const MatrixI64 targets = next_token_targets(batch);
  model.zero_grad();
  model.forward(batch, {.targets = {targets.data(), 4}, .keep_activations = true});
  const std::vector<double> ones(4, 1.0);
  model.backward({.log_probs = ones});
  model.for_each_parameter([&](const auto& p) {
    if (p.name != "model.embed_tokens.weight") return;
    for (Index j = 0; j < 8; ++j) EXPECT_EQ(p.grad[static_cast<std::size_t>(j)], 0.0);
    double row5 = 0;
    for (Index j = 0; j < 8; ++j) row5 += std::abs(p.grad[static_cast<std::size_t>(5 * 8 + j)]);
    EXPECT_GT(row5, 0.0);
  });
}

TEST(TransformerCritic, EveryParameterMatchesFiniteDifferences) {
  auto critic = BasicTransformerCritic<double>(llama_config());
  randomize(critic, 11);
  const Batch b = padded_batch(critic.config().vocab_size);
  const auto batch = TokenBatch::padded(b.ids, b.mask);
  std::mt19937_64 rng(12);
  std::normal_distribution<double> normal(0.0, 1.0);
  MatrixD cot(batch.rows(), batch.cols());
  for (Index i = 0; i < cot.size(); ++i) cot.data()[i] = normal(rng);
  critic.zero_grad();
  const auto values = critic.forward(batch, {.keep_activations = true}).values;
  for (Index i = 0; i < b.mask.size(); ++i) {
    if (b.mask.data()[i] == 0) {
      EXPECT_EQ(values.data()[i], 0.0);
    }
  }
  critic.backward({.values = {cot.data(), static_cast<std::size_t>(cot.size())}});
  std::vector<std::vector<double>> grads;
  critic.for_each_parameter([&](const auto& p) { grads.emplace_back(p.grad.begin(), p.grad.end()); });
  std::size_t k = 0;
  const double h = 1e-5;
  critic.for_each_parameter([&](const auto& p) {
    const auto& expected = grads[k++];
    for (std::size_t i = 0; i < p.value.size(); i += 3) {
      const double saved = p.value[i];
      p.value[i] = saved + h;
      const double plus = (cot.array() * critic.forward(batch, {}).values.array()).sum();
      p.value[i] = saved - h;
      const double minus = (cot.array() * critic.forward(batch, {}).values.array()).sum();
      p.value[i] = saved;
      const double numeric = (plus - minus) / (2 * h);
      ASSERT_NEAR(expected[i], numeric, 1e-6 * std::max(1.0, std::abs(numeric))) << p.name << "[" << i << "]";
    }
  });
}

TEST(TransformerForward, PackedEqualsPaddedAndEachSequenceAlone) {
  Transformer model = Transformer::random(llama_config(), {.initializer_range = 0.5, .seed = 3});
  const Batch b = padded_batch(model.vocab_size());
  const auto padded = TokenBatch::padded(b.ids, b.mask);
  const auto out = model.forward(padded, {.return_logits = true});
  // The same valid tokens packed (use_remove_padding), positions restarting per sequence.
  const auto packed = TokenBatch::packed(padded.tokens(), padded.cu_seqlens());
  const auto packed_out = model.forward(packed, {.return_logits = true});
  const auto slots = padded.slots();
  for (Index t = 0; t < packed.num_tokens(); ++t) {
    EXPECT_EQ(packed_out.logits.row(t), out.logits.row(slots[static_cast<std::size_t>(t)])) << t;
  }
  // Padding slots are zero.
  for (Index s = 0; s < padded.layout_size(); ++s) {
    if (b.mask.data()[s] == 0) {
      EXPECT_EQ(out.logits.row(s).cwiseAbs().maxCoeff(), 0.0f);
    }
  }
  // Each row alone gives the same logits (up to float rounding of different product shapes).
  for (Index r = 0; r < b.ids.rows(); ++r) {
    const MatrixI64 ids = b.ids.row(r);
    const MatrixF mask = b.mask.row(r);
    const auto alone = model.forward(TokenBatch::padded(ids, mask), {.return_logits = true});
    for (Index c = 0; c < ids.cols(); ++c) {
      if (mask(0, c) == 0) continue;
      EXPECT_LT((alone.logits.row(c) - out.logits.row(r * b.ids.cols() + c)).cwiseAbs().maxCoeff(), 1e-5);
    }
  }
}

TEST(TransformerForward, ResultsDoNotDependOnTheThreadCount) {
  // Large enough that products and attention split into many tasks.
  const auto config = tiny_config("qwen2", {{"hidden_size", 64},
                                            {"intermediate_size", 160},
                                            {"num_attention_heads", 4},
                                            {"num_key_value_heads", 2},
                                            {"vocab_size", 700},
                                            {"max_position_embeddings", 512}});
  std::vector<TokenId> ids(400);
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<TokenId>((i * 37 + 11) % 700);
  const std::vector<std::int64_t> cu = {0, 150, 390, 400};
  const auto batch = TokenBatch::packed(ids, cu);
  const MatrixI64 targets = next_token_targets(batch);
  std::vector<MatrixF> log_probs;
  std::vector<std::vector<float>> grads;
  for (unsigned threads : {1u, 2u, 3u}) {
    Transformer model = Transformer::random(config, {.seed = 42}, {.num_threads = threads});
    model.zero_grad();
    const auto out = model.forward(batch, {.targets = {targets.data(), ids.size()}, .keep_activations = true});
    const std::vector<float> ones(ids.size(), 1.0f);
    model.backward({.log_probs = ones});
    log_probs.push_back(out.log_probs);
    std::vector<float> all;
    model.for_each_parameter([&](const auto& p) { all.insert(all.end(), p.grad.begin(), p.grad.end()); });
    grads.push_back(std::move(all));
  }
  for (std::size_t k = 1; k < log_probs.size(); ++k) {
    EXPECT_EQ(log_probs[k], log_probs[0]);
    EXPECT_EQ(grads[k], grads[0]);
  }
}

TEST(TransformerForward, LaterStepsGiveTheResultsOfAFreshModel) {
  // A vocabulary of 32768 makes the LM head work in chunks of 512 tokens: 1100 tokens are three
  // chunks, 700 two of other sizes. Steps of other shapes, and a forward pass without backward,
  // before a step must leave its results bit for bit those of a fresh model (nothing a step saves
  // or keeps leaks into the next), whether backward reuses the saved logits or recomputes them.
  const auto config = tiny_config("qwen2", {{"vocab_size", 32768}, {"max_position_embeddings", 2048}});
  auto make_batch = [](std::vector<TokenId>& ids, std::size_t n, std::size_t salt) {
    ids.resize(n);
    for (std::size_t i = 0; i < n; ++i) ids[i] = static_cast<TokenId>((i * 7919 + salt) % 32768);
    return TokenBatch::packed(ids, std::vector<std::int64_t>{0, static_cast<std::int64_t>(n / 3), static_cast<std::int64_t>(n)});
  };
  std::vector<TokenId> ids_a, ids_b;
  const auto batch_a = make_batch(ids_a, 1100, 5), batch_b = make_batch(ids_b, 700, 17);
  const MatrixI64 targets_a = next_token_targets(batch_a), targets_b = next_token_targets(batch_b);
  struct StepResult {
    MatrixF log_probs;
    std::vector<float> grads;
  };
  auto step = [](Transformer& model, const TokenBatch& batch, const MatrixI64& targets, std::size_t n) {
    model.zero_grad();
    StepResult result;
    result.log_probs = model.forward(batch, {.targets = {targets.data(), n}, .keep_activations = true}).log_probs;
    model.backward({.log_probs = std::vector<float>(n, 1.0f)});
    model.for_each_parameter([&](const auto& p) { result.grads.insert(result.grads.end(), p.grad.begin(), p.grad.end()); });
    return result;
  };
  for (const std::size_t max_saved : {std::size_t{512} << 20, std::size_t{0}}) {
    Transformer fresh = Transformer::random(config, {.seed = 7}, {.num_threads = 2, .max_saved_logits_bytes = max_saved});
    const StepResult expected = step(fresh, batch_a, targets_a, ids_a.size());
    Transformer model = Transformer::random(config, {.seed = 7}, {.num_threads = 2, .max_saved_logits_bytes = max_saved});
    (void)step(model, batch_b, targets_b, ids_b.size());
    (void)model.forward(batch_b, {.targets = {targets_b.data(), ids_b.size()}});
    for (int repeat = 0; repeat < 2; ++repeat) {
      const StepResult got = step(model, batch_a, targets_a, ids_a.size());
      EXPECT_EQ(got.log_probs, expected.log_probs) << max_saved << " " << repeat;
      EXPECT_EQ(got.grads, expected.grads) << max_saved << " " << repeat;
    }
    model.release_activations();
    const StepResult after_release = step(model, batch_a, targets_a, ids_a.size());
    EXPECT_EQ(after_release.grads, expected.grads) << max_saved;
  }
}

template <class Model>
void expect_statistics_match_the_logits(Model& model, double tolerance) {
  const Batch b = padded_batch(model.vocab_size());
  const auto batch = TokenBatch::padded(b.ids, b.mask);
  const MatrixI64 targets = next_token_targets(batch);
  const auto out = model.forward(batch, {.targets = {targets.data(), static_cast<std::size_t>(targets.size())},
                                         .return_logits = true,
                                         .return_entropy = true,
                                         .return_sum_pi_squared = true,
                                         .temperature = 0.6f});
  ASSERT_EQ(out.sum_pi_squared.rows(), batch.rows());
  ASSERT_EQ(out.sum_pi_squared.cols(), batch.cols());
  for (Index s = 0; s < batch.layout_size(); ++s) {
    if (b.mask.data()[s] == 0) {
      EXPECT_EQ(out.log_probs.data()[s], 0.0);
      EXPECT_EQ(out.sum_pi_squared.data()[s], 0.0);
      continue;
    }
    const Eigen::ArrayXd x = out.logits.row(s).template cast<double>().transpose().array() / double{0.6f};
    const double lse = x.maxCoeff() + std::log((x - x.maxCoeff()).exp().sum());
    const Eigen::ArrayXd logp = x - lse;
    EXPECT_NEAR(out.log_probs.data()[s], logp[targets.data()[s]], tolerance);
    EXPECT_NEAR(out.entropy.data()[s], -(logp.exp() * logp).sum(), tolerance);
    EXPECT_NEAR(out.sum_pi_squared.data()[s], (2.0 * logp).exp().sum(), tolerance);
  }
  // Asked for nothing else, the sum of squares alone comes back.
  const auto alone = model.forward(batch, {.return_sum_pi_squared = true, .temperature = 0.6f});
  EXPECT_EQ(alone.log_probs.size(), 0);
  EXPECT_EQ(alone.entropy.size(), 0);
  EXPECT_EQ(alone.sum_pi_squared, out.sum_pi_squared);
}

TEST(TransformerForward, LogProbsEntropyAndSumOfSquaredProbabilitiesMatchTheLogits) {
  Transformer model = Transformer::random(qwen2_config(), {.initializer_range = 0.3, .seed = 1});
  expect_statistics_match_the_logits(model, 1e-5);
  BasicTransformer<double> exact = BasicTransformer<double>::random(llama_config(), {.initializer_range = 0.3, .seed = 2});
  expect_statistics_match_the_logits(exact, 1e-12);
}

TEST(TransformerKvCache, ChunkedExtendMatchesTheFullForward) {
  Transformer model = Transformer::random(llama_config(), {.initializer_range = 0.5, .seed = 8});
  const std::vector<TokenId> a = {3, 1, 4, 1, 5, 9, 2, 6}, b = {2, 7, 1, 8, 2};
  // Reference: each sequence's logits at every position from one forward pass.
  std::vector<TokenId> ids(a);
  ids.insert(ids.end(), b.begin(), b.end());
  const std::vector<std::int64_t> cu = {0, 8, 13};
  const auto full = model.forward(TokenBatch::packed(ids, cu), {.return_logits = true});
  // The cache: sequence 0 gets a in chunks of 5 and 3, sequence 1 gets b in chunks of 1 and 4.
  const std::vector<Index> capacities = {8, 6};
  auto cache = model.make_kv_cache(capacities);
  const std::vector<Index> both = {0, 1};
  const std::vector<TokenId> first = {3, 1, 4, 1, 5, 2};
  const std::vector<std::int64_t> first_offsets = {0, 5, 6}, first_positions = {0, 1, 2, 3, 4, 0};
  const MatrixF step1 = model.extend(cache, both, first, first_offsets, first_positions);
  EXPECT_LT((step1.row(0) - full.logits.row(4)).cwiseAbs().maxCoeff(), 1e-5);
  EXPECT_LT((step1.row(1) - full.logits.row(8)).cwiseAbs().maxCoeff(), 1e-5);
  const std::vector<TokenId> second = {9, 2, 6, 7, 1, 8, 2};
  const std::vector<std::int64_t> second_offsets = {0, 3, 7}, second_positions = {5, 6, 7, 1, 2, 3, 4};
  const MatrixF step2 = model.extend(cache, both, second, second_offsets, second_positions);
  EXPECT_LT((step2.row(0) - full.logits.row(7)).cwiseAbs().maxCoeff(), 1e-5);
  EXPECT_LT((step2.row(1) - full.logits.row(12)).cwiseAbs().maxCoeff(), 1e-5);
  EXPECT_EQ(cache.length(0), 8);
  EXPECT_EQ(cache.length(1), 5);
  EXPECT_EQ(cache.bytes(), std::size_t{14} * 2 * 2 * 2 * 6 * sizeof(float));  // tokens x layers x K,V x kv heads x D
  // Past its capacity, a sequence is refused before anything is written.
  const std::vector<Index> one = {1};
  const std::vector<TokenId> two = {1, 2};
  const std::vector<std::int64_t> offsets = {0, 2}, positions = {5, 6};
  EXPECT_THROW(model.extend(cache, one, two, offsets, positions), verl::InvalidArgument);
  EXPECT_EQ(cache.length(1), 5);
}

TEST(TransformerKvCache, Bfloat16DecodingIsTheModelWithItsLinearProductsRounded) {
  // decode_precision = bfloat16 (verl's rollout.dtype) packs every linear weight rounded to
  // bfloat16 for the cache and rounds the inputs of those products (the gemm tests hold each
  // product to that); norms, biases, attention and the embedding stay float32. So its logits must
  // be those of a float32 model whose linear weights were rounded, up to the rounding of the
  // products' inputs (a relative 2^-9 each), and not those of float32 decoding.
  Transformer model = Transformer::random(llama_config(), {.initializer_range = 0.5, .seed = 8});
  StateDict dict = model.state_dict();
  for (auto& [name, tensor] : dict) {
    if (name.ends_with("proj.weight") || name == "lm_head.weight") {
      for (float& x : tensor.values) {
        x = verl::bf16_bits_to_float(verl::float_to_bf16_bits(x));
      }
    }
  }
  Transformer rounded(llama_config());
  rounded.load_state_dict(dict);
  model.set_decode_precision(verl::model::DecodePrecision::bfloat16);
  EXPECT_EQ(model.decode_precision(), verl::model::DecodePrecision::bfloat16);

  const std::vector<Index> capacities = {12, 12};
  const std::vector<Index> both = {0, 1};
  auto run = [&](Transformer& m) {
    auto cache = m.make_kv_cache(capacities);
    // A prefill of 9 tokens, then two decode steps of one token each.
    const std::vector<TokenId> prompt = {3, 1, 4, 1, 5, 2, 7, 1, 8};
    const std::vector<std::int64_t> offsets = {0, 5, 9}, positions = {0, 1, 2, 3, 4, 0, 1, 2, 3};
    std::vector<MatrixF> logits = {m.extend(cache, both, prompt, offsets, positions)};
    for (std::int64_t step = 0; step < 2; ++step) {
      const std::vector<TokenId> next = {static_cast<TokenId>(2 + step), static_cast<TokenId>(6 - step)};
      const std::vector<std::int64_t> one_each = {0, 1, 2}, at = {5 + step, 4 + step};
      logits.push_back(m.extend(cache, both, next, one_each, at));
    }
    return logits;
  };
  const auto bf16 = run(model), reference = run(rounded);
  model.set_decode_precision(verl::model::DecodePrecision::float32);
  const auto float32 = run(model);
  for (std::size_t i = 0; i < bf16.size(); ++i) {
    const float scale = reference[i].cwiseAbs().maxCoeff();
    EXPECT_LE((bf16[i] - reference[i]).cwiseAbs().maxCoeff(), 0.02f * scale) << "extend call " << i;
    EXPECT_GT((bf16[i] - float32[i]).cwiseAbs().maxCoeff(), 0.0f) << "extend call " << i;
  }
  EXPECT_EQ(run(model), float32) << "float32 decoding again after bfloat16";
  model.set_decode_precision(verl::model::DecodePrecision::bfloat16);
  EXPECT_EQ(run(model), bf16) << "bfloat16 decoding is deterministic";
}

TEST(TransformerStateDict, RoundTripsAndRejectsMismatches) {
  Transformer model = Transformer::random(llama_config(), {.seed = 5});
  StateDict dict = model.state_dict();
  EXPECT_TRUE(dict.contains("lm_head.weight"));
  EXPECT_TRUE(dict.contains("model.layers.1.self_attn.o_proj.bias"));
  EXPECT_EQ(dict.at("model.layers.0.self_attn.q_proj.weight").shape, (std::vector<std::int64_t>{24, 8}));
  Transformer other(llama_config());
  other.load_state_dict(dict);
  EXPECT_EQ(other.state_dict(), dict);

  auto missing = dict;
  missing.erase("model.norm.weight");
  EXPECT_THROW(
      {
        try {
          other.load_state_dict(missing);
        } catch (const verl::InvalidArgument& e) {
          EXPECT_NE(std::string(e.what()).find("missing tensor 'model.norm.weight'"), std::string::npos) << e.what();
          throw;
        }
      },
      verl::InvalidArgument);
  auto reshaped = dict;
  reshaped["model.norm.weight"].shape = {4, 2};
  EXPECT_THROW(other.load_state_dict(reshaped), verl::InvalidArgument);
  auto extra = dict;
  extra["model.layers.9.mlp.up_proj.weight"] = {{1}, {0.0f}};
  EXPECT_THROW(
      {
        try {
          other.load_state_dict(extra);
        } catch (const verl::InvalidArgument& e) {
          EXPECT_NE(std::string(e.what()).find("unexpected tensor 'model.layers.9.mlp.up_proj.weight'"),
                    std::string::npos);
          throw;
        }
      },
      verl::InvalidArgument);
  // A tied model has no lm_head.weight and ignores one given to it.
  Transformer tied = Transformer::random(qwen2_config(), {.seed = 1});
  auto tied_dict = tied.state_dict();
  EXPECT_FALSE(tied_dict.contains("lm_head.weight"));
  tied_dict["lm_head.weight"] = tied_dict.at("model.embed_tokens.weight");
  EXPECT_NO_THROW(tied.load_state_dict(tied_dict));
}

template <class Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "no error";
}

TEST(TransformerErrors, NameTheArgumentAndValue) {
  Transformer model = Transformer::random(qwen2_config(), {.seed = 1});
  MatrixI64 ids(1, 3);
  ids << 1, 2, 23;
  const MatrixF mask = MatrixF::Ones(1, 3);
  EXPECT_NE(error_of([&] { model.forward(TokenBatch::padded(ids, mask), {}); }).find("input_ids: expected token ids in [0, 23)"),
            std::string::npos);
  ids(0, 2) = 3;
  const auto batch = TokenBatch::padded(ids, mask);
  const std::vector<std::int64_t> short_targets = {1, 2};
  EXPECT_NE(error_of([&] { model.forward(batch, {.targets = short_targets}); }).find("targets: expected length 3"),
            std::string::npos);
  EXPECT_NE(error_of([&] { model.forward(batch, {.temperature = 0.0f}); }).find("temperature"), std::string::npos);
  model.forward(batch, {});
  const std::vector<float> cot(3, 1.0f);
  EXPECT_NE(error_of([&] { model.backward({.log_probs = cot}); }).find("no saved activations"), std::string::npos);
  model.forward(batch, {.return_entropy = true, .keep_activations = true});
  EXPECT_NE(error_of([&] { model.backward({.log_probs = cot}); }).find("no log-probs"), std::string::npos);
  // A rejected cotangent leaves the forward pass available.
  const std::vector<float> short_cot(2, 1.0f);
  EXPECT_NE(error_of([&] { model.backward({.entropy = short_cot}); }).find("cotangents.entropy: expected 3 values"),
            std::string::npos);
  EXPECT_NO_THROW(model.backward({.entropy = cot}));
  MatrixF bad_mask = mask;
  bad_mask(0, 1) = 0.5f;
  EXPECT_NE(error_of([&] { TokenBatch::padded(ids, bad_mask); }).find("attention_mask: expected a 0/1 mask"),
            std::string::npos);
  const std::vector<TokenId> packed_ids = {1, 2, 3};
  const std::vector<std::int64_t> bad_cu = {0, 2};
  EXPECT_NE(error_of([&] { TokenBatch::packed(packed_ids, bad_cu); }).find("cu_seqlens"), std::string::npos);

  auto gelu = qwen2_config();
  gelu.hidden_act = "gelu";
  EXPECT_THROW(Transformer{gelu}, verl::NotImplemented);
  auto dynamic = qwen2_config();
  dynamic.rope_scaling = RopeScaling{};
  dynamic.rope_scaling->rope_type = "dynamic";
  EXPECT_NE(error_of([&] { Transformer{dynamic}; }).find("rope_type 'dynamic' is not implemented"), std::string::npos);
  auto shrinking = qwen2_config();
  shrinking.rope_scaling = RopeScaling{};
  shrinking.rope_scaling->rope_type = "yarn";
  shrinking.rope_scaling->factor = 0.5;
  EXPECT_NE(error_of([&] { Transformer{shrinking}; }).find("rope_scaling.factor"), std::string::npos);
}

// YaRN's frequencies and cos/sin scale, bit for bit transformers' _compute_yarn_parameters
// (transformers 5.23, float32) for a Qwen3-style and a DeepSeek-style (mscale, betas, no
// truncation) configuration.
TEST(RotaryEmbedding, YarnMatchesTransformers) {
  auto qwen3 = tiny_config("qwen3", {{"hidden_size", 64},
                                     {"head_dim", 16},
                                     {"num_attention_heads", 4},
                                     {"max_position_embeddings", 128},
                                     {"rope_theta", 10000.0},
                                     {"rope_scaling",
                                      {{"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 32}}}});
  const RotaryEmbedding<float> a(qwen3);
  const std::vector<float> a_expected = {0x1.0p+0f,       0x1.94c584p-3f, 0x1.99999ap-6f, 0x1.030dc6p-7f,
                                         0x1.47ae14p-9f,  0x1.9e7c70p-11f, 0x1.0624dep-12f, 0x1.4b96c0p-14f};
  ASSERT_EQ(a.inv_freq().size(), 8);
  for (Index i = 0; i < 8; ++i) EXPECT_EQ(a.inv_freq()[i], a_expected[static_cast<std::size_t>(i)]) << i;
  EXPECT_EQ(a.attention_scaling(), static_cast<float>(1.138629436111989));

  auto deepseek = tiny_config("llama", {{"hidden_size", 64},
                                        {"num_attention_heads", 4},
                                        {"max_position_embeddings", 256},
                                        {"rope_theta", 500000.0},
                                        {"rope_scaling",
                                         {{"rope_type", "yarn"},
                                          {"factor", 8.0},
                                          {"original_max_position_embeddings", 16},
                                          {"mscale", 1.0},
                                          {"mscale_all_dim", 0.5},
                                          {"beta_fast", 16},
                                          {"beta_slow", 2},
                                          {"truncate", false}}}});
  EXPECT_EQ(HfModelConfig::from_json(deepseek.to_json()), deepseek);  // the YaRN keys round-trip
  const RotaryEmbedding<float> b(deepseek);
  const std::vector<float> b_expected = {0x1.0p+0f,        0x1.8d2760p-6f,  0x1.341190p-8f,  0x1.ddee9ep-11f,
                                         0x1.72ba42p-13f,  0x1.1f91f0p-15f, 0x1.be2188p-18f, 0x1.5a0f4ep-20f};
  for (Index i = 0; i < 8; ++i) EXPECT_EQ(b.inv_freq()[i], b_expected[static_cast<std::size_t>(i)]) << i;
  EXPECT_EQ(b.attention_scaling(), static_cast<float>(1.094179988101349));

  // The scale multiplies the tables.
  verl::RowMatrix<float> cos, sin;
  const std::vector<std::int64_t> positions = {0, 5};
  a.tables(positions, cos, sin);
  EXPECT_EQ(cos(0, 0), a.attention_scaling());
  EXPECT_EQ(sin(0, 3), 0.0f);
  EXPECT_NEAR(cos(1, 1) * cos(1, 1) + sin(1, 1) * sin(1, 1), a.attention_scaling() * a.attention_scaling(), 1e-5);
}

// A minimal user model: satisfying the concept is all a trainer needs.
struct UserModel {
  using scalar_type = float;
  Index vocab_size() const { return 4; }
  CausalLMOutput<float> forward(const TokenBatch&, const ForwardOptions&) { return {}; }
  void backward(const CausalLMCotangents<float>&) {}
  template <class Fn>
  void for_each_parameter(Fn&&) {}
  void zero_grad() {}
  StateDict state_dict() const { return {}; }
  void load_state_dict(const StateDict&) {}
};

TEST(ModelConcepts, AreSatisfiedByTheReferenceModelsAndUserTypes) {
  static_assert(CausalLM<Transformer>);
  static_assert(CausalLM<UserModel>);
  static_assert(check_causal_lm<UserModel>());
  static_assert(ValueModel<TransformerCritic>);
  static_assert(!ValueModel<Transformer>);
  static_assert(!CausalLM<TransformerCritic>);
  static_assert(!CausalLM<int>);
  SUCCEED();
}

}  // namespace

// Sliding-window attention against a dense masked softmax, across query blocks (64 queries) and
// with cached keys (key_offset), forward and backward; window 0 is plain causal attention.
TEST(Attention, SlidingWindowMatchesADenseMaskedSoftmax) {
  using verl::model::detail::attention_backward_head;
  using verl::model::detail::attention_forward_head;
  const Index d = 3;
  std::mt19937_64 rng(21);
  std::normal_distribution<double> normal(0.0, 1.0);
  for (const Index offset : {Index{0}, Index{37}}) {
    for (const Index window : {Index{0}, Index{1}, Index{5}, Index{64}, Index{65}, Index{300}}) {
      const Index queries = 150, keys = offset + queries;
      MatrixD q(queries, d), k(keys, d), v(keys, d), d_out(queries, d);
      for (auto* m : {&q, &k, &v, &d_out})
        for (Index i = 0; i < m->size(); ++i) m->data()[i] = normal(rng);
      const double scale = 0.7;
      // Dense reference: P = softmax(scale q k^T) over the visible keys.
      MatrixD p = MatrixD::Zero(queries, keys);
      for (Index i = 0; i < queries; ++i) {
        const Index end = offset + i + 1, first = window > 0 ? std::max<Index>(0, end - window) : 0;
        double max = -1e300;
        for (Index j = first; j < end; ++j) max = std::max(max, scale * q.row(i).dot(k.row(j)));
        double sum = 0;
        for (Index j = first; j < end; ++j) sum += p(i, j) = std::exp(scale * q.row(i).dot(k.row(j)) - max);
        p.row(i) /= sum;
      }
      const MatrixD expected = p * v;
      MatrixD out(queries, d);
      std::vector<double> lse(static_cast<std::size_t>(queries)), scratch;
      attention_forward_head<double>({q.data(), d}, verl::cpu::transpose_of(k.data(), d), {v.data(), d}, queries, offset, d, scale,
                                     {out.data(), d}, lse.data(), 1, scratch, window);
      EXPECT_LT((out - expected).cwiseAbs().maxCoeff(), 1e-12) << "offset " << offset << " window " << window;
      if (offset != 0) continue;  // backward runs on whole sequences
      // dS = P (dP - rowsum(P dP)) scale, dP = dO v^T; dq = dS k, dk = dS^T q, dv = P^T dO.
      const MatrixD dp = d_out * v.transpose();
      MatrixD ds(queries, keys);
      for (Index i = 0; i < queries; ++i) {
        const double centre = p.row(i).dot(dp.row(i));
        for (Index j = 0; j < keys; ++j) ds(i, j) = p(i, j) * (dp(i, j) - centre) * scale;
      }
      MatrixD dq(queries, d), dk = MatrixD::Zero(keys, d), dv = MatrixD::Zero(keys, d);
      attention_backward_head<double>({q.data(), d}, {k.data(), d}, {v.data(), d}, {out.data(), d}, {d_out.data(), d},
                                      lse.data(), 1, queries, d, scale, {dq.data(), d}, {dk.data(), d}, {dv.data(), d},
                                      scratch, window);
      EXPECT_LT((dq - ds * k).cwiseAbs().maxCoeff(), 1e-12) << "window " << window;
      EXPECT_LT((dk - ds.transpose() * q).cwiseAbs().maxCoeff(), 1e-12) << "window " << window;
      EXPECT_LT((dv - p.transpose() * d_out).cwiseAbs().maxCoeff(), 1e-12) << "window " << window;
    }
  }
}
