// The decoder body of the Llama / Qwen2 / Qwen3 family: token embedding, then per layer
//   x = x + o_proj(attention(rope(q_proj(rms_norm(x))), rope(k_proj(.)), v_proj(.)))
//   (Qwen3 normalizes each head of q and k with its own RMSNorm before the rope)
//   x = x + down_proj(silu(gate_proj(rms_norm(x))) * up_proj(rms_norm(x)))
// and a final RMSNorm, over the valid tokens of a TokenBatch (every layout is computed packed:
// padding never costs a flop). Forward keeps what backward needs when asked; backward takes the
// gradient of the final hidden states and accumulates every parameter gradient. The heads
// (LM head, value head) live in the model classes that own a DecoderBody.
// Under tensor parallelism (set_tensor_parallel) the body holds one rank's shard and sums the
// row-parallel outputs, the embedding and the column-parallel input gradients over the ranks.
// Under Ulysses sequence parallelism (set_sequence_parallel) every rank of the group is given the
// same batch and computes a contiguous 1/sp slice of its packed tokens (padded to a multiple of sp
// with token 0 at positions 0, 1, ..., a sequence of its own, as verl's ulysses_pad does): the
// rotary tables are those of the slice's global positions, and attention switches to all tokens x
// 1/sp of the heads (KV heads repeated sp / num_key_value_heads times when fewer than sp), so that
// the causal mask of each packed sequence is the one of sp = 1. Parameter gradients are then this
// rank's tokens' share: their sum over the group is the whole batch's.
// Under Megatron's sequence parallelism (set_megatron_sequence_parallel, with tensor parallelism;
// Korthikanti et al. 2022) the packed tokens are padded to a multiple of tp the same way (a
// sequence of its own) and, outside the tensor-parallel regions (norms, residual stream), each TP
// rank holds a contiguous 1/tp slice of them: the column-parallel layers all-gather their input
// over the tokens, the row-parallel layers and the embedding reduce-scatter their partial outputs
// over the tokens (instead of all-reducing them), and the backward swaps the two. Attention sees
// every token with this rank's heads, as without it. The final norm runs on the slice, its output
// is all-gathered for the vocabulary-parallel head, and backward takes each rank's partial
// gradient of it (reduce-scattered). The norms' and the row-parallel biases' gradients are then
// this rank's tokens' share (the owner sums them over TP). The KV-cache path never splits.
// A pipeline stage keeps its slice at its boundaries, as Megatron's stages exchange the
// sequence-parallel slices: a stage after the first starts from this rank's slice of the previous
// stage's output (stage_input: sequence_slice_rows(tokens, tp) rows), a stage before the last
// returns its slice, and the input gradient it sends back is the slice's.
#pragma once

#include <Eigen/Core>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "verl/core/error.hpp"
#include "verl/core/tensor.hpp"
#include "verl/model/causal_lm.hpp"
#include "verl/model/decode_precision.hpp"
#include "verl/model/hf_config.hpp"
#include "verl/model/transformer/attention.hpp"
#include "verl/model/transformer/detail/linear.hpp"
#include "verl/model/transformer/detail/packed_weights.hpp"
#include "verl/model/transformer/kv_cache.hpp"
#include "verl/model/transformer/layer_parameter_hooks.hpp"
#include "verl/model/transformer/linear_adapter.hpp"
#include "verl/cpu/swiglu.hpp"
#include "verl/cpu/thread_pool.hpp"
#include "verl/model/transformer/rms_norm.hpp"
#include "verl/model/transformer/rope.hpp"
#include "verl/model/transformer/sequence_parallel_regions.hpp"
#include "verl/model/transformer/tensor_parallel_regions.hpp"
#include "verl/model/transformer/weights.hpp"

namespace verl::model {

/// Run-time knobs of the reference transformer.
struct TransformerOptions {
  /// Threads of the model's pool (the calling thread included); 0 = default_thread_count()
  /// (VERL_NUM_THREADS, else the CPUs this process may run on).
  /// Results are identical for every thread count.
  unsigned num_threads = 0;
  /// A training forward pass keeps the LM head's logits for backward when they take at most this
  /// many bytes (else backward recomputes them chunk by chunk, as verl's fused kernels do).
  std::size_t max_saved_logits_bytes = std::size_t{512} << 20;
  /// The weights a KV cache packs for decoding (verl's rollout.dtype): float32 keeps a rollout's
  /// log-probs equal to a forward pass's; bfloat16 rounds the weights, halving what every decode
  /// step reads (on AVX-512; AVX2 rounds them alike but reads float32).
  DecodePrecision decode_precision = DecodePrecision::float32;
};

namespace detail {

/// Throws verl::NotImplemented for configurations the reference model does not cover.
inline void require_supported(const HfModelConfig& config) {
  if (config.hidden_act != "silu") {
    ::verl::detail::throw_not_implemented("hidden_act: only 'silu' (SwiGLU) is implemented, got '{}'", config.hidden_act);
  }
  VERL_CHECK_ARG(config.head_dim % 2 == 0, "head_dim: expected an even number (rotary embeddings), got {}",
                 config.head_dim);
}

/// What one layer's forward pass leaves for its backward pass (h, the MLP activation and the
/// attention scores are recomputed).
template <class S>
struct LayerActivations {
  RowMatrix<S> x;        ///< layer input (N, H)
  Vector<S> inv_rms_in;  ///< input_layernorm factors (N)
  RowMatrix<S> q, k, v;  ///< after the rotary embedding for q and k: (N, heads * D), (N, kv_heads * D)
  RowMatrix<S> q_raw, k_raw;         ///< qk_norm only: the projections before the per-head norms
  Vector<S> inv_rms_q, inv_rms_k;    ///< qk_norm only: the norms' factors (N * heads), (N * kv_heads)
  RowMatrix<S> attn;     ///< attention output before o_proj (N, heads * D)
  RowMatrix<S> lse;      ///< log-sum-exp of each query's scores (N, heads)
  RowMatrix<S> x_mid;    ///< residual stream after attention (N, H)
  Vector<S> inv_rms_post;
  RowMatrix<S> gate, up;  ///< (N, I)
  /// Sequence parallelism only: q, k, v (KV heads repeated when fewer than sp) and the attention
  /// output as every token x this rank's heads; lse is then (tokens, heads / sp).
  RowMatrix<S> q_heads, k_heads, v_heads, attn_heads;
};

/// Buffers a forward or backward pass reuses from layer to layer.
template <class S>
struct LayerScratch {
  RowMatrix<S> h, act, y;
  RowMatrix<S> d_act, d_gate, d_up, d_h, d_attn, dq, dk, dv, d_head_norm;
  /// Megatron sequence parallelism only: a column-parallel layer's input and a row-parallel
  /// layer's output gradient gathered over every token, and a reduce-scattered slice.
  RowMatrix<S> whole, d_whole, slice;
};

template <class S>
inline S silu(S g) {
  return g / (S(1) + std::exp(-g));
}

}  // namespace detail

/// The packed tokens a sequence-parallel rank computes: rows [begin, begin + rows) of the batch's
/// `total` tokens padded to a multiple of sp, of which the first `real_rows` are real tokens.
/// Without sequence parallelism, every token: {0, total, total, total}.
struct SequenceSlice {
  Index begin = 0;
  Index rows = 0;
  Index real_rows = 0;
  Index total = 0;
};

/// The rows each of `ranks` sequence-parallel ranks holds of `tokens` packed tokens (padded to a
/// multiple of `ranks`): SequenceSlice::rows, and a pipeline stage's message under Megatron's
/// sequence parallelism.
[[nodiscard]] constexpr Index sequence_slice_rows(Index tokens, Index ranks) { return (tokens + ranks - 1) / ranks; }

/// The layers a pipeline stage's body holds (Megatron's pipeline parallelism): layers
/// [first_layer, first_layer + layers) of the model, the embedding only on the first stage and
/// the final norm only on the last. The default is the whole model.
struct PipelineStageLayers {
  Index first_layer = 0;
  Index layers = -1;  ///< -1: every layer (num_hidden_layers)
  bool embeds = true;
  bool final_norm = true;
  [[nodiscard]] bool whole_model() const { return first_layer == 0 && layers < 0 && embeds && final_norm; }
  friend bool operator==(const PipelineStageLayers&, const PipelineStageLayers&) = default;
};

template <class Scalar>
class DecoderBody {
 public:
  DecoderBody() = default;
  DecoderBody(HfModelConfig config, const TransformerOptions& options)
      : config_(std::move(config)),
        options_(options),
        weights_(config_),
        rope_(config_),
        pool_(std::make_shared<cpu::ThreadPool>(options.num_threads)) {
    detail::require_supported(config_);
  }
  /// A body over weights that already exist (no parameter buffer is allocated): the
  /// 3D-HybridEngine hands the training tensors, grown into generation shards, to a generation
  /// body this way. `weights` must have `config`'s shapes (checked); `pool` is shared.
  /// A pipeline stage's body (`stage`: its layers, whether it embeds and norms) is built this way,
  /// over the stage's tensors only.
  DecoderBody(HfModelConfig config, const TransformerOptions& options, DecoderWeights<Scalar> weights,
              std::shared_ptr<cpu::ThreadPool> pool, PipelineStageLayers stage = {})
      : config_(std::move(config)),
        options_(options),
        weights_(std::move(weights)),
        rope_(config_),
        pool_(std::move(pool)),
        stage_(stage) {
    detail::require_supported(config_);
    VERL_CHECK_ARG(pool_ != nullptr, "pool: expected a thread pool, got none");
    check_weight_shapes();
  }

