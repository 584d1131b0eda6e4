// DecoderBody's layer parameter hooks (FSDP's units): the body calls them around each layer in
// forward and in reverse in backward, and touches a layer's tensors only between them: a hook
// that frees each layer's values after its forward and its gradients after its backward (keeping
// copies, as a sharded trainer keeps shards) gives the unhooked model's outputs and gradients bit
// for bit.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "verl/model/causal_lm.hpp"
#include "verl/model/transformer/critic.hpp"
#include "verl/model/transformer/layer_parameter_hooks.hpp"
#include "verl/model/transformer/transformer.hpp"

namespace {

using namespace verl;
using namespace verl::model;

HfModelConfig hook_config() {
  const nlohmann::json json = {{"model_type", "qwen2"},  {"hidden_size", 8},  {"intermediate_size", 12},
                               {"num_hidden_layers", 3}, {"num_attention_heads", 2}, {"num_key_value_heads", 1},
                               {"vocab_size", 19},       {"rms_norm_eps", 1e-5},     {"max_position_embeddings", 32},
                               {"tie_word_embeddings", false}};
  return HfModelConfig::from_json(json, "layer hooks test config");
}

TokenBatch hook_batch() {
  MatrixI64 ids(2, 6);
  MatrixF mask(2, 6);
  ids << 0, 3, 9, 4, 17, 2,  //
      5, 8, 1, 11, 0, 0;
  mask << 0, 1, 1, 1, 1, 1,  //
      1, 1, 1, 1, 0, 0;
  return TokenBatch::padded(ids, mask);
}

/// Keeps each layer's values aside and frees the layer's tensors whenever the body is not using
/// them; records the calls; collects each layer's gradients after its backward.
template <class Model>
class FreeingHooks final : public LayerParameterHooks {
 public:
  explicit FreeingHooks(Model& model) : model_(&model) {
    for (std::size_t l = 0; l < layers().size(); ++l)
      for_layer(l, [&](ParameterTensor<float>& t) { kept_[t.name] = t.value; });
    for (std::size_t l = 0; l < layers().size(); ++l) free(l);
  }
  void before_forward(std::size_t layer) override {
    restore(layer, false);
    calls.push_back("f+" + std::to_string(layer));
  }
  void after_forward(std::size_t layer) override {
    free(layer);
    calls.push_back("f-" + std::to_string(layer));
  }
  void before_backward(std::size_t layer) override {
    restore(layer, true);
    calls.push_back("b+" + std::to_string(layer));
  }
  void after_backward(std::size_t layer) override {
    for_layer(layer, [&](ParameterTensor<float>& t) { grads[t.name] = t.grad; });
    free(layer);
    calls.push_back("b-" + std::to_string(layer));
  }
  /// Gives every layer its values back (to compare with the unhooked model afterwards).
  void restore_all() {
    for (std::size_t l = 0; l < layers().size(); ++l) restore(l, false);
  }

  std::vector<std::string> calls;
  std::map<std::string, RowMatrix<float>> grads;

