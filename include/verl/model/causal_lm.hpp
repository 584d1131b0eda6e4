// The CausalLM concept: what the actor, the reference policy and rollout need from a policy model,
// whatever its implementation (our reference transformer, or a user's own model).
//
// A model runs a forward pass over a TokenBatch (padded with an attention mask, or packed with
// cu_seqlens as verl's use_remove_padding does) and yields, per token, the logits and/or the fused
// log-probability of a given target token (and optionally the entropy) of softmax(logits / T).
// backward() takes the cotangents of those outputs and accumulates parameter gradients, as
// torch's .backward() does. Parameters are visited by their Hugging Face names together with their
// gradients; state_dict() / load_state_dict() exchange named float32 tensors.
#pragma once

#include <algorithm>
#include <concepts>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "verl/config.hpp"
#include "verl/core/error.hpp"
#include "verl/core/tensor.hpp"

namespace verl::model {

/// Token ids are int64, like torch.long input_ids (the same alias as the Tokenizer concept's).
using TokenId = std::int64_t;

/// The tokens of a batch of sequences, in one of verl's two layouts:
///   padded (B, T) with a 0/1 attention mask (left-padded prompts, right-padded responses), or
///   packed (use_remove_padding): the sequences back to back, delimited by cu_seqlens.
/// Either way a model sees only the valid tokens, in order, each with its position id; outputs
/// are reported in the batch layout (rows, cols) = (B, T) or (1, total tokens), zero at padding.
/// A token attends to the earlier tokens of its own sequence (a padded row's valid tokens).
class TokenBatch {
 public:
  /// input_ids and attention_mask (B, T); position ids are verl's clip(cumsum(mask) - 1, 0).
  static TokenBatch padded(const Eigen::Ref<const MatrixI64>& input_ids, const ConstMatrixRefF& attention_mask) {
    verl::detail::require_same_shape("attention_mask", shape_of(attention_mask), "input_ids", shape_of(input_ids));
    MatrixI64 positions(input_ids.rows(), input_ids.cols());
    for (Index r = 0; r < positions.rows(); ++r) {
      std::int64_t seen = 0;
      for (Index c = 0; c < positions.cols(); ++c) {
        seen += attention_mask(r, c) != 0 ? 1 : 0;
        positions(r, c) = std::max<std::int64_t>(seen - 1, 0);
      }
    }
    return padded(input_ids, attention_mask, positions);
  }

  /// input_ids, attention_mask and position_ids (B, T).
  static TokenBatch padded(const Eigen::Ref<const MatrixI64>& input_ids, const ConstMatrixRefF& attention_mask,
                           const Eigen::Ref<const MatrixI64>& position_ids) {
    verl::detail::require_same_shape("attention_mask", shape_of(attention_mask), "input_ids", shape_of(input_ids));
    verl::detail::require_same_shape("position_ids", shape_of(position_ids), "input_ids", shape_of(input_ids));
    verl::detail::require_binary_mask("attention_mask", attention_mask);
    TokenBatch batch;
    batch.rows_ = input_ids.rows();
    batch.cols_ = input_ids.cols();
    batch.cu_seqlens_.push_back(0);
    for (Index r = 0; r < batch.rows_; ++r) {
      for (Index c = 0; c < batch.cols_; ++c) {
        if (attention_mask(r, c) == 0) continue;
        VERL_CHECK_ARG(position_ids(r, c) >= 0, "position_ids: expected values >= 0, got {} at ({}, {})",
                       position_ids(r, c), r, c);
        batch.tokens_.push_back(input_ids(r, c));
        batch.positions_.push_back(position_ids(r, c));
        batch.slots_.push_back(r * batch.cols_ + c);
      }
      batch.cu_seqlens_.push_back(static_cast<std::int64_t>(batch.tokens_.size()));
    }
    return batch;
  }

