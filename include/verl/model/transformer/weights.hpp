// The parameters of the reference Llama / Qwen2 / Qwen3 transformer, named as in Hugging Face checkpoints
// ("model.layers.3.self_attn.q_proj.weight", ...), each with its gradient buffer.
#pragma once

#include <cmath>
#include <cstdint>
#include <numbers>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "verl/core/error.hpp"
#include "verl/core/tensor.hpp"
#include "verl/model/causal_lm.hpp"
#include "verl/model/hf_config.hpp"

namespace verl::model {

/// A parameter: its name, its torch shape, its value and (once gradients are enabled) its
/// gradient. Rank-1 parameters are stored as one row (1, n).
template <class Scalar>
struct ParameterTensor {
  std::string name;
  std::vector<std::int64_t> shape;
  RowMatrix<Scalar> value;
  RowMatrix<Scalar> grad;  ///< empty until gradients are enabled
  /// torch's requires_grad=False: enable_grad() allocates nothing, and backward passes skip this
  /// tensor's gradient (an empty gradient means none is wanted). LoRA freezes the base this way.
  bool frozen = false;

  [[nodiscard]] bool present() const { return !shape.empty(); }

  static ParameterTensor matrix(std::string name, Index rows, Index cols) {
    return {std::move(name), {rows, cols}, RowMatrix<Scalar>::Zero(rows, cols), {}};
  }
  static ParameterTensor vector(std::string name, Index size) {
    return {std::move(name), {size}, RowMatrix<Scalar>::Zero(1, size), {}};
  }

  Parameter<Scalar> view() {
    return {name, shape, {value.data(), static_cast<std::size_t>(value.size())},
            {grad.data(), static_cast<std::size_t>(grad.size())}};
  }
  Parameter<const Scalar> view() const {
    return {name, shape, {value.data(), static_cast<std::size_t>(value.size())},
            {grad.data(), static_cast<std::size_t>(grad.size())}};
  }
  void enable_grad() {
    if (frozen) return;
    if (present() && grad.size() != value.size()) grad = RowMatrix<Scalar>::Zero(value.rows(), value.cols());
  }
  void zero_grad() {
    enable_grad();
    if (grad.size() > 0) grad.setZero();
  }
  /// FSDP's resharding (the flat parameter's storage resized to 0): frees the values and the
  /// gradient; the name and shape stay, so that allocate_storage can give them back.
  void release_storage() {
    value = RowMatrix<Scalar>();
    grad = RowMatrix<Scalar>();
  }
  /// Values of the tensor's shape again (their contents unspecified: the caller fills them).
  void allocate_storage() {
    if (!present() || value.size() > 0) return;
    Index rows = 1;
    for (std::size_t d = 0; d + 1 < shape.size(); ++d) rows *= shape[d];
    value.resize(rows, shape.back());
  }
};

/// One decoder layer. Bias tensors and the q/k norms are absent (no shape) where the config has
/// none.
template <class Scalar>
struct DecoderLayerWeights {
  ParameterTensor<Scalar> input_layernorm, q_proj, q_bias, k_proj, k_bias, v_proj, v_bias, o_proj, o_bias;
  ParameterTensor<Scalar> q_norm, k_norm;  ///< (head_dim): Qwen3's per-head RMSNorm weights
  ParameterTensor<Scalar> post_attention_layernorm, gate_proj, gate_bias, up_proj, up_bias, down_proj, down_bias;

  DecoderLayerWeights() = default;
  DecoderLayerWeights(const HfModelConfig& c, Index layer) {
    const std::string p = fmt::format("model.layers.{}.", layer);
    const Index h = c.hidden_size, q = c.num_attention_heads * c.head_dim, kv = c.num_key_value_heads * c.head_dim,
                i = c.intermediate_size;
    input_layernorm = ParameterTensor<Scalar>::vector(p + "input_layernorm.weight", h);
    q_proj = ParameterTensor<Scalar>::matrix(p + "self_attn.q_proj.weight", q, h);
    k_proj = ParameterTensor<Scalar>::matrix(p + "self_attn.k_proj.weight", kv, h);
    v_proj = ParameterTensor<Scalar>::matrix(p + "self_attn.v_proj.weight", kv, h);
    o_proj = ParameterTensor<Scalar>::matrix(p + "self_attn.o_proj.weight", h, q);
    if (c.qkv_bias) {
      q_bias = ParameterTensor<Scalar>::vector(p + "self_attn.q_proj.bias", q);
      k_bias = ParameterTensor<Scalar>::vector(p + "self_attn.k_proj.bias", kv);
      v_bias = ParameterTensor<Scalar>::vector(p + "self_attn.v_proj.bias", kv);
    }
    if (c.o_proj_bias) o_bias = ParameterTensor<Scalar>::vector(p + "self_attn.o_proj.bias", h);
    if (c.qk_norm) {
      q_norm = ParameterTensor<Scalar>::vector(p + "self_attn.q_norm.weight", c.head_dim);
      k_norm = ParameterTensor<Scalar>::vector(p + "self_attn.k_norm.weight", c.head_dim);
    }
    post_attention_layernorm = ParameterTensor<Scalar>::vector(p + "post_attention_layernorm.weight", h);
    gate_proj = ParameterTensor<Scalar>::matrix(p + "mlp.gate_proj.weight", i, h);
    up_proj = ParameterTensor<Scalar>::matrix(p + "mlp.up_proj.weight", i, h);
    down_proj = ParameterTensor<Scalar>::matrix(p + "mlp.down_proj.weight", h, i);
    if (c.mlp_bias) {
      gate_bias = ParameterTensor<Scalar>::vector(p + "mlp.gate_proj.bias", i);
      up_bias = ParameterTensor<Scalar>::vector(p + "mlp.up_proj.bias", i);
      down_bias = ParameterTensor<Scalar>::vector(p + "mlp.down_proj.bias", h);
    }
  }

