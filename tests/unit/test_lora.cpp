// LoRA on the reference transformer: adapter gradients against central finite differences (double
// model), a frozen base that takes no gradient, the disabled adapter equal to the base model bit
// for bit, merged weights equal to the adapter's forward pass, the KV-cache path, PEFT's module
// selection (all-linear, lists, exclude_modules) and its errors.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "verl/model/transformer/lora.hpp"
#include "../support/error_message.hpp"

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

/// Qwen3's q/k norms and biases: the adapter's q/k terms pass through the per-head norms.
HfModelConfig qwen3_config() {
  return tiny_config("qwen3", {{"attention_bias", true}, {"head_dim", 4}, {"num_attention_heads", 4},
                               {"num_key_value_heads", 2}, {"rope_theta", 1e4}});
}
HfModelConfig llama_config() { return tiny_config("llama", {{"mlp_bias", true}, {"attention_bias", true}}); }

template <class Scalar>
BasicTransformer<Scalar> random_base(const HfModelConfig& config, std::uint64_t seed, unsigned threads = 1) {
  auto model = BasicTransformer<Scalar>(config, {.num_threads = threads});
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  model.for_each_parameter([&](const auto& p) {
    const bool norm = p.name.ends_with("norm.weight");
    for (auto& v : p.value) v = static_cast<Scalar>(norm ? 1.0 + 0.2 * normal(rng) : 0.5 * normal(rng));
  });
  return model;
}

/// Non-zero B (a fresh adapter has B = 0, which would hide B's role in every check).
template <class Model>
void randomize_adapters(Model& model, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  model.for_each_parameter([&](const auto& p) {
    for (auto& v : p.value) v = static_cast<std::remove_cvref_t<decltype(v)>>(0.3 * normal(rng));
  });
}

TokenBatch padded_batch(MatrixI64& ids, MatrixF& mask) {
  ids.resize(3, 7);
  mask.resize(3, 7);
  ids << 0, 0, 5, 9, 3, 17, 2,  //
      1, 4, 8, 22, 6, 0, 0,     //
      0, 7, 7, 13, 10, 11, 0;
  mask << 0, 0, 1, 1, 1, 1, 1,  //
      1, 1, 1, 1, 1, 0, 0,      //
      0, 1, 1, 1, 1, 1, 0;
  return TokenBatch::padded(ids, mask);
}

struct Loss {
  MatrixD w, u;
  MatrixI64 targets;
  double value(const CausalLMOutput<double>& out) const {
    return (w.array() * out.log_probs.array()).sum() + (u.array() * out.entropy.array()).sum();
  }
  ForwardOptions options(bool keep) const {
    return {.targets = {targets.data(), static_cast<std::size_t>(targets.size())},
            .return_entropy = true,
            .temperature = 0.7f,
            .keep_activations = keep};
  }
};

Loss make_loss(const TokenBatch& batch, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  Loss loss{MatrixD(batch.rows(), batch.cols()), MatrixD(batch.rows(), batch.cols()), next_token_targets(batch)};
  for (Index i = 0; i < loss.w.size(); ++i) loss.w.data()[i] = normal(rng);
  for (Index i = 0; i < loss.u.size(); ++i) loss.u.data()[i] = 0.3 * normal(rng);
  return loss;
}