  /// Packed sequences: input_ids of all sequences back to back, cu_seqlens = {0, n0, n0 + n1, ...}
  /// (flash-attn's cumulative lengths); position ids default to 0, 1, ... within each sequence.
  static TokenBatch packed(std::span<const TokenId> input_ids, std::span<const std::int64_t> cu_seqlens,
                           std::span<const std::int64_t> position_ids = {}) {
    const auto total = static_cast<std::int64_t>(input_ids.size());
    VERL_CHECK_ARG(!cu_seqlens.empty() && cu_seqlens.front() == 0 && cu_seqlens.back() == total,
                   "cu_seqlens: expected {{0, ..., {}}} (starting at 0 and ending at the number of input_ids), got "
                   "{} values from {} to {}",
                   total, cu_seqlens.size(), cu_seqlens.empty() ? -1 : cu_seqlens.front(),
                   cu_seqlens.empty() ? -1 : cu_seqlens.back());
    for (std::size_t s = 1; s < cu_seqlens.size(); ++s) {
      VERL_CHECK_ARG(cu_seqlens[s] >= cu_seqlens[s - 1], "cu_seqlens: expected non-decreasing values, got {} after {}",
                     cu_seqlens[s], cu_seqlens[s - 1]);
    }
    VERL_CHECK_ARG(position_ids.empty() || position_ids.size() == input_ids.size(),
                   "position_ids: expected {} values (one per input id) or none, got {}", input_ids.size(),
                   position_ids.size());
    TokenBatch batch;
    batch.rows_ = 1;
    batch.cols_ = total;
    batch.tokens_.assign(input_ids.begin(), input_ids.end());
    batch.cu_seqlens_.assign(cu_seqlens.begin(), cu_seqlens.end());
    batch.positions_.resize(input_ids.size());
    batch.slots_.resize(input_ids.size());
    for (std::size_t s = 0; s + 1 < cu_seqlens.size(); ++s) {
      for (std::int64_t i = cu_seqlens[s]; i < cu_seqlens[s + 1]; ++i) {
        const auto at = static_cast<std::size_t>(i);
        batch.positions_[at] = position_ids.empty() ? i - cu_seqlens[s] : position_ids[at];
        VERL_CHECK_ARG(batch.positions_[at] >= 0, "position_ids: expected values >= 0, got {} at {}",
                       batch.positions_[at], i);
        batch.slots_[at] = i;
      }
    }
    batch.packed_ = true;
    return batch;
  }

  [[nodiscard]] bool is_packed() const { return packed_; }
  /// The layout outputs are reported in: (B, T) padded, (1, total tokens) packed.
  [[nodiscard]] Index rows() const { return rows_; }
  [[nodiscard]] Index cols() const { return cols_; }
  [[nodiscard]] Index layout_size() const { return rows_ * cols_; }
  [[nodiscard]] Index num_tokens() const { return static_cast<Index>(tokens_.size()); }
  /// Sequences, including empty ones (a padded row without valid tokens).
  [[nodiscard]] Index num_sequences() const { return static_cast<Index>(cu_seqlens_.size()) - 1; }
  /// Valid tokens, sequence after sequence.
  [[nodiscard]] std::span<const TokenId> tokens() const { return tokens_; }
  [[nodiscard]] std::span<const std::int64_t> positions() const { return positions_; }
  [[nodiscard]] std::span<const std::int64_t> cu_seqlens() const { return cu_seqlens_; }
  /// The layout slot (row * cols + col) of each valid token.
  [[nodiscard]] std::span<const std::int64_t> slots() const { return slots_; }