  /// Every present tensor, in the order transformers registers them.
  template <class Self, class Fn>
  static void for_each(Self& self, Fn&& fn) {
    for (auto* t : {&self.q_proj, &self.q_bias, &self.k_proj, &self.k_bias, &self.v_proj, &self.v_bias, &self.o_proj,
                    &self.o_bias, &self.q_norm, &self.k_norm, &self.gate_proj, &self.gate_bias, &self.up_proj, &self.up_bias, &self.down_proj,
                    &self.down_bias, &self.input_layernorm, &self.post_attention_layernorm}) {
      if (t->present()) fn(*t);
    }
  }
};

/// The decoder body: embeddings, layers and the final norm.
template <class Scalar>
struct DecoderWeights {
  ParameterTensor<Scalar> embed_tokens;
  std::vector<DecoderLayerWeights<Scalar>> layers;
  ParameterTensor<Scalar> norm;

  DecoderWeights() = default;
  explicit DecoderWeights(const HfModelConfig& c)
      : embed_tokens(ParameterTensor<Scalar>::matrix("model.embed_tokens.weight", c.vocab_size, c.hidden_size)),
        norm(ParameterTensor<Scalar>::vector("model.norm.weight", c.hidden_size)) {
    layers.reserve(static_cast<std::size_t>(c.num_hidden_layers));
    for (Index l = 0; l < c.num_hidden_layers; ++l) layers.emplace_back(c, l);
  }

  template <class Self, class Fn>
  static void for_each(Self& self, Fn&& fn) {
    // A pipeline stage's weights hold the embedding only on the first stage, the norm on the last.
    if (self.embed_tokens.present()) fn(self.embed_tokens);
    for (auto& layer : self.layers) DecoderLayerWeights<Scalar>::for_each(layer, fn);
    if (self.norm.present()) fn(self.norm);
  }
};

namespace detail {

/// splitmix64: a tiny, portable generator (std::normal_distribution differs between standard
/// libraries, and initial weights must be the same everywhere for a seed).
struct SplitMix64 {
  std::uint64_t state;
  std::uint64_t next() {
    std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  /// Uniform in (0, 1).
  double uniform() { return (static_cast<double>(next() >> 11) + 0.5) * 0x1.0p-53; }
  /// Standard normal (Box-Muller).
  double normal() {
    const double u = uniform(), v = uniform();
    return std::sqrt(-2.0 * std::log(u)) * std::cos(2.0 * std::numbers::pi * v);
  }
};

}  // namespace detail

/// How fresh weights are drawn (transformers' _init_weights: linear and embedding weights
/// N(0, initializer_range), biases 0, norm weights 1, the padding token's embedding row 0).
struct WeightInit {
  double initializer_range = 0.02;
  std::uint64_t seed = 0;
};

namespace detail {

/// Fills `tensor` by its role (norm, bias or weight), from a stream keyed by its name so that one
/// tensor's values do not depend on which other tensors exist.
template <class Scalar>
void init_parameter(ParameterTensor<Scalar>& tensor, const WeightInit& init) {
  if (tensor.name.ends_with("norm.weight")) {
    tensor.value.setOnes();
    return;
  }
  if (tensor.name.ends_with(".bias")) {
    tensor.value.setZero();
    return;
  }
  std::uint64_t key = init.seed;
  for (const char ch : tensor.name) key = key * 1099511628211ull + static_cast<unsigned char>(ch);
  SplitMix64 rng{key};
  for (Index i = 0; i < tensor.value.size(); ++i) {
    tensor.value.data()[i] = static_cast<Scalar>(init.initializer_range * rng.normal());
  }
}

}  // namespace detail
}  // namespace verl::model