  /// Moves the weights out (the body is left without parameters until it is given them back).
  [[nodiscard]] DecoderWeights<Scalar> take_weights() { return std::exchange(weights_, DecoderWeights<Scalar>{}); }
  /// Gives taken weights back (checked against the config's shapes, as the adopting constructor does).
  void restore_weights(DecoderWeights<Scalar> weights) {
    weights_ = std::move(weights);
    check_weight_shapes();
  }
  /// The thread pool (shared with a body built over the same weights).
  [[nodiscard]] const std::shared_ptr<cpu::ThreadPool>& shared_pool() const { return pool_; }

  [[nodiscard]] const HfModelConfig& config() const { return config_; }
  [[nodiscard]] const TransformerOptions& options() const { return options_; }
  [[nodiscard]] DecoderWeights<Scalar>& weights() { return weights_; }
  [[nodiscard]] const DecoderWeights<Scalar>& weights() const { return weights_; }
  [[nodiscard]] cpu::ThreadPool& pool() const { return *pool_; }
  [[nodiscard]] const RotaryEmbedding<Scalar>& rope() const { return rope_; }
  [[nodiscard]] bool has_activations() const { return saved_; }
  /// The adapter the next passes add to the linear layers (LoRA), or none; not owned.
  void set_linear_adapter(LinearAdapter<Scalar>* adapter) { adapter_ = adapter; }
  [[nodiscard]] LinearAdapter<Scalar>* linear_adapter() const { return adapter_; }
  /// The tensor-parallel group this body's shard belongs to (its config then holds this rank's
  /// heads, intermediate size and vocabulary rows), or none; not owned.
  void set_tensor_parallel(TensorParallelRegions<Scalar>* regions) { regions_ = regions; }
  [[nodiscard]] TensorParallelRegions<Scalar>* tensor_parallel() const { return regions_; }
  /// The sequence-parallel group the next passes split their tokens over, or none; not owned.
  /// The heads must split over it: num_attention_heads a multiple of its size, and
  /// num_key_value_heads a multiple or a divisor of it (verl's check; KV heads are then repeated).
  void set_sequence_parallel(SequenceParallelRegions<Scalar>* regions) {
    if (regions != nullptr) require_sequence_parallel_heads(config_, regions->size());
    sequence_parallel_ = regions;
  }
  [[nodiscard]] SequenceParallelRegions<Scalar>* sequence_parallel() const { return sequence_parallel_; }
  /// Megatron's sequence parallelism over the tensor-parallel group for the next training and
  /// log-prob passes (see the file's comment); it acts only with more than one TP rank (as in
  /// Megatron), never with Ulysses; a pipeline stage's body exchanges its slice (forward).
  void set_megatron_sequence_parallel(bool on) {
    VERL_CHECK_ARG(!on || regions_ != nullptr,
                   "megatron sequence parallelism: expected a tensor-parallel body (set_tensor_parallel first), got none");
    megatron_sequence_parallel_ = on;
  }
  [[nodiscard]] bool megatron_sequence_parallel() const { return megatron_sequence_parallel_; }
  /// Whether the last forward pass split the tokens (Megatron's sequence parallelism acting):
  /// its backward then takes a partial d(hidden).
  [[nodiscard]] bool tokens_split() const { return tokens_split_; }
  /// Called around each layer of the next training and log-prob passes (forward and backward;
  /// not the KV-cache decode, which needs every layer at every step), or none; not owned.
  void set_layer_parameter_hooks(LayerParameterHooks* hooks) { layer_hooks_ = hooks; }
  [[nodiscard]] LayerParameterHooks* layer_parameter_hooks() const { return layer_hooks_; }
  /// The tokens of the last forward pass this rank computed.
  [[nodiscard]] const SequenceSlice& sequence_slice() const { return slice_; }

  /// Throws unless `config`'s heads split over `size` sequence-parallel ranks.
  static void require_sequence_parallel_heads(const HfModelConfig& config, Index size) {
    VERL_CHECK_ARG(size > 0 && config.num_attention_heads % size == 0,
                   "sequence parallelism: num_attention_heads {} must be a multiple of the sequence-parallel size {}",
                   config.num_attention_heads, size);
    VERL_CHECK_ARG(config.num_key_value_heads % size == 0 || size % config.num_key_value_heads == 0,
                   "sequence parallelism: num_key_value_heads {} must be a multiple or a divisor of the sequence-parallel "
                   "size {}",
                   config.num_key_value_heads, size);
  }

  /// Checks token ids against the vocabulary.
  void require_tokens(std::span<const TokenId> tokens, std::string_view argument) const {
    const Index vocab = regions_ != nullptr ? regions_->vocab_size() : config_.vocab_size;
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      VERL_CHECK_ARG(tokens[i] >= 0 && tokens[i] < vocab, "{}: expected token ids in [0, {}) (vocab_size), got {} at token {}",
                     argument, vocab, tokens[i], i);
    }
  }

  /// The layers this body holds (the whole model unless it is a pipeline stage's).
  [[nodiscard]] const PipelineStageLayers& pipeline_stage() const { return stage_; }

  /// The final hidden states (after the last norm) of the batch's valid tokens, (N, H).
  /// A pipeline stage that does not embed starts from `stage_input` (the previous stage's output,
  /// (N, H); under Megatron's sequence parallelism this rank's slice of it,
  /// (sequence_slice_rows(N, tp), H)), and one without the final norm returns its last layer's
  /// output (the residual stream; under Megatron's sequence parallelism this rank's slice).
  const RowMatrix<Scalar>& forward(const TokenBatch& batch, bool keep_activations,
                                   const RowMatrix<Scalar>* stage_input = nullptr) {
    require_tokens(batch.tokens(), "input_ids");
    saved_ = false;
    const Index hidden = config_.hidden_size;
    cu_seqlens_.assign(batch.cu_seqlens().begin(), batch.cu_seqlens().end());
    VERL_CHECK_ARG(!(sequence_parallel_active() && megatron_sequence_parallel_active()),
                   "megatron sequence parallelism: cannot be combined with Ulysses sequence parallelism (size {})",
                   sequence_parallel_active() ? sequence_parallel_->size() : 1);
    if (sequence_parallel_active()) {
      VERL_CHECK_ARG(stage_.embeds && stage_.final_norm,
                     "sequence parallelism: a pipeline stage's body cannot split its tokens (got the stage from layer {})",
                     stage_.first_layer);
      take_sequence_slice(batch, sequence_parallel_->size(), sequence_parallel_->rank(), /*every_token=*/false);
    } else if (megatron_sequence_parallel_active()) {
      take_sequence_slice(batch, regions_->size(), regions_->rank(), /*every_token=*/true);
    } else {
      tokens_.assign(batch.tokens().begin(), batch.tokens().end());
      rope_.tables(batch.positions(), cos_, sin_);
      slice_ = {0, batch.num_tokens(), batch.num_tokens(), batch.num_tokens()};
    }
    tokens_split_ = megatron_sequence_parallel_active();
    // The tokens the column-parallel layers and attention see; the residual stream holds `rows`
    // of them (this rank's slice under Megatron's sequence parallelism).
    const Index n = static_cast<Index>(tokens_.size());
    const Index rows = tokens_split_ ? slice_.rows : n;

    const std::size_t layers = weights_.layers.size();
    activations_.resize(keep_activations ? layers : 1);
    RowMatrix<Scalar> x(rows, hidden);
    if (stage_.embeds && tokens_split_) {
      RowMatrix<Scalar> partial(n, hidden);
      embed_local_rows(tokens_, partial);
      regions_->reduce_scatter_rows(partial, x);
    } else if (stage_.embeds) {
      embed(tokens_, x);
    } else {
      VERL_CHECK_ARG(stage_input != nullptr && stage_input->rows() == rows && stage_input->cols() == hidden,
                     "stage_input: pipeline stage from layer {}: expected the previous stage's ({}, {}) activations{}, "
                     "got {}",
                     stage_.first_layer, rows, hidden, tokens_split_ ? " (this rank's sequence-parallel slice)" : "",
                     stage_input == nullptr ? std::string("none")
                                            : fmt::format("({}, {})", stage_input->rows(), stage_input->cols()));
      x = *stage_input;
    }
    for (std::size_t l = 0; l < layers; ++l) {
      auto& act = activations_[keep_activations ? l : 0];
      act.x.swap(x);
      x.resize(rows, hidden);
      const Index window = config_.attention_window(stage_.first_layer + static_cast<Index>(l));
      if (layer_hooks_ != nullptr) layer_hooks_->before_forward(l);
      layer_forward(
          weights_.layers[l], act, x, cos_, sin_,
          [&](detail::LayerActivations<Scalar>& a) {
            if (sequence_parallel_active()) {
              attend_sequence_parallel(a, window);
            } else {
              attend(a, window);
            }
          },
          nullptr, tokens_split_);
      if (layer_hooks_ != nullptr) layer_hooks_->after_forward(l);
    }
    if (!stage_.final_norm) {  // the next stage continues the residual stream
      hidden_.swap(x);
      saved_ = keep_activations;
      return hidden_;
    }
    final_x_.swap(x);
    if (tokens_split_) {
      // The norm on this rank's slice, then every real token's output for the head.
      auto& normed = scratch_.slice;
      normed.resize(rows, hidden);
      detail::rms_norm_forward<Scalar>(final_x_, weights_.norm.value, config_.rms_norm_eps, normed, final_inv_rms_);
      regions_->all_gather_rows(normed, scratch_.whole);
      hidden_ = scratch_.whole.topRows(slice_.total);
    } else {
      hidden_.resize(n, hidden);
      detail::rms_norm_forward<Scalar>(final_x_, weights_.norm.value, config_.rms_norm_eps, hidden_, final_inv_rms_);
    }
    saved_ = keep_activations;
    return hidden_;
  }

