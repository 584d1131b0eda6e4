// The reference critic: the same decoder body with a scalar value head per token,
// value = score(final hidden) with score a (1, H) linear layer with bias, as transformers'
// *ForTokenClassification(num_labels = 1) that verl's critic loads (dropout off, as verl sets it).
// Under Ulysses sequence parallelism (set_sequence_parallel) each rank of the group computes the
// values of its slice of the packed tokens and they are gathered over the group, as the policy
// model does (transformer.hpp); parameter gradients are then this rank's tokens' share.
#pragma once

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

template <class Scalar>
class BasicTransformerCritic : public detail::ParameterModule<BasicTransformerCritic<Scalar>, Scalar> {
 public:
  using scalar_type = Scalar;

  explicit BasicTransformerCritic(HfModelConfig config, const TransformerOptions& options = {})
      : body_(std::move(config), options),
        score_weight_(ParameterTensor<Scalar>::matrix("score.weight", 1, body_.config().hidden_size)),
        score_bias_(ParameterTensor<Scalar>::vector("score.bias", 1)) {}

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
    detail::init_parameter(score_weight_, init);
    detail::init_parameter(score_bias_, init);
  }

  [[nodiscard]] const HfModelConfig& config() const { return body_.config(); }
  [[nodiscard]] DecoderBody<Scalar>& body() { return body_; }
  [[nodiscard]] const DecoderBody<Scalar>& body() const { return body_; }
  /// The sequence-parallel group of the next passes, or none (DecoderBody::set_sequence_parallel).
  void set_sequence_parallel(SequenceParallelRegions<Scalar>* regions) { body_.set_sequence_parallel(regions); }

  ValueOutput<Scalar> forward(const TokenBatch& batch, const ValueForwardOptions& options) {
    saved_ = false;
    const RowMatrix<Scalar>& hidden = body_.forward(batch, options.keep_activations);
    Vector<Scalar> values = (hidden * score_weight_.value.row(0).transpose()).array() + score_bias_.value(0, 0);
    const SequenceSlice slice = body_.sequence_slice();
    const auto slots = batch.slots();
    const bool split = body_.sequence_parallel() != nullptr && body_.sequence_parallel()->size() > 1;
    if (options.keep_activations) {
      saved_ = true;
      if (split) {  // this slice's tokens; padding tokens (-1) take no cotangent
        saved_slots_.assign(static_cast<std::size_t>(hidden.rows()), -1);
        for (Index t = 0; t < slice.real_rows; ++t)
          saved_slots_[static_cast<std::size_t>(t)] = slots[static_cast<std::size_t>(slice.begin + t)];
      } else {
        saved_slots_.assign(slots.begin(), slots.end());
      }
      saved_layout_size_ = batch.layout_size();
    }
    if (split) {  // every rank's slice in token order, the padding cut
      const RowMatrix<Scalar> all = body_.sequence_parallel()->all_gather_rows(RowMatrix<Scalar>(values));
      values = all.col(0).head(slice.total);
    }
    return {batch.scatter<Scalar>(std::span<const Scalar>(values.data(), static_cast<std::size_t>(values.size())))};
  }

  void backward(const ValueCotangents<Scalar>& cotangents) {
    VERL_CHECK_ARG(saved_, "backward: no saved activations (call forward with keep_activations = true first)");
    VERL_CHECK_ARG(cotangents.values.size() == static_cast<std::size_t>(saved_layout_size_),
                   "cotangents.values: expected {} values (rows * cols), got {}", saved_layout_size_,
                   cotangents.values.size());
    saved_ = false;  // the cotangents are valid: this forward pass is consumed
    const auto n = static_cast<Index>(saved_slots_.size());
    Vector<Scalar> d_values(n);
    for (Index t = 0; t < n; ++t) {
      const std::int64_t slot = saved_slots_[static_cast<std::size_t>(t)];
      d_values[t] = slot < 0 ? Scalar(0) : cotangents.values[static_cast<std::size_t>(slot)];
    }
    score_weight_.enable_grad();
    score_bias_.enable_grad();
    const RowMatrix<Scalar>& hidden = body_.hidden();
    score_weight_.grad.row(0) += d_values.transpose() * hidden;
    score_bias_.grad(0, 0) += d_values.sum();
    RowMatrix<Scalar> d_hidden = d_values * score_weight_.value.row(0);
    body_.backward(d_hidden);
  }

  void load_state_dict(const StateDict& dict) { detail::load_state_dict(*this, dict); }

  template <class Fn>
  void for_each_tensor(Fn&& fn) {
    DecoderWeights<Scalar>::for_each(body_.weights(), fn);
    fn(score_weight_);
    fn(score_bias_);
  }
  template <class Fn>
  void for_each_tensor(Fn&& fn) const {
    DecoderWeights<Scalar>::for_each(body_.weights(), fn);
    fn(score_weight_);
    fn(score_bias_);
  }

 private:
  DecoderBody<Scalar> body_;
  ParameterTensor<Scalar> score_weight_;
  ParameterTensor<Scalar> score_bias_;
  bool saved_ = false;
  std::vector<std::int64_t> saved_slots_;
  Index saved_layout_size_ = 0;
};

using TransformerCritic = BasicTransformerCritic<float>;

static_assert(ValueModel<TransformerCritic>);
static_assert(ValueModel<BasicTransformerCritic<double>>);

}  // namespace verl::model
