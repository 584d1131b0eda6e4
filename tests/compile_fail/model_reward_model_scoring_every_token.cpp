// expect: THE_REWARD_MODEL_NEEDS_FORWARD_RETURNING_ONE_SCORE_PER_SEQUENCE
// A critic is not a reward model: it yields a value per token, where verl's reward model yields one
// score per sequence (read at its last attended token).
#include "verl/model/reward_model.hpp"
#include "verl/model/value_model.hpp"

struct CriticPosingAsRewardModel {
  using scalar_type = float;
  verl::model::ValueOutput<float> forward(const verl::model::TokenBatch&, const verl::model::RewardForwardOptions&) {
    return {};
  }
  verl::model::StateDict state_dict() const { return {}; }
  void load_state_dict(const verl::model::StateDict&) {}
};

static_assert(verl::model::check_reward_model<CriticPosingAsRewardModel>());
int main() {}