  /// Per-token values (num_tokens) placed into the layout (rows, cols), zero at padding.
  template <class Scalar>
  [[nodiscard]] RowMatrix<Scalar> scatter(std::span<const Scalar> per_token) const {
    verl::detail::require_length("per_token", static_cast<Index>(per_token.size()), num_tokens());
    RowMatrix<Scalar> out = RowMatrix<Scalar>::Zero(rows_, cols_);
    for (std::size_t i = 0; i < per_token.size(); ++i) out.data()[slots_[i]] = per_token[i];
    return out;
  }
  /// Layout values (rows * cols) at the valid tokens, in token order.
  template <class T>
  [[nodiscard]] std::vector<std::remove_const_t<T>> gather(std::span<T> layout_values, std::string_view argument) const {
    verl::detail::require_length(argument, static_cast<Index>(layout_values.size()), layout_size());
    std::vector<std::remove_const_t<T>> out(tokens_.size());
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = layout_values[static_cast<std::size_t>(slots_[i])];
    return out;
  }

 private:
  TokenBatch() = default;

  Index rows_ = 0;
  Index cols_ = 0;
  bool packed_ = false;
  std::vector<TokenId> tokens_;
  std::vector<std::int64_t> positions_;
  std::vector<std::int64_t> cu_seqlens_;
  std::vector<std::int64_t> slots_;
};

/// The next token of the same sequence at each slot (0 at a sequence's last token and at padding):
/// the labels verl's actor scores, input_ids shifted left by one.
inline MatrixI64 next_token_targets(const TokenBatch& batch) {
  MatrixI64 targets = MatrixI64::Zero(batch.rows(), batch.cols());
  const auto cu = batch.cu_seqlens();
  const auto tokens = batch.tokens();
  const auto slots = batch.slots();
  for (std::size_t s = 0; s + 1 < cu.size(); ++s) {
    for (std::int64_t i = cu[s]; i + 1 < cu[s + 1]; ++i) {
      targets.data()[slots[static_cast<std::size_t>(i)]] = tokens[static_cast<std::size_t>(i + 1)];
    }
  }
  return targets;
}

/// One parameter as seen by a visitor: its Hugging Face name, its shape (torch order) and its
/// values and gradient as flat row-major spans. `Scalar` is const-qualified for read-only visits.
template <class Scalar>
struct Parameter {
  std::string_view name;
  std::span<const std::int64_t> shape;
  std::span<Scalar> value;
  std::span<Scalar> grad;
};

/// A named tensor of a state dict (float32, row-major, torch shape).
struct StateTensor {
  std::vector<std::int64_t> shape;
  std::vector<float> values;
  friend bool operator==(const StateTensor&, const StateTensor&) = default;
};

/// Parameters by name, as torch's state_dict().
using StateDict = std::map<std::string, StateTensor, std::less<>>;

/// What a causal-LM forward pass computes besides the hidden states.
struct ForwardOptions {
  /// Target token per slot of the batch layout (rows * cols values, row-major), e.g.
  /// next_token_targets(batch); empty: no log-probs. Targets at padding slots are ignored.
  std::span<const std::int64_t> targets = {};
  bool return_logits = false;   ///< the raw logits, (rows * cols, V)
  bool return_entropy = false;  ///< entropy of softmax(logits / temperature) per slot
  /// sum_j softmax(logits / temperature)_j^2 per slot (verl's calculate_sum_pi_squared, which the
  /// optimal-token-baseline estimators read); forward only, it takes no cotangent.
  bool return_sum_pi_squared = false;
  /// Log-probs and entropy are those of softmax(logits / temperature), as verl's actor computes
  /// them; logits are returned (and their cotangent is taken) unscaled.
  float temperature = 1.0f;
  /// Keep what backward() needs; off for inference, which then stores nothing.
  bool keep_activations = false;
};

/// Outputs in the batch layout; padding slots hold 0. A member is empty when not requested.
template <class Scalar>
struct CausalLMOutput {
  RowMatrix<Scalar> logits;     ///< (rows * cols, V): row r * cols + c is slot (r, c)
  RowMatrix<Scalar> log_probs;  ///< (rows, cols): log softmax(logits / T)[target]
  RowMatrix<Scalar> entropy;    ///< (rows, cols)
  RowMatrix<Scalar> sum_pi_squared;  ///< (rows, cols)
};

/// Cotangents of the outputs of the last forward pass (each empty = zero), in the batch layout.
template <class Scalar>
struct CausalLMCotangents {
  std::span<const Scalar> log_probs = {};  ///< rows * cols
  std::span<const Scalar> entropy = {};    ///< rows * cols
  std::span<const Scalar> logits = {};     ///< rows * cols * V, with respect to the raw logits
};

namespace detail {

/// Stand-in visitors used to test that a model's for_each_parameter accepts a callable.
template <class Scalar>
struct ParameterVisitorArchetype {
  void operator()(const Parameter<Scalar>&) const {}
};

template <class M>
concept declares_scalar_type = requires { typename M::scalar_type; };

template <class M>
concept has_vocab_size = requires(const M& model) {
  { model.vocab_size() } -> std::convertible_to<Index>;
};

template <class M>
concept has_causal_forward = declares_scalar_type<M> && requires(M& model, const TokenBatch& batch,
                                                                 const ForwardOptions& options) {
  { model.forward(batch, options) } -> std::same_as<CausalLMOutput<typename M::scalar_type>>;
};

template <class M>
concept has_causal_backward = declares_scalar_type<M> &&
                              requires(M& model, const CausalLMCotangents<typename M::scalar_type>& cotangents) {
                                model.backward(cotangents);
                              };

template <class M>
concept visits_parameters = declares_scalar_type<M> && requires(M& model) {
  model.for_each_parameter(ParameterVisitorArchetype<typename M::scalar_type>{});
  model.zero_grad();
};

template <class M>
concept has_state_dict = requires(M& model, const M& cmodel, const StateDict& dict) {
  { cmodel.state_dict() } -> std::same_as<StateDict>;
  model.load_state_dict(dict);
};

}  // namespace detail

/// A policy model: vocab_size(); forward(TokenBatch, ForwardOptions) -> CausalLMOutput;
/// backward(CausalLMCotangents) accumulating parameter gradients; for_each_parameter(visitor)
/// with Parameter<scalar_type> (name, shape, value, grad); zero_grad(); state_dict() and
/// load_state_dict(StateDict).
template <class M>
concept CausalLM = detail::declares_scalar_type<M> && detail::has_vocab_size<M> && detail::has_causal_forward<M> &&
                   detail::has_causal_backward<M> && detail::visits_parameters<M> && detail::has_state_dict<M>;

/// Named diagnostics for a type meant to be a CausalLM: one static assertion per missing part.
/// Use as `static_assert(verl::model::check_causal_lm<MyModel>())`.
template <class M>
consteval bool check_causal_lm() {
  VERL_STATIC_ASSERT(detail::declares_scalar_type<M>, THE_MODEL_MUST_DECLARE_ITS_SCALAR_TYPE);
  VERL_STATIC_ASSERT(detail::has_vocab_size<M>, THE_MODEL_MUST_REPORT_ITS_VOCAB_SIZE);
  VERL_STATIC_ASSERT(detail::has_causal_forward<M>,
                     THE_MODEL_NEEDS_FORWARD_OF_A_TOKEN_BATCH_RETURNING_CAUSAL_LM_OUTPUT);
  VERL_STATIC_ASSERT(detail::has_causal_backward<M>, THE_MODEL_NEEDS_BACKWARD_FROM_CAUSAL_LM_COTANGENTS);
  VERL_STATIC_ASSERT(detail::visits_parameters<M>, THE_MODEL_MUST_VISIT_NAMED_PARAMETERS_AND_ZERO_GRADIENTS);
  VERL_STATIC_ASSERT(detail::has_state_dict<M>, THE_MODEL_NEEDS_STATE_DICT_AND_LOAD_STATE_DICT);
  return true;
}

/// Total number of parameter elements.
template <class M>
Index parameter_count(M& model) {
  Index total = 0;
  model.for_each_parameter([&](const auto& p) { total += static_cast<Index>(p.value.size()); });
  return total;
}

}  // namespace verl::model