  /// What a forward pass with keep_activations leaves for its backward pass, moved out so that
  /// several passes can wait for their backward (a pipeline stage under 1F1B holds up to as many
  /// micro-batches as stages follow it).
  struct SavedPass {
    bool saved = false;
    std::vector<TokenId> tokens;
    std::vector<std::int64_t> cu_seqlens;
    RowMatrix<Scalar> cos, sin;
    std::vector<detail::LayerActivations<Scalar>> activations;
    RowMatrix<Scalar> final_x;
    Vector<Scalar> final_inv_rms;
    RowMatrix<Scalar> hidden;
    SequenceSlice slice;
    bool tokens_split = false;
  };
  /// Moves the last forward pass's saved state out (the body then holds none).
  [[nodiscard]] SavedPass take_saved_pass() {
    SavedPass pass{saved_,
                   std::move(tokens_),
                   std::move(cu_seqlens_),
                   std::move(cos_),
                   std::move(sin_),
                   std::move(activations_),
                   std::move(final_x_),
                   std::move(final_inv_rms_),
                   std::move(hidden_),
                   slice_,
                   tokens_split_};
    saved_ = false;
    tokens_.clear();
    cu_seqlens_.clear();
    activations_.clear();
    return pass;
  }
  /// Makes a pass take_saved_pass() moved out the one backward runs from.
  void restore_saved_pass(SavedPass pass) {
    saved_ = pass.saved;
    tokens_ = std::move(pass.tokens);
    cu_seqlens_ = std::move(pass.cu_seqlens);
    cos_ = std::move(pass.cos);
    sin_ = std::move(pass.sin);
    activations_ = std::move(pass.activations);
    final_x_ = std::move(pass.final_x);
    final_inv_rms_ = std::move(pass.final_inv_rms);
    hidden_ = std::move(pass.hidden);
    slice_ = pass.slice;
    tokens_split_ = pass.tokens_split;
  }

  /// The gradient of the last backward's stage input (a pipeline stage that does not embed):
  /// what it sends to the previous stage.
  [[nodiscard]] const RowMatrix<Scalar>& stage_input_gradient() const { return stage_input_gradient_; }

  /// The last forward's final hidden states.
  [[nodiscard]] const RowMatrix<Scalar>& hidden() const { return hidden_; }

  /// Accumulates parameter gradients from d(hidden) (N, H), which is overwritten. Under Megatron's
  /// sequence parallelism d(hidden) is this rank's partial gradient (the vocabulary-parallel
  /// head's share), reduce-scattered here; otherwise it is already summed over TP.
  void backward(RowMatrix<Scalar>& d_hidden) {
    VERL_CHECK_ARG(saved_, "backward: no saved activations (call forward with keep_activations = true first)");
    VERL_CHECK_ARG(d_hidden.rows() == hidden_.rows() && d_hidden.cols() == hidden_.cols(),
                   "d_hidden: expected shape ({}, {}), got ({}, {})", hidden_.rows(), hidden_.cols(), d_hidden.rows(),
                   d_hidden.cols());
    enable_grad();
    const Index n = stage_.final_norm ? final_x_.rows() : hidden_.rows(), width = config_.hidden_size;
    RowMatrix<Scalar> dx(n, width);
    if (stage_.final_norm && tokens_split_) {
      auto& partial = scratch_.d_whole;
      partial.setZero(n * regions_->size(), width);  // the padding tokens' rows stay zero
      partial.topRows(d_hidden.rows()) = d_hidden;
      regions_->reduce_scatter_rows(partial, scratch_.slice);
      detail::rms_norm_backward<Scalar>(final_x_, weights_.norm.value, final_inv_rms_, scratch_.slice,
                                        &weights_.norm.grad, dx, false);
    } else if (stage_.final_norm) {
      detail::rms_norm_backward<Scalar>(final_x_, weights_.norm.value, final_inv_rms_, d_hidden, &weights_.norm.grad,
                                        dx, false);
    } else {
      dx.swap(d_hidden);
    }
    for (std::size_t l = weights_.layers.size(); l-- > 0;) {
      if (layer_hooks_ != nullptr) layer_hooks_->before_backward(l);
      layer_backward(weights_.layers[l], activations_[l], dx,
                     config_.attention_window(stage_.first_layer + static_cast<Index>(l)));
      if (layer_hooks_ != nullptr) layer_hooks_->after_backward(l);
    }
    if (!stage_.embeds) {  // the previous stage's output gradient
      stage_input_gradient_.swap(dx);
      saved_ = false;
      return;
    }
    // Embedding rows gather the gradient of their tokens; the padding token's row gets none
    // (nn.Embedding's padding_idx).
    // Under tensor parallelism only this rank's rows (dx is the same on every rank).
    auto& grad = weights_.embed_tokens.grad;
    const Index first_row = vocab_begin();
    // Sequence parallelism's padding tokens are no input of the batch.
    Index real_tokens = sequence_parallel_active() ? slice_.real_rows : n;
    const RowMatrix<Scalar>* token_grads = &dx;
    if (tokens_split_ && grad.size() > 0) {  // the embedding's reduce-scatter backward: every token's gradient
      regions_->all_gather_rows(dx, scratch_.d_whole);
      token_grads = &scratch_.d_whole;
      real_tokens = slice_.total;
    }
    for (Index t = 0; t < real_tokens && grad.size() > 0; ++t) {
      const TokenId id = tokens_[static_cast<std::size_t>(t)];
      if (config_.pad_token_id && id == *config_.pad_token_id) continue;
      if (id < first_row || id >= first_row + grad.rows()) continue;
      grad.row(id - first_row) += token_grads->row(t);
    }
    // The buffers stay allocated for the next step (first-touch page faults cost more than the
    // memory); release_activations() frees them.
    saved_ = false;
  }

  void enable_grad() {
    DecoderWeights<Scalar>::for_each(weights_, [](ParameterTensor<Scalar>& t) { t.enable_grad(); });
  }

  /// Frees the saved activations (after backward, or when a forward was not followed by one).
  void release_activations() {
    activations_.clear();
    final_x_.resize(0, 0);
    saved_ = false;
  }

  // ---- shared with the KV-cache path -------------------------------------------------------

  /// Under tensor parallelism each rank copies the rows it holds, zeros the others, and the sum
  /// over the ranks completes every row (Megatron's VocabParallelEmbedding).
  void embed(std::span<const TokenId> tokens, RowMatrix<Scalar>& x) const {
    if (regions_ == nullptr) {
      for (std::size_t t = 0; t < tokens.size(); ++t) x.row(static_cast<Index>(t)) = weights_.embed_tokens.value.row(tokens[t]);
      return;
    }
    embed_local_rows(tokens, x);
    regions_->all_reduce_sum(x);
  }

