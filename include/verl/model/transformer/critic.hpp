// The reference critic: the same decoder body with a scalar value head per token,
// value = score(final hidden) with score a (1, H) linear layer with bias, as transformers'
// *ForTokenClassification(num_labels = 1) that verl's critic loads (dropout off, as verl sets it).
// Under Ulysses sequence parallelism (set_sequence_parallel) each rank of the group computes the
// values of its slice of the packed tokens and they are gathered over the group, as the policy
// model does (transformer.hpp); parameter gradients are then this rank's tokens' share.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "verl/core/error.hpp"
#include "verl/core/tensor.hpp"
#include "verl/model/transformer/decoder.hpp"
#include "verl/model/transformer/detail/parameter_module.hpp"
#include "verl/model/transformer/sequence_parallel_regions.hpp"
#include "verl/model/transformer/weights.hpp"
#include "verl/model/value_model.hpp"

namespace verl::model {

namespace detail {

/// The critics' value head (BasicTransformerCritic's, BasicTensorParallelCritic's): score, a
/// (1, H) linear layer with bias, on the final hidden states, one value per token; and what its
/// backward needs of the forward pass (each token's slot in the batch layout).
template <class Scalar>
class ValueHead {
 public:
  explicit ValueHead(Index hidden_size)
      : weight(ParameterTensor<Scalar>::matrix("score.weight", 1, hidden_size)),
        bias(ParameterTensor<Scalar>::vector("score.bias", 1)) {}

  ParameterTensor<Scalar> weight;
  ParameterTensor<Scalar> bias;

  /// The values of the (N, H) hidden states.
  [[nodiscard]] Vector<Scalar> values(const RowMatrix<Scalar>& hidden) const {
    return (hidden * weight.value.row(0).transpose()).array() + bias.value(0, 0);
  }

  /// A forward pass that keeps nothing (it drops what an earlier one kept).
  void forget() { saved_ = false; }
  /// Keeps token t's slot `slots[t]` of a batch layout of `layout_size` slots for backward (-1: a
  /// padding token, which takes no cotangent).
  void save(std::vector<std::int64_t> slots, Index layout_size) {
    saved_ = true;
    slots_ = std::move(slots);
    layout_size_ = layout_size;
  }

  /// Accumulates the head's gradients from the values' cotangents (rows * cols of the batch
  /// layout) and returns the gradient of the (N, H) `hidden` states it read; consumes the saved pass.
  RowMatrix<Scalar> backward(std::span<const Scalar> cotangents, const RowMatrix<Scalar>& hidden) {
    VERL_CHECK_ARG(saved_, "backward: no saved activations (call forward with keep_activations = true first)");
    VERL_CHECK_ARG(cotangents.size() == static_cast<std::size_t>(layout_size_),
                   "cotangents.values: expected {} values (rows * cols), got {}", layout_size_, cotangents.size());
    saved_ = false;  // the cotangents are valid: this forward pass is consumed
    const auto n = static_cast<Index>(slots_.size());
    Vector<Scalar> d_values(n);
    for (Index t = 0; t < n; ++t) {
      const std::int64_t slot = slots_[static_cast<std::size_t>(t)];
      d_values[t] = slot < 0 ? Scalar(0) : cotangents[static_cast<std::size_t>(slot)];
    }
    weight.enable_grad();
    bias.enable_grad();
    weight.grad.row(0) += d_values.transpose() * hidden;
    bias.grad(0, 0) += d_values.sum();
    return d_values * weight.value.row(0);
  }

 private:
  bool saved_ = false;
  std::vector<std::int64_t> slots_;
  Index layout_size_ = 0;
};

}  // namespace detail

template <class Scalar>
class BasicTransformerCritic : public detail::ParameterModule<BasicTransformerCritic<Scalar>, Scalar> {
 public:
  using scalar_type = Scalar;

  explicit BasicTransformerCritic(HfModelConfig config, const TransformerOptions& options = {})
      : body_(std::move(config), options), head_(body_.config().hidden_size) {}

  static BasicTransformerCritic random(HfModelConfig config, const WeightInit& init,
                                       const TransformerOptions& options = {}) {
    BasicTransformerCritic model(std::move(config), options);
    model.for_each_tensor([&](ParameterTensor<Scalar>& t) { detail::init_parameter(t, init); });
    if (const auto pad = model.config().pad_token_id; pad && *pad >= 0 && *pad < model.config().vocab_size) {
      model.body_.weights().embed_tokens.value.row(*pad).setZero();
    }
    return model;
  }

  /// Draws the value head only (a critic initialized from a policy checkpoint).
  void init_value_head(const WeightInit& init) {
    detail::init_parameter(head_.weight, init);
    detail::init_parameter(head_.bias, init);
  }

  [[nodiscard]] const HfModelConfig& config() const { return body_.config(); }
  [[nodiscard]] DecoderBody<Scalar>& body() { return body_; }
  [[nodiscard]] const DecoderBody<Scalar>& body() const { return body_; }
  /// The sequence-parallel group of the next passes, or none (DecoderBody::set_sequence_parallel).
  void set_sequence_parallel(SequenceParallelRegions<Scalar>* regions) { body_.set_sequence_parallel(regions); }

  ValueOutput<Scalar> forward(const TokenBatch& batch, const ValueForwardOptions& options) {
    head_.forget();
    const RowMatrix<Scalar>& hidden = body_.forward(batch, options.keep_activations);
    Vector<Scalar> values = head_.values(hidden);
    const SequenceSlice slice = body_.sequence_slice();
    const auto slots = batch.slots();
    const bool split = body_.sequence_parallel() != nullptr && body_.sequence_parallel()->size() > 1;
    if (options.keep_activations) {
      if (split) {  // this slice's tokens; padding tokens (-1) take no cotangent
        std::vector<std::int64_t> mine(static_cast<std::size_t>(hidden.rows()), -1);
        for (Index t = 0; t < slice.real_rows; ++t) mine[static_cast<std::size_t>(t)] = slots[static_cast<std::size_t>(slice.begin + t)];
        head_.save(std::move(mine), batch.layout_size());
      } else {
        head_.save({slots.begin(), slots.end()}, batch.layout_size());
      }
    }
    if (split) {  // every rank's slice in token order, the padding cut
      const RowMatrix<Scalar> all = body_.sequence_parallel()->all_gather_rows(RowMatrix<Scalar>(values));
      values = all.col(0).head(slice.total);
    }
    return {batch.scatter<Scalar>(std::span<const Scalar>(values.data(), static_cast<std::size_t>(values.size())))};
  }

  void backward(const ValueCotangents<Scalar>& cotangents) {
    RowMatrix<Scalar> d_hidden = head_.backward(cotangents.values, body_.hidden());
    body_.backward(d_hidden);
  }

  void load_state_dict(const StateDict& dict) { detail::load_state_dict(*this, dict); }

  template <class Fn>
  void for_each_tensor(Fn&& fn) {
    DecoderWeights<Scalar>::for_each(body_.weights(), fn);
    fn(head_.weight);
    fn(head_.bias);
  }
  template <class Fn>
  void for_each_tensor(Fn&& fn) const {
    DecoderWeights<Scalar>::for_each(body_.weights(), fn);
    fn(head_.weight);
    fn(head_.bias);
  }

 private:
  DecoderBody<Scalar> body_;
  detail::ValueHead<Scalar> head_;
};

using TransformerCritic = BasicTransformerCritic<float>;

static_assert(ValueModel<TransformerCritic>);
static_assert(ValueModel<BasicTransformerCritic<double>>);

}  // namespace verl::model