void check_adapter_gradients(LoraModel<BasicTransformer<double>>& model, const TokenBatch& batch, const Loss& loss,
                             int min_checked) {
  model.zero_grad();
  model.forward(batch, loss.options(true));
  model.backward({.log_probs = {loss.w.data(), static_cast<std::size_t>(loss.w.size())},
                  .entropy = {loss.u.data(), static_cast<std::size_t>(loss.u.size())}});
  std::vector<std::vector<double>> analytic;
  model.for_each_parameter([&](const Parameter<double>& p) { analytic.emplace_back(p.grad.begin(), p.grad.end()); });
  const double h = 1e-5;
  std::size_t k = 0;
  int checked = 0;
  double largest = 0;
  model.for_each_parameter([&](const Parameter<double>& p) {
    const auto& expected = analytic[k++];
    ASSERT_EQ(expected.size(), p.value.size()) << p.name;
    double worst = 0;
    for (std::size_t i = 0; i < p.value.size(); ++i) {
      const double saved = p.value[i];
      p.value[i] = saved + h;
      const double plus = loss.value(model.forward(batch, loss.options(false)));
      p.value[i] = saved - h;
      const double minus = loss.value(model.forward(batch, loss.options(false)));
      p.value[i] = saved;
      const double numeric = (plus - minus) / (2 * h);
      worst = std::max(worst, std::abs(numeric - expected[i]) / std::max(1.0, std::abs(numeric)));
      largest = std::max(largest, std::abs(numeric));
      ++checked;
    }
    EXPECT_LT(worst, 1e-6) << p.name;
  });
  EXPECT_GE(checked, min_checked);
  EXPECT_GT(largest, 1e-2);  // the check compares real gradients, not zeros
}

TEST(Lora, AdapterGradientsMatchFiniteDifferences) {
  for (const auto& config : {qwen3_config(), llama_config()}) {
    LoraModel<BasicTransformer<double>> model(random_base<double>(config, 1, 2), {.rank = 3, .alpha = 5});
    randomize_adapters(model, 2);
    MatrixI64 ids;
    MatrixF mask;
    const auto batch = padded_batch(ids, mask);
    check_adapter_gradients(model, batch, make_loss(batch, 3), 300);
  }
}

TEST(Lora, PackedBatchAndExplicitTargetsMatchFiniteDifferences) {
  LoraModel<BasicTransformer<double>> model(random_base<double>(qwen3_config(), 4),
                                            {.rank = 2, .alpha = 4, .target_modules = {"v_proj", "mlp.down_proj"}});
  randomize_adapters(model, 5);
  const std::vector<TokenId> ids = {3, 4, 5, 6, 7, 8, 9, 10, 11};
  const std::vector<std::int64_t> cu = {0, 4, 9};
  const auto batch = TokenBatch::packed(ids, cu);
  check_adapter_gradients(model, batch, make_loss(batch, 6), 144);  // (2x8 + 4x2 + 2x12 + 8x2) x 2 layers
}

TEST(Lora, TheFrozenBaseTakesNoGradientAndIsNotAParameter) {
  auto base = random_base<double>(llama_config(), 7);
  const StateDict before = base.state_dict();
  LoraModel<BasicTransformer<double>> model(std::move(base), {.rank = 4, .alpha = 8});
  randomize_adapters(model, 8);
  // 2 layers x 7 modules, A (4, in) and B (out, 4) each, named as PEFT saves them.
  std::vector<std::string> names;
  model.for_each_parameter([&](const Parameter<double>& p) { names.emplace_back(p.name); });
  ASSERT_EQ(names.size(), 28u);
  EXPECT_EQ(names[0], "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight");
  EXPECT_EQ(names[1], "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight");
  EXPECT_EQ(names[27], "base_model.model.model.layers.1.mlp.down_proj.lora_B.weight");
  const auto h = 8, i = 12, q = 8, kv = 4;  // hidden, intermediate, heads*D, kv_heads*D
  const Index expected = 2 * 4 * ((h + q) + (h + kv) * 2 + (q + h) + (h + i) * 2 + (i + h));
  EXPECT_EQ(parameter_count(model), expected);

  MatrixI64 ids;
  MatrixF mask;
  const auto batch = padded_batch(ids, mask);
  const Loss loss = make_loss(batch, 9);
  model.zero_grad();
  model.forward(batch, loss.options(true));
  model.backward({.log_probs = {loss.w.data(), static_cast<std::size_t>(loss.w.size())}});
  model.base().for_each_parameter([&](const Parameter<const double>& p) {
    EXPECT_TRUE(p.grad.empty()) << p.name << " has a gradient buffer";
  });
  EXPECT_EQ(model.base().state_dict(), before);
  double adapter_grad = 0;
  model.for_each_parameter([&](const Parameter<double>& p) {
    for (const double g : p.grad) adapter_grad += std::abs(g);
  });
  EXPECT_GT(adapter_grad, 0.0);
}

