// Writes two sequence-classification models that share a policy's tokenizer, for the Safe-RLHF
// example's test: the policy folder's architecture with random weights (transformers' init, one
// seed each) and a one-label score head, saved as *ForSequenceClassification folders.
//
//   make_score_models POLICY_FOLDER OUT_FOLDER    -> OUT_FOLDER/reward_model, OUT_FOLDER/cost_model
#include <cstdio>
#include <filesystem>
#include <string>

#include "verl/model/checkpoint.hpp"
#include "verl/model/hf_config.hpp"
#include "verl/model/transformer/reward_model.hpp"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: make_score_models POLICY_FOLDER OUT_FOLDER\n");
    return 2;
  }
  namespace fs = std::filesystem;
  const verl::model::HfModelConfig config = verl::model::HfModelConfig::from_file(fs::path(argv[1]) / "config.json");
  const fs::path out(argv[2]);
  for (const auto& [name, seed] : {std::pair<std::string, std::uint64_t>{"reward_model", 11}, {"cost_model", 23}}) {
    const auto model = verl::model::TransformerRewardModel::random(config, {.initializer_range = 0.5, .seed = seed});
    verl::model::save_reward_model(model, out / name);
  }
  return 0;
}
