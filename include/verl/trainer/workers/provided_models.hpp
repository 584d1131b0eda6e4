// Model sources that hold the models themselves, for workers built in process (the in-process
// runtime, hybridflow::LocalRuntime): the in-process PPOTrainer hands the caller's actor,
// reference and critic objects to its workers through them, where the MPI runtime's workers load
// theirs from verl's keys (model_sources.hpp).
//
//   ActorRolloutRefWorker<ProvidedPolicy<Transformer>>   // ProvidedPolicy{actor, reference}
//   CriticWorker<ProvidedCritic<TransformerCritic>>      // ProvidedCritic{critic}
#pragma once

#include <optional>
#include <utility>

#include "verl/core/error.hpp"
#include "verl/model/causal_lm.hpp"
#include "verl/model/value_model.hpp"
#include "verl/trainer/config/ppo_config.hpp"

namespace verl::trainer {

/// The actor and (optionally) the frozen reference policy, each taken once by the worker.
template <model::CausalLM Policy>
struct ProvidedPolicy {
  using policy_type = Policy;
  std::optional<Policy> actor_model;
  std::optional<Policy> reference_model;

  Policy actor(const PPOConfig&) {
    VERL_CHECK_ARG(actor_model.has_value(), "ProvidedPolicy: no actor model (or it was taken already)");
    return take(actor_model);
  }
  /// The reference given; without one, a policy that can switch its adapter off (LoRA) serves as
  /// its own reference, sharing the base weights (verl's ref_in_actor).
  Policy reference(const PPOConfig&, const Policy& actor) {
    if (reference_model) return take(reference_model);
    if constexpr (requires { { actor.with_adapter_disabled() } -> std::same_as<Policy>; }) {
      return actor.with_adapter_disabled();
    } else {
      ::verl::detail::throw_invalid_argument(
          "reference policy: actor_rollout_ref.actor.use_kl_loss / algorithm.use_kl_in_reward need a reference model, "
          "got none");
    }
  }

 private:
  static Policy take(std::optional<Policy>& slot) {
    Policy out = std::move(*slot);
    slot.reset();
    return out;
  }
};

/// The critic (a ValueModel), taken once by the worker.
template <model::ValueModel Critic>
struct ProvidedCritic {
  using critic_type = Critic;
  std::optional<Critic> critic_model;

  Critic critic(const PPOConfig&) {
    VERL_CHECK_ARG(critic_model.has_value(), "ProvidedCritic: no critic model (or it was taken already)");
    Critic out = std::move(*critic_model);
    critic_model.reset();
    return out;
  }
};

}  // namespace verl::trainer
