// The value model (BasicTransformerCritic) under Megatron tensor parallelism: the decoder body is
// BasicTensorParallelTransformer's, built as a trunk without the LM head (TensorParallelHead::none:
// column-parallel q/k/v and gate/up, row-parallel o/down, vocabulary-parallel embedding, replicated
// norms), and the value head score (1, H) + bias is replicated on every rank of the TP group.
// The head reads the final hidden states, which are whole and the same on every rank (the
// row-parallel sums are all-reduced; under Megatron's sequence parallelism the normed token slices
// are all-gathered first), so every rank computes the same values, the same head gradients and the
// same d(hidden): the head's gradients need no sum over TP (as the replicated norms'), and the
// trunk's backward_hidden takes d(hidden) as it is (under sequence parallelism each rank keeps its
// slice's rows of it). Megatron's value head under sequence parallelism reads the token slices and
// all-reduces its gradient instead; the numbers are the same up to the order of sums.
//
// Every rank of the group must be given the same batch (checked). for_each_parameter and
// state_dict() visit this rank's shards (the head whole); for_each_full_parameter, gather_full and
// the gradient norm (gradient_squared_norm: every element of the full gradient once) are
// collective. With one rank the model computes what BasicTransformerCritic does.
//
// A pipeline stage (Megatron's pipeline parallelism; `stage`: its layers) holds the trunk's layers
// of that stage, the embedding on the first and the final norm and the value head on the last;
// the stages before the last run forward_stage / backward_stage (the trunk's), the last forward
// and backward from the previous stage's activations, as the policy's stages do.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "verl/core/error.hpp"
#include "verl/core/tensor.hpp"
#include "verl/model/hf_config.hpp"
#include "verl/model/transformer/critic.hpp"
#include "verl/model/transformer/detail/parameter_module.hpp"
#include "verl/model/transformer/tensor_parallel_transformer.hpp"
#include "verl/model/transformer/weights.hpp"
#include "verl/model/value_model.hpp"
#include "verl/parallel/communicator.hpp"

namespace verl::model {

template <class Scalar, parallel::Communicator Comm>
class BasicTensorParallelCritic : public detail::ParameterModule<BasicTensorParallelCritic<Scalar, Comm>, Scalar> {
 public:
  using scalar_type = Scalar;
  using communicator_type = Comm;
  using Trunk = BasicTensorParallelTransformer<Scalar, Comm>;

  /// This rank's shard, zero-initialized, for `config` over the ranks of `tp`. Collective (as
  /// BasicTensorParallelTransformer's constructor).
  BasicTensorParallelCritic(HfModelConfig config, Comm tp, const TransformerOptions& options = {},
                            PipelineStageLayers stage = {})
      : trunk_(std::move(config), std::move(tp), options, stage, TensorParallelHead::none),
        head_(trunk_.last_stage() ? trunk_.config().hidden_size : 0) {}

  /// This rank's shard of `dense`'s body (of `stage`'s layers) and the whole value head on the
  /// last stage (its options too). Collective.
  BasicTensorParallelCritic(const BasicTransformerCritic<Scalar>& dense, Comm tp, PipelineStageLayers stage = {})
      : BasicTensorParallelCritic(dense.config(), std::move(tp), dense.body().options(), stage) {
    trunk_.copy_shards_of(dense);
    dense.for_each_tensor([&](const ParameterTensor<Scalar>& t) {
      if (ParameterTensor<Scalar>* head = value_head(t.name)) head->value = t.value;
    });
  }

  [[nodiscard]] const HfModelConfig& config() const { return trunk_.config(); }
  [[nodiscard]] const TensorParallelPartition& partition() const { return trunk_.partition(); }
  [[nodiscard]] int tp_rank() const { return trunk_.tp_rank(); }
  [[nodiscard]] int tp_size() const { return trunk_.tp_size(); }
  [[nodiscard]] Comm& communicator() { return trunk_.communicator(); }
  /// The sharded body (a BasicTensorParallelTransformer without the LM head).
  [[nodiscard]] const Trunk& trunk() const { return trunk_; }
  /// What this rank holds of the parameter `name` (the value head: replicated).
  [[nodiscard]] TensorParallelShard shard_of(std::string_view name) const { return trunk_.shard_of(name); }