  /// The tensor-parallel embedding before its sum over the ranks: the rows this rank holds, zeros
  /// for the other tokens.
  void embed_local_rows(std::span<const TokenId> tokens, RowMatrix<Scalar>& x) const {
    const Index first_row = regions_->vocab_begin(), rows = weights_.embed_tokens.value.rows();
    for (std::size_t t = 0; t < tokens.size(); ++t) {
      const Index row = tokens[t] - first_row;
      if (row >= 0 && row < rows) {
        x.row(static_cast<Index>(t)) = weights_.embed_tokens.value.row(row);
      } else {
        x.row(static_cast<Index>(t)).setZero();
      }
    }
  }

  /// One layer: `act.x` in, `x_out` out, `act` filled; cos/sin are the rotary tables of the
  /// tokens' positions. `attend(act)` turns act.q/k/v (rotated) into act.attn (and act.lse).
  /// `tokens_split` (Megatron's sequence parallelism): act.x and x_out are this rank's slice of
  /// the tokens, cos/sin and the attention every token's.
  template <class Attend>
  void layer_forward(const DecoderLayerWeights<Scalar>& w, detail::LayerActivations<Scalar>& act,
                     RowMatrix<Scalar>& x_out, const RowMatrix<Scalar>& cos, const RowMatrix<Scalar>& sin,
                     const Attend& attend, const detail::PackedLayerWeights* packed = nullptr, bool tokens_split = false) {
    auto pack = [&](const cpu::PackedMatrix detail::PackedLayerWeights::*member) {
      return packed != nullptr ? &(packed->*member) : nullptr;
    };
    auto& pool = *pool_;
    const Index n = act.x.rows(), width = config_.hidden_size;
    const Index heads = config_.num_attention_heads, kv_heads = config_.num_key_value_heads, d = config_.head_dim;
    const Index layer = static_cast<Index>(&w - weights_.layers.data());
    auto adapt = [&](LinearModule module, const RowMatrix<Scalar>& in, RowMatrix<Scalar>& out) {
      if (adapter_ != nullptr) adapter_->forward(layer, module, in, out);
    };
    auto& s = scratch_;
    const double eps = config_.rms_norm_eps;
    s.h.resize(n, width);
    act.inv_rms_in.resize(n);
    for_row_blocks(n, width, [&](Index begin, Index end) {
      detail::rms_norm_forward_rows<Scalar>(act.x, w.input_layernorm.value, eps, s.h, act.inv_rms_in.data(), begin, end);
    });
    const RowMatrix<Scalar>& h_in = column_parallel_input(s.h, tokens_split);
    const Index m = h_in.rows();  // every token the column-parallel layers see
    act.q.resize(m, heads * d);
    act.k.resize(m, kv_heads * d);
    act.v.resize(m, kv_heads * d);
    detail::linear_forward<Scalar>(pool, h_in, w.q_proj.value, bias(w.q_bias), act.q,
                                   pack(&detail::PackedLayerWeights::q));
    detail::linear_forward<Scalar>(pool, h_in, w.k_proj.value, bias(w.k_bias), act.k,
                                   pack(&detail::PackedLayerWeights::k));
    detail::linear_forward<Scalar>(pool, h_in, w.v_proj.value, bias(w.v_bias), act.v,
                                   pack(&detail::PackedLayerWeights::v));
    adapt(LinearModule::q_proj, h_in, act.q);
    adapt(LinearModule::k_proj, h_in, act.k);
    adapt(LinearModule::v_proj, h_in, act.v);
    if (config_.qk_norm) {
      act.q_raw.swap(act.q);
      act.k_raw.swap(act.k);
      head_norm_forward(act.q_raw, w.q_norm.value, act.q, act.inv_rms_q);
      head_norm_forward(act.k_raw, w.k_norm.value, act.k, act.inv_rms_k);
    }
    for_row_blocks(m, (heads + kv_heads) * d, [&](Index begin, Index end) {
      RotaryEmbedding<Scalar>::apply_rows(act.q.data(), act.q.cols(), begin, end, heads, d, cos, sin);
      RotaryEmbedding<Scalar>::apply_rows(act.k.data(), act.k.cols(), begin, end, kv_heads, d, cos, sin);
    });
    act.attn.resize(m, heads * d);
    attend(act);
    s.y.resize(m, width);
    detail::linear_forward<Scalar>(pool, act.attn, w.o_proj.value, row_parallel_bias(w.o_bias), s.y,
                                   pack(&detail::PackedLayerWeights::o));
    adapt(LinearModule::o_proj, act.attn, s.y);
    reduce_row_parallel_output(w.o_bias, s.y, tokens_split);
    act.x_mid.resize(n, width);
    act.inv_rms_post.resize(n);
    for_row_blocks(n, width, [&](Index begin, Index end) {
      act.x_mid.middleRows(begin, end - begin) = act.x.middleRows(begin, end - begin) + s.y.middleRows(begin, end - begin);
      detail::rms_norm_forward_rows<Scalar>(act.x_mid, w.post_attention_layernorm.value, eps, s.h, act.inv_rms_post.data(),
                                            begin, end);
    });
    const Index inner = config_.intermediate_size;
    const RowMatrix<Scalar>& h_mid = column_parallel_input(s.h, tokens_split);
    act.gate.resize(m, inner);
    act.up.resize(m, inner);
    detail::linear_forward<Scalar>(pool, h_mid, w.gate_proj.value, bias(w.gate_bias), act.gate,
                                   pack(&detail::PackedLayerWeights::gate));
    detail::linear_forward<Scalar>(pool, h_mid, w.up_proj.value, bias(w.up_bias), act.up,
                                   pack(&detail::PackedLayerWeights::up));
    adapt(LinearModule::gate_proj, h_mid, act.gate);
    adapt(LinearModule::up_proj, h_mid, act.up);
    s.act.resize(m, inner);
    for_row_blocks(m, inner, [&](Index begin, Index end) { swiglu_rows(act.gate, act.up, s.act, begin, end); });
    s.y.resize(m, width);
    detail::linear_forward<Scalar>(pool, s.act, w.down_proj.value, row_parallel_bias(w.down_bias), s.y,
                                   pack(&detail::PackedLayerWeights::down));
    adapt(LinearModule::down_proj, s.act, s.y);
    reduce_row_parallel_output(w.down_bias, s.y, tokens_split);
    x_out.resize(n, width);
    for_row_blocks(n, width, [&](Index begin, Index end) {
      x_out.middleRows(begin, end - begin) = act.x_mid.middleRows(begin, end - begin) + s.y.middleRows(begin, end - begin);
    });
  }

  /// fn(begin, end) over blocks of rows of `row_width` values, on the pool when there are enough
  /// of them to share: the row-wise steps between a layer's products (norms, rotations, residual
  /// adds, the gated activation) would otherwise leave the other threads waiting. Every row is
  /// computed alone, so the split changes no bits.
  template <class Fn>
  void for_row_blocks(Index rows, Index row_width, const Fn& fn) const {
    // About 8k values per task: below that, handing a block to another thread costs more than it.
    constexpr Index values_per_task = 8192;
    const Index block = std::max<Index>(1, (values_per_task + row_width - 1) / std::max<Index>(row_width, 1));
    const Index tasks = (rows + block - 1) / block;
    pool_->parallel_for(tasks, [&](Index t) { fn(t * block, std::min(rows, (t + 1) * block)); });
  }