TEST(Lora, DisabledAdapterIsTheBaseModelExactlyAndSharesItsWeights) {
  for (const unsigned threads : {1u, 2u}) {
    auto base = random_base<float>(qwen3_config(), 10, threads);
    const BasicTransformer<float> plain = base;
    LoraTransformer model(std::move(base), {.rank = 4, .alpha = 16});
    MatrixI64 ids;
    MatrixF mask;
    const auto batch = padded_batch(ids, mask);
    const MatrixI64 targets = next_token_targets(batch);
    const ForwardOptions options{.targets = {targets.data(), static_cast<std::size_t>(targets.size())},
                                 .return_logits = true};
    auto copy = plain;
    const auto expected = copy.forward(batch, options);
    // A fresh adapter (B = 0) leaves the outputs unchanged.
    EXPECT_EQ(model.forward(batch, options).logits, expected.logits);
    randomize_adapters(model, 11);
    const auto adapted = model.forward(batch, options);
    EXPECT_GT((adapted.logits - expected.logits).cwiseAbs().maxCoeff(), 1e-3f);
    const LoraTransformer reference = model.with_adapter_disabled();
    EXPECT_TRUE(reference.shares_base_with(model));
    auto ref = reference;
    const auto disabled = ref.forward(batch, options);
    EXPECT_EQ(disabled.logits, expected.logits);
    EXPECT_EQ(disabled.log_probs, expected.log_probs);
    EXPECT_TRUE(model.adapter_enabled());
    EXPECT_EQ(model.forward(batch, options).logits, adapted.logits);  // the actor is unaffected
    EXPECT_THROW(ref.backward({}), verl::InvalidArgument);
  }
}

TEST(Lora, MergedWeightsGiveTheAdaptersOutputs) {
  LoraTransformer model(random_base<float>(llama_config(), 12), {.rank = 4, .alpha = 32});
  randomize_adapters(model, 13);
  MatrixI64 ids;
  MatrixF mask;
  const auto batch = padded_batch(ids, mask);
  const MatrixI64 targets = next_token_targets(batch);
  const ForwardOptions options{.targets = {targets.data(), static_cast<std::size_t>(targets.size())},
                               .return_logits = true};
  const auto adapted = model.forward(batch, options);
  auto merged = model.merged();
  const auto folded = merged.forward(batch, options);
  const float scale = (folded.logits.cwiseAbs().maxCoeff());
  EXPECT_LT((folded.logits - adapted.logits).cwiseAbs().maxCoeff(), 1e-5f * std::max(1.0f, scale));
  EXPECT_LT((folded.log_probs - adapted.log_probs).cwiseAbs().maxCoeff(), 1e-4f);
  // The merge changed the weights it adapted, and merged() leaves a trainable model.
  EXPECT_NE(merged.state_dict(), model.base().state_dict());
  merged.zero_grad();
  std::size_t with_grad = 0;
  merged.for_each_parameter([&](const auto& p) { with_grad += !p.grad.empty(); });
  EXPECT_GT(with_grad, 0u);
}