  /// Megatron's sequence parallelism for the next passes (BasicTensorParallelTransformer::
  /// set_sequence_parallel): the same values and gradients up to the order of sums.
  void set_sequence_parallel(bool on) { trunk_.set_sequence_parallel(on); }
  [[nodiscard]] bool sequence_parallel() const { return trunk_.sequence_parallel(); }

  /// Collective: every rank of the group passes the same batch and gets the same values. The last
  /// of several pipeline stages starts from the previous stage's activations `stage_input`.
  ValueOutput<Scalar> forward(const TokenBatch& batch, const ValueForwardOptions& options,
                              const RowMatrix<Scalar>* stage_input = nullptr) {
    VERL_CHECK_ARG(last_stage(), "forward: a pipeline stage before the last has no value head: call forward_stage");
    head_.forget();
    const RowMatrix<Scalar>& hidden = trunk_.forward_hidden(batch, options.keep_activations, stage_input);
    const Vector<Scalar> values = head_.values(hidden);
    if (options.keep_activations) {
      const auto slots = batch.slots();
      head_.save({slots.begin(), slots.end()}, batch.layout_size());
    }
    return {batch.scatter<Scalar>(std::span<const Scalar>(values.data(), static_cast<std::size_t>(values.size())))};
  }

  /// Collective. Accumulates the gradients of this rank's shards and of the (replicated) head from
  /// the values' cotangents, the same on every rank (the last stage: then stage_input_gradient()).
  void backward(const ValueCotangents<Scalar>& cotangents) {
    RowMatrix<Scalar> d_hidden = head_.backward(cotangents.values, trunk_.hidden());
    trunk_.backward_hidden(d_hidden);
  }

  /// Collective: the squared L2 norm of the whole model's gradient, every element once (the
  /// trunk's over TP; the head's gradient is the same on every rank and is added once).
  [[nodiscard]] double gradient_squared_norm() {
    double squares = trunk_.gradient_squared_norm();
    if (last_stage())
      for (const ParameterTensor<Scalar>* t : {&head_.weight, &head_.bias})
        if (t->grad.size() > 0) squares += t->grad.template cast<double>().squaredNorm();
    return squares;
  }
  /// How many ranks of the TP group hold the same gradient of `tensor` (the head: every rank).
  [[nodiscard]] double gradient_copies(std::string_view tensor) const { return trunk_.gradient_copies(tensor); }

  /// Collective: the full tensor `name` from every rank's values `local` laid out like this
  /// rank's parameter (its value, gradient or an optimizer moment), row-major.
  [[nodiscard]] std::vector<Scalar> gather_full(std::string_view name, std::span<const Scalar> local) {
    if (value_head(name) != nullptr) return {local.begin(), local.end()};
    return trunk_.gather_full(name, local);
  }
  /// This rank's block of the full tensor `name` (row-major values of the full shape).
  [[nodiscard]] std::vector<Scalar> shard_values(std::string_view name, std::span<const float> full) {
    if (const ParameterTensor<Scalar>* head = value_head(name)) {
      VERL_CHECK_ARG(full.size() == static_cast<std::size_t>(head->value.size()),
                     "shard_values: tensor '{}': expected {} values, got {}", name, head->value.size(), full.size());
      return {full.begin(), full.end()};
    }
    return trunk_.shard_values(name, full);
  }

  /// Collective: visits every parameter gathered whole, as Parameter<const Scalar> (full shape,
  /// value, and gradient when gradients are enabled), in the order of for_each_parameter.
  template <class Fn>
  void for_each_full_parameter(Fn&& fn) {
    trunk_.for_each_full_parameter(fn);
    if (last_stage())
      for (const ParameterTensor<Scalar>* t : {&head_.weight, &head_.bias}) fn(t->view());
  }