  /// The KV-cache pass of extend(), shared by the dense and the tensor-parallel models: checks the
  /// chunks, embeds them, runs every layer (appending each chunk's keys and values to its cache
  /// sequence and attending over the cached ones), advances the cache and returns the residual
  /// stream of every chunk's last token before the final norm, (chunks, H). Under tensor
  /// parallelism every rank of the group calls it with the same arguments (its cache holds its
  /// own key/value heads). `act`, `cos`, `sin` are the caller's scratch; `packed` the cache's
  /// packed weights or none.
  RowMatrix<Scalar> extend_layers(KvCache<Scalar>& cache, std::span<const Index> sequences,
                                  std::span<const TokenId> tokens, std::span<const std::int64_t> chunk_offsets,
                                  std::span<const std::int64_t> positions, detail::LayerActivations<Scalar>& act,
                                  RowMatrix<Scalar>& cos, RowMatrix<Scalar>& sin,
                                  const detail::PackedDecoderWeights* packed) {
    const HfModelConfig& c = config_;
    const auto chunks = static_cast<Index>(sequences.size());
    VERL_CHECK_ARG(chunk_offsets.size() == sequences.size() + 1 && chunk_offsets.front() == 0 &&
                       chunk_offsets.back() == static_cast<std::int64_t>(tokens.size()),
                   "chunk_offsets: expected {} values from 0 to {} (the number of tokens), got {}", chunks + 1,
                   tokens.size(), chunk_offsets.size());
    verl::detail::require_length("positions", static_cast<Index>(positions.size()), static_cast<Index>(tokens.size()));
    VERL_CHECK_ARG(cache.num_layers() == c.num_hidden_layers && cache.width() == c.num_key_value_heads * c.head_dim,
                   "cache: expected {} layers of width {} (made by this model's make_kv_cache), got {} of width {}",
                   c.num_hidden_layers, c.num_key_value_heads * c.head_dim, cache.num_layers(), cache.width());
    require_tokens(tokens, "tokens");
    std::set<Index> distinct;
    for (Index i = 0; i < chunks; ++i) {
      const Index s = sequences[static_cast<std::size_t>(i)];
      const Index count = chunk_offsets[static_cast<std::size_t>(i) + 1] - chunk_offsets[static_cast<std::size_t>(i)];
      VERL_CHECK_ARG(count > 0, "chunk_offsets: expected a non-empty chunk for sequence {}, got {} tokens", s, count);
      VERL_CHECK_ARG(distinct.insert(s).second, "sequences: sequence {} is listed twice", s);
      VERL_CHECK_ARG(cache.length(s) + count <= cache.capacity(s),
                     "tokens: sequence {} holds {} of {} cached tokens, cannot add {}", s, cache.length(s),
                     cache.capacity(s), count);
    }
    for (std::size_t t = 0; t < positions.size(); ++t) {
      VERL_CHECK_ARG(positions[t] >= 0, "positions: expected values >= 0, got {} at {}", positions[t], t);
    }
    const Index m = static_cast<Index>(tokens.size()), width = c.hidden_size;
    const Index heads = c.num_attention_heads, group = heads / c.num_key_value_heads, d = c.head_dim;
    const Index kv_width = cache.width(), kv_groups = heads / group;
    // (float only: Eigen's double products may sum a one-row product in another order than a wider one.)
    const bool one_token_per_chunk = std::same_as<Scalar, float> && m == chunks;
    const auto scale = static_cast<Scalar>(1.0 / std::sqrt(static_cast<double>(d)));
    rope_.tables(positions, cos, sin);
    RowMatrix<Scalar> x(m, width);
    embed(tokens, x);
    for (Index layer = 0; layer < c.num_hidden_layers; ++layer) {
      const Index window = c.attention_window(layer);
      act.x.swap(x);
      x.resize(m, width);
      layer_forward(weights_.layers[static_cast<std::size_t>(layer)], act, x, cos, sin,
                    [&](detail::LayerActivations<Scalar>& a) {
                            if (one_token_per_chunk) {
                              // A decode step, one task per sequence: its token's keys and values
                              // into the cache (the keys' transposed stores touch a cache line per
                              // value, as costly as the attention here), then the query heads of
                              // each key/value head attend together.
                              pool_->parallel_for(chunks, [&](Index i) {
                                const Index s = sequences[static_cast<std::size_t>(i)];
                                cache.write(layer, s, a.k.data() + i * kv_width, a.v.data() + i * kv_width, 1);
                                thread_local std::vector<Scalar> buffer;
                                for (Index kv = 0; kv < kv_groups; ++kv) {
                                  detail::attention_decode_heads<Scalar>(
                                      {a.q.data() + i * a.q.cols() + kv * group * d, d},
                                      cpu::rows_of(cache.keys_transposed(layer, s) + kv * d * cache.capacity(s), cache.capacity(s)),
                                      {cache.values(layer, s) + kv * d, kv_width}, group, cache.length(s) + 1, d, scale,
                                      {a.attn.data() + i * a.attn.cols() + kv * group * d, d}, buffer, window);
                                }
                              });
                              return;
                            }
                            pool_->parallel_for(chunks, [&](Index i) {  // distinct sequences: disjoint memory
                              const Index s = sequences[static_cast<std::size_t>(i)];
                              const Index begin = chunk_offsets[static_cast<std::size_t>(i)];
                              const Index count = chunk_offsets[static_cast<std::size_t>(i) + 1] - begin;
                              cache.write(layer, s, a.k.data() + begin * kv_width, a.v.data() + begin * kv_width, count);
                            });
                            pool_->parallel_for(chunks * heads, [&](Index task) {
                              const Index i = task / heads, h = task % heads, kv = h / group;
                              const Index s = sequences[static_cast<std::size_t>(i)];
                              const Index begin = chunk_offsets[static_cast<std::size_t>(i)];
                              const Index count = chunk_offsets[static_cast<std::size_t>(i) + 1] - begin;
                              thread_local std::vector<Scalar> buffer;
                              detail::attention_forward_head<Scalar>(
                                  {a.q.data() + begin * a.q.cols() + h * d, a.q.cols()},
                                  cpu::rows_of(cache.keys_transposed(layer, s) + kv * d * cache.capacity(s), cache.capacity(s)),
                                  {cache.values(layer, s) + kv * d, kv_width},
                                  count, cache.length(s), d, scale,
                                  {a.attn.data() + begin * a.attn.cols() + h * d, a.attn.cols()}, nullptr, 0, buffer,
                                  window);
                            });
                          },
                          packed != nullptr ? &packed->layers[static_cast<std::size_t>(layer)] : nullptr);
    }
    RowMatrix<Scalar> last(chunks, width);
    for (Index i = 0; i < chunks; ++i) {
      cache.advance(sequences[static_cast<std::size_t>(i)],
                    chunk_offsets[static_cast<std::size_t>(i) + 1] - chunk_offsets[static_cast<std::size_t>(i)]);
      last.row(i) = x.row(chunk_offsets[static_cast<std::size_t>(i) + 1] - 1);
    }
    return last;
  }

  /// Every linear weight of the layers and `head` (the LM head or the tied embedding, this
  /// body's rows of it under tensor parallelism) packed for the float decode kernels at
  /// `precision`, one matrix per task, into the recycler's spare memory when no cache holds it.
  std::shared_ptr<const detail::PackedDecoderWeights> pack_weights(const RowMatrix<float>& head, DecodePrecision precision,
                                                                   detail::PackedWeightsRecycler& recycler) const
    requires std::same_as<Scalar, float>
  {
    auto packed = recycler.take();
    const auto& layers = weights_.layers;
    packed->layers.resize(layers.size());
    std::vector<std::pair<const RowMatrix<float>*, cpu::PackedMatrix*>> jobs;
    for (std::size_t l = 0; l < layers.size(); ++l) {
      auto& out = packed->layers[l];
      for (auto [weight, target] : {std::pair{&layers[l].q_proj, &out.q}, std::pair{&layers[l].k_proj, &out.k},
                                    std::pair{&layers[l].v_proj, &out.v}, std::pair{&layers[l].o_proj, &out.o},
                                    std::pair{&layers[l].gate_proj, &out.gate}, std::pair{&layers[l].up_proj, &out.up},
                                    std::pair{&layers[l].down_proj, &out.down}}) {
        jobs.emplace_back(&weight->value, target);
      }
    }
    jobs.emplace_back(&head, &packed->head);
    pool_->parallel_for(static_cast<Index>(jobs.size()), [&](Index j) {
      detail::repack_linear(*jobs[static_cast<std::size_t>(j)].first, *jobs[static_cast<std::size_t>(j)].second,
                            precision);
    });
    return packed;
  }

  /// The final norm of selected rows of x.
  void final_norm(const Eigen::Ref<const RowMatrix<Scalar>>& x, RowMatrix<Scalar>& out) const {
    out.resize(x.rows(), x.cols());
    Vector<Scalar> inv_rms;
    detail::rms_norm_forward<Scalar>(x, weights_.norm.value, config_.rms_norm_eps, out, inv_rms);
  }

  static const RowMatrix<Scalar>* bias(const ParameterTensor<Scalar>& t) { return t.present() ? &t.value : nullptr; }
  static RowMatrix<Scalar>* bias_grad(ParameterTensor<Scalar>& t) { return t.present() ? &t.grad : nullptr; }

  /// The token id of the first embedding row this body holds (0 without tensor parallelism).
  [[nodiscard]] Index vocab_begin() const { return regions_ != nullptr ? regions_->vocab_begin() : 0; }

