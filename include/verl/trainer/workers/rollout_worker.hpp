// The rollout on a pool of its own (verl's placement with actor_rollout_ref.hybrid_engine=False):
// a worker group that only generates, holding a copy of the policy whose weights the actor's
// replace after each update (load_weights). Without the hybrid engine, generation and training
// live on different devices: nothing is resharded in place, the weights travel instead.
//
//   RolloutWorker<Models>   // Models as the actor's (ActorModels): the policy type and its builder
//
// verl's names: init_model (ONE_TO_ALL), generate_sequences (DP_COMPUTE_PROTO: each rank its
// contiguous share of the prompts), and load_weights (ONE_TO_ALL), the weight update verl's
// separated rollout receives from the trainer.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "verl/core/error.hpp"
#include "verl/data/data_proto.hpp"
#include "verl/hybridflow/worker.hpp"
#include "verl/trainer/config.hpp"
#include "verl/trainer/workers/actor_rollout_ref_worker.hpp"
#include "verl/trainer/workers/role_state.hpp"

namespace verl::trainer {

template <class Models>
  requires(check_actor_models<Models>())
class RolloutWorker {
 public:
  using models_type = Models;
  using Policy = typename Models::policy_type;
  static constexpr std::string_view name = "RolloutWorker";

  explicit RolloutWorker(hybridflow::WorkerContext& context, Models models = Models{})
      : context_(&context), models_(std::move(models)) {}

  /// Builds the policy as the actor's worker does (the same source, the same starting weights)
  /// and its decoding precision (actor_rollout_ref.rollout.dtype).
  void init_model(const std::vector<std::string>& config_overrides) {
    config_ = load_ppo_config(config_overrides);
    policy_.emplace(models_.actor(config_));
    set_rollout_precision(*policy_, config_);
  }

  /// Every row carries the weight version it was generated with (verl's min_global_steps /
  /// max_global_steps: equal, a response is generated with one version here).
  data::DataProto generate_sequences(const data::DataProto& prompts) {
    data::DataProto rows = generate_with(require_model(), prompts);
    const std::vector<std::int64_t> versions(static_cast<std::size_t>(rows.size()), weight_version_);
    rows.set_non_tensor(std::string(keys::min_global_steps), versions);
    rows.set_non_tensor(std::string(keys::max_global_steps), versions);
    return rows;
  }

  /// The actor's weights after its update: every parameter replaced (each must be there, with its
  /// shape, finite). `version`: the global step they come from (0 for the initial weights).
  void load_weights(const PolicyWeights& weights, std::int64_t version) {
    VERL_CHECK_ARG(version >= 0, "load_weights: expected a weight version >= 0, got {}", version);
    trainer::load_weights(require_model(), weights, "actor_rollout_ref.rollout (a pool of its own)");
    weight_version_ = version;
  }

  [[nodiscard]] const Policy& policy() const { return const_cast<RolloutWorker&>(*this).require_model(); }

  using methods =
      TypeList<hybridflow::Method<&RolloutWorker::init_model, hybridflow::Dispatch::one_to_all, "init_model">,
               hybridflow::Method<&RolloutWorker::generate_sequences, hybridflow::Dispatch::dp_compute_proto,
                                  "generate_sequences">,
               hybridflow::Method<&RolloutWorker::load_weights, hybridflow::Dispatch::one_to_all, "load_weights">>;

 private:
  Policy& require_model() {
    VERL_CHECK_ARG(policy_.has_value(), "{}: init_model must be called before any other method", name);
    return *policy_;
  }

  hybridflow::WorkerContext* context_;
  Models models_;
  PPOConfig config_;
  std::optional<Policy> policy_;
  std::int64_t weight_version_ = 0;  ///< the global step of the weights held (0: as built)
};

}  // namespace verl::trainer