  /// This rank's shards of full tensors (a Hugging Face state dict of the value model: body
  /// tensors and score.weight / score.bias), strict as load_state_dict.
  void load_full_state_dict(const StateDict& dict) {
    StateDict body;
    for (const auto& [name, tensor] : dict)
      if (name != head_.weight.name && name != head_.bias.name) body.emplace(name, tensor);  // the head's: below
    trunk_.load_full_state_dict(body);
    if (!last_stage()) return;
    for (ParameterTensor<Scalar>* head : {&head_.weight, &head_.bias}) {
      const auto found = dict.find(head->name);
      VERL_CHECK_ARG(found != dict.end(), "state_dict: missing tensor '{}'", head->name);
      VERL_CHECK_ARG(found->second.shape == head->shape, "state_dict: tensor '{}': expected shape {}, got {}", head->name,
                     detail::shape_string(head->shape), detail::shape_string(found->second.shape));
      head->value = Eigen::Map<const RowMatrix<float>>(found->second.values.data(), head->value.rows(), head->value.cols())
                        .template cast<Scalar>();
    }
  }
  /// This rank's shards (as state_dict() gives them).
  void load_state_dict(const StateDict& dict) { detail::load_state_dict(*this, dict); }

  void release_activations() {
    head_.forget();
    trunk_.release_activations();
  }

  /// Every parameter tensor of this rank: the trunk's shards, then the head (the dense critic's
  /// order; the head on the last pipeline stage only).
  template <class Fn>
  void for_each_tensor(Fn&& fn) {
    trunk_.for_each_tensor(fn);
    if (!last_stage()) return;
    fn(head_.weight);
    fn(head_.bias);
  }
  template <class Fn>
  void for_each_tensor(Fn&& fn) const {
    trunk_.for_each_tensor(fn);
    if (!last_stage()) return;
    fn(head_.weight);
    fn(head_.bias);
  }

  // ---- pipeline stages (Megatron's pipeline parallelism): the trunk's --------------------------
  [[nodiscard]] const PipelineStageLayers& pipeline_stage() const { return trunk_.pipeline_stage(); }
  [[nodiscard]] bool first_stage() const { return trunk_.first_stage(); }
  [[nodiscard]] bool last_stage() const { return trunk_.last_stage(); }
  /// A stage before the last: its layers from the previous stage's activations (see the trunk's).
  const RowMatrix<Scalar>& forward_stage(const TokenBatch& batch, const RowMatrix<Scalar>* input, bool keep_activations) {
    return trunk_.forward_stage(batch, input, keep_activations);
  }
  void backward_stage(RowMatrix<Scalar>& d_output) { trunk_.backward_stage(d_output); }
  [[nodiscard]] typename DecoderBody<Scalar>::SavedPass take_saved_pass() { return trunk_.take_saved_pass(); }
  void restore_saved_pass(typename DecoderBody<Scalar>::SavedPass pass) { trunk_.restore_saved_pass(std::move(pass)); }
  /// The gradient of the last backward pass's stage input (a stage after the first).
  [[nodiscard]] const RowMatrix<Scalar>& stage_input_gradient() const { return trunk_.stage_input_gradient(); }

 private:
  /// The value head's tensor called `name` (on the last stage), or null for a body tensor.
  ParameterTensor<Scalar>* value_head(std::string_view name) {
    if (!last_stage()) return nullptr;
    if (name == head_.weight.name) return &head_.weight;
    if (name == head_.bias.name) return &head_.bias;
    return nullptr;
  }

  Trunk trunk_;
  detail::ValueHead<Scalar> head_;
};

template <parallel::Communicator Comm>
using TensorParallelCritic = BasicTensorParallelCritic<float, Comm>;

}  // namespace verl::model