 private:
  void check_weight_shapes() const {
    const Index layers = stage_.layers < 0 ? config_.num_hidden_layers : stage_.layers;
    VERL_CHECK_ARG(stage_.first_layer >= 0 && stage_.first_layer + layers <= config_.num_hidden_layers,
                   "pipeline stage: layers [{}, {}) are not within num_hidden_layers = {}", stage_.first_layer,
                   stage_.first_layer + layers, config_.num_hidden_layers);
    VERL_CHECK_ARG(static_cast<Index>(weights_.layers.size()) == layers,
                   "weights: expected {} layers (num_hidden_layers, or the pipeline stage's), got {}", layers,
                   weights_.layers.size());
    const Index h = config_.hidden_size, q = config_.num_attention_heads * config_.head_dim,
                kv = config_.num_key_value_heads * config_.head_dim, inner = config_.intermediate_size;
    auto expect = [](const ParameterTensor<Scalar>& t, std::vector<std::int64_t> shape) {
      const auto values = static_cast<Index>(shape.size() == 2 ? shape[0] * shape[1] : shape[0]);
      VERL_CHECK_ARG(t.shape == shape && t.value.size() == values,
                     "weights: tensor '{}': expected shape [{}] with {} values (the config's), got [{}] with {}", t.name,
                     fmt::join(shape, ", "), values, fmt::join(t.shape, ", "), t.value.size());
    };
    // A pipeline stage holds the embedding only on the first stage, the final norm on the last.
    if (stage_.embeds || weights_.embed_tokens.present()) expect(weights_.embed_tokens, {config_.vocab_size, h});
    if (stage_.final_norm || weights_.norm.present()) expect(weights_.norm, {h});
    for (const auto& layer : weights_.layers) {
      expect(layer.q_proj, {q, h});
      expect(layer.k_proj, {kv, h});
      expect(layer.v_proj, {kv, h});
      expect(layer.o_proj, {h, q});
      expect(layer.gate_proj, {inner, h});
      expect(layer.up_proj, {inner, h});
      expect(layer.down_proj, {h, inner});
      if (layer.q_bias.present()) expect(layer.q_bias, {q});
      if (layer.k_bias.present()) expect(layer.k_bias, {kv});
      if (layer.v_bias.present()) expect(layer.v_bias, {kv});
    }
  }

  /// RMSNorm over each head_dim slice of a (N, heads * D) projection (rows of D in memory).
  void head_norm_forward(const RowMatrix<Scalar>& raw, const RowMatrix<Scalar>& weight, RowMatrix<Scalar>& out,
                         Vector<Scalar>& inv_rms) const {
    const Index d = config_.head_dim, slices = raw.size() / d;
    out.resize(raw.rows(), raw.cols());
    const Eigen::Map<const RowMatrix<Scalar>> in(raw.data(), slices, d);
    Eigen::Map<RowMatrix<Scalar>> normed(out.data(), slices, d);
    detail::rms_norm_forward<Scalar>(in, weight, config_.rms_norm_eps, normed, inv_rms);
  }

  /// d(raw) from d(normed) in place, accumulating the norm weight's gradient.
  void head_norm_backward(const RowMatrix<Scalar>& raw, ParameterTensor<Scalar>& weight, const Vector<Scalar>& inv_rms,
                          RowMatrix<Scalar>& grad) {
    const Index d = config_.head_dim, slices = raw.size() / d;
    auto& d_raw = scratch_.d_head_norm;
    d_raw.resize(grad.rows(), grad.cols());
    const Eigen::Map<const RowMatrix<Scalar>> x(raw.data(), slices, d), dy(grad.data(), slices, d);
    Eigen::Map<RowMatrix<Scalar>> dx(d_raw.data(), slices, d);
    detail::rms_norm_backward<Scalar>(x, weight.value, inv_rms, dy, &weight.grad, dx, false);
    grad.swap(d_raw);
  }

  /// A row-parallel layer's bias is replicated and added once, after the partial products are
  /// summed over the ranks.
  const RowMatrix<Scalar>* row_parallel_bias(const ParameterTensor<Scalar>& t) const {
    return regions_ != nullptr ? nullptr : bias(t);
  }
  /// Under Megatron's sequence parallelism (`tokens_split`) the sum is reduce-scattered: y becomes
  /// this rank's slice of the tokens, and the bias is added to it only.
  void reduce_row_parallel_output(const ParameterTensor<Scalar>& bias_tensor, RowMatrix<Scalar>& y, bool tokens_split) {
    if (regions_ == nullptr) return;
    if (tokens_split) {
      regions_->reduce_scatter_rows(y, scratch_.slice);
      y.swap(scratch_.slice);
    } else {
      regions_->all_reduce_sum(y);
    }
    if (bias_tensor.present()) y.rowwise() += bias_tensor.value.row(0);
  }
  /// A column-parallel layer's input: this rank's slice of the tokens gathered over TP under
  /// Megatron's sequence parallelism (into the scratch), else `slice` itself.
  const RowMatrix<Scalar>& column_parallel_input(const RowMatrix<Scalar>& slice, bool tokens_split) {
    if (!tokens_split) return slice;
    regions_->all_gather_rows(slice, scratch_.whole);
    return scratch_.whole;
  }
  /// A row-parallel layer's output gradient over every token: gathered from the slices under
  /// Megatron's sequence parallelism (the reduce-scatter's backward), else `d_out` itself.
  const RowMatrix<Scalar>& row_parallel_output_gradient(const RowMatrix<Scalar>& d_out) {
    if (!tokens_split_) return d_out;
    regions_->all_gather_rows(d_out, scratch_.d_whole);
    return scratch_.d_whole;
  }
  /// A row-parallel bias's gradient: from the whole output gradient, or under Megatron's sequence
  /// parallelism from this rank's tokens only (a share summed over TP by the body's owner).
  RowMatrix<Scalar>* row_parallel_bias_grad(ParameterTensor<Scalar>& t) { return tokens_split_ ? nullptr : bias_grad(t); }
  void add_sliced_bias_grad(ParameterTensor<Scalar>& t, const RowMatrix<Scalar>& d_out_slice) {
    if (tokens_split_ && t.present() && t.grad.size() > 0) t.grad.row(0) += d_out_slice.colwise().sum();
  }
  /// The column-parallel layers' input gradient (every token, this rank's share of the features)
  /// summed over TP: all-reduced, or reduce-scattered into this rank's slice of the tokens.
  void sum_column_parallel_input_gradient(RowMatrix<Scalar>& d_in) {
    if (regions_ == nullptr) return;
    if (tokens_split_) {
      regions_->reduce_scatter_rows(d_in, scratch_.slice);
      d_in.swap(scratch_.slice);
    } else {
      regions_->all_reduce_sum(d_in);
    }
  }
  [[nodiscard]] bool megatron_sequence_parallel_active() const {
    return megatron_sequence_parallel_ && regions_ != nullptr && regions_->size() > 1;
  }

  /// Rows [begin, end) of out = silu(gate) * up (out already sized).
  static void swiglu_rows(const RowMatrix<Scalar>& gate, const RowMatrix<Scalar>& up, RowMatrix<Scalar>& out, Index begin,
                          Index end) {
    const Index cols = gate.cols(), count = end - begin;
    if constexpr (std::is_same_v<Scalar, float>) {
      cpu::swiglu_forward(gate.data() + begin * cols, up.data() + begin * cols, out.data() + begin * cols, count * cols);
    } else {
      out.middleRows(begin, count).array() = gate.middleRows(begin, count).array() /
                                             (Scalar(1) + (-gate.middleRows(begin, count).array()).exp()) *
                                             up.middleRows(begin, count).array();
    }
  }

  /// Causal attention within each sequence of the batch (over the last `window` keys when > 0),
  /// one task per (sequence, head).
  void attend(detail::LayerActivations<Scalar>& act, Index window) {
    const Index heads = config_.num_attention_heads;
    attend_heads(act.q, act.k, act.v, act.attn, act.lse, heads, heads / config_.num_key_value_heads, window);
  }

  /// attend over `heads` query heads of q (tokens, heads * D), `group` of them per key/value head.
  void attend_heads(const RowMatrix<Scalar>& q, const RowMatrix<Scalar>& k, const RowMatrix<Scalar>& v,
                    RowMatrix<Scalar>& attn, RowMatrix<Scalar>& lse, Index heads, Index group, Index window) {
    const Index d = config_.head_dim;
    const auto scale = static_cast<Scalar>(1.0 / std::sqrt(static_cast<double>(d)));
    const Index sequences = static_cast<Index>(cu_seqlens_.size()) - 1;
    lse.resize(q.rows(), heads);
    pool_->parallel_for(sequences * heads, [&](Index task) {
      const Index s = task / heads, h = task % heads, kv = h / group;
      const Index begin = cu_seqlens_[static_cast<std::size_t>(s)], length = cu_seqlens_[static_cast<std::size_t>(s) + 1] - begin;
      if (length == 0) return;
      thread_local std::vector<Scalar> buffer;
      detail::attention_forward_head<Scalar>({q.data() + begin * q.cols() + h * d, q.cols()},
                                             cpu::transpose_of(k.data() + begin * k.cols() + kv * d, k.cols()),
                                             {v.data() + begin * v.cols() + kv * d, v.cols()}, length, 0, d, scale,
                                             {attn.data() + begin * attn.cols() + h * d, attn.cols()},
                                             lse.data() + begin * heads + h, heads, buffer, window);
    });
  }