 private:
  auto& layers() { return model_->body().weights().layers; }
  template <class Fn>
  void for_layer(std::size_t l, Fn&& fn) {
    DecoderLayerWeights<float>::for_each(layers()[l], fn);
  }
  void free(std::size_t l) {
    for_layer(l, [](ParameterTensor<float>& t) { t.release_storage(); });
  }
  void restore(std::size_t l, bool with_grad) {
    for_layer(l, [&](ParameterTensor<float>& t) {
      t.allocate_storage();
      t.value = kept_.at(t.name);
      if (with_grad) t.zero_grad();
    });
  }
  Model* model_;
  std::map<std::string, RowMatrix<float>> kept_;
};

struct PolicyPass {
  CausalLMOutput<float> out;
  std::map<std::string, RowMatrix<float>> grads;
};

PolicyPass policy_pass(Transformer& model, const TokenBatch& batch, FreeingHooks<Transformer>* hooks) {
  const MatrixI64 targets = next_token_targets(batch);
  const Index slots = batch.layout_size();
  std::vector<float> w(static_cast<std::size_t>(slots)), u(w.size());
  std::mt19937_64 rng(3);
  std::normal_distribution<double> normal(0.0, 1.0);
  for (auto& x : w) x = static_cast<float>(normal(rng));
  for (auto& x : u) x = static_cast<float>(0.3 * normal(rng));
  model.body().set_layer_parameter_hooks(hooks);
  model.zero_grad();
  PolicyPass pass;
  pass.out = model.forward(batch, {.targets = {targets.data(), static_cast<std::size_t>(targets.size())},
                                   .return_entropy = true,
                                   .keep_activations = true});
  model.backward({.log_probs = w, .entropy = u});
  model.body().set_layer_parameter_hooks(nullptr);
  if (hooks != nullptr) hooks->restore_all();
  model.for_each_tensor([&](ParameterTensor<float>& t) {
    if (t.grad.size() > 0) pass.grads[t.name] = t.grad;
  });
  if (hooks != nullptr)
    for (const auto& [name, grad] : hooks->grads) pass.grads[name] = grad;
  return pass;
}

TEST(LayerParameterHooks, CalledAroundEachLayerForwardThenBackwardInReverse) {
  Transformer model = Transformer::random(hook_config(), {.initializer_range = 0.3, .seed = 7}, {.num_threads = 1});
  FreeingHooks<Transformer> hooks(model);
  (void)policy_pass(model, hook_batch(), &hooks);
  const std::vector<std::string> expected = {"f+0", "f-0", "f+1", "f-1", "f+2", "f-2",
                                             "b+2", "b-2", "b+1", "b-1", "b+0", "b-0"};
  EXPECT_EQ(hooks.calls, expected);
}

TEST(LayerParameterHooks, LayersFreedOutsideTheirCallsGiveTheSameOutputsAndGradients) {
  const TokenBatch batch = hook_batch();
  Transformer plain = Transformer::random(hook_config(), {.initializer_range = 0.3, .seed = 7}, {.num_threads = 2});
  Transformer hooked = Transformer::random(hook_config(), {.initializer_range = 0.3, .seed = 7}, {.num_threads = 2});
  const PolicyPass expected = policy_pass(plain, batch, nullptr);
  FreeingHooks<Transformer> hooks(hooked);
  const PolicyPass got = policy_pass(hooked, batch, &hooks);
  EXPECT_EQ(got.out.log_probs, expected.out.log_probs);
  EXPECT_EQ(got.out.entropy, expected.out.entropy);
  ASSERT_EQ(got.grads.size(), expected.grads.size());
  for (const auto& [name, grad] : expected.grads) {
    ASSERT_TRUE(got.grads.contains(name)) << name;
    EXPECT_TRUE(got.grads.at(name) == grad) << name;
  }
}

TEST(LayerParameterHooks, TheCriticsBodyCallsThemToo) {
  using Critic = BasicTransformerCritic<float>;
  const TokenBatch batch = hook_batch();
  Critic plain = Critic::random(hook_config(), {.initializer_range = 0.3, .seed = 9}, {.num_threads = 1});
  Critic hooked = Critic::random(hook_config(), {.initializer_range = 0.3, .seed = 9}, {.num_threads = 1});
  const auto expected = plain.forward(batch, ValueForwardOptions{.keep_activations = true});
  FreeingHooks<Critic> hooks(hooked);
  hooked.body().set_layer_parameter_hooks(&hooks);
  const auto got = hooked.forward(batch, ValueForwardOptions{.keep_activations = true});
  EXPECT_EQ(got.values, expected.values);
  std::vector<float> d_values(expected.values.size(), 0.5f);
  plain.zero_grad();
  hooked.zero_grad();
  plain.backward(ValueCotangents<float>{.values = d_values});
  hooked.backward(ValueCotangents<float>{.values = d_values});
  hooked.body().set_layer_parameter_hooks(nullptr);
  ASSERT_EQ(hooks.calls.size(), 12u);
  plain.for_each_tensor([&](ParameterTensor<float>& t) {
    if (t.name.starts_with("model.layers.")) {
      ASSERT_TRUE(hooks.grads.contains(t.name)) << t.name;
      EXPECT_TRUE(hooks.grads.at(t.name) == t.grad) << t.name;
    }
  });
}

}  // namespace
