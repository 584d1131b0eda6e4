// RewardModelWorker: verl's RewardModelWorker (fsdp_workers.py) for the HybridFlow runtime: a
// sequence-classification model scoring each (prompt, response) of the batch, SPMD over the
// group's ranks with each rank's contiguous chunk of the batch. Inference only: no optimizer, no
// checkpoint state (verl never trains a reward model).
//
//   RewardModelWorker<Models>   // Models::reward_model_type, Models::reward_model(config)
//
// init_model (ONE_TO_ALL) loads the model; compute_rm_score (DP_COMPUTE_PROTO) returns verl's
// token-level rm_scores: (rows, response width), zero but for each row's score on its last
// response token (verl's _expand_to_token_level), the score read at the row's last attended token
// (model/reward_model.hpp says where that differs from transformers' pooling).
//
// The reward model reads the policy's token ids as they are: it must share the policy's tokenizer.
// verl can re-tokenize for a reward model with its own (reward_model.model.input_tokenizer); that
// is not supported here, and an id beyond the reward model's vocabulary is an error naming its key.
// The same worker type serves a second scoring role (Safe-RLHF's cost model) through another
// Models type; `Models::key` (optional) is the configuration key errors name.
#pragma once

#include <concepts>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "verl/core/error.hpp"
#include "verl/data/data_proto.hpp"
#include "verl/hybridflow/worker.hpp"
#include "verl/model/reward_model.hpp"
#include "verl/trainer/config.hpp"
#include "verl/trainer/workers/batch_keys.hpp"

namespace verl::trainer {

/// Where a reward-model worker's model comes from: `M::reward_model_type` (a float32 RewardModel)
/// and `M::reward_model(config)`.
template <class M>
concept RewardModels = requires(const PPOConfig& config) {
  typename M::reward_model_type;
  { M::reward_model(config) } -> std::same_as<typename M::reward_model_type>;
} && model::RewardModel<typename M::reward_model_type>;

template <class M>
consteval bool check_reward_models() {
  VERL_STATIC_ASSERT(RewardModels<M>,
                     REWARD_MODELS_NEED_A_REWARD_MODEL_TYPE_AND_A_STATIC_REWARD_MODEL_BUILDER_FROM_A_PPO_CONFIG);
  return RewardModels<M>;
}

namespace detail {
/// The configuration key a Models type's errors name (`M::key`, else verl's reward-model key).
template <class M>
constexpr std::string_view reward_model_key() {
  if constexpr (requires { { M::key } -> std::convertible_to<std::string_view>; }) {
    return M::key;
  } else {
    return "reward.reward_model.model_path";
  }
}
}  // namespace detail

template <class Models>
  requires(check_reward_models<Models>())
class RewardModelWorker {
 public:
  using RewardModel = typename Models::reward_model_type;
  static constexpr std::string_view name = "RewardModelWorker";
  static constexpr std::string_view key = detail::reward_model_key<Models>();
  VERL_STATIC_ASSERT((std::same_as<typename RewardModel::scalar_type, float>), THE_TRAINER_NEEDS_A_FLOAT32_REWARD_MODEL);

  explicit RewardModelWorker(hybridflow::WorkerContext&) {}

  /// verl's init_model: loads the reward model (Models::reward_model) from the controller's
  /// configuration (to_overrides).
  void init_model(const std::vector<std::string>& config_overrides) {
    config_ = load_ppo_config(config_overrides);
    model_.emplace(Models::reward_model(config_));
  }

  /// verl's compute_rm_score: rm_scores (rows, R) for this rank's rows, R the response width
  /// (the responses column's, else response_mask's). Reads input_ids, attention_mask and
  /// position_ids (rows, P + R). A row whose last attended token lies in the prompt (an empty
  /// response) is an error: it has no response token to carry a score.
  data::DataProto compute_rm_score(const data::DataProto& batch) {
    RewardModel& rm = require_model();
    const MatrixI64& input_ids = int_column(batch, keys::input_ids);
    VERL_CHECK_ARG(batch.has_tensor(keys::responses) || batch.has_tensor(keys::response_mask),
                   "{}.compute_rm_score: the batch needs a '{}' or '{}' column (the response width), got neither", name,
                   keys::responses, keys::response_mask);
    const Index width = batch.has_tensor(keys::responses) ? int_column(batch, keys::responses).cols()
                                                          : float_column(batch, keys::response_mask).cols();
    if constexpr (requires { rm.vocab_size(); }) {
      const auto vocab = static_cast<std::int64_t>(rm.vocab_size());
      for (Index r = 0; r < input_ids.rows(); ++r) {
        for (Index c = 0; c < input_ids.cols(); ++c) {
          const std::int64_t id = input_ids(r, c);
          VERL_CHECK_ARG(id >= 0 && id < vocab,
                         "{}: the reward model has {} token ids (vocab_size), but row {} holds id {} at column {}; it "
                         "must share the policy's tokenizer (a reward model with a tokenizer of its own is not "
                         "supported)",
                         key, vocab, r, id, c);
        }
      }
    }
    data::DataProto out;
    if (batch.size() == 0) {
      out.set(std::string(keys::rm_scores), MatrixF(0, width));
      return out;
    }
    const model::TokenBatch tokens = token_batch(batch, 0, batch.size());
    const model::RewardOutput<float> scored = rm.forward(tokens, model::RewardForwardOptions{});
    out.set(std::string(keys::rm_scores), MatrixF(model::response_token_scores(tokens, scored, width)));
    return out;
  }

  using methods = TypeList<
      hybridflow::Method<&RewardModelWorker::init_model, hybridflow::Dispatch::one_to_all, "init_model">,
      hybridflow::Method<&RewardModelWorker::compute_rm_score, hybridflow::Dispatch::dp_compute_proto, "compute_rm_score">>;

  [[nodiscard]] RewardModel& reward_model() { return require_model(); }

 private:
  RewardModel& require_model() {
    VERL_CHECK_ARG(model_.has_value(), "{}: init_model must be called before any other method", name);
    return *model_;
  }

  PPOConfig config_;
  std::optional<RewardModel> model_;
};

}  // namespace verl::trainer