  [[nodiscard]] bool sequence_parallel_active() const {
    return sequence_parallel_ != nullptr && sequence_parallel_->size() > 1;
  }
  /// Copies of each KV head so that the KV heads split over the sequence-parallel ranks (verl's
  /// repeats = max(sp / num_key_value_heads, 1)).
  [[nodiscard]] Index kv_head_copies() const {
    const Index size = sequence_parallel_->size(), kv = config_.num_key_value_heads;
    return kv % size == 0 ? 1 : size / kv;
  }

  /// Rank `rank` of `size`'s slice of the batch's packed tokens (padded as verl's ulysses_pad
  /// does: token 0 at positions 0, 1, ..., a sequence of its own): slice_, and the sequences
  /// attention sees (the padding, if any, one more). tokens_ and the rotary tables are those of
  /// the slice (Ulysses), or of every padded token when `every_token` (Megatron's sequence
  /// parallelism, whose attention and embedding see them all).
  void take_sequence_slice(const TokenBatch& batch, Index size, Index rank, bool every_token) {
    const Index total = batch.num_tokens();
    const Index rows = sequence_slice_rows(total, size), padded = rows * size, begin = rank * rows;
    slice_ = {begin, rows, std::clamp<Index>(total - begin, 0, rows), total};
    const Index first = every_token ? 0 : begin, count = every_token ? padded : rows;
    const auto tokens = batch.tokens();
    const auto positions = batch.positions();
    tokens_.resize(static_cast<std::size_t>(count));
    std::vector<std::int64_t> slice_positions(static_cast<std::size_t>(count));
    for (Index t = 0; t < count; ++t) {
      const Index i = first + t;
      tokens_[static_cast<std::size_t>(t)] = i < total ? tokens[static_cast<std::size_t>(i)] : 0;
      slice_positions[static_cast<std::size_t>(t)] = i < total ? positions[static_cast<std::size_t>(i)] : i - total;
    }
    if (padded > total) cu_seqlens_.push_back(padded);
    rope_.tables(slice_positions, cos_, sin_);
  }

  /// The KV heads of x (tokens, kv * D), each copied `copies` times in a row (repeat_kv).
  RowMatrix<Scalar> repeat_kv_heads(const RowMatrix<Scalar>& x, Index copies) const {
    const Index d = config_.head_dim, kv = x.cols() / d;
    RowMatrix<Scalar> out(x.rows(), x.cols() * copies);
    for (Index j = 0; j < kv; ++j)
      for (Index c = 0; c < copies; ++c) out.middleCols((j * copies + c) * d, d) = x.middleCols(j * d, d);
    return out;
  }
  /// The backward of repeat_kv_heads: the copies' gradients summed into `out` (tokens, kv * D).
  void sum_kv_head_copies(const RowMatrix<Scalar>& repeated, Index copies, RowMatrix<Scalar>& out) const {
    const Index d = config_.head_dim, kv = out.cols() / d;
    for (Index j = 0; j < kv; ++j)
      for (Index c = 0; c < copies; ++c) out.middleCols(j * d, d) += repeated.middleCols((j * copies + c) * d, d);
  }

  /// Ulysses attention: this rank's tokens x every head -> every token x this rank's heads, the
  /// sequences' causal attention, and back.
  void attend_sequence_parallel(detail::LayerActivations<Scalar>& act, Index window) {
    auto& sp = *sequence_parallel_;
    const Index heads = config_.num_attention_heads, copies = kv_head_copies();
    const Index kv_heads = config_.num_key_value_heads * copies;
    act.q_heads = sp.gather_seq_scatter_heads(act.q, heads);
    act.k_heads = sp.gather_seq_scatter_heads(copies == 1 ? act.k : repeat_kv_heads(act.k, copies), kv_heads);
    act.v_heads = sp.gather_seq_scatter_heads(copies == 1 ? act.v : repeat_kv_heads(act.v, copies), kv_heads);
    act.attn_heads.resize(act.q_heads.rows(), act.q_heads.cols());
    attend_heads(act.q_heads, act.k_heads, act.v_heads, act.attn_heads, act.lse, heads / sp.size(), heads / kv_heads,
                 window);
    act.attn = sp.gather_heads_scatter_seq(act.attn_heads, heads);
  }

  void layer_backward(DecoderLayerWeights<Scalar>& w, const detail::LayerActivations<Scalar>& act,
                      RowMatrix<Scalar>& dx, Index window) {
    auto& pool = *pool_;
    auto& s = scratch_;
    // n: the residual stream's rows (this rank's slice under Megatron's sequence parallelism);
    // m: the tokens the column-parallel layers and attention saw.
    const Index n = act.x.rows(), m = act.gate.rows(), width = config_.hidden_size, inner = config_.intermediate_size;
    const Index heads = config_.num_attention_heads, kv_heads = config_.num_key_value_heads, d = config_.head_dim;
    const Index layer = static_cast<Index>(&w - weights_.layers.data());
    auto adapt = [&](LinearModule module, const RowMatrix<Scalar>& in, const RowMatrix<Scalar>& d_out,
                     RowMatrix<Scalar>& d_in) {
      if (adapter_ != nullptr) adapter_->backward(layer, module, in, d_out, d_in);
    };

    // ---- MLP: dx is d(x_out) = d(down) ----
    s.act.resize(m, inner);
    for_row_blocks(m, inner, [&](Index begin, Index end) { swiglu_rows(act.gate, act.up, s.act, begin, end); });
    const RowMatrix<Scalar>& d_down = row_parallel_output_gradient(dx);
    detail::linear_backward_weight<Scalar>(pool, d_down, s.act, w.down_proj.grad, row_parallel_bias_grad(w.down_bias));
    add_sliced_bias_grad(w.down_bias, dx);
    s.d_act.resize(m, inner);
    detail::linear_backward_input<Scalar>(pool, d_down, w.down_proj.value, s.d_act, false);
    adapt(LinearModule::down_proj, s.act, d_down, s.d_act);
    s.d_gate.resize(m, inner);
    s.d_up.resize(m, inner);
    for_row_blocks(m, inner, [&](Index begin, Index end) {
      const Index count = end - begin;
      if constexpr (std::is_same_v<Scalar, float>) {
        const Index at = begin * inner;
        cpu::swiglu_backward(s.d_act.data() + at, act.gate.data() + at, act.up.data() + at, s.d_gate.data() + at,
                             s.d_up.data() + at, count * inner);
      } else {
        const auto g = act.gate.middleRows(begin, count).array();
        const auto sig = (Scalar(1) + (-g).exp()).inverse();
        const auto d_act = s.d_act.middleRows(begin, count).array();
        s.d_up.middleRows(begin, count).array() = d_act * g * sig;
        s.d_gate.middleRows(begin, count).array() =
            d_act * act.up.middleRows(begin, count).array() * sig * (Scalar(1) + g * (Scalar(1) - sig));
      }
    });
    s.h.resize(n, width);
    for_row_blocks(n, width, [&](Index begin, Index end) {
      detail::rms_norm_recompute_rows<Scalar>(act.x_mid, w.post_attention_layernorm.value, act.inv_rms_post.data(), s.h,
                                              begin, end);
    });
    const RowMatrix<Scalar>& h_mid = column_parallel_input(s.h, tokens_split_);
    detail::linear_backward_weight<Scalar>(pool, s.d_gate, h_mid, w.gate_proj.grad, bias_grad(w.gate_bias));
    detail::linear_backward_weight<Scalar>(pool, s.d_up, h_mid, w.up_proj.grad, bias_grad(w.up_bias));
    s.d_h.resize(m, width);
    detail::linear_backward_input<Scalar>(pool, s.d_gate, w.gate_proj.value, s.d_h, false);
    detail::linear_backward_input<Scalar>(pool, s.d_up, w.up_proj.value, s.d_h, true);
    adapt(LinearModule::gate_proj, h_mid, s.d_gate, s.d_h);
    adapt(LinearModule::up_proj, h_mid, s.d_up, s.d_h);
    sum_column_parallel_input_gradient(s.d_h);
    // dx becomes d(x_mid): the residual plus the norm's input gradient.
    detail::rms_norm_backward<Scalar>(act.x_mid, w.post_attention_layernorm.value, act.inv_rms_post, s.d_h,
                                      &w.post_attention_layernorm.grad, dx, true);

    // ---- attention: dx is d(o_proj output) ----
    const RowMatrix<Scalar>& d_o = row_parallel_output_gradient(dx);
    detail::linear_backward_weight<Scalar>(pool, d_o, act.attn, w.o_proj.grad, row_parallel_bias_grad(w.o_bias));
    add_sliced_bias_grad(w.o_bias, dx);
    s.d_attn.resize(m, heads * d);
    detail::linear_backward_input<Scalar>(pool, d_o, w.o_proj.value, s.d_attn, false);
    adapt(LinearModule::o_proj, act.attn, d_o, s.d_attn);
    s.dq.resize(m, heads * d);
    s.dk.setZero(m, kv_heads * d);
    s.dv.setZero(m, kv_heads * d);
    if (sequence_parallel_active()) {
      attend_backward_sequence_parallel(act, window);
    } else {
      attend_backward(act, window);
    }
    for_row_blocks(m, (heads + kv_heads) * d, [&](Index begin, Index end) {
      RotaryEmbedding<Scalar>::apply_rows(s.dq.data(), s.dq.cols(), begin, end, heads, d, cos_, sin_, true);
      RotaryEmbedding<Scalar>::apply_rows(s.dk.data(), s.dk.cols(), begin, end, kv_heads, d, cos_, sin_, true);
    });
    if (config_.qk_norm) {
      head_norm_backward(act.q_raw, w.q_norm, act.inv_rms_q, s.dq);
      head_norm_backward(act.k_raw, w.k_norm, act.inv_rms_k, s.dk);
    }
    for_row_blocks(n, width, [&](Index begin, Index end) {
      detail::rms_norm_recompute_rows<Scalar>(act.x, w.input_layernorm.value, act.inv_rms_in.data(), s.h, begin, end);
    });
    const RowMatrix<Scalar>& h_in = column_parallel_input(s.h, tokens_split_);
    detail::linear_backward_weight<Scalar>(pool, s.dq, h_in, w.q_proj.grad, bias_grad(w.q_bias));
    detail::linear_backward_weight<Scalar>(pool, s.dk, h_in, w.k_proj.grad, bias_grad(w.k_bias));
    detail::linear_backward_weight<Scalar>(pool, s.dv, h_in, w.v_proj.grad, bias_grad(w.v_bias));
    s.d_h.resize(m, width);
    detail::linear_backward_input<Scalar>(pool, s.dq, w.q_proj.value, s.d_h, false);
    detail::linear_backward_input<Scalar>(pool, s.dk, w.k_proj.value, s.d_h, true);
    detail::linear_backward_input<Scalar>(pool, s.dv, w.v_proj.value, s.d_h, true);
    adapt(LinearModule::q_proj, h_in, s.dq, s.d_h);
    adapt(LinearModule::k_proj, h_in, s.dk, s.d_h);
    adapt(LinearModule::v_proj, h_in, s.dv, s.d_h);
    sum_column_parallel_input_gradient(s.d_h);
    detail::rms_norm_backward<Scalar>(act.x, w.input_layernorm.value, act.inv_rms_in, s.d_h, &w.input_layernorm.grad,
                                      dx, true);
  }

