// LoRA (low-rank adaptation) on the reference transformer, with PEFT's semantics:
//
//   y = W x (+ b) + (lora_alpha / r) * B (A x)      A: (r, in), B: (out, r)
//
// on the chosen linear layers of every decoder layer (q/k/v/o, gate/up/down; "all-linear" is all
// of them and never the LM head, as in PEFT). The base weights are frozen (no gradient buffers, so
// no optimizer state either): LoraModel's parameters are the adapters alone, named as PEFT saves
// them ("base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"), which is what the
// optimizer, gradient clipping and trainer checkpoints see.
//
// The base model is held by a shared pointer: a copy of a LoraModel (say the reference policy,
// with_adapter_disabled()) shares the frozen base weights instead of duplicating them, as verl's
// ref_in_actor does when lora_rank > 0. merged() folds the adapters into a plain copy of the base
// (W + scale * B A) for saving as a Hugging Face folder or for generation elsewhere.
//
// A is drawn as PEFT's default (kaiming-uniform with a = sqrt(5): U(-1/sqrt(in), 1/sqrt(in))), B is
// zero, so a fresh adapter leaves the model's outputs unchanged.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "verl/config.hpp"
#include "verl/core/error.hpp"
#include "verl/core/tensor.hpp"
#include "verl/model/causal_lm.hpp"
#include "verl/model/transformer/detail/parameter_module.hpp"
#include "verl/model/transformer/detail/state_dict.hpp"
#include "verl/model/transformer/linear_adapter.hpp"
#include "verl/model/transformer/transformer.hpp"
#include "verl/model/transformer/weights.hpp"

namespace verl::model {

/// What to adapt and how (verl's model.lora_rank, lora_alpha, target_modules, exclude_modules).
struct LoraOptions {
  std::int64_t rank = 0;  ///< r; 0 means no LoRA
  double alpha = 16;      ///< lora_alpha: the adapter's output is scaled by alpha / r
  /// "all-linear", or module names matched against each linear layer's path as PEFT matches a
  /// list: the whole path, or its tail after a dot ("q_proj", "self_attn.q_proj",
  /// "model.layers.0.mlp.down_proj").
  std::vector<std::string> target_modules = {"all-linear"};
  /// Names matched the same way; a module they match gets no adapter.
  std::vector<std::string> exclude_modules = {};
  std::uint64_t seed = 0;  ///< draws A