TEST(Lora, KvCacheDecodingIncludesTheAdapter) {
  LoraTransformer model(random_base<float>(qwen3_config(), 14), {.rank = 2, .alpha = 4});
  randomize_adapters(model, 15);
  const std::vector<TokenId> prompt = {3, 9, 4, 17, 2};
  const std::vector<std::int64_t> cu = {0, 5};
  const auto batch = TokenBatch::packed(prompt, cu);
  const auto full = model.forward(batch, {.return_logits = true});
  const std::vector<Index> capacity = {8};
  auto cache = model.make_kv_cache(capacity);
  const std::vector<Index> sequences = {0};
  const std::vector<std::int64_t> offsets = {0, 4}, positions = {0, 1, 2, 3};
  model.extend(cache, sequences, std::span<const TokenId>(prompt).first(4), offsets, positions);
  const std::vector<std::int64_t> one = {0, 1}, last_position = {4};
  const MatrixF last = model.extend(cache, sequences, std::span<const TokenId>(prompt).subspan(4, 1), one, last_position);
  EXPECT_LT((last.row(0) - full.logits.row(4)).cwiseAbs().maxCoeff(), 1e-4f);
}

TEST(Lora, TargetAndExcludeModulesSelectAsPeftDoes) {
  const auto count = [](LoraOptions options) {
    options.rank = 2;
    return lora_targets(options, 3).size();
  };
  EXPECT_EQ(count({}), 21u);  // all-linear: 7 per layer, never the LM head
  EXPECT_EQ(count({.target_modules = {"q_proj", "v_proj"}}), 6u);
  EXPECT_EQ(count({.target_modules = {"self_attn.o_proj"}}), 3u);
  EXPECT_EQ(count({.target_modules = {"model.layers.1.mlp.up_proj"}}), 1u);
  EXPECT_EQ(count({.exclude_modules = {"down_proj"}}), 18u);
  EXPECT_EQ(count({.exclude_modules = {"model.layers.0.self_attn.q_proj"}}), 20u);
  // "proj" is no module's name (suffixes match whole dotted names only).
  EXPECT_THROW(count({.target_modules = {"proj"}}), verl::InvalidArgument);
}

TEST(Lora, BadOptionsAreRefusedNamingTheKey) {
  using verl::test_support::message_of;
  const auto targets = [](LoraOptions options) { return lora_targets(options, 2, "actor_rollout_ref.model."); };
  EXPECT_NE(message_of([&] { targets({.rank = 0}); }).find("actor_rollout_ref.model.lora_rank: expected an integer > 0"),
            std::string::npos);
  EXPECT_NE(message_of([&] { targets({.rank = 2, .alpha = std::nan("")}); })
                .find("actor_rollout_ref.model.lora_alpha: expected a finite value > 0, got nan"),
            std::string::npos);
  EXPECT_NE(message_of([&] { targets({.rank = 2, .target_modules = {"lm_head"}}); })
                .find("actor_rollout_ref.model.target_modules: 'lm_head' matches no linear layer"),
            std::string::npos);
  EXPECT_NE(message_of([&] { targets({.rank = 2, .target_modules = {"all-linear", "q_proj"}}); })
                .find("expected 'all-linear' alone"),
            std::string::npos);
  EXPECT_NE(message_of([&] { targets({.rank = 2, .exclude_modules = {"qproj"}}); })
                .find("actor_rollout_ref.model.exclude_modules: 'qproj' matches no linear layer"),
            std::string::npos);
  EXPECT_NE(message_of([&] { targets({.rank = 2, .target_modules = {"q_proj"}, .exclude_modules = {"q_proj"}}); })
                .find("nothing to adapt"),
            std::string::npos);
}

TEST(Lora, AdapterStateDictRoundTripsStrictly) {
  LoraTransformer model(random_base<float>(llama_config(), 16), {.rank = 2, .alpha = 4});
  randomize_adapters(model, 17);
  const StateDict saved = model.state_dict();
  LoraTransformer other(random_base<float>(llama_config(), 16), {.rank = 2, .alpha = 4});
  EXPECT_NE(other.state_dict(), saved);
  other.load_state_dict(saved);
  EXPECT_EQ(other.state_dict(), saved);
  StateDict wrong = saved;
  wrong.erase(wrong.begin());
  EXPECT_THROW(other.load_state_dict(wrong), verl::InvalidArgument);
}

}  // namespace