  /// One task per (sequence, key/value head): the query heads of a group run in order, so their
  /// dk and dv contributions add up deterministically.
  void attend_backward(const detail::LayerActivations<Scalar>& act, Index window) {
    auto& s = scratch_;
    attend_backward_heads(act.q, act.k, act.v, act.attn, s.d_attn, act.lse, s.dq, s.dk, s.dv,
                          config_.num_attention_heads, config_.num_key_value_heads, window);
  }

  /// attend_backward over `heads` query heads and `kv_heads` key/value heads: dq overwritten, dk
  /// and dv accumulated.
  void attend_backward_heads(const RowMatrix<Scalar>& q, const RowMatrix<Scalar>& k, const RowMatrix<Scalar>& v,
                             const RowMatrix<Scalar>& attn, const RowMatrix<Scalar>& d_attn, const RowMatrix<Scalar>& lse,
                             RowMatrix<Scalar>& dq, RowMatrix<Scalar>& dk, RowMatrix<Scalar>& dv, Index heads,
                             Index kv_heads, Index window) {
    const Index d = config_.head_dim, group = heads / kv_heads;
    const auto scale = static_cast<Scalar>(1.0 / std::sqrt(static_cast<double>(d)));
    const Index sequences = static_cast<Index>(cu_seqlens_.size()) - 1;
    pool_->parallel_for(sequences * kv_heads, [&](Index task) {
      const Index seq = task / kv_heads, kv = task % kv_heads;
      const Index begin = cu_seqlens_[static_cast<std::size_t>(seq)];
      const Index length = cu_seqlens_[static_cast<std::size_t>(seq) + 1] - begin;
      if (length == 0) return;
      thread_local std::vector<Scalar> buffer;
      for (Index h = kv * group; h < (kv + 1) * group; ++h) {
        detail::attention_backward_head<Scalar>(
            {q.data() + begin * q.cols() + h * d, q.cols()}, {k.data() + begin * k.cols() + kv * d, k.cols()},
            {v.data() + begin * v.cols() + kv * d, v.cols()}, {attn.data() + begin * attn.cols() + h * d, attn.cols()},
            {d_attn.data() + begin * d_attn.cols() + h * d, d_attn.cols()}, lse.data() + begin * heads + h, heads,
            length, d, scale, {dq.data() + begin * dq.cols() + h * d, dq.cols()},
            {dk.data() + begin * dk.cols() + kv * d, dk.cols()}, {dv.data() + begin * dv.cols() + kv * d, dv.cols()},
            buffer, window);
      }
    });
  }

  /// The backward of attend_sequence_parallel: d(attention output) to every token x this rank's
  /// heads, the heads' backward, and dq, dk, dv back to this rank's tokens (the KV copies summed).
  void attend_backward_sequence_parallel(const detail::LayerActivations<Scalar>& act, Index window) {
    auto& s = scratch_;
    auto& sp = *sequence_parallel_;
    const Index heads = config_.num_attention_heads, copies = kv_head_copies(), d = config_.head_dim;
    const Index kv_heads = config_.num_key_value_heads * copies;
    const Index local_heads = heads / sp.size(), local_kv_heads = kv_heads / sp.size(), tokens = act.q_heads.rows();
    const RowMatrix<Scalar> d_attn_heads = sp.gather_seq_scatter_heads(s.d_attn, heads);
    RowMatrix<Scalar> dq_heads(tokens, local_heads * d);
    RowMatrix<Scalar> dk_heads = RowMatrix<Scalar>::Zero(tokens, local_kv_heads * d);
    RowMatrix<Scalar> dv_heads = RowMatrix<Scalar>::Zero(tokens, local_kv_heads * d);
    attend_backward_heads(act.q_heads, act.k_heads, act.v_heads, act.attn_heads, d_attn_heads, act.lse, dq_heads,
                          dk_heads, dv_heads, local_heads, local_kv_heads, window);
    s.dq = sp.gather_heads_scatter_seq(dq_heads, heads);
    if (copies == 1) {
      s.dk = sp.gather_heads_scatter_seq(dk_heads, kv_heads);
      s.dv = sp.gather_heads_scatter_seq(dv_heads, kv_heads);
    } else {  // s.dk and s.dv are zero (n, num_key_value_heads * D)
      sum_kv_head_copies(sp.gather_heads_scatter_seq(dk_heads, kv_heads), copies, s.dk);
      sum_kv_head_copies(sp.gather_heads_scatter_seq(dv_heads, kv_heads), copies, s.dv);
    }
  }

  HfModelConfig config_;
  TransformerOptions options_;
  DecoderWeights<Scalar> weights_;
  RotaryEmbedding<Scalar> rope_;
  std::shared_ptr<cpu::ThreadPool> pool_;
  LinearAdapter<Scalar>* adapter_ = nullptr;
  TensorParallelRegions<Scalar>* regions_ = nullptr;
  SequenceParallelRegions<Scalar>* sequence_parallel_ = nullptr;
  LayerParameterHooks* layer_hooks_ = nullptr;
  SequenceSlice slice_;
  bool megatron_sequence_parallel_ = false;
  bool tokens_split_ = false;  ///< the last forward ran under Megatron's sequence parallelism

  // The last forward pass.
  bool saved_ = false;
  std::vector<TokenId> tokens_;
  std::vector<std::int64_t> cu_seqlens_;
  RowMatrix<Scalar> cos_, sin_;
  std::vector<detail::LayerActivations<Scalar>> activations_;
  RowMatrix<Scalar> final_x_;
  Vector<Scalar> final_inv_rms_;
  RowMatrix<Scalar> hidden_;
  RowMatrix<Scalar> stage_input_gradient_;
  detail::LayerScratch<Scalar> scratch_;
  PipelineStageLayers stage_;
};

}  // namespace verl::model