  [[nodiscard]] double scaling() const { return alpha / static_cast<double>(rank); }
};

namespace detail {

inline bool module_matches(std::string_view path, std::string_view key) {
  return path == key || (path.size() > key.size() && path.ends_with(key) && path[path.size() - key.size() - 1] == '.');
}

/// The base tensor of a linear module.
template <class Scalar>
ParameterTensor<Scalar>& linear_weight(DecoderLayerWeights<Scalar>& layer, LinearModule module) {
  switch (module) {
    case LinearModule::q_proj: return layer.q_proj;
    case LinearModule::k_proj: return layer.k_proj;
    case LinearModule::v_proj: return layer.v_proj;
    case LinearModule::o_proj: return layer.o_proj;
    case LinearModule::gate_proj: return layer.gate_proj;
    case LinearModule::up_proj: return layer.up_proj;
    case LinearModule::down_proj: break;
  }
  return layer.down_proj;
}

}  // namespace detail

/// Checks the options; `key_prefix` is where they came from ("actor_rollout_ref.model.", "model."),
/// so that errors name the full key.
inline void validate_lora_options(const LoraOptions& options, std::string_view key_prefix = "") {
  VERL_CHECK_ARG(options.rank > 0, "{}lora_rank: expected an integer > 0 for LoRA, got {}", key_prefix, options.rank);
  VERL_CHECK_ARG(std::isfinite(options.alpha) && options.alpha > 0, "{}lora_alpha: expected a finite value > 0, got {}",
                 key_prefix, options.alpha);
  VERL_CHECK_ARG(!options.target_modules.empty(),
                 "{}target_modules: expected 'all-linear' or a list of module names, got an empty list", key_prefix);
  const bool all_linear = std::ranges::find(options.target_modules, "all-linear") != options.target_modules.end();
  VERL_CHECK_ARG(!all_linear || options.target_modules.size() == 1,
                 "{}target_modules: expected 'all-linear' alone or a list of module names, got [{}]", key_prefix,
                 fmt::join(options.target_modules, ", "));
}

/// The (layer, module) pairs that get an adapter, in layer order. Throws, naming the key, when a
/// target or exclude name matches no linear layer (PEFT does too: a typo would train nothing), or
/// when nothing is left to adapt.
inline std::vector<std::pair<Index, LinearModule>> lora_targets(const LoraOptions& options, Index num_layers,
                                                                std::string_view key_prefix = "") {
  validate_lora_options(options, key_prefix);
  const bool all_linear = options.target_modules.front() == "all-linear";
  auto matched_somewhere = [&](std::string_view key) {
    for (Index l = 0; l < num_layers; ++l)
      for (const auto m : linear_modules)
        if (detail::module_matches(module_path(l, m), key)) return true;
    return false;
  };
  if (!all_linear) {
    for (const auto& key : options.target_modules) {
      VERL_CHECK_ARG(matched_somewhere(key),
                     "{}target_modules: '{}' matches no linear layer; expected 'all-linear' or names among q_proj, "
                     "k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj (the LM head takes no adapter here)",
                     key_prefix, key);
    }
  }
  for (const auto& key : options.exclude_modules) {
    VERL_CHECK_ARG(matched_somewhere(key),
                   "{}exclude_modules: '{}' matches no linear layer; expected names among q_proj, k_proj, v_proj, "
                   "o_proj, gate_proj, up_proj, down_proj or paths like model.layers.0.mlp.down_proj",
                   key_prefix, key);
  }
  std::vector<std::pair<Index, LinearModule>> out;
  for (Index l = 0; l < num_layers; ++l) {
    for (const auto m : linear_modules) {
      const std::string path = module_path(l, m);
      const auto matches = [&](const std::vector<std::string>& keys) {
        return std::ranges::any_of(keys, [&](const std::string& k) { return detail::module_matches(path, k); });
      };
      if ((all_linear || matches(options.target_modules)) && !matches(options.exclude_modules)) out.emplace_back(l, m);
    }
  }
  VERL_CHECK_ARG(!out.empty(), "{}exclude_modules: excludes every module target_modules selects; nothing to adapt",
                 key_prefix);
  return out;
}

/// The adapters of one model: A and B per adapted module, and the hook DecoderBody calls.
template <class Scalar>
class LoraAdapters final : public LinearAdapter<Scalar> {
 public:
  struct Adapter {
    Index layer = 0;
    LinearModule module = LinearModule::q_proj;
    ParameterTensor<Scalar> a;  ///< lora_A.weight (r, in)
    ParameterTensor<Scalar> b;  ///< lora_B.weight (out, r)
  };

  LoraAdapters() = default;
  template <class Base>
  LoraAdapters(Base& base, const LoraOptions& options, std::string_view key_prefix)
      : scale_(static_cast<Scalar>(options.scaling())) {
    auto& layers = base.body().weights().layers;
    const auto layer_count = static_cast<Index>(layers.size());
    slots_.assign(static_cast<std::size_t>(layer_count) * linear_modules.size(), -1);
    for (const auto& [layer, module] : lora_targets(options, layer_count, key_prefix)) {
      const auto& weight = detail::linear_weight(layers[static_cast<std::size_t>(layer)], module).value;
      const std::string prefix = "base_model.model." + module_path(layer, module);
      slots_[slot(layer, module)] = static_cast<int>(adapters_.size());
      adapters_.push_back({layer, module, ParameterTensor<Scalar>::matrix(prefix + ".lora_A.weight", options.rank, weight.cols()),
                           ParameterTensor<Scalar>::matrix(prefix + ".lora_B.weight", weight.rows(), options.rank)});
    }
    init(options.seed);
  }

  /// A ~ U(-1/sqrt(in), 1/sqrt(in)) (kaiming-uniform, a = sqrt(5)), keyed by the tensor's name
  /// and `seed`; B = 0.
  void init(std::uint64_t seed) {
    for (auto& adapter : adapters_) {
      std::uint64_t key = seed;
      for (const char ch : adapter.a.name) key = key * 1099511628211ull + static_cast<unsigned char>(ch);
      detail::SplitMix64 rng{key};
      const double bound = 1.0 / std::sqrt(static_cast<double>(adapter.a.value.cols()));
      for (Index i = 0; i < adapter.a.value.size(); ++i)
        adapter.a.value.data()[i] = static_cast<Scalar>(bound * (2.0 * rng.uniform() - 1.0));
      adapter.b.value.setZero();
    }
  }

  [[nodiscard]] Scalar scale() const { return scale_; }
  [[nodiscard]] std::span<Adapter> adapters() { return adapters_; }
  [[nodiscard]] std::span<const Adapter> adapters() const { return adapters_; }

