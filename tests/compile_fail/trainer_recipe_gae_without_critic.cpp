// expect: GAE_NEEDS_A_CRITIC_MODEL
// The PPO recipe (GAE advantages) in a trainer built without a critic is rejected at compile time.
#include "verl/model/transformer/transformer.hpp"
#include "verl/trainer/recipes.hpp"

int main() {
  using Trainer = verl::trainer::RecipeTrainer<verl::trainer::recipes::PPO, verl::model::Transformer,
                                               verl::trainer::NoCritic>;
  return sizeof(Trainer) > 0 ? 0 : 1;
}
