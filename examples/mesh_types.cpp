// Composition as types: a user's model type trained by the Megatron actor worker whose training
// and generation meshes are template parameters. The actor trains on Mesh<TP<2>, DP<>> (tensor
// parallel pairs, data parallel over the rest) and generates on Mesh<TP<1>, DP<>> (the
// 3D-HybridEngine gathers each TP pair's shards into a dense generation copy every step); the
// trainer type, PPOController<Runtime, Actor>, is built from that worker type. GRPO on the rule
// reward, a few steps (its test adds an entropy bonus: the tiny random model scores 0 everywhere,
// so GRPO's own advantages, and gradient, are 0).
//
//   mpirun -np 2 verl_example_mesh_types trainer.n_gpus_per_node=2 data.train_files=[train.jsonl]
//       actor_rollout_ref.model.path=MODEL trainer.total_training_steps=2
//
// With actor_rollout_ref.actor.megatron.pipeline_model_parallel_size=2 on the command line it
// trains the pipeline-parallel pair instead, Mesh<TP<2>, DP<>, PP<2>> (two stages of the layers,
// 1F1B) with Mesh<TP<1>, DP<>> generation (every stage's layers gathered into the dense copy), on
// 4 ranks and more:
//
//   mpirun -np 4 verl_example_mesh_types trainer.n_gpus_per_node=4 (the keys above)
//       actor_rollout_ref.actor.megatron.pipeline_model_parallel_size=2
//
// The pipelined user model unties its LM head from the embedding (the first stage holds the
// embedding, the last the head; tied embeddings over stages are refused by name).
//
// What the types buy:
//   - static sizes are checked where they are written: TP<3> generation under TP<2> training,
//     meshes of different world sizes, TP<8> for this model's 4 attention heads, a generation mesh
//     with PP<2> (the generation is dense, pg = 1), or axes out of Megatron's order
//     (Mesh<PP<2>, TP<2>, DP<>> would put the stages on neighbouring ranks, not the worker group's
//     tp-dp-pp layout) fail to compile with a named message (trainer/layouts.hpp; the cases are
//     tests/compile_fail/trainer_*.cpp);
//   - the dynamic axis (DP<>) and the keys are checked at run time: the keys are set below to what
//     the types say, and a command line that contradicts them (e.g.
//     actor_rollout_ref.actor.megatron.tensor_model_parallel_size=1) is an error naming the key,
//     the mesh type, the expected and the given size; so is a rank count TP<2> does not divide.
#include <fmt/format.h>

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "verl/hybridflow/placement.hpp"
#include "verl/hybridflow/runtime.hpp"
#include "verl/model/transformer/transformer.hpp"
#include "verl/reward/reward_score.hpp"
#include "verl/trainer/config.hpp"
#include "verl/trainer/controller_inputs.hpp"
#include "verl/trainer/policy_source.hpp"
#include "verl/trainer/ppo_controller.hpp"
#include "verl/trainer/workers/megatron_actor_worker.hpp"
#include "verl/trainer/workers/model_sources.hpp"

namespace {

using namespace verl;
using parallel::DP;
using parallel::Mesh;
using parallel::PP;
using parallel::TP;

/// The user's model type: a Qwen2-shaped policy with fresh random weights, its shape read from
/// actor_rollout_ref.model.path's config.json (so that the tokenizer there fits it). Its head
/// counts are constants, so the meshes are checked against them at compile time (model_heads);
/// init_model checks the loaded shape against them.
struct TinyQwen2Policy {
  using policy_type = model::Transformer;
  static constexpr std::int64_t num_attention_heads = 4;
  static constexpr std::int64_t num_key_value_heads = 2;

