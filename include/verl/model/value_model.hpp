// The ValueModel concept: verl's critic, the body of a causal LM with a scalar head per token
// (transformers' *ForTokenClassification with num_labels = 1, whose head is `score`).
//
// forward(TokenBatch, ValueForwardOptions) yields one value per slot of the batch layout (zero at
// padding); backward(ValueCotangents) accumulates parameter gradients from their cotangent.
// Parameters and state dicts work as for CausalLM.
#pragma once

#include <concepts>
#include <span>

#include "verl/config.hpp"
#include "verl/model/causal_lm.hpp"

namespace verl::model {

struct ValueForwardOptions {
  /// Keep what backward() needs; off for inference.
  bool keep_activations = false;
};

template <class Scalar>
struct ValueOutput {
  RowMatrix<Scalar> values;  ///< (rows, cols) in the batch layout, 0 at padding
};

template <class Scalar>
struct ValueCotangents {
  std::span<const Scalar> values = {};  ///< rows * cols
};

namespace detail {

template <class M>
concept has_value_forward = declares_scalar_type<M> && requires(M& model, const TokenBatch& batch,
                                                                const ValueForwardOptions& options) {
  { model.forward(batch, options) } -> std::same_as<ValueOutput<typename M::scalar_type>>;
};

template <class M>
concept has_value_backward = declares_scalar_type<M> &&
                             requires(M& model, const ValueCotangents<typename M::scalar_type>& cotangents) {
                               model.backward(cotangents);
                             };

}  // namespace detail

/// A critic: forward(TokenBatch, ValueForwardOptions) -> ValueOutput; backward(ValueCotangents);
/// for_each_parameter, zero_grad, state_dict and load_state_dict as for CausalLM.
template <class M>
concept ValueModel = detail::declares_scalar_type<M> && detail::has_value_forward<M> &&
                     detail::has_value_backward<M> && detail::visits_parameters<M> && detail::has_state_dict<M>;

/// Named diagnostics for a type meant to be a ValueModel.
template <class M>
consteval bool check_value_model() {
  VERL_STATIC_ASSERT(detail::declares_scalar_type<M>, THE_MODEL_MUST_DECLARE_ITS_SCALAR_TYPE);
  VERL_STATIC_ASSERT(detail::has_value_forward<M>, THE_VALUE_MODEL_NEEDS_FORWARD_RETURNING_ONE_VALUE_PER_TOKEN);
  VERL_STATIC_ASSERT(detail::has_value_backward<M>, THE_VALUE_MODEL_NEEDS_BACKWARD_FROM_VALUE_COTANGENTS);
  VERL_STATIC_ASSERT(detail::visits_parameters<M>, THE_MODEL_MUST_VISIT_NAMED_PARAMETERS_AND_ZERO_GRADIENTS);
  VERL_STATIC_ASSERT(detail::has_state_dict<M>, THE_MODEL_NEEDS_STATE_DICT_AND_LOAD_STATE_DICT);
  return true;
}

}  // namespace verl::model