  void forward(Index layer, LinearModule module, const detail::ConstRef<Scalar>& x, detail::MutRef<Scalar> y) override {
    const Adapter* adapter = find(layer, module);
    if (adapter == nullptr) return;
    const RowMatrix<Scalar> low = x * adapter->a.value.transpose();  // (N, r)
    y.noalias() += scale_ * (low * adapter->b.value.transpose());
  }

  void backward(Index layer, LinearModule module, const detail::ConstRef<Scalar>& x, const detail::ConstRef<Scalar>& dy,
                detail::MutRef<Scalar> dx) override {
    Adapter* adapter = find(layer, module);
    if (adapter == nullptr) return;
    adapter->a.enable_grad();
    adapter->b.enable_grad();
    const RowMatrix<Scalar> low = x * adapter->a.value.transpose();                // (N, r), recomputed
    const RowMatrix<Scalar> d_low = scale_ * (dy * adapter->b.value);             // (N, r)
    adapter->b.grad.noalias() += scale_ * (dy.transpose() * low);                  // (out, r)
    adapter->a.grad.noalias() += d_low.transpose() * x;                            // (r, in)
    dx.noalias() += d_low * adapter->a.value;                                      // (N, in)
  }

  template <class Fn>
  void for_each_tensor(Fn&& fn) {
    for (auto& adapter : adapters_) {
      fn(adapter.a);
      fn(adapter.b);
    }
  }
  template <class Fn>
  void for_each_tensor(Fn&& fn) const {
    for (const auto& adapter : adapters_) {
      fn(adapter.a);
      fn(adapter.b);
    }
  }

 private:
  static std::size_t slot(Index layer, LinearModule module) {
    return static_cast<std::size_t>(layer) * linear_modules.size() + static_cast<std::size_t>(module);
  }
  Adapter* find(Index layer, LinearModule module) {
    const auto s = slot(layer, module);
    return s < slots_.size() && slots_[s] >= 0 ? &adapters_[static_cast<std::size_t>(slots_[s])] : nullptr;
  }

  Scalar scale_ = 0;
  std::vector<int> slots_;  ///< (layer, module) -> index into adapters_, or -1
  std::vector<Adapter> adapters_;
};

namespace detail {

template <class M>
concept takes_linear_adapter = requires(M& model, LinearAdapter<typename M::scalar_type>* adapter) {
  model.body().set_linear_adapter(adapter);
  { model.body().weights().layers[0] } -> std::same_as<DecoderLayerWeights<typename M::scalar_type>&>;
};

}  // namespace detail

/// What LoraModel needs of its base: a CausalLM whose decoder body takes a LinearAdapter (the
/// reference transformer).
template <class M>
concept LoraBase = CausalLM<M> && detail::takes_linear_adapter<M>;

template <class M>
consteval bool check_lora_base() {
  VERL_STATIC_ASSERT(CausalLM<M>, LORA_NEEDS_A_CAUSAL_LM_BASE_MODEL);
  VERL_STATIC_ASSERT(detail::takes_linear_adapter<M>, LORA_NEEDS_A_BASE_MODEL_WHOSE_DECODER_BODY_TAKES_A_LINEAR_ADAPTER);
  return true;
}

/// A base model with LoRA adapters: a CausalLM (and an incremental decoder for rollout) whose
/// parameters are the adapters alone.
template <class Base>
class LoraModel : public detail::ParameterModule<LoraModel<Base>, typename Base::scalar_type> {
  static_assert(check_lora_base<Base>());

 public:
  using scalar_type = typename Base::scalar_type;
  using base_type = Base;

  /// Freezes `base` and adds fresh adapters (B = 0: the outputs are the base model's).
  /// `key_prefix` names where the options came from in errors ("actor_rollout_ref.model.").
  LoraModel(Base base, LoraOptions options, std::string_view key_prefix = "")
      : base_(std::make_shared<Base>(std::move(base))), options_(std::move(options)) {
    base_->for_each_tensor([](ParameterTensor<scalar_type>& t) {
      t.frozen = true;
      t.grad.resize(0, 0);
    });
    adapters_ = LoraAdapters<scalar_type>(*base_, options_, key_prefix);
  }

  [[nodiscard]] const LoraOptions& options() const { return options_; }
  [[nodiscard]] const Base& base() const { return *base_; }
  /// Whether another model (a reference policy) shares this one's base weights.
  [[nodiscard]] bool shares_base_with(const LoraModel& other) const { return base_ == other.base_; }
  [[nodiscard]] const HfModelConfig& config() const { return base_->config(); }
  [[nodiscard]] Index vocab_size() const { return base_->vocab_size(); }
  [[nodiscard]] Index context_length() const { return base_->context_length(); }
  [[nodiscard]] unsigned num_threads() const { return base_->num_threads(); }
  [[nodiscard]] LoraAdapters<scalar_type>& adapters() { return adapters_; }
  [[nodiscard]] const LoraAdapters<scalar_type>& adapters() const { return adapters_; }