  static policy_type actor(const trainer::PPOConfig& config) {
    const model::HfModelConfig shape =
        trainer::load_policy_config(io::expand_user(config.actor_rollout_ref.model.path), "actor_rollout_ref.model.path");
    return model::Transformer::random(shape, {.initializer_range = 0.2, .seed = 11}, {.num_threads = 1});
  }
  static policy_type reference(const trainer::PPOConfig&, const policy_type& actor) { return actor; }
};

/// The same user's model with an untied LM head: the pipeline's first stage holds the embedding,
/// its last stage the head.
struct TinyQwen2UntiedPolicy : TinyQwen2Policy {
  static policy_type actor(const trainer::PPOConfig& config) {
    model::HfModelConfig shape =
        trainer::load_policy_config(io::expand_user(config.actor_rollout_ref.model.path), "actor_rollout_ref.model.path");
    shape.tie_word_embeddings = false;
    return model::Transformer::random(shape, {.initializer_range = 0.2, .seed = 11}, {.num_threads = 1});
  }
  static policy_type reference(const trainer::PPOConfig&, const policy_type& actor) { return actor; }
};

using TrainMesh = Mesh<TP<2>, DP<>>;
using GenMesh = Mesh<TP<1>, DP<>>;
using Actor = trainer::MegatronActorRolloutRefWorker<TinyQwen2Policy, TrainMesh, GenMesh>;
// Pipeline parallel training: tp fastest, then dp, then the two stages (Megatron's rank order).
using PipelinedTrainMesh = Mesh<TP<2>, DP<>, PP<2>>;
using PipelinedActor = trainer::MegatronActorRolloutRefWorker<TinyQwen2UntiedPolicy, PipelinedTrainMesh, GenMesh>;

// The pairs are checked with the model's heads when the worker type is named; so is every other.
static_assert(trainer::layout_rules<TrainMesh, GenMesh, TinyQwen2Policy>::value);
static_assert(trainer::layout_rules<PipelinedTrainMesh, GenMesh, TinyQwen2UntiedPolicy>::value);

template <class Actor>
int train(int argc, char** argv, const std::vector<std::string>& overrides) {
  return hybridflow::run_controller<Actor>(argc, argv, [&](auto& runtime) {
    using Runtime = std::remove_reference_t<decltype(runtime)>;
    const trainer::PPOConfig config = trainer::load_ppo_config(overrides);
    const hybridflow::RolePlacement placement =
        hybridflow::place_roles(trainer::placement_keys(config, /*use_critic=*/false), runtime.world_size());
    const auto layouts = Actor::layouts(config, static_cast<std::int64_t>(placement.actor.size()));
    fmt::print("mesh_types: actor {} on {} ranks: training {}, generation {}\n", Actor::layouts_type::describe(),
               placement.actor.size(), layouts.train.to_string(), layouts.generation.to_string());
    const tokenizer::PretrainedTokenizer tokenizer = trainer::load_policy_tokenizer(trainer::detail::tokenizer_source(config));
    trainer::ControllerInputs in = trainer::controller_inputs(config, tokenizer);
    trainer::PPOController<Runtime, Actor> controller(runtime, config, placement, reward::DefaultRewardFunction{},
                                                      std::move(in.hooks), std::move(in.train), std::move(in.val));
    const std::vector<Metrics> history = controller.fit();
    for (const Metrics& m : history) {
      std::string line = fmt::format("mesh_types: step {}:", m.contains("training/global_step") ? m.at("training/global_step") : 0.0);
      for (const char* key : {"actor/pg_loss", "actor/entropy", "actor/grad_norm", "perf/reshard_bytes_received"}) {
        if (m.contains(key)) line += fmt::format(" {} {:.6g}", key, m.at(key));
      }
      fmt::print("{}\n", line);
    }
    fmt::print("mesh_types: {} steps\n", controller.global_step());
    return 0;
  });
}

}  // namespace

int main(int argc, char** argv) {
  // The keys the mesh types fix (the command line may repeat them; contradicting them is an error).
  std::vector<std::string> overrides = {"algorithm.adv_estimator=grpo", "actor_rollout_ref.actor.strategy=megatron",
                                        "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2",
                                        "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
                                        "actor_rollout_ref.actor.megatron.sequence_parallel=False"};
  for (int i = 1; i < argc; ++i) overrides.emplace_back(argv[i]);
  // The pipelined pair when the command line asks for stages (a configuration that does not load
  // is reported by the runtime, below).
  bool pipelined = false;
  try {
    pipelined = trainer::load_ppo_config(overrides).actor_rollout_ref.actor.megatron.pipeline_model_parallel_size > 1;
  } catch (const std::exception&) {
  }
  return pipelined ? train<PipelinedActor>(argc, argv, overrides) : train<Actor>(argc, argv, overrides);
}
