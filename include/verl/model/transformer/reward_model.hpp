// The reference reward model: the decoder body with transformers' *ForSequenceClassification head
// for one label, score = score.weight (1, H) · final hidden state (no bias: transformers' head is
// a bias-free linear layer), read at each sequence's last attended token as verl's reward-model
// worker reads it (verl::model::last_token_slots; reward_model.hpp says how that differs from
// transformers' own pooling).
//
// verl loads such a checkpoint through AutoModelForTokenClassification with num_labels forced to
// 1; that head's bias is absent from the checkpoint and initialized to zero, so it computes the
// same score. verl runs it under bfloat16 autocast; this model computes in its Scalar (float32
// for parity with transformers in float32). Inference only: verl never trains a reward model.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "verl/core/error.hpp"
#include "verl/core/tensor.hpp"
#include "verl/model/hf_config.hpp"
#include "verl/model/reward_model.hpp"
#include "verl/model/transformer/decoder.hpp"
#include "verl/model/transformer/detail/parameter_module.hpp"
#include "verl/model/transformer/weights.hpp"

namespace verl::model {

/// transformers' class name of a sequence-classification model of `family`
/// ("Qwen2ForSequenceClassification", ...).
inline std::string sequence_classification_architecture(ModelFamily family) {
  switch (family) {
    case ModelFamily::llama: return "LlamaForSequenceClassification";
    case ModelFamily::qwen2: return "Qwen2ForSequenceClassification";
    case ModelFamily::qwen3: return "Qwen3ForSequenceClassification";
    case ModelFamily::mistral: return "MistralForSequenceClassification";
  }
  return "unknown";
}

template <class Scalar>
class BasicTransformerRewardModel
    : public detail::ParameterModule<BasicTransformerRewardModel<Scalar>, Scalar> {
 public:
  using scalar_type = Scalar;

  /// Zero weights of the shapes `config` defines (load a checkpoint or draw them next). The
  /// config's architectures become the family's *ForSequenceClassification, which is what this
  /// model is (and what save_reward_model writes).
  explicit BasicTransformerRewardModel(HfModelConfig config, const TransformerOptions& options = {})
      : body_(as_sequence_classifier(std::move(config)), options),
        score_weight_(ParameterTensor<Scalar>::matrix("score.weight", 1, body_.config().hidden_size)) {}

  /// Fresh weights drawn as transformers' _init_weights does (the padding token's embedding row 0).
  static BasicTransformerRewardModel random(HfModelConfig config, const WeightInit& init,
                                            const TransformerOptions& options = {}) {
    BasicTransformerRewardModel model(std::move(config), options);
    model.for_each_tensor([&](ParameterTensor<Scalar>& t) { detail::init_parameter(t, init); });
    if (const auto pad = model.config().pad_token_id; pad && *pad >= 0 && *pad < model.config().vocab_size) {
      model.body_.weights().embed_tokens.value.row(*pad).setZero();
    }
    return model;
  }

  [[nodiscard]] const HfModelConfig& config() const { return body_.config(); }
  [[nodiscard]] Index vocab_size() const { return body_.config().vocab_size; }
  [[nodiscard]] DecoderBody<Scalar>& body() { return body_; }
  [[nodiscard]] const DecoderBody<Scalar>& body() const { return body_; }

  /// One score per sequence (padded row or packed sequence), read at its last attended token.
  RewardOutput<Scalar> forward(const TokenBatch& batch, const RewardForwardOptions& options = {}) {
    // Checked before the body runs: a batch with an empty row is refused without the cost of a pass.
    std::vector<std::int64_t> slots = last_token_slots(batch);
    const RowMatrix<Scalar>& hidden = body_.forward(batch, false);
    const auto cu = batch.cu_seqlens();
    const auto weight = score_weight_.value.row(0).transpose();
    RewardOutput<Scalar> out;
    out.scores.resize(batch.num_sequences());
    for (Index s = 0; s < batch.num_sequences(); ++s) {
      out.scores[s] = hidden.row(cu[static_cast<std::size_t>(s) + 1] - 1).dot(weight);
    }
    if (options.return_token_scores) {
      const Vector<Scalar> per_token = hidden * weight;
      out.token_scores =
          batch.scatter<Scalar>(std::span<const Scalar>(per_token.data(), static_cast<std::size_t>(per_token.size())));
    }
    out.slots = std::move(slots);
    return out;
  }

  void load_state_dict(const StateDict& dict) { detail::load_state_dict(*this, dict); }

  template <class Fn>
  void for_each_tensor(Fn&& fn) {
    DecoderWeights<Scalar>::for_each(body_.weights(), fn);
    fn(score_weight_);
  }
  template <class Fn>
  void for_each_tensor(Fn&& fn) const {
    DecoderWeights<Scalar>::for_each(body_.weights(), fn);
    fn(score_weight_);
  }

 private:
  static HfModelConfig as_sequence_classifier(HfModelConfig config) {
    config.architectures = {sequence_classification_architecture(config.family)};
    return config;
  }

  DecoderBody<Scalar> body_;
  ParameterTensor<Scalar> score_weight_;
};

using TransformerRewardModel = BasicTransformerRewardModel<float>;

static_assert(check_reward_model<TransformerRewardModel>());
static_assert(RewardModel<BasicTransformerRewardModel<double>>);

}  // namespace verl::model