  /// With the adapter disabled the model computes exactly its base model (PEFT's disable_adapter()).
  [[nodiscard]] bool adapter_enabled() const { return enabled_; }
  void set_adapter_enabled(bool enabled) { enabled_ = enabled; }
  /// A model sharing this one's base weights with its adapter disabled: the reference policy of
  /// verl's LoRA runs, without a second copy of the base.
  [[nodiscard]] LoraModel with_adapter_disabled() const {
    LoraModel reference = *this;
    reference.enabled_ = false;
    return reference;
  }

  /// The base with every adapter folded in, W + (alpha / r) B A, trainable like any base model.
  [[nodiscard]] Base merged() const {
    Base out = *base_;
    out.for_each_tensor([](ParameterTensor<scalar_type>& t) { t.frozen = false; });
    if (!enabled_) return out;
    auto& layers = out.body().weights().layers;
    for (const auto& adapter : adapters_.adapters()) {
      auto& weight = detail::linear_weight(layers[static_cast<std::size_t>(adapter.layer)], adapter.module).value;
      weight.noalias() += adapters_.scale() * (adapter.b.value * adapter.a.value);
    }
    return out;
  }

  // ---- CausalLM ------------------------------------------------------------------------------

  CausalLMOutput<scalar_type> forward(const TokenBatch& batch, const ForwardOptions& options) {
    const AdapterScope scope(*this);
    forward_with_adapter_ = enabled_;
    return base_->forward(batch, options);
  }

  void backward(const CausalLMCotangents<scalar_type>& cotangents) {
    VERL_CHECK_ARG(enabled_ && forward_with_adapter_,
                   "backward: the adapter is disabled (a reference policy has nothing to train); enable it and run "
                   "forward again");
    const AdapterScope scope(*this);
    base_->backward(cotangents);
  }

  void load_state_dict(const StateDict& dict) { detail::load_state_dict(*this, dict); }

  void release_activations() { base_->release_activations(); }

  // ---- incremental decoding (rollout) --------------------------------------------------------

  [[nodiscard]] DecodePrecision decode_precision() const { return base_->decode_precision(); }
  void set_decode_precision(DecodePrecision precision) { base_->set_decode_precision(precision); }

  [[nodiscard]] auto make_kv_cache(std::span<const Index> capacities) const { return base_->make_kv_cache(capacities); }

  template <class Cache>
  RowMatrix<scalar_type> extend(Cache& cache, std::span<const Index> sequences, std::span<const TokenId> tokens,
                                std::span<const std::int64_t> chunk_offsets, std::span<const std::int64_t> positions) {
    const AdapterScope scope(*this);
    return base_->extend(cache, sequences, tokens, chunk_offsets, positions);
  }

  /// The adapters (the trainable parameters).
  template <class Fn>
  void for_each_tensor(Fn&& fn) {
    adapters_.for_each_tensor(fn);
  }
  template <class Fn>
  void for_each_tensor(Fn&& fn) const {
    adapters_.for_each_tensor(fn);
  }

 private:
  /// Hands the body this model's adapter (or none when disabled) for one call, and takes it back,
  /// so that the shared base never keeps a pointer into a model that may be gone.
  class AdapterScope {
   public:
    explicit AdapterScope(LoraModel& model) : body_(model.base_->body()) {
      body_.set_linear_adapter(model.enabled_ ? &model.adapters_ : nullptr);
    }
    explicit AdapterScope(const LoraModel& model) = delete;
    ~AdapterScope() { body_.set_linear_adapter(nullptr); }
    AdapterScope(const AdapterScope&) = delete;
    AdapterScope& operator=(const AdapterScope&) = delete;

   private:
    std::remove_reference_t<decltype(std::declval<Base&>().body())>& body_;
  };

  std::shared_ptr<Base> base_;
  LoraOptions options_;
  LoraAdapters<scalar_type> adapters_;
  bool enabled_ = true;
  bool forward_with_adapter_ = false;
};

using LoraTransformer = LoraModel<Transformer>;

static_assert(CausalLM<LoraTransformer>);
static_assert(CausalLM<LoraModel<BasicTransformer<double>>>);

}  // namespace verl::model
